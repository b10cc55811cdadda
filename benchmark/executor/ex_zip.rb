# A zip fan-out of 50 futures, one fan-out at a time, on the io executor.
require_relative "executor_impl"
# Floor: ExecBench.floor? runs the same futures on :immediate.

n = ExecBench.n(300)
ex = ExecBench.io
BenchProbe.start_collected
total = 0
n.times do
  total += Concurrent::Promises.zip(*Array.new(50) { |i| Concurrent::Promises.future_on(ex, i) { |x| x } }).value!.sum
end
ExecBench.check("total", total, n * 1225)
