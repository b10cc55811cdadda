# Per call: Queue#num_waiting with nobody waiting.
require_relative "call_impl"

BenchCalls.run("q.num_waiting", setup: "q = BenchImpl::Queue.new")
