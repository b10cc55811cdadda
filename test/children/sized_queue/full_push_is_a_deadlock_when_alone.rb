q = RapidThread::SizedQueue.new(1)
q << 1
q << 2
