# Per call: Queue.new (allocation + initialize), nobody waiting.
require_relative "../impl"

n = BenchImpl.n(3_000_000)
klass = BenchImpl::Queue
BenchProbe.start
i = 0
while i < n
  klass.new
  i += 1
end
