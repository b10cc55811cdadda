TracePoint.new(:thread_begin) { Thread.current.singleton_class }.enable
50.times { RapidThread.spawn { 1 }.value }
p RapidThread.cache_stats[:created] <= 2
