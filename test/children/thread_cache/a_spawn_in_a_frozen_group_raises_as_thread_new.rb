RapidThread.spawn {}.join # an idle worker could take the block
g = ThreadGroup.new
g.add(Thread.current)
g.freeze
def error_of = (yield; :no_error) rescue [$!.class, $!.message]
p(error_of { Thread.new {} })
p(error_of { RapidThread.spawn {} })
p RapidThread.cache_stats[:pending]
