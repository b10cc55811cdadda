# frozen_string_literal: true

# Runs Ruby's own tests for Thread::Queue, Thread::SizedQueue and
# Thread::ConditionVariable (test/ruby/test_thread_queue.rb and
# test/ruby/test_thread_cv.rb, from the source tarball of the running
# Ruby's series) with the gem's classes in place of the core ones.
#
#   ruby test/ruby_suite/run.rb            # the gem's classes (rake test:ruby_suite)
#   ruby test/ruby_suite/run.rb --stock    # stock's, as a baseline
#   ruby test/ruby_suite/run.rb --lib DIR  # another build's lib/ (e.g. an old worktree)
#   ruby test/ruby_suite/run.rb -- -v -n test_queue_with_trap   # options for Ruby's runner
#
# The tarball comes from `bin/setup-ruby SERIES source` (fetched once) or
# RUBY_SUITE_TARBALL. Only what the two files need is extracted, into
# tmp/ruby_suite/<version>/: the test files, the test library they load
# (tool/lib, and test/lib when present) and Ruby's test runner
# (tool/test/runner.rb). The gem comes in through RUBYOPT
# ("-I<lib> -rrapid_thread/replace"), so that the processes the tests start
# (assert_separately, assert_in_out_err) get it too.
#
# Tests that cannot apply to a replacement class are excluded by name
# through the runner's --excludes-dir, each with the reason (EXCLUDES
# below); nothing else is left out.
require "fileutils"
require "rbconfig"
require "open3"

ROOT = File.expand_path("../..", __dir__)
SERIES = RUBY_VERSION[/\A\d+\.\d+/]
FILES = %w[test/ruby/test_thread_queue.rb test/ruby/test_thread_cv.rb].freeze
# Directories extracted whole (those missing from a tarball are skipped).
DIRS = %w[tool/lib test/lib].freeze
RUNNER = "tool/test/runner.rb"

# { "TestClass" => { test_name: "why it cannot apply to a replacement" } }
EXCLUDES = {}.freeze

stock = ARGV.delete("--stock")
lib = (i = ARGV.index("--lib")) ? File.expand_path(ARGV.slice!(i, 2).last) : File.join(ROOT, "lib")
extra = (i = ARGV.index("--")) ? ARGV[(i + 1)..] : []

def tarball
  return ENV["RUBY_SUITE_TARBALL"] if ENV["RUBY_SUITE_TARBALL"]

  out, status = Open3.capture2(File.join(ROOT, "bin/setup-ruby"), SERIES, "source")
  abort "test/ruby_suite: bin/setup-ruby #{SERIES} source failed" unless status.success?
  out.lines.last.chomp
end

# Extracts the needed members once per tarball (a stamp records which).
def extract(tarball, dest)
  stamp = File.join(dest, ".extracted")
  return if File.exist?(stamp) && File.read(stamp) == tarball

  FileUtils.rm_rf(dest)
  FileUtils.mkdir_p(dest)
  members, status = Open3.capture2("tar", "-tf", tarball)
  abort "test/ruby_suite: cannot list #{tarball}" unless status.success?
  top = members[%r{\A[^/]+/}]
  wanted = (FILES + [RUNNER]).map { |f| top + f }
  wanted += DIRS.map { |d| top + d + "/" }.select { |d| members.include?("#{d}\n") }
  missing = wanted - members.lines.map(&:chomp)
  abort "test/ruby_suite: #{tarball} lacks #{missing.join(', ')}" unless missing.empty?
  system("tar", "-xf", tarball, "-C", dest, "--strip-components=1", *wanted, exception: true)
  File.write(stamp, tarball)
end

src = tarball
dest = File.join(ROOT, "tmp", "ruby_suite", RUBY_VERSION)
extract(src, dest)

excludes_dir = File.join(dest, "excludes")
FileUtils.rm_rf(excludes_dir)
FileUtils.mkdir_p(excludes_dir)
EXCLUDES.each do |klass, tests|
  File.write(File.join(excludes_dir, "#{klass}.rb"),
             tests.map { |name, why| "exclude(#{name.inspect}, #{why.dump})\n" }.join)
end

env = {}
unless stock
  env["RUBYOPT"] = [ENV.fetch("RUBYOPT", nil), "-I#{lib}", "-rrapid_thread/replace"].compact.join(" ")
  check = "exit(Thread::Queue.equal?(RapidThread::Queue) && Thread::ConditionVariable.equal?(RapidThread::ConditionVariable))"
  system(env, RbConfig.ruby, "-e", check) or abort "test/ruby_suite: rapid_thread/replace is not in effect"
end
puts "test/ruby_suite: #{RUBY_DESCRIPTION}"
puts "test/ruby_suite: #{FILES.join(', ')} from #{File.basename(src)}, with #{stock ? "stock's classes" : "rapid_thread's classes (rapid_thread/replace)"}"
cmd = [RbConfig.ruby, RUNNER, "--excludes-dir=#{excludes_dir}", *extra, *FILES]
Dir.chdir(dest) { exit(system(env, *cmd) ? 0 : 1) }
