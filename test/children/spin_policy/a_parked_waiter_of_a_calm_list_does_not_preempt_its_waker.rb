# The scheduling policy of a queue ping-pong's echo thread, on one CPU
# (the test pins it), read from /proc/self/task/<tid>/stat: while it is
# parked on its calm list it is SCHED_BATCH, which Linux never lets
# preempt on wake-up, and its Ruby code runs under its own policy.
# ARGV[0]: the echo thread's own policy, "other" (as made) or "batch"
# (inherited from the main thread, which chrt sets first): a thread that
# is not SCHED_OTHER is left alone.
require_relative "../child_helper"
require "rapid_thread"

POLICIES = { 0 => "other", 3 => "batch" }.freeze
def policy(tid) = POLICIES.fetch(File.read("/proc/self/task/#{tid}/stat").split(") ").last.split[38].to_i)

system("chrt", "--batch", "-p", "0", Process.pid.to_s, exception: true) if ARGV[0] == "batch"
ping = RapidThread::Queue.new
pong = RapidThread::Queue.new
own = []
echo = Thread.new do
  pong << Thread.current.native_thread_id
  while (v = ping.pop)
    own << policy(Thread.current.native_thread_id)
    pong << v
  end
end
tid = pong.pop
# Once the lists are active, each pop of pong returns after the echo
# thread pushed and went back to ping.pop, where it parks.
parked = 200.times.map do |i|
  ping << i
  pong.pop
  policy(tid)
end
ping << nil
echo.join
puts own.uniq.join(","), parked.tally.fetch("batch", 0) > 100
