require_relative "../child_helper"
w = RapidThread.spawn { Thread.current }.value
wait_until(10, "the worker to be idle") { w.stop? && RapidThread.cache_stats[:idle] == 1 }
# Until the monitor has stopped ticking (nothing pending): the task
# must not owe its start to a tick.
wait_until(10, "a dormant monitor") { RapidThread.__monitor_dormant_for_tests }
ran = false
RapidThread.spawn { ran = true }
w.kill # before w (woken for the task) has run again
wait_until(10, "the task to run") { ran }
p [ran, w.alive?]
