# Per call: Queue#closed?.
require_relative "../impl"

n = BenchImpl.n(3_000_000)
q = BenchImpl::Queue.new
BenchProbe.start
i = 0
while i < n
  q.closed?
  i += 1
end
