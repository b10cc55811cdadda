require_relative "prelude"
q = RQ.new(4)
total = 100
takers = consumers(q, 3)
producers = Array.new(2) do |p|
  Ractor.new(q, p, total) do |qq, pp, t|
    t.times { |i| qq << "p#{pp}-#{i}" }
    :done
  end
end
producers.each(&:take)
q.close
all = takers.flat_map(&:take)
expected = (0..1).flat_map { |p| Array.new(total) { |i| "p#{p}-#{i}" } }
p all.sort == expected.sort, all.all?(&:frozen?)
