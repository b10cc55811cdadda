# frozen_string_literal: true

require_relative "test_helper"
require "shellwords"

# Wake-ups that land while the waiting thread runs a signal (trap) handler,
# or that Thread#wakeup / Thread#run send, for every blocking operation.
#
# Until fc676c7 the gem's waits slept in rb_thread_sleep_deadly, which does
# not return after a trap handler: the handler runs, the sleeping status is
# restored, and a wake-up sent meanwhile (by the handler itself, or by
# another thread while the handler runs) is lost: a hang, or a false
# "No live threads left. Deadlock?" fatal. Stock's waits return after any
# interrupt and re-check their condition.
#
# The matrix is operation x wake source x untimed/timed. Each case runs
# children/signal_wakeup/case.rb in a child process twice: with the gem's
# classes and with stock's (Thread::Queue, ...; Thread.new for
# RapidThread.spawn). The outputs must be equal, and the child must finish within CASE_LIMIT
# seconds (it is killed otherwise). Threads wait for each other through
# states (num_waiting, thread status, flags, counters), never fixed sleeps.
#
# RAPID_THREAD_CHILD_LIB=/path/to/lib points the gem's children at another
# build (e.g. a worktree of an older commit) while the suite itself runs here.
class SignalWakeupTest < RapidThreadTest
  CASE_LIMIT = Float(ENV.fetch("RAPID_THREAD_SIGNAL_CASE_LIMIT", 20))
  CHILD_LIB = File.expand_path(ENV.fetch("RAPID_THREAD_CHILD_LIB", File.expand_path("../lib", __dir__)))

  # The case script: children/signal_wakeup/case.rb IMPL OP SOURCE TIMING.
  # IMPL names the subjects (children/signal_wakeup/<IMPL>.rb: stock's
  # classes, the gem's, or the gem's through the core names); OP is an
  # operation, OP_TIMED says whether it has a timed form (ops.rb); SOURCE a
  # wake source (sources.rb).
  CASE_SCRIPT = File.expand_path("children/signal_wakeup/case.rb", __dir__)
  OP_TIMED = {
    queue_pop_by_push: true, queue_pop_by_close: true, sized_queue_pop_by_push: true,
    sized_queue_push_by_pop: true, sized_queue_push_all_by_pop: true, queue_pop_batch_by_push: true,
    select_by_push: true, select_by_close: true, sized_queue_push_by_clear: true, sized_queue_push_by_max: true,
    sized_queue_push_by_close: true, cv_wait_by_signal: true, cv_wait_by_broadcast: true,
    monitor_wait_by_signal: true, monitor_wait_by_broadcast: true, task_join: true, task_value: false
  }.freeze
  SOURCES = %i[trap_handler_repeated_signals trap_handler_three_signals other_thread_during_handler
               wakeup_then_run_then_wake].freeze

  # The command line of one child.
  def self.command(impl, op, source, timed)
    [RbConfig.ruby, "--disable-gems", "-I#{CHILD_LIB}", CASE_SCRIPT, impl.to_s, op.to_s, source.to_s,
     timed ? "timed" : "untimed"]
  end

  # Runs one child: [stdout, stderr, status]; status nil when the child
  # outlived CASE_LIMIT and was killed.
  def self.run_child(command)
    Open3.capture3(*command, stdin_data: "", timeout: CASE_LIMIT)
  rescue Timeout::Error => e
    [nil, "killed after #{CASE_LIMIT}s (a lost wake-up hangs): #{e.message}", nil]
  end

  GEM_IMPL = REPLACE_MODE ? :gem_replace : :gem
  CASES = OP_TIMED.flat_map do |op, has_timed|
    SOURCES.product(has_timed ? [false, true] : [false]).map do |source, timed|
      ["#{op}__#{source}__#{timed ? 'timed' : 'untimed'}", [op, source, timed]]
    end
  end.to_h.freeze

  # The children run in a pool of JOBS threads started by the first test,
  # in definition order; a test whose children have not started yet runs
  # them itself. A case takes tens of milliseconds, but a regression hangs
  # many cases for CASE_LIMIT each: the pool overlaps those waits (a hung
  # child sleeps), so they cost CASE_LIMIT x hung / (JOBS + 1), not the
  # whole suite's time limit. The harness uses stock's classes only.
  class Pool
    def initialize(jobs, size)
      @jobs = jobs # key => command line
      @pending = jobs.keys
      @results = {}
      @lock = Thread::Mutex.new
      @done = StockConditionVariable.new
      @workers = Array.new(size) do
        Thread.new do
          while (key = claim)
            finish(key)
          end
        end
      end
    end

    def result(key)
      finish(key) if claim(key)
      @lock.synchronize do
        @done.wait(@lock) until @results.key?(key)
        @results[key]
      end
    end

    # Stops handing out work and waits for the children already running.
    def shutdown
      @lock.synchronize { @pending.clear }
      @workers.each(&:join)
    end

    private

    def claim(key = nil)
      @lock.synchronize { key ? @pending.delete(key) : @pending.shift }
    end

    def finish(key)
      r = begin
        SignalWakeupTest.run_child(@jobs.fetch(key))
      rescue StandardError => e # the test reports it; a dead worker would leave it waiting
        [nil, "could not run the child: #{e.class}: #{e.message}", nil]
      end
      @lock.synchronize do
        @results[key] = r
        @done.broadcast
      end
    end
  end

  JOBS = Integer(ENV.fetch("RAPID_THREAD_SIGNAL_JOBS", 4))
  POOL_LOCK = Thread::Mutex.new

  def self.pool
    POOL_LOCK.synchronize do
      @pool ||= begin
        jobs = CASES.each_with_object({}) do |(name, c), h|
          [:stock, GEM_IMPL].each { |impl| h[[name, impl]] = command(impl, *c) }
        end
        Minitest.after_run { @pool.shutdown }
        Pool.new(jobs, JOBS)
      end
    end
  end

  # The shell command that runs the case `name` again.
  def rerun(name, impl)
    Shellwords.join(self.class.command(impl, *CASES.fetch(name)))
  end

  def check_case(name)
    # The children are not under GC.stress (only this process is), and
    # running 200 of them from a stressed process is slow for nothing.
    skip "the cases run in child processes, which GC.stress does not reach" if GC_STRESS

    s_out, s_err, s_status = self.class.pool.result([name, :stock])
    unless s_status&.success? && s_err.empty?
      flunk "the stock oracle failed for #{name} (#{rerun(name, :stock)}): #{s_status.inspect}\n#{s_err}#{s_out}"
    end
    g_out, g_err, g_status = self.class.pool.result([name, GEM_IMPL])
    return pass if g_status&.success? && g_err.empty? && g_out == s_out

    flunk "#{name}: #{GEM_IMPL} differs from stock (#{rerun(name, GEM_IMPL)})\n" \
          "stock: #{s_out.inspect}\n#{GEM_IMPL}: #{g_out.inspect} #{g_status.inspect}\n#{g_err}"
  end

  CASES.each_key { |name| define_method("test_#{name}") { check_case(name) } }
end
