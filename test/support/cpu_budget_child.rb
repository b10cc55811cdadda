# frozen_string_literal: true

# Run by cpu_budget_test.rb inside a cgroup it made: prints, as JSON, the
# CPU budget the gem found and what a queue ping-pong's waits did.
require "json"
require "rapid_thread"
require_relative "ping_pong"

# The first wait opens the spin policy's first 100 ms load window; the
# ping-pong then runs in measured windows (the cgroup's usage, not the
# first window's /proc/loadavg guess).
RapidThread::Queue.new.pop(timeout: 0.001)
sleep 0.25

sum = ping_pong
puts JSON.generate(budget: RapidThread.cpu_budget, stats: RapidThread.spin_stats, sum: sum)
