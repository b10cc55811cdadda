require_relative "../child_helper"
RapidThread.idle_timeout = 60   # expiry must not hide a stuck worker
srand(Integer(ENV.fetch("SEED", rand(1 << 30))))
hit = []
GC.stress = true
60.times do |i|
  t = RapidThread.spawn(i) do |n|
    Thread.current[:scratch] = "x" * 10
    Thread.current.name = "task #{n}"
    raise "boom" if n.odd?
    n
  end
  t.report_on_exception = false
  rand(4).times { Thread.pass }
  if t.thread
    t.kill
    # Still on its worker after the kill: the kill reached that
    # worker (it could have finished between the two calls, and then
    # Task#kill kills nothing; a finished task has no thread).
    (w = t.thread) && hit << w
  end
  abort "task #{i} never ended" unless t.join(30).equal?(t)
rescue RuntimeError
  nil
end
GC.stress = false
pass_until(30) { hit.none?(&:alive?) }
stuck = hit.select(&:alive?)
abort "#{stuck.size} killed workers never ended" unless stuck.empty?
stats = RapidThread.cache_stats
abort "busy workers left: #{stats}" unless stats[:busy].zero?
puts "killed #{hit.size}"
