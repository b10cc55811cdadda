# frozen_string_literal: true

# RAPID_THREAD_RBS=1 (rake test:rbs, Ruby 3.3 or 3.4 with its bundled rbs): every
# call the suite makes into rapid_thread's public classes and methods is
# checked at run time against sig/rapid_thread.rbs, with rbs's own runtime
# type checker (rbs/test: each method is wrapped, and a call whose
# arguments, block or return value do not match its signature raises
# RBS::Test::Tester::TypeError, an Exception the tests do not rescue).
#
# rbs's stock entry point (`ruby -r rbs/test/setup`, RBS_TEST_TARGET='RapidThread::*')
# installs its hooks when a Ruby class body ends, which a class defined
# by a native extension never has; this installs them explicitly, for
# every class and module in the signatures, right after the require.
require "rbs"
require "rbs/test"
require "logger"

module RapidThreadRBS
  SIG = File.expand_path("../../sig", __dir__)
  TARGETS = %w[RapidThread RapidThread::Queue RapidThread::SizedQueue RapidThread::ConditionVariable
               RapidThread::Task RapidThread::RactorQueue RapidThread::Executor].freeze

  # Runs the block with the checks off in this fiber: for the calls the
  # suite makes ill-typed on purpose (wrong arity, nil, strings, ... where
  # stock raises), to compare the gem's exception with stock's.
  def self.unchecked
    saved = Thread.current[:rapid_thread_rbs_unchecked]
    Thread.current[:rapid_thread_rbs_unchecked] = true
    yield
  ensure
    Thread.current[:rapid_thread_rbs_unchecked] = saved
  end

  module Suspendable
    def notify(key, *args)
      super unless Thread.current[:rapid_thread_rbs_unchecked]
    end
  end
  RBS::Test::Observer.singleton_class.prepend(Suspendable)

  def self.install!
    RBS.logger_level = ENV.fetch("RBS_TEST_LOGLEVEL", "warn")
    loader = RBS::EnvironmentLoader.new
    loader.add(path: Pathname(SIG))
    env = RBS::Environment.from_loader(loader).resolve_type_names
    tester = RBS::Test::Tester.new(env: env)
    TARGETS.each do |name|
      tester.install!(Object.const_get(name), sample_size: 100, unchecked_classes: [])
    end
    # Thread.spawn only: installing the tester on Thread would wrap every
    # core Thread method the suite uses.
    definition = tester.builder.build_singleton(RBS::Factory.new.type_name("::Thread"))
    checker = RBS::Test::Tester::MethodCallTester.new(Thread.singleton_class, tester.builder, definition,
                                                      kind: :singleton, sample_size: 100, unchecked_classes: [])
    key = "SingletonChecker__Thread_spawn__rapid_thread"
    RBS::Test::Observer.register(key, checker)
    RBS::Test::Hook.hook_singleton_method(Thread, :spawn, key: key)
  end
end

RapidThreadRBS.install!
