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
  # early. Ruby runs the finalizers left at exit newest first: defined
  # now, this one runs after every finalizer the program defines.
  ANCHOR = Object.new
  ObjectSpace.define_finalizer(ANCHOR, proc {
    next if STATUS.empty?

    [STDOUT, STDERR, $stdout, $stderr].each { |io| io.flush rescue nil } # rubocop:disable Style/RescueModifier, Style/GlobalStdStream
    exit!(STATUS.first)
  })
end

at_exit do
  status = case (error = $!) # rubocop:disable Style/SpecialGlobalVars
           when nil then 0
           when SystemExit then error.status
           when SignalException then nil
           else 1
           end
  RapidThreadMNExit::STATUS << status if status
end
