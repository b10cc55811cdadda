# frozen_string_literal: true

require_relative "../impl"

# One per-call row: `call` (Ruby source) run `count` times (scaled) in a
# `while` loop compiled from a string, so that an iteration is the call and
# the loop alone (a block would add a yield to every call). `setup` runs
# first, untimed, and its locals are the call's; `teardown` after the loop.
module BenchCalls
  def self.run(call, setup: "", teardown: "", count: 3_000_000)
    eval(<<~RUBY, binding, __FILE__, __LINE__ + 1) # rubocop:disable Security/Eval
      #{setup}
      BenchProbe.start
      i = 0
      while i < #{BenchImpl.n(count)}
        #{call}
        i += 1
      end
      #{teardown}
    RUBY
  end
end
