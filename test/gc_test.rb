# frozen_string_literal: true

require_relative "test_helper"

# Values held by the Rust side must be marked, survive compaction, and be
# written through the write barrier (our queues are WB-protected).
class GcTest < RapidThreadTest
  Q = GemQueue

  def test_items_survive_full_gc
    q = Q.new
    n = scaled(1000)
    n.times { |i| q << "item-#{i}" * 3 }
    GC.start(full_mark: true, immediate_sweep: true)
    assert_equal Array.new(n) { |i| "item-#{i}" * 3 }, Array.new(n) { q.pop }
  end

  def test_items_survive_compaction
    assert_equal "[]", compaction_check("queue_items")
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

  # SizedQueue#push_all reads its items across waits: the caller's Array
  # may change meanwhile, and the GC may free or move what it held.
  def test_push_all_keeps_its_items_while_it_waits_for_room
    sq = GemSizedQueue.new(1)
    items = Array.new(4) { |i| "item-#{i}-" + "x" * 40 }
    pusher = spawn_thread { sq.push_all(items) }
    wait_until { sq.num_waiting == 1 }
    items.clear # the rest is now referenced by nothing the user can see
    4.times { GC.start(full_mark: true, immediate_sweep: true) }
    unstressed { Array.new(100_000) { |i| "junk#{i}" } } # reuse any freed slot
    assert_equal Array.new(4) { |i| "item-#{i}-" + "x" * 40 }, Array.new(4) { sq.pop }
    assert_same sq, pusher.value
  end

  # Compaction while threads sleep inside the gem: Ruby 3.1.2's GC.compact
  # itself can crash then (see test_compaction_between_operations).
  def test_compaction_while_push_all_and_select_wait
    # Its threads sleep in C methods by design: no child can make that safe.
    skip "compaction beside threads asleep in C methods crashes Ruby before 3.3" unless IN_PROCESS_COMPACTION
    sq = GemSizedQueue.new(1)
    pusher = spawn_thread { sq.push_all(Array.new(4) { |i| "item-#{i}" }) }
    # 300 queues: more arguments than Ruby 3.3 keeps on the VM stack, so
    # the splat Array holds (and marks movable) the queues.
    qs = Array.new(300) { GemQueue.new }
    selector = spawn_thread { RapidThread.select(*qs) }
    wait_until { sq.num_waiting == 1 && qs.last.num_waiting == 1 }
    GC.verify_compaction_references(**COMPACT_EVERYTHING)
    unstressed { Array.new(100_000) { |i| "junk#{i}" } }
    GC.start
    assert_equal Array.new(4) { |i| "item-#{i}" }, Array.new(4) { sq.pop }
    qs.last << :hello
    q, v = selector.value
    assert_same qs.last, q
    assert_equal :hello, v
    assert_same sq, pusher.value
  end

  # Random operations with a compaction after each one, while threads wait
  # in every kind of list and spawned tasks hold arguments and results.
  def test_compaction_between_operations
    assert_equal "[]", compaction_check("between_operations")
  end
end
