# Items a RactorQueue holds (made shareable copies, in Rust memory behind
# its lock) survive the GC moving them. Its value: those that did not.
q = RapidThread::RactorQueue.new
strings = Array.new(GC.stress ? 25 : 500) { |i| "item #{i}" * 3 }
strings.each { |s| q << s }
GC.verify_compaction_references(**COMPACT_EVERYTHING)
GC.compact
strings.each_index.reject { |i| q.pop == strings[i] }
