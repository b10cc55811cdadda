# ARGV[0]: "stock" (Thread::Queue) or "gem".
QUEUE = { "stock" => Thread::Queue, "gem" => RapidThread::Queue }.fetch(ARGV[0])
a = QUEUE.new
b = QUEUE.new
# 300 round trips: on Ruby 3.3+ calm waits park from the first window of
# 256 that passes (sys/park.rs, CALM_WINDOW); until then they sleep in Ruby.
t = Thread.new do
  300.times { b << a.pop }
  a.pop # waits for good
end
300.times { |i| a << i; b.pop }
begin
  b.pop # waits for good: each thread waits for the other
rescue Exception => e
  puts e.class, e.message.lines.first
end
puts RapidThread.spin_stats[:parks] > 0 if QUEUE == RapidThread::Queue
