# frozen_string_literal: true

require_relative "test_helper"
# Executor.replace_global_executors exists with concurrent-ruby loaded.
require_relative "support/concurrent_ruby"
require "rapid_thread/concurrent"

# sig/rapid_thread.rbs against the implementation: every public method the
# gem defines has a signature and every signature names a real method (the
# runtime type checking of `rake test:rbs` checks only the calls the suite
# makes, and only methods that have a signature).
class RBSTest < RapidThreadTest
  SIG = File.expand_path("../sig/rapid_thread.rbs", __dir__)
  CLASSES = {
    "RapidThread" => RapidThread, "RapidThread::Queue" => RapidThread::Queue,
    "RapidThread::SizedQueue" => RapidThread::SizedQueue,
    "RapidThread::ConditionVariable" => RapidThread::ConditionVariable, "RapidThread::Task" => RapidThread::Task,
    "RapidThread::RactorQueue" => RapidThread::RactorQueue, "RapidThread::Executor" => RapidThread::Executor,
    "Thread" => Thread
  }.freeze

  def setup
    super
    # A static check: loading rbs under GC.stress (a full GC per
    # allocation) takes longer than the test's time limit, for nothing.
    skip "static signature check; not run under GC stress" if GC_STRESS
    require "rbs"
  rescue LoadError
    skip "the rbs gem is not available to this Ruby"
  end

  # {"RapidThread::Queue" => {instance: [...], singleton: [...]}} from the file.
  def declared
    parsed = RBS::Parser.parse_signature(File.read(SIG))
    decls = parsed.is_a?(Array) && parsed.size == 3 && parsed.last.is_a?(Array) ? parsed.last : parsed # rbs 3 / rbs 2
    out = Hash.new { |h, k| h[k] = { instance: [], singleton: [] } }
    walk = lambda do |decl, prefix|
      next unless decl.is_a?(RBS::AST::Declarations::Class) || decl.is_a?(RBS::AST::Declarations::Module)

      name = [prefix, decl.name.to_s.delete_prefix("::")].compact.join("::")
      decl.members.each do |m|
        case m
        when RBS::AST::Members::MethodDefinition
          kinds = m.kind == :singleton_instance ? %i[instance singleton] : [m.kind]
          kinds.each { |k| out[name][k] << m.name }
        when RBS::AST::Members::Alias
          out[name][m.kind] << m.new_name
        else
          walk.call(m, name)
        end
      end
    end
    decls.each { |d| walk.call(d, nil) }
    out
  end

  # Public methods the gem defines; `__x` names are internal.
  def implemented(klass)
    own = ->(names) { names.reject { |n| n.to_s.start_with?("__") || n.to_s.include?("__with__") || n.to_s.include?("__without__") } }
    if klass.equal?(Thread)
      { instance: [], singleton: [:spawn] }
    else
      { instance: own.(klass.is_a?(Class) ? klass.public_instance_methods(false) : []),
        singleton: own.(klass.singleton_methods(false)) }
    end
  end

  def test_every_public_method_has_a_signature_and_every_signature_a_method
    sig = declared
    CLASSES.each do |name, klass|
      impl = implemented(klass)
      %i[instance singleton].each do |kind|
        missing = impl[kind] - sig[name][kind]
        assert_empty missing, "#{name}: #{kind} methods without a signature"
        next if klass.equal?(Thread)

        extra = sig[name][kind] - impl[kind] - %i[initialize]
        assert_empty extra, "#{name}: #{kind} signatures without a method"
      end
    end
  end

  # rake test:rbs really checks: a call outside the signatures fails with
  # rbs's TypeError, which no test rescues by accident.
  def test_runtime_checks_are_live_under_rake_test_rbs
    skip "only under RAPID_THREAD_RBS=1 (rake test:rbs)" unless RBS_MODE
    assert_raises(RBS::Test::Tester::TypeError) { RapidThread::SizedQueue.new("2") }
    assert_raises(RBS::Test::Tester::TypeError) { RapidThread::Queue.new.pop(timeout: "1") }
    assert_equal 2, ill_typed { RapidThread::SizedQueue.new(2.9) }.max
  end
end
