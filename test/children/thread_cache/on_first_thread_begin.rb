# Prelude of thread_cache_test.rb's :thread_begin children:
# `on_first_thread_begin(:worker) { ... }` (or `:monitor`) runs the block
# once, in the first new worker (or monitor) thread, in a :thread_begin
# hook: before that thread's body runs. Returns the enabled hook.
def on_first_thread_begin(kind, &action)
  fired = false
  TracePoint.new(:thread_begin) do
    next if fired || (Thread.current.name == "rapid_thread monitor") != (kind == :monitor)

    fired = true
    action.call
  end.tap(&:enable)
end
