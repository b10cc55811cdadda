# queue_test.rb: chained wake-ups (queue.rs, the Executor's job queue),
# run with RAPID_THREAD_SPIN_US=0 so that every wait sleeps in Ruby at
# once, where a woken thread's status reads "run" at once. Prints how many
# of three sleeping poppers one push_all of three items woke (stock's
# Queue: three; all three items are taken, or it raises), what two
# poppers got after the one woken for two items was killed before it ran
# (its wake-up passed on), and whether five poppers took each of 200 items
# pushed in bursts once.
require_relative "../child_helper"

def sleeping_poppers(q, n)
  poppers = Array.new(n) do
    Thread.new do
      got = []
      while (v = q.pop)
        got << v
        break if got.size == Thread.current[:take]
      end
      got
    end
  end
  wait_until(10, "#{n} poppers asleep") { q.num_waiting == n && poppers.all? { |t| t.status == "sleep" } }
  poppers
end

def chained_queue = RapidThread::Queue.new.__send__(:__chain_wakeups!)

# Each of 1 and 2 reads statuses right after a push: a time slice that
# ended in between would let a woken popper run first (and pass the
# wake-up on), so it is tried up to three times for a clean reading.
# 1. A burst wakes one popper.
woken = 3.times.map do
  q = chained_queue
  poppers = sleeping_poppers(q, 3)
  poppers.each { |t| t[:take] = 1 }
  q.push_all([1, 2, 3])
  n = poppers.count { |t| t.status == "run" }
  raise "lost: #{poppers.flat_map(&:value).sort}" unless poppers.flat_map(&:value).sort == [1, 2, 3]
  break n if n == 1

  n
end
puts Array(woken).last

# 2. The popper woken is killed before it runs: the wake-up goes on.
result = nil
3.times do
  q = chained_queue
  poppers = sleeping_poppers(q, 3)
  poppers.each { |t| t[:take] = 1 }
  q.push_all([1, 2])
  woken = poppers.select { |t| t.status == "run" }
  woken.each(&:kill)
  rest = poppers - woken
  q.close unless woken.size == 1 # an unclean reading: let the rest end
  result = [woken.size, rest.map(&:value).flatten.sort, q.size]
  break if woken.size == 1
end
p result

# 3. Bursts from two pushers, five poppers: each item taken once.
q = chained_queue
poppers = sleeping_poppers(q, 5)
pushers = [0, 100].map do |base|
  Thread.new { 10.times { |i| q.push_all(Array.new(10) { |j| base + (i * 10) + j }) } }
end
pushers.each(&:join)
q.close
p poppers.flat_map(&:value).sort == (0...200).to_a
