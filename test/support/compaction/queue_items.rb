# Items a Queue holds (given to `new` and pushed) survive the GC moving
# them. Its value: the items that did not come back as they went in.
q = RapidThread::Queue.new(Array.new(500) { |i| "initial-#{i}" })
500.times { |i| q << { i => "pushed-#{i}" } }
GC.verify_compaction_references(**COMPACT_EVERYTHING)
GC.compact
expected = Array.new(500) { |i| "initial-#{i}" } + Array.new(500) { |i| { i => "pushed-#{i}" } }
expected.each_index.reject { |i| q.pop == expected[i] }
