require_relative "prelude"
r = Ractor.new do
  [RapidThread::Queue, RapidThread::SizedQueue, RapidThread::ConditionVariable].map do |c|
    c.new(*([1] if c == RapidThread::SizedQueue))
    :allowed
  rescue Ractor::UnsafeError
    :refused
  end
end
p r.take
p Ractor.new { RQ.new.tap { |q| q << 1 }.pop }.take
