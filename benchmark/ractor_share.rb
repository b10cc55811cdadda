# Scenario "ractor_share" (issue 15): 1 producer and 2 consumer Ractors move
# N Integers. Stock has no queue Ractors can share, so its side is the
# documented pipe-Ractor idiom (Ractor.new { loop { Ractor.yield
# Ractor.receive } }); gem mode shares one RapidThread::RactorQueue. Both
# sides check that every item arrived. Timed from before the Ractors are
# made to the last item, so the figure is N / wall = items per second.
require_relative "impl"

Warning[:experimental] = false
N = BenchImpl.n(200_000)
BenchProbe.start if defined?(BenchProbe)

if BenchImpl::NAME == "gem"
  q = RapidThread::RactorQueue.new
  consumers = Array.new(2) do
    Ractor.new(q) do |qq|
      c = 0
      c += 1 while qq.pop
      c
    end
  end
  producer = Ractor.new(q, N) do |qq, n|
    n.times { |i| qq << i }
    qq.close
  end
else
  pipe = Ractor.new { loop { Ractor.yield Ractor.receive } }
  consumers = Array.new(2) do
    Ractor.new(pipe) do |p|
      c = 0
      c += 1 until p.take == :done
      c
    end
  end
  producer = Ractor.new(pipe, N) do |p, n|
    n.times { |i| p.send(i) }
    2.times { p.send(:done) }
  end
end
producer.take
got = consumers.sum(&:take)
BenchProbe.finish if defined?(BenchProbe)
abort "ractor_share: #{got} of #{N} items arrived" unless got == N
