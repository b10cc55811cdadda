require_relative "on_first_thread_begin"
killed = false
tp = on_first_thread_begin(:worker) { killed = true; Thread.current.kill }
task = RapidThread.spawn { :ran }
done = task.join(10)
tp.disable
p [killed, done && task.value, RapidThread.cache_stats[:threads]]
