# Per call: ConditionVariable#wait(m, 0) with the mutex held: unlock,
# no wait, re-lock.
require_relative "../impl"

n = BenchImpl.n(1_000_000)
cv = BenchImpl::ConditionVariable.new
m = Thread::Mutex.new
m.lock
BenchProbe.start
i = 0
while i < n
  cv.wait(m, 0)
  i += 1
end
m.unlock
