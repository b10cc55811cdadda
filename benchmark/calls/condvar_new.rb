# Per call: ConditionVariable.new (concurrent-ruby makes one per future).
require_relative "call_impl"

BenchCalls.run("k.new", setup: "k = BenchImpl::ConditionVariable")
