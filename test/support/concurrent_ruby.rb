# frozen_string_literal: true

# concurrent-ruby 1.1.6, Debian's ruby-concurrent (bin/setup installs it):
# pure Ruby, so the Rubies built from source (3.3, 3.4) load the same copy
# as Debian's 3.1 from its directory.
CONCURRENT_RUBY_DIR = "/usr/share/rubygems-integration/all/gems/concurrent-ruby-1.1.6/lib/concurrent-ruby"
$LOAD_PATH.unshift(CONCURRENT_RUBY_DIR) if File.directory?(CONCURRENT_RUBY_DIR) && !$LOAD_PATH.include?(CONCURRENT_RUBY_DIR)
require "concurrent"
raise "concurrent-ruby 1.1.6 expected, found #{Concurrent::VERSION}" unless Concurrent::VERSION == "1.1.6"
