require_relative "prelude"
[nil, 16].each do |max|
  q = RQ.new(*max)
  total = n(50_000)
  takers = consumers(q, 2)
  producer = Ractor.new(q, total) do |qq, t|
    t.times { |i| qq << i }
    qq.close
    :done
  end
  producer.take
  all = takers.flat_map(&:take)
  p [all.size == total, all.sort == (0...total).to_a]
end
