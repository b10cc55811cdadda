# frozen_string_literal: true

# The benchmarks (benchmark/run.rb and benchmark/apps.rb; docs/benchmarks.md).
desc "The full benchmark suite (every vm_thread_* mirror + seed scenarios), 5 interleaved rounds, " \
     "unpinned and pinned, with the A/A control and concurrent-ruby as peer (NAMES=a,b to choose)"
task bench: :compile do
  ruby "benchmark/run.rb", "--peer", *ENV.fetch("NAMES", "").split(",")
end

namespace :bench do
  desc "The same suite with a tenth of the iterations and 3 rounds: the whole comparison in a few minutes"
  task quick: :compile do
    ruby "benchmark/run.rb", "--peer", "--rounds", "3", "--scale", "0.1", "--idle", "0,100,1000,5000",
         "--json", "benchmark/results/quick.json", *ENV.fetch("NAMES", "").split(",")
  end

  desc "A/A noise floor only: stock against stock, same runner (NAMES=a,b to choose)"
  task :control do
    ruby "benchmark/run.rb", "--control", "--json", "benchmark/results/control.json",
         *ENV.fetch("NAMES", "vm_thread_queue,micro_push_pop,handoff_pingpong").split(",")
  end

  desc "The real server: Debian's puma under wrk over loopback, stock against drop-in mode, with A/A, " \
       "5 interleaved rounds of three configs (CONFIGS=single_pinned,single16,cluster to choose); " \
       "requests/s, p50/p90/p99, CPU per request"
  task apps: :compile do
    minor = RUBY_VERSION[/\A\d+\.\d+/]
    sh "bin/setup-puma", RbConfig.ruby unless minor == "3.1" && File.exist?("/usr/bin/puma")
    ruby "benchmark/apps.rb", "--json", "benchmark/results/apps-#{minor}.json", *ENV.fetch("CONFIGS", "").split(",")
  end

  desc "The real server in a CPU quota: puma in a cgroup of 1 CPU and of 0.5 CPU (single 5 threads, " \
       "single 16 threads, cluster; wrk outside it), with throttled time; root only, skipped otherwise"
  task apps_quota: :compile do
    minor = RUBY_VERSION[/\A\d+\.\d+/]
    sh "bin/setup-puma", RbConfig.ruby unless minor == "3.1" && File.exist?("/usr/bin/puma")
    ruby "benchmark/apps.rb", "--json", "benchmark/results/apps-quota-#{minor}.json", "quota"
  end

  desc "The hand-off rows while a CPU-bound process pinned to each core runs beside them (stock against the gem)"
  task saturated: :compile do
    ruby "benchmark/run.rb", "--modes", "saturated", "--rounds", ENV.fetch("ROUNDS", "9"), "--scale", ENV.fetch("SCALE", "0.1"),
         "--idle", "none", "--json", "benchmark/results/saturated.json",
         *ENV.fetch("NAMES", "handoff_pingpong,vm_thread_condvar1,vm_thread_sized_queue,vm_thread_create_join").split(",")
  end

  desc "The hand-off rows in a CPU quota of 0.5 CPU, each run in a cgroup of its own (stock against the gem), " \
       "with each run's throttled time; root only, skipped otherwise"
  task quota: :compile do
    ruby "benchmark/run.rb", "--modes", "quota05", "--rounds", ENV.fetch("ROUNDS", "5"), "--scale", ENV.fetch("SCALE", "0.3"),
         "--idle", "none", "--json", "benchmark/results/quota-#{RUBY_VERSION[/\A\d+\.\d+/]}.json",
         *ENV.fetch("NAMES", "vm_thread_condvar1,vm_thread_condvar2,vm_thread_queue,vm_thread_sized_queue," \
                             "vm_thread_sized_queue2,vm_thread_sized_queue3,vm_thread_sized_queue4," \
                             "handoff_pingpong,vm_thread_create_join,select_handoff").split(",")
  end

  desc "Per call, nobody waiting: Queue/SizedQueue/ConditionVariable.new, push+pop, signal, broadcast, size, " \
       "empty?, num_waiting, close, closed?, wait(m, 0); 3M calls each, stock against the gem, with A/A"
  task calls: :compile do
    ruby "benchmark/run.rb", "--suite", "calls", "--idle", "none", "--rounds", ENV.fetch("ROUNDS", "5"),
         "--json", "benchmark/results/calls-#{RUBY_VERSION[/\A\d+\.\d+/]}.json", *ENV.fetch("NAMES", "").split(",")
  end

  desc "The libraries Ruby apps reach Queue and ConditionVariable through (concurrent-ruby, connection_pool, " \
       "ActiveRecord, Timeout, minitest), stock against drop-in mode, with A/A and each row's floor"
  task libs: :compile do
    names = ENV.fetch("NAMES", "").split(",")
    # Debian's sqlite3 extension is built for its Ruby 3.1 only.
    if names.empty? && !RUBY_VERSION.start_with?("3.1.")
      names = Dir["benchmark/libs/*.rb"].map { |f| File.basename(f, ".rb") } - %w[lib_impl activerecord]
    end
    ruby "benchmark/run.rb", "--suite", "libs", "--idle", "none", "--rounds", ENV.fetch("ROUNDS", "5"),
         "--json", "benchmark/results/libs-#{RUBY_VERSION[/\A\d+\.\d+/]}.json", *names
  end

  desc "RapidThread::Executor against concurrent-ruby's own executors on the same concurrent-ruby programs " \
       "(futures, zip, then chains, posts on a latch, :caller_runs), alone and in drop-in mode, with A/A and floors"
  task executor: :compile do
    ruby "benchmark/run.rb", "--suite", "executor", "--idle", "none", "--rounds", ENV.fetch("ROUNDS", "5"),
         "--json", "benchmark/results/executor-#{RUBY_VERSION[/\A\d+\.\d+/]}.json", *ENV.fetch("NAMES", "").split(",")
  end

  desc "Every benchmark once per implementation with tiny N: checks they run, not their speed"
  task smoke: :compile do
    ruby "benchmark/run.rb", "--rounds", "1", "--scale", "0.001", "--modes", "unpinned", "--peer",
         "--idle", "0,10", "--json", "tmp/bench-smoke.json"
    %w[calls libs executor].each do |suite|
      ruby "benchmark/run.rb", "--suite", suite, "--rounds", "1", "--scale", "0.001", "--modes", "unpinned",
           "--idle", "none", "--json", "tmp/bench-smoke-#{suite}.json"
    end
    # A hand-off row in a quota (run.rb's quota modes) and one quota
    # config, for benchmark/cgroup.rb (both skipped where no cgroup can be
    # made); the other configs run in the suite's fairness test.
    ruby "benchmark/run.rb", "--rounds", "1", "--scale", "0.001", "--modes", "quota05", "--idle", "none",
         "--json", "tmp/bench-smoke-quota.json", "handoff_pingpong"
    ruby "benchmark/apps.rb", "--rounds", "1", "--duration", "1", "--warmup", "0", "--sides", "stock,gem",
         "--json", "tmp/bench-smoke-apps.json", "quota05_single"
  end
end

