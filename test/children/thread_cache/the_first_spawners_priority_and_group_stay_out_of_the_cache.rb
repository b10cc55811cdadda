g = ThreadGroup.new
g.add(Thread.current)
Thread.current.priority = 3
RapidThread.spawn {}.join # the cache's first threads, made from here
ThreadGroup::Default.add(Thread.current)
Thread.current.priority = 0
p Array.new(3) { RapidThread.spawn { [Thread.current.priority, Thread.current.group.equal?(ThreadGroup::Default)] }.value }.uniq
p g.list
