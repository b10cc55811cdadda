# frozen_string_literal: true

require_relative "rapid_thread/version"
require "rapid_thread/rapid_thread"

# Fast drop-in replacements for Ruby's thread primitives, written in Rust.
#
# * RapidThread::Queue - Thread::Queue with Ruby 3.2's pop(timeout:)
#
# See README.md for the full API and docs/design.md for how it works.
module RapidThread
  class << self
    # Spin budget, in microseconds, of the first phase of a blocking wait:
    # how long a waiter yields the CPU, with the GVL released, waiting for
    # its wake-up before it falls back to Ruby's sleep. 0 disables spinning.
    # Defaults to 50, or ENV["RAPID_THREAD_SPIN_US"].
    #   RapidThread.spin_us = 20
    # (spin_us / spin_us= are defined natively.)

    # Budget, in microseconds, of the second phase: after being woken, how
    # long a waiter keeps yielding until the waker has released the GVL.
    # Defaults to 50, or ENV["RAPID_THREAD_GVL_SPIN_US"].
    # (gvl_spin_us / gvl_spin_us= are defined natively.)
  end

  self.spin_us = Integer(ENV["RAPID_THREAD_SPIN_US"]) if ENV["RAPID_THREAD_SPIN_US"]
  self.gvl_spin_us = Integer(ENV["RAPID_THREAD_GVL_SPIN_US"]) if ENV["RAPID_THREAD_GVL_SPIN_US"]
end
