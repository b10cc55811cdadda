# Per call: ConditionVariable.new (concurrent-ruby makes one per future).
require_relative "../impl"

n = BenchImpl.n(3_000_000)
klass = BenchImpl::ConditionVariable
BenchProbe.start
i = 0
while i < n
  klass.new
  i += 1
end
