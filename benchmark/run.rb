# frozen_string_literal: true

# Interleaved stock-vs-gem benchmark runner.
#
#   ruby benchmark/run.rb [options] [name ...]
#     --rounds N    rounds per mode (default 5); each round runs stock, then gem
#     --scale S     multiply iteration counts by S (default 1)
#     --modes LIST  unpinned,pinned (default both; pinned = taskset -c 0)
#     --json PATH   where to write raw figures (default benchmark/results/latest.json)
#
# Each run is a separate process. Ratios are stock median / gem median from
# the same interleaved run. Wall and CPU (user+sys) are measured inside the
# child by benchmark/probe.rb; peak RSS is VmHWM.
require "json"
require "optparse"
require "rbconfig"
require "tmpdir"
require "etc"
require "time"

DIR = __dir__
opts = { rounds: 5, scale: 1.0, modes: %w[unpinned pinned], json: File.join(DIR, "results", "latest.json") }
OptionParser.new do |o|
  o.on("--rounds N", Integer) { |v| opts[:rounds] = v }
  o.on("--scale S", Float) { |v| opts[:scale] = v }
  o.on("--modes LIST") { |v| opts[:modes] = v.split(",") }
  o.on("--json PATH") { |v| opts[:json] = v }
  o.on("--chart PATH", "SVG bar chart of the speedups (default: beside the JSON)") { |v| opts[:chart] = v }
  o.on("--from-json PATH", "re-print the table and re-draw the chart of a saved run") { |v| opts[:from] = v }
  o.on("--control", "A/A run: stock against stock, the noise floor for every ratio") { opts[:control] = true }
end.parse!

all = Dir[File.join(DIR, "*.rb")].map { |f| File.basename(f, ".rb") } - %w[impl probe run]
names = ARGV.empty? ? all.sort : ARGV
names.each { |n| abort "no benchmark #{n} (have: #{all.sort.join(', ')})" unless all.include?(n) }
# In a control run the "gem" side is stock again (impl.rb's "stock-b").
IMPLS = %w[stock gem].freeze
SIDE = opts[:control] ? { "stock" => "stock", "gem" => "stock-b" } : { "stock" => "stock", "gem" => "gem" }

def median(xs)
  s = xs.sort
  s.size.odd? ? s[s.size / 2] : (s[s.size / 2 - 1] + s[s.size / 2]) / 2.0
end

def run_one(name, impl, mode, scale)
  Dir.mktmpdir do |d|
    out = File.join(d, "probe.jsonl")
    env = { "RAPID_THREAD_BENCH_IMPL" => impl, "BENCH_SCALE" => scale.to_s, "RAPID_THREAD_BENCH_OUT" => out }
    cmd = [RbConfig.ruby, "-r#{File.join(DIR, 'probe.rb')}", File.join(DIR, "#{name}.rb")]
    cmd = ["taskset", "-c", "0", *cmd] if mode == "pinned"
    ok = system(env, *cmd, out: File::NULL)
    raise "#{name} (#{impl}, #{mode}) failed: #{$?.inspect}" unless ok && File.exist?(out)
    JSON.parse(File.readlines(out).last, symbolize_names: true)
  end
end

if opts[:from]
  saved = JSON.parse(File.read(opts[:from]), symbolize_names: true)
  rows = saved[:results]
  machine = saved[:machine]
  opts[:rounds] = machine[:rounds]
else
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  results = {}
  names.each do |name|
    opts[:modes].each do |mode|
      runs = Hash.new { |h, k| h[k] = [] }
      opts[:rounds].times do |r|
        IMPLS.each do |impl|
          elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
          $stderr.print format("\r[%7.1fs] %-24s %-8s round %d/%d %-5s ", elapsed, name, mode, r + 1, opts[:rounds], impl)
          runs[impl] << run_one(name, SIDE[impl], mode, opts[:scale])
        end
      end
      results[[name, mode]] = runs
    end
  end
  $stderr.puts

  def stats(runs, key)
    xs = runs.map { |r| r[key] }
    { median: median(xs), min: xs.min, max: xs.max }
  end

  rows = results.map do |(name, mode), runs|
    s = IMPLS.to_h { |i| [i, { wall: stats(runs[i], :wall), cpu: stats(runs[i], :cpu), rss_kb: stats(runs[i], :rss_kb) }] }
    { name: name, mode: mode, stock: s["stock"], gem: s["gem"],
      speedup: s["stock"][:wall][:median] / s["gem"][:wall][:median],
      cpu_ratio: s["stock"][:cpu][:median] / [s["gem"][:cpu][:median], 1e-9].max, raw: runs }
  end
  machine = {
    cpu: File.read("/proc/cpuinfo")[/^model name\s*:\s*(.+)$/, 1], cores: Etc.nprocessors,
    ruby: RUBY_DESCRIPTION, gem_version: File.read(File.join(DIR, "../lib/rapid_thread/version.rb"))[/"(.+)"/, 1],
    date: Time.now.utc.iso8601, rounds: opts[:rounds], scale: opts[:scale], control: opts[:control] || false
  }
  require "fileutils"
  FileUtils.mkdir_p(File.dirname(opts[:json]))
  File.write(opts[:json], JSON.pretty_generate(machine: machine, results: rows))
end

fmt = ->(st) { format("%.3f (%.3f–%.3f)", st[:median], st[:min], st[:max]) }
puts "CONTROL RUN: both columns are stock Ruby; the ratios are the noise floor.\n\n" if machine[:control]
puts "| benchmark | mode | stock s | rapid_thread s | speedup | CPU s stock / gem | RSS MB stock / gem |"
puts "|---|---|---|---|---|---|---|"
rows.each do |r|
  puts format("| %s | %s | %s | %s | **%.2fx** | %.2f / %.2f | %.0f / %.0f |", r[:name], r[:mode], fmt.(r[:stock][:wall]),
              fmt.(r[:gem][:wall]), r[:speedup], r[:stock][:cpu][:median], r[:gem][:cpu][:median],
              r[:stock][:rss_kb][:median] / 1024.0, r[:gem][:rss_kb][:median] / 1024.0)
end

# A small SVG bar chart: one bar per benchmark and mode, log scale so that
# 1.1x and 40x both read; the 1.0x line is drawn.
def svg_chart(rows, title)
  bar_h = 16
  gap = 6
  left = 280
  width = 840
  plot_w = width - left - 70
  max = [rows.map { |r| r[:speedup] }.max || 1, 2].max
  scale = ->(x) { (Math.log10([x, 0.1].max) - Math.log10(0.5)) / (Math.log10(max * 1.2) - Math.log10(0.5)) * plot_w }
  height = 50 + rows.size * (bar_h + gap) + 30
  out = +%(<svg xmlns="http://www.w3.org/2000/svg" width="#{width}" height="#{height}" font-family="sans-serif" font-size="12">\n)
  out << %(<rect width="100%" height="100%" fill="white"/>\n<text x="10" y="20" font-size="14" font-weight="bold">#{title}</text>\n)
  rows.each_with_index do |r, i|
    y = 40 + i * (bar_h + gap)
    color = r[:mode] == "pinned" ? "#e08a2c" : "#2c6fe0"
    color = "#c0392b" if r[:speedup] < 1
    out << %(<text x="#{left - 6}" y="#{y + 12}" text-anchor="end">#{r[:name]} (#{r[:mode]})</text>\n)
    out << %(<rect x="#{left}" y="#{y}" width="#{scale.(r[:speedup]).round(1)}" height="#{bar_h}" fill="#{color}"/>\n)
    out << %(<text x="#{left + scale.(r[:speedup]) + 4}" y="#{y + 12}">#{format('%.2fx', r[:speedup])}</text>\n)
  end
  one = left + scale.(1.0)
  bottom = 40 + rows.size * (bar_h + gap)
  out << %(<line x1="#{one}" y1="32" x2="#{one}" y2="#{bottom}" stroke="black" stroke-dasharray="4 3"/>\n)
  out << %(<text x="#{one}" y="#{bottom + 16}" text-anchor="middle">1.0x (stock)</text>\n)
  out << %(<text x="#{width - 10}" y="#{bottom + 16}" text-anchor="end" fill="#555">blue: unpinned, orange: pinned (taskset -c 0); log scale</text>\n)
  out << "</svg>\n"
end

chart = opts[:chart] || opts[:json].sub(/\.json\z/, "") + ".svg"
File.write(chart, svg_chart(rows, "rapid_thread speedup over stock Ruby #{RUBY_VERSION} (stock time / gem time)"))

puts "\n#{opts[:rounds]} interleaved rounds (stock, gem, stock, gem, ...); medians (min–max). " \
     "#{machine[:cpu]}, #{machine[:cores]} cores, #{RUBY_VERSION}. Raw figures: #{opts[:json]}, chart: #{chart}"
