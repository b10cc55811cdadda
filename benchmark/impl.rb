# frozen_string_literal: true

# Chooses the implementation a benchmark runs against. The benchmark body
# is identical for both; only the classes it is given differ.
#   RAPID_THREAD_BENCH_IMPL=stock  -> Thread::Queue, ...
#   RAPID_THREAD_BENCH_IMPL=gem    -> RapidThread::Queue, ...
#   RAPID_THREAD_BENCH_IMPL=stock-b -> stock again (benchmark/run.rb --control)
# BENCH_SCALE (default 1.0) shrinks iteration counts for quick/smoke runs.
module BenchImpl
  NAME = ENV.fetch("RAPID_THREAD_BENCH_IMPL", "stock")
  SCALE = Float(ENV.fetch("BENCH_SCALE", "1"))

  case NAME
  when "stock", "stock-b" # stock-b: the second side of an A/A control run
    Queue = ::Thread::Queue
    SizedQueue = ::Thread::SizedQueue
    ConditionVariable = ::Thread::ConditionVariable
  when "gem"
    $LOAD_PATH.unshift File.expand_path("../lib", __dir__)
    require "rapid_thread"
    Queue = ::RapidThread::Queue
    SizedQueue = ::RapidThread::SizedQueue
    ConditionVariable = ::RapidThread::ConditionVariable
  else
    abort "unknown RAPID_THREAD_BENCH_IMPL=#{NAME.inspect} (stock or gem)"
  end

  # Stock's iteration count, scaled (never below 1).
  def self.n(count)
    [(count * SCALE).round, 1].max
  end
end
