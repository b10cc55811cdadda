Array.new(8) { Thread.spawn { sleep 0.01 } }.each(&:join)
Thread.spawn { sleep }  # blocked forever, like a Thread.new thread at exit
at_exit { $stdout.puts "at_exit ran" }
