jobs = RapidThread::Queue.new
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
