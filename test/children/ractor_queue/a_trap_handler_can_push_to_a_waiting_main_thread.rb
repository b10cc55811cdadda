q = RapidThread::RactorQueue.new
trap(:USR1) { q << "USR1" }
Thread.new { loop { Process.kill :USR1, $$; sleep 0.01 } }
puts q.pop, q.pop, "exit"
