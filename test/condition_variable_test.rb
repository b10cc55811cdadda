# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/fiber_scheduler"
require "monitor"

# RapidThread::ConditionVariable against Ruby 3.1's Thread::ConditionVariable.
class ConditionVariableTest < RapidThreadTest
  CV = GemConditionVariable

  # Starts a thread that waits on cv under m and records what wait returned.
  def waiter(cv, m, timeout = nil, log: nil, tag: nil)
    spawn_thread do
      m.synchronize do
        r = timeout ? cv.wait(m, timeout) : cv.wait(m)
        log << tag if log
        [r, m.owned?]
      end
    end
  end

  def wait_for_sleepers(*threads)
    wait_until { threads.all? { |t| t.status == "sleep" || t.stop? } }
  end

  # A Thread#run between the end of the waiter's spin and its sleep (while
  # it waits for the GVL back) ends the wait, as stock's Mutex#sleep ends.
  def test_thread_run_ends_a_wait_whose_spin_just_ended
    rounds = scaled(400)
    assert_equal "ok #{rounds}\n", child_output("condition_variable/run_while_the_waiter_takes_the_gvl_back", rounds.to_s, timeout: 60)
  end

  def test_signal_wakes_a_waiter_holding_the_mutex_again
    m = Thread::Mutex.new
    cv = CV.new
    t = waiter(cv, m)
    wait_for_sleepers(t)
    assert_same cv, m.synchronize { cv.signal }
    r, owned = t.value
    assert owned, "the mutex is re-acquired before wait returns"
    assert_kind_of Integer, r, "wait returns what Mutex#sleep returns"
  end

  def test_signal_is_fifo_and_broadcast_wakes_all
    m = Thread::Mutex.new
    cv = CV.new
    log = []
    threads = Array.new(3) do |i|
      t = waiter(cv, m, log: log, tag: i)
      wait_for_sleepers(t)
      t
    end
    m.synchronize { cv.signal }
    wait_until { log.size == 1 }
    m.synchronize { cv.signal }
    wait_until { log.size == 2 }
    assert_equal [0, 1], log
    # One at a time: a waiter blocked on `m.lock` also shows "sleep", and
    # one that got into the wait list only after the broadcast waits forever.
    more = Array.new(2) { |i| waiter(cv, m, log: log, tag: 10 + i).tap { |t| wait_for_sleepers(t) } }
    assert_same cv, m.synchronize { cv.broadcast }
    (threads + more).each(&:join)
    assert_equal [0, 1, 2, 10, 11], log.take(2) + log.drop(2).sort
  end

  def test_signal_and_broadcast_without_waiters
    cv = CV.new
    assert_same cv, cv.signal
    assert_same cv, cv.broadcast
  end

  def test_wait_with_timeout_returns_after_the_timeout
    m = Thread::Mutex.new
    cv = CV.new
    t0 = now
    r = m.synchronize { cv.wait(m, 0.05) }
    assert_operator now - t0, :>=, 0.05
    # Mutex#sleep (hence stock's wait) returns nil when the timeout ran out
    # without a wake-up, and the seconds slept when woken.
    assert_nil r
    assert_nil m.synchronize { cv.wait(m, 0) }
    stock_r = m.synchronize { StockConditionVariable.new.wait(m, 0.01) }
    r.nil? ? assert_nil(stock_r) : assert_equal(stock_r, r)
    assert m.synchronize { true }
    stock = StockConditionVariable.new
    [-1, "x", :sym].each do |bad|
      assert_equal error_of { m.synchronize { stock.wait(m, bad) } }, error_of { m.synchronize { cv.wait(m, bad) } }
    end
  end

  def test_wait_argument_and_ownership_errors_match_stock
    stock = StockConditionVariable.new
    ours = CV.new
    [
      ->(cv) { cv.wait },
      ->(cv) { cv.wait(Thread::Mutex.new, 1, 2) },
      ->(cv) { cv.wait(Thread::Mutex.new) },
      # Kernel#sleep through the object: nil is a TypeError before Ruby 3.3
      # and sleeps forever from 3.3 on (stock and ours alike), so 3.3 only
      # checks the timed call.
      *(RUBY_VERSION < "3.3" ? [->(cv) { cv.wait(Object.new) }] : []),
      ->(cv) { cv.wait(Object.new, 0) },
      ->(cv) { cv.signal(1) },
      ->(cv) { Marshal.dump(cv) },
      ->(cv) { cv.dup },
    ].each_with_index do |call, i|
      assert_equal error_of { call.(stock) }, error_of { call.(ours) }, "case #{i}"
    end
  end

  def test_works_with_any_object_that_responds_to_sleep
    m = Thread::Mutex.new
    sleeper = Object.new
    sleeper.define_singleton_method(:sleep) do |timeout|
      m.sleep(timeout)
      :custom_result
    end
    cv = CV.new
    t = spawn_thread { m.synchronize { cv.wait(sleeper) } }
    wait_for_sleepers(t)
    m.synchronize { cv.signal }
    assert_equal :custom_result, t.value
  end

  # A Thread::Mutex whose own singleton class redefines `sleep`: stock's
  # wait calls `mutex.sleep`, so the redefinition runs; the native path
  # is only for a mutex whose class is Thread::Mutex itself.
  def test_a_mutex_with_its_own_sleep_is_slept_on_through_it
    m = Thread::Mutex.new
    calls = []
    m.define_singleton_method(:sleep) do |timeout = nil|
      calls << :own_sleep
      super(timeout)
    end
    results = [StockConditionVariable, CV].map do |klass|
      cv = klass.new
      t = spawn_thread { m.synchronize { cv.wait(m, 0.001) } }
      assert t.join(TEST_TIMEOUT / 2), "#{klass}: the timed wait returned"
      [calls.shift, t.value.nil? || t.value.is_a?(Integer)]
    end
    assert_equal [[:own_sleep, true], [:own_sleep, true]], results
    assert_empty calls, "one sleep per wait"
  end

  def test_monitor_producer_consumer_on_our_condvar
    # MonitorMixin::ConditionVariable is built on Thread::ConditionVariable;
    # point it at ours for this monitor.
    mon = Monitor.new
    items = []
    not_empty = mon.new_cond
    not_empty.instance_variable_set(:@cond, CV.new)
    n = scaled(2000)
    consumer = spawn_thread do
      got = []
      while got.size < n
        mon.synchronize do
          not_empty.wait_while { items.empty? }
          got << items.shift
        end
      end
      got
    end
    n.times do |i|
      mon.synchronize do
        items << i
        not_empty.signal
      end
    end
    assert_equal (0...n).to_a, consumer.value
  end

  def test_interrupted_waiters_leave_and_hold_the_mutex
    m = Thread::Mutex.new
    cv = CV.new
    results = Thread::Queue.new
    make = lambda do
      spawn_thread do
        m.synchronize do
          cv.wait(m)
        rescue IOError, Timeout::Error => e
          results << [e.class, m.owned?]
          raise
        end
      end
    end
    raised = make.()
    wait_for_sleepers(raised)
    raised.raise(IOError)
    assert_equal [IOError, true], results.pop
    # It still holds the mutex until its synchronize unwinds: wait for that
    # (under GC.stress the next waiter could otherwise block on the lock).
    assert_raises(IOError) { raised.join(10) }
    refute m.locked?
    killed = make.()
    wait_for_sleepers(killed)
    killed.kill
    assert killed.join(10)
    refute m.locked?, "a killed waiter releases the mutex through synchronize"
    timed = spawn_thread do
      m.synchronize do
        Timeout.timeout(0.05) { cv.wait(m) }
      rescue Timeout::Error
        m.owned?
      end
    end
    assert timed.value
    # Nobody is left on the wait list: a signal now wakes a new waiter.
    fresh = waiter(cv, m)
    wait_for_sleepers(fresh)
    m.synchronize { cv.signal }
    assert fresh.value.last
  end

  def test_a_chosen_waiter_that_is_interrupted_passes_the_signal_on
    scaled(30).times do
      m = Thread::Mutex.new
      cv = CV.new
      a = waiter(cv, m)
      wait_for_sleepers(a)
      b = waiter(cv, m)
      wait_for_sleepers(b)
      m.synchronize do
        cv.signal
        a.raise(IOError) # a is chosen but has not run yet: it holds no mutex
      end
      a_outcome = begin
        a.value && :woke
      rescue IOError
        :raised
      end
      if a_outcome == :raised
        assert b.join(10), "b must get the signal a could not use"
      else
        m.synchronize { cv.signal }
        b.join(10)
      end
      refute b.alive?
    end
  end

  # A waiter woken by a broadcast and killed before it returns does not
  # pass its wake-up on, as a signal's waiter does (above): the waiter that
  # would get it came later, and would return from a wait that stock never
  # ends. The gem's passed it on, and this child deadlocked: pinned to one
  # CPU, where the woken waiters run in turn, in 15 runs of 15 on 3.1.2,
  # 3.3.8 and 3.4.5 (unpinned, in 12 of 15).
  def test_a_killed_broadcast_waiter_wakes_nobody_who_came_later
    child = "condition_variable/a_killed_broadcast_waiter_wakes_nobody_who_came_later"
    assert_equal child_output(child, "stock", cpu: 0), child_output(child, "gem", cpu: 0)
  end

  def test_lone_wait_is_a_deadlock
    assert_deadlocks("condition_variable/lone_wait_is_a_deadlock")
  end

  def test_fork_forgets_waiters
    skip "fork unavailable" unless Process.respond_to?(:fork)
    m = Thread::Mutex.new
    cv = CV.new
    t = waiter(cv, m)
    wait_for_sleepers(t)
    pid = fork do
      cv.signal # must not touch the parent's (absent) waiter
      r = Thread::Mutex.new.then { |m2| m2.synchronize { cv.wait(m2, 0.01) } }
      exit!(r.nil? ? 0 : 1) # timed out: nil, as Mutex#sleep
    end
    Process.wait(pid)
    assert $?.success?
    m.synchronize { cv.signal }
    assert t.value.last
  end

  def test_fiber_scheduler_wait_blocks_the_fiber
    m = Thread::Mutex.new
    cv = CV.new
    log = []
    Thread.new do
      Fiber.set_scheduler(TestFiberScheduler.new)
      Fiber.schedule { m.synchronize { cv.wait(m); log << :woken } }
      Fiber.schedule { m.synchronize { log << :signalling; cv.signal } }
    end.join
    assert_equal %i[signalling woken], log
  end

  # signal and broadcast wake threads in place, and leave a waiter under
  # a fiber scheduler (whose unblock hook runs Ruby code) and all after
  # it to the full method: the order and the count stay stock's.
  def test_wake_ups_reach_a_scheduler_fiber_among_threads_in_order
    m = Thread::Mutex.new
    cv = CV.new
    log = Thread::Queue.new
    thread_waiter = lambda do |tag|
      spawn_thread { m.synchronize { cv.wait(m) }; log << tag }.tap { |t| wait_for_sleepers(t) }
    end
    fiber_waiter = lambda do |tag|
      spawn_thread do
        Fiber.set_scheduler(TestFiberScheduler.new)
        Fiber.schedule { m.synchronize { cv.wait(m) }; log << tag }
      end.tap { |t| wait_until { t.status == "sleep" } }
    end
    # signal: the fiber first, then the thread behind it.
    f = fiber_waiter.(:fiber)
    a = thread_waiter.(:thread)
    m.synchronize { cv.signal }
    assert f.join(TEST_TIMEOUT / 2), "the first signal went to the fiber, the longest waiter"
    m.synchronize { cv.signal }
    assert a.join(TEST_TIMEOUT / 2)
    assert_equal %i[fiber thread], Array.new(2) { log.pop }
    # broadcast: a thread, the fiber, a thread: all three.
    waiters = [thread_waiter.(:a), fiber_waiter.(:f), thread_waiter.(:b)]
    m.synchronize { cv.broadcast }
    assert waiters.all? { |t| t.join(TEST_TIMEOUT / 2) }
    assert_equal %i[a b f], Array.new(3) { log.pop }.sort
  end

  def test_many_waiters_time_out_and_leave
    m = Thread::Mutex.new
    cv = CV.new
    threads = Array.new(scaled(200)) { waiter(cv, m, 0.05) }
    threads.each(&:join)
    assert threads.all? { |t| t.value.last }
    fresh = waiter(cv, m)
    wait_for_sleepers(fresh)
    m.synchronize { cv.signal }
    assert fresh.join(10)
  end

  # A trap handler that raises or exits while a woken waiter waits to take
  # the mutex back: stock's re-lock runs no handler until it holds the
  # mutex, so the handler's exception (or SystemExit) surfaces with the
  # mutex held and `synchronize` releases it. A re-lock that gave up the
  # mutex turned it into a ThreadError.
  def test_trap_handler_error_during_the_relock_matches_stock
    outs = %w[stock gem].map do |impl|
      out, err, status = run_ruby("condition_variable/trap_handler_error_during_the_relock_matches_stock", impl)
      assert status.success?, "#{impl}: #{status.inspect}\n#{err}"
      out
    end
    assert_equal outs[0], outs[1]
    assert_match(/RuntimeError: boom from trap/, outs[1])
    assert_match(/SystemExit: exit/, outs[1])
  end

  # The native Mutex#sleep path is for a real Thread::Mutex, whatever the
  # constant names: with `Thread::Mutex` rebound to another class, an
  # object of it gets its own `sleep` called (as by stock), and a real
  # mutex still waits and times out (it once raised TypeError for the
  # first).
  def test_a_rebound_mutex_constant_matches_stock
    outs = %w[stock gem].map do |impl|
      child_output("condition_variable/rebound_mutex_constant_matches_stock", impl)
    end
    assert_equal outs[0], outs[1]
    assert_equal "[:fake_sleep, 0.01]\nnil\n", outs[1]
  end

  # A waiter chosen by a signal and then killed passes the signal on; when
  # the next waiter's fiber scheduler raises in `unblock`, the kill must
  # still end the killed thread (Ruby has marked it as being killed: an
  # exception in its place would leave it unkillable).
  def test_a_kill_survives_a_failing_hand_on_of_the_signal
    raising_scheduler = Class.new(TestFiberScheduler) do
      def unblock(*) = raise("unblock failed")
      def close = nil # the fiber is never resumed: do not wait for it
    end
    m = Thread::Mutex.new
    cv = CV.new
    rescued = Thread::Queue.new
    a = spawn_thread do
      m.synchronize { cv.wait(m) }
    rescue Exception => e # rubocop:disable Lint/RescueException
      rescued << e
      sleep
    end
    wait_for_sleepers(a)
    fibers = Thread::Queue.new # keeps b's suspended fiber (and its waiter) alive
    b = spawn_thread do
      Fiber.set_scheduler(raising_scheduler.new)
      fibers << Fiber.schedule { m.synchronize { cv.wait(m) } }
      sleep
    end
    wait_until { fibers.size == 1 && b.stop? } # the fiber waits on cv
    m.synchronize do
      cv.signal # chooses a
      a.kill    # a passes the signal on to b, whose unblock raises
    end
    assert a.join(10), "the killed thread is still alive"
    assert rescued.empty?, -> { "the kill became #{rescued.pop(true).inspect}" }
  end
end
