# queue_test.rb: chained wake-ups (queue.rs, the Executor's job queue),
# run with RAPID_THREAD_SPIN_US=0 so that every wait sleeps in Ruby at
# once, where a woken thread's status reads "run" at once. Prints how many
# of three sleeping poppers one push_all of three items woke (stock's
# Queue: three), what two poppers got after the one woken for two items
# was killed before it ran (its wake-up passed on), and what five poppers
# took of 200 items pushed in bursts (each once).
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

# 1. A burst wakes one popper.
q = chained_queue
poppers = sleeping_poppers(q, 3)
poppers.each { |t| t[:take] = 1 }
q.push_all([1, 2, 3])
puts poppers.count { |t| t.status == "run" }
p poppers.flat_map(&:value).sort

# 2. The popper woken is killed before it runs: the wake-up goes on.
q = chained_queue
poppers = sleeping_poppers(q, 3)
poppers.each { |t| t[:take] = 1 }
q.push_all([1, 2])
woken = poppers.select { |t| t.status == "run" }
woken.each(&:kill)
rest = poppers - woken
p [woken.size, rest.map(&:value).flatten.sort, q.size]

# 3. Bursts from two pushers, five poppers: each item taken once.
q = chained_queue
poppers = sleeping_poppers(q, 5)
pushers = [0, 100].map do |base|
  Thread.new { 10.times { |i| q.push_all(Array.new(10) { |j| base + (i * 10) + j }) } }
end
pushers.each(&:join)
q.close
p poppers.flat_map(&:value).sort == (0...200).to_a
