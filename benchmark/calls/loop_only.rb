# Per call: nothing: the empty loop every row runs around its call, the
# share of a row's time that is neither side's.
require_relative "call_impl"

BenchCalls.run("nil")
