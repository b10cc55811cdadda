# concurrent-ruby: two threads ping-pong through two MVars (take / put).
require_relative "lib_impl"
require "concurrent"

n = LibBench.n(20_000)
ping = Concurrent::MVar.new
pong = Concurrent::MVar.new
echo = Thread.new { n.times { pong.put(ping.take) } }
BenchProbe.start_collected
sum = 0
n.times { |i| ping.put(i); sum += pong.take }
echo.join
LibBench.check("sum", sum, n * (n - 1) / 2)
