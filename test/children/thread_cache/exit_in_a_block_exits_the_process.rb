Thread.spawn { exit 3 }
sleep 10
puts "survived"
