# vm_thread_condvar2's shape, small: ten threads wait on one condition
# variable, woken each round by a broadcast, and count themselves in
# before they wait again; the last one in wakes the main thread. In one
# round the main thread kills a waiter right after its broadcast, before
# the waiter has run. The killed waiter must not pass its wake-up on
# (a signal's is: condition_variable_test.rb): the next waiter on the list
# came later, counted itself in already, and would count itself twice,
# so the next round would start before everyone waits (and, a round
# short, a waiter would end early: the last rounds would deadlock).
# ARGV[0]: "stock" or "gem". Prints the rounds each survivor waited.
require_relative "../child_helper"
require "rapid_thread"

klass = ARGV[0] == "stock" ? Thread::ConditionVariable : RapidThread::ConditionVariable
m = Thread::Mutex.new
crowd = klass.new
last_in = klass.new
n = 10
rounds = 100
waiting = 0
counts = Array.new(n, 0)
threads = n.times.map do |i|
  Thread.new do
    m.synchronize do
      loop do
        last_in.signal if (waiting += 1) == n
        crowd.wait(m)
        counts[i] += 1
        break if counts[i] == rounds
      end
    end
  end
end
m.synchronize do
  rounds.times do |r|
    last_in.wait(m) until waiting == n
    waiting = 0
    crowd.broadcast
    next unless r == rounds / 2

    threads[4].kill
    n -= 1
  end
end
threads.each(&:join)
puts counts.tally.sort.inspect
