# concurrent-ruby: a future and three `then` steps, one chain at a time.
# Floor: the same chain on :immediate.
require_relative "lib_impl"
require "concurrent"

n = LibBench.n(4_000)
executor = LibBench.floor? ? :immediate : :io
BenchProbe.start_collected
sum = 0
n.times do |i|
  sum += Concurrent::Promises.future_on(executor, i) { |x| x }.then { |x| x + 1 }.then { |x| x * 2 }.then { |x| x - 2 }.value!
end
LibBench.check("sum", sum, n * (n - 1))
