RapidThread::Queue.new.pop
