# concurrent-ruby: a zip fan-out of 50 futures, one fan-out at a time.
# Floor: the same 50 futures on :immediate.
require_relative "lib_impl"
require "concurrent"

n = LibBench.n(300)
executor = LibBench.floor? ? :immediate : :io
BenchProbe.start_collected
total = 0
n.times do
  total += Concurrent::Promises.zip(*Array.new(50) { |i| Concurrent::Promises.future_on(executor, i) { |x| x } }).value!.sum
end
LibBench.check("total", total, n * 1225)
