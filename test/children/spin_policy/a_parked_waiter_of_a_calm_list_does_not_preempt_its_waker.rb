# A queue ping-pong on one CPU (the test pins it): the echo thread parks on
# its calm list, and its wake-up does not preempt its waker, the main
# thread, which hands over only when it blocks. So a round trip takes two
# context switches, one each way (the two threads' voluntary and
# nonvoluntary_ctxt_switches, /proc/self/task/<tid>/status), where a
# wake-up that preempts makes about five. Ruby 3.1 and 3.2 have the
# parked thread SCHED_BATCH while it sleeps, which Linux never lets
# preempt on wake-up (its policy read from /proc/self/task/<tid>/stat);
# Ruby 3.3+, once calm waits are a quarter of the process's waits
# (sys/park.rs, CALM_WINDOW), has the waker wake it only when it gives up
# the GVL, and changes no policy. The echo thread has its
# own policy in its Ruby code (a read of its own /proc file) and in a Ruby
# sleep (Thread.stop).
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
  pong << :stopping
  Thread.stop
end
tid = pong.pop
# Ruby 3.3+ parks calm waits and defers their wake-ups from the first
# window of 256 calm waits that were a quarter or more of its waits
# (sys/park.rs, CALM_WINDOW).
300.times do |i|
  ping << i
  pong.pop
end
# Each pop of pong returns after the echo thread pushed and went back to
# ping.pop, where it parks.
parked = 200.times.map do |i|
  ping << i
  pong.pop
  policy(tid)
end
both = [Thread.main.native_thread_id, tid]
before = both.sum { |t| context_switches(t) }
2000.times do |i|
  ping << i
  pong.pop
end
after = both.sum { |t| context_switches(t) }
ping << nil
pong.pop
Thread.pass until echo.stop?
stopped = policy(tid)
echo.wakeup
echo.join
puts own.uniq.join(","), parked.tally.fetch("batch", 0) > 100, stopped, after - before
