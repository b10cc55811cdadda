require_relative "../child_helper"
PROBE = lambda do |g|
  [Thread.current.priority, Thread.current.group.equal?(g), g.list.include?(Thread.current),
   ThreadGroup::Default.list.include?(Thread.current),
   (ThreadGroup::Default.add(Thread.current) rescue $!.message)]
end
RapidThread.spawn {}.join # the cache has a worker and its monitor
g = ThreadGroup.new
g.add(Thread.current)
Thread.current.priority = -1
g.enclose
p Thread.new { PROBE[g] }.value
p RapidThread.spawn { PROBE[g] }.value
# While it runs it is listed there; Task#kill, #raise and errors work.
q = Thread::Queue.new
t = RapidThread.spawn { q.pop }
wait_until(10, "the task to block") { t.status == "sleep" }
p [g.list.include?(t.thread), t.kill.join(10).equal?(t), t.value]
t = RapidThread.spawn { q.pop }
t.report_on_exception = false
t.raise(ArgumentError, "pending")
p(begin; t.value; rescue => e; e.message; end)
p(begin; RapidThread.spawn { Thread.current.report_on_exception = false; raise "in block" }.value; rescue => e; e.message; end)
p RapidThread.spawn(1, k: 2) { |a, k:| a + k }.value
