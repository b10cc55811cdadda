g = ThreadGroup.new
g.add(Thread.current)
g.enclose
tp = TracePoint.new(:thread_begin) { Thread.current.kill }
tp.enable
stock = Thread.new { :ran }
ours = RapidThread.spawn { :ran }
p [stock.join(10).equal?(stock), stock.value, stock.status]
p [ours.join(10).equal?(ours), ours.value, ours.status]
