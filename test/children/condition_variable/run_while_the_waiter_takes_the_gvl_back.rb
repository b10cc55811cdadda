# ruby/spec's "ConditionVariable#wait can be interrupted by Thread#run",
# many times over: a Thread#run that lands after the waiter's spin ended,
# while it waits to take the GVL back, must still end its wait (it was
# lost about 1 run in 10 of the spec on 3.3.8: a deadlock). ARGV[0]: the
# number of rounds.
require_relative "../child_helper"

rounds = Integer(ARGV.fetch(0))
hand_off = RapidThread::Queue.new
rounds.times do |i|
  # A hand-off just before keeps the process's wait lists active, so that
  # the wait below spins (a fresh list borrows the process's last wake-up).
  popper = Thread.new { hand_off.pop }
  wait_until(10, "the popper to block") { popper.stop? }
  hand_off << i
  popper.join
  m = Thread::Mutex.new
  cv = RapidThread::ConditionVariable.new
  in_synchronize = false
  th = Thread.new do
    m.synchronize do
      in_synchronize = true
      cv.wait(m)
    end
    :success
  end
  wait_until(10, "the waiter to hold the mutex") { in_synchronize }
  wait_until(10, "the waiter to stop") { th.stop? }
  th.run
  abort "round #{i}: #{th.value.inspect}" unless th.value == :success
end
puts "ok #{rounds}"
