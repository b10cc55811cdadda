# frozen_string_literal: true

$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "rapid_thread"
# RAPID_THREAD_REPLACE=1 runs the suite in drop-in mode: the subjects are
# reached through the core constant names (Thread::Queue, ...), which then
# point at the gem's classes; stock stays the oracle through
# RapidThread::STOCK.
REPLACE_MODE = ENV["RAPID_THREAD_REPLACE"] == "1"
if REPLACE_MODE
  require "rapid_thread/replace"
  StockQueue = RapidThread::STOCK[:Queue]
  StockSizedQueue = RapidThread::STOCK[:SizedQueue]
  StockConditionVariable = RapidThread::STOCK[:ConditionVariable]
  GemQueue = ::Thread::Queue
  GemSizedQueue = ::Thread::SizedQueue
  GemConditionVariable = ::Thread::ConditionVariable
  raise "replace mode did not swap Thread::Queue" unless GemQueue.equal?(RapidThread::Queue)
else
  StockQueue = ::Thread::Queue
  StockSizedQueue = ::Thread::SizedQueue
  StockConditionVariable = ::Thread::ConditionVariable
  GemQueue = RapidThread::Queue
  GemSizedQueue = RapidThread::SizedQueue
  GemConditionVariable = RapidThread::ConditionVariable
end
# RAPID_THREAD_RBS=1 (rake test:rbs): the gem's methods are checked at run
# time against sig/rapid_thread.rbs (test/rbs/setup.rb).
RBS_MODE = ENV["RAPID_THREAD_RBS"] == "1"
# rake test:portable runs the suite on the portable build (src/sys/os.rs):
# the loaded build says which it is.
PORTABLE_BUILD = RapidThread.cpu_budget[:portable]
raise "RAPID_THREAD_PORTABLE=1 but the Linux build is loaded" if ENV["RAPID_THREAD_PORTABLE"] == "1" && !PORTABLE_BUILD
# On one CPU, active waits park: on Ruby 3.1/3.2 all, on 3.3+ those of calm
# lists (a ping-pong's: sys/wait_list.rs, `calm`; spin.rs,
# `parking_allowed`); not in the portable build (no futexes). Elsewhere
# those that may not spin sleep in Ruby.
WAITS_PARK = !PORTABLE_BUILD
require_relative "rbs/setup" if RBS_MODE
require "minitest/autorun"
require "timeout"
require "rbconfig"
require "open3"

# RAPID_THREAD_GC_STRESS=1      runs every test under GC.stress = true
# RAPID_THREAD_GC_STRESS=minor  runs them under minor-GC-only stress (0x01),
#                               where a missing write barrier loses objects
GC_STRESS = case ENV["RAPID_THREAD_GC_STRESS"]
            when nil, "", "0" then nil
            when "minor" then 0x01
            else true
            end

# Every test is bounded: a hang fails the test instead of stalling CI.
TEST_TIMEOUT = Float(ENV.fetch("RAPID_THREAD_TEST_TIMEOUT", GC_STRESS ? 300 : 30))

# And the whole run is bounded too, from outside the process, in case a hang
# is not interruptible by Timeout.
SUITE_LIMIT = Integer(ENV.fetch("RAPID_THREAD_SUITE_LIMIT", GC_STRESS ? 3600 : 900))
watchdog = Process.spawn("sleep #{SUITE_LIMIT} && echo 'test suite exceeded #{SUITE_LIMIT}s' >&2 && kill -9 #{Process.pid}",
                         pgroup: true)
Process.detach(watchdog)
at_exit do
  Process.kill("KILL", -watchdog)
rescue Errno::ESRCH
  nil
end

# On Ruby 3.3 and 3.4 with M:N threads every child Ruby skips the VM's
# destruction, where 3.3.8 and 3.4.5 themselves sometimes crash after the
# program ended (support/mn_exit.rb).
if ENV["RUBY_MN_THREADS"] == "1" && RUBY_VERSION.start_with?("3.3.", "3.4.")
  ENV["RUBYOPT"] = [ENV.fetch("RUBYOPT", nil), "-r#{File.expand_path('support/mn_exit', __dir__)}"].compact.join(" ")
end

# COMPACT_EVERYTHING, GC.verify_compaction_references' "move everything"
# options (shared with the compaction checks' child, children/compaction_check.rb).
require_relative "support/compact_everything"

# Ruby before 3.3 can segfault in any compaction while another thread
# sleeps in a C method (docs/design-details.md, "GC.compact crash (Ruby
# 3.1.2)"), and in the suite's process one always does: the test's own
# Timeout thread (CI, 2026-12-02). There the compaction checks
# (`compaction_check`) run in a fresh child process.
IN_PROCESS_COMPACTION = RUBY_VERSION >= "3.3"

# What a test that runs past TEST_TIMEOUT raises: a Minitest::Assertion
# (minitest counts failures by that exact class) whose message says where
# each thread was. Timeout builds it in its own thread (Thread#raise calls
# `exception`) while the test's threads are still where they hung, so a
# hang seen once in CI can be read. It is extended with TestHung so that
# Timeout's own `rescue klass` (Ruby 3.1's timeout.rb) still matches it.
module TestHung
  def self.exception(message)
    stacks = Thread.list.map { |t| ["#{t.inspect}:", *t.backtrace(0, 20)].join("\n    ") }
    Minitest::Assertion.new([message, "threads as the limit passed:", *stacks].join("\n  ")).extend(self)
  rescue Exception => e # rubocop:disable Lint/RescueException
    # A dump that fails must not cost the timeout itself.
    Minitest::Assertion.new("#{message} (no thread dump: #{e.class})").extend(self)
  end
end

module RapidThreadTestHelpers
  # A call made ill-typed on purpose (to compare the gem's exception with
  # stock's): under RAPID_THREAD_RBS it runs without the type checks.
  def ill_typed(&block)
    RBS_MODE ? RapidThreadRBS.unchecked(&block) : yield
  end

  # Waits (without sleeping for a fixed time) until the block is true.
  def wait_until(limit = TEST_TIMEOUT / 2, message = "condition")
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + limit
    until yield
      flunk "timed out after #{limit}s waiting for #{message}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      Thread.pass
    end
  end

  # Iteration counts shrink under GC.stress, where every allocation runs a
  # GC; the behaviour checked is the same.
  def scaled(n)
    GC_STRESS ? [n / 20, 2].max : n
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # Runs the block with GC.stress off (under RAPID_THREAD_GC_STRESS): for
  # stock's side of a comparison, the oracle, where stress checks nothing
  # of ours and only costs time.
  def unstressed
    return yield unless GC_STRESS

    GC.stress = false
    begin
      yield
    ensure
      GC.stress = GC_STRESS
    end
  end

  # Starts a thread that the test's teardown kills and joins.
  def spawn_thread(&block)
    t = Thread.new(&block)
    t.report_on_exception = false
    @threads << t
    t
  end

  # [class, first line of the message] of what the block raises (:no_error
  # if nothing), with addresses and our namespace normalised so that stock's
  # errors and ours compare equal. Such calls are ill-typed on purpose, so
  # rbs's runtime checks are off for them.
  def error_of(&block)
    ill_typed(&block)
    :no_error
  rescue Exception => e # rubocop:disable Lint/RescueException
    [e.class, normalize_message(message_of(e))]
  end

  # Under GC.stress, the message without did_you_mean's suggestions: the
  # spell checker allocates thousands of objects, a full GC each.
  def message_of(e)
    GC_STRESS && e.respond_to?(:original_message) ? e.original_message : e.message
  end

  def normalize_message(msg)
    msg = msg.lines.first.to_s.chomp.gsub(/0x\h+/, "0x").gsub("RapidThread::", "Thread::")
    # Under rbs's runtime checks a call with too few arguments can fail in
    # the checker's wrapper (`def push(obj, *rest)`: "expected 1+") before
    # it reaches the gem; the unchecked runs compare the whole message.
    msg = msg.sub(/\(given (\d+), expected [^)]*\)/, '(given \\1)') if RBS_MODE
    msg
  end

  # The child scripts: test/children/<name>.rb, one per test (named after
  # the test file and the test), plus their shared helper
  # (children/child_helper.rb: bounded waits).
  CHILDREN = File.expand_path("children", __dir__)
  LIB = File.expand_path("../lib", __dir__)

  # The file a child `name` runs: test/children/<name>.rb, or `name`
  # itself when it is an absolute path (a script under test/support).
  def child_script(name)
    return name if name.start_with?("/")

    File.join(CHILDREN, name.end_with?(".rb") ? name : "#{name}.rb")
  end

  # The line of the child script `name` on which `text` first appears (for
  # the checks of messages that name the script's lines).
  def child_line(name, text)
    index = File.readlines(child_script(name)).index { |l| l.include?(text) }
    raise ArgumentError, "#{text.inspect} is not in #{child_script(name)}" unless index

    index + 1
  end

  # Runs the child script `name` (child_script) alone in a child process
  # and expects Ruby's deadlock fatal.
  def assert_deadlocks(name, *args)
    _out, err, status = run_ruby(name, *args)
    refute status.success?, "expected a deadlock, got #{status.inspect}"
    assert_match(/No live threads left. Deadlock\?/, err)
  end

  # Runs the child script `name` (child_script) with `args` as its ARGV, in
  # a child process with the gem on the load path and `r` required
  # (-rrapid_thread; nil: nothing), `flags` first (-W2, ...), `env` added to
  # its environment, on CPU `cpu` only if given (taskset). `e:` instead of a
  # name runs that one-line program (-e), for the few tiny snippets left
  # (replace_test.rb). Killed after `timeout` seconds (Timeout::Error).
  # Returns [stdout, stderr, status].
  def run_ruby(name = nil, *args, e: nil, r: "rapid_thread", flags: [], env: {}, timeout: 30, cpu: nil)
    raise ArgumentError, "a child script or e:, not both" unless name.nil? ^ e.nil?

    pin = cpu ? ["taskset", "-c", cpu.to_s] : []
    program = e ? ["-e", e] : [child_script(name)]
    Open3.capture3(env, *pin, RbConfig.ruby, *flags, "-I#{LIB}", *("-r#{r}" if r), *program, *args,
                   stdin_data: "", timeout: timeout)
  end

  # run_ruby for a child that must succeed (and, if `quiet`, print nothing
  # on stderr): returns its stdout, and fails the test with the child's
  # status, stderr and stdout otherwise.
  def child_output(name = nil, *args, quiet: false, **opts)
    out, err, status = run_ruby(name, *args, **opts)
    assert status.success?, "child failed (#{status.inspect}):\n#{err}\n#{out}"
    assert_equal "", err, "the child's stderr" if quiet
    out
  end

  # The value of test/support/compaction/<name>.rb, a program that compacts
  # the heap (with COMPACT_EVERYTHING), as `inspect` prints it. It runs in
  # this process on Ruby 3.3+, after whatever the suite left in the heap
  # (under GC.stress in that mode); before 3.3 in a fresh child process
  # (IN_PROCESS_COMPACTION).
  def compaction_check(name, timeout: 120)
    skip "GC compaction is not supported here" unless GC.respond_to?(:verify_compaction_references)
    path = File.expand_path("support/compaction/#{name}.rb", __dir__)
    return eval(File.read(path), Object.new.instance_eval { binding }, path).inspect if IN_PROCESS_COMPACTION # rubocop:disable Security/Eval

    child_output("compaction_check", path, timeout: timeout).chomp
  end
end

# Open3.capture3 has no timeout option; add one that kills the child.
module Open3
  class << self
    alias_method :capture3_unbounded, :capture3

    def capture3(*cmd, timeout: nil, **opts)
      return capture3_unbounded(*cmd, **opts) unless timeout

      stdin_data = opts.delete(:stdin_data) || ""
      popen3(*cmd, **opts) do |i, o, e, t|
        out_reader = Thread.new { Thread.current.report_on_exception = false; o.read }
        err_reader = Thread.new { Thread.current.report_on_exception = false; e.read }
        i.write(stdin_data)
        i.close
        begin
          unless t.join(timeout)
            kill_child(t)
            raise Timeout::Error, "child process exceeded #{timeout}s: #{cmd.inspect}#{stderr_of(err_reader)}"
          end
        rescue Minitest::Assertion => ex # the test's own Timeout fired first
          kill_child(t)
          raise ex.class, "#{ex.message}: in #{cmd.inspect}#{stderr_of(err_reader)}", ex.backtrace
        end
        [out_reader.value, err_reader.value, t.value]
      ensure
        # An exception from outside (the test's own Timeout, which can
        # fire first) must not leave popen3's ensure joining a child that
        # never ends: that hung a whole suite run once.
        kill_child(t)
      end
    end

    private

    def kill_child(waiter)
      Process.kill("KILL", waiter.pid) if waiter.alive?
    rescue Errno::ESRCH
      nil
    end

    # What a killed child had written on stderr (a wait of
    # children/child_helper.rb that timed out in a thread, say), for the
    # message; nothing if a process it started still holds the pipe.
    def stderr_of(reader)
      err = reader.join(1) && reader.value
      err.to_s.empty? ? "" : "\nits stderr:\n#{err}"
    end
  end
end

class RapidThreadTest < Minitest::Test
  include RapidThreadTestHelpers

  def setup
    @threads = []
  end

  def teardown
    @threads.each(&:kill).each do |t|
      t.join(5)
    rescue Exception # rubocop:disable Lint/RescueException
      nil # the test has already checked what it cares about
    end
  end

  # Under RAPID_THREAD_GC_STRESS the heap is also checked after every
  # test (GC.verify_internal_consistency), so that a broken heap aborts
  # the process during the test that broke it: CI's 3.4.5 stress run once
  # failed a later test's own check (docs/design-details.md, "A heap
  # check that failed once").
  def run(*)
    Timeout.timeout(TEST_TIMEOUT, TestHung, "test exceeded #{TEST_TIMEOUT}s") do
      GC.stress = GC_STRESS if GC_STRESS
      super
    ensure
      if GC_STRESS
        GC.stress = false
        GC.verify_internal_consistency
      end
    end
  end
end
