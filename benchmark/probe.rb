# frozen_string_literal: true

# Loaded with -r by benchmark/run.rb into every measured process. At exit it
# appends one JSON line with the process's own wall time (from this file's
# load to exit), CPU time (user+sys) and peak RSS.
require "json"

module BenchProbe
  START = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # Records the measurement now: what the script does afterwards (an
  # untimed check, such as spawn_after_burst's thread count after
  # idle_timeout) is not measured.
  def self.finish
    return if @finished

    @finished = true
    wall = Process.clock_gettime(Process::CLOCK_MONOTONIC) - START
    t = Process.times
    rss_kb = File.read("/proc/self/status")[/^VmHWM:\s+(\d+)/, 1].to_i
    return unless (out = ENV["RAPID_THREAD_BENCH_OUT"])

    File.open(out, "a") do |f|
      f.puts JSON.generate(wall: wall, cpu: t.utime + t.stime, rss_kb: rss_kb)
    end
  end
end

at_exit { BenchProbe.finish }
