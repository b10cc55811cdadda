# concurrent-ruby: 100k posts to a FixedThreadPool(4), counted down on a
# CountDownLatch.
# Floor: the same posts to the same pool with its four workers held at a
# gate until every task is queued, so that each task takes the pool's
# whole path (the post, the worker's queue, ready_worker, the count-down)
# and no thread waits for another: nine waits in all, not one per hand-off.
require_relative "lib_impl"
require "concurrent"

n = LibBench.n(100_000)
pool = Concurrent::FixedThreadPool.new(4)
latch = Concurrent::CountDownLatch.new(n)
BenchProbe.start_collected
if LibBench.floor?
  gate = Concurrent::CountDownLatch.new(1)
  4.times { pool.post { gate.wait } }
end
n.times { pool.post { latch.count_down } }
gate&.count_down
LibBench.check("latch", latch.wait(60), true)
BenchProbe.finish
pool.shutdown
pool.wait_for_termination(10)
