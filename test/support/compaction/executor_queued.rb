# Tasks queued behind a busy Executor worker, and their arguments, survive
# a full GC and the GC moving them. Its value: the tasks whose result was
# wrong.
ex = RapidThread::Executor.new(max_threads: 1)
begin
  gate = RapidThread::Queue.new
  ex.post { gate.pop }
  out = RapidThread::Queue.new
  50.times { |i| ex.post("arg-#{i}" * 2) { |s| out << s + "-done" } }
  GC.start(full_mark: true, immediate_sweep: true)
  GC.verify_compaction_references(**COMPACT_EVERYTHING)
  gate << 1
  got = Array.new(50) { out.pop }
  got.each_index.reject { |i| got[i] == "arg-#{i}" * 2 + "-done" }
ensure
  ex.kill
  ex.wait_for_termination(5)
end
