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
# closed? reads only the object's header, and is callable anywhere, as
# stock's is.
p Ractor.new {
  [RapidThread::Queue.allocate.closed?, RapidThread::SizedQueue.allocate.closed?,
   (RapidThread::Queue.allocate.empty? rescue $!.class)]
}.take
p Ractor.new { RQ.new.tap { |q| q << 1 }.pop }.take
