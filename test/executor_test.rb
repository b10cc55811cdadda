# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/concurrent_ruby"
require "rapid_thread/concurrent"

# RapidThread::Executor: concurrent-ruby's executor interface on the thread
# cache (lib/rapid_thread/executor.rb), and concurrent-ruby 1.1.6 running
# on it (lib/rapid_thread/concurrent.rb).
class ExecutorTest < RapidThreadTest
  def setup
    super
    @executors = []
  end

  def teardown
    @executors.each do |ex|
      ex.kill
      ex.wait_for_termination(5)
    end
    super
  end

  def executor(**opts)
    ex = RapidThread::Executor.new(**opts)
    @executors << ex
    ex
  end

  # A latch the test opens: tasks wait on it.
  def gate = GemQueue.new

  def test_post_runs_the_block_with_its_arguments_on_another_thread
    ex = executor
    results = GemQueue.new
    assert_equal true, ex.post(1, 2) { |a, b| results << [a + b, Thread.current] }
    assert_same ex, ex << -> { results << :shifted }
    got = [results.pop, results.pop]
    sum, thread = got.find { |r| r.is_a?(Array) }
    assert_equal 3, sum
    refute_same Thread.current, thread
    assert_includes got, :shifted
    assert_equal ArgumentError, error_of { ex.post }[0]
    assert_equal "no block given", error_of { ex.post }[1]
  end

  def test_bad_options_raise_argument_error
    [{ max_threads: 0 }, { max_threads: 2**31 }, { max_queue: -1 }, { idletime: 0 }, { idletime: "1" },
     { fallback_policy: :explode }, { on_error: 42 }].each do |opts|
      assert_raises(ArgumentError, opts.inspect) { ill_typed { RapidThread::Executor.new(**opts) } }
    end
    assert_equal "explode is not a valid fallback policy",
                 assert_raises(ArgumentError) { ill_typed { RapidThread::Executor.new(fallback_policy: :explode) } }.message
    assert_raises(TypeError) { ill_typed { RapidThread::Executor.new(max_threads: nil) } }
  end

  def test_workers_grow_to_max_threads_then_tasks_queue
    ex = executor(max_threads: 3)
    g = gate
    started = GemQueue.new
    10.times { |i| ex.post { started << i; g.pop } }
    3.times { started.pop }
    wait_until { ex.queue_length == 7 }
    assert_equal 3, ex.length
    assert_equal 3, ex.largest_length
    assert_equal 0, started.size, "a fourth task started"
    10.times { g << 1 }
    7.times { started.pop }
    wait_until { ex.completed_task_count == 10 }
    assert_equal 0, ex.queue_length
    assert_equal 3, ex.largest_length
  end

  def test_an_idle_worker_takes_the_next_task
    ex = executor
    done = GemQueue.new
    queue = ex.instance_variable_get(:@queue)
    20.times do
      ex.post { done << Thread.current }
      done.pop
      # Back in its pop: idle, and the next post finds it.
      wait_until { queue.num_waiting == 1 }
    end
    assert_equal 1, ex.largest_length
  end

  # A burst of posts wakes one idle worker, which wakes the next before it
  # runs its task (chained wake-ups, queue.rs): tasks that block all start.
  def test_a_burst_of_blocking_tasks_starts_on_every_idle_worker
    ex = executor
    g = gate
    started = GemQueue.new
    queue = ex.instance_variable_get(:@queue)
    8.times { ex.post { started << 1; g.pop } }
    8.times { started.pop }
    8.times { g << 1 }
    wait_until { queue.num_waiting == 8 }
    3.times do
      8.times { ex.post { started << 1; g.pop } }
      8.times { started.pop }
      assert_equal 8, ex.length, "no worker added: the idle ones took the tasks"
      8.times { g << 1 }
      wait_until { queue.num_waiting == 8 }
    end
  end

  # Chained wake-ups behind a thread that holds the GVL: the worker woken
  # comes late and wakes one per job left, so that each job does not wait
  # for a time slice of its own.
  def test_a_late_wake_up_wakes_a_worker_per_job_left
    out = child_output("executor/a_late_wake_up_wakes_a_worker_per_job_left",
                       env: { "RAPID_THREAD_SPIN_US" => "0" })
    assert_equal "7\n", out
  end

  def test_workers_idle_for_idletime_end
    ex = executor(idletime: 0.05)
    g = gate
    3.times { ex.post { g.pop } }
    wait_until { ex.length == 3 }
    3.times { g << 1 }
    wait_until { ex.length.zero? }
    assert_equal 3, ex.largest_length
    assert ex.running?
    done = GemQueue.new
    ex.post { done << :again }
    assert_equal :again, done.pop
  end

  # The reaper's looks, driven by the test (an idletime it never reaches):
  # STOPs for workers that waited through a whole window, none for one that
  # ran a task since the last look or runs one now, and every idle worker
  # of a look ends (not one per look).
  def test_the_reaper_stops_idle_workers_only
    ex = executor(idletime: 3600)
    lock = ex.instance_variable_get(:@lock)
    queue = ex.instance_variable_get(:@queue)
    stops = -> { ex.instance_variable_get(:@stops) }
    # A look; the STOPs it queued (counted under its lock, before a worker
    # takes one).
    look = -> { lock.synchronize { was = stops.call; ex.send(:ns_stop_idle_workers); stops.call - was } }
    # Each worker's [thread's object_id, tasks completed, waits for a job,
    # count at the last look], for a failure's message.
    tasks = ex.instance_variable_get(:@tasks)
    marks = -> { lock.synchronize { tasks.values.map { [_1[1].object_id, *_1[2..4]] } } }
    long = gate
    short = Array.new(5) { gate }
    started = GemQueue.new
    ex.post { started << :long; long.pop }
    assert_equal :long, started.pop
    5.times { |i| ex.post { started << [Thread.current, i]; short[i].pop } }
    short_of = Array.new(5) { started.pop }.to_h
    # Released last worker first, so that they wait in the reverse of the
    # look's order: a STOP it pushes then wakes a worker it has not
    # reached yet (see below).
    tasks.each_value.map { _1[1] }.reverse.select { short_of.key?(_1) }.each_with_index do |t, n|
      short[short_of[t]] << 1
      wait_until { queue.num_waiting == n + 1 }
    end
    wait_until { ex.completed_task_count == 5 }
    assert_equal 6, ex.length
    look.call # the first look marks them
    assert_equal 0, queue.size
    ex.post { started << :again }
    assert_equal :again, started.pop
    wait_until { ex.completed_task_count == 6 && queue.num_waiting == 5 }
    before = marks.call
    # From here each STOP is taken as soon as it is pushed, before the
    # look goes on (as when the look loses the GVL after a push, seen in
    # CI under GC.stress): a look that queued STOPs as it counted passed
    # over the workers that took them, and kept idle workers.
    busy = -> { tasks.each_value.count { !_1[3] } }
    waiting_for = method(:wait_until)
    queue.singleton_class.prepend(Module.new do
      define_method(:push) do |job|
        was = busy.call
        super(job).tap { waiting_for.call { busy.call > was } }
      end
    end)
    pushed = look.call # four waited the whole window; one ran a task in it
    wait_until { stops.call.zero? }
    assert_equal [0, 2], [queue.size, ex.length],
                 "#{pushed} STOPs; marks before the look #{before}, now #{marks.call}"
    look.call # now the fifth; never the one running
    wait_until { stops.call.zero? }
    assert_equal 1, ex.length
    look.call
    assert_equal [0, 0, 0, 1], [stops.call, queue.size, ex.queue_length, ex.length]
    long << 1
    wait_until { ex.completed_task_count == 7 }
  end

  # It ends with the workers, at shutdown (woken), and a killed one is
  # replaced.
  def test_the_reaper_ends_with_the_workers_and_at_shutdown
    ex = executor(idletime: 0.05)
    reaper = -> { ex.instance_variable_get(:@reaper) }
    done = GemQueue.new
    3.times { ex.post { done << :ok } }
    3.times { done.pop }
    wait_until { ex.length.zero? && reaper.call.nil? }
    assert ex.running?

    ex = executor(idletime: 3600)
    reaper = -> { ex.instance_variable_get(:@reaper) }
    ex.post { done << :ok }
    done.pop
    first = reaper.call
    refute_nil first
    wait_until { first.first } # its thread
    first.first.kill
    wait_until { !reaper.call.nil? && !reaper.call.equal?(first) }
    ex.shutdown
    assert ex.wait_for_termination(TEST_TIMEOUT / 2)
    wait_until { reaper.call.nil? }
  end

  def test_shutdown_finishes_what_is_queued_and_accepts_nothing_new
    ex = executor(max_threads: 2)
    g = gate
    ran = GemQueue.new
    6.times { |i| ex.post { g.pop; ran << i } }
    wait_until { ex.queue_length == 4 }
    assert_equal true, ex.shutdown
    assert ex.shuttingdown?
    refute ex.running?
    refute ex.shutdown?
    assert_raises(Concurrent::RejectedExecutionError) { ex.post { ran << :late } }
    assert_equal false, ex.wait_for_termination(0.01)
    6.times { g << 1 }
    assert_equal true, ex.wait_for_termination(TEST_TIMEOUT / 2)
    assert ex.shutdown?
    refute ex.shuttingdown?
    assert_equal (0..5).to_a, Array.new(6) { ran.pop }.sort
    assert_equal 0, ex.length
    assert_equal 6, ex.completed_task_count
    assert_equal true, ex.shutdown, "a second shutdown"
    assert_equal true, ex.wait_for_termination
  end

  def test_shutdown_with_no_workers_is_immediate
    ex = executor
    ex.shutdown
    assert ex.shutdown?
    assert_equal true, ex.wait_for_termination(0)
  end

  def test_fallback_policies_after_shutdown_and_on_a_full_queue
    %i[abort discard caller_runs].each do |policy|
      ex = executor(max_threads: 1, max_queue: 1, fallback_policy: policy)
      assert ex.can_overflow?
      refute ex.serialized?
      g = gate
      ex.post { g.pop }
      wait_until { ex.length == 1 && ex.queue_length.zero? }
      ex.post { g.pop } # queued
      ran_on = nil
      over = -> { ex.post { ran_on = Thread.current } }
      case policy
      when :abort then assert_raises(Concurrent::RejectedExecutionError) { over.call }
      when :discard then assert_equal false, over.call
      when :caller_runs
        assert_equal true, over.call
        assert_same Thread.current, ran_on
        # Its StandardError stays in the caller's post, as concurrent-ruby's.
        assert_equal true, ex.post { raise "dropped" }
      end
      2.times { g << 1 }
      ex.shutdown
      assert ex.wait_for_termination(TEST_TIMEOUT / 2)
      ran_on = nil
      case policy
      when :abort then assert_raises(Concurrent::RejectedExecutionError) { over.call }
      when :discard then assert_equal false, over.call
      when :caller_runs then assert_equal [true, Thread.current], [over.call, ran_on]
      end
    end
    refute RapidThread::Executor.new.can_overflow?
  end

  def test_kill_drops_the_queue_and_ends_running_tasks
    ex = executor(max_threads: 2)
    g = gate
    ensured = GemQueue.new
    started = GemQueue.new
    ran_queued = false
    2.times do
      ex.post do
        started << 1
        g.pop
      ensure
        ensured << :ensure
      end
    end
    5.times { ex.post { ran_queued = true } }
    2.times { started.pop }
    assert_equal true, ex.kill
    assert ex.shutdown?
    assert_equal true, ex.wait_for_termination(0)
    assert_equal %i[ensure ensure], [ensured.pop, ensured.pop]
    assert_equal 0, ex.queue_length
    assert_equal 0, ex.length
    refute ran_queued
    assert_raises(Concurrent::RejectedExecutionError) { ex.post { 1 } }
    assert_equal true, ex.kill
  end

  def test_a_task_that_kills_its_executor
    ex = executor(max_threads: 2)
    g = gate
    started = GemQueue.new
    other = GemQueue.new
    ex.post do
      started << 1
      g.pop
    ensure
      other << :killed
    end
    # Its block has begun: a kill between a worker's taking a task and
    # the block's start ends the task unrun, without its ensure (4 hangs
    # in about 5,000 runs when this waited for the worker only).
    started.pop
    after = GemQueue.new
    ex.post do
      ex.kill
      after << :not_killed
    ensure
      after << :ensure
    end
    assert_equal :killed, other.pop
    assert_equal :ensure, after.pop
    assert_equal 0, after.size, "the killing task ran on after its own kill"
    assert ex.shutdown?
  end

  def test_wait_for_termination_waits_for_running_tasks
    ex = executor
    g = gate
    ex.post { g.pop }
    wait_until { ex.length == 1 }
    ex.shutdown
    waiter = spawn_thread { ex.wait_for_termination }
    wait_until { waiter.status == "sleep" }
    assert_equal false, ex.wait_for_termination(0.01)
    g << 1
    assert_equal true, waiter.value
  end

  # Posts racing a shutdown: each is either accepted and runs, or refused;
  # none is lost or run twice.
  def test_posts_racing_shutdown_lose_nothing
    ran = GemQueue.new
    3.times do
      ex = executor(max_threads: 4)
      accepted = GemQueue.new
      posters = Array.new(4) do |p|
        spawn_thread do
          scaled(500).times do |i|
            ex.post { ran << [p, i] }
            accepted << [p, i]
          rescue Concurrent::RejectedExecutionError
            break
          end
        end
      end
      wait_until { accepted.size >= scaled(100) }
      ex.shutdown
      posters.each(&:join)
      assert ex.wait_for_termination(TEST_TIMEOUT / 2)
      assert_equal Array.new(accepted.size) { accepted.pop }.sort, Array.new(ran.size) { ran.pop }.sort
      assert_equal 0, ex.length
    end
  end

  def test_a_task_exception_goes_to_on_error_and_the_worker_goes_on
    errors = GemQueue.new
    ex = executor(max_threads: 1, on_error: ->(e) { errors << e })
    done = GemQueue.new
    ex.post { raise ArgumentError, "bad" }
    ex.post { raise Exception, "any exception" } # rubocop:disable Lint/RaiseException
    ex.post { exit 3 }
    ex.post { done << Thread.current }
    assert_equal [ArgumentError, "bad"], errors.pop.then { |e| [e.class, e.message] }
    assert_equal [Exception, "any exception"], errors.pop.then { |e| [e.class, e.message] }
    assert_kind_of SystemExit, errors.pop
    done.pop
    assert_equal 1, ex.largest_length
    wait_until { ex.completed_task_count == 4 }

    # With no on_error (or one that raises) the error is dropped.
    # A fiber-local set by a task stays for the next task of the same
    # worker (one block of the thread cache); a new worker has none.
    [executor(max_threads: 1), executor(max_threads: 1, on_error: ->(_) { raise "on_error failed" })].each do |quiet|
      mark = Object.new
      quiet.post do
        Thread.current[:executor_test_mark] = mark
        raise "dropped"
      end
      quiet.post { done << Thread.current[:executor_test_mark] }
      assert_same mark, done.pop, "the same worker ran the next task"
    end
  end

  def test_thread_raise_and_kill_of_a_worker_mid_task_keep_the_pool_size
    errors = GemQueue.new
    ex = executor(max_threads: 2, on_error: ->(e) { errors << e.message })
    workers = GemQueue.new
    g = gate
    2.times { ex.post { workers << Thread.current; g.pop } }
    victim, other = workers.pop, workers.pop
    wait_until { victim.status == "sleep" && other.status == "sleep" }
    victim.raise(RuntimeError, "raised at the worker")
    assert_equal "raised at the worker", errors.pop
    assert_equal 2, ex.length
    other.kill
    wait_until { !other.alive? }
    assert_equal 2, ex.length, "the killed worker was replaced"
    g << 1 # the victim's task ends
    # Two workers again: two tasks run at once.
    running = GemQueue.new
    release = gate
    2.times do
      ex.post do
        running << 1
        release.pop
      end
    end
    wait_until { running.size == 2 }
    2.times { release << 1 }
  end

  def test_a_worker_killed_while_shutting_down_is_replaced_to_drain_the_queue
    ex = executor(max_threads: 1)
    workers = GemQueue.new
    ran = GemQueue.new
    ex.post do
      workers << Thread.current
      sleep
    end
    2.times { |i| ex.post { ran << i } }
    worker = workers.pop
    wait_until { worker.status == "sleep" }
    ex.shutdown
    worker.kill
    assert ex.wait_for_termination(TEST_TIMEOUT / 2)
    assert_equal [0, 1], [ran.pop, ran.pop]
    assert_equal 0, ex.queue_length
  end

  # The lock-free post against an idle worker leaving and a shutdown, in
  # the one order that needs the shutdown to drain: the post passes its
  # check while a worker exists, the worker idles out, a shutdown takes
  # the lock, the post pushes, and only then the shutdown finds no
  # worker. Each step is held in RapidThread.__fork_generation, which the
  # post's check and the shutdown's lock call first (a hook on it, for
  # the threads that set :executor_test_hold).
  def test_a_job_pushed_after_the_last_worker_left_is_drained_by_shutdown
    # Long enough for the post below to reach its check before the worker
    # idles out (GC.stress makes every step slow).
    ex = executor(idletime: GC_STRESS ? 10 : 0.5)
    ran = GemQueue.new
    ex.post { ran << :first }
    ran.pop
    lock = ex.instance_variable_get(:@lock)
    hook = Module.new do
      define_method(:__fork_generation) do
        held, release, locked = Thread.current[:executor_test_hold]
        if held
          Thread.current[:executor_test_hold] = nil
          # Held only where the step is (the post's check runs unlocked,
          # the shutdown's inside the lock); elsewhere it would deadlock.
          if lock.owned? == locked
            held << :held
            release.pop
          else
            held << :missed
          end
        end
        super()
      end
    end
    RapidThread.singleton_class.prepend(hook)
    begin
      at_check = [gate, gate, false]
      poster = spawn_thread do
        Thread.current[:executor_test_hold] = at_check
        ex.post { ran << :pushed }
      end
      assert_equal :held, at_check[0].pop, "the post passed @workers.positive? and waits in its check"
      wait_until { ex.length.zero? } # the worker idled out
      at_lock = [gate, gate, true]
      shutter = spawn_thread do
        Thread.current[:executor_test_hold] = at_lock
        ex.shutdown
      end
      assert_equal :held, at_lock[0].pop, "the shutdown holds the lock"
      at_check[1] << 1 # the post pushes, then waits for the lock
      wait_until { poster.status == "sleep" && ex.instance_variable_get(:@queue).size == 1 }
      at_lock[1] << 1
      assert_equal true, poster.value
      shutter.join
    ensure
      # On a failure, nothing stays held (the teardown kills the executor).
      [at_check, at_lock].compact.each { |(_, release)| release << 1 }
      hook.send(:remove_method, :__fork_generation)
    end
    assert ex.wait_for_termination(TEST_TIMEOUT / 2)
    assert_equal :pushed, ran.pop
    assert_equal 0, ex.queue_length
  end

  def test_a_child_forked_by_a_task_does_not_keep_the_worker_loop
    skip "no fork" unless Process.respond_to?(:fork)
    ex = executor(idletime: 30)
    pids = GemQueue.new
    ex.post do
      pid = fork # the child returns into the worker loop, its only thread
      pids << pid if pid
    end
    pid = pids.pop
    _, status = Timeout.timeout(15) { Process.wait2(pid) }
    assert status.success?, status.inspect
  end

  def test_fork_child_starts_with_no_workers_and_an_empty_queue
    skip "no fork" unless Process.respond_to?(:fork)
    ex = executor(max_threads: 1)
    g = gate
    ex.post { g.pop }
    3.times { ex.post { 1 } }
    wait_until { ex.queue_length == 3 }
    rd, wr = IO.pipe
    pid = fork do
      rd.close
      before = [ex.length, ex.queue_length, ex.running?]
      done = GemQueue.new
      ex.post { done << :child }
      wr.write Marshal.dump(before + [done.pop, ex.largest_length])
      wr.close
      exit!(0)
    end
    wr.close
    result = Marshal.load(rd.read)
    Process.wait(pid)
    assert_equal [0, 0, true, :child, 1], result
    assert_equal 3, ex.queue_length, "the parent's queue is untouched"
    g << 1
    wait_until { ex.completed_task_count == 4 }
  end

  def test_arguments_and_tasks_queued_survive_gc_and_compaction
    assert_equal "[]", compaction_check("executor_queued")
  end

  def test_a_process_with_idle_workers_exits_without_waiting
    t0 = now
    out = child_output("executor/a_process_with_idle_workers_exits_without_waiting", timeout: 20, quiet: true)
    assert_equal "ok", out
    assert_operator now - t0, :<, 15
  end

  def test_without_concurrent_ruby_abort_raises_the_gems_error
    out = child_output("executor/without_concurrent_ruby_abort_raises_the_gems_error", quiet: true)
    assert_equal "RapidThread::RejectedExecutionError nil true", out
  end
end

# concurrent-ruby 1.1.6's own classes on the Executor, against the same
# programs on its own executors: the same results and the same errors.
class ExecutorConcurrentRubyTest < RapidThreadTest
  P = Concurrent::Promises

  # The program on ours, then on theirs (the oracle: under GC.stress it
  # checks nothing of ours, so it runs unstressed).
  def with_executors
    ours = RapidThread::Executor.new(max_threads: 4)
    theirs = Concurrent::FixedThreadPool.new(4)
    [yield(ours), unstressed { yield(theirs) }]
  ensure
    [ours, theirs].compact.each do |ex|
      ex.kill
      ex.wait_for_termination(5)
    end
  end

  def outcome
    [:ok, yield]
  rescue StandardError => e
    [e.class, e.message]
  end

  def test_it_is_an_executor_service_that_options_accept
    ex = RapidThread::Executor.new
    assert_kind_of Concurrent::ExecutorService, ex
    assert_same ex, Concurrent::Options.executor(ex)
    ex.shutdown
  end

  def test_promises_futures_and_promises_give_the_same_results_and_errors
    programs = {
      future: ->(ex) { P.future_on(ex, 20) { |x| x + 1 }.value! },
      then_chain: ->(ex) { (1..10).reduce(P.future_on(ex) { 0 }) { |f, i| f.then { |v| v + i } }.value! },
      zip: ->(ex) { P.zip(*Array.new(scaled(50)) { |i| P.future_on(ex, i) { |x| x * 2 } }).value!.sum },
      any: ->(ex) { P.any_fulfilled_future(*Array.new(5) { |i| P.future_on(ex) { i } }).value!.between?(0, 4) },
      error: ->(ex) { P.future_on(ex) { raise ArgumentError, "bad" }.value! },
      rescue: ->(ex) { P.future_on(ex) { raise "x" }.rescue { |e| e.message * 2 }.value! },
      future_class: ->(ex) { Concurrent::Future.execute(executor: ex) { 6 * 7 }.value(5) },
      future_error: ->(ex) { Concurrent::Future.execute(executor: ex) { raise IOError, "io" }.tap { |f| f.wait(5) }.reason.message },
      promise: ->(ex) { Concurrent::Promise.execute(executor: ex) { 2 }.then { |v| v * 3 }.value(5) },
      scheduled: ->(ex) { Concurrent::ScheduledTask.execute(0.01, executor: ex) { :later }.value(5) }
    }
    programs.each do |name, program|
      ours, theirs = with_executors { |ex| outcome { program.call(ex) } }
      assert_equal theirs, ours, name.to_s
      refute_nil ours[1], name.to_s
    end
  end

  # Concurrent.global_io_executor / global_fast_executor replaced, in a
  # child (the change is process-wide): Promises.future, Future, TimerTask
  # and the :fast executor then run on the gem's executors.
  def test_replace_global_executors
    out = child_output(File.expand_path("support/executor_globals.rb", __dir__), quiet: true)
    assert_equal "io fast future timer_task rerun same\n", out
  end
end
