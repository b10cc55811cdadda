# Hand-off latency: two threads ping-pong through two queues. Every round
# trip is two wake-ups of a blocked thread, so this measures the waiting
# design rather than per-call cost (see docs/design.md).
require_relative "impl"

n = BenchImpl.n(100_000)
ping = BenchImpl::Queue.new
pong = BenchImpl::Queue.new
echo = Thread.new { while (v = ping.pop) do pong << v end }
n.times { |i| ping << i; pong.pop }
ping << nil
echo.join
