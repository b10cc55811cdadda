# Timeout.timeout(5) around a tiny block. Ruby 3.1's timeout 0.2.0 starts
# a thread per call; 3.3/3.4's keeps one watcher thread that takes requests
# through a Queue and waits on a ConditionVariable, made when timeout is
# loaded: drop-in mode is in place before (lib_impl.rb).
# Floor: on 3.1 the block alone (the hand-off is the thread); on 3.3+ the
# same calls with the watcher never started, so that each request is still
# made, queued and signalled for, with nobody there to wake (the hand-off
# is the watcher's wake-up).
require_relative "lib_impl"
require "timeout"

n = LibBench.n(20_000)
watcher = Timeout.respond_to?(:ensure_timeout_thread_created)
Timeout.singleton_class.define_method(:ensure_timeout_thread_created) { nil } if LibBench.floor? && watcher
BenchProbe.start_collected
sum = 0
if LibBench.floor? && !watcher
  n.times { |i| sum += i }
else
  n.times { |i| sum += Timeout.timeout(5) { i } }
end
LibBench.check("sum", sum, n * (n - 1) / 2)
