# How signal_wakeup_test.rb's cases (case.rb) name the subjects: the
# gem's classes (RapidThread.spawn for Thread.new).
require "rapid_thread"
Q = RapidThread::Queue
SQ = RapidThread::SizedQueue
CV = RapidThread::ConditionVariable
TIMED_QUEUE = true
def spawn_task(&block) = RapidThread.spawn(&block)
def select_on(q, other, **kw) = RapidThread.select(q, other, **kw)
def pop_batch_of(q, max, **kw) = q.pop_batch(max, **kw)
def push_all_to(q, items, **kw) = q.push_all(items, **kw)
# MonitorMixin::ConditionVariable wraps a Thread::ConditionVariable;
# point this one at ours.
def new_cond(mon) = mon.new_cond.tap { |c| c.instance_variable_set(:@cond, CV.new) }
