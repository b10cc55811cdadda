# Mirrors ruby 3.1.2 benchmark/vm_thread_create_join.rb: 100k times, start
# a thread with an empty block and join it.
require_relative "impl"

i = 0
n = BenchImpl.n(100_000)
while i<n # benchmark loop 3
  i += 1
  BenchImpl.thread{
  }.join
end
