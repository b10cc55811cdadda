# Promises.future_on(executor) { }.value!, one at a time: the global io
# executor (a CachedThreadPool) against a cached RapidThread::Executor.
require_relative "executor_impl"
# Floor: ExecBench.floor? runs the same futures on :immediate.

n = ExecBench.n(10_000)
ex = ExecBench.io
Concurrent::Promises.future_on(ex) { 0 }.value! # the first worker
BenchProbe.start_collected
sum = 0
n.times { |i| sum += Concurrent::Promises.future_on(ex, i) { |x| x }.value! }
ExecBench.check("sum", sum, n * (n - 1) / 2)
