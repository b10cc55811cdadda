# frozen_string_literal: true

# rake valgrind: runs workload.rb under Valgrind memcheck with Ruby's noise
# suppressed (ruby.supp) and fails on any remaining error (invalid reads or
# writes, uninitialised values in our frames, bad frees...), or on a
# "definitely lost" block that rapid_thread.so allocated itself (the first
# frame above the allocator is ours). Ruby 3.1 does not free its own memory
# at exit, so blocks libruby allocated (even when our code called it) are
# not counted.
require "open3"
require "rbconfig"

dir = __dir__
lib = File.expand_path("../../lib", dir)
cmd = ["valgrind", "--tool=memcheck", "--error-exitcode=0", "--leak-check=full",
       "--show-leak-kinds=definite", "--errors-for-leak-kinds=none", "--num-callers=40",
       "--max-stackframe=16777216",
       "--suppressions=#{File.join(dir, 'ruby.supp')}",
       RbConfig.ruby, "-I#{lib}", File.join(dir, "workload.rb")]
out, err, status = Open3.capture3(*cmd)
abort "workload failed under valgrind: #{status.inspect}\n#{out}\n#{err[-4000..] || err}" unless status.success? && out.include?("workload ok")

# Valgrind prints each process's summary (the fork child too).
errors = err.scan(/ERROR SUMMARY: (\d+) errors/).flatten.map(&:to_i)
records = err.split(/^==\d+== \n/).select { |b| b.include?("definitely lost") }
ALLOCATOR = /vg_replace_malloc|\b(malloc|calloc|realloc|memalign|posix_memalign|aligned_alloc)\b|__rust_alloc|__rdl_alloc|alloc::alloc/
ours = records.select do |b|
  frame = b.lines.grep(/^==\d+==\s+(at|by) 0x/).find { |l| l !~ ALLOCATOR }
  frame&.include?("rapid_thread")
end
suppressed = err.scan(/suppressed: (\d+) from/).flatten.map(&:to_i).sum
puts "valgrind: #{errors.inspect} unsuppressed errors per process, #{suppressed} suppressed (Ruby's own), " \
     "#{records.size} definitely-lost records, #{ours.size} from rapid_thread"
if errors.any?(&:positive?) || ours.any?
  warn err.lines.grep(/^==\d+== (Invalid|Conditional|Use of|Syscall|Mismatched|.*definitely lost)/).first(20).join
  warn ours.first(3).join("\n")
  abort "valgrind found errors"
end
