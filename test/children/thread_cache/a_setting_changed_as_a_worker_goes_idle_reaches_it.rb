require_relative "../child_helper"
# A worker back from its block reads idle_timeout and max_idle, then asks
# whether the process is ending (Thread#alive? on the main thread) before
# it enlists on the idle list. A thread switch there let another thread
# change a setting while nobody was on the list to wake: the worker then
# slept out the old idle_timeout. The hook changes max_idle at that point,
# on the worker itself, as that other thread would have.
RapidThread.idle_timeout = 60
target = nil
fired = false
tp = TracePoint.new(:c_call) do |t|
  next unless t.method_id == :alive? && !fired && Thread.current.equal?(target)

  fired = true
  RapidThread.max_idle = 0
end
tp.enable
task = RapidThread.spawn { target = Thread.current }
worker = task.value
wait_until(10, "the worker to ask whether the process is ending") { fired }
tp.disable
left = pass_until(5) { !worker.alive? }
p [fired, !!left, RapidThread.cache_stats[:idle]]
