# A future and three `then` steps, one chain at a time, on the io executor.
require_relative "executor_impl"
# Floor: ExecBench.floor? runs the same futures on :immediate.

n = ExecBench.n(4_000)
ex = ExecBench.io
BenchProbe.start_collected
sum = 0
n.times do |i|
  sum += Concurrent::Promises.future_on(ex, i) { |x| x }.then_on(ex) { |x| x + 1 }.then_on(ex) { |x| x * 2 }
                             .then_on(ex) { |x| x - 2 }.value!
end
ExecBench.check("sum", sum, n * (n - 1))
