# Mirrors ruby 3.1.2 benchmark/vm_thread_pass.rb: 8 threads passing the GVL
# 400k times in all.
require_relative "impl"
# Plenty Thread.pass
# A performance may depend on GVL implementation.

tmax = (ARGV.shift || 8).to_i
lmax = BenchImpl.n(400_000) / tmax

(1..tmax).map{
  BenchImpl.thread{
    lmax.times{
      Thread.pass
    }
  }
}.each{|t| t.join}


