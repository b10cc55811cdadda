# frozen_string_literal: true

require "concurrent"
require "rapid_thread"
require "rapid_thread/executor"

module RapidThread
  # With concurrent-ruby loaded, an Executor is a Concurrent::ExecutorService:
  # Promises.future_on(executor), Future.execute(executor:) and
  # Promise.execute(executor:) take it (Concurrent::Options.executor accepts
  # only that). Its own methods stay in front of the module's.
  class Executor
    include ::Concurrent::ExecutorService

    # The executors replace_global_executors put in place, [io, fast].
    GLOBALS = Thread::Mutex.new
    private_constant :GLOBALS

    class << self
      # From this call on, Concurrent.global_io_executor (what :io names:
      # Promises.future, Future, ScheduledTask and TimerTask by default) is
      # a cached Executor, and Concurrent.global_fast_executor (:fast) one
      # of max(2, processor_count) threads. concurrent-ruby has no setter:
      # the two documented module functions are overridden. Executors
      # already fetched from them keep their own (concurrent-ruby's pools
      # run on). Returns [io, fast]; calling again returns the same pair.
      def replace_global_executors
        GLOBALS.synchronize do
          @globals ||= begin
            io = new
            fast = new(max_threads: [2, ::Concurrent.processor_count].max)
            ::Concurrent.singleton_class.prepend(Module.new do
              define_method(:global_io_executor) { io }
              define_method(:global_fast_executor) { fast }
            end)
            [io, fast].freeze
          end
        end
      end
    end
  end
end
