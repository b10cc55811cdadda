require "weakref"
# The first spawn makes the monitor, which copies its creator's fiber
# storage as every new thread does. It kept that copy for good: the
# spawner's request object stayed alive while the monitor lived. Made in a
# thread of its own, so that no stale reference stays on this stack.
ref = Thread.new do
  request = Object.new
  Fiber[:request] = request
  Thread.spawn { 1 }.value
  WeakRef.new(request)
end.value
5.times { GC.start(full_mark: true, immediate_sweep: true) }
p [ref.weakref_alive? ? :alive : :freed, RapidThread.cache_stats[:threads]]
