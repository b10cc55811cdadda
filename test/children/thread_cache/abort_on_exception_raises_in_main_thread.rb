# ARGV[0]: "task" sets the task's abort_on_exception, "global" Thread's.
q = Thread::Queue.new
t = Thread.spawn { q.pop; raise "fatal in block" }
case ARGV[0]
when "task" then t.abort_on_exception = true
when "global" then Thread.abort_on_exception = true
else abort "unknown setting #{ARGV[0].inspect}"
end
q << 1
sleep 10
puts "not aborted"
