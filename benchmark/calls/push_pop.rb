# Per call: push + pop on one thread, nobody waiting.
require_relative "../impl"

n = BenchImpl.n(3_000_000)
q = BenchImpl::Queue.new
BenchProbe.start
i = 0
while i < n
  q.push i
  q.pop
  i += 1
end
