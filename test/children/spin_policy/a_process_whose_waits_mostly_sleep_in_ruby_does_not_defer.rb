# vm_thread_condvar2's shape, small, on one CPU (the test pins it), but
# with the crowd woken one signal at a time: ten threads wait on one
# condition variable, a crowded list whose waits sleep in Ruby (woken by
# broadcasts instead, they park to be relayed: sys/park.rs, relayed
# wake-ups), and the main thread on another, a calm list of one, woken by
# the last of the ten to arrive. Main's waits are calm, but they are one wait
# in eleven: on Ruby 3.3+ the process never defers their wake-ups
# (sys/park.rs, CALM_WINDOW), whose hook would cost every GVL event more
# than the deferral saves, and a park that does not defer costs more than
# Ruby's sleep there, so they sleep in Ruby: no park at all. Ruby 3.1 and
# 3.2 park them with the batch policy. The waker reads main's policy
# (/proc/self/task/<tid>/stat) just before it signals. Prints how many of
# the last 300 rounds saw "batch", and how many parks they made
# (RapidThread.spin_stats). A build that parked them with the batch
# policy on 3.4.5 made about 300.
require_relative "../child_helper"
require "rapid_thread"

POLICIES = { 0 => "other", 3 => "batch" }.freeze
def policy(tid) = POLICIES.fetch(File.read("/proc/self/task/#{tid}/stat").split(") ").last.split[38].to_i)

m = Thread::Mutex.new
crowd = RapidThread::ConditionVariable.new
last_in = RapidThread::ConditionVariable.new
n = 10
rounds = 600
waiting = 0
seen = []
main = Thread.main.native_thread_id
threads = n.times.map do
  Thread.new do
    m.synchronize do
      rounds.times do
        if (waiting += 1) == n
          seen << policy(main)
          last_in.signal
        end
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
    n.times { crowd.signal }
  end
end
parks = RapidThread.spin_stats[:parks] - parks_before
threads.each(&:join)
puts seen.last(300).count("batch"), parks
