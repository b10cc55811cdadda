require_relative "../child_helper"
g = ThreadGroup.new
g.add(Thread.current)
killed = Thread::Queue.new
TracePoint.new(:thread_begin) { killed << Thread.current; Thread.current.kill }.enable
pending_after = lambda do |n|
  n.times { RapidThread.spawn { :ran } }
  lost = Array.new(n) { killed.pop }
  wait_until(10, "the killed threads to end") { lost.none?(&:alive?) }
  RapidThread.cache_stats[:pending]
end
p pending_after.(64), pending_after.(1)
