# O(1) waiter removal: N threads wait on one condition variable; we then
#  * signal K of them one at a time (each must wake and leave the list), and
#  * interrupt K others at random positions with Thread#raise (each removes
#    itself from the middle of the list),
# and report microseconds per wake-up and per removal. With an O(1) list the
# figures stay flat from 100 to 10,000 waiters.
#   ruby benchmark/scenarios/condvar_many_waiters.rb [N ...]   (default 100 10000)
#   RAPID_THREAD_BENCH_IMPL=stock|gem, ROUNDS (K, default 200)
#   BYSTANDERS=M also parks M threads on an unrelated queue first: with
#   N=100 and M=9,900 the process has as many sleeping threads as with
#   N=10,000, but the condvar's list is short. Equal figures mean the list
#   adds nothing and the growth is per-process (kernel, VM).
require_relative "../impl"

def measure(n, k)
  m = Thread::Mutex.new
  cv = BenchImpl::ConditionVariable.new
  parked = BenchImpl::ConditionVariable.new # woken threads wait here, so no
  finished = false                            # thread exits while we measure
  ready = 0
  woke = 0
  done = {}
  threads = Array.new(n) do
    Thread.new do
      m.synchronize do
        ready += 1
        begin
          cv.wait(m)
        rescue IOError
          nil
        end
        woke += 1
        done[Thread.current] = true
        parked.wait(m) until finished
      end
    end
  end
  # ready == n under the mutex means every thread is inside cv.wait.
  Thread.pass until m.synchronize { ready == n }
  Thread.pass until threads.all? { |t| t.status == "sleep" }
  # A burst of N waits settles before we measure steady-state wake-ups:
  # with rapid_thread each new waiter spins up to 100 us and then needs the
  # GVL once more to go to sleep (docs/design.md). Same pause for both.
  sleep Float(ENV.fetch("SETTLE", (0.5 + n * 0.0001).to_s))

  $stderr.puts "measuring #{n}" if ENV["MARK"]
  gc0 = GC.count
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  k.times do |i|
    m.synchronize { cv.signal }
    Thread.pass until m.synchronize { woke == i + 1 }
  end
  signal_us = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0) * 1e6 / k
  gc_signal = GC.count - gc0

  rng = Random.new(1)
  victims = m.synchronize { threads.reject { |t| done[t] } }.sample(k, random: rng)
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  victims.each_with_index do |t, i|
    t.raise(IOError)
    Thread.pass until m.synchronize { woke == k + i + 1 }
  end
  remove_us = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0) * 1e6 / k
  gc_remove = GC.count - gc0 - gc_signal

  m.synchronize do
    finished = true
    cv.broadcast
    parked.broadcast
  end
  threads.each(&:join)
  [signal_us, remove_us, gc_signal, gc_remove]
end

bystanders = Integer(ENV.fetch("BYSTANDERS", "0"))
idle = BenchImpl::Queue.new
parked_elsewhere = Array.new(bystanders) { Thread.new { idle.pop } }
Thread.pass until idle.num_waiting == bystanders

rounds = Integer(ENV.fetch("ROUNDS", "200"))
(ARGV.empty? ? [100, 10_000] : ARGV.map { |a| Integer(a) }).each do |n|
  k = [rounds, n / 4].min # leave waiters behind: removals come from the middle
  signal_us, remove_us, gc_signal, gc_remove = measure(n, k)
  puts format("%s waiters=%d bystanders=%d signal_us=%.1f remove_us=%.1f (GC runs while signalling: %d, removing: %d)",
              BenchImpl::NAME, n, bystanders, signal_us, remove_us, gc_signal, gc_remove)
end
idle.close
parked_elsewhere.each(&:join)
