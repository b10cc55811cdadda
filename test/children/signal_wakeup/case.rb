# One case of signal_wakeup_test.rb, run as
#   ruby --disable-gems -I<lib> case.rb IMPL OP SOURCE TIMING
# IMPL: stock, gem or gem_replace (<IMPL>.rb names the subjects); OP: an
# operation (ops.rb); SOURCE: a wake source (sources.rb); TIMING: untimed
# or timed (the operation's timed form). Prints the operation's report and
# whether it returned promptly.
impl, op_name, source_name, timing = ARGV
abort "case.rb: unknown IMPL #{impl.inspect}" unless %w[stock gem gem_replace].include?(impl)
abort "case.rb: unknown TIMING #{timing.inspect}" unless %w[untimed timed].include?(timing)
require_relative impl
require_relative "../child_helper"
require_relative "ops"
require_relative "sources"

def fmt(r, subject) = r.equal?(subject) ? :self : r

c = OPS.fetch(op_name).new
abort "case.rb: #{op_name} has no timed form" if timing == "timed" && !c.respond_to?(:timed)
helper = SOURCES.fetch(source_name).call(c)
t0 = monotonic
r = begin
  timing == "timed" ? c.timed : c.op
rescue StandardError => e
  "raised #{e.class}: #{e.message}"
end
elapsed = monotonic - t0
c.op_done = true
helper.join
p c.report(r)
puts "prompt: #{elapsed < 10}"
