# ARGV[0]: "stock" (Thread::ConditionVariable) or "gem". A program that
# rebinds the constant Thread::Mutex: a mutex is still recognised by what
# it is, and any other object's `sleep` is called, as stock calls it.
require_relative "../child_helper"
impl = ARGV[0] == "stock" ? Thread::ConditionVariable : RapidThread::ConditionVariable
real = Thread::Mutex.new
fake = Class.new do
  def sleep(timeout = nil) = [:fake_sleep, timeout]
end
Thread.send(:remove_const, :Mutex)
Thread.const_set(:Mutex, fake)
cv = impl.new
p cv.wait(fake.new, 0.01)
p(real.synchronize { cv.wait(real, 0.01) })
