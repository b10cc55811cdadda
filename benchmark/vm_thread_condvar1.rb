# Mirrors ruby 3.1.2 benchmark/vm_thread_condvar1.rb; classes come from BenchImpl.
require_relative "impl"
# two threads, two mutex, two condvar ping-pong
m1 = Thread::Mutex.new
m2 = Thread::Mutex.new
cv1 = BenchImpl::ConditionVariable.new
cv2 = BenchImpl::ConditionVariable.new
max = BenchImpl.n(100000)
i = 0
wait = nil
m2.synchronize do
  wait = BenchImpl.thread do
    m1.synchronize do
      m2.synchronize { cv2.signal }
      while (i += 1) < max
        cv1.wait(m1)
        cv2.signal
      end
    end
  end
  cv2.wait(m2)
end
m1.synchronize do
  while i < max
    cv1.signal
    cv2.wait(m1)
  end
end
wait.join
