require_relative "prelude"
q = RQ.new(3)
q << 1 << 2
w = RQ.new
waiter = Ractor.new(w) { |ww| ww.pop }
wait_until(10, "the waiter Ractor to pop") { w.num_waiting == 1 }
pid = fork do
  p [q.size, q.max, q.closed?, w.num_waiting]
  q << :child
  p q.pop
  p q.pop(timeout: 0.01)
  exit!(0)
end
Process.wait(pid)
p $?.success?
p [q.size, w.num_waiting]
w << :parent
p waiter.take
