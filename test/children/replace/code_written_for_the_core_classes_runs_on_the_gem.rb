require_relative "../child_helper"
require "monitor"
q = Queue.new
producer = Thread.new { 1000.times { |i| q << i }; q.close }
sum = 0
while (i = q.pop)
  sum += i
end
producer.join
raise "sum #{sum}" unless sum == 499_500
begin
  q.push(1)
rescue ClosedQueueError => e
  puts e.message
end
sq = SizedQueue.new(1)
sq << 1
p sq.push(2, timeout: 0.01)
p Queue.new.pop(timeout: 0)
m = Thread::Mutex.new
cv = ConditionVariable.new
ready = false
waiter = Thread.new { m.synchronize { cv.wait(m) until ready; :woken } }
wait_until(10, "the waiter to sleep") { waiter.status == "sleep" }
m.synchronize { ready = true; cv.signal }
p waiter.value
mon = Monitor.new
cond = mon.new_cond
p cond.instance_variable_get(:@cond).class
t = Thread.new { mon.synchronize { cond.wait(5) }; :monitor_ok }
wait_until(10, "the monitor waiter to sleep") { t.status == "sleep" }
mon.synchronize { cond.signal }
p t.value
old = RapidThread::STOCK[:Queue].new
p [old.is_a?(Thread::Queue), Queue.new.is_a?(Thread::Queue)]
