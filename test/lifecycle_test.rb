# frozen_string_literal: true

require_relative "test_helper"

# Process lifecycle under load: fork while threads are blocked in every
# kind of wait and spawned blocks run; exit with threads still blocked.
class LifecycleTest < RapidThreadTest
  # The suite's children end as Ruby ends them: status, message, at_exit,
  # the ensure clauses of killed threads and finalizers. This holds the
  # M:N shield (support/mn_exit.rb, on 3.3 and 3.4 with RUBY_MN_THREADS=1)
  # to it.
  def test_child_processes_end_as_ruby_ends_them
    out = child_output(<<~'RUBY', quiet: true)
      at_exit { puts "at_exit" }
      # Held: a GC before exit would run the finalizer of a dropped object
      # then (the wait below allocates), not at exit.
      $held = String.new("x")
      ObjectSpace.define_finalizer($held, proc { puts "finalizer" })
      q = RapidThread::Queue.new
      t = Thread.new do q.pop ensure puts "ensure" end
      RapidThread.spawn do q.pop ensure puts "task ensure" end
      Thread.pass until t.status == "sleep" && q.num_waiting == 2
      $stdout.write "main"
    RUBY
    assert_equal %w[mainat_exit ensure finalizer task\ ensure].sort, out.lines.map(&:chomp).sort
    assert out.start_with?("mainat_exit\n"), out
    assert out.end_with?("finalizer\n"), out
    [["exit 3", 3, ""], ["abort 'bye'", 1, "bye\n"], ["raise 'boom'", 1, /-e:1:in .*boom \(RuntimeError\)/]].each do |code, want, message|
      _out, err, status = run_ruby(code)
      assert_equal want, status.exitstatus, code
      message.is_a?(Regexp) ? assert_match(message, err) : assert_equal(message, err)
    end
    _out, _err, status = run_ruby("Process.kill(:TERM, $$); sleep 10")
    assert_equal Signal.list["TERM"], status.termsig
  end

  def test_fork_while_threads_block_and_blocks_run
    skip "no fork" unless Process.respond_to?(:fork)
    out = child_output(<<~'RUBY', timeout: 30)
      q = RapidThread::Queue.new
      sq = RapidThread::SizedQueue.new(1)
      sq << :full
      m = Mutex.new
      cv = RapidThread::ConditionVariable.new
      poppers = Array.new(3) { Thread.new { q.pop } }
      pushers = Array.new(2) { Thread.new { sq.push(:more) } }
      waiter = Thread.new { m.synchronize { cv.wait(m) } }
      gate = Thread::Queue.new
      running = Array.new(3) { |i| RapidThread.spawn { gate.pop; i } }
      Thread.pass until [*poppers, *pushers, waiter].all? { |t| t.status == "sleep" } && RapidThread.cache_stats[:busy] == 3

      pid = fork do
        # The child: no waiters, no workers, but every object works.
        ok = q.num_waiting == 0 && sq.num_waiting == 0
        q << 1
        ok &&= q.pop == 1
        ok &&= sq.pop == :full && sq.push(:x).equal?(sq) && sq.pop == :x
        ok &&= m.synchronize { cv.signal; cv.wait(m, 0.01); true }
        ok &&= RapidThread.spawn(20) { |x| x + 1 }.value == 21
        ok &&= running.none?(&:alive?) # the parent's blocks do not exist here
        ok &&= Array.new(10) { |i| RapidThread.spawn { i } }.sum(&:value) == 45
        exit!(ok ? 0 : 1)
      end
      Process.wait(pid)
      child_ok = $?.success?

      # The parent is unaffected: every waiter is still there and wakes.
      parent_ok = q.num_waiting == 3 && sq.num_waiting == 2 && running.all?(&:alive?)
      3.times { |i| q << i }
      parent_ok &&= poppers.map(&:value).sort == [0, 1, 2]
      2.times { sq.pop }
      pushers.each(&:join)
      m.synchronize { cv.signal }
      waiter.join
      3.times { gate << 1 }
      parent_ok &&= running.map(&:value) == [0, 1, 2]
      p [child_ok, parent_ok]
    RUBY
    assert_equal "[true, true]\n", out
  end

  def test_exit_is_prompt_with_blocked_threads_and_idle_cached_threads
    t0 = now
    out = child_output(<<~'RUBY', timeout: 20)
      q = RapidThread::Queue.new
      sq = RapidThread::SizedQueue.new(1)
      sq << 1
      m = Mutex.new
      cv = RapidThread::ConditionVariable.new
      threads = [Thread.new { q.pop }, Thread.new { sq.push(2) }, Thread.new { m.synchronize { cv.wait(m) } }]
      tasks = [RapidThread.spawn { q.pop }, RapidThread.spawn { sleep }]
      Array.new(8) { RapidThread.spawn { 1 } }.each(&:join) # leaves idle cached threads
      Thread.pass until threads.all? { |t| t.status == "sleep" } && tasks.all? { |t| t.status == "sleep" }
      RapidThread.idle_timeout = 60
      puts "exiting"
    RUBY
    assert_equal "exiting\n", out
    assert_operator now - t0, :<, 10, "exit waited for blocked or idle threads"
  end
end
