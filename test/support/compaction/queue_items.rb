# Items a Queue holds (given to `new` and pushed) survive the GC moving
# them. Its value: the items that did not come back as they went in.
n = GC.stress ? 25 : 500
q = RapidThread::Queue.new(Array.new(n) { |i| "initial-#{i}" })
n.times { |i| q << { i => "pushed-#{i}" } }
GC.verify_compaction_references(**COMPACT_EVERYTHING)
GC.compact
expected = Array.new(n) { |i| "initial-#{i}" } + Array.new(n) { |i| { i => "pushed-#{i}" } }
expected.each_index.reject { |i| q.pop == expected[i] }
