require_relative "../child_helper"
t1 = nil
$hook = -> { t1.abort_on_exception = true if t1 }
class << $stderr
  alias_method :orig_write, :write
  def write(*a) = ($hook&.call; orig_write(*a))
end
q = Thread::Queue.new
t1 = RapidThread.spawn { q.pop; raise "one" }
q << 1
t1.join rescue nil
$hook = nil
# Back on the idle list (off the busy one is not enough: the worker
# leaves it before the join returns, and has more to do after).
wait_until(10, "the worker to be idle") { RapidThread.cache_stats[:idle] == 1 }
t2 = RapidThread.spawn { [Thread.current.abort_on_exception, Thread.current.report_on_exception] }
p t2.value
p RapidThread.cache_stats[:created]
