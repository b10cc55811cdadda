require "objspace"
q = RapidThread::RactorQueue.new
20.times { |i| q << "item #{i}" }
GC.stress = true
n = ObjectSpace.reachable_objects_from(q).count { |o| o.is_a?(String) }
GC.stress = false
p n
