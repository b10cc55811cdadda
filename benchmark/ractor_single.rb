# Scenario "ractor_single" (issue 15): what sharing costs. One thread of the
# main Ractor pushes and pops N Integers, 64 at a time, through
# Thread::Queue (stock) or RapidThread::RactorQueue (gem mode, whose lock
# and shareability check Thread::Queue does not need). A ratio below 1.0x
# is the price of a queue that Ractors can share.
require_relative "impl"

N = BenchImpl.n(2_000_000)
q = BenchImpl::NAME == "gem" ? RapidThread::RactorQueue.new : Thread::Queue.new
BenchProbe.start if defined?(BenchProbe)
i = 0
while i < N
  j = 0
  while j < 64
    q << j
    j += 1
  end
  j = 0
  while j < 64
    q.pop
    j += 1
  end
  i += 64
end
BenchProbe.finish if defined?(BenchProbe)
