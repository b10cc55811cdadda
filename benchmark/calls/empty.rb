# Per call: Queue#empty?.
require_relative "../impl"

n = BenchImpl.n(3_000_000)
q = BenchImpl::Queue.new
BenchProbe.start
i = 0
while i < n
  q.empty?
  i += 1
end
