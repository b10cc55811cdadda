# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/fiber_scheduler"

# RapidThread::Queue against Ruby 3.1's Thread::Queue (thread_sync.c) and
# Ruby 3.2's pop(timeout:).
class QueueTest < RapidThreadTest
  Q = GemQueue

  def test_push_returns_self_and_aliases
    q = Q.new
    assert_same q, q.push(1)
    assert_same q, q << 2
    assert_same q, q.enq(3)
    assert_equal 3, q.size
    assert_equal 3, q.length
    assert_equal [1, 2, 3], [q.pop, q.shift, q.deq]
    assert_empty q
    # Aliases, as stock's (rbs's runtime checker replaces each method, alias
    # included, by a wrapper of its own name).
    unless RBS_MODE
      %i[enq <<].each { |m| assert_equal :push, Q.instance_method(m).original_name }
      %i[deq shift].each { |m| assert_equal :pop, Q.instance_method(m).original_name }
      assert_equal :length, Q.instance_method(:size).original_name
    end
  end

  def test_fifo_order_and_clear
    q = Q.new
    100.times { |i| q << i }
    assert_equal (0...50).to_a, Array.new(50) { q.pop }
    assert_same q, q.clear
    assert_equal 0, q.size
    assert q.empty?
  end

  def test_new_with_enumerable
    assert_equal [1, 2, 3], drain(Q.new([1, 2, 3]))
    assert_equal [1, 2, 3], drain(Q.new(1..3))
    assert_equal [], drain(Q.new(nil))
    assert_equal error_of { StockQueue.new(1) }, error_of { Q.new(1) }
    assert_equal TypeError, error_of { Q.new(1) }.first
    e = assert_raises(ArgumentError) { ill_typed { Q.new([], []) } }
    assert_equal "wrong number of arguments (given 2, expected 0..1)", e.message
  end

  # Queue.new without arguments takes a fast entry point of its own
  # (queue.rs `initialize_fast`); calling initialize again behaves as
  # stock's, with or without items, open or closed.
  def test_initialize_again_matches_stock
    [StockQueue, Q].map do |k|
      q = k.new([1, 2])
      q.send(:initialize)
      a = [q.size, q.closed?]
      q.send(:initialize, [3])
      q.close
      q.send(:initialize)
      a + [q.size, q.closed?, q.closed? ? q.pop : :open] # an open queue's pop would block
    end.then { |stock, ours| assert_equal stock, ours }
  end

  def test_initial_items_are_not_shared_with_the_argument
    a = [1, 2]
    q = Q.new(a)
    a << 3
    assert_equal [1, 2], drain(q)
  end

  def test_pop_non_block_on_empty_raises_thread_error
    e = assert_raises(ThreadError) { Q.new.pop(true) }
    assert_equal "queue empty", e.message
    assert_equal 1, Q.new([1]).pop(true)
  end

  def test_pop_timeout_expires_with_nil
    q = Q.new
    t0 = now
    assert_nil q.pop(timeout: 0.05)
    assert_operator now - t0, :>=, 0.05
    assert_equal 0, q.num_waiting
  end

  def test_pop_timeout_zero_returns_at_once
    q = Q.new
    t0 = now
    assert_nil q.pop(timeout: 0)
    assert_nil q.pop(timeout: 0.0)
    assert_nil q.pop(timeout: -1)
    assert_nil q.pop(timeout: Float::NAN)
    assert_operator now - t0, :<, GC_STRESS ? 30 : 1
    q << :x
    assert_equal :x, q.pop(timeout: 0)
  end

  def test_pop_timeout_returns_item_that_arrives_in_time
    q = Q.new
    waiter = spawn_thread { q.pop(timeout: 10) }
    wait_until { q.num_waiting == 1 }
    q << :late
    assert_equal :late, waiter.value
  end

  def test_pop_timeout_argument_errors
    e = assert_raises(ArgumentError) { Q.new.pop(true, timeout: 1) }
    assert_equal "can't set a timeout if non_block is enabled", e.message
    e = assert_raises(TypeError) { ill_typed { Q.new.pop(timeout: "1") } }
    assert_equal "no implicit conversion to float from string", e.message
    e = assert_raises(ArgumentError) { ill_typed { Q.new.pop(bogus: 1) } }
    assert_equal "unknown keyword: :bogus", e.message
    e = assert_raises(ArgumentError) { ill_typed { Q.new.pop(true, false) } }
    assert_equal "wrong number of arguments (given 2, expected 0..1)", e.message
    assert_nil Q.new.pop(false, timeout: 0)
    assert_equal 1, Q.new([1]).pop(true, timeout: nil)
  end

  def test_close
    q = Q.new([1])
    refute q.closed?
    assert_same q, q.close
    assert q.closed?
    assert_same q, q.close, "closing twice is a no-op"
    e = assert_raises(ClosedQueueError) { q.push(2) }
    assert_equal "queue closed", e.message
    assert_kind_of StopIteration, e
    assert_equal 1, q.pop, "items pushed before close are still delivered"
    assert_nil q.pop
    assert_nil q.pop(timeout: 1)
    e = assert_raises(ThreadError) { q.pop(true) }
    assert_equal "queue empty", e.message
  end

  def test_close_wakes_all_blocked_poppers_with_nil
    q = Q.new
    poppers = Array.new(3) { spawn_thread { q.pop } }
    wait_until { q.num_waiting == 3 }
    q.close
    assert_equal [nil, nil, nil], poppers.map(&:value)
    assert_equal 0, q.num_waiting
  end

  def test_blocked_pop_receives_push
    q = Q.new
    popper = spawn_thread { q.pop }
    wait_until { q.num_waiting == 1 }
    q.push :hello
    assert_equal :hello, popper.value
    assert_equal 0, q.num_waiting
  end

  def test_each_push_wakes_one_popper_in_fifo_order
    q = Q.new
    results = Q.new
    3.times do |i|
      spawn_thread { results << [i, q.pop] }
      wait_until { q.num_waiting == i + 1 }
    end
    3.times do |i|
      q << i
      assert_equal [i, i], results.pop(timeout: 10), "push #{i} wakes the longest waiter"
      assert_equal 2 - i, q.num_waiting
    end
  end

  def test_marshal_dump_raises
    e = assert_raises(TypeError) { Marshal.dump(Q.new) }
    assert_equal "can't dump RapidThread::Queue", e.message
  end

  def test_uninitialized_queue_raises_type_error
    q = Q.allocate
    %i[pop empty? clear length size].each do |m|
      e = assert_raises(TypeError) { q.public_send(m) }
      assert_match(/\A#<RapidThread::Queue:0x\h+> not initialized\z/, e.message)
    end
    assert_raises(TypeError) { q.push(1) }
    assert_equal 0, q.num_waiting
    refute q.closed?
  end

  def test_dup_and_clone_behave_as_stock
    [:dup, :clone].each do |m|
      e = assert_raises(NoMethodError) { Q.new.public_send(m) }
      stock = assert_raises(NoMethodError) { StockQueue.new.public_send(m) }
      assert_equal stock.name, e.name
      assert_equal normalize_message(stock.message), normalize_message(e.message)
    end
  end

  def test_freeze_raises_as_in_ruby_3_3
    q = Q.new
    e = assert_raises(TypeError) { q.freeze }
    assert_match(/\Acannot freeze #<RapidThread::Queue:0x\h+>\z/, e.message)
    refute q.frozen?
    q << 1
    assert_equal 1, q.pop
  end

  def test_subclassing
    sub = Class.new(Q) do
      attr_reader :label

      def initialize(label, *rest)
        @label = label
        super(*rest)
      end
    end
    q = sub.new(:jobs, [1, 2])
    assert_equal :jobs, q.label
    assert_kind_of Q, q
    assert_equal [1, 2], drain(q)
    plain = Class.new(Q) { def initialize(*) = super }
    assert_equal [3], drain(plain.new([3]))
  end

  def test_thread_raise_interrupts_pop_and_removes_waiter
    q = Q.new
    popper = spawn_thread { q.pop }
    wait_until { q.num_waiting == 1 }
    popper.raise(IOError, "stop")
    e = assert_raises(IOError) { popper.join }
    assert_equal "stop", e.message
    assert_equal 0, q.num_waiting
    q << 1
    assert_equal 1, q.pop(true), "the item is not taken by the dead waiter"
  end

  def test_thread_kill_interrupts_pop_and_removes_waiter
    q = Q.new
    popper = spawn_thread { q.pop }
    wait_until { q.num_waiting == 1 }
    popper.kill
    assert popper.join(10)
    refute popper.alive?
    assert_equal 0, q.num_waiting
  end

  def test_timeout_interrupts_pop
    q = Q.new
    assert_raises(Timeout::Error) { Timeout.timeout(0.05) { q.pop } }
    assert_equal 0, q.num_waiting
  end

  def test_interrupted_waiter_passes_its_wake_up_on
    # A popper chosen for an item that is interrupted before taking it must
    # hand the wake-up on; otherwise the item sits in the queue while the
    # next popper sleeps.
    scaled(50).times do
      q = Q.new
      a = spawn_thread { q.pop }
      wait_until { q.num_waiting == 1 }
      b = spawn_thread { q.pop }
      wait_until { q.num_waiting == 2 }
      q << :item
      a.raise(IOError) # usually before `a` has run again
      a_result = begin
        a.value
      rescue IOError
        :raised
      end
      if a_result == :item
        q.close # `a` won the race; release `b`
        assert_nil b.value
      else
        assert_equal :item, b.value
      end
      assert_equal 0, q.num_waiting
    end
  end

  def test_sigint_interrupts_a_blocked_pop
    # The helper threads sleep with a limit, not forever: Ruby 3.1's
    # deadlock detector can fire while a signal is still in flight (it runs
    # when the sending thread exits), for stock's Queue as for ours. This
    # test is about delivery, so keep the detector out of it.
    # trap DEFAULT: a child inherits an ignored SIGINT (say, the suite runs
    # as a background job of a non-interactive shell, as `cmd &` in a
    # script does), and Ruby keeps it ignored: Process.kill(:INT, $$) is
    # then dropped, and stock's pop hangs the same way.
    out = child_output("queue/sigint_interrupts_a_blocked_pop")
    assert_equal "interrupted, waiting=0\n", out
  end

  # The Executor's job queue (queue.rs, "Chained wake-ups"): a burst of
  # pushes wakes one sleeping popper; a woken popper killed before it ran
  # passes its wake-up on; every item of many bursts is taken once.
  def test_chained_wakeups_wake_one_popper_per_burst_and_lose_nothing
    out = child_output("queue/chained_wakeups", env: { "RAPID_THREAD_SPIN_US" => "0" })
    assert_equal "1\n[1, [1, 2], 0]\ntrue\ntrue\n", out
  end

  def test_lone_pop_is_a_deadlock
    assert_deadlocks("queue/lone_pop_is_a_deadlock")
  end

  def test_all_threads_blocked_is_a_deadlock
    assert_deadlocks("queue/all_threads_blocked_is_a_deadlock")
  end

  def test_fork_forgets_waiters_and_keeps_items
    skip "fork unavailable" unless Process.respond_to?(:fork)
    q = Q.new
    popper = spawn_thread { q.pop }
    wait_until { q.num_waiting == 1 }
    q2 = Q.new([1, 2])
    r, w = IO.pipe
    pid = fork do
      r.close
      q2 << 3
      report = [q.num_waiting, q2.size, q2.pop, q.tap { |x| x << :c }.pop, q.num_waiting]
      t = Thread.new { q.pop }
      Thread.pass until q.num_waiting == 1
      q << :child
      report << t.value
      w.write Marshal.dump(report)
      w.close
      exit!(0)
    end
    w.close
    report = Marshal.load(r.read)
    Process.wait(pid)
    assert_equal [0, 3, 1, :c, 0, :child], report
    assert_equal 1, q.num_waiting, "the parent's waiter is unaffected"
    q << :parent
    assert_equal :parent, popper.value
  end

  def test_fiber_scheduler_blocks_the_fiber_not_the_thread
    [StockQueue, Q].each do |klass|
      log = []
      Thread.new do
        Fiber.set_scheduler(TestFiberScheduler.new)
        q = klass.new
        Fiber.schedule { log << [:popped, q.pop] }
        Fiber.schedule { log << :pushing; q << :via_fiber }
        Fiber.schedule { log << [:timeout, klass.new.pop(timeout: 0.02)] } if klass == Q
      end.join
      expected = [:pushing, [:popped, :via_fiber]]
      expected << [:timeout, nil] if klass == Q
      assert_equal expected, log, klass.name
    end
  end

  def test_fiber_scheduler_wakes_from_another_thread
    q = Q.new
    got = nil
    t = Thread.new do
      Fiber.set_scheduler(TestFiberScheduler.new)
      Fiber.schedule { got = q.pop }
    end
    wait_until { q.num_waiting == 1 }
    q << :cross_thread
    assert t.join(10)
    assert_equal :cross_thread, got
  end

  def test_many_producers_and_consumers_lose_nothing
    q = Q.new
    per = scaled(20_000)
    producers = Array.new(4) { |p| spawn_thread { per.times { |i| q << (p * per + i) } } }
    consumers = Array.new(4) do
      spawn_thread do
        sum = 0
        count = 0
        while (v = q.pop)
          sum += v
          count += 1
        end
        [sum, count]
      end
    end
    producers.each(&:join)
    q.close
    totals = consumers.map(&:value)
    n = 4 * per
    assert_equal n, totals.sum { |_, c| c }
    assert_equal n * (n - 1) / 2, totals.sum { |s, _| s }
  end

  def test_handoff_with_and_without_spinning
    [0, RapidThread.spin_us].each do |spin|
      with_spin_us(spin) do
        a = Q.new
        b = Q.new
        echo = spawn_thread { while (v = a.pop) do b << v end }
        scaled(2000).times { |i| a << i; assert_equal i, b.pop }
        a.close
        echo.join
      end
    end
  end

  # A wait that slept leaves no mutex locked behind: it sleeps on a private
  # Thread::Mutex (Mutex#sleep returns after a signal handler), unlocked
  # when the wait ends. Ruby keeps a thread's held mutexes in a list that
  # every unlock walks: left locked until the GC freed them, they piled up
  # and made every sleep slower (a third of a ping-pong's CPU time).
  def test_waits_that_slept_leave_no_mutex_locked
    with_spin_us(0) do # every wait sleeps
      a = Q.new
      b = Q.new
      held = spawn_thread do
        GC.disable # the mutexes of the old code stayed until the GC freed them
        50.times { b << a.pop }
        ObjectSpace.each_object(Thread::Mutex).count(&:owned?)
      ensure
        GC.enable
      end
      50.times { |i| a << i; assert_equal i, b.pop }
      assert_equal 0, held.value, "mutexes the waiting thread still holds"
    end
  end

  # A fiber sleeps on a mutex of its own, kept from wait to wait in a
  # hidden instance variable: waits allocate no Thread::Mutex (each did,
  # and the allocations, their frees and the minor GCs they brought cost
  # a sleeping hand-off ~5%), and Ruby code sees no new variable.
  def test_sleeping_waits_allocate_no_mutex_each
    with_spin_us(0) do # every wait sleeps
      a = Q.new
      b = Q.new
      echo = spawn_thread do
        50.times { b << a.pop }
        [Thread.current.instance_variables, Fiber.current.instance_variables]
      end
      a << -1
      assert_equal(-1, b.pop) # both threads have slept once
      GC.disable
      before = ObjectSpace.each_object(Thread::Mutex).count
      49.times { |i| a << i; assert_equal i, b.pop }
      made = ObjectSpace.each_object(Thread::Mutex).count - before
      GC.enable
      assert_operator made, :<=, 2, "mutexes made by 98 sleeping waits"
      assert_equal [[], []], echo.value
      assert_equal [], Fiber.current.instance_variables
    ensure
      GC.enable
    end
  end

  # Waits of several fibers of one thread, each on its own mutex, and of
  # a frozen thread and fiber (which cannot keep one: a fresh mutex each).
  def test_waits_of_fibers_and_frozen_fibers
    with_spin_us(0) do # every wait sleeps
      q = Q.new
      took = Q.new
      t = spawn_thread do
        Thread.current.freeze
        outer = q.pop
        inner = Fiber.new do
          Fiber.current.freeze
          took << :frozen_fiber
          q.pop
        end.resume
        took << :outer
        [outer, inner, q.pop]
      end
      wait_until { t.status == "sleep" }
      q << 1
      assert_equal :frozen_fiber, took.pop
      wait_until { t.status == "sleep" }
      q << 2
      assert_equal :outer, took.pop
      wait_until { t.status == "sleep" }
      q << 3
      assert_equal [1, 2, 3], t.value
    end
  end

  def test_spin_settings
    saved = [RapidThread.spin_us, RapidThread.gvl_spin_us]
    assert_equal 7, (RapidThread.spin_us = 7)
    assert_equal 7, RapidThread.spin_us
    assert_equal 9, (RapidThread.gvl_spin_us = 9)
    assert_equal 9, RapidThread.gvl_spin_us
  ensure
    RapidThread.spin_us, RapidThread.gvl_spin_us = saved
  end

  private

  # Runs the block with RapidThread.spin_us set to `us` (0: every wait
  # sleeps), and puts it back after.
  def with_spin_us(us)
    saved = RapidThread.spin_us
    RapidThread.spin_us = us
    yield
  ensure
    RapidThread.spin_us = saved
  end

  def drain(q)
    Array.new(q.size) { q.pop(true) }
  end
end
