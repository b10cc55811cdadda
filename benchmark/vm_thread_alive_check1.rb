# Mirrors ruby's benchmark/vm_thread_alive_check1.rb (5_000 iterations,
# bm_vm_thread_alive_check1 in earlier Rubies): the same as
# vm_thread_alive_check with a tenth of the loops.
require_relative "impl"

BenchImpl.n(5_000).times{
  t = BenchImpl.thread{}
  while t.alive?
    Thread.pass
  end
}
