# frozen_string_literal: true

require_relative "test_helper"

# Many threads blocked in Queue#pop, SizedQueue#push and
# ConditionVariable#wait are interrupted at random (Thread#raise,
# Thread#kill, timeouts) while items keep flowing. Afterwards nobody is
# left on a wait list, every item is accounted for exactly once, and the
# mutex is free.
class InterruptStressTest < RapidThreadTest
  class Stop < StandardError; end

  def test_random_interrupts_lose_nothing
    rng = Random.new(42)
    q = GemQueue.new
    sq = GemSizedQueue.new(4)
    m = Thread::Mutex.new
    cv = GemConditionVariable.new
    popped = Thread::Queue.new   # items taken from q by workers
    pushed = Thread::Queue.new   # items workers put into sq
    bad = Thread::Queue.new      # invariant violations seen by workers
    # RAPID_THREAD_INTERRUPT_THREADS: 400 in the suite, 10,000 in
    # `rake stress:interrupts` (and in CI).
    n = Integer(ENV.fetch("RAPID_THREAD_INTERRUPT_THREADS", scaled(400).to_s))
    prefill = [-1, -2, -3, -4]
    prefill.each { |v| sq << v } # full: pushers block

    workers = Array.new(n) do |i|
      kind = %i[pop pop_timeout push push_timeout wait wait_timeout][i % 6]
      spawn_thread do
        Thread.handle_interrupt(Object => :never) do
          case kind
          when :pop, :pop_timeout
            v = Thread.handle_interrupt(Object => :immediate) { kind == :pop ? q.pop : q.pop(timeout: 0.01 * (i % 7)) }
            popped << v unless v.nil?
          when :push, :push_timeout
            r = Thread.handle_interrupt(Object => :immediate) do
              kind == :push ? sq.push(i) : sq.push(i, timeout: 0.01 * (i % 7))
            end
            pushed << i unless r.nil?
          when :wait, :wait_timeout
            m.synchronize do
              Thread.handle_interrupt(Object => :immediate) { kind == :wait ? cv.wait(m) : cv.wait(m, 0.01 * (i % 7)) }
            ensure
              bad << [:not_owner, i] unless m.owned?
            end
          end
        end
      rescue Stop, ClosedQueueError
        nil
      end
    end

    # Let every worker reach its wait (or finish) before the storm.
    wait_until(TEST_TIMEOUT / 2, "workers to block") { workers.all?(&:stop?) }
    sent = 0
    taken = []
    [scaled(1000), n * 2].max.times do
      t = workers.sample(random: rng)
      case rng.rand(6)
      when 0 then t.raise(Stop)
      when 1 then t.kill
      when 2 then q << (sent += 1)
      when 3 then (v = sq.pop(timeout: 0.001)) && taken << v
      when 4 then m.synchronize { cv.signal }
      else Thread.pass
      end
    end
    q.close
    sq.close
    m.synchronize { cv.broadcast }
    taken << sq.pop(true) until sq.empty?
    workers.each { |t| assert t.join(20), "a worker is stuck: #{t.inspect}" }
    puts "\ninterrupts: #{n} blocked threads, #{sent} items through q" if ENV["RAPID_THREAD_INTERRUPT_THREADS"]

    assert_equal 0, q.num_waiting
    assert_equal 0, sq.num_waiting
    refute m.locked?
    assert_empty drain(bad)
    got = drain(popped) + drain(q)
    assert_equal (1..sent).to_a, got.sort, "every item pushed into q is popped exactly once"
    assert_equal (prefill + drain(pushed)).sort, taken.sort, "every accepted push reaches the consumer"
  end

  private

  def drain(queue)
    Array.new(queue.size) { queue.pop(true) }
  end
end
