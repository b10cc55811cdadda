# The first spawn makes the monitor, which copies its creator's fiber
# storage as every new thread does. It kept that copy for good (the
# spawner's request object stayed alive as long as the monitor), and
# every worker it made was born with a copy too: a :thread_begin hook in
# a new worker saw the first spawner's request.
begun = {}
TracePoint.new(:thread_begin) { begun[Thread.current] = Fiber[:request] }.enable
Fiber[:request] = :first
worker = Thread.spawn { Thread.current }.value
p [begun.fetch(worker), RapidThread.cache_stats[:created]]
