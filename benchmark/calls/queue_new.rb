# Per call: Queue.new (allocation + initialize), nobody waiting.
require_relative "call_impl"

BenchCalls.run("k.new", setup: "k = BenchImpl::Queue")
