require_relative "../child_helper"
require_relative "on_first_thread_begin"
q = Thread::Queue.new
t0 = RapidThread.spawn { q.pop; Thread.current }
wait_until(10, "t0 to block") { t0.status == "sleep" } # its worker is blocked
killed = false
tp = on_first_thread_begin(:worker) do
  killed = true
  q << 1 # t0's worker ends its block and takes t1
  Thread.current.kill
end
t1 = RapidThread.spawn { :t1 } # every worker blocked: one is started
worker = t0.value
t1.value
tp.disable
wait_until(10, "a dormant monitor and one idle worker") do
  RapidThread.__monitor_dormant_for_tests && RapidThread.cache_stats[:idle] == 1
end
t2 = RapidThread.spawn { :t2 } # wakes the one idle worker
worker.kill # before it has run again
done = t2.join(10)
p [killed, done && t2.value]
