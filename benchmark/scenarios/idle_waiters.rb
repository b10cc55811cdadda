# Seed scenario "idle waiters": N threads each blocked in pop on its own
# queue while the main thread counts for a fixed time. Idle waiters must
# not slow the running thread. Prints the count (higher is better).
#   IDLE_WAITERS=N (default 1000), IDLE_SECONDS (default 1.0)
require_relative "../impl"

n = Integer(ENV.fetch("IDLE_WAITERS", "1000"))
seconds = Float(ENV.fetch("IDLE_SECONDS", "1.0"))
queues = Array.new(n) { BenchImpl::Queue.new }
threads = queues.map { |q| Thread.new { q.pop } }
Thread.pass until queues.all? { |q| q.num_waiting == 1 }
sleep 0.2 # let every waiter finish any spin phase before counting
count = 0
deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
count += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
queues.each(&:close)
threads.each(&:join)
puts count
