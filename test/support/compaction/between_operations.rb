# Random operations with a compaction after each one, while threads wait
# in every kind of list and spawned tasks hold arguments and results. Its
# value is the list of mismatches.
rng = Random.new(7)
q = RapidThread::Queue.new
sq = RapidThread::SizedQueue.new(64)
mq = []
msq = []
m = Mutex.new
cv = RapidThread::ConditionVariable.new
gate = Thread::Queue.new
idle = RapidThread::Queue.new
waiters = Array.new(3) { Thread.new { m.synchronize { cv.wait(m) } } }
poppers = Array.new(2) { Thread.new { idle.pop } }
held = RapidThread.spawn("held-arg" * 3) { |a| gate.pop; a + "-done" }
sel_a = RapidThread::Queue.new
sel_b = RapidThread::SizedQueue.new(2)
selector = Thread.new { RapidThread.select(sel_a, sel_b).then { |qq, v| [qq.equal?(sel_b), v] } }
Thread.pass until waiters.all?(&:stop?) && poppers.all?(&:stop?) && held.status == "sleep" && sel_b.num_waiting == 1
tasks = []
fails = []
60.times do |i|
  case rng.rand(8)
  when 0 then (v = "q-#{i}" * 3) && q << v && mq << v
  when 1 then (fails << [:q, i] unless mq.shift == q.pop(true)) unless mq.empty?
  when 2 then (v = { i => "sq-#{i}" }) && sq.push(v) && msq << v
  when 3 then (fails << [:sq, i] unless msq.shift == sq.pop(true)) unless msq.empty?
  when 4 then tasks << [i, RapidThread.spawn("t-#{i}") { |a| a * 2 }]
  when 5 then (vs = Array.new(3) { |j| "all-#{i}-#{j}" }) && q.push_all(vs) && mq.concat(vs)
  when 6 then (fails << [:batch, i] unless mq.shift(2) == q.pop_batch(2)) unless mq.empty?
  else m.synchronize { cv.signal }
  end
  (i % 10).zero? ? GC.verify_compaction_references(toward: :empty) : GC.compact
end
fails << :q_rest unless mq == Array.new(q.size) { q.pop }
fails << :sq_rest unless msq == Array.new(sq.size) { sq.pop }
tasks.each { |i, t| fails << [:task, i] unless t.value == "t-#{i}" * 2 }
gate << 1
fails << :held unless held.value == "held-arg" * 3 + "-done"
sel_b << "sel" * 3
fails << :select unless selector.value == [true, "selselsel"]
m.synchronize { cv.broadcast }
waiters.each(&:join)
idle.close
poppers.each(&:join)
fails
