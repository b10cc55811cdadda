# frozen_string_literal: true

# Runs ruby/spec's specs for Queue, SizedQueue and ConditionVariable
# (spec/ruby/core/{queue,sizedqueue,conditionvariable} and the shared
# specs they use), with mspec, both from the source tarball of the running
# Ruby's series, with the gem's classes in place of the core ones.
#
#   ruby test/ruby_suite/spec.rb            # the gem's classes (rake test:ruby_spec)
#   ruby test/ruby_suite/spec.rb --stock    # stock's, as a baseline
#   ruby test/ruby_suite/spec.rb --lib DIR  # another build's lib/
#   ruby test/ruby_suite/spec.rb -- -fs     # options for mspec-run (-fs: spec names)
#
# Extracted into tmp/ruby_spec/<version>/: spec/mspec, spec/ruby's
# spec_helper.rb, default.mspec, fixtures/code (spec_helper resolves it),
# the shared specs (spec/ruby/shared, small) and the three directories.
# As for run.rb, RUBYOPT loads rapid_thread/replace in every process.
# Nothing is excluded: on 3.1.2, 3.3.8 and 3.4.5 every example passes.
require_relative "common"

DIRS = %w[core/queue core/sizedqueue core/conditionvariable].freeze

opts = RubySuite.options(ARGV)
src = RubySuite.tarball
dest = File.join(RubySuite::ROOT, "tmp", "ruby_spec", RUBY_VERSION)
RubySuite.extract(src, dest, required: ["spec/mspec/", "spec/ruby/spec_helper.rb", "spec/ruby/default.mspec",
                                        "spec/ruby/fixtures/code/", "spec/ruby/shared/",
                                        *DIRS.map { |d| "spec/ruby/#{d}/" }])

env = RubySuite.env(stock: opts[:stock], lib: opts[:lib])
RubySuite.banner("spec/ruby/{#{DIRS.join(',')}}", src, stock: opts[:stock], lib: opts[:lib])
cmd = [RbConfig.ruby, "../mspec/bin/mspec-run", "-B", "default.mspec", *opts[:extra], *DIRS]
Dir.chdir(File.join(dest, "spec", "ruby")) { exit(system(env, *cmd) ? 0 : 1) }
