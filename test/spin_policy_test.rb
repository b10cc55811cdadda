# frozen_string_literal: true

require_relative "test_helper"
require "etc"

# The spin policy's choices (ext/rapid_thread/src/spin.rs; docs/design-details.md,
# "Fair under load" and "Parking"), seen through RapidThread.spin_stats in
# child processes. Where no CPU is free to spin on, an active wait parks:
# it sleeps on a futex of its own with the GVL released, for at most 10 ms,
# then in Ruby's sleep. Children pinned to one CPU (taskset) never spin, so
# there active waits park (on Ruby 3.3+ those of calm lists, a ping-pong's,
# as in these children, once 256 calm waits have passed the calm window:
# sys/park.rs, CALM_WINDOW).
class SpinPolicyTest < Minitest::Test
  include RapidThreadTestHelpers

  # Whether waits park here (test_helper.rb).
  PARKS = WAITS_PARK

  # support/ping_pong.rb's ping-pong, and the spin stats after it.
  PING_PONG = "spin_policy/ping_pong"

  # Every round trip makes at least one thread wait on an active list.
  def test_waits_on_one_cpu_park_instead_of_spinning_and_lose_nothing
    assert_equal "#{(0...2000).sum}\n0\n#{PARKS}\n#{!PARKS}\n", child_output(PING_PONG, cpu: 0)
  end

  # Go's rule: spin only while a CPU is idle. A CPU-bound process per core
  # beside the program leaves none, and no wait spins, from the start (the
  # first 100 ms, before /proc/stat's first window, go by /proc/loadavg).
  # Without that rule the first waits spin, and only their lateness stops
  # the next ones. (Whether they park depends on where the scheduler puts
  # the two threads: only a wake-up from the waiter's own CPU is cheap.)
  def test_waits_do_not_spin_while_other_processes_take_every_cpu
    skip "needs more than one CPU" if Etc.nprocessors < 2
    skip "the portable build cannot see other processes (no /proc): only late spins stop its spins" if PORTABLE_BUILD
    hogs = Etc.nprocessors.times.map { |cpu| Process.spawn("taskset", "-c", cpu.to_s, RbConfig.ruby, "-e", "loop { }") }
    begin
      assert_equal "#{(0...2000).sum}\n0\n", child_output(PING_PONG).lines.first(2).join
    ensure
      hogs.each { |pid| Process.kill(:KILL, pid) }
      hogs.each { |pid| Process.wait(pid) }
    end
  end

  # A parked thread is in a blocking region, which Ruby's deadlock detector
  # does not count as asleep; the 10 ms limit hands it to Ruby's sleep, so
  # a deadlock among parked threads is still reported as stock reports it
  # (a park without a limit hangs here).
  def test_threads_parked_in_a_deadlock_are_reported_as_stock_reports_them
    child = "spin_policy/threads_parked_in_a_deadlock_are_reported_as_stock_reports_them"
    stock = child_output(child, "stock", cpu: 0)
    assert_match(/\Afatal\n.*Deadlock/, stock)
    assert_equal "#{stock}#{PARKS}\n", child_output(child, "gem", cpu: 0)
  end

  # ConditionVariable#wait ends on Thread#wakeup as Mutex#sleep does, also
  # while parked (the wake-up arrives as an interrupt there); the hand-offs
  # before it keep the condition variable's list active, so it parks.
  def test_thread_wakeup_ends_a_parked_condition_variable_wait_as_it_ends_stocks
    child = "spin_policy/thread_wakeup_ends_a_parked_condition_variable_wait_as_it_ends_stocks"
    assert_equal "woken\n", child_output(child, "stock", cpu: 0)
    assert_equal "woken\n#{PARKS}\n", child_output(child, "gem", cpu: 0)
  end

  # A parked waiter of a calm list (a ping-pong's) does not preempt its
  # waker on one CPU (sys/park.rs): 2,000 round trips take fewer than 2.5
  # context switches each (two is the least; a wake-up that preempts makes
  # about five, stock's sleep 3.5). Ruby 3.1 parks it as SCHED_BATCH, and
  # gives it its own policy back before any other wait; Ruby 3.3+ defers
  # the wake-up and changes no policy. A thread that is not SCHED_OTHER
  # keeps its policy throughout.
  def test_a_parked_waiter_of_a_calm_list_does_not_preempt_its_waker
    skip "the portable build does not park" unless PARKS
    skip "M:N threads: a Ruby thread's native thread may change" if ENV["RUBY_MN_THREADS"] == "1"
    skip "needs chrt (util-linux) and leave to change a thread's policy" unless system("chrt", "--batch", "0", "true", out: File::NULL, err: File::NULL)
    child = "spin_policy/a_parked_waiter_of_a_calm_list_does_not_preempt_its_waker"
    batch_parks = RUBY_VERSION < "3.3"
    { "other" => "other\n#{batch_parks}\nother\n", "batch" => "batch\ntrue\nbatch\n" }.each do |own, want|
      *lines, switches = child_output(child, own, cpu: 0).lines
      assert_equal want, lines.join, own
      assert_operator Integer(switches), :<, 5000, own
    end
  end

  # A broadcast that finds one parked waiter (concurrent-ruby's Event)
  # wakes it as a signal would, without preempting its waker on one CPU
  # (sys/park.rs, `Relay`): 2,000 round trips take fewer than 2.5 context
  # switches each, where a broadcast that woke its first waiter at once
  # made about six (cr_event pinned on 3.4.5 ran 0.80x stock so).
  def test_a_broadcast_to_one_parked_waiter_does_not_preempt_its_waker
    skip "the portable build does not park" unless PARKS
    skip "M:N threads: a Ruby thread's native thread may change" if ENV["RUBY_MN_THREADS"] == "1"
    switches = Integer(child_output("spin_policy/a_broadcast_to_one_parked_waiter_does_not_preempt_its_waker", cpu: 0))
    assert_operator switches, :<, 5000
  end

  # A calm park's waker that sleeps in Ruby (not in the gem's code) still
  # wakes it when it gives up the GVL: Ruby's suspension hook does
  # (sys/park.rs, deferred wake-ups, Ruby 3.3+; elsewhere the wake-up is
  # immediate). Were it left to the park's time limit, the list would stop
  # parking.
  def test_a_deferred_wake_up_reaches_its_waiter_when_its_waker_sleeps_in_ruby
    skip "the portable build does not park" unless PARKS
    out = child_output("spin_policy/a_deferred_wake_up_reaches_its_waiter_when_its_waker_sleeps_in_ruby", cpu: 0)
    assert_equal "true\n", out
  end

  # A process whose active waits are a small share of its waits (most
  # sleep in Ruby: here a crowd on a fresh, dormant list each round) never
  # installs Ruby's suspension hook for deferred wake-ups (sys/park.rs,
  # CALM_WINDOW): on vm_thread_condvar2, before its waits parked to be
  # relayed, the hook cost more than it saved. On Ruby 3.3+ those active
  # waits sleep in Ruby (a park that does not defer cost condvar2 more
  # than Ruby's sleep); Ruby 3.1 and 3.2 park them.
  def test_a_process_whose_waits_mostly_sleep_in_ruby_does_not_defer
    skip "the portable build does not park" unless PARKS
    skip "M:N threads: a Ruby thread's native thread may change" if ENV["RUBY_MN_THREADS"] == "1"
    parks = Integer(child_output("spin_policy/a_process_whose_waits_mostly_sleep_in_ruby_does_not_defer", cpu: 0))
    if RUBY_VERSION < "3.3"
      # Main's and the crowd's first: two a round (a round that outlasts
      # the active window, a GC, may park neither).
      assert_operator parks, :>=, 500
    else
      assert_equal 0, parks
    end
  end

  # A broadcast's parked waiters on one CPU are woken in turn, each as the
  # one before it gives up the GVL (sys/park.rs, relayed wake-ups; Ruby
  # 3.3+), in vm_thread_condvar2's shape (relayed_broadcasts.rb): nine of
  # ten a round, and no park runs out its limit (a relay that stalls
  # leaves its waiters to it). A round of eleven hand-offs made 15 context
  # switches, 27 where Ruby's sleep woke them all. The relay goes on when
  # the broadcaster then sleeps in Ruby and a waiter is killed in its
  # park, and when the broadcaster polls with Thread.pass, which gives up
  # the GVL only to a thread queued for it (a relay whose first wake-up
  # waited for the broadcaster took only half its words before their
  # parks ran out). Ruby 3.1 and 3.2 relay nothing.
  def test_a_broadcast_relays_its_parked_waiters_on_one_cpu
    skip "the portable build does not park" unless PARKS
    skip "M:N threads: a Ruby thread's native thread may change" if ENV["RUBY_MN_THREADS"] == "1"
    { "plain" => 300 * 9, "kill" => 150 * 9 + 150 * 8, "poll" => 300 * 9 }.each do |mode, words|
      relayed, timeouts, switches = child_output("spin_policy/relayed_broadcasts", mode, cpu: 0).lines.map { |l| Integer(l) }
      if RUBY_VERSION < "3.3"
        assert_equal 0, relayed, mode
        next
      end
      # A round that outlasts the active window (a GC) sleeps in Ruby.
      assert_operator relayed, :>=, words * 0.9, mode
      assert_operator timeouts, :<, 30, mode
      assert_operator switches, :<, 20, mode if mode == "plain"
    end
  end

  # A spin that sees no wake-up parks before it takes the GVL back (spin.rs,
  # "A spin that ends without"). With 1 µs spins nearly every spin does:
  # late wake-ups, a Thread#raise and the deadlock detector still reach
  # the parked waiters. (A moment's load at the child's start kept its
  # waits from spinning at all: it retries, bounded.)
  def test_spins_that_see_no_wake_up_park_and_are_still_woken
    skip "needs more than one CPU" if Etc.nprocessors < 2
    skip "the portable build has no futexes: its spins do not park" if PORTABLE_BUILD
    env = { "RAPID_THREAD_SPIN_US" => "1" }
    out = child_output("spin_policy/spins_that_see_no_wake_up_park_and_are_still_woken", env: env)
    assert_equal "#{(0...2000).sum}\nraised in the wait\ntrue\n", out
    child = "spin_policy/threads_parked_in_a_deadlock_are_reported_as_stock_reports_them"
    stock = child_output(child, "stock")
    assert_match(/\Afatal\n.*Deadlock/, stock)
    assert_equal stock, child_output(child, "gem", env: env).lines.first(2).join
  end

  # A list that never woke anyone counts as active as the process (spin.rs,
  # ACTIVE_WINDOW): concurrent-ruby waits on a fresh ConditionVariable for
  # each future. Here every round's job goes over a stock Queue and its
  # result is signaled on a new condition variable; on one CPU an active
  # wait parks, so the fresh ones park (2,000 less the calm window's 256
  # on Ruby 3.3+), where they once went straight to Ruby's sleep (none).
  # (A long-lived queue of ours, whose waits parked too, could be found
  # late under M:N threads, beside another process on the CPU, and park
  # no more: 1,886 in all, once in CI.)
  def test_a_wait_on_a_fresh_condition_variable_counts_as_active_as_the_process
    skip "the portable build does not park" unless PARKS
    parks = Integer(child_output("spin_policy/a_wait_on_a_fresh_condition_variable_counts_as_active_as_the_process", cpu: 0))
    assert_operator parks, :>, 1400
  end
end
