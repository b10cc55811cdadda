# frozen_string_literal: true

# Run by cpu_budget_test.rb inside a cgroup it made: prints, as JSON, the
# CPU budget the gem found and what a queue ping-pong's waits did.
require "json"
require "rapid_thread"

# The first wait opens the spin policy's first 100 ms load window; the
# ping-pong then runs in measured windows (the cgroup's usage, not the
# first window's /proc/loadavg guess).
RapidThread::Queue.new.pop(timeout: 0.001)
sleep 0.25

ping = RapidThread::Queue.new
pong = RapidThread::Queue.new
echo = Thread.new { while (v = ping.pop) do pong << v end }
sum = 0
2000.times { |i| ping << i; sum += pong.pop }
ping << nil
echo.join
puts JSON.generate(budget: RapidThread.cpu_budget, stats: RapidThread.spin_stats, sum: sum)
