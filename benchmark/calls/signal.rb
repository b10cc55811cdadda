# Per call: ConditionVariable#signal with nobody waiting.
require_relative "call_impl"

BenchCalls.run("cv.signal", setup: "cv = BenchImpl::ConditionVariable.new")
