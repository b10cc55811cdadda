# frozen_string_literal: true

# The real-server benchmark (`rake bench:apps`): Debian's puma serving
# benchmark/apps/app.ru, driven by wrk over loopback, stock against drop-in
# mode (RUBYOPT=-rrapid_thread/replace: the gem's Queue, SizedQueue and
# ConditionVariable under puma's thread pool and reactor), with an A/A
# control (stock again). Judged by the tail (p90/p99) as much as by
# requests/s.
#
#   ruby benchmark/apps.rb [options] [config ...]
#     --rounds N      interleaved rounds (default 5); the order of the sides
#                     rotates from round to round
#     --duration S    measured seconds per run (default 5), after
#     --warmup S      seconds of unmeasured load (default 2)
#     --json PATH     raw figures (default benchmark/results/apps.json)
#     --sides LIST    stock,gem,stock-b (default); "before" adds --baseline
#     --baseline LIB  another build's lib/ as the "before" side (drop-in)
#     --side NAME=ENV a gem side with extra environment, e.g.
#                     --side nospin=RAPID_THREAD_SPIN_US=0 (repeatable;
#                     ENV is K=V[,K=V...])
#     --env K=V       extra environment for every side's puma (repeatable)
#     --from-json P   re-print the table of a saved run
#
# Configs (these three by default): single_pinned (5 threads, 20
# connections, puma on CPU 0 and wrk on CPU 1), single16 (16 threads, 50
# connections, a 2,000-iteration loop, unpinned), cluster (2 workers x 5
# threads, 40 connections, unpinned). CPU per request is the user+system
# time of the whole puma process tree over the measured window, divided by
# the requests wrk completed in it; the JSON adds the context switches
# (voluntary, involuntary) of all its threads per request.
#
# Quota configs (`rake bench:apps_quota`): the same three shapes unpinned,
# with puma in a CPU quota of 1 CPU or 0.5 CPU (quota1_single,
# quota1_single16, quota1_cluster, quota05_...): a cgroup v1 group made
# for each run and removed after it (benchmark/cgroup.rb; root only, else
# they are skipped with the reason). wrk runs outside the quota. They add
# the time the group was throttled, per second of the measured window. A
# run whose group cannot be made or removed is listed as failed.
#
# Ruby 3.1: Debian's puma and nio4r. Other Rubies: puma's Ruby code from
# Debian's package, its C extension built for that Ruby by
# benchmark/apps/build_puma.rb (bin/setup does it), and nio4r in its
# pure-Ruby mode (NIO4R_PURE=true) from Debian's ruby-nio4r.
require "json"
require "optparse"
require "rbconfig"
require "socket"
require "fileutils"
require "time"
require "etc"
require "tmpdir"
require_relative "cgroup"

DIR = __dir__
ROOT = File.expand_path("..", DIR)
APP = File.join(DIR, "apps", "app.ru")

CONFIGS = {
  "single_pinned" => { threads: 5, workers: 0, connections: 20, loop: 200, pinned: true,
                       desc: "single mode, 5 threads, 20 connections; puma on CPU 0, wrk on CPU 1" },
  "single16" => { threads: 16, workers: 0, connections: 50, loop: 2000, pinned: false,
                  desc: "single mode, 16 threads, 50 connections, 2,000-iteration loop, unpinned" },
  "cluster" => { threads: 5, workers: 2, connections: 40, loop: 200, pinned: false,
                 desc: "cluster mode, 2 workers x 5 threads, 40 connections, unpinned" }
}
DEFAULT_CONFIGS = CONFIGS.keys.freeze
# The quota configs: each shape unpinned, puma in a quota of 1 or 0.5 CPU.
{ "quota1" => [100_000, "1 CPU"], "quota05" => [50_000, "0.5 CPU"] }.each do |prefix, (quota_us, what)|
  { "single" => CONFIGS["single_pinned"], "single16" => CONFIGS["single16"], "cluster" => CONFIGS["cluster"] }
    .each do |shape, conf|
      CONFIGS["#{prefix}_#{shape}"] = conf.merge(pinned: false, quota_us: quota_us,
                                                 desc: "#{conf[:desc].sub(/; puma on CPU 0.*|, unpinned/, '')}, " \
                                                       "puma in a #{what} quota, wrk outside it")
    end
end
CONFIGS.freeze
QUOTA_CONFIGS = (CONFIGS.keys - DEFAULT_CONFIGS).freeze

opts = { rounds: 5, duration: 5, warmup: 2, json: File.join(DIR, "results", "apps.json"),
         sides: %w[stock gem stock-b], extra: {} }
OptionParser.new do |o|
  o.on("--rounds N", Integer) { |v| opts[:rounds] = v }
  o.on("--duration S", Integer) { |v| opts[:duration] = v }
  o.on("--warmup S", Integer) { |v| opts[:warmup] = v }
  o.on("--json PATH") { |v| opts[:json] = v }
  o.on("--sides LIST") { |v| opts[:sides] = v.split(",") }
  o.on("--baseline LIB") { |v| opts[:baseline] = File.expand_path(v) }
  o.on("--side SPEC") do |v|
    name, env = v.split("=", 2)
    opts[:extra][name] = env.split(",").to_h { |kv| kv.split("=", 2) }
    opts[:sides] << name unless opts[:sides].include?(name) # named in --sides too: run once
  end
  o.on("--env KV") { |v| (opts[:env] ||= {}).store(*v.split("=", 2)) }
  o.on("--from-json PATH") { |v| opts[:from] = v }
end.parse!
opts[:sides] << "before" if opts[:baseline] && !opts[:sides].include?("before")

def median(xs)
  s = xs.compact.sort
  return nil if s.empty?

  n = s.size
  n.odd? ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2.0
end

# How to start puma with the running Ruby: [argv prefix, extra env].
def puma_command
  minor = RUBY_VERSION[/\A\d+\.\d+/]
  if minor == "3.1" && File.exist?("/usr/bin/puma")
    [[RbConfig.ruby, "/usr/bin/puma"], {}]
  else
    lib = Dir["/usr/lib/x86_64-linux-gnu/rubygems-integration/*/gems/puma-*/lib"].max
    nio = Dir["/usr/lib/x86_64-linux-gnu/rubygems-integration/*/gems/nio4r-*/lib"].max
    ext = File.join(ENV.fetch("RAPID_THREAD_APPS_EXT") { File.expand_path("~/.cache/rapid_thread/apps") },
                    "ruby-#{minor}")
    unless lib && nio && File.exist?(File.join(ext, "puma", "puma_http11.so"))
      abort "apps.rb: no puma for Ruby #{minor}: run bin/setup --ruby #{minor} (or benchmark/apps/build_puma.rb)"
    end
    [[RbConfig.ruby, "-I#{ext}", "-I#{lib}", "-I#{nio}", File.join(File.dirname(lib), "bin", "puma")],
     { "NIO4R_PURE" => "true" }]
  end
end

def side_env(side, opts)
  case side
  when "stock", "stock-b" then {}
  when "gem" then { "RUBYOPT" => "-I#{File.join(ROOT, 'lib')} -rrapid_thread/replace" }
  when "before" then { "RUBYOPT" => "-I#{opts[:baseline]} -rrapid_thread/replace" }
  else { "RUBYOPT" => "-I#{File.join(ROOT, 'lib')} -rrapid_thread/replace" }.merge(opts[:extra].fetch(side))
  end
end

def free_port
  s = TCPServer.new("127.0.0.1", 0)
  s.addr[1]
ensure
  s&.close
end

def wait_for_port(port, pid, limit)
  deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + limit
  loop do
    TCPSocket.new("127.0.0.1", port).close
    return
  rescue Errno::ECONNREFUSED
    raise "puma exited before listening" if Process.waitpid(pid, Process::WNOHANG)
    raise "puma did not listen within #{limit} s" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

    sleep 0.05
  end
end

# The pids of `pid` and all its descendants (cluster workers).
def tree(pid)
  kids = Dir["/proc/#{pid}/task/*/children"].flat_map { |f| File.read(f).split.map(&:to_i) }
  [pid] + kids.flat_map { |k| tree(k) }
rescue Errno::ENOENT
  [pid]
end

TICK = Etc.sysconf(Etc::SC_CLK_TCK).to_f

def cpu_seconds(pids)
  pids.sum do |p|
    f = File.read("/proc/#{p}/stat").split(")").last.split
    (f[11].to_i + f[12].to_i) / TICK # utime, stime
  rescue Errno::ENOENT, Errno::ESRCH
    0.0
  end
end

# Context switches (voluntary, involuntary) of every thread of `pids`.
def context_switches(pids)
  pids.flat_map { |p| Dir["/proc/#{p}/task/*/status"] }.each_with_object([0, 0]) do |f, acc|
    s = File.read(f)
    acc[0] += s[/^voluntary_ctxt_switches:\s+(\d+)/, 1].to_i
    acc[1] += s[/^nonvoluntary_ctxt_switches:\s+(\d+)/, 1].to_i
  rescue Errno::ENOENT, Errno::ESRCH
    nil
  end
end

def to_ms(s)
  v = s.to_f
  case s
  when /us\z/ then v / 1000.0
  when /ms\z/ then v
  when /m\z/ then v * 60_000.0
  when /s\z/ then v * 1000.0
  else v
  end
end

def wrk(port, conf, seconds)
  cmd = ["wrk", "-t2", "-c#{conf[:connections]}", "-d#{seconds}s", "--latency", "http://127.0.0.1:#{port}/"]
  cmd = ["taskset", "-c", "1", *cmd] if conf[:pinned]
  out = IO.popen(cmd, err: %i[child out], &:read)
  raise "wrk failed: #{out}" unless $?.success?

  lat = out.scan(/^\s+(50|75|90|99)%\s+(\S+)/).to_h { |p, v| [p.to_i, to_ms(v)] }
  errors = out[/Socket errors: (.*)$/, 1]
  non2xx = out[/Non-2xx or 3xx responses: (\d+)/, 1].to_i
  { requests: out[/(\d+) requests in/, 1].to_i, rps: out[/Requests\/sec:\s+([\d.]+)/, 1].to_f,
    p50: lat[50], p90: lat[90], p99: lat[99], errors: errors, non2xx: non2xx }
end

def run_one(side, conf, opts)
  return run_puma(side, conf, opts) unless conf[:quota_us]

  CpuQuota.run(conf[:quota_us], grace: SHUTDOWN_LIMIT) { |quota| run_puma(side, conf, opts, quota) }
end

def run_puma(side, conf, opts, quota = nil)
  port = free_port
  argv, env = puma_command
  cmd = [*argv, "-b", "tcp://127.0.0.1:#{port}", "-t", "#{conf[:threads]}:#{conf[:threads]}",
         "-w", conf[:workers].to_s, "-e", "production", APP]
  cmd = ["taskset", "-c", "0", *cmd] if conf[:pinned]
  cmd = quota.command(*cmd) if quota
  env = env.merge("APP_LOOP" => conf[:loop].to_s).merge(opts.fetch(:env, {})).merge(side_env(side, opts))
  log = File.join(Dir.tmpdir, "rapid_thread-apps-#{side}.log")
  pid = Process.spawn(env, *cmd, out: log, err: log, pgroup: true)
  begin
    wait_for_port(port, pid, 30)
    if conf[:workers] > 0 # every worker booted: they listen only once up
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
      sleep 0.1 until tree(pid).size > conf[:workers] ||
                      Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    end
    wrk(port, conf, opts[:warmup]) if opts[:warmup] > 0
    pids = tree(pid)
    cpu0 = cpu_seconds(pids)
    cs0 = context_switches(pids)
    throttled0 = quota&.throttled
    r = wrk(port, conf, opts[:duration])
    cpu = cpu_seconds(pids) - cpu0
    cs = context_switches(pids).zip(cs0).map { |a, b| a - b }
    result = r.merge(cpu_us_per_req: r[:requests] > 0 ? cpu * 1e6 / r[:requests] : nil,
                     switches_per_req: r[:requests] > 0 ? cs.map { |c| c.fdiv(r[:requests]) } : nil)
    if quota
      t = quota.throttled
      result[:throttled_ms_per_s] = (t[:throttled_ms] - throttled0[:throttled_ms]) / opts[:duration]
      result[:throttled_periods] = t[:throttled_periods] - throttled0[:throttled_periods]
    end
    result
  ensure
    if stop_puma(pid)
      tail = File.exist?(log) ? File.readlines(log).last(30).join : "(no log)"
      warn "#{side}: puma did not exit within #{SHUTDOWN_LIMIT} s of TERM; killed. Its log's tail:\n#{tail}"
      result[:stuck_on_shutdown] = tail if result # the same Hash is returned
    end
  end
end

# How long puma may take to exit after TERM before it is killed (and the
# run marked `stuck_on_shutdown`, with its log's tail): a shutdown that
# hangs must show as such, naming its side, not as a harness timeout.
SHUTDOWN_LIMIT = 20

# TERM to puma's process group, then KILL after SHUTDOWN_LIMIT; whether
# it had to be killed.
def stop_puma(pid)
  begin
    Process.kill("TERM", -pid)
  rescue Errno::ESRCH
    nil
  end
  deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + SHUTDOWN_LIMIT
  until Process.waitpid(pid, Process::WNOHANG)
    if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      begin
        Process.kill("KILL", -pid)
      rescue Errno::ESRCH
        nil
      end
      Process.wait(pid)
      return true
    end
    sleep 0.05
  end
  false
end

def summary(runs, key)
  median(runs.map { |r| r[key] })
end

def fmt(v, digits = 1)
  v.nil? ? "-" : format("%.#{digits}f", v)
end

def print_table(data)
  sides = data["sides"]
  compared = sides - %w[stock stock-b]
  puts "Ruby #{data.dig('machine', 'ruby')}, #{data['rounds']} interleaved rounds of " \
       "#{data['duration']} s (after #{data['warmup']} s of warm-up), medians"
  puts
  compared.each do |other|
    puts "stock against #{other}:" if compared.size > 1
    puts "| config | rps stock / #{other} | rps ratio | p50 ms | p90 ms | p99 ms | p99 ratio | " \
         "CPU µs/req | throttled ms/s | A/A rps | A/A p99 |"
    puts "|---|---|---|---|---|---|---|---|---|---|---|"
    data["configs"].each do |name, c|
      s = c["runs"].fetch("stock", [])
      g = c["runs"].fetch(other, [])
      b = c["runs"].fetch("stock-b", [])
      m = ->(runs, k) { summary(runs.map { |r| r.transform_keys(&:to_sym) }, k) }
      rps = [m.(s, :rps), m.(g, :rps)]
      p99 = [m.(s, :p99), m.(g, :p99)]
      ratio = ->(a, z) { a && z && z > 0 ? a / z : nil }
      kilo = ->(v) { v && v / 1000.0 } # a side not run (--sides without stock) has no median
      puts "| #{name} | #{fmt(kilo.(rps[0]))}k / #{fmt(kilo.(rps[1]))}k | **#{fmt(ratio.(rps[1], rps[0]), 2)}x** | " \
           "#{fmt(m.(s, :p50), 2)} / #{fmt(m.(g, :p50), 2)} | #{fmt(m.(s, :p90))} / #{fmt(m.(g, :p90))} | " \
           "#{fmt(p99[0])} / #{fmt(p99[1])} | **#{fmt(ratio.(p99[1], p99[0]), 2)}x** | " \
           "#{fmt(m.(s, :cpu_us_per_req), 0)} / #{fmt(m.(g, :cpu_us_per_req), 0)} | " \
           "#{fmt(m.(s, :throttled_ms_per_s))} / #{fmt(m.(g, :throttled_ms_per_s))} | " \
           "#{fmt(ratio.(m.(b, :rps), rps[0]), 2)}x | #{fmt(ratio.(m.(b, :p99), p99[0]), 2)}x |"
    end
    puts
  end
  puts "rps ratio: #{compared.join('/')} over stock (> 1: more requests/s); p99 ratio: #{compared.join('/')} " \
       "over stock (< 1: a shorter tail); A/A: stock-b over stock, the noise floor."
  failed = data["configs"].flat_map do |name, c|
    c["runs"].flat_map { |side, runs| runs.filter_map { |r| "#{name} #{side}: #{r['failed']}" if r["failed"] } }
  end
  puts "\nFailed runs (left out of the medians):", failed.map { |f| "- #{f}" } unless failed.empty?
end

if opts[:from]
  print_table(JSON.parse(File.read(opts[:from])))
  exit
end

names = ARGV.empty? ? DEFAULT_CONFIGS : ARGV
names = QUOTA_CONFIGS if names == ["quota"]
names.each { |n| abort "apps.rb: unknown config #{n} (#{CONFIGS.keys.join(', ')}, or quota)" unless CONFIGS[n] }
if names.any? { |n| CONFIGS[n][:quota_us] } && (why = CpuQuota.unavailable)
  warn "apps.rb: skipping the quota configs: no CPU quota can be made here (#{why})"
  names = names.reject { |n| CONFIGS[n][:quota_us] }
  exit if names.empty?
end
abort "apps.rb: wrk not found (bin/setup installs it)" unless system("command -v wrk >/dev/null")

data = { "machine" => { "ruby" => RUBY_VERSION, "cpus" => Etc.nprocessors, "date" => Time.now.utc.iso8601,
                        "cpu" => File.read("/proc/cpuinfo")[/model name\s*:\s*(.*)/, 1] },
         "rounds" => opts[:rounds], "duration" => opts[:duration], "warmup" => opts[:warmup],
         "sides" => opts[:sides], "extra" => opts[:extra],
         "configs" => names.to_h { |n| [n, { "desc" => CONFIGS[n][:desc], "runs" => {} }] } }
opts[:rounds].times do |round|
  names.each do |n|
    opts[:sides].rotate(round).each do |side|
      r = run_one(side, CONFIGS[n], opts)
      (data["configs"][n]["runs"][side] ||= []) << r.transform_keys(&:to_s)
      next warn format("round %d %-16s %-8s failed: %s", round + 1, n, side, r[:failed]) if r[:failed]

      warn format("round %d %-16s %-8s %8.0f rps  p50 %6.2f  p90 %6.2f  p99 %7.2f ms  %4.0f µs/req%s%s",
                  round + 1, n, side, r[:rps], r[:p50], r[:p90], r[:p99], r[:cpu_us_per_req] || 0,
                  r[:throttled_ms_per_s] ? format("  throttled %5.1f ms/s", r[:throttled_ms_per_s]) : "",
                  r[:errors] ? "  errors: #{r[:errors]}" : "")
    end
  end
end
FileUtils.mkdir_p(File.dirname(opts[:json]))
File.write(opts[:json], JSON.pretty_generate(data))
print_table(data)
