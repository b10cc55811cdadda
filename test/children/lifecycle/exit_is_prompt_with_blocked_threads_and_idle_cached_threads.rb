require_relative "../child_helper"
q = RapidThread::Queue.new
sq = RapidThread::SizedQueue.new(1)
sq << 1
m = Mutex.new
cv = RapidThread::ConditionVariable.new
threads = [Thread.new { q.pop }, Thread.new { sq.push(2) }, Thread.new { m.synchronize { cv.wait(m) } }]
tasks = [RapidThread.spawn { q.pop }, RapidThread.spawn { sleep }]
Array.new(8) { RapidThread.spawn { 1 } }.each(&:join) # leaves idle cached threads
wait_until(10, "every thread and task to sleep") do
  threads.all? { |t| t.status == "sleep" } && tasks.all? { |t| t.status == "sleep" }
end
RapidThread.idle_timeout = 60
puts "exiting"
