require_relative "prelude"
q = RQ.new
r = Ractor.new(q) do |qq|
  t = Thread.new { qq.pop }
  t.report_on_exception = false
  wait_until(10, "the thread to pop") { qq.num_waiting >= 1 }
  t.raise(IOError, "stop")
  begin
    t.join
  rescue IOError => e
    e.message
  end
end
p r.take
r = Ractor.new(q) do |qq|
  me = Thread.current
  Thread.new { wait_until(10, "the Ractor to pop") { qq.num_waiting >= 1 }; me.raise(IOError, "late") }
  begin
    qq.pop
  rescue IOError => e
    e.message
  end
end
p r.take
p q.num_waiting
