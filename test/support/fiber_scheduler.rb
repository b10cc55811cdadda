# frozen_string_literal: true

# A minimal Fiber scheduler (Ruby 3.1 ships none) with the hooks that
# queues use: block / unblock / kernel_sleep. unblock may be called from
# another thread, so it goes through a mutex and a self-pipe.
class TestFiberScheduler
  def initialize
    @lock = Thread::Mutex.new
    @ready = []
    @blocked = {} # fiber => deadline (nil: none)
    @wake_r, @wake_w = IO.pipe
  end

  def fiber(&block)
    f = Fiber.new(blocking: false, &block)
    f.resume
    f
  end

  def block(_blocker, timeout = nil)
    f = Fiber.current
    @blocked[f] = timeout && (now + timeout)
    Fiber.yield
  ensure
    @blocked.delete(f)
  end

  def unblock(_blocker, fiber)
    @lock.synchronize { @ready << fiber }
    @wake_w.write_nonblock(".", exception: false)
  end

  def kernel_sleep(duration = nil)
    block(:sleep, duration)
  end

  def io_wait(io, events, timeout)
    Fiber.blocking { IO.select(events & IO::READABLE != 0 ? [io] : nil, events & IO::WRITABLE != 0 ? [io] : nil, nil, timeout) }
    events
  end

  def close
    run
    @wake_r.close
    @wake_w.close
  end

  def run
    loop do
      ready = @lock.synchronize { @ready.shift(@ready.size) }
      ready.each { |f| f.resume if f.alive? }
      due = @blocked.select { |_, d| d && d <= now }.keys
      due.each { |f| f.resume if f.alive? }
      break if @blocked.empty? && @lock.synchronize { @ready.empty? }
      next unless ready.empty? && due.empty?

      deadlines = @blocked.values.compact
      wait = deadlines.empty? ? nil : [deadlines.min - now, 0].max
      IO.select([@wake_r], nil, nil, wait) && @wake_r.read_nonblock(1024, exception: false)
    end
  end

  private

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end
end
