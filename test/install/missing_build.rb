# frozen_string_literal: true

# Run against the installed platform gem (rake test:install): on a Ruby the
# gem carries no build for, `require "rapid_thread"` raises a LoadError that
# names the Rubies it does carry. No such Ruby is built here (3.2 would be
# one), so this loads a copy of the installed gem's lib/ without the
# running Ruby's build. ARGV[0]: the carried Rubies it must name, as
# "3.3, 3.4".
require "fileutils"
require "tmpdir"

expected = ARGV.fetch(0)
minor = RUBY_VERSION[/\A\d+\.\d+/]
installed = Gem::Specification.find_by_name("rapid_thread").full_gem_path
Dir.mktmpdir do |dir|
  FileUtils.cp_r(File.join(installed, "lib"), dir)
  FileUtils.rm_rf(File.join(dir, "lib", "rapid_thread", minor))
  $LOAD_PATH.unshift(File.join(dir, "lib"))
  begin
    require "rapid_thread"
    abort "rapid_thread loaded without a build for Ruby #{minor}"
  rescue LoadError => e
    want = "this copy carries precompiled builds for Ruby #{expected} "
    abort "LoadError does not name the carried Rubies (#{want.inspect}):\n#{e.message}" unless e.message.include?(want)
    abort "LoadError does not name this Ruby:\n#{e.message}" unless e.message.include?("no extension for Ruby #{RUBY_VERSION}")
  end
end
puts "missing build ok: ruby #{RUBY_VERSION} without its build names #{expected}"
