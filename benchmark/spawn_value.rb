# frozen_string_literal: true

# vm_thread_create_join with #value for #join (issue 22 names it): 100k
# times, start a thread with a block returning a value and take the value.
# The thread-creation path a caller that wants a result takes.
require_relative "impl"

i = 0
n = BenchImpl.n(100_000)
while i < n
  i += 1
  BenchImpl.thread { i }.value
end
