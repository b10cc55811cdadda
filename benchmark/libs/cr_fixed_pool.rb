# concurrent-ruby: 100k posts to a FixedThreadPool(4), counted down on a
# CountDownLatch. Floor: the same posts to an ImmediateExecutor.
require_relative "lib_impl"
require "concurrent"

n = LibBench.n(100_000)
pool = LibBench.floor? ? Concurrent::ImmediateExecutor.new : Concurrent::FixedThreadPool.new(4)
latch = Concurrent::CountDownLatch.new(n)
BenchProbe.start_collected
n.times { pool.post { latch.count_down } }
LibBench.check("latch", latch.wait(60), true)
BenchProbe.finish
pool.shutdown
pool.wait_for_termination(10)
