# How signal_wakeup_test.rb's cases (case.rb) name the subjects: stock's
# classes, the oracle. Stock's timed queue operations fall back to the
# untimed form (TIMED_QUEUE false), and only version-independent output is
# printed: Ruby 3.1 has no pop(timeout:) / push(timeout:), and Ruby 3.3's
# (3.3.8) lose a wake-up delivered during a trap handler until the
# deadline (its timed queue sleep, sleep_hrtime_until with
# SLEEP_SPURIOUS_CHECK, does not return after an interrupt; the untimed
# one does): `trap(:USR1) { q << 1 }` then `q.pop(timeout: 5)` returns 1
# after 5 s. The gem must return at once.
Q = Thread::Queue
SQ = Thread::SizedQueue
CV = Thread::ConditionVariable
TIMED_QUEUE = false
def spawn_task(&block) = Thread.new(&block)
def new_cond(mon) = mon.new_cond
# The gem's batch and select operations, as stock would spell them
# for the cases below: one item, from the one queue that gets one.
def select_on(q, _other, **kw) = (v = q.pop(**kw)) && [q, v]
def pop_batch_of(q, _max, **kw) = (v = q.pop(**kw)) && [v]
def push_all_to(q, items, **kw) = items.each { |i| q.push(i, **kw) } && q
