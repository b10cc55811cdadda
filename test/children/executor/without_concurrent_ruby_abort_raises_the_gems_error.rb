ex = RapidThread::Executor.new
ex.shutdown
begin
  ex.post { 1 }
rescue => e
  print e.class, " ", defined?(Concurrent).inspect, " ", ex.is_a?(Object)
end
