# frozen_string_literal: true

require_relative "test_helper"
require "objspace"

# Marking also runs outside a GC: ObjectSpace.reachable_objects_from calls
# an object's mark function with a callback that allocates, which under
# GC.stress starts a GC that marks the same object again, from inside the
# first mark (sys::mark_from copies the values out first).
class ReachableObjectsTest < RapidThreadTest
  def reachable_strings(obj)
    stress = GC.stress
    GC.stress = true
    ObjectSpace.reachable_objects_from(obj).grep(String)
  ensure
    GC.stress = stress
  end

  def test_a_queue_reaches_its_items
    q = GemQueue.new
    items = Array.new(20) { |i| "item-#{i}" }
    items.each { |s| q << s }
    assert_equal items.sort, reachable_strings(q).sort
    assert_equal items, Array.new(20) { q.pop }
  end

  def test_a_sized_queue_reaches_its_items
    q = GemSizedQueue.new(8)
    items = Array.new(8) { |i| "slot-#{i}" }
    items.each { |s| q << s }
    assert_equal items.sort, reachable_strings(q).sort
  end

  def test_a_finished_task_reaches_its_value
    task = RapidThread.spawn { +"the value" }
    task.join
    assert_includes reachable_strings(task), "the value"
    assert_equal "the value", task.value
  end
end
