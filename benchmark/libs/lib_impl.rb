# frozen_string_literal: true

# What a bench:libs row runs against (RAPID_THREAD_BENCH_IMPL, set by
# benchmark/run.rb --suite libs):
#   stock, stock-b -> the libraries on Ruby's own classes
#   gem            -> drop-in mode: require "rapid_thread/replace" before
#                     the library loads, as the README tells users to
#   floor          -> stock, and the row's program with the hand-off taken
#                     out (LibBench.floor?), where the row has one: what
#                     the library's own Ruby code costs
# Debian's pure-Ruby libraries (concurrent-ruby 1.1.6, connection_pool
# 2.2.5, minitest 5.17) are put on the load path for every Ruby, so that
# 3.3 and 3.4 run the same library code as Debian's 3.1.
module LibBench
  IMPL = ENV.fetch("RAPID_THREAD_BENCH_IMPL", "stock")
  SCALE = Float(ENV.fetch("BENCH_SCALE", "1"))
  GEMS = "/usr/share/rubygems-integration/all/gems"
  PATHS = %W[#{GEMS}/concurrent-ruby-1.1.6/lib/concurrent-ruby #{GEMS}/connection_pool-2.2.5/lib
             #{GEMS}/minitest-5.17.0/lib].freeze

  case IMPL
  when "stock", "stock-b", "floor" then nil
  when "gem"
    $LOAD_PATH.unshift ENV.fetch("RAPID_THREAD_BENCH_LIB") { File.expand_path("../../lib", __dir__) }
    require "rapid_thread/replace"
  else abort "unknown RAPID_THREAD_BENCH_IMPL=#{IMPL.inspect} (stock, gem or floor)"
  end
  $LOAD_PATH.unshift(*PATHS)

  module_function

  # The row's iteration count, scaled (never below 1).
  def n(count) = [(count * SCALE).round, 1].max

  # The floor side: run the program without its hand-off.
  def floor? = IMPL == "floor"

  # Checks the row did its work (a wrong result fails the run, not the
  # ratio).
  def check(what, got, want)
    abort "#{what}: #{got.inspect}, expected #{want.inspect}" unless got == want
  end
end
