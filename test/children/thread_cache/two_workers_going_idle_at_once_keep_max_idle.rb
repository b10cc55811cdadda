require_relative "../child_helper"
# A worker back from its block checks that fewer than max_idle workers
# are idle, then asks whether the process is ending (Thread#alive? on the
# main thread) before it enlists on the idle list. A thread switch there
# let a second worker pass the same check: both enlisted, one more than
# max_idle, for up to idle_timeout. The hook holds the first worker at
# that call until the second has reached it too.
RapidThread.idle_timeout = 60
RapidThread.max_idle = 1
workers = []
held = nil
both = false
tp = TracePoint.new(:c_call) do |t|
  next unless t.method_id == :alive? && workers.include?(Thread.current) && !both

  if held.nil?
    held = Thread.current
    pass_until { both }
  elsif !Thread.current.equal?(held)
    both = true
  end
end
gate = Thread::Queue.new
started = Thread::Queue.new
tasks = Array.new(2) { RapidThread.spawn { workers << Thread.current; started << 1; gate.pop } }
2.times { started.pop }
tp.enable
gate << 1 << 1
tasks.each(&:join)
wait_until(10, "both workers to reach the idle check") { both }
tp.disable
settled = pass_until(5) { RapidThread.cache_stats[:idle] <= 1 && RapidThread.cache_stats[:threads] == 1 }
p [both, !!settled, RapidThread.cache_stats[:idle]]
