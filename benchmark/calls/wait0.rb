# Per call: ConditionVariable#wait(m, 0) with the mutex held: unlock, no
# wait, re-lock. 1M calls: stock's sleeps about 60 µs each on 3.3+, where
# rake bench:calls runs it at a fiftieth.
require_relative "call_impl"

BenchCalls.run("cv.wait(m, 0)", setup: "cv = BenchImpl::ConditionVariable.new; m = Thread::Mutex.new; m.lock",
               teardown: "m.unlock", count: 1_000_000)
