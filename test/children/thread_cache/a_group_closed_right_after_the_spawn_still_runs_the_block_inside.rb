RapidThread.spawn {}.join # an idle worker could take the block
[:enclose, :freeze].each do |close|
  [->(&b) { Thread.new(&b) }, ->(&b) { RapidThread.spawn(&b) }].each do |make|
    g = ThreadGroup.new
    seen = Thread.new do # the spawner, in g; it cannot leave it after
      g.add(Thread.current)
      t = make.call { [Thread.current.group.equal?(g), g.list.include?(Thread.current)] }
      g.public_send(close) # before this thread gives up the GVL
      t.value
    end.value
    p [close, seen]
  end
end
