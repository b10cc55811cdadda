# 100k posts to a pool of 4 threads with a queue bounded at 100 and the
# :caller_runs fallback: a poster faster than the pool runs the overflow
# itself. Counted down on a CountDownLatch.
require_relative "executor_impl"

n = ExecBench.n(100_000)
pool = ExecBench.pool(4, max_queue: 100, fallback_policy: :caller_runs)
latch = Concurrent::CountDownLatch.new(n)
BenchProbe.start_collected
n.times { pool.post { latch.count_down } }
ExecBench.check("latch", latch.wait(60), true)
BenchProbe.finish
pool.shutdown
pool.wait_for_termination(10)
