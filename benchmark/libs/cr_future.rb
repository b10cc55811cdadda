# concurrent-ruby: Promises.future { }.value! on the global io executor,
# one at a time. Floor: future_on(:immediate), the same future with no
# thread involved.
require_relative "lib_impl"
require "concurrent"

n = LibBench.n(10_000)
executor = LibBench.floor? ? :immediate : :io
Concurrent::Promises.future_on(executor) { 0 }.value! # the pool's first thread
BenchProbe.start_collected
sum = 0
n.times { |i| sum += Concurrent::Promises.future_on(executor, i) { |x| x }.value! }
LibBench.check("sum", sum, n * (n - 1) / 2)
