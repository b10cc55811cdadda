require_relative "../child_helper"
trap(:INT, "DEFAULT")
q = RapidThread::Queue.new
Thread.new { sleep 30 }
Thread.new do
  wait_until(10, "the pop to wait") { q.num_waiting == 1 }
  Process.kill(:INT, Process.pid)
  sleep 30
end
begin
  q.pop
rescue Interrupt
  puts "interrupted, waiting=#{q.num_waiting}"
end
