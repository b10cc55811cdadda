# Scenario "drain" (issue 14): 1M items through one queue, from a producer
# thread to the main thread, as a batch span exporter or log shipper moves
# them. Gem mode: push_all in chunks of 256 and pop_batch(256). Stock, and
# the gem's "plain" side (the same classes, one item per call): push and pop
# one by one over the same chunks. The target is gem / plain >= 5x.
require_relative "impl"

chunk = Array.new(256) { |i| i }
chunks = [BenchImpl.n(1_000_000) / chunk.size, 1].max
q = BenchImpl::Queue.new
producer = Thread.new do
  if BenchImpl::BEYOND_STOCK
    chunks.times { q.push_all(chunk) }
  else
    chunks.times { chunk.each { |x| q << x } }
  end
  q.close
end
got = 0
if BenchImpl::BEYOND_STOCK
  while (batch = q.pop_batch(256))
    got += batch.size
  end
else
  got += 1 until q.pop.nil?
end
producer.join
raise "lost items: #{got} of #{chunks * chunk.size}" unless got == chunks * chunk.size
