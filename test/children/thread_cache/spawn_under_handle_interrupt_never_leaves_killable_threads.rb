require_relative "../child_helper"
t = Thread.handle_interrupt(Object => :never) { Thread.spawn { sleep } }
wait_until(10, "the task to sleep") { t.status == "sleep" }
t.kill
p t.join(5).equal?(t)
Thread.handle_interrupt(Object => :never) { Thread.spawn { sleep } }
