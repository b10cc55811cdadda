# Timeout.timeout(5) around a tiny block. Ruby 3.1's timeout 0.2.0 starts
# a thread per call; 3.3/3.4's keeps one watcher thread that takes requests
# through a Queue and waits on a ConditionVariable, made when timeout is
# loaded: drop-in mode is in place before (lib_impl.rb). Floor: the block
# alone.
require_relative "lib_impl"
require "timeout"

n = LibBench.n(20_000)
BenchProbe.start_collected
sum = 0
if LibBench.floor?
  n.times { |i| sum += i }
else
  n.times { |i| sum += Timeout.timeout(5) { i } }
end
LibBench.check("sum", sum, n * (n - 1) / 2)
