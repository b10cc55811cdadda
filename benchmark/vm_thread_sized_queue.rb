# Mirrors ruby 3.1.2 benchmark/vm_thread_sized_queue.rb; classes come from BenchImpl.
require_relative "impl"
# on producer, one consumer

n = BenchImpl.n(1_000_000)
q = BenchImpl::SizedQueue.new(100)
consumer = BenchImpl.thread{
  while q.pop
    # consuming
  end
}

producer = BenchImpl.thread{
  while n > 0
    q.push true
    n -= 1
  end
  q.push nil
}

consumer.join
