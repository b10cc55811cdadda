require_relative "../child_helper"
RapidThread.idle_timeout = 30
q = RapidThread::Queue.new
try = lambda do |who|
  { "spawn" => -> { RapidThread.spawn { 1 } }, "new" => -> { Thread.new { 1 } } }.each do |how, make|
    make.call
    $stdout.write "#{who} #{how}: made\n"
  rescue ThreadError => e
    $stdout.write "#{who} #{how}: #{e.message}\n"
  end
end
Thread.new do q.pop ensure try.call("thread") end
RapidThread.spawn do q.pop ensure try.call("task") end
wait_until(10, "both poppers to wait") { q.num_waiting == 2 }
