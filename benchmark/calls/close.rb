# Per call: Queue#close of an already-closed queue (after the first call nothing
# changes: the method's own cost).
require_relative "call_impl"

BenchCalls.run("q.close", setup: "q = BenchImpl::Queue.new")
