# queue_test.rb: chained wake-ups (queue.rs, the Executor's job queue),
# run with RAPID_THREAD_SPIN_US=0 so that every wait sleeps in Ruby at
# once, where a woken thread's status reads "run" at once. Prints
# 1. how many of three sleeping poppers one push_all of three items woke
#    (stock's Queue: three; all three items are taken, or it raises);
# 2. what two poppers got after the one woken for two items was killed
#    before it ran (its wake-up passed on);
# 3. whether three select and three pop_batch(1) poppers that take one
#    item each all got one of a push_all of three;
# 4. whether five poppers took each of 200 items pushed in bursts once,
#    with pop, select and pop_batch(1) (the items are taken before the
#    queue closes, which would wake every popper).
require_relative "../child_helper"

# `n` threads that take items from `q` until it is closed (or they have
# `t[:take]` items), each with `pop`, or the one `how` names.
def sleeping_poppers(q, n, how = :pop)
  take = { pop: -> { q.pop }, select: -> { RapidThread.select(q)&.last },
           batch: -> { q.pop_batch(1) } }.fetch(how)
  poppers = Array.new(n) do
    Thread.new do
      got = []
      while (v = take.call)
        got.concat(Array(v))
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

# 3. Three poppers that take one item each, with select and pop_batch:
# one push_all of three items reaches all three.
puts(%i[select batch].all? do |how|
  q = chained_queue
  poppers = sleeping_poppers(q, 3, how)
  poppers.each { |t| t[:take] = 1 }
  q.push_all([1, 2, 3])
  wait_until(10, "every #{how} popper served") { poppers.none?(&:alive?) }
  poppers.flat_map(&:value).sort == [1, 2, 3]
end)

# 4. Bursts from two pushers, five poppers (pop, select, pop_batch):
# each item taken once.
puts(%i[pop select batch].all? do |how|
  q = chained_queue
  poppers = sleeping_poppers(q, 5, how)
  pushers = [0, 100].map do |base|
    Thread.new { 10.times { |i| q.push_all(Array.new(10) { |j| base + (i * 10) + j }) } }
  end
  pushers.each(&:join)
  wait_until(10, "the items taken (#{how})") { q.empty? }
  q.close
  poppers.flat_map(&:value).sort == (0...200).to_a
end)
