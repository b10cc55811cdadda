# Per call: SizedQueue.new(8).
require_relative "../impl"

n = BenchImpl.n(3_000_000)
klass = BenchImpl::SizedQueue
BenchProbe.start
i = 0
while i < n
  klass.new(8)
  i += 1
end
