# Per call: ConditionVariable#broadcast with nobody waiting.
require_relative "call_impl"

BenchCalls.run("cv.broadcast", setup: "cv = BenchImpl::ConditionVariable.new")
