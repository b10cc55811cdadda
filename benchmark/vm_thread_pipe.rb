# Mirrors ruby 3.1.2 benchmark/vm_thread_pipe.rb: 100k one-byte writes and
# reads through a pipe between two threads.
require_relative "impl"
# Measure small and plenty pipe read/write.
# A performance may depend on GVL implementation.

lmax = BenchImpl.n(100_000)
r, w = IO.pipe
[BenchImpl.thread{
  lmax.times{
    w.write('a')
  }
  p "w:exit"
}, BenchImpl.thread{
  lmax.times{
    r.read(1)
  }
  p "r:exit"
}].each{|t| t.join}

