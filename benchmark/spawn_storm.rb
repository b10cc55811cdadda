# Seed scenario "spawn storm" (JRuby's thread-pooling case): start 100k
# threads with empty blocks, then join all of them.
require_relative "impl"

BenchImpl.n(100_000).times.map { BenchImpl.thread {} }.each(&:join)
