require_relative "../child_helper"
at_exit { puts "at_exit" }
# Held: a GC before exit would run the finalizer of a dropped object
# then (the wait below allocates), not at exit.
$held = String.new("x")
ObjectSpace.define_finalizer($held, proc { puts "finalizer" })
q = RapidThread::Queue.new
t = Thread.new do q.pop ensure puts "ensure" end
RapidThread.spawn do q.pop ensure puts "task ensure" end
wait_until(10, "both poppers to sleep") { t.status == "sleep" && q.num_waiting == 2 }
$stdout.write "main"
