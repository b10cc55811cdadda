# Mirrors ruby 3.1.2 benchmark/vm_thread_condvar2.rb; classes come from BenchImpl.
require_relative "impl"
# many threads, one mutex, many condvars
m = Thread::Mutex.new
cv1 = BenchImpl::ConditionVariable.new
cv2 = BenchImpl::ConditionVariable.new
max = BenchImpl.n(1000)
n = 100
waiting = 0
scvs = []
waiters = n.times.map do |i|
  start_cv = BenchImpl::ConditionVariable.new
  scvs << start_cv
  start_mtx = Thread::Mutex.new
  start_mtx.synchronize do
    th = BenchImpl.thread(start_mtx, start_cv) do |sm, scv|
      m.synchronize do
        sm.synchronize { scv.signal }
        max.times do
          cv2.signal if (waiting += 1) == n
          cv1.wait(m)
        end
      end
    end
    start_cv.wait(start_mtx)
    th
  end
end
m.synchronize do
  max.times do
    cv2.wait(m) until waiting == n
    waiting = 0
    cv1.broadcast
  end
end
waiters.each(&:join)
