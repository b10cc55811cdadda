# Mirrors ruby 3.1.2 benchmark/vm_thread_sized_queue3.rb; classes come from BenchImpl.
require_relative "impl"
# many producers, one consumer
n = BenchImpl.n(1_000_000)
m = 10
q = BenchImpl::SizedQueue.new(100)
consumer = BenchImpl.thread do
  while q.pop
    # consuming
  end
end

producers = m.times.map do
  BenchImpl.thread do
    while n > 0
      q.push true
      n -= 1
    end
  end
end
producers.each(&:join)
q.push nil
consumer.join
