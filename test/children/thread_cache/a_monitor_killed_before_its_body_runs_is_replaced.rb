require_relative "../child_helper"
require_relative "on_first_thread_begin"
killed = false
tp = on_first_thread_begin(:monitor) { killed = true; Thread.current.kill }
task = RapidThread.spawn { :ran }
wait_until(10, "the hook to kill the monitor") { killed }
done = task.join(10)
tp.disable
p [done && task.value]
