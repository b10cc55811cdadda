# frozen_string_literal: true

# Shared by test/ruby_suite/run.rb (Ruby's test/ruby tests) and
# test/ruby_suite/spec.rb (ruby/spec): find the running Ruby's source
# tarball, extract the few members a run needs into tmp/, and build the
# environment that puts the gem's classes in place of the core ones.
require "fileutils"
require "rbconfig"
require "open3"

module RubySuite
  ROOT = File.expand_path("../..", __dir__)
  SERIES = RUBY_VERSION[/\A\d+\.\d+/]

  module_function

  # --stock (run with stock's classes, as a baseline), --lib DIR (another
  # build's lib/, e.g. a worktree of an older commit), and everything after
  # `--` for the underlying runner.
  def options(argv)
    argv = argv.dup
    stock = !argv.delete("--stock").nil?
    lib = (i = argv.index("--lib")) ? File.expand_path(argv.slice!(i, 2).last) : File.join(ROOT, "lib")
    extra = (i = argv.index("--")) ? argv[(i + 1)..] : []
    { stock: stock, lib: lib, extra: extra }
  end

  # RUBY_SUITE_TARBALL, else `bin/setup-ruby SERIES source` (fetched once).
  def tarball
    return ENV["RUBY_SUITE_TARBALL"] if ENV["RUBY_SUITE_TARBALL"]

    out, status = Open3.capture2(File.join(ROOT, "bin/setup-ruby"), SERIES, "source")
    abort "ruby_suite: bin/setup-ruby #{SERIES} source failed" unless status.success?
    out.lines.last.chomp
  end

  # Extracts `required` and, when the tarball has them, `optional` members
  # (paths below its top directory; a trailing / takes a directory whole)
  # into `dest`, once per tarball and member list (a stamp records both).
  def extract(tarball, dest, required:, optional: [])
    stamp = File.join(dest, ".extracted")
    key = [tarball, *required, "--", *optional].join("\n")
    return if File.exist?(stamp) && File.read(stamp) == key

    FileUtils.rm_rf(dest)
    FileUtils.mkdir_p(dest)
    listing, status = Open3.capture2("tar", "-tf", tarball)
    abort "ruby_suite: cannot list #{tarball}" unless status.success?
    members = listing.lines.map(&:chomp)
    top = members.first[%r{\A[^/]+/}]
    missing = required.map { |m| top + m } - members
    abort "ruby_suite: #{File.basename(tarball)} lacks #{missing.join(', ')}" unless missing.empty?
    wanted = (required + optional).map { |m| top + m } & members
    system("tar", "-xf", tarball, "-C", dest, "--strip-components=1", *wanted, exception: true)
    File.write(stamp, key)
  end

  # The child environment: RUBYOPT loads rapid_thread/replace in every Ruby
  # process the run starts (the runner, and the processes tests spawn).
  # Checks that the swap is in effect before anything runs.
  def env(stock:, lib:)
    return {} if stock

    env = { "RUBYOPT" => [ENV.fetch("RUBYOPT", nil), "-I#{lib}", "-rrapid_thread/replace"].compact.join(" ") }
    check = "exit([Queue, SizedQueue, ConditionVariable, Thread::Queue, Thread::SizedQueue, Thread::ConditionVariable] == " \
            "[RapidThread::Queue, RapidThread::SizedQueue, RapidThread::ConditionVariable] * 2)"
    system(env, RbConfig.ruby, "-e", check) or abort "ruby_suite: rapid_thread/replace is not in effect (#{lib})"
    env
  end

  def banner(what, tarball, stock:, lib:)
    puts "ruby_suite: #{RUBY_DESCRIPTION}"
    puts "ruby_suite: #{what} from #{File.basename(tarball)}, with " \
         "#{stock ? "stock's classes" : "rapid_thread's classes (rapid_thread/replace, #{lib})"}"
    $stdout.flush
  end
end
