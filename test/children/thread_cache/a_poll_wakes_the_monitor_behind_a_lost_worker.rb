require_relative "../child_helper"
require_relative "on_first_thread_begin"
q = Thread::Queue.new
t0 = RapidThread.spawn { q.pop }
wait_until(10, "t0 to block and the monitor to sleep with nothing pending") do
  t0.status == "sleep" && RapidThread.__monitor_dormant_for_tests
end
killed = false
tp = on_first_thread_begin(:worker) { killed = true; Thread.current.kill }
task = RapidThread.spawn { :ran } # its worker, started by this spawn, is lost
# Only polls: no join, no other spawn.
ran = pass_until { !task.alive? }
tp.disable
q << 1
p [killed, ran && task.value]
