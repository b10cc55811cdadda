# ActiveRecord 6.1 + sqlite3: 16 threads share a connection pool of 4, each
# doing with_connection { select_value("select 1") } on a real database
# file. Ruby 3.1 only (Debian's sqlite3 is built for it).
require_relative "lib_impl"
require "tmpdir"
require "active_record"

per_thread = LibBench.n(300)
Dir.mktmpdir do |dir|
  ActiveRecord::Base.establish_connection(adapter: "sqlite3", database: File.join(dir, "bench.sqlite3"),
                                          pool: 4, checkout_timeout: 30)
  ActiveRecord::Base.connection.select_value("select 1")
  go = Queue.new
  threads = Array.new(16) do
    Thread.new do
      go.pop
      per_thread.times.sum { ActiveRecord::Base.connection_pool.with_connection { |c| c.select_value("select 1") } }
    end
  end
  BenchProbe.start_collected
  16.times { go << true }
  LibBench.check("sum", threads.sum(&:value), 16 * per_thread)
  BenchProbe.finish
  ActiveRecord::Base.connection_pool.disconnect!
end
