# Single-thread push+pop: per-call cost with no hand-off at all.
require_relative "impl"

n = BenchImpl.n(10_000_000)
q = BenchImpl::Queue.new
i = 0
while i < n
  q.push i
  q.pop
  i += 1
end
