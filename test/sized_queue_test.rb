# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/fiber_scheduler"

# RapidThread::SizedQueue against Ruby 3.1's Thread::SizedQueue and Ruby
# 3.2's push(timeout:).
class SizedQueueTest < RapidThreadTest
  SQ = GemSizedQueue

  def test_is_a_queue_subclass
    assert_operator SQ, :<, GemQueue
    q = SQ.new(3)
    assert_kind_of GemQueue, q
    assert_equal 3, q.max
    assert_same q, q.push(1)
    assert_same q, q << 2
    assert_same q, q.enq(3)
    assert_equal [1, 2, 3], [q.pop, q.shift, q.deq]
  end

  def test_new_validates_max_like_stock
    [0, -1].each do |bad|
      e = assert_raises(ArgumentError) { SQ.new(bad) }
      assert_equal "queue size must be positive", e.message
    end
    ["1", nil, Object.new, 2**70].each do |bad|
      ours = error_of { SQ.new(bad) }
      assert_equal error_of { StockSizedQueue.new(bad) }, ours, bad.inspect
    end
    assert_equal StockSizedQueue.new(2.7).max, SQ.new(2.7).max
    assert_equal error_of { StockSizedQueue.new }, error_of { SQ.new }
  end

  def test_push_non_block_on_full_raises
    q = SQ.new(1)
    q << 1
    e = assert_raises(ThreadError) { q.push(2, true) }
    assert_equal "queue full", e.message
    e = assert_raises(ArgumentError) { q.push(2, true, timeout: 1) }
    assert_equal "can't set a timeout if non_block is enabled", e.message
    e = assert_raises(ArgumentError) { ill_typed { q.push } }
    assert_equal "wrong number of arguments (given 0, expected 1..2)", e.message
  end

  def test_push_timeout
    q = SQ.new(1)
    q << 1
    t0 = now
    assert_nil q.push(2, timeout: 0.05)
    assert_operator now - t0, :>=, 0.05
    assert_nil q.push(2, timeout: 0)
    assert_equal 1, q.size
    assert_equal 0, q.num_waiting
    pusher = spawn_thread { q.push(3, timeout: 10) }
    wait_until { q.num_waiting == 1 }
    assert_equal 1, q.pop
    assert_same q, pusher.value
    assert_equal 3, q.pop
  end

  def test_push_blocks_while_full_and_pop_wakes_one_pusher
    q = SQ.new(1)
    q << :a
    pushers = Array.new(3) do |i|
      t = spawn_thread { q.push(i) }
      wait_until { q.num_waiting == i + 1 }
      t
    end
    assert_equal :a, q.pop
    wait_until { q.size == 1 && q.num_waiting == 2 }
    assert_equal 0, q.pop, "the longest waiting pusher goes first"
    wait_until { q.size == 1 && q.num_waiting == 1 }
    assert_equal 1, q.pop
    assert_equal 2, q.pop
    pushers.each { |t| assert_same q, t.value }
  end

  def test_raising_max_wakes_that_many_pushers
    q = SQ.new(1)
    q << :full
    pushers = Array.new(3) { |i| spawn_thread { q.push(i) } }
    wait_until { q.num_waiting == 3 }
    assert_equal 3, (q.max = 3)
    wait_until { q.size == 3 }
    assert_equal 1, q.num_waiting
    assert_equal 3, q.max
    q.max = 2 # lowering wakes nobody
    assert_equal 1, q.num_waiting
    e = assert_raises(ArgumentError) { q.max = 0 }
    assert_equal "queue size must be positive", e.message
    q.clear
    pushers.each(&:join)
  end

  def test_clear_wakes_all_pushers
    q = SQ.new(1)
    q << :x
    pushers = Array.new(3) { |i| spawn_thread { q.push(i) } }
    wait_until { q.num_waiting == 3 }
    assert_same q, q.clear
    wait_until { q.size == 1 }
    q.max = 10
    pushers.each(&:join)
    assert_equal 3, q.size
  end

  def test_close_wakes_pushers_with_closed_queue_error_and_poppers_with_nil
    full = SQ.new(1)
    full << :x
    pushers = Array.new(2) { spawn_thread { full.push(:y) } }
    wait_until { full.num_waiting == 2 }
    full.close
    pushers.each do |t|
      e = assert_raises(ClosedQueueError) { t.value }
      assert_equal "queue closed", e.message
    end
    assert_equal :x, full.pop
    assert_nil full.pop

    empty = SQ.new(1)
    poppers = Array.new(2) { spawn_thread { empty.pop } }
    wait_until { empty.num_waiting == 2 }
    empty.close
    assert_equal [nil, nil], poppers.map(&:value)
    assert_raises(ClosedQueueError) { empty.push(1) }
    closed_full = SQ.new(1)
    closed_full << 1
    closed_full.close
    e = assert_raises(ThreadError) { closed_full.push(2, true) }
    assert_equal "queue full", e.message, "as stock: fullness is checked before closedness"
  end

  def test_num_waiting_counts_pushers_and_poppers
    q = SQ.new(1)
    poppers = Array.new(2) { spawn_thread { q.pop } }
    wait_until { q.num_waiting == 2 }
    q << 1
    q << 2
    poppers.each(&:join)
    q << 3
    pushers = Array.new(2) { |i| spawn_thread { q.push(i) } }
    wait_until { q.num_waiting == 2 }
    q.clear
    q.max = 5
    pushers.each(&:join)
    assert_equal 0, q.num_waiting
  end

  def test_lifecycle_errors
    e = assert_raises(TypeError) { Marshal.dump(SQ.new(1)) }
    assert_equal "can't dump RapidThread::SizedQueue", e.message
    q = SQ.allocate
    e = assert_raises(TypeError) { q.push(1) }
    assert_match(/\A#<RapidThread::SizedQueue:0x\h+> not initialized\z/, e.message)
    assert_raises(TypeError) { q.pop }
    assert_equal 0, q.max
    assert_raises(TypeError) { SQ.new(1).freeze }
    assert_raises(NoMethodError) { SQ.new(1).dup }
  end

  def test_interrupts_remove_blocked_pushers
    q = SQ.new(1)
    q << :x
    raised = spawn_thread { q.push(1) }
    killed = spawn_thread { q.push(2) }
    wait_until { q.num_waiting == 2 }
    raised.raise(IOError, "stop")
    assert_raises(IOError) { raised.join }
    killed.kill
    killed.join(10)
    assert_equal 0, q.num_waiting
    assert_raises(Timeout::Error) { Timeout.timeout(0.05) { q.push(3) } }
    assert_equal 0, q.num_waiting
    assert_equal [:x], [q.pop]
  end

  def test_full_push_is_a_deadlock_when_alone
    assert_deadlocks("sized_queue/full_push_is_a_deadlock_when_alone")
  end

  def test_fork_forgets_blocked_pushers
    skip "fork unavailable" unless Process.respond_to?(:fork)
    q = SQ.new(1)
    q << :x
    pusher = spawn_thread { q.push(:parent) }
    wait_until { q.num_waiting == 1 }
    pid = fork do
      ok = q.num_waiting.zero? && q.pop == :x && q.push(:child) && q.pop == :child
      exit!(ok ? 0 : 1)
    end
    Process.wait(pid)
    assert $?.success?
    assert_equal 1, q.num_waiting
    assert_equal :x, q.pop
    pusher.join
    assert_equal :parent, q.pop
  end

  def test_fiber_scheduler_blocks_the_pushing_fiber
    q = SQ.new(1)
    log = []
    Thread.new do
      Fiber.set_scheduler(TestFiberScheduler.new)
      Fiber.schedule { q << 1; q << 2; log << :pushed_both }
      Fiber.schedule { log << [:popped, q.pop] }
    end.join
    assert_equal [[:popped, 1], :pushed_both], log
    assert_equal 2, q.pop
  end

  def test_producers_and_consumers_through_a_small_queue
    q = SQ.new(4)
    per = scaled(10_000)
    producers = Array.new(3) { |p| spawn_thread { per.times { |i| q << (p * per + i) } } }
    consumers = Array.new(3) { spawn_thread { s = 0; c = 0; while (v = q.pop) do s += v; c += 1 end; [s, c] } }
    producers.each(&:join)
    q.close
    totals = consumers.map(&:value)
    n = 3 * per
    assert_equal [n * (n - 1) / 2, n], [totals.sum(&:first), totals.sum(&:last)]
  end
end
