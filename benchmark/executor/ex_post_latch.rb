# 100k posts to a pool of 4 threads (concurrent-ruby: FixedThreadPool(4)'s
# ThreadPoolExecutor), counted down on a CountDownLatch.
require_relative "executor_impl"

n = ExecBench.n(100_000)
pool = ExecBench.pool(4)
latch = Concurrent::CountDownLatch.new(n)
BenchProbe.start_collected
n.times { pool.post { latch.count_down } }
ExecBench.check("latch", latch.wait(60), true)
BenchProbe.finish
pool.shutdown
pool.wait_for_termination(10)
