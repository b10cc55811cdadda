# frozen_string_literal: true

require_relative "lib/rapid_thread/version"

Gem::Specification.new do |spec|
  spec.name = "rapid_thread"
  spec.version = RapidThread::VERSION
  spec.authors = ["rapid_thread developers"]
  spec.summary = "Drop-in, faster Thread::Queue, SizedQueue and ConditionVariable, written in Rust"
  spec.description = <<~DESC
    RapidThread::Queue is a drop-in replacement for Thread::Queue implemented
    in Rust (magnus + rb-sys), with Ruby 3.2's pop(timeout:) on Ruby 3.1 and a
    hand-off path that avoids most of the cross-CPU wake-up latency.
  DESC
  spec.license = "MIT"
  spec.homepage = "https://github.com/rapid-thread/rapid_thread"
  spec.metadata = {
    "source_code_uri" => spec.homepage,
    "changelog_uri" => "#{spec.homepage}/blob/main/CHANGELOG.md",
    "rubygems_mfa_required" => "true"
  }
  # Tested on Ruby 3.1.2 (Debian 12), 3.3.8 and 3.4.5 (both also with M:N
  # threads); 3.2 is expected to work but is not tested (docs/development.md, "Gems").
  spec.required_ruby_version = [">= 3.1", "< 3.5"]

  # The source gem: Rust sources, compiled on install (extensions below).
  # `rake native gem` derives the precompiled x86_64-linux gem from this
  # spec (rakelib/package.rake): the same files plus lib/rapid_thread/<3.x>/
  # rapid_thread.so for each Ruby, and no extensions.
  spec.files = Dir[
    "lib/**/*.rb", "ext/rapid_thread/{Cargo.toml,build.rs,extconf.rb}", "ext/rapid_thread/src/**/*.rs",
    "Cargo.toml", "Cargo.lock", "sig/**/*.rbs", "README.md", "CHANGELOG.md", "LICENSE", "docs/*.md"
  ]
  spec.require_paths = ["lib"]
  spec.extensions = ["ext/rapid_thread/extconf.rb"]
end
