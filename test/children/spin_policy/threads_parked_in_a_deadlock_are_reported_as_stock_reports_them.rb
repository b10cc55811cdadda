# ARGV[0]: "stock" (Thread::Queue) or "gem".
QUEUE = { "stock" => Thread::Queue, "gem" => RapidThread::Queue }.fetch(ARGV[0])
a = QUEUE.new
b = QUEUE.new
t = Thread.new do
  100.times { b << a.pop }
  a.pop # waits for good
end
100.times { |i| a << i; b.pop }
begin
  b.pop # waits for good: each thread waits for the other
rescue Exception => e
  puts e.class, e.message.lines.first
end
puts RapidThread.spin_stats[:parks] > 0 if QUEUE == RapidThread::Queue
