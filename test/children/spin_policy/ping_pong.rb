# spin_policy_test.rb's ping-pong (test/support/ping_pong.rb): the sum
# echoed, then what RapidThread.spin_stats counted.
require_relative "../../support/ping_pong"
sum = ping_pong
s = RapidThread.spin_stats
puts sum, s[:spins], s[:parks] > 1000, s[:parks].zero?
