# frozen_string_literal: true

# A child of executor_test.rb: Concurrent's global executors replaced by
# the gem's (RapidThread::Executor.replace_global_executors). Prints what
# ran where, on one line.
require_relative "concurrent_ruby"
require "rapid_thread/concurrent"

io, fast = RapidThread::Executor.replace_global_executors
seen = []
seen << "io" if Concurrent.global_io_executor.equal?(io) && Concurrent::Options.executor(:io).equal?(io)
seen << "fast" if Concurrent.global_fast_executor.equal?(fast) && fast.max_length >= 2
before = io.completed_task_count
seen << "future" if Concurrent::Promises.future { 1 }.then { |v| v + 1 }.value! == 2 &&
                    Concurrent::Future.execute { 3 }.value(5) == 3
runs = Thread::Queue.new
timer = Concurrent::TimerTask.new(execution_interval: 0.01) { runs << Concurrent.global_io_executor.equal?(io) }
timer.execute
seen << "timer_task" if runs.pop && runs.pop
timer.shutdown
seen << "rerun" if io.completed_task_count > before
seen << "same" if RapidThread::Executor.replace_global_executors == [io, fast]
puts seen.join(" ")
