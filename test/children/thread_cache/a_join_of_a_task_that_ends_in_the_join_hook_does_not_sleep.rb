require_relative "../child_helper"
# A join of a pending task asks the cache for a worker first (the join
# hook), which calls Thread#stop? on the busy workers. Ruby code there can
# switch threads: here the task starts and ends inside that call. Its
# wake-up of joiners went out before this joiner had enlisted, and the
# join slept out its 10 ms re-check of a pending task. A watcher, made
# inside the hook, looks for the joiner asleep before its join returns.
joiner = Thread.current

# The busy worker's block stays runnable (it never blocks), so the spawn
# asks for no worker and the task stays pending; the cache's stall rule may
# still start one before the join (a slow machine): then try again.
def attempt(joiner)
  released = false
  busy = Thread.spawn { Thread.pass until released }
  task = Thread.spawn { :done }
  joined = false
  watcher = nil
  tp = TracePoint.new(:c_call) do |t|
    next unless t.method_id == :stop? && Thread.current.equal?(joiner) && watcher.nil?

    released = true
    pass_until { !task.alive? }
    watcher = Thread.new do
      slept = false
      pass_until { joined || (slept = joiner.status == "sleep") }
      slept ? :slept : :no_sleep
    end
  end
  tp.enable
  begin
    task.join
  ensure
    joined = true
    tp.disable
  end
  busy.join
  watcher && [task.value, watcher.value]
end

result = nil
20.times { break if (result = attempt(joiner)) }
p result
