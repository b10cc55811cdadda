# Mirrors ruby 3.1.2 benchmark/vm_thread_sized_queue2.rb; classes come from BenchImpl.
require_relative "impl"
# one producer, many consumers
n = BenchImpl.n(1_000_000)
m = 10
q = BenchImpl::SizedQueue.new(100)
consumers = m.times.map do
  BenchImpl.thread do
    while q.pop
      # consuming
    end
  end
end

producer = BenchImpl.thread do
  while n > 0
    q.push true
    n -= 1
  end
  m.times { q.push nil }
end

producer.join
consumers.each(&:join)
