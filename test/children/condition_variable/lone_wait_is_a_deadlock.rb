m = Thread::Mutex.new; m.synchronize { RapidThread::ConditionVariable.new.wait(m) }
