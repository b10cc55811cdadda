# frozen_string_literal: true

# A CPU quota for child processes, in a cgroup v1 group made for the block
# and removed after it (bench:apps's quota configs, test/cpu_budget_test.rb).
# Needs root and cgroup v1's cpu controller (`CpuQuota.unavailable` says why
# not, or nil). The group is made in the cpu hierarchy and, where it is
# mounted apart, in cpuacct's under the same name, so the group's usage is
# the children's own (ext/rapid_thread/src/cgroup.rs reads it there).
#
#   CpuQuota.with(50_000) do |q|           # 0.5 CPU: 50 ms per 100 ms
#     pid = Process.spawn(*q.command(RbConfig.ruby, "app.rb"))
#     ...
#     q.throttled # => { periods:, throttled_periods:, throttled_ms: }
#   end
class CpuQuota
  CPU = "/sys/fs/cgroup/cpu"
  CPUACCT = "/sys/fs/cgroup/cpuacct"
  PERIOD_US = 100_000

  # Why no quota can be made here (nil: it can).
  def self.unavailable
    return "not root" unless Process.uid.zero?
    return "no cgroup v1 cpu controller at #{CPU}" unless File.exist?(File.join(CPU, "cpu.cfs_quota_us"))
    return "#{CPU} is not writable (a read-only cgroupfs)" unless File.writable?(File.join(CPU, "cgroup.procs"))

    nil
  end

  # Yields a CpuQuota of `quota_us` per 100 ms; removes its group after
  # the block, once the processes in it have ended (waits up to `grace`
  # seconds for them, then kills them).
  def self.with(quota_us, grace: 10)
    why = unavailable
    raise ArgumentError, "no CPU quota possible: #{why}" if why

    q = new
    begin
      q.make(quota_us)
      yield q
    ensure
      q.remove(grace)
    end
  end

  # `with` for one benchmark run: a group that could not be made, read or
  # removed (EBUSY, ENOSPC) returns a failed run, `{ failed: "cgroup: ..." }`,
  # as a crashed run does, not an error that ends the whole table.
  def self.run(quota_us, grace: 10, &block)
    with(quota_us, grace: grace, &block)
  rescue SystemCallError => e
    { failed: "cgroup: #{e.class}: #{e.message}" }
  end

  attr_reader :dirs, :name

  # The group's directories: in the cpu hierarchy, and in cpuacct's where
  # it is mounted apart (on many systems both names are links to one
  # "cpu,cpuacct" mount: the same directory, made once).
  def initialize
    @name = "rapid_thread_#{Process.pid}_#{rand(1 << 30)}"
    @dirs = [CPU, CPUACCT].select { |m| File.directory?(m) }.map { |m| File.realpath(m) }.uniq
                          .map { |m| File.join(m, @name) }
  end

  def make(quota_us)
    @dirs.each { |d| Dir.mkdir(d) }
    File.write(File.join(cpu_dir, "cpu.cfs_period_us"), PERIOD_US.to_s)
    File.write(File.join(cpu_dir, "cpu.cfs_quota_us"), quota_us.to_s)
  end

  def cpu_dir
    @dirs.first
  end

  # argv that runs `cmd` inside the group: a shell joins it, then execs
  # the command (so its first instruction already runs under the quota).
  def command(*cmd)
    join = @dirs.map { |d| "echo $$ > #{File.join(d, 'cgroup.procs')}" }.join(" && ")
    ["sh", "-c", "#{join} && exec \"$@\"", "sh", *cmd]
  end

  # The group's cpu.stat: periods, throttled periods, throttled time (ms).
  def throttled
    stat = File.read(File.join(cpu_dir, "cpu.stat")).lines.to_h { |l| k, v = l.split; [k, v.to_i] }
    { periods: stat["nr_periods"], throttled_periods: stat["nr_throttled"],
      throttled_ms: stat["throttled_time"] / 1e6 }
  end

  # Removes every directory of the group that was made, once its
  # processes have ended (killed after `grace` seconds). A directory the
  # kernel still calls busy is tried again for up to BUSY_LIMIT seconds.
  # One that fails does not keep the others; the error raised after them
  # names each directory left behind.
  def remove(grace)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + grace
    errors = @dirs.select { |d| File.directory?(d) }.reverse.filter_map do |d|
      empty(d, deadline)
      rmdir(d)
      nil
    rescue SystemCallError => e
      [d, e]
    end
    return if errors.empty?

    raise errors.first[1].class, "cgroup left behind (rmdir it by hand): " \
                                 "#{errors.map { |d, e| "#{d}: #{e.message}" }.join('; ')}"
  end

  BUSY_LIMIT = 1

  private

  def empty(dir, deadline)
    until (pids = File.read(File.join(dir, "cgroup.procs")).split.map(&:to_i)).empty?
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        pids.each do |p|
          Process.kill("KILL", p)
        rescue Errno::ESRCH
          nil
        end
      end
      sleep 0.05
    end
  end

  def rmdir(dir)
    busy_until = Process.clock_gettime(Process::CLOCK_MONOTONIC) + BUSY_LIMIT
    begin
      Dir.rmdir(dir)
    rescue Errno::EBUSY
      raise if Process.clock_gettime(Process::CLOCK_MONOTONIC) > busy_until

      sleep 0.05
      retry
    end
  end
end
