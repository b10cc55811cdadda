# concurrent-ruby: two threads take turns through two Concurrent::Events
# (set / wait / reset).
require_relative "lib_impl"
require "concurrent"

n = LibBench.n(20_000)
mine = Concurrent::Event.new
theirs = Concurrent::Event.new
other = Thread.new do
  n.times do
    mine.wait
    mine.reset
    theirs.set
  end
end
BenchProbe.start_collected
n.times do
  mine.set
  theirs.wait
  theirs.reset
end
other.join
