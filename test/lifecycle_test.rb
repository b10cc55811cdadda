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
    out = child_output("lifecycle/child_processes_end_as_ruby_ends_them", quiet: true)
    assert_equal %w[mainat_exit ensure finalizer task\ ensure].sort, out.lines.map(&:chomp).sort
    assert out.start_with?("mainat_exit\n"), out
    assert out.end_with?("finalizer\n"), out
    raised_at = Regexp.escape("#{child_script('lifecycle/end_by')}:#{child_line('lifecycle/end_by', 'raise "boom"')}")
    endings = [["exit", 3, ""], ["abort", 1, "bye\n"], ["raise", 1, /\A#{raised_at}:in .*boom \(RuntimeError\)/]]
    endings.each do |how, want, message|
      _out, err, status = run_ruby("lifecycle/end_by", how)
      assert_equal want, status.exitstatus, how
      message.is_a?(Regexp) ? assert_match(message, err) : assert_equal(message, err)
    end
    _out, _err, status = run_ruby("lifecycle/end_by", "term")
    assert_equal Signal.list["TERM"], status.termsig
  end

  def test_fork_while_threads_block_and_blocks_run
    skip "no fork" unless Process.respond_to?(:fork)
    out = child_output("lifecycle/fork_while_threads_block_and_blocks_run", timeout: 30)
    assert_equal "[true, true]\n", out
  end

  def test_exit_is_prompt_with_blocked_threads_and_idle_cached_threads
    t0 = now
    out = child_output("lifecycle/exit_is_prompt_with_blocked_threads_and_idle_cached_threads", timeout: 20)
    assert_equal "exiting\n", out
    assert_operator now - t0, :<, 10, "exit waited for blocked or idle threads"
  end
end
