# Mirrors ruby 3.1.2 benchmark/vm_thread_pass_flood.rb: 5000 threads that
# pass the GVL forever while the main thread counts to 10k, then exits.
require_relative "impl"
# n.b. this is a good test for GVL when pinned to a single CPU

BenchImpl.n(5_000).times{
  BenchImpl.thread{loop{Thread.pass}}
}

i = 0
while i<10_000
  i += 1
end
