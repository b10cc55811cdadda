# frozen_string_literal: true

require_relative "test_helper"

# Values held by the Rust side must be marked, survive compaction, and be
# written through the write barrier (our queues are WB-protected).
class GcTest < RapidThreadTest
  Q = GemQueue

  def test_items_survive_full_gc
    q = Q.new
    1000.times { |i| q << "item-#{i}" * 3 }
    GC.start(full_mark: true, immediate_sweep: true)
    assert_equal Array.new(1000) { |i| "item-#{i}" * 3 }, Array.new(1000) { q.pop }
  end

  def test_items_survive_compaction
    skip "GC.compact unsupported" unless GC.respond_to?(:verify_compaction_references)
    q = Q.new(Array.new(500) { |i| "initial-#{i}" })
    500.times { |i| q << { i => "pushed-#{i}" } }
    GC.verify_compaction_references(double_heap: true, toward: :empty)
    GC.compact
    assert_equal Array.new(500) { |i| "initial-#{i}" }, Array.new(500) { q.pop }
    assert_equal Array.new(500) { |i| { i => "pushed-#{i}" } }, Array.new(500) { q.pop }
  end

  def test_old_queue_keeps_young_items_through_minor_gc
    # An old queue that gains young items without a write barrier would lose
    # them in the next minor GC (the queue is not re-scanned).
    q = Q.new
    4.times { GC.start(full_mark: true) } # promote q to the old generation
    200.times do |i|
      q << "young-#{i}"
      GC.start(full_mark: false) if (i % 20).zero?
    end
    GC.verify_internal_consistency
    5.times { GC.start(full_mark: false) }
    "x" * 10_000 # allocate over any freed slots
    assert_equal Array.new(200) { |i| "young-#{i}" }, Array.new(200) { q.pop }
  end

  def test_initial_items_of_an_old_queue_class_are_barriered
    qs = Array.new(10) { Q.new }
    4.times { GC.start(full_mark: true) }
    qs.each_with_index { |q, i| q.send(:initialize, Array.new(20) { |j| "re-#{i}-#{j}" }) }
    GC.start(full_mark: false)
    GC.verify_internal_consistency
    qs.each_with_index do |q, i|
      assert_equal Array.new(20) { |j| "re-#{i}-#{j}" }, Array.new(20) { q.pop }
    end
  end

  def test_values_passed_between_threads_under_gc_pressure
    q = Q.new
    n = scaled(2000)
    consumer = spawn_thread { Array.new(n) { q.pop } }
    n.times do |i|
      q << "v#{i}"
      GC.start(full_mark: false) if (i % 100).zero?
    end
    assert_equal Array.new(n) { |i| "v#{i}" }, consumer.value
  end
end
