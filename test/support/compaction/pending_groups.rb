# Blocks spawned from groups the spawner leaves at once: each waits on a
# thread of its own, listed with its task in the cache (marked by it, moved
# by compaction) until its body runs; the thread alone keeps its group. Its
# value: the blocks that did not see their group.
n = GC.stress ? 10 : 50
gate = Thread::Queue.new
hold = RapidThread.spawn { gate.pop }
Thread.pass until hold.status == "sleep"
# (A block that closed over its group would keep it alive itself.)
label = -> { Thread.current.group.instance_variable_get(:@label) }
from_a_new_group = lambda do |name|
  g = ThreadGroup.new
  g.instance_variable_set(:@label, name)
  g.add(Thread.current)
  RapidThread.spawn(&label)
ensure
  ThreadGroup::Default.add(Thread.current)
end
# All spawned, and the GC run, without giving up the GVL: the blocks are
# still pending then.
tasks = begin
  Thread.new do
    ts = Array.new(n) { |i| from_a_new_group.call("group-#{i}") }
    GC.start(full_mark: true, immediate_sweep: true)
    GC.verify_compaction_references(**COMPACT_EVERYTHING)
    ts
  end.value
ensure
  gate.close
end
tasks.each_index.reject { |i| tasks[i].value == "group-#{i}" }
