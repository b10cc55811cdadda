require_relative "../child_helper"
# The worker passes the GVL for ever, so a spawn finds it runnable and asks
# for no worker; the monitor is then killed, and the second block stays
# pending. At exit Ruby kills the worker, whose ensure waits on a queue.
r = RapidThread::Queue.new
started = Thread::Queue.new
RapidThread.spawn do
  started << true
  begin
    loop { Thread.pass }
  ensure
    begin
      $stdout.write "ensure: #{r.pop(timeout: 0.2).inspect}\n"
    rescue Exception => e # rubocop:disable Lint/RescueException
      $stdout.write "ensure: #{e.class}: #{e.message}\n"
    end
  end
end
started.pop
RapidThread.spawn { :never_ran }
monitor = Thread.list.find { |t| t.name == "rapid_thread monitor" }
monitor.kill
monitor.join
$stdout.write "pending #{RapidThread.cache_stats[:pending]}\n"
