require_relative "../child_helper"
q = Thread::Queue.new
ts = Array.new(2) { RapidThread.spawn { q.pop; Thread.current } }
wait_until(10, "both tasks to block") { ts.all? { |t| t.status == "sleep" } }
# One at a time, so that the second is the newest idle worker.
q << 1
done = wait_until(10, "a task to end") { ts.find { |t| !t.alive? } }
wait_until(10, "its worker to be idle") { done.value.stop? && RapidThread.cache_stats[:idle] == 1 }
q << 1
newest = (ts - [done]).first.value
wait_until(10, "the second worker to be idle") { newest.stop? && RapidThread.cache_stats[:idle] == 2 }
wait_until(10, "a dormant monitor") { RapidThread.__monitor_dormant_for_tests }
ran = false
first = RapidThread.spawn { q.pop } # wakes the newest first
RapidThread.spawn { ran = true }
newest.kill # before either woken worker has run again
wait_until(10, "the second task to start") { ran }
started = ran # before the first task ends (its worker would take it then)
q << 1
first.join
p [started, newest.alive?]
