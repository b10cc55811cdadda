# frozen_string_literal: true

# Runs Ruby's own tests for Thread::Queue, Thread::SizedQueue and
# Thread::ConditionVariable (test/ruby/test_thread_queue.rb and
# test/ruby/test_thread_cv.rb, from the source tarball of the running
# Ruby's series) with the gem's classes in place of the core ones, and
# test/monitor/test_monitor.rb (Monitor#new_cond's condition variables are
# then the gem's, and the tests' Thread::Queue too).
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
# (tool/test/runner.rb, and the init.rb it loads on 3.3). The gem comes in
# through RUBYOPT ("-I<lib> -rrapid_thread/replace"), so that the processes
# the tests start (assert_separately, assert_in_out_err) get it too.
#
# Tests that cannot apply to a replacement class would be excluded by name
# through the runner's --excludes-dir, each with its reason (EXCLUDES
# below). None is needed: on 3.1.2, 3.3.8 and 3.4.5 every test passes.
require_relative "common"

FILES = %w[test/ruby/test_thread_queue.rb test/ruby/test_thread_cv.rb test/monitor/test_monitor.rb].freeze
RUNNER = "tool/test/runner.rb"
# test/lib: helpers some tests load; tool/test/init.rb: the runner's set-up
# on 3.3 (3.1's runner has none).
OPTIONAL = %w[test/lib/ tool/test/init.rb].freeze

# { "TestClass" => { test_name: "why it cannot apply to a replacement" } }
EXCLUDES = {}.freeze

opts = RubySuite.options(ARGV)
src = RubySuite.tarball
dest = File.join(RubySuite::ROOT, "tmp", "ruby_suite", RUBY_VERSION)
RubySuite.extract(src, dest, required: [*FILES, RUNNER, "tool/lib/"], optional: OPTIONAL)

excludes_dir = File.join(dest, "excludes")
FileUtils.rm_rf(excludes_dir)
FileUtils.mkdir_p(excludes_dir)
EXCLUDES.each do |klass, tests|
  File.write(File.join(excludes_dir, "#{klass}.rb"),
             tests.map { |name, why| "exclude(#{name.inspect}, #{why.dump})\n" }.join)
end

env = RubySuite.env(stock: opts[:stock], lib: opts[:lib])
RubySuite.banner(FILES.join(", "), src, stock: opts[:stock], lib: opts[:lib])
cmd = [RbConfig.ruby, RUNNER, "--excludes-dir=#{excludes_dir}", *opts[:extra], *FILES]
Dir.chdir(dest) { exit(system(env, *cmd) ? 0 : 1) }
