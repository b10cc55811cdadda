# Per call: Queue#size on a queue of 3 items.
require_relative "../impl"

n = BenchImpl.n(3_000_000)
q = BenchImpl::Queue.new([1, 2, 3])
BenchProbe.start
i = 0
while i < n
  q.size
  i += 1
end
