# frozen_string_literal: true

require_relative "test_helper"

# `require "rapid_thread/replace"` swaps the core constants; plain
# `require "rapid_thread"` must not. Each case runs in a child process so
# the swap never leaks into the rest of the suite.
class ReplaceTest < RapidThreadTest
  NAMES = "[Queue, Thread::Queue, SizedQueue, Thread::SizedQueue, ConditionVariable, Thread::ConditionVariable]"

  # run_ruby in replace mode, warnings on: a child script, or (e:) one of
  # the one-line snippets below.
  def run_replaced(name = nil, e: nil)
    run_ruby(name, e: e, flags: ["-W2"], r: "rapid_thread/replace")
  end

  def test_plain_require_changes_no_core_constant
    out = child_output(e: "p #{NAMES}")
    assert_equal "[Thread::Queue, Thread::Queue, Thread::SizedQueue, Thread::SizedQueue, " \
                 "Thread::ConditionVariable, Thread::ConditionVariable]\n", out
  end

  def test_replace_points_every_constant_at_the_gem_without_warnings
    out, err, status = run_replaced(e: "p #{NAMES}; p RapidThread::STOCK[:Queue]")
    assert status.success?, err
    assert_equal "[RapidThread::Queue, RapidThread::Queue, RapidThread::SizedQueue, RapidThread::SizedQueue, " \
                 "RapidThread::ConditionVariable, RapidThread::ConditionVariable]\nThread::Queue\n", out
    assert_equal "", err, "replace mode must print no warnings"
  end

  def test_code_written_for_the_core_classes_runs_on_the_gem
    out, err, status = run_replaced("replace/code_written_for_the_core_classes_runs_on_the_gem")
    assert status.success?, err
    assert_equal "queue closed\nnil\nnil\n:woken\nRapidThread::ConditionVariable\n:monitor_ok\n[false, true]\n", out
    assert_equal "", err
  end

  def test_deadlock_detection_in_replace_mode
    _out, err, status = run_replaced(e: "Queue.new.pop")
    refute status.success?
    assert_match(/No live threads left. Deadlock\?/, err)
  end
end
