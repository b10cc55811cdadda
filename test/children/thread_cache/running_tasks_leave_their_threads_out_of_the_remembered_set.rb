require_relative "../child_helper"
require "objspace"
n = 100
gate = Thread::Queue.new
tasks = Array.new(n) { RapidThread.spawn { gate.pop } }
wait_until(10, "every task to block") { tasks.all? { |t| t.status == "sleep" } }
# The tasks are old after these.
4.times { GC.start(full_mark: true, immediate_sweep: true) }
remembered = tasks.count { |t| ObjectSpace.dump(t.thread).include?('"uncollectible":true') }
n.times { gate << 1 }
tasks.each(&:join)
p [n, remembered]
