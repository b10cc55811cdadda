# Per call: Queue#close of an already-closed queue (after the first call
# nothing changes: the method's own cost).
require_relative "../impl"

n = BenchImpl.n(3_000_000)
q = BenchImpl::Queue.new
BenchProbe.start
i = 0
while i < n
  q.close
  i += 1
end
