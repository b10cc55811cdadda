# frozen_string_literal: true

# The Rubies built beside Debian 12's 3.1.2 (bin/setup --ruby SERIES, by
# bin/setup-ruby), and the names that go with each. One table, read by the
# Rakefile (test:rubyXY tasks), rakelib/package.rake (the platform gem's
# builds) and bin/setup (which prints the task to run), so that the names
# cannot drift apart. Plain Ruby, not a .rake file: bin/setup loads it with
# `ruby -r` before any rake task exists.
module RapidThreadRubies
  # Oldest first. Each also has M:N threads (RUBY_MN_THREADS=1, 3.3+).
  BUILT = %w[3.3 3.4].freeze

  module_function

  # "3.4" -> "34"
  def id(series) = series.delete(".")

  # The suite on that Ruby, and with M:N threads.
  def test_task(series) = "test:ruby#{id(series)}"
  def mn_task(series) = "#{test_task(series)}_mn"

  # RUBY34=path/to/ruby chooses another build of 3.4.
  def env_var(series) = "RUBY#{id(series)}"

  # Its ruby: $RUBY34, else bin/setup-ruby's prefix for it.
  def ruby(series)
    ENV.fetch(env_var(series)) do
      root = ENV.fetch("RAPID_THREAD_RUBIES") { File.expand_path("~/.cache/rapid_thread/rubies") }
      File.join(root, "ruby-#{series}", "bin", "ruby")
    end
  end
end
