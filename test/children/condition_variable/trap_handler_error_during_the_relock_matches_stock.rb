# ARGV[0]: "stock" (Thread::ConditionVariable) or "gem".
require_relative "../child_helper"
impl = ARGV[0] == "stock" ? Thread::ConditionVariable : RapidThread::ConditionVariable
m = Thread::Mutex.new
cv = impl.new
[-> { raise "boom from trap" }, -> { exit 3 }].each do |handler|
  trap("USR1") { handler.call }
  waiting = false
  t = Thread.new do
    wait_until(10, "the main thread to wait") { waiting && Thread.main.stop? }
    m.synchronize do
      cv.signal
      # The main thread is now trying to take the mutex back.
      wait_until(10, "the main thread to wait for the mutex") { Thread.main.stop? }
      Process.kill(:USR1, Process.pid)
      wait_until(10, "the main thread to take the signal") { Thread.main.status == "run" || Thread.main.stop? }
    end
  end
  begin
    m.synchronize { waiting = true; cv.wait(m) }
    puts "woke"
  rescue Exception => e # rubocop:disable Lint/RescueException
    puts "#{e.class}: #{e.message}"
  end
  t.join
  puts "locked after: #{m.locked?}"
end
