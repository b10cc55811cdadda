# Mirrors ruby 3.1.2 benchmark/vm_thread_sized_queue4.rb; classes come from BenchImpl.
require_relative "impl"
# many producers, many consumers
nr = BenchImpl.n(1_000_000)
n = 10
m = 10
q = BenchImpl::SizedQueue.new(100)
consumers = n.times.map do
  BenchImpl.thread do
    while q.pop
      # consuming
    end
  end
end

producers = m.times.map do
  BenchImpl.thread do
    while nr > 0
      q.push true
      nr -= 1
    end
  end
end

producers.each(&:join)
n.times { q.push nil }
consumers.each(&:join)
