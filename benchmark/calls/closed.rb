# Per call: Queue#closed?.
require_relative "call_impl"

BenchCalls.run("q.closed?", setup: "q = BenchImpl::Queue.new")
