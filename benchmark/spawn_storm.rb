# Seed scenario "spawn storm" (JRuby's thread-pooling case): start 100k
# threads with empty blocks, then join all of them. In gem mode it prints
# how many threads the cache created (the target is at most 64).
require_relative "impl"

BenchImpl.n(100_000).times.map { BenchImpl.thread {} }.each(&:join)
puts "threads_created=#{RapidThread.cache_stats[:created]}" if BenchImpl::NAME == "gem"
