# frozen_string_literal: true

# Loaded (through RUBYOPT, test_helper.rb) into every child Ruby the suite
# starts on Ruby 3.3 or 3.4 with RUBY_MN_THREADS=1, stock oracle and gem
# alike.
#
# Ruby 3.3.8's and 3.4.5's M:N teardown sometimes dies of SIGSEGV in
# ruby_vm_destruct, after the program has ended (docs/design-details.md,
# "Ruby 3.3 M:N exit crash"; stock crashes the same way). The exit sequence is: at_exit
# handlers, then every other thread is killed (their ensure clauses run),
# then the error message of an uncaught exception is printed, then
# finalizers run, then the VM is destroyed. This ends the process from the
# last of those finalizers, with the status Ruby would return: everything a
# test can observe has happened; only the VM's destruction is skipped.
#
# Registered first, this at_exit handler runs last. It sees the exception
# the program ended with (a later `exit` inside another at_exit handler is
# not seen: no child of the suite does that). A SignalException is left to
# Ruby, which re-raises the signal after the teardown.
module RapidThreadMNExit
  # The status to end with, once the at_exit handler below has chosen it.
  STATUS = []
  # Kept reachable, so that no GC during the teardown runs the finalizer
  # early.
  ANCHOR = Object.new
  FINAL = proc do
    next if STATUS.empty?

    [STDOUT, STDERR, $stdout, $stderr].each { |io| io.flush rescue nil } # rubocop:disable Style/RescueModifier, Style/GlobalStdStream
    exit!(STATUS.first)
  end
  # This finalizer must run after every other one left at exit. Ruby 3.3
  # runs them newest first: defined now, at load time, it is the oldest.
  # Ruby 3.4 runs them oldest first (gc/default.c walks the finalizer table
  # in insertion order): there it is defined by the at_exit handler below,
  # after every other at_exit handler has run, so it is the newest (only a
  # finalizer defined later still, by a killed thread's ensure clause or by
  # another finalizer, would run after it: no child of the suite does that).
  NEWEST_FIRST = RUBY_VERSION < "3.4"
  ObjectSpace.define_finalizer(ANCHOR, FINAL) if NEWEST_FIRST
end

at_exit do
  status = case (error = $!) # rubocop:disable Style/SpecialGlobalVars
           when nil then 0
           when SystemExit then error.status
           when SignalException then nil
           else 1
           end
  if status
    RapidThreadMNExit::STATUS << status
    ObjectSpace.define_finalizer(RapidThreadMNExit::ANCHOR, RapidThreadMNExit::FINAL) unless RapidThreadMNExit::NEWEST_FIRST
  end
end
