q = RapidThread::Queue.new
Thread.new { q.pop }
q.pop
