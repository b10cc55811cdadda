require_relative "../child_helper"
q = Thread::Queue.new
t0 = RapidThread.spawn { q.pop } # the first spawn makes the monitor
monitor = nil
wait_until(10, "t0 to block and the monitor to sleep with nothing pending") do
  monitor = Thread.list.find { |th| th.name == "rapid_thread monitor" }
  t0.status == "sleep" && RapidThread.__monitor_dormant_for_tests && monitor&.status == "sleep"
end
# Every worker is blocked: this spawn needs a new one, and makes it itself,
# from inside the spawner's masks. A woken monitor would show "run" here.
t1 = Thread.handle_interrupt(Object => :never) { RapidThread.spawn { Thread.current } }
status = monitor.status
worker = t1.value
# The worker is not masked: a block on it (the newest idle) can be killed.
on = nil
t2 = RapidThread.spawn { on = Thread.current; sleep }
wait_until(10, "t2 to sleep") { t2.status == "sleep" }
t2.kill
killed = t2.join(5).equal?(t2)
q << 1
t0.join
p [status, killed, on.equal?(worker)]
