# frozen_string_literal: true

# A representative workload for Valgrind memcheck (rake valgrind): every
# class, blocking and waking, timeouts, interrupts, close, fork, the thread
# cache (spawn, exceptions, kill, idle expiry) and GC with compaction.
require "rapid_thread"

q = RapidThread::Queue.new
sq = RapidThread::SizedQueue.new(2)
producer = RapidThread.spawn { 300.times { |i| sq << "item-#{i}" }; sq.close }
got = []
while (v = sq.pop)
  got << v
end
producer.join
raise "lost items" unless got.size == 300

1000.times { |i| q << i.to_s }
GC.start
GC.verify_compaction_references(**(RUBY_VERSION >= "3.2" ? { expand_heap: true } : { double_heap: true }), toward: :empty) if GC.respond_to?(:verify_compaction_references)
1000.times { q.pop }
raise "timeout" unless q.pop(timeout: 0.01).nil?

m = Mutex.new
cv = RapidThread::ConditionVariable.new
waiters = Array.new(4) { Thread.new { m.synchronize { cv.wait(m, 5) } } }
Thread.pass until waiters.all? { |t| t.status == "sleep" }
m.synchronize { cv.broadcast }
waiters.each(&:join)

blocked = Array.new(8) { |i| Thread.new { i.even? ? q.pop : sq.push(1) } }
sq2 = RapidThread::SizedQueue.new(1)
sq2 << 1
pushers = Array.new(4) { Thread.new { sq2.push(2) } }
Thread.pass until pushers.all? { |t| t.status == "sleep" }
pushers.first.raise(IOError) rescue nil
pushers[1].kill
sq2.close
pushers.each { |t| t.join rescue nil }
q.close
blocked.each { |t| t.join rescue nil }

RapidThread.idle_timeout = 0.05
tasks = Array.new(50) { |i| RapidThread.spawn(i) { |x| Thread.current[:k] = x; x * 2 } }
raise "spawn" unless tasks.sum(&:value) == 2450
t = RapidThread.spawn { raise ArgumentError, "boom" }
t.report_on_exception = false
t.join rescue nil
t = RapidThread.spawn { sleep }
Thread.pass until t.status == "sleep"
t.kill.join
if Process.respond_to?(:fork)
  pid = fork { exit!(RapidThread.spawn { 1 }.value == 1 ? 0 : 1) }
  Process.wait(pid)
  raise "fork" unless $?.success?
end
sleep 0.2 # idle workers expire
GC.start
puts "workload ok"
