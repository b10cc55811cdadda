# executor_test.rb: run with RAPID_THREAD_SPIN_US=0, so that idle workers
# sleep in Ruby, where a woken thread's status reads "run" at once. Eight
# jobs are posted to eight idle workers, then the poster holds the GVL for
# 20 ms, as a CPU-bound thread would: the one worker a burst wakes comes
# late (queue.rs, chained wake-ups), and wakes a worker for each job left
# before it runs its own. Prints how many other workers were woken when
# the first job ran.
require_relative "../child_helper"

ex = RapidThread::Executor.new
gate = RapidThread::Queue.new
started = RapidThread::Queue.new
8.times { ex.post { started << 1; gate.pop } }
8.times { started.pop }
8.times { gate << 1 }
queue = ex.instance_variable_get(:@queue)
workers = ex.instance_variable_get(:@tasks).each_value.map { |me| me[1] }
wait_until(10, "8 workers asleep") { queue.num_waiting == 8 && workers.all? { |t| t.status == "sleep" } }

seen = RapidThread::Queue.new
8.times { ex.post { seen << workers.count { |t| !t.equal?(Thread.current) && t.status == "run" }; gate.pop } }
held = monotonic
nil while monotonic - held < 0.02
first = seen.pop
7.times { seen.pop }
8.times { gate << 1 }
ex.shutdown
ex.wait_for_termination(10) or abort "not terminated"
puts first
