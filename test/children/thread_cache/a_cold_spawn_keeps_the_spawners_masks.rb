require_relative "../child_helper"
q = Thread::Queue.new
t0 = RapidThread.spawn { q.pop }
wait_until(10, "t0 to block and the monitor to sleep with nothing pending") do
  t0.status == "sleep" && RapidThread.__monitor_dormant_for_tests
end
# Fiber storage (Ruby 3.2+), which a new thread copies with a method call.
Fiber[:request] = :id if Fiber.respond_to?(:[]=)
main = Thread.current
inside = :not_reached
t1 = nil
after = nil
begin
  Thread.handle_interrupt(RuntimeError => :never) do
    Thread.new { main.raise "deferred" }.join # deferred: masked here
    begin
      t1 = RapidThread.spawn { :t1 } # every worker blocked: a cold spawn
      inside = :not_raised
    rescue RuntimeError
      inside = :raised
    end
  end
rescue RuntimeError => e
  after = e.message
end
q << 1
p [inside, after, t1&.value]
