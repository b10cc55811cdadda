require_relative "../child_helper"
q = RapidThread::Queue.new
sq = RapidThread::SizedQueue.new(1)
sq << :full
m = Mutex.new
cv = RapidThread::ConditionVariable.new
poppers = Array.new(3) { Thread.new { q.pop } }
pushers = Array.new(2) { Thread.new { sq.push(:more) } }
waiter = Thread.new { m.synchronize { cv.wait(m) } }
gate = Thread::Queue.new
running = Array.new(3) { |i| RapidThread.spawn { gate.pop; i } }
wait_until(10, "every waiter to sleep and 3 busy workers") do
  [*poppers, *pushers, waiter].all? { |t| t.status == "sleep" } && RapidThread.cache_stats[:busy] == 3
end

pid = fork do
  # The child: no waiters, no workers, but every object works.
  ok = q.num_waiting == 0 && sq.num_waiting == 0
  q << 1
  ok &&= q.pop == 1
  ok &&= sq.pop == :full && sq.push(:x).equal?(sq) && sq.pop == :x
  ok &&= m.synchronize { cv.signal; cv.wait(m, 0.01); true }
  ok &&= RapidThread.spawn(20) { |x| x + 1 }.value == 21
  ok &&= running.none?(&:alive?) # the parent's blocks do not exist here
  ok &&= Array.new(10) { |i| RapidThread.spawn { i } }.sum(&:value) == 45
  exit!(ok ? 0 : 1)
end
Process.wait(pid)
child_ok = $?.success?

# The parent is unaffected: every waiter is still there and wakes.
parent_ok = q.num_waiting == 3 && sq.num_waiting == 2 && running.all?(&:alive?)
3.times { |i| q << i }
parent_ok &&= poppers.map(&:value).sort == [0, 1, 2]
2.times { sq.pop }
pushers.each(&:join)
m.synchronize { cv.signal }
waiter.join
3.times { gate << 1 }
parent_ok &&= running.map(&:value) == [0, 1, 2]
p [child_ok, parent_ok]
