RapidThread.idle_timeout = 30
ex = RapidThread::Executor.new(idletime: 60)
q = RapidThread::Queue.new
3.times { |i| ex.post { q << i; sleep if i.zero? } }
3.times { q.pop }
print "ok"
