# concurrent-ruby's Event ping-pong (benchmark/libs/cr_event.rb) on one
# CPU (the test pins it): two threads take turns, each setting the other's
# event (ConditionVariable#broadcast under its mutex, one waiter) and
# waiting on its own. A broadcast that finds one parked waiter wakes it as
# a signal would (sys/park.rs, `Relay`): on Ruby 3.3+ it defers the
# wake-up until the broadcaster gives up the GVL, and Ruby 3.1/3.2 park
# the waiter SCHED_BATCH. So a round trip takes two context switches, as
# the test's ping-pong of signals does; a broadcast that woke its first
# waiter at once made about six (the woken thread preempted its waker,
# found the GVL taken and slept again). Prints the context switches of
# both threads (/proc/self/task/<tid>/status) over 2,000 round trips.
require_relative "../child_helper"
require "rapid_thread"

# An event as concurrent-ruby's: set / wait / reset under one mutex.
class Event
  def initialize
    @mutex = Thread::Mutex.new
    @cond = RapidThread::ConditionVariable.new
    @set = false
  end

  def set = @mutex.synchronize { @set = true; @cond.broadcast }
  def wait = @mutex.synchronize { @cond.wait(@mutex) until @set }
  def reset = @mutex.synchronize { @set = false }
end

mine = Event.new
theirs = Event.new
rounds = 2600
tid = nil
other = Thread.new do
  tid = Thread.current.native_thread_id
  rounds.times do
    mine.wait
    mine.reset
    theirs.set
  end
end
# Ruby 3.3+ parks from the first window of 256 calm waits (sys/park.rs,
# CALM_WINDOW). Counted while the other thread waits (after the last
# round it ends).
both = [Thread.main.native_thread_id]
counted = []
rounds.times do |i|
  if i == rounds - 2001 || i == rounds - 1
    both << tid if both.size == 1
    counted << both.sum { |t| context_switches(t) }
  end
  mine.set
  theirs.wait
  theirs.reset
end
other.join
puts counted.last - counted.first
