# frozen_string_literal: true

require_relative "test_helper"

# `require "rapid_thread/replace"` swaps the core constants; plain
# `require "rapid_thread"` must not. Each case runs in a child process so
# the swap never leaks into the rest of the suite.
class ReplaceTest < RapidThreadTest
  NAMES = "[Queue, Thread::Queue, SizedQueue, Thread::SizedQueue, ConditionVariable, Thread::ConditionVariable]"

  def run_replaced(code)
    lib = File.expand_path("../lib", __dir__)
    Open3.capture3(RbConfig.ruby, "-W2", "-I#{lib}", "-rrapid_thread/replace", "-e", code, stdin_data: "", timeout: 30)
  end

  def test_plain_require_changes_no_core_constant
    out = child_output("p #{NAMES}")
    assert_equal "[Thread::Queue, Thread::Queue, Thread::SizedQueue, Thread::SizedQueue, " \
                 "Thread::ConditionVariable, Thread::ConditionVariable]\n", out
  end

  def test_replace_points_every_constant_at_the_gem_without_warnings
    out, err, status = run_replaced("p #{NAMES}; p RapidThread::STOCK[:Queue]")
    assert status.success?, err
    assert_equal "[RapidThread::Queue, RapidThread::Queue, RapidThread::SizedQueue, RapidThread::SizedQueue, " \
                 "RapidThread::ConditionVariable, RapidThread::ConditionVariable]\nThread::Queue\n", out
    assert_equal "", err, "replace mode must print no warnings"
  end

  def test_code_written_for_the_core_classes_runs_on_the_gem
    out, err, status = run_replaced(<<~'RUBY')
      require "monitor"
      q = Queue.new
      producer = Thread.new { 1000.times { |i| q << i }; q.close }
      sum = 0
      while (i = q.pop)
        sum += i
      end
      producer.join
      raise "sum #{sum}" unless sum == 499_500
      begin
        q.push(1)
      rescue ClosedQueueError => e
        puts e.message
      end
      sq = SizedQueue.new(1)
      sq << 1
      p sq.push(2, timeout: 0.01)
      p Queue.new.pop(timeout: 0)
      m = Thread::Mutex.new
      cv = ConditionVariable.new
      ready = false
      waiter = Thread.new { m.synchronize { cv.wait(m) until ready; :woken } }
      Thread.pass until waiter.status == "sleep"
      m.synchronize { ready = true; cv.signal }
      p waiter.value
      mon = Monitor.new
      cond = mon.new_cond
      p cond.instance_variable_get(:@cond).class
      t = Thread.new { mon.synchronize { cond.wait(5) }; :monitor_ok }
      Thread.pass until t.status == "sleep"
      mon.synchronize { cond.signal }
      p t.value
      old = RapidThread::STOCK[:Queue].new
      p [old.is_a?(Thread::Queue), Queue.new.is_a?(Thread::Queue)]
    RUBY
    assert status.success?, err
    assert_equal "queue closed\nnil\nnil\n:woken\nRapidThread::ConditionVariable\n:monitor_ok\n[false, true]\n", out
    assert_equal "", err
  end

  def test_deadlock_detection_in_replace_mode
    _out, err, status = run_replaced("Queue.new.pop")
    refute status.success?
    assert_match(/No live threads left. Deadlock\?/, err)
  end
end
