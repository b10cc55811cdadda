# The operations of signal_wakeup_test.rb's cases (case.rb): OPS maps each
# name to a class of Case. A case holds what the operation, its wake
# source (sources.rb) and the report share:
#   flag        set by the wake (ConditionVariable and Monitor waits)
#   waits       how many times the operation has entered a wait (only
#               waits that return on Thread#wakeup count:
#               ConditionVariable#wait), returns: how many returned
#   handled, woken, woke, in_handler, op_done: the sources' state
# and each class defines
#   setup        makes the subject (run first)
#   blocked?(k)  the main thread, asleep, is blocked in the operation,
#                having entered k waits
#   op / timed   the blocking operation, untimed and timed (30 s: it must
#                return long before that); no `timed`: untimed only
#   wake         what ends the wait, run by another thread
#   trap_wake    the same from a trap handler, where it must differ
#                (Mutex#lock and Monitor#synchronize raise in trap context,
#                so the handler signals without the lock, and signals the
#                monitor's underlying condition variable directly)
#   report(r)    printed with `p` at the end (r: the operation's value)
class Case
  attr_accessor :flag, :waits, :returns, :handled, :woken, :woke, :in_handler, :op_done
  attr_reader :main

  def initialize
    @main = Thread.current
    @flag = @woke = @woken = @in_handler = @op_done = false
    @handled = @waits = @returns = 0
    setup
  end

  # The main thread is blocked in the operation, having entered k waits.
  def waiting?(k) = !op_done && main.status == "sleep" && blocked?(k)

  def trap_wake = wake
end

class QueueOp < Case
  def blocked?(_k) = @q.num_waiting == 1
  def report(r) = [fmt(r, @q), Array.new(@q.size) { @q.pop(true) }, @q.num_waiting, @q.closed?]
end

class QueuePop < QueueOp
  def setup = @q = Q.new
  def op = @q.pop
  def timed = TIMED_QUEUE ? @q.pop(timeout: 30) : @q.pop
end

class QueuePopBatch < QueuePop
  def op = pop_batch_of(@q, 5)
  def timed = TIMED_QUEUE ? pop_batch_of(@q, 5, timeout: 30) : pop_batch_of(@q, 5)
end

class SizedQueueOp < QueueOp
  def report(r) = [fmt(r, @q), @q.max, Array.new(@q.size) { @q.pop(true) }, @q.num_waiting, @q.closed?]
end

class SizedQueuePop < SizedQueueOp
  def setup = @q = SQ.new(1)
  def op = @q.pop
  def timed = TIMED_QUEUE ? @q.pop(timeout: 30) : @q.pop
end

# A push to a full queue.
class SizedQueuePush < SizedQueueOp
  def setup
    @q = SQ.new(1)
    @q << :first
  end

  def op = @q.push(:second)
  def timed = TIMED_QUEUE ? @q.push(:second, timeout: 30) : @q.push(:second)
end

class SizedQueuePushAll < SizedQueuePush
  def op = push_all_to(@q, [:second])
  def timed = TIMED_QUEUE ? push_all_to(@q, [:second], timeout: 30) : push_all_to(@q, [:second])
end

class Select < Case
  def setup
    @q = Q.new
    @q2 = Q.new
  end

  def blocked?(_k) = @q.num_waiting == 1
  def op = select_on(@q, @q2)
  def timed = TIMED_QUEUE ? select_on(@q, @q2, timeout: 30) : select_on(@q, @q2)
  def report(r) = [r && [fmt(r[0], @q), r[1]], Array.new(@q.size) { @q.pop(true) }, @q.num_waiting, @q2.num_waiting]
end

class CvWait < Case
  def setup
    @m = Thread::Mutex.new
    @cv = CV.new
  end

  def blocked?(k) = waits == k
  def op = wait_for_flag { @cv.wait(@m) }
  def timed = wait_for_flag { @cv.wait(@m, 30) }
  def report(r) = r

  # Waits (the block) until flag, counting the waits and their returns.
  def wait_for_flag
    @m.synchronize do
      until flag
        self.waits += 1
        w = yield
        self.returns += 1
      end
      [w.class, returns, @m.owned?]
    end
  end
end

class MonitorWait < Case
  def setup
    require "monitor"
    @mon = Monitor.new
    @cond = new_cond(@mon)
  end

  def blocked?(k) = waits == k
  def op = wait_for_flag { @cond.wait }
  def timed = wait_for_flag { @cond.wait(30) }
  def report(r) = r

  def wait_for_flag
    @mon.synchronize do
      until flag
        self.waits += 1
        w = yield
        self.returns += 1
      end
      [w, returns, @mon.mon_owned?]
    end
  end
end

# A join of (or a wait for the value of) a task whose block ends when a
# byte arrives on the pipe (syswrite: a plain write(2), nothing that can
# block or lock in a trap handler; the reader uses IO#read: Ruby 3.1's
# sysread can raise EAGAIN on the non-blocking pipe when a signal
# interrupts it). The wake also waits until the block has ended, so that
# the joiner's wake-up lands inside the handler in the trap cases.
class TaskOp < Case
  def setup
    @rd, @wr = IO.pipe
    @t = spawn_task { @rd.read(1); :value }
  end

  def blocked?(_k) = true

  def wake
    @wr.syswrite("x")
    wait_until(10, "the task's block to end") { !@t.alive? }
  end

  def report(r) = [fmt(r, @t), @t.alive?, @t.value]
end

OPS = {
  "queue_pop_by_push" => Class.new(QueuePop) { def wake = @q << :item },
  "queue_pop_by_close" => Class.new(QueuePop) { def wake = @q.close },
  "sized_queue_pop_by_push" => Class.new(SizedQueuePop) { def wake = @q << :item },
  "sized_queue_push_by_pop" => Class.new(SizedQueuePush) { def wake = @q.pop },
  "sized_queue_push_all_by_pop" => Class.new(SizedQueuePushAll) { def wake = @q.pop },
  "queue_pop_batch_by_push" => Class.new(QueuePopBatch) { def wake = @q << :item },
  "select_by_push" => Class.new(Select) { def wake = @q << :item },
  "select_by_close" => Class.new(Select) do
    def wake
      @q.close
      @q2.close
    end
  end,
  "sized_queue_push_by_clear" => Class.new(SizedQueuePush) { def wake = @q.clear },
  "sized_queue_push_by_max" => Class.new(SizedQueuePush) { def wake = (@q.max = 2) },
  "sized_queue_push_by_close" => Class.new(SizedQueuePush) { def wake = @q.close },
  "cv_wait_by_signal" => Class.new(CvWait) do
    def wake = @m.synchronize { self.flag = true; @cv.signal }

    def trap_wake
      self.flag = true
      @cv.signal
    end
  end,
  "cv_wait_by_broadcast" => Class.new(CvWait) do
    def wake = @m.synchronize { self.flag = true; @cv.broadcast }

    def trap_wake
      self.flag = true
      @cv.broadcast
    end
  end,
  "monitor_wait_by_signal" => Class.new(MonitorWait) do
    def wake = @mon.synchronize { self.flag = true; @cond.signal }

    def trap_wake
      self.flag = true
      @cond.instance_variable_get(:@cond).signal
    end
  end,
  "monitor_wait_by_broadcast" => Class.new(MonitorWait) do
    def wake = @mon.synchronize { self.flag = true; @cond.broadcast }

    def trap_wake
      self.flag = true
      @cond.instance_variable_get(:@cond).broadcast
    end
  end,
  "task_join" => Class.new(TaskOp) do
    def op = @t.join
    def timed = @t.join(30)
  end,
  "task_value" => Class.new(TaskOp) { def op = @t.value }
}.freeze
