# frozen_string_literal: true

require_relative "test_helper"
require "fileutils"

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
# The matrix is operation x wake source x untimed/timed. Each case is one
# generated script, run in a child process twice: with the gem's classes
# and with stock's (Thread::Queue, ...; Thread.new for RapidThread.spawn).
# The outputs must be equal, and the child must finish within CASE_LIMIT
# seconds (it is killed otherwise). Threads wait for each other through
# states (num_waiting, thread status, flags, counters), never fixed sleeps.
#
# RAPID_THREAD_CHILD_LIB=/path/to/lib points the gem's children at another
# build (e.g. a worktree of an older commit) while the suite itself runs here.
class SignalWakeupTest < RapidThreadTest
  CASE_LIMIT = Float(ENV.fetch("RAPID_THREAD_SIGNAL_CASE_LIMIT", 20))
  CHILD_LIB = File.expand_path(ENV.fetch("RAPID_THREAD_CHILD_LIB", File.expand_path("../lib", __dir__)))

  # How a child names the subjects. Stock's timed queue operations fall
  # back to the untimed form (TIMED_QUEUE false), and only
  # version-independent output is printed: Ruby 3.1 has no pop(timeout:) /
  # push(timeout:), and Ruby 3.3's (3.3.8) lose a wake-up delivered during
  # a trap handler until the deadline (its timed queue sleep,
  # sleep_hrtime_until with SLEEP_SPURIOUS_CHECK, does not return after an
  # interrupt; the untimed one does): `trap(:USR1) { q << 1 }` then
  # `q.pop(timeout: 5)` returns 1 after 5 s. The gem must return at once.
  PRELUDES = {
    stock: <<~'RUBY',
      Q = Thread::Queue
      SQ = Thread::SizedQueue
      CV = Thread::ConditionVariable
      TIMED_QUEUE = false
      def spawn_task(&block) = Thread.new(&block)
      def new_cond(mon) = mon.new_cond
      # The gem's batch and select operations, as stock would spell them
      # for the cases below: one item, from the one queue that gets one.
      def select_on(q, _other, **kw) = (v = q.pop(**kw)) && [q, v]
      def pop_batch_of(q, _max, **kw) = (v = q.pop(**kw)) && [v]
      def push_all_to(q, items, **kw) = items.each { |i| q.push(i, **kw) } && q
    RUBY
    gem: <<~'RUBY',
      require "rapid_thread"
      Q = RapidThread::Queue
      SQ = RapidThread::SizedQueue
      CV = RapidThread::ConditionVariable
      TIMED_QUEUE = true
      def spawn_task(&block) = RapidThread.spawn(&block)
      def select_on(q, other, **kw) = RapidThread.select(q, other, **kw)
      def pop_batch_of(q, max, **kw) = q.pop_batch(max, **kw)
      def push_all_to(q, items, **kw) = q.push_all(items, **kw)
      # MonitorMixin::ConditionVariable wraps a Thread::ConditionVariable;
      # point this one at ours.
      def new_cond(mon) = mon.new_cond.tap { |c| c.instance_variable_set(:@cond, CV.new) }
    RUBY
    # Drop-in mode: the subjects are reached through the core names, and
    # Monitor#new_cond picks our ConditionVariable up by itself.
    gem_replace: <<~'RUBY'
      require "rapid_thread/replace"
      Q = Thread::Queue
      SQ = Thread::SizedQueue
      CV = Thread::ConditionVariable
      raise "not replaced" unless [Q, SQ, CV] == [RapidThread::Queue, RapidThread::SizedQueue, RapidThread::ConditionVariable]
      TIMED_QUEUE = true
      def spawn_task(&block) = Thread.spawn(&block)
      def select_on(q, other, **kw) = RapidThread.select(q, other, **kw)
      def pop_batch_of(q, max, **kw) = q.pop_batch(max, **kw)
      def push_all_to(q, items, **kw) = q.push_all(items, **kw)
      def new_cond(mon)
        mon.new_cond.tap { |c| raise "Monitor does not use ours" unless c.instance_variable_get(:@cond).is_a?(CV) }
      end
    RUBY
  }.freeze

  # Operations. Keys:
  #   setup    code run first (defines the subject)
  #   waiting  expression: the main thread is blocked in the operation; `k`
  #            is how many times it has entered a wait (only waits that
  #            return on Thread#wakeup count: ConditionVariable#wait)
  #   op/timed the blocking operation, untimed and timed (30 s: it must
  #            return long before that); no `timed`: untimed only
  #   wake     what ends the wait, run by another thread
  #   trap_wake  the same from a trap handler, when it must differ
  #            (Mutex#lock and Monitor#synchronize raise in trap context,
  #            so the handler signals without the lock, and signals the
  #            monitor's underlying condition variable directly)
  #   report   expression printed with `p` at the end (`r`: the op's value)
  QUEUE_REPORT = "[fmt(r, q), Array.new(q.size) { q.pop(true) }, q.num_waiting, q.closed?]"
  SIZED_REPORT = "[fmt(r, q), q.max, Array.new(q.size) { q.pop(true) }, q.num_waiting, q.closed?]"
  FULL_SIZED_QUEUE = "q = SQ.new(1)\nq << :first"
  SIZED_PUSH = { setup: FULL_SIZED_QUEUE, waiting: "q.num_waiting == 1", op: "q.push(:second)",
                 timed: "TIMED_QUEUE ? q.push(:second, timeout: 30) : q.push(:second)", report: SIZED_REPORT }.freeze
  SELECT = { setup: "q = Q.new\nq2 = Q.new", waiting: "q.num_waiting == 1", op: "select_on(q, q2)",
             timed: "TIMED_QUEUE ? select_on(q, q2, timeout: 30) : select_on(q, q2)",
             report: "[r && [fmt(r[0], q), r[1]], Array.new(q.size) { q.pop(true) }, q.num_waiting, q2.num_waiting]" }.freeze
  CV_OP = <<~'RUBY'
    m.synchronize do
      until flag
        waits += 1
        w = cv.wait(m%s)
        returns += 1
      end
      [w.class, returns, m.owned?]
    end
  RUBY
  MONITOR_OP = <<~'RUBY'
    mon.synchronize do
      until flag
        waits += 1
        w = cond.wait(%s)
        returns += 1
      end
      [w, returns, mon.mon_owned?]
    end
  RUBY
  # The block ends when a byte arrives on the pipe (syswrite: a plain
  # write(2), nothing that can block or lock in a trap handler; the reader
  # uses IO#read: Ruby 3.1's sysread can raise EAGAIN on the non-blocking
  # pipe when a signal interrupts it). The wake also waits until
  # the block has ended, so that the joiner's wake-up lands inside the
  # handler in the trap cases.
  TASK = { setup: "rd, wr = IO.pipe\nt = spawn_task { rd.read(1); :value }", waiting: "true",
           wake: "wr.syswrite('x')\nThread.pass while t.alive?", report: "[fmt(r, t), t.alive?, t.value]" }.freeze

  OPS = {
    queue_pop_by_push: { setup: "q = Q.new", waiting: "q.num_waiting == 1", op: "q.pop",
                         timed: "TIMED_QUEUE ? q.pop(timeout: 30) : q.pop", wake: "q << :item", report: QUEUE_REPORT },
    queue_pop_by_close: { setup: "q = Q.new", waiting: "q.num_waiting == 1", op: "q.pop",
                          timed: "TIMED_QUEUE ? q.pop(timeout: 30) : q.pop", wake: "q.close", report: QUEUE_REPORT },
    sized_queue_pop_by_push: { setup: "q = SQ.new(1)", waiting: "q.num_waiting == 1", op: "q.pop",
                               timed: "TIMED_QUEUE ? q.pop(timeout: 30) : q.pop", wake: "q << :item",
                               report: SIZED_REPORT },
    sized_queue_push_by_pop: SIZED_PUSH.merge(wake: "q.pop"),
    sized_queue_push_all_by_pop: SIZED_PUSH.merge(op: "push_all_to(q, [:second])", wake: "q.pop",
                                                  timed: "TIMED_QUEUE ? push_all_to(q, [:second], timeout: 30) : " \
                                                         "push_all_to(q, [:second])"),
    queue_pop_batch_by_push: { setup: "q = Q.new", waiting: "q.num_waiting == 1", op: "pop_batch_of(q, 5)",
                               timed: "TIMED_QUEUE ? pop_batch_of(q, 5, timeout: 30) : pop_batch_of(q, 5)",
                               wake: "q << :item", report: QUEUE_REPORT },
    select_by_push: SELECT.merge(wake: "q << :item"),
    select_by_close: SELECT.merge(wake: "q.close\nq2.close"),
    sized_queue_push_by_clear: SIZED_PUSH.merge(wake: "q.clear"),
    sized_queue_push_by_max: SIZED_PUSH.merge(wake: "q.max = 2"),
    sized_queue_push_by_close: SIZED_PUSH.merge(wake: "q.close"),
    cv_wait_by_signal: { setup: "m = Thread::Mutex.new\ncv = CV.new", waiting: "waits == k",
                         op: format(CV_OP, ""), timed: format(CV_OP, ", 30"),
                         wake: "m.synchronize { flag = true; cv.signal }", trap_wake: "flag = true; cv.signal",
                         report: "r" },
    cv_wait_by_broadcast: { setup: "m = Thread::Mutex.new\ncv = CV.new", waiting: "waits == k",
                            op: format(CV_OP, ""), timed: format(CV_OP, ", 30"),
                            wake: "m.synchronize { flag = true; cv.broadcast }",
                            trap_wake: "flag = true; cv.broadcast", report: "r" },
    monitor_wait_by_signal: { setup: "require 'monitor'\nmon = Monitor.new\ncond = new_cond(mon)", waiting: "waits == k",
                              op: format(MONITOR_OP, ""), timed: format(MONITOR_OP, "30"),
                              wake: "mon.synchronize { flag = true; cond.signal }",
                              trap_wake: "flag = true; cond.instance_variable_get(:@cond).signal", report: "r" },
    monitor_wait_by_broadcast: { setup: "require 'monitor'\nmon = Monitor.new\ncond = new_cond(mon)",
                                 waiting: "waits == k", op: format(MONITOR_OP, ""), timed: format(MONITOR_OP, "30"),
                                 wake: "mon.synchronize { flag = true; cond.broadcast }",
                                 trap_wake: "flag = true; cond.instance_variable_get(:@cond).broadcast",
                                 report: "r" },
    task_join: TASK.merge(op: "t.join", timed: "t.join(30)"),
    task_value: TASK.merge(op: "t.value")
  }.freeze

  # Wake sources: code that installs a trap handler and/or starts `helper`,
  # a thread the main thread joins after the operation returns. %<wake>s is
  # the op's wake code, %<trap_wake>s its trap-context form.
  SOURCES = {
    # (a) The handler, on the waiting thread, performs the wake (once; later
    # runs only count). Signals are sent back to back until the operation
    # returns, at most 2000 (a lost wake-up is not recovered by later
    # signals: the old build hung here).
    trap_handler_repeated_signals: <<~'RUBY',
      trap(:USR1) do
        handled += 1
        unless woken
          woken = true
          %<trap_wake>s
        end
      end
      helper = Thread.new do
        Thread.pass until waiting.(1)
        sent = 0
        until op_done || sent >= 2000
          Process.kill(:USR1, Process.pid)
          sent += 1
          Thread.pass
        end
      end
    RUBY
    # (a') The same with a slow sender: three signals, each once the
    # previous handler has run and the main thread sleeps again, then the
    # sender ends. Stock returns at the first; a lost wake-up leaves the
    # main thread asleep for good (a deadlock fatal when it is the only
    # thread left, a hang when a Task's cached threads live on).
    trap_handler_three_signals: <<~'RUBY',
      trap(:USR1) do
        handled += 1
        unless woken
          woken = true
          %<trap_wake>s
        end
      end
      helper = Thread.new do
        3.times do |i|
          Thread.pass until handled == i && (i.zero? ? waiting.(1) : main.status == "sleep")
          Process.kill(:USR1, Process.pid)
        end
      end
    RUBY
    # (b) Another thread performs the wake while the waiting thread runs a
    # long handler, which ends only after the wake.
    other_thread_during_handler: <<~'RUBY',
      trap(:USR1) do
        handled += 1
        in_handler = true
        Thread.pass until woke
        in_handler = false
      end
      helper = Thread.new do
        Thread.pass until waiting.(1)
        Process.kill(:USR1, Process.pid)
        Thread.pass until in_handler
        %<wake>s
        woke = true
      end
    RUBY
    # (c) Thread#wakeup, then Thread#run, then the real wake. Stock: a queue
    # operation and a join keep waiting; ConditionVariable#wait returns
    # (the op's loop counts the returns and waits again).
    wakeup_then_run_then_wake: <<~'RUBY'
      helper = Thread.new do
        Thread.pass until waiting.(1)
        main.wakeup
        Thread.pass until waiting.(2)
        main.run
        Thread.pass until waiting.(3)
        %<wake>s
      end
    RUBY
  }.freeze

  SCRIPT = <<~'RUBY'
    %<prelude>s
    def fmt(r, subject) = r.equal?(subject) ? :self : r
    main = Thread.current
    flag = woke = woken = in_handler = op_done = false
    handled = waits = returns = 0
    %<setup>s
    waiting = ->(k) { !op_done && main.status == "sleep" && (%<waiting>s) }
    %<source>s
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    r = begin
      %<op>s
    rescue StandardError => e
      "raised #{e.class}: #{e.message}"
    end
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
    op_done = true
    helper.join
    p %<report>s
    puts "prompt: #{elapsed < 10}"
  RUBY

  def self.script(prelude, op, source, timed)
    spec = OPS.fetch(op)
    wakes = { wake: spec.fetch(:wake), trap_wake: spec.fetch(:trap_wake, spec.fetch(:wake)) }
    format(SCRIPT, prelude: PRELUDES.fetch(prelude), setup: spec.fetch(:setup), waiting: spec.fetch(:waiting),
                   source: format(SOURCES.fetch(source), **wakes), op: spec.fetch(timed ? :timed : :op),
                   report: spec.fetch(:report))
  end

  # Runs one child: [stdout, stderr, status]; status nil when the child
  # outlived CASE_LIMIT and was killed.
  def self.run_child(script)
    cmd = [RbConfig.ruby, "--disable-gems", "-I#{CHILD_LIB}", "-e", script]
    Open3.capture3(*cmd, stdin_data: "", timeout: CASE_LIMIT)
  rescue Timeout::Error
    [nil, "killed after #{CASE_LIMIT}s (a lost wake-up hangs)", nil]
  end

  GEM_IMPL = REPLACE_MODE ? :gem_replace : :gem
  CASES = OPS.flat_map do |op, spec|
    SOURCES.keys.product(spec.key?(:timed) ? [false, true] : [false]).map do |source, timed|
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
      @jobs = jobs # key => script
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
          [:stock, GEM_IMPL].each { |impl| h[[name, impl]] = script(impl, *c) }
        end
        Minitest.after_run { @pool.shutdown }
        Pool.new(jobs, JOBS)
      end
    end
  end

  def save(name, impl)
    dir = File.expand_path("../tmp/signal_wakeup", __dir__)
    FileUtils.mkdir_p(dir)
    path = File.join(dir, "#{name}.#{impl}.rb")
    File.write(path, self.class.script(impl, *CASES.fetch(name)))
    path
  end

  def check_case(name)
    # The children are not under GC.stress (only this process is), and
    # running 200 of them from a stressed process is slow for nothing.
    skip "the cases run in child processes, which GC.stress does not reach" if GC_STRESS

    s_out, s_err, s_status = self.class.pool.result([name, :stock])
    unless s_status&.success? && s_err.empty?
      flunk "the stock oracle failed for #{name} (#{save(name, :stock)}): #{s_status.inspect}\n#{s_err}#{s_out}"
    end
    g_out, g_err, g_status = self.class.pool.result([name, GEM_IMPL])
    return pass if g_status&.success? && g_err.empty? && g_out == s_out

    flunk "#{name}: #{GEM_IMPL} differs from stock (script: #{save(name, GEM_IMPL)})\n" \
          "stock: #{s_out.inspect}\n#{GEM_IMPL}: #{g_out.inspect} #{g_status.inspect}\n#{g_err}"
  end

  CASES.each_key { |name| define_method("test_#{name}") { check_case(name) } }
end
