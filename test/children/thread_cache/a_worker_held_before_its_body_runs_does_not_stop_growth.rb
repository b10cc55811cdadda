require_relative "../child_helper"
require_relative "on_first_thread_begin"
q = Thread::Queue.new
gate = Thread::Queue.new
t0 = RapidThread.spawn { q.pop }
wait_until(10, "t0 to block") { t0.status == "sleep" }
held = false
tp = on_first_thread_begin(:worker) { held = true; gate.pop }
RapidThread.spawn { :t1 } # its worker is held in the hook
t2 = RapidThread.spawn { gate << 1; :t2 }
done = t2.join(10)
tp.disable
q << 1
p [held, done && t2.value]
