# frozen_string_literal: true

require_relative "test_helper"
require "stringio"

# RapidThread.spawn / Thread.spawn: Thread.new semantics on cached threads.
class ThreadCacheTest < RapidThreadTest
  # Has every idle worker exit (left by earlier tests, which a test that
  # counts growth or placement must not find).
  def empty_the_cache
    RapidThread.max_idle = 0
    wait_until(TEST_TIMEOUT / 2, "the idle workers to exit") { RapidThread.cache_stats[:idle].zero? }
  ensure
    RapidThread.max_idle = 64
  end

  # A task the teardown kills and joins (with the test's threads: a Task
  # answers kill and join as a Thread does); its exceptions are not reported.
  def task(*args, &block)
    t = RapidThread.spawn(*args, &block)
    t.report_on_exception = false
    @threads << t
    t
  end

  # --- results --------------------------------------------------------------

  def test_value_join_and_arguments
    assert_equal 3, RapidThread.spawn(1, 2) { |a, b| a + b }.value
    assert_equal({ k: 1 }, RapidThread.spawn(k: 1) { |**kw| kw }.value)
    assert_equal [[1], { a: 2 }], RapidThread.spawn(1, a: 2) { |*r, **kw| [r, kw] }.value
    t = Thread.spawn { :done }
    assert_same t, t.join
    assert_same t, t.join(1)
    assert_equal :done, t.value
    assert_instance_of RapidThread::Task, t
  end

  # Without arguments a block gets none, as from Thread.new: a lambda that
  # wants one fails in the block with Thread.new's ArgumentError, and an
  # empty `**{}` passes nothing.
  def test_a_block_given_no_arguments_gets_what_thread_news_gets
    report = Thread.report_on_exception
    Thread.report_on_exception = false
    with = lambda do |make|
      arity = begin; make.call(&->(x) { x }).value; rescue ArgumentError => e; e.message; end
      [arity, make.call(**{}) { |*a, **k| [a, k] }.value, make.call { |*a| a }.value]
    end
    stock = with.call(->(*a, **k, &b) { Thread.new(*a, **k, &b) })
    assert_equal ["wrong number of arguments (given 0, expected 1)", [[], {}], []], stock
    assert_equal stock, with.call(->(*a, **k, &b) { RapidThread.spawn(*a, **k, &b) })
  ensure
    Thread.report_on_exception = report
  end

  def test_join_limit_returns_nil_on_timeout
    q = Thread::Queue.new
    t = task { q.pop }
    assert_nil t.join(0)
    assert_nil t.join(0.01)
    assert_nil t.join(-1)
    q << 1
    assert_same t, t.join(10)
    assert_raises(TypeError) { ill_typed { t.join("1") } }
  end

  def test_exception_is_kept_for_join_and_value
    t = task { raise ArgumentError, "bad" }
    2.times { assert_equal "bad", assert_raises(ArgumentError) { t.join }.message }
    assert_raises(ArgumentError) { t.value }
    assert_nil t.status
    refute t.alive?
  end

  def test_without_a_block
    assert_equal [ThreadError, "must be called with a block"], error_of { RapidThread.spawn }
    assert_equal error_of { Thread.new }, error_of { Thread.spawn }
  end

  def test_join_on_own_task_raises_like_thread
    q = Thread::Queue.new
    t = task { q.pop.join }
    q << t
    e = assert_raises(ThreadError) { t.join }
    assert_equal "Target thread must not be current thread", e.message
  end

  # --- status, thread, backtrace, name ---------------------------------------

  def test_status_through_the_life_of_a_task
    q = Thread::Queue.new
    t = task { q.pop }
    assert t.alive?
    wait_until { t.status == "sleep" }
    assert_equal Thread, t.thread.class
    refute_equal Thread.current, t.thread
    assert(t.backtrace.any? { |l| l.include?("thread_cache_test.rb") })
    q << 1
    t.join
    assert_equal false, t.status
    assert_nil t.thread
    assert_nil t.backtrace
  end

  def test_task_thread_is_the_current_thread_in_the_block
    q = Thread::Queue.new
    t = task { [q.pop.thread, Thread.current] }
    q << t
    seen, current = t.value
    assert_same current, seen
  end

  def test_name_before_and_while_running
    q = Thread::Queue.new
    r = Thread::Queue.new
    t = task { r << Thread.current.name; q.pop; Thread.current.name }
    t.name = "first"
    assert_equal "first", t.name
    got = r.pop
    # The name set before start is the thread's name once it runs, unless
    # the block started first (then it is the default, nil).
    assert_includes ["first", nil], got
    t.name = "second"
    assert_equal "second", t.name
    q << 1
    assert_equal "second", t.value
    assert_raises(TypeError) { ill_typed { t.name = 1 } }
    assert_raises(ArgumentError) { t.name = "a\0b" }
  end

  # --- fresh state -----------------------------------------------------------

  # Runs the block once on every live worker, `worker` included: as many
  # blocks as there are workers (plus one) each hold a worker until all
  # have started, so every idle worker takes one (whichever the cache
  # would pick first). Returns the block's results, [thread, *rest] each.
  # Under GC.stress the probes can take longer than the suite's 3 s
  # idle_timeout, by which `worker` would end: it is 60 s meanwhile (the
  # setter applies to idle workers too).
  def on_every_worker(worker, &block)
    idle_timeout = RapidThread.idle_timeout
    RapidThread.idle_timeout = 60
    wait_until { worker.stop? } # idle again
    latch = Thread::Queue.new
    n = RapidThread.cache_stats[:threads] + 1
    # (Not `task`, which turns report_on_exception off.)
    probes = Array.new(n) { RapidThread.spawn { latch.pop; [Thread.current, *block.call] }.tap { |t| @threads << t } }
    wait_until { probes.all? { |t| t.status == "sleep" } }
    n.times { latch << 1 }
    probes.map(&:value)
  ensure
    RapidThread.idle_timeout = idle_timeout
  end

  def test_every_block_starts_with_fresh_thread_state
    first = RapidThread.spawn do
      Thread.current[:fiber_local] = 1
      Thread.current.thread_variable_set(:thread_var, 2)
      Thread.current.name = "dirty"
      Thread.current.report_on_exception = false
      Thread.current.abort_on_exception = true
      # Rails 7 keeps per-thread execution state (CurrentAttributes) in an
      # instance variable of Thread.current.
      Thread.current.instance_variable_set(:@execution_state, { user: "first" })
      Thread.current
    end.value
    fresh = [nil, [], nil, [], nil, Thread.report_on_exception, false, false, nil, []]
    results = on_every_worker(first) do
      [Thread.current[:fiber_local], Thread.current.keys,
       Thread.current.thread_variable_get(:thread_var), Thread.current.thread_variables,
       Thread.current.name, Thread.current.report_on_exception,
       Thread.current.abort_on_exception, Thread.pending_interrupt?,
       Thread.current.instance_variable_get(:@execution_state), Thread.current.instance_variables]
    end
    assert(results.any? { |thread, *| thread.equal?(first) }, "no block ran on the cached thread again")
    results.each { |_, *state| assert_equal fresh, state }
  end

  # A worker's native thread (what top -H, perf and gdb show) has a name of
  # its own, not the monitor's (its creator's), and gets it back after a
  # block named its thread; its Ruby name stays nil.
  def test_workers_native_threads_are_named
    skip "no /proc" unless File.directory?("/proc/self/task")
    skip "M:N threads share native threads" if ENV["RUBY_MN_THREADS"] == "1"
    comm = ->(t) { File.read("/proc/self/task/#{t.native_thread_id}/comm").chomp }
    worker, during = RapidThread.spawn { Thread.current.name = "mine"; [Thread.current, comm[Thread.current]] }.value
    assert_equal "mine", during
    results = on_every_worker(worker) { [comm[Thread.current], Thread.current.name] }
    assert(results.any? { |thread, *| thread.equal?(worker) }, "no block ran on the named thread again")
    results.each { |_, native, name| assert_equal ["rapid_thread wo", nil], [native, name] }
  end

  # A block that froze Thread.current retires its worker: the next block on
  # it could not even set a fiber-local (it was reused as it was).
  def test_a_worker_whose_thread_was_frozen_is_not_reused
    frozen = RapidThread.spawn { Thread.current.freeze; Thread.current }.value
    # Straight away: a surviving worker would be the newest idle one.
    results = Array.new(5) { RapidThread.spawn { Thread.current[:k] = 1; Thread.current.frozen? }.value }
    assert_equal [false] * 5, results
    wait_until { !frozen.alive? }
  end

  # Singleton methods (or an `extend`) on Thread.current cannot be taken
  # back: that worker is retired, so no later block sees them.
  def test_a_worker_given_singleton_methods_is_not_reused
    changed = RapidThread.spawn do
      def (Thread.current).from_a_previous_block = :leaked
      Thread.current.extend(Comparable)
      Thread.current
    end.value
    # Straight away: a surviving worker would be the newest idle one.
    results = Array.new(5) do
      RapidThread.spawn { [Thread.current.respond_to?(:from_a_previous_block), Thread.current.is_a?(Comparable)] }.value
    end
    assert_equal [[false, false]] * 5, results
    wait_until { !changed.alive? }
  end

  # A flag set on a task while its block's clean-up still runs (here: during
  # the exception report) goes to the worker thread; the next block on that
  # worker must start with the defaults all the same. (A cache of the flags
  # read after each block, to skip resetting them, let it leak.)
  def test_flags_set_during_the_report_do_not_reach_the_next_block
    out = child_output("thread_cache/flags_set_during_the_report_do_not_reach_the_next_block")
    assert_equal "[false, true]\n1\n", out
  end

  # --- priority and ThreadGroup -----------------------------------------------

  # Runs the block with the current thread in `group` at `priority`, and
  # puts it back (ThreadGroup::Default, its priority) after.
  def placed(group, priority)
    saved = Thread.current.priority
    Thread.current.priority = priority
    group.add(Thread.current)
    yield
  ensure
    ThreadGroup::Default.add(Thread.current)
    Thread.current.priority = saved
  end

  # What a block sees of its thread's placement.
  PLACEMENT = lambda do |group|
    [Thread.current.priority, Thread.current.group.equal?(group),
     group.list.include?(Thread.current), ThreadGroup::Default.list.include?(Thread.current)]
  end

  # Thread.new gives its thread the creator's priority and ThreadGroup; a
  # spawned block gets its spawner's as they were at `spawn` (the cache ran
  # it with the worker's own: priority 0, in the group of whoever made the
  # cache's first thread). A priority alone is a worker's for the block.
  def test_a_block_runs_with_its_spawners_priority_on_a_worker
    idle_timeout = RapidThread.idle_timeout
    RapidThread.idle_timeout = 60 # the worker stays for the checks below
    latch = Thread::Queue.new
    stock, (ours, ran_on), waiting = placed(ThreadGroup::Default, -2) do
      [Thread.new { PLACEMENT[ThreadGroup::Default] }.value,
       RapidThread.spawn { [PLACEMENT[ThreadGroup::Default], Thread.current] }.value,
       task { latch.pop; PLACEMENT[ThreadGroup::Default] }]
    end
    assert_equal [-2, true, true, true], stock
    assert_equal stock, ours
    # As at `spawn`, although the spawner's priority is back to 0.
    wait_until { waiting.status == "sleep" }
    assert_equal(-2, waiting.thread.priority)
    latch << 1
    assert_equal stock, waiting.value
    # On a worker, which rests (asleep, at priority 0) after the block; a
    # thread of its own would have ended.
    wait_until { ran_on.stop? }
    assert ran_on.alive?, "a priority alone put the block on a thread of its own"
    assert_equal 0, ran_on.priority
  ensure
    RapidThread.idle_timeout = idle_timeout
  end

  # A block spawned from another ThreadGroup runs in that group, listed
  # there while it runs, as a Thread.new thread (on a thread of its own:
  # a worker could not be in the group from the spawn on), and at the
  # spawner's priority, both as they were at `spawn`.
  def test_a_block_runs_in_its_spawners_group_listed_there_while_it_runs
    g = ThreadGroup.new
    latch = Thread::Queue.new
    stock, ours, waiting = placed(g, -2) do
      [Thread.new { PLACEMENT[g] }.value, RapidThread.spawn { PLACEMENT[g] }.value,
       task { latch.pop; PLACEMENT[g] }]
    end
    assert_equal [-2, true, true, false], stock
    assert_equal stock, ours
    # Placed as at `spawn`, although the spawner has left the group since.
    wait_until { waiting.status == "sleep" }
    wait_until { g.list == [waiting.thread] } # the spawn before has ended
    refute_includes ThreadGroup::Default.list, waiting.thread
    latch << 1
    assert_equal stock, waiting.value
    wait_until { g.list.empty? }
  end

  # Nothing of a block's placement reaches the next block on its worker:
  # neither the spawner's (a non-default priority) nor what a block set
  # itself (a priority and a group). Checked on every live worker, that
  # one included (consecutive spawn + value usually land on the same
  # worker, LIFO, but not always: on 3.3.8 the next block once went to
  # another worker). A spawn from another group leaves no worker there.
  def test_priority_and_group_do_not_reach_the_next_block
    g = ThreadGroup.new
    h = ThreadGroup.new
    set_by_spawner = -> { placed(ThreadGroup::Default, 3) { RapidThread.spawn { Thread.current }.value } }
    set_by_block = -> { RapidThread.spawn { Thread.current.priority = -1; h.add(Thread.current); Thread.current }.value }
    own = placed(g, 2) { RapidThread.spawn { Thread.current }.value }
    wait_until { !own.alive? }
    [set_by_spawner, set_by_block].each do |first_block|
      first = first_block.call
      results = on_every_worker(first) { [Thread.current.priority, Thread.current.group] }
      assert(results.any? { |thread, *| thread.equal?(first) }, "no block ran on that worker again")
      results.each { |_, *state| assert_equal [0, ThreadGroup::Default], state }
      assert_equal [0, ThreadGroup::Default], [first.priority, first.group]
      assert_empty g.list
      assert_empty h.list
    end
  end

  # A block that leaves its worker in a group it cannot leave (it enclosed
  # it) retires that worker: the thread ends there, as a Thread.new thread
  # would, and the next block runs on another, in ThreadGroup::Default.
  # Joining an enclosed group raises as for a Thread.new thread.
  def test_a_worker_stuck_in_an_enclosed_group_retires
    h = ThreadGroup.new
    closed = ThreadGroup.new.tap(&:enclose)
    join_closed = -> { closed.add(Thread.current) rescue [$!.class, $!.message] } # rubocop:disable Style/RescueModifier
    assert_equal Thread.new(&join_closed).value, RapidThread.spawn(&join_closed).value
    first = RapidThread.spawn { h.add(Thread.current); h.enclose; Thread.current }.value
    second, group = RapidThread.spawn { [Thread.current, Thread.current.group] }.value
    refute_same first, second
    assert_same ThreadGroup::Default, group
    wait_until { !first.alive? }
    assert_empty h.list
  end

  # The cache's threads (the monitor, and the workers it makes) are made by
  # whichever thread spawned first, and were born with its priority and
  # group: every later block ran with them, and the group kept listing the
  # cache's threads.
  def test_the_first_spawners_priority_and_group_stay_out_of_the_cache
    out = child_output("thread_cache/the_first_spawners_priority_and_group_stay_out_of_the_cache")
    assert_equal "[[0, true]]\n[]\n", out
  end

  # A spawner in an enclosed group: ThreadGroup#add cannot move a worker in
  # or out, but Thread.new still puts its thread there. The block runs on a
  # thread of its own, which Ruby places as a Thread.new thread (group,
  # priority); compared with what Thread.new does in the running Ruby.
  def test_a_block_spawned_in_an_enclosed_group_is_placed_as_by_thread_new
    out = child_output("thread_cache/a_block_spawned_in_an_enclosed_group_is_placed_as_by_thread_new")
    stock, ours, *rest = out.lines
    assert_equal "[-1, true, true, false, \"can't move from the enclosed thread group\"]\n", stock
    assert_equal stock, ours
    assert_equal ["[true, true, nil]\n", "\"pending\"\n", "\"in block\"\n", "3\n"], rest
  end

  # A group enclosed (or frozen) after the spawn but before the block
  # started, by the spawner's next statement: a Thread.new thread is in the
  # group already, and so is the spawned block's thread. The block runs
  # there, as Thread.new's does (the gem used to fail it with
  # ThreadGroup#add's ThreadError). Compared with the running Ruby's
  # Thread.new.
  def test_a_group_closed_right_after_the_spawn_still_runs_the_block_inside
    out = child_output("thread_cache/a_group_closed_right_after_the_spawn_still_runs_the_block_inside")
    lines = out.lines
    assert_equal 4, lines.size, out
    assert_equal "[:enclose, [true, true]]\n", lines[0]
    assert_equal lines[0], lines[1]
    assert_equal "[:freeze, [true, true]]\n", lines[2]
    assert_equal lines[2], lines[3]
  end

  # A frozen group: Thread.new refuses to start a thread there
  # (ThreadError), and so does spawn.
  def test_a_spawn_in_a_frozen_group_raises_as_thread_new
    out = child_output("thread_cache/a_spawn_in_a_frozen_group_raises_as_thread_new")
    stock, ours, pending = out.lines
    assert_equal "[ThreadError, \"can't start a new thread (frozen ThreadGroup)\"]\n", stock
    assert_equal stock, ours
    assert_equal "0\n", pending
  end

  # That thread of its own killed before its body runs (in a :thread_begin
  # hook): as for a Thread.new thread, a join returns and the value is nil.
  def test_a_block_whose_own_thread_is_killed_before_it_runs_is_killed
    out = child_output("thread_cache/a_block_whose_own_thread_is_killed_before_it_runs_is_killed")
    stock, ours = out.lines
    assert_equal "[true, nil, false]\n", stock
    assert_equal stock, ours
  end

  # Threads of their own lost before their body ran, whose tasks nobody
  # joins or polls, are not kept for good: the list of threads of their own
  # is swept when it doubles (from 64), before the next such spawn.
  def test_lost_threads_of_their_own_are_swept_by_later_spawns
    out = child_output("thread_cache/lost_threads_of_their_own_are_swept_by_later_spawns")
    assert_equal "64\n1\n", out
  end

  # --- exceptions ------------------------------------------------------------

  def test_report_is_byte_for_byte_thread_news
    child = "thread_cache/report_is_byte_for_byte_thread_news"
    out = child_output(child)
    stock, ours, named, quiet, frame = eval(out) # rubocop:disable Security/Eval
    # The oracle itself reported the exception: a header, then boom's frame.
    path = child_script(child)
    assert_match(/\A#{Regexp.escape("#{path}:#{child_line(child, 'def boom')}")}:in .*boom'\z/, frame)
    assert_equal "#<Thread:0xADDR #{path}:#{child_line(child, 'BLOCK = ')} run> terminated with exception " \
                 "(report_on_exception is true):\n#{frame}: bad value (ArgumentError)\n", stock.lines.first(2).join
    assert_equal stock, ours
    assert_match(/\A#<Thread:0xADDR@w #{Regexp.escape(path)}:\d+ run> terminated/, named)
    assert_equal "", quiet
  end

  def test_report_follows_the_global_default
    out = child_output("thread_cache/report_follows_the_global_default", quiet: true)
    assert_equal "false\n#<RuntimeError: quiet>\n", out
  end

  def test_abort_on_exception_raises_in_main_thread
    %w[task global].each do |setting|
      _out, err, status = run_ruby("thread_cache/abort_on_exception_raises_in_main_thread", setting)
      refute status.success?, setting
      assert_match(/fatal in block \(RuntimeError\)/, err)
    end
  end

  def test_exit_in_a_block_exits_the_process
    out, _err, status = run_ruby("thread_cache/exit_in_a_block_exits_the_process")
    assert_equal 3, status.exitstatus
    assert_equal "", out
  end

  def test_worker_survives_an_exception
    worker = nil
    a = task { worker = Thread.current; raise "x" }
    assert_raises(RuntimeError) { a.join }
    assert worker.alive?, "the worker died with the block's exception"
    assert(on_every_worker(worker) { nil }.any? { |thread, *| thread.equal?(worker) },
           "the worker never served another block")
  end

  # --- kill and raise --------------------------------------------------------

  def test_kill_a_running_block_runs_its_ensure
    q = Thread::Queue.new
    ensured = Thread::Queue.new
    t = task do
      q.pop
    ensure
      ensured << :ran
    end
    wait_until { t.status == "sleep" }
    assert_same t, t.kill
    assert_same t, t.join(10)
    assert_equal false, t.status
    assert_nil t.value
    assert_equal :ran, ensured.pop(timeout: 5)
    assert_equal 5, RapidThread.spawn { 5 }.value, "the cache replaces a killed worker"
  end

  # Spawns tasks and acts on each at once, while it is likely not to have
  # started (a GVL switch in between is possible, so a test looks at many
  # outcomes); returns [what join gave, whether the block ran] for each.
  def act_on_fresh_tasks(n = 50)
    Array.new(n) do
      ran = []
      t = RapidThread.spawn { ran << true }
      t.report_on_exception = false
      yield t
      got = begin
        t.join(10)
      rescue Exception => e # rubocop:disable Lint/RescueException
        e
      end
      [got.equal?(t) ? :joined : got.class, !ran.empty?]
    end
  end

  def test_kill_before_start_never_runs_the_block
    outcomes = act_on_fresh_tasks(&:kill)
    assert_includes outcomes, [:joined, false], "no kill stopped a block before it ran"
    assert_equal [:joined], outcomes.map(&:first).uniq
  end

  def test_raise_before_start_replaces_the_block
    outcomes = act_on_fresh_tasks { |t| t.raise(IOError, "early") }
    assert_includes outcomes, [IOError, false], "no raise replaced a block before it ran"
    refute_includes outcomes, [:joined, false], "a block neither ran nor raised"
    t = RapidThread.spawn { 1 }
    t.join
    assert_nil t.raise(1), "raise on an ended task is ignored, as Thread#raise on a dead thread"
    q = Thread::Queue.new
    running = task { q.pop }
    wait_until { running.status == "sleep" }
    assert_raises(TypeError) { running.raise(1) }
    q << 1
  end

  def test_raise_in_a_running_block
    q = Thread::Queue.new
    t = task { q.pop }
    wait_until { t.status == "sleep" }
    assert_nil t.raise(ArgumentError, "from outside")
    e = assert_raises(ArgumentError) { t.join(10) }
    assert_equal "from outside", e.message
  end

  # --- liveness and the cache ------------------------------------------------

  def test_every_block_starts_even_when_all_others_block
    n = 64
    m = Mutex.new
    cv = ConditionVariable.new
    arrived = 0
    tasks = Array.new(n) do
      task do
        m.synchronize do
          arrived += 1
          if arrived == n
            cv.broadcast
          else
            cv.wait(m) until arrived == n
          end
        end
        :released
      end
    end
    assert_equal [:released] * n, tasks.map { |t| t.join(TEST_TIMEOUT / 2) && t.value }
    assert_operator RapidThread.cache_stats[:created], :>=, n
  end

  # Blocks spawned in a burst that each block at once in one of the gem's
  # waits (consumers of an empty queue) get their workers from the thread
  # that blocks, which asks for them as it does: the monitor's periodic
  # check never finds them stalled (it found them so once per doubling
  # batch, one tick apart, before). From an empty cache, or idle workers
  # left by earlier tests would take the blocks and nothing would grow.
  def test_blocks_that_block_at_once_get_workers_as_they_block
    n = 20
    empty_the_cache
    q = RapidThread::Queue.new
    started = RapidThread::Queue.new
    stalls, created = RapidThread.cache_stats.values_at(:stalls, :created)
    tasks = Array.new(n) do
      task do
        started << true
        q.pop
      end
    end
    n.times { assert started.pop(timeout: TEST_TIMEOUT / 2), "every block started" }
    assert_equal stalls, RapidThread.cache_stats[:stalls]
    assert_operator RapidThread.cache_stats[:created] - created, :>=, n
    n.times { q << :done }
    assert_equal [:done] * n, tasks.map { |t| t.join(TEST_TIMEOUT / 2) && t.value }
  end

  # A wait at exit (in the ensure of a block Ruby kills), with a task
  # pending and no monitor, whose hook cannot make one (the process is
  # ending): stock's wait never raises ThreadError, and neither does this
  # (it did about 1 exit in 20 without the killed monitor). A thread switch
  # before the kill (GC.stress) can let the monitor start the task's
  # worker first: then nothing is pending, and the wait has nothing to ask.
  def test_a_wait_whose_worker_cannot_be_made_returns_as_stocks
    out = child_output("thread_cache/a_wait_whose_worker_cannot_be_made_returns_as_stocks", timeout: 20)
    assert_match(/\Apending [01]\nensure: nil\n\z/, out)
  end

  # A worker woken for a task and killed before it takes it must not strand
  # the task (nobody joins it, and nothing else is spawned): before the fix
  # it stayed pending for good, where Thread.new would have run it.
  def test_a_task_survives_the_kill_of_the_worker_woken_for_it
    out = child_output("thread_cache/a_task_survives_the_kill_of_the_worker_woken_for_it")
    assert_equal "[true, false]\n", out
  end

  # A thread killed in a :thread_begin hook (where a pending Thread#kill
  # lands too) ends before its body runs. A worker that never reached the
  # pool stayed counted as starting, and the monitor waited for it forever:
  # the block never started.
  def test_a_worker_killed_before_its_body_runs_does_not_strand_the_task
    out = child_output("thread_cache/a_worker_killed_before_its_body_runs_does_not_strand_the_task")
    assert_equal "[true, :ran, 1]\n", out
  end

  # The same with the monitor killed too (a stray kill): the join saw a
  # worker "starting" and did not restart the monitor, which alone can find
  # out that the worker is dead.
  def test_a_join_restarts_the_monitor_while_a_lost_worker_counts_as_starting
    out = child_output("thread_cache/a_join_restarts_the_monitor_while_a_lost_worker_counts_as_starting")
    assert_equal "[true, :ran]\n", out
  end

  # A cold spawn (every worker blocked) made inside the spawner's
  # handle_interrupt masks, with an exception deferred by them: it must
  # stay deferred until the block ends. A worker made by the spawner from
  # inside handle_interrupt(Object => :immediate), tried and reverted,
  # raised it in the spawn: the C block's frame pop checks interrupts
  # under that mask (docs/design-details.md, "Growth rule").
  def test_a_cold_spawn_keeps_the_spawners_masks
    out = child_output("thread_cache/a_cold_spawn_keeps_the_spawners_masks")
    assert_equal "[:not_raised, \"deferred\", :t1]\n", out
  end

  # A lost worker whose task another worker took: the monitor went to sleep
  # with it still counted as starting. Later a woken idle worker is killed
  # before it runs; its exit counted the lost worker as coming, and so did
  # the join: nobody started the task. (Found by review, session 8.)
  def test_a_lost_worker_counted_as_starting_does_not_strand_a_later_task
    out = child_output("thread_cache/a_lost_worker_counted_as_starting_does_not_strand_a_later_task")
    assert_equal "[true, :t2]\n", out
  end

  # A new thread held in a :thread_begin hook (it waits) never reaches the
  # pool; the monitor waited for it and started no other worker, so a block
  # that would release it never ran. Thread.new holds only its own thread.
  def test_a_worker_held_before_its_body_runs_does_not_stop_growth
    out = child_output("thread_cache/a_worker_held_before_its_body_runs_does_not_stop_growth")
    assert_equal "[true, :t2]\n", out
  end

  # Fiber storage (Ruby 3.2+): a Thread.new thread starts with a copy of
  # its spawner's. Workers kept the copy their creator (the monitor, made
  # by the first spawn) had, and whatever a block stored: every block saw
  # the first spawner's request and the previous block's keys.
  def test_a_block_starts_with_its_spawners_fiber_storage
    skip "fiber storage is carried on Ruby 3.3+" unless RUBY_VERSION >= "3.3"
    out = child_output("thread_cache/a_block_starts_with_its_spawners_fiber_storage")
    assert_equal "[true, [:first, :first, 1, nil, nil, :fiber], 1]\n", out
  end

  # The monitor, made by the first spawn, kept the copy of its creator's
  # fiber storage it was born with (found by review, session 30).
  def test_the_monitor_lets_go_of_its_creators_fiber_storage
    skip "fiber storage is carried on Ruby 3.3+" unless RUBY_VERSION >= "3.3"
    out = child_output("thread_cache/the_monitor_lets_go_of_its_creators_fiber_storage")
    assert_equal "[nil, 1]\n", out
  end

  # A join of a pending task runs the pool's hook first (Ruby calls that
  # can switch threads); a task that ended meanwhile had woken its joiners
  # before this one enlisted, and the join slept out its 10 ms re-check.
  def test_a_join_of_a_task_that_ends_in_the_join_hook_does_not_sleep
    out = child_output("thread_cache/a_join_of_a_task_that_ends_in_the_join_hook_does_not_sleep")
    assert_equal "[:done, :no_sleep]\n", out
  end

  # A :thread_begin hook that gives every new thread a singleton class (an
  # APM, a debugger) must not get every worker retired after one block.
  def test_a_worker_born_with_a_singleton_class_is_reused
    out = child_output("thread_cache/a_worker_born_with_a_singleton_class_is_reused")
    assert_equal "true\n", out
  end

  # The same for the monitor: killed before its body ran, it never cleared
  # itself (monitor_exit), so the next join found it "running" and waited.
  def test_a_monitor_killed_before_its_body_runs_is_replaced
    out = child_output("thread_cache/a_monitor_killed_before_its_body_runs_is_replaced")
    assert_equal "[:ran]\n", out
  end

  # The wake-up of a woken worker killed before it runs goes to the newest
  # idle worker left, as every wake-up of the cache does (LIFO); it went
  # to the oldest, the coldest one and the one closest to its idle_timeout.
  def test_the_wake_up_of_a_killed_worker_goes_to_the_newest_idle_one
    out = child_output("thread_cache/the_wake_up_of_a_killed_worker_goes_to_the_newest_idle_one")
    assert_equal "[:middle, false]\n", out
  end

  # Two idle workers woken for two tasks; one is killed before it runs,
  # with no idle worker left to pass its wake-up to. The other takes the
  # first task, which blocks: the second must still start.
  def test_a_task_survives_the_kill_of_a_woken_worker_with_nobody_idle
    out = child_output("thread_cache/a_task_survives_the_kill_of_a_woken_worker_with_nobody_idle")
    assert_equal "[true, false]\n", out
  end

  # An exception raised in the spawner while spawn looks for a worker (here
  # from a TracePoint on the `stop?` it calls on busy workers; in life a
  # Thread#raise or Ctrl-C) leaves the task queued: it must still start,
  # with no join and no later spawn to help it.
  def test_a_task_queued_by_an_interrupted_spawn_still_starts
    out = child_output("thread_cache/a_task_queued_by_an_interrupted_spawn_still_starts")
    assert_equal "interrupted\ntrue\n", out
  end

  def test_a_block_starts_even_when_others_run_forever
    stop = false
    passing = Array.new(3) { task { Thread.pass until stop } }
    computing = task { 1 until stop } # rubocop:disable Style/InfiniteLoop
    assert_equal :ok, RapidThread.spawn { :ok }.value
    stop = true
    (passing << computing).each(&:join)
  end

  def test_short_blocks_reuse_a_few_threads
    before = RapidThread.cache_stats
    n = GC_STRESS ? 200 : 20_000 # scaled() left 85 s of GC.stress here
    (n / 10).times { RapidThread.spawn {}.join }
    tasks = Array.new(n) { RapidThread.spawn { 1 } }
    assert_equal n, tasks.sum(&:value)
    after = RapidThread.cache_stats
    assert_operator after[:created] - before[:created], :<=, 64
    assert_operator after[:reused] - before[:reused], :>=, n
    assert_operator after[:busy], :<=, before[:busy], "a worker stayed busy after its block"
  end

  def test_idle_threads_expire
    RapidThread.idle_timeout = 0.05
    assert_in_delta 0.05, RapidThread.idle_timeout
    # The workers that ran these blocks (other tests' workers may be around).
    workers = Array.new(4) { RapidThread.spawn { sleep 0.001; Thread.current } }.map(&:value).uniq
    wait_until { workers.none?(&:alive?) }
    assert_equal 1, RapidThread.spawn { 1 }.value
  ensure
    RapidThread.idle_timeout = 3
  end

  # A burst of blocked blocks leaves many idle workers. New work goes to the
  # most recently idle one (LIFO), so sequential spawn+value keeps using a
  # few hot workers, and the rest reach idle_timeout and exit although work
  # keeps arriving. (FIFO woke the longest-idle worker each time: a
  # round-robin over all of them, none ever idle long enough to exit.)
  # Starts from an empty cache. Idle workers left by earlier tests were
  # woken by their `idle_timeout =` / `max_idle =` resets (setters wake
  # every idle worker); on one CPU some had not run yet, and a spawn counts
  # on a woken worker rather than wake another: the first 28 steady spawns
  # went to 28 of them, one each (CI, 3.4.5, taskset -c 0).
  def burst(n)
    empty_the_cache
    q = Thread::Queue.new
    tasks = Array.new(n) { task { q.pop; Thread.current } }
    wait_until { tasks.all? { |t| t.status == "sleep" } }
    n.times { q << 1 }
    # Until every one of them waits on the idle list: one that enlists
    # later is the most recently idle and rightly gets the next block
    # (under GC.stress such a straggler spread the sequential work over 6).
    tasks.map(&:value).uniq.tap { |workers| wait_until { workers.all?(&:stop?) } }
  end

  # A worker back from its block reads idle_timeout and max_idle, then
  # calls Ruby (Thread#alive?, which can switch threads) before it enlists
  # on the idle list. A setter that ran there found nobody to wake, and the
  # worker slept out the old idle_timeout: with max_idle = 0 it stayed idle
  # for a minute (seen in CI as burst's 15 s wait for the idle workers to
  # exit, after a test that left idle_timeout at 60 for its worker).
  def test_a_setting_changed_as_a_worker_goes_idle_reaches_it
    out = child_output("thread_cache/a_setting_changed_as_a_worker_goes_idle_reaches_it")
    assert_equal "[true, true, 0]\n", out
  end

  # The same window let two workers pass the `max_idle` check before
  # either enlisted: one more than max_idle stayed idle for idle_timeout
  # (found by review, session 29).
  def test_two_workers_going_idle_at_once_keep_max_idle
    out = child_output("thread_cache/two_workers_going_idle_at_once_keep_max_idle")
    assert_equal "[true, true, 1]\n", out
  end

  def test_after_a_burst_work_goes_to_the_most_recently_idle_worker
    workers = burst(16)
    assert_equal 16, workers.size
    used = Array.new(40) { RapidThread.spawn { Thread.current }.value }.uniq
    # One worker, two at most: when the spawner runs before the worker
    # that just finished is back on the idle list, the newest idle worker
    # is woken, finds the task taken and comes back as the newest. Under
    # GC.stress this spread the work over 5 to 10 workers while idle
    # workers whose time was up took tasks (they leave them now). FIFO
    # wakes all 16 in turn.
    assert_operator used.size, :<=, 4, "sequential work spread over #{used.size} workers"
  end

  def test_after_a_burst_the_cache_shrinks_under_steady_load
    RapidThread.idle_timeout = 0.3
    workers = burst(16)
    used = {}
    # Steady sequential load throughout; the cache must shrink meanwhile.
    wait_until(RapidThread.idle_timeout + (GC_STRESS ? 30 : 1.5), "all but 4 of the burst's workers to exit") do
      used[RapidThread.spawn { Thread.current }.value] = true
      workers.count(&:alive?) <= 4
    end
    # An idle worker whose time is up leaves a pending task to the worker
    # woken for it and ends. (Taking it kept the worker for another
    # idle_timeout: every burst worker took its turn as its time came.)
    assert_operator used.size, :<=, 4, "the steady load ran on #{used.size} workers"
  ensure
    RapidThread.idle_timeout = 3
  end

  # With no idle time at all, every worker's time is up the moment it
  # looks for work: one started or woken for a task must still take it.
  def test_blocks_run_with_a_zero_idle_timeout
    RapidThread.idle_timeout = 0
    assert_equal (1..50).to_a, (1..50).map { |i| RapidThread.spawn(i) { |x| x }.value }
    q = Thread::Queue.new
    tasks = Array.new(8) { |i| RapidThread.spawn(i) { |x| q.pop + x } }
    wait_until { tasks.all? { |t| t.status == "sleep" } }
    8.times { q << 10 }
    assert_equal (10..17).to_a, tasks.map(&:value)
  ensure
    RapidThread.idle_timeout = 3
  end

  def test_max_idle_bounds_the_idle_threads
    RapidThread.max_idle = 2
    q = Thread::Queue.new
    tasks = Array.new(6) { task { q.pop; Thread.current } }
    wait_until { tasks.all? { |t| t.status == "sleep" } }
    6.times { q << 1 }
    workers = tasks.map(&:value).uniq
    assert_equal 6, workers.size
    # At most max_idle of them stay; the others exit as soon as they are idle.
    wait_until { workers.count(&:alive?) <= 2 }
    wait_until { RapidThread.cache_stats[:idle] <= 2 } # idle workers of other tests were woken to exit
  ensure
    RapidThread.max_idle = 64
  end

  def test_configuration_errors
    assert_raises(ArgumentError) { RapidThread.idle_timeout = -1 }
    assert_raises(ArgumentError) { RapidThread.max_idle = -1 }
    assert_raises(TypeError) { RapidThread.max_idle = "1" }
    stats = RapidThread.cache_stats
    %i[spawned reused created idle busy peak].each { |k| assert_kind_of Integer, stats[k] }
  end

  # --- kills that land after the block ---------------------------------------

  # A kill that hits the clean-up after a block (here: Ruby code that the
  # clean-up calls on the worker's own Thread, blocked until the test kills
  # it from outside) must end the worker. Ruby has already marked the thread
  # as being killed, so a dropped kill would leave a worker that no later
  # kill can stop.
  %w[keys name report_on_exception abort_on_exception].each do |meth|
    define_method("test_kill_during_clean_up_in_#{meth}_ends_the_worker") do
      RapidThread.idle_timeout = 60 # the worker must end by the kill, not expire
      inside = RapidThread::Queue.new
      gate = RapidThread::Queue.new
      RapidThread.spawn do
        me = Thread.current
        me.define_singleton_method(meth) do |*|
          inside << me
          gate.pop
        end
      end
      worker = inside.pop(timeout: 10)
      assert_kind_of Thread, worker
      wait_until { worker.status == "sleep" }
      worker.kill
      wait_until(10, "the worker to end") { !worker.alive? }
      assert_equal 3, RapidThread.spawn { 3 }.value, "the cache goes on with another worker"
    ensure
      RapidThread.idle_timeout = 3
    end
  end

  def test_kill_during_the_exception_report_ends_the_worker
    RapidThread.idle_timeout = 60
    inside = RapidThread::Queue.new
    gate = RapidThread::Queue.new
    errors = Object.new
    errors.define_singleton_method(:write) do |*|
      inside << Thread.current
      gate.pop
    end
    old, $stderr = $stderr, errors
    t = RapidThread.spawn { raise "reported" }
    worker = inside.pop(timeout: 10)
    assert_kind_of Thread, worker
    wait_until { worker.status == "sleep" }
    worker.kill
    assert_raises(RuntimeError) { t.join(10) }
    wait_until(10, "the worker to end") { !worker.alive? }
  ensure
    $stderr = old if old
    RapidThread.idle_timeout = 3
  end

  # Random kills of running tasks with GC.stress widening every window
  # between the block's end and the task's finish (each allocation in the
  # clean-up runs a full GC). Every task must end, every worker a kill hit
  # must end, and the process must exit promptly.
  def test_random_kills_under_gc_stress_leave_no_stuck_worker
    out = child_output("thread_cache/random_kills_under_gc_stress_leave_no_stuck_worker", timeout: 240)
    assert_match(/killed \d+/, out)
  end

  # A stray Thread#kill of the monitor while a task waits for a worker: a
  # join, or a program that only polls (`alive?`, `status`: no spawn, no
  # join), gets the task run instead of waiting forever (Thread.new's thread
  # would have ended). Behind a blocked block the spawn had asked the
  # monitor for a worker; behind a busy block that never ends, only the
  # monitor's tick grows the cache, so a join waited forever there too.
  def test_a_task_left_pending_by_a_killed_monitor_still_runs
    max_idle = RapidThread.max_idle
    %i[blocked busy].product(%i[join alive? status]).each do |ahead, wait|
      t, b, q = orphaned_task(ahead)
      if wait == :join
        assert_same t, t.join(TEST_TIMEOUT / 2), "#{ahead}/#{wait}"
      else
        wait_until(TEST_TIMEOUT / 2, "#{ahead}/#{wait} to see the task end") { !t.public_send(wait) }
      end
      assert_equal :ran, t.value
    ensure
      q&.push(1)
      b&.join(TEST_TIMEOUT / 2)
    end
  ensure
    RapidThread.max_idle = max_idle
  end

  # A task left pending by a killed monitor: spawned with no idle worker,
  # behind a block that `ahead` keeps busy, the monitor killed before it
  # acts. Returns the task, the block's task and its queue. A preemption
  # between the spawn and the kill can let the monitor act first (the task
  # then runs): that attempt is cleaned up and made again.
  def orphaned_task(ahead)
    10.times do
      q = Thread::Queue.new
      b, monitor = block_and_armed_monitor(ahead, q)
      t = RapidThread.spawn { :ran }
      monitor.kill
      assert monitor.join(TEST_TIMEOUT / 2), "the killed monitor ended"
      return [t, b, q] if RapidThread.cache_stats[:pending] == 1

      q << 1
      [b, t].each { |x| assert_same x, x.join(TEST_TIMEOUT / 2) }
    end
    flunk "the monitor acted before the kill in every attempt"
  end

  # Spawns a block that waits on `q` (:blocked) or runs until `q` has an
  # item (:busy), with no idle worker to take it, so the spawn arms the
  # monitor (an earlier test may have killed it). Returns the task and the
  # monitor, once the block runs and the monitor sleeps with nothing
  # pending. Sets max_idle to 0: the caller restores it.
  def block_and_armed_monitor(ahead, q)
    RapidThread.max_idle = 0
    wait_until { RapidThread.cache_stats[:idle].zero? && RapidThread.cache_stats[:threads].zero? }
    started = false
    b = task do
      started = true
      ahead == :blocked ? q.pop : (Thread.pass while q.empty?)
    end
    wait_until { started && (ahead == :busy || b.status == "sleep") }
    monitor = Thread.list.find { |th| th.name == "rapid_thread monitor" }
    refute_nil monitor
    wait_until { monitor.status == "sleep" && RapidThread.cache_stats[:pending].zero? }
    [b, monitor]
  end

  # --- process lifecycle -----------------------------------------------------

  def test_idle_threads_do_not_delay_exit
    out = child_output("thread_cache/idle_threads_do_not_delay_exit", timeout: 10)
    assert_equal "at_exit ran\n", out
  end

  def test_spawn_under_handle_interrupt_never_leaves_killable_threads
    # Ruby threads inherit their creator's handle_interrupt masks; cached
    # threads must not, or Task#kill and process exit could never stop them.
    out = child_output("thread_cache/spawn_under_handle_interrupt_never_leaves_killable_threads", timeout: 20)
    assert_equal "true\n", out
  end

  def test_exit_time_is_not_the_idle_timeout
    t0 = now
    child_output("thread_cache/exit_time_is_not_the_idle_timeout", timeout: 15)
    assert_operator now - t0, :<, 10
  end

  # Once the process is ending (the main thread killed, every thread told
  # to end), Thread.new raises ThreadError. A spawn then, from the ensure
  # of a thread killed at exit, made a thread Ruby never told to end, and
  # the exit waited for it forever; and a worker whose block's ensure
  # raised so waited out its idle timeout before ending.
  def test_spawn_while_the_process_ends_raises_as_thread_new_does
    t0 = now
    out = child_output("thread_cache/spawn_while_the_process_ends_raises_as_thread_new_does", timeout: 20, quiet: true)
    assert_equal ["task new: can't alloc thread", "task spawn: can't alloc thread",
                  "thread new: can't alloc thread", "thread spawn: can't alloc thread"], out.lines.map(&:chomp).sort
    assert_operator now - t0, :<, 15
  end

  def test_fork_child_has_an_empty_cache
    skip "no fork" unless Process.respond_to?(:fork)
    q = Thread::Queue.new
    blocked = task { q.pop }
    wait_until { blocked.status == "sleep" }
    rd, wr = IO.pipe
    pid = fork do
      rd.close
      stats = RapidThread.cache_stats
      v = RapidThread.spawn(20) { |x| x + 1 }.value
      wr.write Marshal.dump([stats[:threads], stats[:busy], v, blocked.alive?, blocked.join(1).equal?(blocked)])
      wr.close
      exit!(0)
    end
    wr.close
    result = Marshal.load(rd.read)
    Process.wait(pid)
    assert_equal [0, 0, 21, false, true], result
    assert blocked.alive?, "the parent's task is unaffected"
    q << 1
    blocked.join
    assert_equal 2, RapidThread.spawn { 2 }.value
  end

  # --- GC --------------------------------------------------------------------

  # A Thread is not write-barrier protected: one referenced by an old
  # object is "remembered" (shady), and when they outnumber the GC's limit
  # the next GC is a major one (GC.latest_gc_info(:major_by) == :shady).
  # A task held by the program grows old; if it marked its worker, every
  # long-running block added one: 1000 sleeping blocks (vm_thread_close)
  # cost a major GC that 1000 Thread.new threads do not. Read per worker
  # (ObjectSpace.dump's "uncollectible" flag): GC.stat's global count also
  # moved with whatever other tests left behind (Process::Status objects
  # of child processes growing old), and once failed the suite.
  #
  # In a child process: workers are reused, and what earlier tests left
  # alive can hold them too. Under minor-GC stress (seed 46974) an earlier
  # test's task, kept alive by a stale word on a worker's machine stack,
  # had returned an Array holding its worker: 16 of 20 workers were
  # remembered through those old results, not through the tasks here.
  def test_running_tasks_leave_their_threads_out_of_the_remembered_set
    out = child_output("thread_cache/running_tasks_leave_their_threads_out_of_the_remembered_set")
    n, remembered = eval(out) # rubocop:disable Security/Eval
    assert_operator remembered, :<, n / 2, "workers of #{n} running tasks remembered by the GC"
  end

  def test_pending_blocks_arguments_and_results_survive_gc
    assert_equal "[]", compaction_check("pending_blocks")
  end

  def test_pending_blocks_groups_survive_gc_and_compaction
    assert_equal "[]", compaction_check("pending_groups")
  end
end
