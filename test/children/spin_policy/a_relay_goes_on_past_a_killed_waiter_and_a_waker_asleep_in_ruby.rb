# A broadcast's relayed wake-ups (sys/park.rs) on one CPU (the test pins
# it) reach every waiter when the broadcaster then sleeps in Ruby (stock's
# ConditionVariable#wait: Ruby's suspension hook wakes the first), and
# when a waiter is killed in its park while the others wait for their
# turn (its park's end takes a word as any other's). The shape of
# a_broadcast_relays_its_parked_waiters_on_one_cpu.rb otherwise. Prints,
# for the last 300 rounds: how many wake-ups were relayed (nine a round
# until the kill, eight after it), and how many parks ran out their limit
# (none: a relay that stalled would leave its waiters to their 10 ms
# limit).
require_relative "../child_helper"
require "rapid_thread"

m = Thread::Mutex.new
crowd = RapidThread::ConditionVariable.new
last_in = Thread::ConditionVariable.new # stock's: main sleeps in Ruby
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
seen = []
m.synchronize do
  rounds.times do |i|
    last_in.wait(m) until waiting == n
    seen << RapidThread.spin_stats if i == rounds - 301 || i == rounds - 1
    waiting = 0
    crowd.broadcast
    next unless i == rounds - 150

    # Killed in its park, woken or about to be: the other nine go on.
    threads[4].kill
    n -= 1
  end
end
threads.each(&:join)
before, after = seen
puts after[:relayed] - before[:relayed], after[:park_timeouts] - before[:park_timeouts]
