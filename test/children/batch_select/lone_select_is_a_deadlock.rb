RapidThread.select(RapidThread::Queue.new, RapidThread::Queue.new)
