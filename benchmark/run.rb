# frozen_string_literal: true

# Interleaved stock-vs-gem benchmark runner.
#
#   ruby benchmark/run.rb [options] [name ...]
#     --rounds N     rounds per mode (default 5); each round runs stock, gem
#                    (and the control / peer sides), in that order
#     --scale S      multiply iteration counts by S (default 1)
#     --modes LIST   unpinned,pinned (default both; pinned = taskset -c 0);
#                    also saturated: unpinned while a CPU-bound process
#                    pinned to each core runs beside the benchmark (rake
#                    bench:saturated); quota05 / quota1: unpinned, each run
#                    in a CPU quota of 0.5 / 1 CPU of its own (a cgroup v1
#                    group made and removed per run, benchmark/cgroup.rb;
#                    root only, else the mode is skipped with the reason),
#                    with the group's throttled time per run
#     --json PATH    raw figures (default benchmark/results/latest.json);
#                    the chart is written beside it (.svg)
#     --no-control   skip the A/A side (stock again, "stock-b") whose ratio
#                    stock/stock-b is the noise floor printed in every row
#     --control      A/A only: the "gem" side is stock too
#     --peer         add concurrent-ruby (Debian's ruby-concurrent) as a third
#                    side for the thread-creation benchmarks (PEER below)
#     --idle LIST    waiter counts for the idle-waiters scenario
#                    (default 0,100,1000,5000; "none" skips it)
#     --suite NAME   the scripts of benchmark/NAME/ instead (calls: the
#                    per-call rows of rake bench:calls)
#     --from-json P  re-print the table and re-draw the chart of a saved run
#     --baseline LIB another build of the gem (its lib/ directory, e.g. a
#                    git worktree of an older commit after rake compile) as
#                    one more side, "before": the table adds its times and
#                    before/after (> 1: the current build is faster)
#
# Each run is a separate process. Ratios are stock median / gem median from
# the same interleaved run. Wall and CPU (user+sys) are measured inside the
# child by benchmark/probe.rb; peak RSS is VmHWM. A run that fails (stock
# cannot create 100k threads on one CPU) is shown as failed, not dropped.
require "json"
require "optparse"
require "rbconfig"
require "tmpdir"
require "etc"
require "time"
require "open3"
require_relative "cgroup"

DIR = __dir__
opts = { rounds: 5, scale: 1.0, modes: %w[unpinned pinned], json: File.join(DIR, "results", "latest.json"),
         with_control: true, idle: [0, 100, 1000, 5000] }
OptionParser.new do |o|
  o.on("--rounds N", Integer) { |v| opts[:rounds] = v }
  o.on("--scale S", Float) { |v| opts[:scale] = v }
  o.on("--modes LIST") { |v| opts[:modes] = v.split(",") }
  o.on("--json PATH") { |v| opts[:json] = v }
  o.on("--chart PATH") { |v| opts[:chart] = v }
  o.on("--from-json PATH") { |v| opts[:from] = v }
  o.on("--suite NAME") { |v| opts[:suite] = v }
  o.on("--control") { opts[:control] = true }
  o.on("--no-control") { opts[:with_control] = false }
  o.on("--peer") { opts[:peer] = true }
  o.on("--baseline LIB") { |v| opts[:baseline] = File.expand_path(v) }
  o.on("--idle LIST") { |v| opts[:idle] = v == "none" ? [] : v.split(",").map { |x| Integer(x) } }
end.parse!

# Modes that run each process in a CPU quota of its own (µs per 100 ms).
QUOTA_MODES = { "quota05" => 50_000, "quota1" => 100_000 }.freeze
if opts[:modes].any? { |m| QUOTA_MODES.key?(m) } && !opts[:from] && (why = CpuQuota.unavailable)
  warn "run.rb: skipping #{(opts[:modes] & QUOTA_MODES.keys).join(', ')}: no CPU quota possible (#{why})"
  opts[:modes] -= QUOTA_MODES.keys
  exit if opts[:modes].empty? # nothing left to run: no empty table or JSON
end

# The peer is Debian's ruby-concurrent, packaged for Debian's Ruby (3.1)
# only: under another Ruby (3.3 from bin/setup-ruby) the peer columns are
# left out rather than shown as failed runs.
if opts[:peer]
  _out, _err, st = Open3.capture3(RbConfig.ruby, "-e", "require 'concurrent'")
  unless st.success?
    warn "run.rb: concurrent-ruby is not installed for #{RbConfig.ruby}; no peer columns"
    opts[:peer] = false
  end
end

# What each benchmark swaps in gem mode (the rest is stock's code as is).
NOTES = {
  "vm_thread_alive_check" => "spawn (+ alive? hands the GVL to the woken worker)",
  "vm_thread_alive_check1" => "spawn (+ alive? hands the GVL to the woken worker)",
  "vm_thread_close" => "spawn only: 1000 blocks that sleep forever need 1000 threads either way: ~1.0x at best",
  "vm_thread_condvar1" => "ConditionVariable + spawn",
  "vm_thread_condvar2" => "ConditionVariable + spawn",
  "vm_thread_create_join" => "spawn",
  "vm_thread_mutex1" => "spawn only (Mutex is stock's): ~1.0x expected",
  "vm_thread_mutex2" => "spawn only (Mutex is stock's)",
  "vm_thread_mutex3" => "spawn only: 2000 blocks share few threads, less contention",
  "vm_thread_pass" => "spawn only: the 8 blocks mostly run one after another on one worker",
  "vm_thread_pass_flood" => "spawn only: blocks that never end start gradually (1 per 20 ms), not all 5000 at once",
  "vm_thread_pipe" => "spawn only: ~1.0x expected",
  "vm_thread_queue" => "Queue + spawn",
  "vm_thread_sized_queue" => "SizedQueue + spawn",
  "vm_thread_sized_queue2" => "SizedQueue + spawn",
  "vm_thread_sized_queue3" => "SizedQueue + spawn",
  "vm_thread_sized_queue4" => "SizedQueue + spawn",
  "vm_thread_sleep" => "spawn only: sleeping blocks start gradually; the process exits first",
  "spawn_value" => "spawn: vm_thread_create_join with #value (100k spawn { i }.value)",
  "spawn_storm" => "seed scenario: 100k spawns, then join all",
  "spawn_after_burst" => "scenario: 64 blocked blocks released, then 20k sequential spawn+value",
  "micro_push_pop" => "Queue, one thread",
  "batch_drain" => "gem-only API: push_all(256 items) / pop_batch(256) where stock pushes and pops one by one",
  "select_handoff" => "gem-only API: the echo thread selects over two queues where stock pops one",
  "handoff_pingpong" => "Queue + spawn, two threads",
  "ractor_share" => "gem-only API: 1 producer and 2 consumer Ractors share a RactorQueue; stock: the pipe-Ractor idiom",
  "ractor_single" => "RactorQueue in place of Thread::Queue, one thread: the cost of sharing (< 1.0x expected)"
}.freeze
# Scenarios of the gem-only API: a "plain" side (the gem's classes, one item
# per call, RAPID_THREAD_BENCH_IMPL=gem-plain) measures them against the
# gem's own plain API, with the targets of issue 14.
BEYOND_STOCK = { "batch_drain" => ["gem vs plain", 5.0, ">="], "select_handoff" => ["gem vs plain", 0.5, ">="] }.freeze
# Benchmarks with a concurrent-ruby side under --peer.
PEER = %w[spawn_storm vm_thread_create_join].freeze

SCRIPTS = opts[:suite] ? File.join(DIR, opts[:suite]) : DIR
all = Dir[File.join(SCRIPTS, "*.rb")].map { |f| File.basename(f, ".rb") } - %w[impl lib_impl call_impl executor_impl probe run apps]
names = ARGV.empty? ? all.sort_by { |n| [n.start_with?("vm_thread_") ? 0 : 1, n] } : ARGV
names.each { |n| abort "no benchmark #{n} (have: #{all.sort.join(', ')})" unless all.include?(n) }

# side => RAPID_THREAD_BENCH_IMPL. In a --control run the "gem" side is stock.
def sides_for(name, opts)
  s = { "stock" => "stock", "gem" => opts[:control] ? "stock-b" : "gem" }
  s["control"] = "stock-b" if opts[:with_control] && !opts[:control]
  s["concurrent"] = "concurrent" if opts[:peer] && PEER.include?(name)
  s["before"] = "gem" if opts[:baseline]
  s["plain"] = "gem-plain" if BEYOND_STOCK.key?(name) && !opts[:control]
  s["floor"] = "floor" if !opts[:control] && File.read(File.join(SCRIPTS, "#{name}.rb")).match?(/\b(LibBench|ExecBench)\.floor\?/)
  # bench:executor: the Executor in drop-in mode too (benchmark/executor/executor_impl.rb).
  s["dropin"] = "gem-replace" if opts[:suite] == "executor" && !opts[:control]
  s
end

def median(xs)
  s = xs.sort
  s.size.odd? ? s[s.size / 2] : (s[s.size / 2 - 1] + s[s.size / 2]) / 2.0
end

# One busy-looping process pinned to each core (the saturated mode),
# running for a whole benchmark's rounds, every side's runs included: every
# core is busy, in a steady state, as on a server beside CPU-bound work.
# Unpinned hogs measured the load balancer instead: it often put both on
# one core and left the benchmark the other (whole runs 4-6x faster,
# stock's and the gem's alike, CPU time equal to wall time), and a row's
# median depended on how many runs had that luck. Hogs started afresh 0.2 s
# ahead of each run also measured the scheduler's start-up (an A/A of
# 2.20x).
HOG_WARMUP = 1.0

def with_hogs(mode)
  return yield unless mode == "saturated"

  hogs = Etc.nprocessors.times.map { |cpu| Process.spawn("taskset", "-c", cpu.to_s, RbConfig.ruby, "-e", "loop {}") }
  sleep HOG_WARMUP
  yield
ensure
  hogs&.each do |pid|
    Process.kill("KILL", pid)
    Process.wait(pid)
  end
end

def run_one(script, impl, mode, scale, env_extra = {}, timeout: 600)
  Dir.mktmpdir do |d|
    out = File.join(d, "probe.jsonl")
    env = { "RAPID_THREAD_BENCH_IMPL" => impl, "BENCH_SCALE" => scale.to_s, "RAPID_THREAD_BENCH_OUT" => out }.merge(env_extra)
    cmd = [RbConfig.ruby, "-r#{File.join(DIR, 'probe.rb')}", script]
    cmd = ["taskset", "-c", "0", *cmd] if mode == "pinned"
    cmd = ["timeout", timeout.to_s, *cmd]
    quota_us = QUOTA_MODES[mode]
    return run_argv(env, cmd, out) unless quota_us

    CpuQuota.run(quota_us) do |q|
      t0 = q.throttled[:throttled_ms]
      r = run_argv(env, q.command(*cmd), out)
      r[:failed] ? r : r.merge(throttled_ms: q.throttled[:throttled_ms] - t0)
    end
  end
end

def run_argv(env, argv, out)
  stdout, stderr, status = Open3.capture3(env, *argv)
  unless status.success? && File.exist?(out)
    return { failed: "#{status.exitstatus}: #{stderr.lines.grep(/Error|error/).first&.strip || stderr.lines.last&.strip}" }
  end

  JSON.parse(File.readlines(out).last, symbolize_names: true).merge(stdout: stdout.strip)
end

def stats(runs, key)
  xs = runs.reject { |r| r[:failed] }.filter_map { |r| r[key] }
  return nil if xs.empty?

  { median: median(xs), min: xs.min, max: xs.max }
end

def progress(started, *fields)
  elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
  $stderr.print format("\r[%7.1fs] %-60s", elapsed, fields.join(" "))
end

ratio = ->(a, b) { a && b ? a[:median] / [b[:median], 1e-9].max : nil }

if opts[:from]
  saved = JSON.parse(File.read(opts[:from]), symbolize_names: true)
  rows = saved[:results]
  idle_rows = saved[:idle_waiters] || []
  machine = saved[:machine]
else
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  rows = []
  names.each do |name|
    sides = sides_for(name, opts)
    opts[:modes].each do |mode|
      runs = Hash.new { |h, k| h[k] = [] }
      with_hogs(mode) do
        opts[:rounds].times do |r|
          sides.each do |side, impl|
            progress(started, name, mode, "round #{r + 1}/#{opts[:rounds]}", side)
            env = side == "before" ? { "RAPID_THREAD_BENCH_LIB" => opts[:baseline] } : {}
            runs[side] << run_one(File.join(SCRIPTS, "#{name}.rb"), impl, mode, opts[:scale], env)
          end
        end
      end
      s = sides.keys.to_h { |k| [k, %i[wall cpu rss_kb throttled_ms].to_h { |m| [m, stats(runs[k], m)] }] }
      rows << { name: name, mode: mode, sides: s, note: NOTES[name],
                failures: runs.transform_values { |rs| rs.count { |x| x[:failed] } }.select { |_, v| v.positive? },
                errors: runs.values.flatten.filter_map { |x| x[:failed] }.uniq,
                speedup: ratio.(s["stock"][:wall], s["gem"][:wall]),
                control: s["control"] && ratio.(s["stock"][:wall], s["control"][:wall]),
                vs_peer: s["concurrent"] && ratio.(s["concurrent"][:wall], s["gem"][:wall]),
                vs_before: s["before"] && ratio.(s["before"][:wall], s["gem"][:wall]),
                vs_plain: s["plain"] && ratio.(s["plain"][:wall], s["gem"][:wall]),
                vs_floor: s["floor"] && ratio.(s["gem"][:wall], s["floor"][:wall]),
                vs_dropin: s["dropin"] && ratio.(s["stock"][:wall], s["dropin"][:wall]),
                raw: runs }
    end
  end

  # Seed scenario "idle waiters": the counter reached by a running thread
  # while N threads wait in pop on their own queues; counter(N)/counter(0).
  idle_rows = []
  unless opts[:idle].empty? || opts[:control]
    seconds = opts[:scale] < 0.01 ? 0.05 : 1.0 # tiny only for smoke runs
    counts = Hash.new { |h, k| h[k] = [] }
    opts[:rounds].times do |r|
      opts[:idle].each do |n|
        %w[stock gem].each do |impl|
          progress(started, "idle_waiters", "N=#{n}", "round #{r + 1}/#{opts[:rounds]}", impl)
          res = run_one(File.join(DIR, "scenarios", "idle_waiters.rb"), impl, "unpinned", 1,
                        { "IDLE_WAITERS" => n.to_s, "IDLE_SECONDS" => seconds.to_s })
          counts[[impl, n]] << Integer(res[:stdout]) unless res[:failed]
        end
      end
    end
    opts[:idle].each do |n|
      row = { n: n }
      %w[stock gem].each do |impl|
        c = counts[[impl, n]]
        base = counts[[impl, opts[:idle].min]]
        row[impl.to_sym] = { median: c.empty? ? nil : median(c), relative: c.empty? || base.empty? ? nil : median(c) / median(base).to_f }
      end
      idle_rows << row
    end
  end
  $stderr.puts

  machine = {
    cpu: File.read("/proc/cpuinfo")[/^model name\s*:\s*(.+)$/, 1], cores: Etc.nprocessors,
    ruby: RUBY_DESCRIPTION, gem_version: File.read(File.join(DIR, "../lib/rapid_thread/version.rb"))[/"(.+)"/, 1],
    date: Time.now.utc.iso8601, rounds: opts[:rounds], scale: opts[:scale], control: opts[:control] || false,
    elapsed_s: (Process.clock_gettime(Process::CLOCK_MONOTONIC) - started).round(1)
  }
  require "fileutils"
  FileUtils.mkdir_p(File.dirname(opts[:json]))
  File.write(opts[:json], JSON.pretty_generate(machine: machine, results: rows, idle_waiters: idle_rows))
end

sec = ->(st) { st ? format("%.3f (%.3f–%.3f)", st[:median], st[:min], st[:max]) : "failed" }
x = ->(v) { v ? format("%.2fx", v) : "–" }
mb = ->(st) { st ? format("%.0f", st[:median] / 1024.0) : "–" }
cpu = ->(st) { st ? format("%.2f", st[:median]) : "–" }
peer = rows.any? { |r| r[:vs_peer] }
puts "CONTROL RUN: both columns are stock Ruby; the ratios are the noise floor.\n\n" if machine[:control]
# One row per benchmark (ruby-core style: name | stock | rapid_thread |
# speedup), the pinned figures in the next columns, then the A/A noise
# floor, CPU, RSS and the concurrent-ruby peer where there is one.
modes = rows.map { |r| r[:mode] }.uniq
head = ["name"]
modes.each do |m|
  t = m == "unpinned" ? "" : "#{m} "
  head += ["#{t}stock s", "#{t}rapid_thread s", "#{t}speedup", "#{t}A/A"]
  head += ["#{t}before s", "#{t}after vs before"] if rows.any? { |r| r[:vs_before] }
end
head += ["CPU s stock / gem", "RSS MB stock / gem"]
head += ["concurrent-ruby s", "gem vs concurrent"] if peer
puts "| #{head.join(' | ')} |", "|#{'---|' * head.size}"
rows.group_by { |r| r[:name] }.each do |name, rs|
  cells = [name]
  modes.each do |m|
    r = rs.find { |x| x[:mode] == m }
    s = r ? r[:sides].transform_keys(&:to_s) : {}
    cells += r ? [sec.(s["stock"][:wall]), sec.(s["gem"][:wall]), "**#{x.(r[:speedup])}**", x.(r[:control])] : %w[– – – –]
    cells += r ? [sec.(s["before"]&.dig(:wall)), x.(r[:vs_before])] : %w[– –] if rows.any? { |q| q[:vs_before] }
  end
  first = rs.first[:sides].transform_keys(&:to_s)
  cells << "#{cpu.(first['stock'][:cpu])} / #{cpu.(first['gem'][:cpu])}"
  cells << "#{mb.(first['stock'][:rss_kb])} / #{mb.(first['gem'][:rss_kb])}"
  if peer
    pr = rs.select { |r| r[:vs_peer] }
    cells << pr.map { |r| sec.(r[:sides].transform_keys(&:to_s)["concurrent"][:wall]) }.join(" / ")
    cells << pr.map { |r| x.(r[:vs_peer]) }.join(" / ")
  end
  puts "| #{cells.join(' | ')} |"
end
puts "\nCPU and RSS are medians of the #{modes.first} runs; the concurrent-ruby columns list #{modes.join(' / ')}." 
# A side's median throttled time (sides keyed as in the table above).
throttled_ms = ->(r, side) { r[:sides].transform_keys(&:to_s)[side]&.dig(:throttled_ms, :median) }
throttled = rows.select { |r| throttled_ms.(r, "stock") }
unless throttled.empty?
  # Per run, not per second: a quota gives a side that finishes sooner the
  # same CPU per second, and the group's throttled time is summed over the
  # CPUs that had work queued (docs/design-details.md, "CPU quotas").
  puts "\nThrottled time of each run's group, ms per run (medians; the same work on every side):\n\n"
  before = throttled.any? { |r| throttled_ms.(r, "before") }
  puts "| name | mode | stock | rapid_thread |#{' before |' if before} A/A |", "|---|---|---|---|#{'---|' if before}---|"
  throttled.each do |r|
    t = ->(side) { (v = throttled_ms.(r, side)) ? format("%.0f", v) : "–" }
    puts "| #{r[:name]} | #{r[:mode]} | #{t.('stock')} | #{t.('gem')} |#{" #{t.('before')} |" if before} #{t.('control')} |"
  end
end
notes = rows.map { |r| [r[:name], r[:note]] }.uniq.select(&:last)
puts "\nWhat gem mode swaps in:\n\n" + notes.map { |n, t| "- #{n}: #{t}" }.join("\n") unless notes.empty?
created = rows.select { |r| r[:name] == "spawn_storm" }.map do |r|
  n = r[:raw].fetch("gem") { r[:raw].fetch(:gem, []) }.filter_map { |x| x[:stdout].to_s[/threads_created=(\d+)/, 1]&.to_i }
  "#{r[:mode]} #{n.max || '?'}"
end
puts "\nspawn_storm: most threads the gem's cache created in a run: #{created.join(', ')} (Thread.new: one per block)." unless created.empty?
left = rows.select { |r| r[:name] == "spawn_after_burst" }.map do |r|
  n = r[:raw].fetch("gem") { r[:raw].fetch(:gem, []) }.filter_map { |x| x[:stdout].to_s[/threads_after_idle=(\d+)/, 1]&.to_i }
  "#{r[:mode]} #{n.max || '?'}"
end
puts "\nspawn_after_burst: most cached threads left idle_timeout + 1.5 s after the burst, under the sequential load: #{left.join(', ')} (target: at most 4)." unless left.empty?
beyond = rows.select { |r| r[:vs_plain] }
unless beyond.empty?
  puts "\nGem-only API against the gem's own one-item-per-call API on the same setup (plain s / gem s; wall medians):\n\n"
  puts "| name | mode | plain s | gem s | plain / gem | target |", "|---|---|---|---|---|---|"
  beyond.each do |r|
    s = r[:sides].transform_keys(&:to_s)
    _label, target, op = BEYOND_STOCK.fetch(r[:name], ["", 0, ">="])
    met = r[:vs_plain].public_send(op, target) ? "met" : "MISSED"
    puts "| #{r[:name]} | #{r[:mode]} | #{sec.(s['plain'][:wall])} | #{sec.(s['gem'][:wall])} | #{x.(r[:vs_plain])} | #{op} #{target}x: #{met} |"
  end
end
floors = rows.select { |r| r[:vs_floor] }
unless floors.empty?
  puts "\nFloors: the same program with the hand-off taken out, on stock (benchmark/libs/lib_impl.rb); " \
       "gem / floor is how far the row is from what the library's own code costs (wall medians):\n\n"
  puts "| name | mode | floor s | gem s | gem / floor |", "|---|---|---|---|---|"
  floors.each do |r|
    s = r[:sides].transform_keys(&:to_s)
    puts "| #{r[:name]} | #{r[:mode]} | #{sec.(s['floor'][:wall])} | #{sec.(s['gem'][:wall])} | #{x.(r[:vs_floor])} |"
  end
end
dropin = rows.select { |r| r[:vs_dropin] }
unless dropin.empty?
  puts "\nThe Executor in drop-in mode too (rapid_thread/replace loaded before concurrent-ruby, so that its " \
       "futures, latches and locks wait on the gem's ConditionVariable), against stock (wall medians):\n\n"
  puts "| name | mode | stock s | Executor + drop-in s | speedup |", "|---|---|---|---|---|"
  dropin.each do |r|
    s = r[:sides].transform_keys(&:to_s)
    puts "| #{r[:name]} | #{r[:mode]} | #{sec.(s['stock'][:wall])} | #{sec.(s['dropin'][:wall])} | #{x.(r[:vs_dropin])} |"
  end
end
failed = rows.reject { |r| r[:failures].nil? || r[:failures].empty? }
unless failed.empty?
  puts "\nFailed runs (counted as failed, left out of the medians):"
  failed.each { |r| puts "- #{r[:name]} (#{r[:mode]}): #{r[:failures].map { |k, v| "#{k} #{v}x" }.join(', ')}: #{r[:errors].join('; ')}" }
end
unless idle_rows.empty?
  puts "\n#### Idle waiters (unpinned): counter reached while N threads wait in pop; counter(N)/counter(0)\n\n"
  puts "| N | stock counter | stock ratio | rapid_thread counter | rapid_thread ratio |", "|---|---|---|---|---|"
  idle_rows.each do |r|
    f = ->(h) { [h[:median] ? h[:median].round.to_s : "failed", h[:relative] ? format("%.2f", h[:relative]) : "–"] }
    puts "| #{r[:n]} | #{f.(r[:stock]).join(' | ')} | #{f.(r[:gem]).join(' | ')} |"
  end
end

# A small SVG bar chart: one bar per benchmark and mode, log scale so that
# 1.1x and 40x both read; the 1.0x line is drawn.
def svg_chart(rows, title)
  rows = rows.select { |r| r[:speedup] }
  bar_h = 14
  gap = 5
  left = 290
  width = 860
  plot_w = width - left - 70
  max = [rows.map { |r| r[:speedup] }.max || 1, 2].max
  scale = ->(x) { (Math.log10([x, 0.1].max) - Math.log10(0.5)) / (Math.log10(max * 1.2) - Math.log10(0.5)) * plot_w }
  height = 50 + rows.size * (bar_h + gap) + 30
  out = +%(<svg xmlns="http://www.w3.org/2000/svg" width="#{width}" height="#{height}" font-family="sans-serif" font-size="12">\n)
  out << %(<rect width="100%" height="100%" fill="white"/>\n<text x="10" y="20" font-size="14" font-weight="bold">#{title}</text>\n)
  rows.each_with_index do |r, i|
    y = 40 + i * (bar_h + gap)
    color = { "pinned" => "#e08a2c", "saturated" => "#8a2ce0" }.fetch(r[:mode], "#2c6fe0")
    color = "#c0392b" if r[:speedup] < 1
    out << %(<text x="#{left - 6}" y="#{y + 11}" text-anchor="end">#{r[:name]} (#{r[:mode]})</text>\n)
    out << %(<rect x="#{left}" y="#{y}" width="#{scale.(r[:speedup]).round(1)}" height="#{bar_h}" fill="#{color}"/>\n)
    out << %(<text x="#{left + scale.(r[:speedup]) + 4}" y="#{y + 11}">#{format('%.2fx', r[:speedup])}</text>\n)
  end
  one = left + scale.(1.0)
  bottom = 40 + rows.size * (bar_h + gap)
  out << %(<line x1="#{one}" y1="32" x2="#{one}" y2="#{bottom}" stroke="black" stroke-dasharray="4 3"/>\n)
  out << %(<text x="#{one}" y="#{bottom + 16}" text-anchor="middle">1.0x (stock)</text>\n)
  out << %(<text x="#{width - 10}" y="#{bottom + 16}" text-anchor="end" fill="#555">blue: unpinned, orange: pinned (taskset -c 0), purple: saturated (a busy process per core); red: slower; log scale</text>\n)
  out << "</svg>\n"
end

chart = opts[:chart] || opts[:json].sub(/\.json\z/, "") + ".svg"
File.write(chart, svg_chart(rows, "rapid_thread speedup over stock Ruby #{RUBY_VERSION} (stock time / gem time)"))

puts "\n#{machine[:rounds]} interleaved rounds (stock, gem#{', stock again (A/A)' if rows.any? { |r| r[:control] }}, ...); " \
     "medians (min–max), scale #{machine[:scale]}. #{machine[:cpu]}, #{machine[:cores]} cores, #{machine[:ruby]}, " \
     "#{machine[:date]}. Raw figures: #{opts[:json]}, chart: #{chart}"
