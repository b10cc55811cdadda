# frozen_string_literal: true

# What a bench:executor row runs on (RAPID_THREAD_BENCH_IMPL, set by
# benchmark/run.rb --suite executor): the same concurrent-ruby 1.1.6
# program on
#   stock, stock-b -> concurrent-ruby's own executors (the global io
#                     executor, a CachedThreadPool, or the pool the row
#                     names)
#   gem            -> RapidThread::Executor with the same options
#                     (require "rapid_thread/concurrent"); Ruby's own
#                     Queue and ConditionVariable everywhere else, so the
#                     two compare executors alone
#   gem-replace    -> the same in drop-in mode: rapid_thread/replace
#                     before concurrent-ruby loads, so its futures,
#                     latches and locks wait on the gem's classes too
#   floor          -> stock, with the Promises rows on :immediate (no
#                     thread): what concurrent-ruby's own code costs
module ExecBench
  IMPL = ENV.fetch("RAPID_THREAD_BENCH_IMPL", "stock")
  SCALE = Float(ENV.fetch("BENCH_SCALE", "1"))
  LIB = ENV.fetch("RAPID_THREAD_BENCH_LIB") { File.expand_path("../../lib", __dir__) }
  case IMPL
  when "stock", "stock-b", "floor" then nil
  when "gem" then $LOAD_PATH.unshift LIB
  when "gem-replace"
    $LOAD_PATH.unshift LIB
    require "rapid_thread/replace"
  else abort "unknown RAPID_THREAD_BENCH_IMPL=#{IMPL.inspect} (stock, gem, gem-replace or floor)"
  end
  $LOAD_PATH.unshift "/usr/share/rubygems-integration/all/gems/concurrent-ruby-1.1.6/lib/concurrent-ruby"
  require "concurrent"
  require "rapid_thread/concurrent" if IMPL.start_with?("gem")

  module_function

  def gem? = IMPL.start_with?("gem")

  def floor? = IMPL == "floor"

  def n(count) = [(count * SCALE).round, 1].max

  # The executor for the Promises rows: the global io executor (a
  # CachedThreadPool), a cached Executor, or :immediate for the floor.
  def io
    return :immediate if floor?

    gem? ? (@io ||= RapidThread::Executor.new) : Concurrent.global_io_executor
  end

  # A pool of `threads` threads with these options (concurrent-ruby's
  # ThreadPoolExecutor takes the same names).
  def pool(threads, **opts)
    if gem?
      RapidThread::Executor.new(max_threads: threads, **opts)
    else
      Concurrent::ThreadPoolExecutor.new(min_threads: threads, max_threads: threads, **opts)
    end
  end

  def check(what, got, want)
    abort "#{what}: #{got.inspect}, expected #{want.inspect}" unless got == want
  end
end
