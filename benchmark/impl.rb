# frozen_string_literal: true

# Chooses the implementation a benchmark runs against. The benchmark body
# is identical for both; only the classes it is given differ.
#   RAPID_THREAD_BENCH_IMPL=stock  -> Thread::Queue, ...
#   RAPID_THREAD_BENCH_IMPL=gem    -> RapidThread::Queue, ...
#   RAPID_THREAD_BENCH_IMPL=gem-plain -> the gem's classes, but the
#     scenarios of the gem-only API (batch_drain, select_handoff) use the
#     API stock has, one item per call: the "plain" side of those rows
#   RAPID_THREAD_BENCH_IMPL=stock-b -> stock again (benchmark/run.rb --control)
#   RAPID_THREAD_BENCH_IMPL=concurrent -> stock classes, threads from
#     concurrent-ruby (Promises.future_on a CachedThreadPool): the peer for
#     the thread-creation benchmarks (benchmark/run.rb --peer)
# BenchImpl.thread { } is Thread.new for stock, Thread.spawn for the gem.
# BENCH_SCALE (default 1.0) shrinks iteration counts for quick/smoke runs.
module BenchImpl
  NAME = ENV.fetch("RAPID_THREAD_BENCH_IMPL", "stock")
  SCALE = Float(ENV.fetch("BENCH_SCALE", "1"))

  case NAME
  when "stock", "stock-b" # stock-b: the second side of an A/A control run
    Queue = ::Thread::Queue
    SizedQueue = ::Thread::SizedQueue
    ConditionVariable = ::Thread::ConditionVariable
  when "gem", "gem-plain"
    # RAPID_THREAD_BENCH_LIB: another build's lib/ (benchmark/run.rb --baseline).
    $LOAD_PATH.unshift ENV.fetch("RAPID_THREAD_BENCH_LIB") { File.expand_path("../lib", __dir__) }
    require "rapid_thread"
    Queue = ::RapidThread::Queue
    SizedQueue = ::RapidThread::SizedQueue
    ConditionVariable = ::RapidThread::ConditionVariable
  when "concurrent"
    require "concurrent"
    Queue = ::Thread::Queue
    SizedQueue = ::Thread::SizedQueue
    ConditionVariable = ::Thread::ConditionVariable
    POOL = Concurrent::CachedThreadPool.new

    # The part of Thread's interface the benchmarks use, over a future.
    Future = Struct.new(:future) do
      def join
        future.wait
        raise future.reason if future.rejected?

        self
      end

      def value = future.value!
      def alive? = !future.resolved?
    end
  else
    abort "unknown RAPID_THREAD_BENCH_IMPL=#{NAME.inspect} (stock or gem)"
  end

  # Whether a scenario may use the gem-only API (push_all, pop_batch,
  # RapidThread.select); otherwise it does the same work one item per call.
  BEYOND_STOCK = NAME == "gem"

  # Where stock calls Thread.new: Thread.spawn in gem mode.
  def self.thread(*args, &block)
    case NAME
    when "gem", "gem-plain" then Thread.spawn(*args, &block)
    when "concurrent" then Future.new(Concurrent::Promises.future_on(POOL, *args, &block))
    else Thread.new(*args, &block)
    end
  end

  # Stock's iteration count, scaled (never below 1).
  def self.n(count)
    [(count * SCALE).round, 1].max
  end
end
