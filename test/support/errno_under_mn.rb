# frozen_string_literal: true

# Run by ractor_queue_test.rb with RUBY_MN_THREADS=1 (Ruby 3.3+): threads
# whose RactorQueue#pop times out in a futex wait, beside threads reading
# pipes that make them wait. Under M:N threads a native thread runs one
# Ruby thread after another, and Ruby 3.4.5 raises IO::TimeoutError from a
# read that succeeded after a wait when errno reads ETIMEDOUT
# (rb_thread_io_blocking_call): an errno left behind by a timed-out wait
# showed up there (docs/design-details.md, "errno under M:N threads").
# Prints the counts as "reads errors".
require "rapid_thread"

q = RapidThread::RactorQueue.new(8)
waiters = Array.new(2) do
  Thread.new do
    loop do
      q.pop(timeout: 0.001)
      sleep 0.0005
    end
  end
end
reads = 0
errors = Hash.new(0)
deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 1
while reads < 20 && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
  r, w = IO.pipe
  reader = Thread.new { Thread.current.report_on_exception = false; r.read }
  writer = Thread.new { 5.times { w.write("x" * 100); sleep 0.001 }; w.close }
  begin
    raise "short read" unless reader.value.bytesize == 500

    reads += 1
  rescue StandardError => e
    errors["#{e.class}: #{e.message}"] += 1
  end
  writer.join
  r.close
end
waiters.each(&:kill).each(&:join)
puts reads, errors.inspect
