# Per call: SizedQueue.new(8).
require_relative "call_impl"

BenchCalls.run("k.new(8)", setup: "k = BenchImpl::SizedQueue")
