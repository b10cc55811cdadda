# Mirrors ruby 3.1.2 benchmark/vm_thread_close.rb: 1000 sleeping threads,
# then 100k pipes opened and closed (IO#close checks every thread).
require_relative "impl"

1000.times { BenchImpl.thread { sleep } }
i = 0
while i<BenchImpl.n(100_000) # benchmark loop 3
  i += 1
  IO.pipe.each(&:close)
end
