def boom = raise(ArgumentError, "bad value")
BLOCK = proc { boom }
def capture
  $stderr = StringIO.new
  t = yield
  t.join rescue nil
  $stderr.string
ensure
  $stderr = STDERR
end
require "stringio"
stock = capture { Thread.new(&BLOCK) }
ours = capture { Thread.spawn(&BLOCK) }
named = capture { t = Thread.spawn { Thread.current.name = "w"; boom }; t }
quiet = capture { t = Thread.spawn { Thread.current.report_on_exception = false; boom }; t }
# How this Ruby writes boom's frame ("<this file>:1:in `boom'" on 3.1 and
# 3.3, "<this file>:1:in 'Object#boom'" on 3.4), from the same Ruby.
frame = begin; boom; rescue ArgumentError => e; e.backtrace.first; end
print [stock, ours, named, quiet, frame].map { |s| s.gsub(/0x\h+/, "0xADDR") }.inspect
