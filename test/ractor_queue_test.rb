# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/fiber_scheduler"

# RapidThread::RactorQueue (issue 15). Every case that starts a Ractor runs
# in a child process: once a process has made a Ractor it stays in
# multi-Ractor mode (every VM lock taken for real), which would change the
# rest of the suite. Under RAPID_THREAD_GC_STRESS the children run under
# GC.stress too, with smaller counts.
class RactorQueueTest < RapidThreadTest
  # Runs the child script `name` (which requires children/ractor_queue/
  # prelude.rb) and returns its stdout; the child must succeed and print
  # nothing on stderr. Its counts are scaled down under GC_STRESS; `stress`
  # runs it under GC.stress.
  def ractors(name, stress: GC_STRESS, timeout: GC_STRESS ? 240 : 30)
    args = [*("small" if GC_STRESS), *("gc_stress" if stress)]
    out, err, status = run_ruby(name, *args, timeout: timeout)
    assert status.success?, "child failed (#{status.inspect}):\n#{err}\n#{out}"
    assert_equal "", err.gsub(/^.*warning: Ractor is experimental.*\n/, "")
    out
  end

  # --- in-process: no Ractor needed -------------------------------------

  def test_a_queue_is_frozen_and_shareable
    q = RapidThread::RactorQueue.new
    assert q.frozen?
    assert Ractor.shareable?(q)
    assert_nil q.max
    assert_equal 3, RapidThread::RactorQueue.new(3).max
  end

  def test_fifo_and_the_query_methods
    q = RapidThread::RactorQueue.new
    assert q.empty?
    assert_same q, q.push(1)
    q << 2
    q.enq(3)
    assert_equal 3, q.size
    assert_equal 3, q.length
    refute q.empty?
    assert_equal [1, 2, 3], [q.pop, q.shift, q.deq]
    assert q.empty?
    refute q.closed?
    assert_same q, q.close
    assert q.closed?
    assert_same q, q.close
    assert_nil q.pop
  end

  def test_shareable_items_are_stored_as_they_are
    q = RapidThread::RactorQueue.new
    frozen = "frozen".freeze
    deep = [1, [2, "x".freeze].freeze].freeze
    [frozen, deep, :sym, 12, 1.5, nil, RapidThread, Ractor.make_shareable({ a: [1] })].each do |obj|
      q << obj
      assert_same obj, q.pop
    end
  end

  def test_other_items_are_stored_as_deep_frozen_copies
    q = RapidThread::RactorQueue.new
    s = +"hello"
    h = { list: [+"a", { b: +"c" }] }
    q << s << h
    s2 = q.pop
    h2 = q.pop
    assert_equal "hello", s2
    refute_same s, s2
    assert s2.frozen?
    refute s.frozen?, "the pusher's object is untouched"
    assert_equal h, h2
    assert Ractor.shareable?(h2)
    refute h.frozen?
    refute h[:list].frozen?
    refute h[:list][1][:b].frozen?
  end

  # Ruby's own exception for each: Ractor::Error, or TypeError for what
  # cannot even be copied.
  def test_what_cannot_be_shared_raises_and_is_not_stored
    q = RapidThread::RactorQueue.new
    [Thread.current, -> {}, [1, Thread::Mutex.new]].each do |obj|
      stock = error_of { Ractor.make_shareable(obj, copy: true) }
      refute_equal :no_error, stock
      assert_equal stock, error_of { q << obj }
    end
    assert q.empty?
  end

  def test_non_blocking_and_timeouts
    q = RapidThread::RactorQueue.new(1)
    assert_equal [ThreadError, "queue empty"], error_of { q.pop(true) }
    assert_nil q.pop(timeout: 0)
    t0 = now
    assert_nil q.pop(timeout: 0.05)
    assert_operator now - t0, :>=, 0.05
    q << 1
    assert_equal [ThreadError, "queue full"], error_of { q.push(2, true) }
    assert_nil q.push(2, timeout: 0)
    assert_nil q.push(2, timeout: 0.05)
    assert_equal [ArgumentError, "can't set a timeout if non_block is enabled"], error_of { q.pop(true, timeout: 1) }
    assert_equal [ArgumentError, "can't set a timeout if non_block is enabled"], error_of { q.push(2, true, timeout: 1) }
    assert_equal 1, q.pop
  end

  def test_closed_queue_errors
    q = RapidThread::RactorQueue.new(1)
    q << :last
    q.close
    assert_equal [ClosedQueueError, "queue closed"], error_of { q << 1 }
    assert_equal [ThreadError, "queue full"], error_of { q.push(1, true) }, "full first, as SizedQueue"
    assert_equal :last, q.pop
    assert_equal [ClosedQueueError, "queue closed"], error_of { q.push(1, true) }
    assert_nil q.pop
    assert_equal [ThreadError, "queue empty"], error_of { q.pop(true) }, "closed and empty: raises, as Thread::Queue"
  end

  # Ruby 3.3's order (rb_szqueue_push): full and non_block: "queue full";
  # full and timeout: 0: nil; otherwise closed: ClosedQueueError.
  def test_a_full_closed_queue_refuses_as_sized_queue_does
    q = RapidThread::RactorQueue.new(1)
    s = Thread::SizedQueue.new(1)
    [q, s].each { |x| x << 1 }
    [q, s].each(&:close)
    assert_equal [ThreadError, "queue full"], error_of { q.push(2, true) }
    assert_equal error_of { s.push(2, true) }, error_of { q.push(2, true) }
    assert_equal error_of { s.push(2) }, error_of { q.push(2) }
    assert_nil q.push(2, timeout: 0)
    assert_equal [ClosedQueueError, "queue closed"], error_of { q.push(2, timeout: 1) }
    open_q = RapidThread::RactorQueue.new(2)
    open_q.close
    assert_equal [ClosedQueueError, "queue closed"], error_of { open_q.push(2, true) }
  end

  # Marking also runs outside a GC (ObjectSpace.reachable_objects_from),
  # whose callback allocates: a GC started there marks the queue again.
  # It used to wait for its own lock, forever. In a child: a hang there is
  # not interruptible.
  def test_reachable_objects_from_a_queue_under_gc_stress
    out = child_output("ractor_queue/reachable_objects_from_a_queue_under_gc_stress", timeout: 60)
    assert_equal "20\n", out
  end

  def test_bad_arguments
    assert_equal [ArgumentError, "queue size must be positive"], error_of { RapidThread::RactorQueue.new(0) }
    assert_equal [ArgumentError, "queue size must be positive"], error_of { RapidThread::RactorQueue.new(-1) }
    assert_equal TypeError, error_of { RapidThread::RactorQueue.new("3") }.first
    assert_equal [TypeError, "no implicit conversion to float from string"],
                 error_of { RapidThread::RactorQueue.new.pop(timeout: "1") }
    q = RapidThread::RactorQueue.new
    assert_equal FrozenError, error_of { q.send(:initialize) }.first
    assert_match(/not initialized/, error_of { RapidThread::RactorQueue.allocate.pop }.last)
    assert_equal [TypeError, "can't dump Thread::RactorQueue"], error_of { Marshal.dump(q) }
    assert_equal NoMethodError, error_of { q.dup }.first
    assert_equal ArgumentError, error_of { q.push }.first
  end

  def test_threads_of_one_ractor_block_and_are_woken
    q = RapidThread::RactorQueue.new(2)
    popped = []
    poppers = Array.new(3) { spawn_thread { popped << q.pop } }
    wait_until { q.num_waiting == 3 }
    q << 1 << 2 << 3
    poppers.each(&:join)
    assert_equal [1, 2, 3], popped.sort
    q << :a << :b
    pusher = spawn_thread { q.push(:c) }
    wait_until { q.num_waiting == 1 }
    assert_equal :a, q.pop
    pusher.join
    assert_equal %i[b c], [q.pop, q.pop]
  end

  def test_a_blocked_pop_is_interruptible
    q = RapidThread::RactorQueue.new
    t = spawn_thread { q.pop }
    wait_until { q.num_waiting == 1 }
    t.raise(IOError, "stop")
    assert_raises(IOError) { t.join }
    k = spawn_thread { q.pop }
    wait_until { q.num_waiting == 1 }
    k.kill
    assert_nil k.join(5)&.value
    assert_raises(Timeout::Error) { Timeout.timeout(0.05) { q.pop } }
    assert_equal 0, q.num_waiting
    q << :still_works
    assert_equal :still_works, q.pop
  end

  # An interrupt that lands while the popper still spins (or between its
  # last check and its sleep) is not lost: on Ruby 3.1 nothing repeats the
  # signal Ruby sends when the interrupting thread then waits outside
  # Ruby's sleep itself (here in another RactorQueue). Before the fix, 20
  # raises in 20 were lost on 3.1.2.
  def test_an_interrupt_during_the_spin_is_not_lost
    q = RapidThread::RactorQueue.new
    done = RapidThread::RactorQueue.new
    scaled(40).times do |i|
      t = spawn_thread do
        q.pop
      rescue IOError
        done << :raised
      end
      Thread.pass until t.status == "sleep"
      t.raise(IOError, "stop")
      assert_equal :raised, done.pop(timeout: 5), "round #{i}: the raise was lost"
      t.join
    end
    assert_equal 0, q.num_waiting
  end

  def test_a_fiber_scheduler_runs_other_fibers_while_one_pops
    log = []
    t = spawn_thread do
      Fiber.set_scheduler(TestFiberScheduler.new)
      q = RapidThread::RactorQueue.new
      Fiber.schedule { log << [:popped, q.pop] }
      Fiber.schedule { log << :pushing; q << :via_fiber }
    end
    assert t.join(10), "the popping fiber blocked the thread"
    assert_equal [:pushing, [:popped, :via_fiber]], log
  end

  # A popper woken for an item and interrupted before it takes it passes
  # the wake-up on: no item waits while a popper sleeps.
  def test_interrupted_poppers_lose_no_item
    q = RapidThread::RactorQueue.new
    rounds = scaled(200)
    got = Thread::Queue.new
    rounds.times do |i|
      victim = spawn_thread { q.pop }
      keeper = spawn_thread { got << q.pop }
      wait_until { q.num_waiting == 2 }
      q << i
      victim.raise(IOError, "interrupted")
      took = begin
        victim.join
        true
      rescue IOError
        false
      end
      # The victim took i before the raise landed: give the keeper another.
      # Otherwise the keeper must get i with no further push: a wake-up the
      # victim consumed was passed on.
      q << :extra if took
      keeper.join(10) or flunk "round #{i}: the keeper never woke"
      assert_equal 1, got.size
      got.clear
      q.pop(true) unless q.empty?
    end
    assert_equal 0, q.num_waiting
  end

  def test_a_trap_handler_can_push_to_a_waiting_main_thread
    out = child_output("ractor_queue/a_trap_handler_can_push_to_a_waiting_main_thread")
    assert_equal "USR1\nUSR1\nexit\n", out
  end

  # A pop is counted in num_waiting until it returns, not per slice of its
  # wait: between two slices (here, while a trap handler runs on the
  # waiting thread; under GC.stress, while it sits in a GC barrier) the
  # count read 0, as if the waiter had gone. Stock's queue counts a waiter
  # while its handler runs inside the sleep.
  def test_a_waiter_stays_counted_between_the_slices_of_its_wait
    out = child_output("ractor_queue/a_waiter_stays_counted_between_the_slices_of_its_wait")
    assert_equal "[:done, 1, 0]\n", out
  end

  # Ruby's own SIGINT handler (Interrupt) is installed first: a process
  # started in the background by a non-interactive shell (as CI may run
  # the suite) inherits SIGINT ignored, and Ruby keeps it ignored.
  def test_ctrl_c_interrupts_a_blocked_pop
    out = child_output("ractor_queue/ctrl_c_interrupts_a_blocked_pop")
    assert_equal "Interrupt\n", out
  end

  def test_items_survive_gc_compaction
    assert_equal "[]", compaction_check("ractor_queue_items")
  end

  def test_other_classes_stay_in_the_main_ractor
    out = ractors("ractor_queue/other_classes_stay_in_the_main_ractor")
    assert_equal "[:refused, :refused, :refused]\n[false, false, Ractor::UnsafeError]\n1\n", out
  end

  # --- across Ractors ------------------------------------------------------

  def test_one_producer_two_consumers_deliver_every_item_once
    out = ractors("ractor_queue/one_producer_two_consumers_deliver_every_item_once")
    assert_equal "[true, true]\n[true, true]\n", out
  end

  def test_close_wakes_waiters_in_other_ractors
    out = ractors("ractor_queue/close_wakes_waiters_in_other_ractors")
    assert_equal "[nil, nil]\n\"queue closed\"\n:x\nnil\n", out
  end

  def test_timeouts_and_bounded_blocking_across_ractors
    out = ractors("ractor_queue/timeouts_and_bounded_blocking_across_ractors")
    assert_equal "[nil, true]\n2\n1\n:pushed\n2\nnil\n", out
  end

  def test_a_pop_in_another_ractor_is_interruptible
    out = ractors("ractor_queue/a_pop_in_another_ractor_is_interruptible")
    assert_equal "\"stop\"\n\"late\"\n0\n", out
  end

  def test_many_ractors_under_gc_stress
    out = ractors("ractor_queue/many_ractors_under_gc_stress", stress: true, timeout: 240)
    assert_equal "true\ntrue\n", out
  end

  # The child forgets the parent's items and waiters (a thread of another
  # Ractor may have held the queue's lock at the fork) and gets an empty
  # queue, as bounded and as open as it was.
  def test_a_forked_child_gets_an_empty_usable_queue
    skip "no fork" unless Process.respond_to?(:fork)
    out = ractors("ractor_queue/a_forked_child_gets_an_empty_usable_queue")
    assert_equal "[0, 3, false, 0]\n:child\nnil\ntrue\n[2, 1]\n:parent\n", out
  end

  # What runs without the GVL leaves errno as it found it (sys/gvl.rs,
  # call_without_gvl): under M:N threads a pop that timed out left
  # ETIMEDOUT on its native thread, and the next Ruby thread run there,
  # reading a pipe, got IO::TimeoutError (all 20 reads on 3.4.5, checked).
  def test_timed_out_waits_leave_no_errno_for_other_threads_under_mn
    skip "M:N threads are Ruby 3.3+'s" if RUBY_VERSION < "3.3"
    script = File.expand_path("support/errno_under_mn.rb", __dir__)
    shield = "-r#{File.expand_path('support/mn_exit', __dir__)}" # Ruby's own M:N exit crash
    out, err, status = run_ruby(script, r: nil, env: { "RUBY_MN_THREADS" => "1", "RUBYOPT" => shield })
    assert status.success?, "child failed (#{status.inspect}):\n#{err}\n#{out}"
    assert_equal "20\n{}\n", out
  end
end
