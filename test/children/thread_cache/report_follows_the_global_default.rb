Thread.report_on_exception = false
t = Thread.spawn { raise "quiet" }
p t.report_on_exception
t.join rescue p $!
