# Per call: Queue#empty?.
require_relative "call_impl"

BenchCalls.run("q.empty?", setup: "q = BenchImpl::Queue.new")
