require_relative "../child_helper"
trap(:INT, "DEFAULT")
q = RapidThread::RactorQueue.new
Thread.new { wait_until(10, "the pop to wait") { q.num_waiting == 1 }; Process.kill :INT, $$ }
begin
  q.pop
rescue Interrupt
  puts "Interrupt"
end
