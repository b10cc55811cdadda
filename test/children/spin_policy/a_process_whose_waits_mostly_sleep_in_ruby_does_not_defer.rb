# vm_thread_condvar2's shape, small, on one CPU (the test pins it), but
# with the crowd on a fresh condition variable each round: ten threads
# wait on one, and the main thread on another, a calm list of one, woken
# by the last of the ten to arrive. A fresh list that woke nobody yet is
# dormant to all but its first waiter (crate::spin, ACTIVE_WINDOW), so
# nine of the crowd's waits a round sleep in Ruby at once. The main
# thread's waits and the crowd's first are active, but they are two
# waits in eleven: on Ruby 3.3+ the process never defers wake-ups
# (sys/park.rs, CALM_WINDOW), whose hook would cost every GVL event more
# than the deferral saves, and a park that does not defer costs more than
# Ruby's sleep there, so they sleep in Ruby: no park at all. Ruby 3.1 and
# 3.2 park them. Prints how many parks the last 300 rounds made
# (RapidThread.spin_stats).
require_relative "../child_helper"
require "rapid_thread"

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
parks_before = nil
m.synchronize do
  rounds.times do |i|
    parks_before = RapidThread.spin_stats[:parks] if i == rounds - 300
    last_in.wait(m) until waiting == n
    waiting = 0
    woken = crowd
    crowd = RapidThread::ConditionVariable.new
    n.times { woken.signal }
  end
end
parks = RapidThread.spin_stats[:parks] - parks_before
threads.each(&:join)
puts parks
