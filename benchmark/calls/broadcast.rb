# Per call: ConditionVariable#broadcast with nobody waiting.
require_relative "../impl"

n = BenchImpl.n(3_000_000)
cv = BenchImpl::ConditionVariable.new
BenchProbe.start
i = 0
while i < n
  cv.broadcast
  i += 1
end
