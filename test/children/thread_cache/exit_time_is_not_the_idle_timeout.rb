Thread.spawn { 1 }.join
RapidThread.idle_timeout = 20
