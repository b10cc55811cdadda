# Scenario "select hand-off" (issue 14): handoff_pingpong with an echo
# thread that selects over its queue and a second, idle one
# (RapidThread.select, gem mode), or pops its queue (stock, and the gem's
# "plain" side: the same classes, plain pop). Every round trip is two
# wake-ups of a blocked thread. The target: a select round trip at most 2x
# a plain pop round trip (plain / gem >= 0.5). Timed: the round trips only
# (BenchProbe.start).
require_relative "impl"

n = BenchImpl.n(100_000)
ping = BenchImpl::Queue.new
idle = BenchImpl::Queue.new
pong = BenchImpl::Queue.new
echo = Thread.new do
  if BenchImpl::BEYOND_STOCK
    while (v = RapidThread.select(ping, idle)[1])
      pong << v
    end
  else
    while (v = ping.pop)
      pong << v
    end
  end
end
BenchProbe.start if defined?(BenchProbe) # the round trips only
n.times { |i| ping << i; pong.pop }
ping << nil
echo.join
