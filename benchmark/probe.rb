# frozen_string_literal: true

# Loaded with -r by benchmark/run.rb into every measured process. At exit it
# appends one JSON line with the process's own wall time (from this file's
# load to exit, or from BenchProbe.start), CPU time (user+sys, likewise) and
# peak RSS.
require "json"

module BenchProbe
  @start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  @cpu0 = 0.0

  # Starts the measurement here instead: a scenario whose figure is a rate
  # (items per second) leaves out Ruby's start-up, the requires and its
  # set-up. Both sides of a comparison run the same script, so both start
  # at the same point.
  def self.start
    @start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    t = Process.times
    @cpu0 = t.utime + t.stime
  end

  # Records the measurement now: what the script does afterwards (an
  # untimed check, such as spawn_after_burst's thread count after
  # idle_timeout) is not measured.
  def self.finish
    return if @finished

    @finished = true
    wall = Process.clock_gettime(Process::CLOCK_MONOTONIC) - @start
    t = Process.times
    rss_kb = File.read("/proc/self/status")[/^VmHWM:\s+(\d+)/, 1].to_i
    return unless (out = ENV["RAPID_THREAD_BENCH_OUT"])

    File.open(out, "a") do |f|
      f.puts JSON.generate(wall: wall, cpu: t.utime + t.stime - @cpu0, rss_kb: rss_kb)
    end
  end
end

at_exit { BenchProbe.finish }
