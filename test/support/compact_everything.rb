# frozen_string_literal: true

# GC.verify_compaction_references' "move everything" options: Ruby 3.2
# renamed double_heap to expand_heap (3.3 warns about the old name). Used by
# test_helper.rb's compaction_check, in this process or in its child
# (children/compaction_check.rb).
COMPACT_EVERYTHING = (RUBY_VERSION >= "3.2" ? { expand_heap: true } : { double_heap: true }).merge(toward: :empty).freeze
