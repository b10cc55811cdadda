# vm_thread_condvar2's shape, small, on one CPU (the test pins it): ten
# threads wait on one condition variable, woken each round by a broadcast,
# and count themselves in before they wait again; the last one in wakes
# the main thread, which waits on another. On Ruby 3.3+ the broadcast's
# waiters park and are woken in turn, each as the one before it gives up
# the GVL (sys/park.rs, relayed wake-ups). ARGV[0] says how the round
# goes on:
#   plain: as condvar2;
#   kill:  the main thread waits in stock's ConditionVariable (it sleeps
#          in Ruby: Ruby's suspension hook reports it), and in one round
#          kills a waiter in its park right after the broadcast;
#   poll:  the main thread, after the broadcast, polls with Thread.pass
#          until every waiter is back (with nobody queued for the GVL a
#          pass yields nothing, and Ruby reports no suspension).
# Prints, for the last 300 rounds: how many relayed words parks took (nine
# a round; eight after the kill), how many parks ran out their limit
# before their wake-up came (a relay that stalls leaves its waiters to
# their 10 ms limit), and the context switches of all threads per round
# (/proc/self/task/<tid>/status; eleven hand-offs make at least eleven).
require_relative "../child_helper"
require "rapid_thread"

mode = ARGV.fetch(0)
m = Thread::Mutex.new
crowd = RapidThread::ConditionVariable.new
last_in = mode == "kill" ? Thread::ConditionVariable.new : RapidThread::ConditionVariable.new
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
# Read while every waiter waits, before round 300 from the end and
# before the last (after it they end).
seen = []
round = lambda do |i|
  seen << [RapidThread.spin_stats, all_context_switches] if i == rounds - 301 || i == rounds - 1
  waiting = 0
  crowd.broadcast
end
if mode == "poll"
  m.synchronize { last_in.wait(m) until waiting == n }
  rounds.times do |i|
    m.synchronize { round.(i) }
    wait_until { m.synchronize { waiting == n } || i == rounds - 1 }
  end
else
  m.synchronize do
    rounds.times do |i|
      last_in.wait(m) until waiting == n
      round.(i)
      next unless mode == "kill" && i == rounds - 150

      threads[4].kill # woken, parked, not yet run: the other nine go on
      n -= 1
    end
  end
end
threads.each(&:join)
(before, was), (after, now) = seen
puts after[:relayed] - before[:relayed], after[:park_timeouts] - before[:park_timeouts], (now - was) / 300
