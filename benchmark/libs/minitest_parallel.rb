# minitest 5.17: 5,000 trivial tests under parallelize_me!, run by its
# parallel executor (a Queue of jobs and, by default, a thread per CPU).
require_relative "lib_impl"
require "minitest"
require "stringio"

count = LibBench.n(5_000)
klass = Class.new(Minitest::Test) do
  parallelize_me!
  count.times { |i| define_method("test_#{i}") { assert_equal i, i } }
end
Object.const_set(:BenchParallelTest, klass)
Minitest.seed = 42
Minitest.parallel_executor.start
out = StringIO.new
BenchProbe.start_collected
reporter = Minitest::CompositeReporter.new(Minitest::SummaryReporter.new(out))
reporter.start
Minitest::Runnable.runnables.each { |r| r.run(reporter, {}) }
Minitest.parallel_executor.shutdown
reporter.report
BenchProbe.finish
LibBench.check("result", out.string[/\d+ runs, \d+ assertions, \d+ failures/], "#{count} runs, #{count} assertions, 0 failures")
