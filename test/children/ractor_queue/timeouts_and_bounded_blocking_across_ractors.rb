require_relative "prelude"
q = RQ.new(2)
r = Ractor.new(q) do |qq|
  t0 = monotonic
  got = qq.pop(timeout: 0.05)
  waited = monotonic - t0
  [got, waited >= 0.05]
end
p r.take
q << 1 << 2
blocked = Ractor.new(q) { |qq| qq.push(3); :pushed }
wait_until(10, "the pusher Ractor to wait") { q.num_waiting == 1 }
p q.size
p q.pop
p blocked.take, q.size
timed = Ractor.new(q) { |qq| qq.push(4, timeout: 0.05) }
p timed.take
