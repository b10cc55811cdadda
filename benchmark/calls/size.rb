# Per call: Queue#size on a queue of 3 items.
require_relative "call_impl"

BenchCalls.run("q.size", setup: "q = BenchImpl::Queue.new([1, 2, 3])")
