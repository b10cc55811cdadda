# frozen_string_literal: true

# The Rack app of `rake bench:apps`: a short Ruby loop per request
# (APP_LOOP iterations, default 200), so that a request holds the GVL for
# a few microseconds and the server's own threads (accept loop, reactor,
# thread pool) do the rest. Stock or drop-in mode is chosen by RUBYOPT
# (-rrapid_thread/replace), not here.
LOOP = Integer(ENV.fetch("APP_LOOP", "200"))
BODY = ["ok\n"].freeze
HEADERS = { "Content-Type" => "text/plain", "Content-Length" => "3" }.freeze

run(lambda do |_env|
  x = 0
  i = 0
  while i < LOOP
    x += i
    i += 1
  end
  [200, HEADERS, BODY]
end)

# GVL_WAITS with benchmark/apps/gvl_waits.so preloaded: write its report
# at exit (puma ends by re-raising SIGTERM, which skips C destructors).
if ENV["GVL_WAITS"] && ENV["LD_PRELOAD"].to_s.include?("gvl_waits")
  require "fiddle"
  at_exit { Fiddle::Function.new(Fiddle.dlopen(nil)["gvl_waits_report"], [], Fiddle::TYPE_VOID).call }
end

# APP_TRACE=path: how long puma's accept loop waits in
# ThreadPool#wait_until_not_full, and how long a request handed to the
# pool (ThreadPool#<<) waits for a worker; written at exit.
if (trace = ENV["APP_TRACE"])
  clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
  waits = { not_full: [], queued: [] }
  Puma::ThreadPool.prepend(Module.new do
    define_method(:wait_until_not_full) do
      t = clock.()
      super()
    ensure
      waits[:not_full] << clock.() - t
    end
    define_method(:<<) do |work|
      work.instance_variable_set(:@rapid_thread_queued, clock.())
      super(work)
    end
  end)
  Puma::Server.prepend(Module.new do
    define_method(:process_client) do |client, *rest|
      t = client.instance_variable_get(:@rapid_thread_queued)
      waits[:queued] << clock.() - t if t
      super(client, *rest)
    end
  end)
  at_exit do
    File.open("#{trace}.#{Process.pid}", "w") do |f|
      waits.each do |k, v|
        s = v.sort
        q = ->(p) { s.empty? ? 0 : s[[(s.size * p).ceil - 1, 0].max] * 1000 }
        f.puts format("%-9s n=%6d p50=%.2f p90=%.2f p99=%.2f max=%.2f ms  >10ms=%d", k, s.size, q.(0.5), q.(0.9),
                      q.(0.99), q.(1.0), s.count { |x| x > 0.010 })
      end
    end
  end
end
