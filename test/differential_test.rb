# frozen_string_literal: true

require_relative "test_helper"

# Runs the same seeded operation sequences against Thread::Queue and
# RapidThread::Queue and compares every result, exception class and message.
class DifferentialTest < RapidThreadTest
  OPS = %i[push pop_nb pop_t0 size empty clear close closed num_waiting push_many shift_nb].freeze
  SIZED_OPS = (OPS + %i[push_nb push_t0 max set_max set_bad_max]).freeze

  def run_program(klass, seed, length)
    rng = Random.new(seed)
    sized = klass <= StockSizedQueue || klass <= GemSizedQueue
    ops = sized ? SIZED_OPS : OPS
    q = sized ? klass.new(1 + rng.rand(4)) : klass.new(Array.new(rng.rand(3)) { |i| "init#{i}" })
    Array.new(length) do |step|
      op = ops[rng.rand(ops.size)]
      outcome = begin
        case op
        when :push then sized && q.size >= q.max ? :skip : (q.push("s#{step}").equal?(q) ? :self : :other)
        when :push_many then sized ? :skip : 3.times { |i| q << [step, i] } && :ok
        when :push_nb then q.push("nb#{step}", true).equal?(q) ? :self : :other
        when :push_t0 then (r = q.push("t#{step}", timeout: 0)).equal?(q) ? :self : r
        when :max then q.max
        when :set_max then q.max = 1 + rng.rand(4)
        when :set_bad_max then q.max = -rng.rand(2)
        when :pop_nb then q.pop(true)
        when :shift_nb then q.shift(true)
        when :pop_t0 then q.pop(false) if q.closed? || !q.empty? # blocking only when it cannot block
        when :size then q.size
        when :empty then q.empty?
        when :clear then q.clear.equal?(q) ? :self : :other
        when :close then q.close.equal?(q) ? :self : :other
        when :closed then q.closed?
        when :num_waiting then q.num_waiting
        end
      rescue StandardError, StopIteration => e
        [e.class, normalize_message(e.message)]
      end
      [op, outcome]
    end
  end

  def test_random_programs_match_stock
    scaled(300).times do |seed|
      stock = run_program(StockQueue, seed, 60)
      ours = run_program(GemQueue, seed, 60)
      assert_equal stock, ours, "program with seed #{seed} differs"
    end
  end

  def test_random_sized_programs_match_stock
    # push(timeout:) exists from Ruby 3.2 only; stock 3.1 answers it with a
    # positional-hash quirk, so those steps compare against the 3.2 rule:
    # a full queue with timeout 0 returns nil at once.
    scaled(300).times do |seed|
      stock = run_program(StockSizedQueue, seed, 60)
      ours = run_program(GemSizedQueue, seed, 60)
      stock.zip(ours).each_with_index do |((op, want), (_, got)), i|
        if op == :push_t0 && RUBY_VERSION < "3.2"
          want = nil if want == [ThreadError, "queue full"] # 3.1 took {timeout: 0} as non_block
        end
        assert_equal [want], [got], "seed #{seed}, step #{i} (#{op})"
      end
    end
  end

  def test_error_table_matches_stock
    cases = {
      "new(1)" => ->(k) { k.new(1) },
      "new(Object.new)" => ->(k) { k.new(Object.new) },
      "new(1, 2)" => ->(k) { k.new(1, 2) },
      "push()" => ->(k) { k.new.push },
      "push(1, 2)" => ->(k) { k.new.push(1, 2) },
      "pop(1, 2)" => ->(k) { k.new.pop(1, 2) },
      "pop(true)" => ->(k) { k.new.pop(true) },
      "closed push" => ->(k) { k.new.tap(&:close).push(1) },
      "closed <<" => ->(k) { k.new.tap(&:close) << 1 },
      "Marshal.dump" => ->(k) { Marshal.dump(k.new) },
      "allocate.pop" => ->(k) { k.allocate.pop },
      "allocate.push" => ->(k) { k.allocate.push(1) },
      "allocate.length" => ->(k) { k.allocate.length },
      "allocate.closed?" => ->(k) { k.allocate.closed? },
      "allocate.num_waiting" => ->(k) { k.allocate.num_waiting },
      "close(1)" => ->(k) { k.new.close(1) },
      "size(1)" => ->(k) { k.new.size(1) },
      "dup" => ->(k) { k.new.dup },
    }
    cases.each do |label, call|
      assert_equal outcome { call.(StockQueue) }, outcome { call.(GemQueue) }, label
    end
  end

  private

  def outcome
    r = yield
    r.is_a?(StockQueue) || r.is_a?(GemQueue) ? :queue : r
  rescue Exception => e # rubocop:disable Lint/RescueException
    [e.class, normalize_message(e.message)]
  end
end
