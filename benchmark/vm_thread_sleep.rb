# Mirrors ruby 3.1.2 benchmark/vm_thread_sleep.yml (loop_count 10_000):
# start threads that sleep forever; the process then exits.
require_relative "impl"

BenchImpl.n(10_000).times do
  BenchImpl.thread { sleep }
end
