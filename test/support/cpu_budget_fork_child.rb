# frozen_string_literal: true

# Run by cpu_budget_test.rb inside a cgroup it made: prints, as JSON, the
# CPU budget the gem found, and the one a child forked right after it
# found (within the quota's refresh interval, before it looks again).
require "json"
require "rapid_thread"

parent = RapidThread.cpu_budget
reader, writer = IO.pipe
pid = fork do
  reader.close
  writer.write(JSON.generate(RapidThread.cpu_budget))
  writer.close
  exit!(0)
end
writer.close
child = JSON.parse(reader.read)
Process.wait(pid)
puts JSON.generate(budget: parent, child: child)
