# Run first, this spawn makes the monitor, from a fiber with storage: the
# workers it makes are born with a copy of it.
Fiber[:request] = :first

def scenario(make)
  out = []
  out << make.call { Fiber[:request] }.value
  # The copy is taken at the spawn: a later change is not seen.
  gate = Thread::Queue.new
  t = make.call { gate.pop; Fiber[:request] }
  Fiber[:request] = :changed
  gate << :go
  out << t.value
  Fiber[:request] = :first
  # What a block stores does not reach the next block.
  out << make.call { Fiber[:mine] = 1; Fiber[:mine] }.value
  out << make.call { Fiber[:mine] }.value
  # A spawner without the key: its block does not see another's.
  out << Thread.new { Fiber[:request] = nil; make.call { Fiber[:request] }.value }.value
  # A spawner in a fiber of its own storage.
  out << Fiber.new(storage: { request: :fiber }) { make.call { Fiber[:request] }.value }.resume
  out
end

spawned = scenario(->(&b) { Thread.spawn(&b) })
created = scenario(->(&b) { Thread.new(&b) })
p [spawned == created, spawned, RapidThread.cache_stats[:created]]
