# On one CPU, a calm park's waker wakes it when it gives up the GVL
# (sys/park.rs, deferred wake-ups on Ruby 3.3+). Here the main thread waits
# until the echo thread sleeps in its park (in FUTEX_WAIT on a word that
# holds 0, with a time limit: /proc/self/task/<tid>/syscall), pushes,
# and then sleeps in Ruby's own Queue#pop, not in the gem's code: Ruby's
# suspension hook must wake the echo thread. Woken late instead (at its
# park's 10 ms limit), its hand-offs would count as late and its list
# would stop parking after a few; woken by the hook, nearly every one of
# the 200 round trips parks.
require_relative "../child_helper"
require "rapid_thread"

FUTEX = { "x86_64" => 202, "aarch64" => 98 }.fetch(RbConfig::CONFIG["host_cpu"]) { abort "futex's number on #{RbConfig::CONFIG["host_cpu"]}?" }
def parked?(tid)
  nr, _word, op, val, limit = File.read("/proc/self/task/#{tid}/syscall").split
  nr == FUTEX.to_s && op.hex == 0x80 && val.hex.zero? && !limit.hex.zero? # FUTEX_WAIT_PRIVATE
end

ping = RapidThread::Queue.new
back = Thread::Queue.new # stock's: the main thread sleeps in Ruby
echo = Thread.new do
  back << Thread.current.native_thread_id
  while (v = ping.pop)
    back << v
  end
end
tid = back.pop
# Waits (a few thousand looks at most) for the echo thread's park; a list
# that stopped parking sleeps in Ruby instead, and is not waited for.
round_trip = lambda do |i|
  5000.times { break if parked?(tid) }
  ping << i
  back.pop
end
# Ruby 3.3+ parks calm waits, deferring their wake-ups, from the first
# window of 256 calm waits that were a quarter or more of its waits
# (sys/park.rs, CALM_WINDOW); until then they sleep in Ruby, so the
# warm-up does not look for parks.
300.times { |i| ping << i; back.pop }
before = RapidThread.spin_stats[:parks]
200.times(&round_trip)
parks = RapidThread.spin_stats[:parks] - before
ping << nil
echo.join
puts parks > 150 || parks
