# frozen_string_literal: true

# The queue ping-pong that spin-policy children run (spin_policy_test.rb,
# support/cpu_budget_child.rb): `rounds` round trips between the calling
# thread and an echo thread through two RapidThread queues, every one a
# wait on an active list. Returns the sum of the values echoed.
def ping_pong(rounds = 2000)
  ping = RapidThread::Queue.new
  pong = RapidThread::Queue.new
  echo = Thread.new { while (v = ping.pop) do pong << v end }
  sum = 0
  rounds.times { |i| ping << i; sum += pong.pop }
  ping << nil
  echo.join
  sum
end
