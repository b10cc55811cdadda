require_relative "../child_helper"
q = Thread::Queue.new
busy = RapidThread.spawn { q.pop }
wait_until(10, "the busy task to block") { busy.status == "sleep" }
wait_until(10, "a dormant monitor") { RapidThread.__monitor_dormant_for_tests }
ran = false
main = Thread.current
tp = TracePoint.new(:c_call) do |t|
  raise "interrupted" if t.method_id == :stop? && Thread.current == main
end
begin
  tp.enable { RapidThread.spawn { ran = true; q << 1 } }
rescue RuntimeError => e
  puts e.message
end
wait_until(10, "the queued task to run") { ran }
p ran
busy.join(1) if ran
