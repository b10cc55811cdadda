# Prelude of ractor_queue_test.rb's Ractor children (its `ractors`
# helper). ARGV: "small" scales the counts down (n), "gc_stress" runs the
# rest of the script under GC.stress.
Warning[:experimental] = false
require_relative "../child_helper"
STRESS = ARGV.include?("small")
def n(count) = STRESS ? [count / 50, 2].max : count
RQ = RapidThread::RactorQueue
# Consumer Ractors that pop until q is closed and drained; each
# returns what it got.
def consumers(q, count)
  Array.new(count) do
    Ractor.new(q) do |qq|
      seen = []
      while (v = qq.pop)
        seen << v
      end
      seen
    end
  end
end
GC.stress = true if ARGV.include?("gc_stress")
