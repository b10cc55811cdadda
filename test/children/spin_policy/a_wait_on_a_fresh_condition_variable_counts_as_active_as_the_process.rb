# spin_policy_test.rb, pinned to one CPU: concurrent-ruby's shape, a job
# per round over a long-lived queue (stock's, whose waits the gem neither
# parks nor counts: the test says why) and its result signaled on a fresh
# condition variable. Prints the parks, the fresh waits'.
jobs = Thread::Queue.new
m = Mutex.new
echo = Thread.new do
  while (job = jobs.pop)
    m.synchronize { job[:done] = true; job[:cv].signal }
  end
end
2000.times do
  job = { cv: RapidThread::ConditionVariable.new }
  m.synchronize do
    jobs << job
    job[:cv].wait(m) until job[:done]
  end
end
jobs << nil
echo.join
puts RapidThread.spin_stats[:parks]
