# Scenario "spawn after a burst" (issue 12): a burst of 64 blocks that each
# block on a queue, all released, then sequential spawn+value 20k times: a
# server's steady load after a spike. Timed: the burst and the sequential
# loop. Untimed (after BenchProbe.finish): the same sequential load goes on
# until idle_timeout + 1.5 s after the release, then the script prints how
# many threads are left besides the main thread (gem: the cache must have
# shrunk to at most 4; Thread.new: its threads are gone).
require_relative "impl"

q = BenchImpl::Queue.new
burst = Array.new(64) { BenchImpl.thread { q.pop } }
Thread.pass until q.num_waiting == 64
64.times { q << 1 }
burst.each(&:join)
released = Process.clock_gettime(Process::CLOCK_MONOTONIC)

BenchImpl.n(20_000).times { |i| BenchImpl.thread(i) { |x| x + 1 }.value }

if defined?(BenchProbe)
  BenchProbe.finish
  idle = BenchImpl::NAME == "gem" ? RapidThread.idle_timeout : 3
  BenchImpl.thread(1) { |x| x + 1 }.value while Process.clock_gettime(Process::CLOCK_MONOTONIC) - released < idle + 1.5
  puts "threads_after_idle=#{Thread.list.count { |t| t != Thread.main && t.alive? && t.name != 'rapid_thread monitor' }}"
end
