# How a child of lifecycle_test.rb ends: ARGV[0] says.
case ARGV[0]
when "exit" then exit 3
when "abort" then abort "bye"
when "raise" then raise "boom"
when "term"
  Process.kill(:TERM, $$)
  sleep 10
else abort "end_by.rb: unknown ending #{ARGV[0].inspect}"
end
