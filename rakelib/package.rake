# frozen_string_literal: true

# Packaging.
#
#   rake gem          pkg/rapid_thread-<v>.gem: the source gem; installing it
#                     compiles the extension (cargo, libclang).
#   rake native gem   also pkg/rapid_thread-<v>-x86_64-linux.gem: the extension
#                     precompiled for every Ruby of NATIVE_RUBIES (3.1, 3.3,
#                     3.4: lib/rapid_thread/3.1/, ...), no `extensions`:
#                     installing it compiles nothing. lib/rapid_thread.rb
#                     loads the build for the running Ruby.
#   rake test:install both gems installed into empty GEM_HOMEs and used from /:
#                     the platform gem under each of those Rubies with no Rust
#                     toolchain reachable, the source gem (compiling) under 3.1.
require "rubygems/package_task"
require "fileutils"
require "tmpdir"
require "open3"

Gem::PackageTask.new(GEMSPEC) do |p|
  p.need_tar = false
  p.need_zip = false
end

# The Rubies the platform gem carries a build for, and how to reach them:
# Debian 12's 3.1, and every Ruby bin/setup-ruby builds (rakelib/rubies.rb).
NATIVE_RUBIES = {
  "3.1" => ENV.fetch("RUBY31") { RUBY_VERSION.start_with?("3.1.") ? RbConfig.ruby : "/usr/bin/ruby3.1" },
  **RapidThreadRubies::BUILT.to_h { |series| [series, RapidThreadRubies.ruby(series)] }
}.freeze
NATIVE_PLATFORM = Gem::Platform.new("x86_64-linux")

# "3.1, 3.3 and 3.4"
def native_rubies_text
  *rest, last = NATIVE_RUBIES.keys
  rest.empty? ? last : "#{rest.join(', ')} and #{last}"
end

# From the oldest Ruby carried to the newest's next minor (>= 3.1, < 3.5): a
# Ruby in between without a build (3.2) gets the LoadError of
# lib/rapid_thread.rb, which names the source gem.
def native_ruby_requirement
  versions = NATIVE_RUBIES.keys.map { |v| Gem::Version.new(v) }
  major, minor = versions.max.segments
  [">= #{versions.min}", "< #{major}.#{minor + 1}"]
end

def native_spec
  spec = GEMSPEC.dup
  spec.platform = NATIVE_PLATFORM
  spec.extensions = []
  # No Rust sources: nothing compiles on install.
  spec.files = spec.files.reject { |f| f.start_with?("ext/") || f.start_with?("Cargo.") } +
               NATIVE_RUBIES.keys.map { |v| "lib/rapid_thread/#{v}/rapid_thread.so" }
  spec.required_ruby_version = native_ruby_requirement
  spec
end

def compile_for(version, ruby)
  if RapidThreadRubies::BUILT.include?(version) && !File.executable?(ruby) && !ENV[RapidThreadRubies.env_var(version)]
    # A fresh clone after plain bin/setup: build that Ruby once, as
    # `bin/setup --ruby #{version}` would (Debian's source package).
    warn "rake native: no Ruby #{version} at #{ruby}; building it once with bin/setup-ruby #{version} (several minutes)"
    built = `bin/setup-ruby #{version}`.lines.last.to_s.strip
    abort "bin/setup-ruby #{version} failed" unless $?.success? && File.executable?(built)
    ruby = built
  end
  if RUBY_VERSION.start_with?("#{version}.")
    Rake::Task[:compile].invoke
  else
    other_ruby(version, ruby: ruby) # rake compile with that Ruby's rake
  end
  so = "lib/rapid_thread/#{version}/rapid_thread.so"
  abort "#{so} was not built" unless File.file?(so)
end

desc "Build the extension for Ruby #{native_rubies_text} and add the precompiled " \
     "#{NATIVE_PLATFORM} gem to `rake gem` (rake native gem)"
task :native do
  # The source gem must admit every Ruby the platform gem carries.
  NATIVE_RUBIES.each_key do |version|
    next if GEMSPEC.required_ruby_version.satisfied_by?(Gem::Version.new("#{version}.0"))

    abort "rapid_thread.gemspec's required_ruby_version (#{GEMSPEC.required_ruby_version}) excludes Ruby #{version}"
  end
  NATIVE_RUBIES.each { |version, ruby| compile_for(version, ruby) }
  spec = native_spec
  gem_path = File.join("pkg", spec.file_name)
  file gem_path => spec.files do
    # Gem::Package.build packs the files named by the spec, relative to the
    # current directory: stage exactly those.
    Dir.mktmpdir("rapid_thread-native") do |stage|
      spec.files.each do |f|
        FileUtils.mkdir_p(File.join(stage, File.dirname(f)))
        FileUtils.cp(f, File.join(stage, f), preserve: true)
      end
      built = Dir.chdir(stage) { File.expand_path(Gem::Package.build(spec)) }
      FileUtils.mkdir_p("pkg")
      FileUtils.mv(built, gem_path)
    end
    puts "built #{gem_path}"
  end
  task gem: gem_path
end

namespace :test do
  desc "Install the platform gem (Ruby #{native_rubies_text}, no Rust toolchain reachable) and the source gem " \
       "(3.1, compiles) into empty GEM_HOMEs, then run test/install/smoke.rb from /; without a Ruby's build, " \
       "the LoadError names the Rubies carried (test/install/missing_build.rb)"
  task install: %i[native gem] do
    root = File.expand_path("tmp/install")
    FileUtils.rm_rf(root)
    FileUtils.mkdir_p(root)
    smoke = File.expand_path("test/install/smoke.rb")

    # `gem build` of the source gem prints no warning on any of them.
    NATIVE_RUBIES.each_value do |ruby|
      out, status = Open3.capture2e(gem_command(ruby), "build", "rapid_thread.gemspec",
                                    "--output", File.join(root, "warnings-check.gem"))
      abort "gem build failed:\n#{out}" unless status.success?
      abort "gem build (#{ruby}) warned:\n#{out}" if out.include?("WARNING")
    end
    source_gem = File.expand_path("pkg/#{GEMSPEC.file_name}")
    native_gem = File.expand_path("pkg/#{native_spec.file_name}")

    # A platform gem must install and load with nothing but Ruby: PATH is
    # the Ruby's own bin directory, HOME an empty directory (extconf.rb's
    # fallback is ~/.cargo/bin/cargo), no CARGO / RUSTUP variables.
    NATIVE_RUBIES.each do |version, ruby|
      home = File.join(root, "native-#{version}")
      env = bare_env(ruby, home)
      cargo = `env -i PATH=#{env['PATH']} sh -c 'command -v cargo rustc clang libclang' 2>/dev/null`.strip
      abort "cargo or clang is reachable on #{env['PATH']}: #{cargo}" unless cargo.empty?
      install_and_smoke(env, ruby, native_gem, smoke, expect: "rapid_thread/#{version}/rapid_thread.so")
      # Without this Ruby's build, the LoadError names the Rubies carried.
      others = (NATIVE_RUBIES.keys - [version]).join(", ")
      sh env, ruby, File.expand_path("test/install/missing_build.rb"), others, chdir: "/"
    end

    # The source gem compiles on install (cargo on PATH; its target dir is
    # removed afterwards), on the Ruby 3.1 this machine has.
    ruby = NATIVE_RUBIES.fetch("3.1")
    home = File.join(root, "source-3.1")
    env = bare_env(ruby, home)
    env["PATH"] = "#{File.dirname(ruby)}:#{File.dirname(cargo_path)}:/usr/bin:/bin"
    env["HOME"] = Dir.home # rustup's toolchain lives under the real HOME
    install_and_smoke(env, ruby, source_gem, smoke, expect: "#{GEMSPEC.full_name}/lib/rapid_thread/rapid_thread.so")
    target = File.join(env["GEM_HOME"], "gems", GEMSPEC.full_name, "ext/rapid_thread/target")
    abort "the source gem kept its cargo target dir (#{target})" if File.exist?(target)
  end
end

def cargo_path
  ENV.fetch("CARGO") { [*ENV.fetch("PATH", "").split(":"), File.join(Dir.home, ".cargo/bin")].map { |d| File.join(d, "cargo") }.find { |f| File.executable?(f) } } ||
    abort("no cargo: the source gem cannot compile")
end

def bare_env(ruby, home)
  FileUtils.mkdir_p(File.join(home, "home"))
  gem_home = File.join(home, "gems")
  # Unset everything that could point a build at the toolchain or the
  # repository (Open3/sh pass nil as "unset").
  unset = ENV.keys.grep(/\A(CARGO|RUSTUP|RUST|BUNDLE|RUBYOPT|RUBYLIB|GEM_)/).to_h { |k| [k, nil] }
  unset.merge("PATH" => File.dirname(ruby), "HOME" => File.join(home, "home"),
              "GEM_HOME" => gem_home, "GEM_PATH" => gem_home, "LANG" => "C.UTF-8")
end

# The gem command that belongs to `ruby` (Debian: /usr/bin/gem3.1 beside ruby3.1).
def gem_command(ruby)
  [File.basename(ruby).sub("ruby", "gem"), "gem"].map { |g| File.join(File.dirname(ruby), g) }.find { |g| File.exist?(g) } ||
    abort("no gem command beside #{ruby}")
end

def install_and_smoke(env, ruby, gem_file, smoke, expect:)
  sh env, ruby, gem_command(ruby), "install", "--local", "--no-document", gem_file
  sh env, ruby, smoke, expect, chdir: "/"
end
