# Blocks spawned while every worker is busy wait in the thread cache's
# pending list (marked by it, moved by compaction), with their arguments
# and, on Ruby 3.3+, their spawner's fiber storage (a copy only the task
# holds); their results outlive a later GC. Its value: the tasks that
# went wrong.
n = GC.stress ? 40 : 200
storage = RUBY_VERSION >= "3.3" # carried from 3.3 on (build.rs)
tag = ->(i) { storage ? "tag-#{i}" * 2 : "" }
gate = Thread::Queue.new
hold = RapidThread.spawn { gate.pop }
begin
  Thread.pass until hold.status == "sleep"
  tasks = Array.new(n) do |i|
    Fiber[:tag] = tag.(i) if storage
    RapidThread.spawn("arg-#{i}" * 2) { |s| s + "-done" + (storage ? Fiber[:tag] : "") }
  end
  Fiber[:tag] = nil if storage
  GC.start(full_mark: true, immediate_sweep: true)
  GC.verify_compaction_references(**COMPACT_EVERYTHING)
ensure
  gate.close
end
fails = tasks.each_index.reject { |i| tasks[i].value == "arg-#{i}" * 2 + "-done" + tag.(i) }
GC.start
fails << :first_after_gc unless tasks.first.value == "arg-0arg-0-done" + tag.(0)
hold.join
fails
