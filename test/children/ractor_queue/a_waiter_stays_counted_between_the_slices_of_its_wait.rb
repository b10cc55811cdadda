require_relative "../child_helper"
q = RapidThread::RactorQueue.new
seen = nil
trap(:USR1) { seen = q.num_waiting; q << :done }
Thread.new { wait_until(10, "the pop to wait") { q.num_waiting == 1 }; Process.kill :USR1, $$ }
p [q.pop, seen, q.num_waiting]
