# frozen_string_literal: true

require_relative "test_helper"

# Every public method called with wrong arity and wrong values gets stock
# Ruby's exception class and message (or stock's result), never a crash or
# a hang. Each call runs on its own thread with a time limit; a call that
# blocks in stock must block in ours too (:blocked), and is then killed.
class BadInputTest < RapidThreadTest
  BAD = [nil, true, "str", :sym, 1.5, -1, 0, 2**64, -(2**64), Float::NAN, Float::INFINITY,
         -Float::INFINITY, Object.new, [], {}].freeze

  # What a call does: [:ok, class of result] (result normalised: self ->
  # :self), [:raised, class, first message line] or :blocked. A call is
  # blocked once its thread sleeps (nothing else in this test can wake it)
  # and has not finished after a short grace, or, at the latest, when
  # `limit` runs out: waiting on the state instead of the whole limit is
  # what keeps this table fast under GC.stress.
  #
  # Under GC.stress only the call itself runs stressed, and only where
  # `stress` (stock's side is the oracle: stressing it checks nothing of
  # ours); the threads and bookkeeping around it run at normal speed.
  def outcome(limit = GC_STRESS ? 30 : 3, recv = nil, stress: true)
    GC.stress = false if GC_STRESS
    result = nil
    t = Thread.new do
      Thread.current.report_on_exception = false
      GC.stress = GC_STRESS if GC_STRESS && stress
      r = ill_typed { yield }
      result = [:ok, r.equal?(recv) ? :self : normalize_message(r.class.to_s)]
    rescue Exception => e # rubocop:disable Lint/RescueException
      result = [:raised, e.class, normalize_message(message_of(e))]
    ensure
      GC.stress = false if GC_STRESS
    end
    deadline = now + limit
    until t.join(0)
      # Asleep, and still asleep a moment later, twice (a zero timeout
      # sleeps too, briefly, and may wait for the GVL after): blocked.
      grace = GC_STRESS ? 0.5 : 0.05
      if (t.stop? && !t.join(grace) && t.stop? && !t.join(grace)) || now > deadline
        t.kill
        t.join(5)
        return result || :blocked # it may have finished meanwhile
      end
      Thread.pass
    end
    result
  ensure
    GC.stress = GC_STRESS if GC_STRESS
  end

  # Under GC.stress a seeded quarter of the comparisons runs (each one
  # costs a full GC per allocation; the unstressed run covers them all, and
  # another seed covers another quarter).
  STRESS_SEED = Integer(ENV.fetch("RAPID_THREAD_STRESS_SEED") { Random.new_seed % 1_000_000 })
  STRESS_SAMPLE = Random.new(STRESS_SEED)

  def same(label, stock_factory, gem_factory, meth, args)
    return if GC_STRESS && !STRESS_SAMPLE.rand(4).zero?

    s = stock_factory.call
    g = gem_factory.call
    expected = outcome(GC_STRESS ? 30 : 3, s, stress: false) { s.public_send(meth, *args) }
    actual = outcome(GC_STRESS ? 30 : 3, g) { g.public_send(meth, *args) }
    # Stock 3.1 has no timeout: keyword; those calls are Ruby 3.2's and
    # are covered by their own tests.
    sample = " (GC.stress sample, RAPID_THREAD_STRESS_SEED=#{STRESS_SEED})" if GC_STRESS
    assert_equal expected, actual, "#{label}.#{meth}(#{args.map(&:inspect).join(', ')})#{sample}"
  end

  def arg_lists(max_arity)
    lists = (0..max_arity + 1).map { |n| Array.new(n) { 1 } } # arity
    BAD.each { |b| lists << [b] << [b, b] }
    lists
  end

  def with_item(klass, *new_args)
    -> { klass.new(*new_args).tap { |q| q << :item } }
  end

  def test_queue_methods
    stock = with_item(StockQueue)
    ours = with_item(GemQueue)
    { push: 1, "<<": 1, enq: 1, pop: 1, shift: 1, deq: 1, close: 0, closed?: 0, empty?: 0, clear: 0,
      length: 0, size: 0, num_waiting: 0, marshal_dump: 0 }.each do |meth, arity|
      arg_lists(arity).each { |args| same("Queue", stock, ours, meth, args) }
    end
    arg_lists(1).each do |args|
      assert_equal outcome { StockQueue.new(*args) }.then { |o| o.is_a?(Array) ? o.take(2) : o },
                   outcome { GemQueue.new(*args) }.then { |o| o.is_a?(Array) ? o.take(2) : o },
                   "Queue.new(#{args.map(&:inspect).join(', ')})"
    end
  end

  def test_sized_queue_methods
    stock = with_item(StockSizedQueue, 2)
    ours = with_item(GemSizedQueue, 2)
    { push: 2, "<<": 1, enq: 2, pop: 1, max: 0, "max=": 1, close: 0, clear: 0, num_waiting: 0 }.each do |meth, arity|
      arg_lists(arity).each { |args| same("SizedQueue", stock, ours, meth, args) }
    end
    full_stock = -> { StockSizedQueue.new(1).tap { |q| q << 1 } }
    full_ours = -> { GemSizedQueue.new(1).tap { |q| q << 1 } }
    BAD.each { |b| same("full SizedQueue", full_stock, full_ours, :push, [2, b]) }
    arg_lists(1).each do |args|
      assert_equal outcome { StockSizedQueue.new(*args) }, outcome { GemSizedQueue.new(*args) },
                   "SizedQueue.new(#{args.map(&:inspect).join(', ')})"
    end
  end

  def test_condition_variable_methods
    { signal: 0, broadcast: 0, marshal_dump: 0 }.each do |meth, arity|
      arg_lists(arity).each do |args|
        same("ConditionVariable", -> { StockConditionVariable.new }, -> { GemConditionVariable.new }, meth, args)
      end
    end
    # wait(mutex, timeout): non-mutexes, unlocked and locked mutexes, bad
    # timeouts. A locked mutex is locked by the calling thread.
    [[], [1, 2, 3]].each { |args| same("ConditionVariable", -> { StockConditionVariable.new }, -> { GemConditionVariable.new }, :wait, args) }
    BAD.each do |b|
      same("ConditionVariable", -> { StockConditionVariable.new }, -> { GemConditionVariable.new }, :wait, [b])
      same("ConditionVariable", -> { StockConditionVariable.new }, -> { GemConditionVariable.new }, :wait, [Mutex.new, b])
      stock = outcome { m = Mutex.new; m.synchronize { StockConditionVariable.new.wait(m, b) } }
      ours = outcome { m = Mutex.new; m.synchronize { GemConditionVariable.new.wait(m, b) } }
      assert_equal stock, ours, "wait(locked mutex, #{b.inspect})"
    end
  end

  def test_task_methods_match_thread
    gate = StockQueue.new
    started = [] # every thread and task, killed and joined at the end
    # Each is blocked in its block before it is compared: a thread not yet
    # started has no frames, so backtrace(1, 1) was nil for one side and an
    # Array for the other whenever one had started and the other not yet.
    blocked = ->(t) { t.report_on_exception = false; started << t; wait_until { t.status == "sleep" }; t }
    stock = -> { blocked.(Thread.new { gate.pop }) }
    ours = -> { blocked.(RapidThread.spawn { gate.pop }) }
    { join: 1, "name=": 1, backtrace: 2 }.each do |meth, arity|
      arg_lists(arity).each do |args|
        next if meth == :join && (args.empty? || args == [nil] || args == [nil, nil]) # waits for the block

        same("Task", stock, ours, meth, args)
      end
    end
    [[1, 2], ["str"], [Object.new], [:sym]].each { |args| same("Task", stock, ours, :raise, args) }
    assert_equal outcome { Thread.new }, outcome { RapidThread.spawn }
  ensure
    started.each(&:kill).each do |t|
      t.join(5)
    rescue StandardError, TypeError
      nil # some of them were raised on purpose
    end
  end

  # A panic is a bug; it must never unwind into Ruby's C frames. magnus'
  # wrappers catch it and raise Ruby's `fatal` instead: the process stops
  # with a message naming the panic, never with a signal (segfault, abort).
  def test_a_panic_never_crosses_into_ruby
    _out, err, status = run_ruby("bad_input/a_panic_never_crosses_into_ruby")
    refute status.signaled?, "killed by a signal: #{status.inspect}"
    refute status.success?
    assert_match(/deliberate panic for the FFI-boundary test \(fatal\)/, err)
  end
end
