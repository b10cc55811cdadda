# Mirrors ruby 3.1.2 benchmark/vm_thread_mutex1.rb (Thread::Mutex is stock's
# in both modes; only the threads are spawned in gem mode).
require_relative "impl"
# one thread, one mutex (no contention)

require 'thread'
m = Thread::Mutex.new
r = 0
max = ((1000 * Math.sqrt(BenchImpl::SCALE)).round * 2).clamp(2, 2000) # even, as lmax halves it
lmax = max * max
(1..1).map{
  BenchImpl.thread{
    i = 0
    while i<lmax
      i += 1
      m.synchronize{
        r += 1
      }
    end
  }
}.each{|e|
  e.join
}
raise r.to_s if r != max * max
