# connection_pool 2.2.5: 16 threads share a pool of 4 for tiny critical
# sections (its TimedStack is a Mutex and a ConditionVariable).
# Floor: a pool of 16, where no thread ever waits for a connection (the
# hand-off is a check-in waking a thread that waits for one).
require_relative "lib_impl"
require "connection_pool"

per_thread = LibBench.n(5_000)
pool = ConnectionPool.new(size: LibBench.floor? ? 16 : 4, timeout: 30) { Object.new }
go = Queue.new
threads = Array.new(16) do
  Thread.new do
    go.pop
    count = 0
    per_thread.times { pool.with { |conn| count += 1 if conn } }
    count
  end
end
BenchProbe.start_collected
16.times { go << true }
LibBench.check("checkouts", threads.sum(&:value), 16 * per_thread)
