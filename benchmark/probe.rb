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

  # start, from a collected heap: for rows that compare programs loading
  # different code (drop-in mode loads the gem; stock does not). Where the
  # process's next major GC falls depends on all it loaded, and in a short
  # row one major GC is the whole difference: minitest_parallel (32 ms,
  # Ruby 3.1.2) ran 0.91x stock with the gem loaded, and as much slower
  # with `-rostruct -rset` and no gem at all, one major GC more in its
  # window; after GC.start both ran at stock's time (docs/benchmarks.md).
  def self.start_collected
    GC.start
    start
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
