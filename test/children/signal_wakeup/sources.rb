# The wake sources of signal_wakeup_test.rb's cases (case.rb): SOURCES maps
# each name to a lambda that, given the case `c` (ops.rb), installs a trap
# handler and/or starts the helper thread, a thread the main thread joins
# after the operation returns; the lambda returns that thread.

# A USR1 handler that, on the waiting thread, performs the wake (once;
# later runs only count).
def trap_wake_once(c)
  trap(:USR1) do
    c.handled += 1
    unless c.woken
      c.woken = true
      c.trap_wake
    end
  end
end

SOURCES = {
  # (a) The handler performs the wake. Signals are sent back to back until
  # the operation returns, at most 2000 (a lost wake-up is not recovered
  # by later signals: the old build hung here).
  "trap_handler_repeated_signals" => lambda do |c|
    trap_wake_once(c)
    Thread.new do
      wait_until(10, "the operation to wait") { c.waiting?(1) }
      sent = 0
      until c.op_done || sent >= 2000
        Process.kill(:USR1, Process.pid)
        sent += 1
        Thread.pass
      end
    end
  end,
  # (a') The same with a slow sender: three signals, each once the
  # previous handler has run and the main thread sleeps again, then the
  # sender ends. Stock returns at the first; a lost wake-up leaves the
  # main thread asleep for good (a deadlock fatal when it is the only
  # thread left, a hang when a Task's cached threads live on).
  "trap_handler_three_signals" => lambda do |c|
    trap_wake_once(c)
    Thread.new do
      3.times do |i|
        wait_until(10, "handler run #{i} and the main thread asleep") do
          c.handled == i && (i.zero? ? c.waiting?(1) : c.main.status == "sleep")
        end
        Process.kill(:USR1, Process.pid)
      end
    end
  end,
  # (b) Another thread performs the wake while the waiting thread runs a
  # long handler, which ends only after the wake.
  "other_thread_during_handler" => lambda do |c|
    trap(:USR1) do
      c.handled += 1
      c.in_handler = true
      wait_until(10, "the helper's wake") { c.woke }
      c.in_handler = false
    end
    Thread.new do
      wait_until(10, "the operation to wait") { c.waiting?(1) }
      Process.kill(:USR1, Process.pid)
      wait_until(10, "the handler to run") { c.in_handler }
      c.wake
      c.woke = true
    end
  end,
  # (c) Thread#wakeup, then Thread#run, then the real wake. Stock: a queue
  # operation and a join keep waiting; ConditionVariable#wait returns
  # (the op's loop counts the returns and waits again).
  "wakeup_then_run_then_wake" => lambda do |c|
    Thread.new do
      wait_until(10, "the operation to wait") { c.waiting?(1) }
      c.main.wakeup
      wait_until(10, "the operation to wait again after Thread#wakeup") { c.waiting?(2) }
      c.main.run
      wait_until(10, "the operation to wait again after Thread#run") { c.waiting?(3) }
      c.wake
    end
  end
}.freeze
