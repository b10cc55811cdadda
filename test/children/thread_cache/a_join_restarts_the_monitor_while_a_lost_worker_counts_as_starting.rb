require_relative "on_first_thread_begin"
killed = false
tp = on_first_thread_begin(:worker) do
  killed = true
  Thread.list.find { |t| t.name == "rapid_thread monitor" }&.kill
  Thread.current.kill
end
task = RapidThread.spawn { :ran }
done = task.join(10)
tp.disable
p [killed, done && task.value]
