# frozen_string_literal: true

# Run by cpu_budget_test.rb inside a cgroup it made: one thread hands a
# job to each of 32 workers, each waiting on a queue of its own (as
# concurrent-ruby's pools do, a zip's fan-out), then takes their 32
# results, 300 rounds. Prints, as JSON: the context switches of all its
# threads per job over the last 150 rounds (/proc/self/task/<tid>/status),
# the spin stats, the CPU budget the gem found and the results' sum.
require "json"
require "rapid_thread"
require_relative "../children/child_helper"

workers = 32
rounds = 300
counted = 150
results = RapidThread::Queue.new
queues = Array.new(workers) { RapidThread::Queue.new }
threads = queues.map { |q| Thread.new { while (job = q.pop) do results << job end } }
sum = 0
was = nil
rounds.times do |i|
  was = all_context_switches if i == rounds - counted
  queues.each_with_index { |q, j| q << j }
  workers.times { sum += results.pop }
end
per_job = (all_context_switches - was).fdiv(counted * workers)
queues.each(&:close)
threads.each(&:join)
puts JSON.generate(switches_per_job: per_job.round(2), stats: RapidThread.spin_stats,
                   budget: RapidThread.cpu_budget.slice(:cpus, :quota_cpus), sum: sum)
