# spin_policy_test.rb: run with RAPID_THREAD_SPIN_US=1, so that nearly
# every spin ends before its wake-up and parks (spin.rs, "A spin that ends
# without"). Prints the ping-pong's sum (every late wake-up arrived), what
# a Thread#raise aimed at a parked pop raised, and whether spins parked.
require_relative "../child_helper"
require_relative "../../support/ping_pong"
sum = ping_pong
q = RapidThread::Queue.new
popper = Thread.new do
  q.pop
rescue IOError => e
  e.message
end
wait_until(10, "the pop to wait") { popper.stop? }
popper.raise(IOError, "raised in the wait")
puts sum, popper.value, RapidThread.spin_stats[:spin_parks].positive?
