# frozen_string_literal: true

# Bounded waits for the child scripts under test/children (run by
# test_helper.rb's run_ruby / child_output), and their context-switch
# counts (also test/support's fan-out child). It loads nothing, starts no
# thread and installs no hook, trap or at_exit handler: a script that
# requires it tests what it tested without it. Its methods are top-level
# (private methods of Object), so threads, trap handlers and Ractors of the
# script call them too.

# A wait that outlived its limit. An Exception, as Minitest's assertions
# are, not a StandardError: a script's own `rescue => e` does not swallow it.
class ChildWaitTimeout < Exception # rubocop:disable Lint/InheritException
end

# Seconds a wait may take unless its caller says otherwise: below the
# parent's kill (run_ruby's timeout, 20 s and more for every child that
# waits), so that the child reports the wait itself.
CHILD_WAIT_LIMIT = 10

# The monotonic clock, in seconds.
def monotonic
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

# Thread.pass until the block is true or `limit` seconds have passed.
# Returns the block's last value: truthy if it came true in time.
def pass_until(limit = CHILD_WAIT_LIMIT)
  deadline = monotonic + limit
  until (value = yield)
    return value if monotonic > deadline

    Thread.pass
  end
  value
end

# Thread.pass until the block is true, and returns its value; raises
# ChildWaitTimeout, naming `what` and the caller's line, once `limit`
# seconds have passed.
def wait_until(limit = CHILD_WAIT_LIMIT, what = "condition", &condition)
  value = pass_until(limit, &condition)
  return value if value

  raise ChildWaitTimeout, "timed out after #{limit}s waiting for #{what}", caller
end

# Context switches, voluntary and not, of this process's thread `tid`
# (its native thread id; /proc/self/task/<tid>/status).
def context_switches(tid)
  File.read("/proc/self/task/#{tid}/status").scan(/^(?:non)?voluntary_ctxt_switches:\s*(\d+)/).sum { |(n)| n.to_i }
end

# The same, summed over the process's threads now (one that ends meanwhile
# counts none).
def all_context_switches
  Dir["/proc/self/task/*"].sum do |task|
    context_switches(File.basename(task))
  rescue Errno::ENOENT # a thread that ended
    0
  end
end
