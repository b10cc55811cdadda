# vm_thread_condvar2's shape, small, on one CPU (the test pins it): ten
# threads wait on one condition variable, woken each round by a broadcast,
# and the main thread on another, woken by the last of the ten to arrive.
# On Ruby 3.3+ the broadcast's waiters park, and each is woken as the one
# before it gives up the GVL (sys/park.rs, relayed wake-ups): none runs
# only to find the GVL taken. Prints, for the last 300 rounds: how many
# wake-ups were relayed (nine a round), how many parks ran out their limit
# (none: a relay that stalled would leave its waiters to their 10 ms
# limit), and the context switches of all threads per round
# (/proc/self/task/<tid>/status). Eleven hand-offs a round make at least
# eleven; stock's sleep makes about 26, as did this shape before.
require_relative "../child_helper"
require "rapid_thread"

def switches
  Dir["/proc/self/task/*/status"].sum do |f|
    File.read(f).scan(/^(?:non)?voluntary_ctxt_switches:\s*(\d+)/).sum { |(n)| n.to_i }
  rescue Errno::ENOENT
    0
  end
end

m = Thread::Mutex.new
crowd = RapidThread::ConditionVariable.new
last_in = RapidThread::ConditionVariable.new
n = 10
rounds = 600
waiting = 0
threads = n.times.map do
  Thread.new do
    m.synchronize do
      rounds.times do
        last_in.signal if (waiting += 1) == n
        crowd.wait(m)
      end
    end
  end
end
# Read while all ten wait, before round 300 from the end and before the
# last (after it they end).
seen = []
m.synchronize do
  rounds.times do |i|
    last_in.wait(m) until waiting == n
    seen << [RapidThread.spin_stats, switches] if i == rounds - 301 || i == rounds - 1
    waiting = 0
    crowd.broadcast
  end
end
threads.each(&:join)
(before, was), (after, now) = seen
puts after[:relayed] - before[:relayed], after[:park_timeouts] - before[:park_timeouts], (now - was) / 300
