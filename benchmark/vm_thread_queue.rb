# Mirrors ruby 3.1.2 benchmark/vm_thread_queue.rb: one producer, one
# consumer, 10M items through an unbounded queue.
require_relative "impl"

n = BenchImpl.n(10_000_000)
q = BenchImpl::Queue.new
consumer = BenchImpl.thread{
  while q.pop
    # consuming
  end
}

producer = BenchImpl.thread{
  n.times{
    q.push true
  }
  q.push nil
}

consumer.join
