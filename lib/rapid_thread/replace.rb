# frozen_string_literal: true

# Opt-in drop-in mode: `require "rapid_thread/replace"` points the core
# constants at rapid_thread's classes, so existing code (and Monitor#new_cond,
# which looks up Thread::ConditionVariable when called) uses them:
#
#   ::Queue, Thread::Queue                         -> RapidThread::Queue
#   ::SizedQueue, Thread::SizedQueue               -> RapidThread::SizedQueue
#   ::ConditionVariable, Thread::ConditionVariable -> RapidThread::ConditionVariable
#
# Objects created before the swap keep their stock classes, so
# `old_queue.is_a?(Thread::Queue)` is false afterwards (README.md, "Drop-in mode").
# Plain `require "rapid_thread"` changes no core constant.
require "rapid_thread"

module RapidThread
  # The stock classes, kept for code that needs them after the swap.
  STOCK = {
    Queue: ::Thread::Queue,
    SizedQueue: ::Thread::SizedQueue,
    ConditionVariable: ::Thread::ConditionVariable
  }.freeze

  REPLACEMENTS = {
    Queue: RapidThread::Queue,
    SizedQueue: RapidThread::SizedQueue,
    ConditionVariable: RapidThread::ConditionVariable
  }.freeze

  # remove_const + const_set: no "already initialized constant" warning.
  [::Object, ::Thread].each do |owner|
    REPLACEMENTS.each do |name, klass|
      next if owner.const_defined?(name, false) && owner.const_get(name, false).equal?(klass)

      owner.send(:remove_const, name) if owner.const_defined?(name, false)
      owner.const_set(name, klass)
    end
  end
end
