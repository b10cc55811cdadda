# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/fiber_scheduler"

# Beyond stock: Queue#push_all, Queue#pop_batch (both also on SizedQueue)
# and RapidThread.select. pop_batch(1)'s edge cases are pop's, compared
# with stock's pop where stock has the arguments and with the gem's pop
# (itself compared with stock elsewhere) for Ruby 3.2's timeout:.
# Trap-handler and Thread#wakeup wake-ups of all three are cases of
# signal_wakeup_test.rb's matrix.
class BatchSelectTest < RapidThreadTest
  Q = GemQueue
  SQ = GemSizedQueue

  def select(...)
    RapidThread.select(...)
  end

  # --- push_all -----------------------------------------------------------

  def test_push_all_appends_in_order_and_returns_self
    [Q.new([0]), SQ.new(10).tap { |q| q << 0 }].each do |q|
      assert_same q, q.push_all([1, 2])
      assert_same q, q.push_all(3..4)
      assert_same q, q.push_all([5, 6].each)
      assert_same q, q.push_all([])
      assert_equal (0..6).to_a, Array.new(q.size) { q.pop }
    end
  end

  def test_push_all_converts_its_argument_as_queue_new_does
    [Object.new, 1, nil].each do |bad|
      assert_equal error_of { StockQueue.new(bad) }, error_of { Q.new.push_all(bad) }, bad.inspect
    end
    q = Q.new
    items = [1, 2]
    q.push_all(items)
    items << 3
    assert_equal 2, q.size, "the queue does not share the argument"
  end

  def test_push_all_on_closed_or_uninitialized_queues
    [Q.new, SQ.new(1)].each do |q|
      q.close
      assert_raises(ClosedQueueError) { q.push_all([1]) }
      assert_raises(ClosedQueueError) { q.push_all([]) }
    end
    assert_equal error_of { StockQueue.allocate.push(1) }, error_of { Q.allocate.push_all([1]) }
    assert_equal error_of { StockSizedQueue.allocate.push(1) }, error_of { SQ.allocate.push_all([1]) }
  end

  def test_push_all_wakes_one_popper_per_item
    q = Q.new
    got = StockQueue.new
    poppers = Array.new(3) { |i| spawn_thread { got << [i, q.pop] } }
    wait_until { q.num_waiting == 3 }
    q.push_all(%i[a b])
    woken = [got.pop, got.pop]
    assert_equal %i[a b], woken.map(&:last).sort
    # A popper is alive a moment after it reports: join the two that did.
    woken.each { |i, _| poppers[i].join }
    wait_until { q.num_waiting == 1 }
    assert_equal 1, poppers.count(&:alive?)
    q.push_all(%i[c d])
    assert_equal :c, got.pop.last
    assert_equal [:d], Array.new(q.size) { q.pop }
  end

  def test_sized_push_all_blocks_for_room_in_order
    q = SQ.new(2)
    pusher = spawn_thread { q.push_all(1..7) }
    got = []
    got.concat(q.pop_batch(3)) while got.size < 7
    assert_same q, pusher.value
    assert_equal (1..7).to_a, got
    assert_equal 0, q.num_waiting
  end

  def test_sized_push_all_non_block_is_each_push_non_block
    [[1, 2], [1, 2, 3], [1, 2, 3, 4]].each do |items|
      stock = unstressed do
        sq = StockSizedQueue.new(3)
        sq << 0
        [error_of { items.each { |i| sq.push(i, true) } }, Array.new(sq.size) { sq.pop }]
      end
      q = SQ.new(3)
      q << 0
      ours = [error_of { q.push_all(items, true) }, Array.new(q.size) { q.pop }]
      assert_equal stock, ours, items.inspect
    end
  end

  def test_sized_push_all_timeout_keeps_what_fit
    q = SQ.new(2)
    assert_nil q.push_all([1, 2, 3], timeout: 0.05)
    assert_equal [1, 2], Array.new(q.size) { q.pop }
    assert_nil q.tap { |x| x << 0 << 0 }.push_all([1], timeout: 0)
    assert_equal 0, q.num_waiting
    assert_equal error_of { SQ.new(1).push(1, true, timeout: 1) }, error_of { SQ.new(1).push_all([1], true, timeout: 1) }
    assert_equal error_of { SQ.new(1).push(1, timeout: "x") }, error_of { SQ.new(1).push_all([1], timeout: "x") }
  end

  def test_close_ends_a_blocked_sized_push_all
    q = SQ.new(1)
    pusher = spawn_thread { q.push_all([1, 2, 3]) }
    wait_until { q.num_waiting == 1 }
    q.close
    assert_raises(ClosedQueueError) { pusher.join }
    assert_equal [1], Array.new(q.size) { q.pop }
    assert_equal 0, q.num_waiting
  end

  def test_interrupted_sized_push_all_leaves_the_wait_list
    q = SQ.new(1)
    pusher = spawn_thread { q.push_all([1, 2]) }
    wait_until { q.num_waiting == 1 }
    pusher.raise(IOError)
    assert_raises(IOError) { pusher.join }
    assert_equal 0, q.num_waiting
    assert_equal [1], Array.new(q.size) { q.pop }
  end

  # --- pop_batch ----------------------------------------------------------

  def test_pop_batch_takes_one_to_max_in_fifo_order
    [Q.new(1..5), SQ.new(5).tap { |q| q.push_all(1..5) }].each do |q|
      assert_equal [1, 2], q.pop_batch(2)
      assert_equal [3, 4, 5], q.pop_batch(10)
      q.push_all(6..8)
      assert_equal [6, 7, 8], q.pop_batch(2**70)
      assert_equal 0, q.size
    end
  end

  def test_pop_batch_max_must_be_a_positive_integer
    [0, -1, 1.5, "2", nil, -2**70].each do |bad|
      e = assert_raises(ArgumentError, bad.inspect) { ill_typed { Q.new([1]).pop_batch(bad) } }
      assert_equal "max must be a positive Integer", e.message
    end
    assert_equal [ArgumentError, normalize_message("wrong number of arguments (given 0, expected 1..2)")], error_of { Q.new.pop_batch }
  end

  def test_pop_batch_of_one_has_pops_edge_cases
    with_timeout = RUBY_VERSION >= "3.2"
    cases = {
      "empty, non_block" => [->(q) { q }, [true], {}, true],
      "empty, timeout 0" => [->(q) { q }, [], { timeout: 0 }, with_timeout],
      "empty, timeout -1" => [->(q) { q }, [], { timeout: -1 }, with_timeout],
      "empty, short timeout" => [->(q) { q }, [], { timeout: 0.01 }, with_timeout],
      "closed, empty" => [->(q) { q.close }, [], {}, true],
      "closed, empty, non_block" => [->(q) { q.close }, [true], {}, true],
      "closed, one item" => [->(q) { q.tap { q << :x }.close }, [], {}, true],
      "item, non_block" => [->(q) { q << :x }, [true], {}, true],
      "item, timeout" => [->(q) { q << :x }, [], { timeout: 1 }, with_timeout],
      "non_block and timeout" => [->(q) { q }, [true], { timeout: 1 }, with_timeout],
      "bad timeout" => [->(q) { q }, [], { timeout: "1" }, with_timeout],
      "unknown keyword" => [->(q) { q }, [], { wait: 1 }, with_timeout]
    }
    cases.each do |name, (prepare, args, kw, stock_has_it)|
      oracles = [Q]
      oracles << StockQueue if stock_has_it
      oracles.each do |oracle|
        expected = unstressed { outcome { oracle.new.tap(&prepare).pop(*args, **kw) } }
        got = outcome { Q.new.tap(&prepare).pop_batch(1, *args, **kw) }
        got = got.first if got.is_a?(Array) && !got.first.is_a?(Class)
        assert_equal [expected], [got], "#{name} (#{oracle})"
      end
    end
    assert_equal error_of { StockQueue.allocate.pop }, error_of { Q.allocate.pop_batch(1) }
  end

  def test_pop_batch_blocks_until_items_come
    q = Q.new
    popper = spawn_thread { q.pop_batch(3) }
    wait_until { q.num_waiting == 1 }
    q.push_all(1..5)
    assert_equal [1, 2, 3], popper.value
    assert_equal [4, 5], q.pop_batch(3)
    popper = spawn_thread { q.pop_batch(3) }
    wait_until { q.num_waiting == 1 }
    q << :one
    assert_equal [:one], popper.value
  end

  def test_pop_batch_returns_nil_when_closed_or_timed_out
    q = Q.new
    poppers = Array.new(2) { spawn_thread { q.pop_batch(2) } }
    wait_until { q.num_waiting == 2 }
    q.close
    assert_equal [nil, nil], poppers.map(&:value)
    t0 = now
    assert_nil Q.new.pop_batch(2, timeout: 0.05)
    assert_operator now - t0, :>=, 0.05
  end

  def test_sized_pop_batch_wakes_a_pusher_per_slot
    q = SQ.new(2)
    q.push_all(%i[a b])
    done = StockQueue.new
    pushers = Array.new(3) { |i| spawn_thread { q.push(i); done << i } }
    wait_until { q.num_waiting == 3 }
    assert_equal %i[a b], q.pop_batch(5)
    # A pusher is alive a moment after it reports: join the two that did.
    2.times { pushers[done.pop].join }
    wait_until { q.num_waiting == 1 }
    assert_equal 1, pushers.count(&:alive?)
    assert_equal 2, q.size
  end

  def test_interrupted_pop_batch_leaves_and_passes_its_wake_up_on
    q = Q.new
    popper = spawn_thread { q.pop_batch(2) }
    wait_until { q.num_waiting == 1 }
    popper.raise(IOError)
    assert_raises(IOError) { popper.join }
    assert_equal 0, q.num_waiting
    assert_raises(Timeout::Error) { Timeout.timeout(0.05) { q.pop_batch(1) } }
    assert_equal 0, q.num_waiting
    scaled(50).times do
      q = Q.new
      a = spawn_thread { q.pop_batch(1) }
      wait_until { q.num_waiting == 1 }
      b = spawn_thread { q.pop_batch(1) }
      wait_until { q.num_waiting == 2 }
      q << :item
      a.raise(IOError)
      if (begin; a.value; rescue IOError; :raised; end) == [:item]
        q.close
        assert_nil b.value
      else
        assert_equal [:item], b.value
      end
    end
  end

  def test_batches_lose_and_duplicate_nothing
    q = SQ.new(64)
    per = scaled(20_000)
    producers = Array.new(2) do |p|
      spawn_thread { (p * per...(p + 1) * per).each_slice(50) { |chunk| q.push_all(chunk) } }
    end
    consumers = Array.new(3) do |c|
      spawn_thread do
        got = []
        while (batch = c.zero? ? q.pop&.then { [_1] } : q.pop_batch(17))
          got.concat(batch)
        end
        got
      end
    end
    producers.each(&:join)
    q.close
    all = consumers.flat_map(&:value)
    assert_equal (0...2 * per).to_a, all.sort
  end

  # --- select -------------------------------------------------------------

  def test_select_takes_from_whichever_queue_has_an_item
    a = Q.new
    b = SQ.new(3)
    b << :from_b
    pair = select(a, b)
    assert_equal 2, pair.size
    assert_same b, pair[0]
    assert_equal :from_b, pair[1]
    selector = spawn_thread { select(a, b) }
    wait_until { a.num_waiting == 1 && b.num_waiting == 1 }
    a << :from_a
    r = selector.value
    assert_same a, r[0]
    assert_equal :from_a, r[1]
    assert_equal [0, 0], [a.num_waiting, b.num_waiting]
  end

  def test_select_arguments
    assert_equal [ArgumentError, normalize_message("wrong number of arguments (given 0, expected 1+)")], error_of { select }
    assert_equal [TypeError, "wrong argument type Integer (expected Thread::Queue)"], error_of { select(Q.new, 1) }
    4.times do # whichever queue a call looks at first
      assert_equal error_of { StockQueue.allocate.pop }, error_of { select(Q.new([1]), Q.allocate) }
    end
    assert_equal error_of { Q.new.pop(timeout: "1") }, error_of { select(Q.new, timeout: "1") }
    assert_equal [ArgumentError, "unknown keyword: :wait"], error_of { select(Q.new, wait: 1) }
    q = Q.new
    assert_equal [q, 1], select(q, q.tap { q << 1 }), "a queue given twice"
  end

  def test_select_timeout
    a = Q.new
    b = Q.new
    assert_nil select(a, b, timeout: 0)
    assert_nil select(a, b, timeout: -1)
    t0 = now
    assert_nil select(a, b, timeout: 0.05)
    assert_operator now - t0, :>=, 0.05
    assert_equal [0, 0], [a.num_waiting, b.num_waiting]
    b << 1
    assert_equal [b, 1], select(a, b, timeout: 0)
  end

  def test_select_on_closed_queues
    a = Q.new
    b = Q.new
    a.close
    b << :left
    b.close
    assert_equal [b, :left], select(a, b), "closed but not empty"
    assert_nil select(a, b), "every queue closed and empty"
    c = Q.new
    selector = spawn_thread { select(a, c) }
    wait_until { c.num_waiting == 1 }
    assert selector.alive?, "an open queue is left: it waits"
    c.close
    assert_nil selector.value
    assert_equal [0, 0], [a.num_waiting, c.num_waiting]
  end

  def test_close_of_one_queue_while_selecting_keeps_waiting_on_the_others
    a = Q.new
    b = Q.new
    selector = spawn_thread { select(a, b) }
    wait_until { a.num_waiting == 1 }
    a.close
    wait_until { a.num_waiting == 1 && selector.status == "sleep" } # woken, looked, waits again
    b << :b
    assert_equal [b, :b], selector.value
  end

  def test_select_is_fair_between_busy_queues
    n = GC_STRESS ? 100 : 1000
    a = Q.new(Array.new(n, :a))
    b = Q.new(Array.new(n, :b))
    counts = Array.new(n) { select(a, b)[1] }.tally
    assert_operator counts.fetch(:a, 0), :>=, n * 0.3, counts.inspect
    assert_operator counts.fetch(:b, 0), :>=, n * 0.3, counts.inspect
  end

  def test_select_and_pop_on_one_queue_are_both_served
    q = Q.new
    other = Q.new
    selector = spawn_thread { select(q, other) }
    wait_until { q.num_waiting == 1 }
    popper = spawn_thread { q.pop }
    wait_until { q.num_waiting == 2 }
    q.push_all(%i[x y])
    assert_equal %i[x y], [selector.value[1], popper.value].sort
  end

  def test_a_woken_selector_does_not_take_another_queues_wake_up
    # Both pushes land before the selector runs: the first wakes it, and
    # the second must go to the plain popper of the other queue.
    scaled(50).times do
      a = Q.new
      b = Q.new
      selector = spawn_thread { select(a, b) }
      wait_until { a.num_waiting == 1 && b.num_waiting == 1 }
      popper = spawn_thread { b.pop }
      wait_until { b.num_waiting == 2 }
      a << :a
      b << :b
      assert_equal [a, :a], selector.value
      assert_equal :b, popper.value
    end
  end

  def test_interrupted_selector_leaves_every_list_and_passes_its_wake_up_on
    a = Q.new
    b = Q.new
    selector = spawn_thread { select(a, b) }
    wait_until { a.num_waiting == 1 && b.num_waiting == 1 }
    selector.kill
    assert selector.join(10)
    assert_equal [0, 0], [a.num_waiting, b.num_waiting]
    assert_raises(Timeout::Error) { Timeout.timeout(0.05) { select(a, b) } }
    assert_equal [0, 0], [a.num_waiting, b.num_waiting]
    scaled(50).times do
      a = Q.new
      b = Q.new
      selector = spawn_thread { select(b, a) }
      wait_until { a.num_waiting == 1 }
      popper = spawn_thread { a.pop }
      wait_until { a.num_waiting == 2 }
      a << :item
      selector.raise(IOError) # usually before it has run again
      if (begin; selector.value; rescue IOError; :raised; end) == [a, :item]
        a.close
        assert_nil popper.value
      else
        assert_equal :item, popper.value
      end
      assert_equal [0, 0], [a.num_waiting, b.num_waiting]
    end
  end

  def test_select_from_a_sized_queue_wakes_its_pusher
    q = SQ.new(1)
    q << :first
    pusher = spawn_thread { q.push(:second) }
    wait_until { q.num_waiting == 1 }
    assert_equal [q, :first], select(Q.new, q)
    assert_same q, pusher.value
    assert_equal [q, :second], select(q)
  end

  def test_concurrent_selectors_lose_and_duplicate_nothing
    queues = Array.new(3) { Q.new }
    per = scaled(10_000)
    producers = queues.each_with_index.map do |q, p|
      spawn_thread { (p * per...(p + 1) * per).each { |i| q << i } }
    end
    selectors = Array.new(3) do
      spawn_thread do
        got = []
        while (pair = select(*queues))
          got << pair[1]
        end
        got
      end
    end
    popper = spawn_thread do
      got = []
      while (v = queues[0].pop)
        got << v
      end
      got
    end
    producers.each(&:join)
    queues.each(&:close)
    all = selectors.flat_map(&:value) + popper.value
    assert_equal (0...3 * per).to_a, all.sort
  end

  def test_lone_select_is_a_deadlock
    assert_deadlocks("batch_select/lone_select_is_a_deadlock")
  end

  def test_fork_forgets_selectors
    skip "fork unavailable" unless Process.respond_to?(:fork)
    a = Q.new
    b = Q.new
    selector = spawn_thread { select(a, b) }
    wait_until { a.num_waiting == 1 && b.num_waiting == 1 }
    r, w = IO.pipe
    pid = fork do
      r.close
      report = [a.num_waiting, b.num_waiting]
      t = Thread.new { select(a, b) }
      Thread.pass until b.num_waiting == 1
      b << :child
      report << t.value[1] << a.num_waiting << b.num_waiting
      w.write Marshal.dump(report)
      w.close
      exit!(0)
    end
    w.close
    report = Marshal.load(r.read)
    Process.wait(pid)
    assert_equal [0, 0, :child, 0, 0], report
    assert_equal [1, 1], [a.num_waiting, b.num_waiting], "the parent's selector is unaffected"
    a << :parent
    assert_equal [a, :parent], selector.value
  end

  def test_fork_forgets_batch_waiters_and_keeps_items
    skip "fork unavailable" unless Process.respond_to?(:fork)
    q = Q.new
    sq = SQ.new(1)
    sq << :full
    popper = spawn_thread { q.pop_batch(3) }
    pusher = spawn_thread { sq.push_all(%i[a b]) }
    wait_until { q.num_waiting == 1 && sq.num_waiting == 1 }
    r, w = IO.pipe
    pid = fork do
      r.close
      report = [q.num_waiting, sq.num_waiting, q.push_all([1, 2]).pop_batch(5), sq.pop_batch(5)]
      t = Thread.new { q.pop_batch(2) }
      Thread.pass until q.num_waiting == 1
      q.push_all(%i[x y z])
      report << t.value << sq.push_all([:c]).pop_batch(2)
      w.write Marshal.dump(report)
      w.close
      exit!(0)
    end
    w.close
    report = Marshal.load(r.read)
    Process.wait(pid)
    assert_equal [0, 0, [1, 2], [:full], %i[x y], [:c]], report
    assert_equal [1, 1], [q.num_waiting, sq.num_waiting], "the parent's waiters are unaffected"
    q.push_all(%i[p q])
    assert_equal %i[p q], popper.value
    assert_equal %i[full a b], Array.new(3) { sq.pop }
    assert_same sq, pusher.value
  end

  def test_select_with_a_fiber_scheduler
    a = Q.new
    b = Q.new
    log = []
    Thread.new do
      Fiber.set_scheduler(TestFiberScheduler.new)
      Fiber.schedule { log << [:selected, select(a, b)[1]] }
      Fiber.schedule { log << [:batch, b.pop_batch(5)] }
      Fiber.schedule { log << :pushing; b.push_all(%i[x y z]) }
      Fiber.schedule { log << [:timeout, select(Q.new, timeout: 0.02)] }
    end.join
    assert_equal [:pushing, [:selected, :x], [:batch, %i[y z]], [:timeout, nil]], log
    assert_equal [0, 0], [a.num_waiting, b.num_waiting]
    got = nil
    t = Thread.new do
      Fiber.set_scheduler(TestFiberScheduler.new)
      Fiber.schedule { got = select(a, b) }
    end
    wait_until { a.num_waiting == 1 }
    a << :cross_thread
    assert t.join(10)
    assert_equal [a, :cross_thread], got
  end

  private

  # What a call returns or raises, comparable across implementations.
  def outcome
    ill_typed { yield }
  rescue StandardError => e
    [e.class, normalize_message(message_of(e))]
  end
end
