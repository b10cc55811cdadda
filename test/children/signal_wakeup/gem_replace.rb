# How signal_wakeup_test.rb's cases (case.rb) name the subjects in
# drop-in mode: through the core names, and Monitor#new_cond picks our
# ConditionVariable up by itself.
require "rapid_thread/replace"
Q = Thread::Queue
SQ = Thread::SizedQueue
CV = Thread::ConditionVariable
raise "not replaced" unless [Q, SQ, CV] == [RapidThread::Queue, RapidThread::SizedQueue, RapidThread::ConditionVariable]
TIMED_QUEUE = true
def spawn_task(&block) = Thread.spawn(&block)
def select_on(q, other, **kw) = RapidThread.select(q, other, **kw)
def pop_batch_of(q, max, **kw) = q.pop_batch(max, **kw)
def push_all_to(q, items, **kw) = q.push_all(items, **kw)
def new_cond(mon)
  mon.new_cond.tap { |c| raise "Monitor does not use ours" unless c.instance_variable_get(:@cond).is_a?(CV) }
end
