require_relative "../child_helper"
q = Thread::Queue.new
ts = Array.new(3) { RapidThread.spawn { q.pop; Thread.current } }
wait_until(10, "the three tasks to block") { ts.all? { |t| t.status == "sleep" } }
order = [] # the workers, in the order they became idle
3.times do |i|
  q << 1
  done = wait_until(10, "task #{i} to end") { ts.find { |t| !t.alive? && !order.include?(t.value) } }
  order << done.value
  wait_until(10, "worker #{i} to be idle") { done.value.stop? && RapidThread.cache_stats[:idle] == i + 1 }
end
wait_until(10, "a dormant monitor") { RapidThread.__monitor_dormant_for_tests }
oldest, middle, newest = order
task = RapidThread.spawn { Thread.current } # wakes the newest
newest.kill # before it has run again
ran_on = task.value
p [{ oldest => :oldest, middle => :middle, newest => :newest }[ran_on], newest.alive?]
