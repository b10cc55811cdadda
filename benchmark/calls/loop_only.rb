# The empty loop every per-call row runs around its call: the share of
# a row's time that is neither side's.
require_relative "../impl"

n = BenchImpl.n(3_000_000)
BenchProbe.start
i = 0
while i < n
  i += 1
end
