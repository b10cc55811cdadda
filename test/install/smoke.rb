# frozen_string_literal: true

# Run from / against an installed gem (rake test:install): the gem loads
# from GEM_HOME, not from the repository, and its classes work. ARGV[0]: a
# piece of the path the extension must have been loaded from.
require "timeout"
require "rapid_thread"

expect = ARGV.fetch(0)
so = $LOADED_FEATURES.grep(%r{rapid_thread\.so\z})
abort "extension loaded from #{so.inspect}, expected a path containing #{expect}" unless so.size == 1 && so[0].include?(expect)
abort "loaded from the repository's lib/: #{so[0]}" if so[0].start_with?(File.expand_path("../../lib", __dir__))
gem_home = ENV.fetch("GEM_HOME")
abort "not loaded from GEM_HOME (#{gem_home}): #{so[0]}" unless so[0].start_with?(gem_home)

Timeout.timeout(30) do
  q = RapidThread::Queue.new
  consumer = Thread.new { Array.new(3) { q.pop } }
  [1, 2, 3].each { |i| q << i }
  raise "queue" unless consumer.value == [1, 2, 3]
  raise "pop(timeout:)" unless q.pop(timeout: 0.01).nil?

  sq = RapidThread::SizedQueue.new(1)
  sq << :a
  raise "push(timeout:)" unless sq.push(:b, timeout: 0.01).nil?

  m = Thread::Mutex.new
  cv = RapidThread::ConditionVariable.new
  ready = false
  waiter = Thread.new { m.synchronize { cv.wait(m) until ready; :woken } }
  Thread.pass until waiter.stop?
  m.synchronize { ready = true; cv.signal }
  raise "condition variable" unless waiter.value == :woken

  raise "spawn" unless Array.new(20) { |i| Thread.spawn(i) { |x| x * 2 } }.map(&:value) == Array.new(20) { |i| i * 2 }

  require "rapid_thread/replace"
  raise "replace" unless Thread::Queue.equal?(RapidThread::Queue)
end
puts "smoke ok: rapid_thread #{RapidThread::VERSION} on ruby #{RUBY_VERSION} from #{so[0]}"
