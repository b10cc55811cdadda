# ARGV[0]: "stock" (Thread::ConditionVariable) or "gem".
require_relative "../child_helper"
CV = { "stock" => Thread::ConditionVariable, "gem" => RapidThread::ConditionVariable }.fetch(ARGV[0])
m = Mutex.new
cv = CV.new
turn = :main
t = Thread.new do
  m.synchronize do
    200.times do
      cv.wait(m) until turn == :t
      turn = :main
      cv.signal
    end
    cv.wait(m) # no predicate: Thread#wakeup ends it
    :woken
  end
end
200.times do
  m.synchronize do
    turn = :t
    cv.signal
    cv.wait(m) until turn == :main
  end
end
wait_until(10, "t to wait with no predicate") { t.stop? }
t.wakeup
puts t.value
puts RapidThread.spin_stats[:parks] > 0 if CV == RapidThread::ConditionVariable
