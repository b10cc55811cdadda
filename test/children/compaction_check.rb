# test_helper.rb's compaction_check before Ruby 3.3, in a fresh process:
# prints the value of ARGV[0], a program of test/support/compaction.
require_relative "../support/compact_everything"
p eval(File.read(ARGV[0]), binding, ARGV[0]) # rubocop:disable Security/Eval
