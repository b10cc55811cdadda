# Mirrors ruby 3.1.2 benchmark/vm_thread_alive_check.yml (loop_count
# 50_000): start a thread, then pass the GVL until it has ended.
require_relative "impl"

BenchImpl.n(50_000).times do
  t = BenchImpl.thread{}
  while t.alive?
    Thread.pass
  end
end
