# Scenario "drain" (issue 14): 1M items through one queue, from a producer
# thread to the main thread, as a batch span exporter or log shipper moves
# them. Gem mode: push_all in chunks of 256 and pop_batch(256). Stock, and
# the gem's "plain" side (the same classes, one item per call): push and pop
# one by one over the same chunks. The target is gem / plain >= 5x. Timed:
# the drain only (BenchProbe.start), after an untimed warm-up drain of a
# tenth as many items, so the figures are steady-state items per second.
require_relative "impl"

CHUNK = Array.new(256) { |i| i }

def drain(chunks)
  q = BenchImpl::Queue.new
  producer = Thread.new do
    if BenchImpl::BEYOND_STOCK
      chunks.times { q.push_all(CHUNK) }
    else
      chunks.times { CHUNK.each { |x| q << x } }
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
  raise "lost items: #{got} of #{chunks * CHUNK.size}" unless got == chunks * CHUNK.size
end

chunks = [BenchImpl.n(1_000_000) / CHUNK.size, 1].max
drain([chunks / 10, 1].max)
BenchProbe.start if defined?(BenchProbe)
drain(chunks)
