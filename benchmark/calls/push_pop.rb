# Per call: push + pop on one thread, nobody waiting.
require_relative "call_impl"

BenchCalls.run("q.push(i); q.pop", setup: "q = BenchImpl::Queue.new")
