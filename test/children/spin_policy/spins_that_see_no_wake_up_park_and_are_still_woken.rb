# spin_policy_test.rb: run with RAPID_THREAD_SPIN_US=1, so that nearly
# every spin ends before its wake-up and parks (spin.rs, "A spin that ends
# without"). Prints the ping-pongs' sum (every late wake-up arrived), what
# a Thread#raise aimed at a parked pop raised, and whether spins parked
# (if not, the spin stats and CPU budget after it, for the failure's diff).
require_relative "../child_helper"
require_relative "../../support/ping_pong"
# Waits spin only while a CPU is free, and until /proc/stat's first window
# ends (100 ms, about one ping-pong) /proc/loadavg's runnable count taken
# at the first wait stands for the machine (spin.rs, `free_millicpus`): a
# moment's load then kept a whole ping-pong from spinning (CI, 3.4.5). So
# ping-pongs run until spins have parked, for at most CHILD_WAIT_LIMIT.
sums = []
pass_until do
  sums << ping_pong
  RapidThread.spin_stats[:spin_parks].positive?
end
q = RapidThread::Queue.new
popper = Thread.new do
  q.pop
rescue IOError => e
  e.message
end
wait_until(10, "the pop to wait") { popper.stop? }
popper.raise(IOError, "raised in the wait")
parked = RapidThread.spin_stats[:spin_parks].positive?
puts sums.uniq.size == 1 ? sums.first : sums.inspect, popper.value, parked
p RapidThread.spin_stats, RapidThread.cpu_budget unless parked
