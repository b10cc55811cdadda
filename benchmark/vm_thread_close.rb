# Mirrors ruby 3.1.2 benchmark/vm_thread_close.rb: 1000 sleeping threads,
# then 100k pipes opened and closed. On Ruby 3.1 and 3.3 IO#close checks
# only the threads waiting on that fd (rb_notify_fd_close walks
# vm->waiting_fds): the 1000 threads cost through the GC, which scans each
# one's machine stack on every minor GC.
require_relative "impl"

1000.times { BenchImpl.thread { sleep } }
i = 0
while i<BenchImpl.n(100_000) # benchmark loop 3
  i += 1
  IO.pipe.each(&:close)
end
