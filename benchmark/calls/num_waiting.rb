# Per call: Queue#num_waiting with nobody waiting.
require_relative "../impl"

n = BenchImpl.n(3_000_000)
q = BenchImpl::Queue.new
BenchProbe.start
i = 0
while i < n
  q.num_waiting
  i += 1
end
