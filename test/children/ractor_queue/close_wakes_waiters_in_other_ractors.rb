require_relative "prelude"
q = RQ.new(1)
poppers = Array.new(2) { Ractor.new(q) { |qq| qq.pop } }
wait_until(10, "both poppers to wait") { q.num_waiting == 2 }
full = RQ.new(1)
full << :x
pusher = Ractor.new(full) do |qq|
  qq << :y
  :pushed
rescue ClosedQueueError => e
  e.message
end
wait_until(10, "the pusher to wait") { full.num_waiting == 1 }
q.close
full.close
p poppers.map(&:take), pusher.take, full.pop, full.pop
