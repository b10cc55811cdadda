# frozen_string_literal: true

require_relative "rapid_thread/version"
begin
  # A build for this Ruby (rake compile, or the precompiled platform gem,
  # which carries one per Ruby: lib/rapid_thread/3.1/, 3.3/, 3.4/).
  require_relative "rapid_thread/#{RUBY_VERSION[/\A\d+\.\d+/]}/rapid_thread"
rescue LoadError => precompiled
  begin
    # A source gem's extension, compiled on install.
    require "rapid_thread/rapid_thread"
  rescue LoadError => source
    # The builds this copy carries, as they are on disk (what was packaged).
    carried = Dir[File.join(__dir__, "rapid_thread", "[0-9]*.[0-9]*", "rapid_thread.so")]
              .map { |so| File.basename(File.dirname(so)) }.sort_by { |v| v.split(".").map(&:to_i) }
    raise LoadError, "rapid_thread has no extension for Ruby #{RUBY_VERSION} (#{RUBY_PLATFORM}): this copy carries " \
                     "#{carried.empty? ? 'no precompiled build' : "precompiled builds for Ruby #{carried.join(', ')}"} " \
                     "(the precompiled gem is x86_64-linux, glibc 2.34+); elsewhere install the source gem, which " \
                     "compiles with Rust: gem install rapid_thread --platform ruby " \
                     "(#{precompiled.message}; #{source.message})"
  end
end
require_relative "rapid_thread/task"

module RapidThread
  # Loaded on first use: compiling it took 1 ms of the gem's 1.8 ms load
  # (Ruby 3.4.5), which every process paid, drop-in mode included.
  autoload :Executor, File.expand_path("rapid_thread/executor", __dir__)
  autoload :RejectedExecutionError, File.expand_path("rapid_thread/executor", __dir__)
end

# Fast drop-in replacements for Ruby's thread primitives, written in Rust:
#
# * RapidThread::Queue             - Thread::Queue (+ Ruby 3.2's pop(timeout:))
# * RapidThread::SizedQueue        - Thread::SizedQueue (+ push(timeout:))
# * RapidThread::ConditionVariable - Thread::ConditionVariable
#
# and beyond stock: Queue#push_all, Queue#pop_batch and
# RapidThread.select(*queues, timeout: nil).
#
# The classes and the methods below are defined by the native extension;
# docs/api.md documents every public method and docs/design.md how they work.
#
# Tuning of blocking waits (process-wide):
#
# RapidThread.spin_us / RapidThread.spin_us = n
#   How long, in microseconds, a blocked waiter yields the CPU with the GVL
#   released, waiting for its wake-up, before it falls back to Ruby's own
#   sleep. 0 disables the spin (and parking). Default 50, or
#   ENV["RAPID_THREAD_SPIN_US"].
#
# RapidThread.gvl_spin_us / RapidThread.gvl_spin_us = n
#   After being woken, how long a waiter keeps yielding until the waker has
#   released the GVL, so that taking the GVL does not sleep. Default 50, or
#   ENV["RAPID_THREAD_GVL_SPIN_US"].
#
# When a wait spins, parks or sleeps is the spin policy, described once in
# the header of ext/rapid_thread/src/spin.rs. RapidThread.spin_stats counts
# what it decided ({ spins:, late_spins:, parks:, quiet: });
# RapidThread.cpu_budget says how many CPUs it counts and why.
module RapidThread
  self.spin_us = Integer(ENV["RAPID_THREAD_SPIN_US"]) if ENV["RAPID_THREAD_SPIN_US"]
  self.gvl_spin_us = Integer(ENV["RAPID_THREAD_GVL_SPIN_US"]) if ENV["RAPID_THREAD_GVL_SPIN_US"]
end
