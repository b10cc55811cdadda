# frozen_string_literal: true

require_relative "test_helper"
require_relative "../benchmark/cgroup"
require "etc"
require "fileutils"
require "json"
require "tmpdir"

# The CPUs the spin policy counts (ext/rapid_thread/src/spin.rs, header;
# the cgroup's quota: src/cgroup.rs). The parsing runs on cgroup layouts
# this test writes (RapidThread.__cgroup_quota_for_tests reads them as
# /proc/self/cgroup and /proc/self/mountinfo); a real cgroup v1 quota,
# where this process may make one, checks what a child does inside it.
class CpuBudgetTest < Minitest::Test
  include RapidThreadTestHelpers

  # Writes `files` (relative path => content) under a fresh directory,
  # with "@" in paths and contents standing for it, and yields it.
  def with_layout(files)
    Dir.mktmpdir("rapid_thread_cgroup") do |root|
      files.each do |path, content|
        full = File.join(root, path.sub("@/", ""))
        FileUtils.mkdir_p(File.dirname(full))
        File.binwrite(full, content.b.gsub("@", root))
      end
      yield root
    end
  end

  def quota(root)
    RapidThread.__cgroup_quota_for_tests(File.join(root, "proc_cgroup"), File.join(root, "mountinfo"))
  end

  def mount_line(id, root, point, fstype, options)
    "#{id} 23 0:#{id} #{root} #{point} rw,relatime shared:#{id} - #{fstype} cgroup rw,#{options}\n"
  end

  # cgroup v1 as this machine mounts it (cpu and cpuacct apart), the quota
  # on an ancestor of the process's group (a pod's limit over its
  # container's), the smallest on the way up winning.
  def test_v1_smallest_quota_on_the_way_up_with_usage_from_cpuacct
    files = {
      "proc_cgroup" => "4:memory:/elsewhere\n2:cpuacct:/pods/p1/c1\n1:cpu:/pods/p1/c1\n0::/\n",
      "mountinfo" => mount_line(31, "/", "@/fs", "tmpfs", "mode=755") +
                     mount_line(32, "/", "@/fs/cpu", "cgroup", "cpu") +
                     mount_line(33, "/", "@/fs/cpuacct", "cgroup", "cpuacct") +
                     mount_line(41, "/", "@/fs/unified", "cgroup2", "nsdelegate"),
      "fs/cpu/cpu.cfs_quota_us" => "-1\n", "fs/cpu/cpu.cfs_period_us" => "100000\n",
      "fs/cpu/pods/cpu.cfs_quota_us" => "400000\n", "fs/cpu/pods/cpu.cfs_period_us" => "100000\n",
      "fs/cpu/pods/p1/cpu.cfs_quota_us" => "150000\n", "fs/cpu/pods/p1/cpu.cfs_period_us" => "100000\n",
      "fs/cpu/pods/p1/cpu.stat" => "nr_periods 10\nnr_throttled 3\nthrottled_time 5000\n",
      "fs/cpu/pods/p1/c1/cpu.cfs_quota_us" => "-1\n", "fs/cpu/pods/p1/c1/cpu.cfs_period_us" => "100000\n",
      "fs/cpuacct/pods/p1/cpuacct.usage" => "123456789\n",
      "fs/unified/cpu.max" => "50000 100000\n" # v2 has no cpu controller here: v1's wins
    }
    with_layout(files) do |root|
      assert_equal({ version: 1, dir: "#{root}/fs/cpu/pods/p1", quota_us: 150_000, period_us: 100_000, cpus: 2,
                     usage_ns: 123_456_789, throttled_periods: 3 }, quota(root))
    end
  end

  # Docker's v1 layout: cpu and cpuacct mounted together, the container's
  # group as the mount's root, so the process's group is the mount point.
  def test_v1_container_root_and_comounted_cpuacct
    files = {
      "proc_cgroup" => "3:cpu,cpuacct:/docker/abc\n",
      "mountinfo" => mount_line(30, "/docker/abc", "@/fs/cpu,cpuacct", "cgroup", "cpu,cpuacct"),
      "fs/cpu,cpuacct/cpu.cfs_quota_us" => "50000\n", "fs/cpu,cpuacct/cpu.cfs_period_us" => "100000\n",
      "fs/cpu,cpuacct/cpu.stat" => "nr_periods 4\nnr_throttled 0\nthrottled_time 0\n",
      "fs/cpu,cpuacct/cpuacct.usage" => "42\n"
    }
    with_layout(files) do |root|
      assert_equal({ version: 1, dir: "#{root}/fs/cpu,cpuacct", quota_us: 50_000, period_us: 100_000, cpus: 1,
                     usage_ns: 42, throttled_periods: 0 }, quota(root))
    end
  end

  # v1 with the process in another cpuacct group than its cpu group: that
  # group's usage is not the quota's, so none is read.
  def test_v1_usage_only_from_the_same_group
    files = {
      "proc_cgroup" => "2:cpuacct:/\n1:cpu:/limited\n",
      "mountinfo" => mount_line(32, "/", "@/cpu", "cgroup", "cpu") + mount_line(33, "/", "@/cpuacct", "cgroup", "cpuacct"),
      "cpu/limited/cpu.cfs_quota_us" => "20000\n", "cpu/limited/cpu.cfs_period_us" => "10000\n",
      "cpu/limited/cpu.stat" => "nr_periods 1\nnr_throttled 1\n",
      "cpuacct/cpuacct.usage" => "999\n"
    }
    with_layout(files) do |root|
      q = quota(root)
      assert_equal [2, nil, 1], [q[:cpus], q[:usage_ns], q[:throttled_periods]]
    end
  end

  # cgroup v2: "max" is no limit; a nested group under a limited one; the
  # usage in microseconds (cpu.stat's usage_usec); a mount point with a
  # space, escaped in mountinfo.
  def test_v2_max_nested_groups_and_an_escaped_mount_point
    files = {
      "proc_cgroup" => "0::/user.slice/app\n",
      "mountinfo" => mount_line(41, "/", "@/cg\\040two", "cgroup2", "nsdelegate"),
      "cg two/cpu.max" => "max 100000\n",
      "cg two/user.slice/cpu.max" => "250000 100000\n",
      "cg two/user.slice/cpu.stat" => "usage_usec 7000\nuser_usec 5000\nsystem_usec 2000\nnr_periods 9\nnr_throttled 2\nthrottled_usec 10\n",
      "cg two/user.slice/app/cpu.max" => "max 100000\n"
    }
    with_layout(files) do |root|
      assert_equal({ version: 2, dir: "#{root}/cg two/user.slice", quota_us: 250_000, period_us: 100_000, cpus: 3,
                     usage_ns: 7_000_000, throttled_periods: 2 }, quota(root))
    end
  end

  def test_no_quota_missing_files_and_garbage_are_none
    v2 = { "proc_cgroup" => "0::/a\n", "mountinfo" => mount_line(41, "/", "@/cg", "cgroup2", "rw") }
    with_layout(v2.merge("cg/a/cpu.max" => "max 100000\n", "cg/cpu.max" => "max\n")) { |root| assert_nil quota(root) }
    with_layout(v2) { |root| assert_nil quota(root) } # no cpu.max at all (cpu controller not enabled)
    with_layout(v2.merge("cg/a/cpu.max" => "lots 100000\n")) { |root| assert_nil quota(root) }
    with_layout(v2.merge("cg/a/cpu.max" => "0 100000\n")) { |root| assert_nil quota(root) }
    with_layout("mountinfo" => v2["mountinfo"]) { |root| assert_nil quota(root) } # no /proc/self/cgroup
    with_layout("proc_cgroup" => v2["proc_cgroup"], "cg/a/cpu.max" => "1000 1000\n") { |root| assert_nil quota(root) } # no mountinfo
    v1 = { "proc_cgroup" => "1:cpu:/g\n", "mountinfo" => mount_line(32, "/", "@/cpu", "cgroup", "cpu") }
    with_layout(v1.merge("cpu/g/cpu.cfs_quota_us" => "50000\n")) { |root| assert_nil quota(root) } # no period
    with_layout(v1.merge("cpu/g/cpu.cfs_quota_us" => "-1\n", "cpu/g/cpu.cfs_period_us" => "100000\n")) do |root|
      assert_nil quota(root)
    end
  end

  # Of several mounts of the hierarchy, the one whose root holds the
  # process's group, the deepest, the last mounted when tied; none when no
  # mount shows the group, or its path climbs out (`..`); a mount point
  # that is not UTF-8 elsewhere in mountinfo hides nothing.
  def test_the_mount_that_shows_the_group_is_chosen
    files = { "a/cpu.max" => "50000 100000\n", "b/g/cpu.max" => "300000 100000\n",
              "c/cpu.max" => "100000 100000\n" }
    deepest = mount_line(40, "/other", "@/a", "cgroup2", "rw") + # its root does not hold /g
              mount_line(41, "/", "@/b", "cgroup2", "rw") +
              "42 23 0:42 / /mnt/\xff\xfe rw - ext4 /dev/x rw\n" +
              mount_line(43, "/g", "@/c", "cgroup2", "rw") # the deeper root: chosen
    with_layout(files.merge("proc_cgroup" => "0::/g\n", "mountinfo" => deepest)) do |root|
      assert_equal ["#{root}/c", 100_000], quota(root).values_at(:dir, :quota_us)
    end
    tied = mount_line(41, "/", "@/b", "cgroup2", "rw") + mount_line(44, "/", "@/a", "cgroup2", "rw")
    with_layout(files.merge("proc_cgroup" => "0::/g\n", "mountinfo" => tied)) do |root|
      assert_equal ["#{root}/a", 50_000], quota(root).values_at(:dir, :quota_us) # the last mounted
    end
    outside = mount_line(40, "/pod", "@/a", "cgroup2", "rw")
    with_layout(files.merge("proc_cgroup" => "0::/g\n", "mountinfo" => outside)) { |root| assert_nil quota(root) }
    climbing = mount_line(41, "/", "@/b/g", "cgroup2", "rw")
    with_layout(files.merge("proc_cgroup" => "0::/../..\n", "mountinfo" => climbing)) { |root| assert_nil quota(root) }
  end

  # What the policy counts here: the affinity mask, or fewer under a
  # quota; the build it is (the portable suite must run the portable
  # build: rake test:portable).
  def test_the_budget_reports_its_cpus_and_why
    b = RapidThread.cpu_budget
    assert_equal %i[cpus affinity_cpus quota_cpus cgroup cgroup_version free_cpus park_limit_ms reason portable], b.keys
    assert_equal ENV["RAPID_THREAD_PORTABLE"] == "1", b[:portable] # rake test:portable runs it
    assert_operator b[:cpus], :>=, 1
    assert_operator b[:cpus], :<=, b[:affinity_cpus]
    if b[:portable]
      assert_equal b[:affinity_cpus], b[:cpus]
      assert_match(/portable build/, b[:reason])
    elsif b[:quota_cpus]
      assert_equal [b[:affinity_cpus], b[:quota_cpus].ceil].min, b[:cpus]
      assert_match(/cgroup v#{b[:cgroup_version]} quota/, b[:reason])
    else
      assert_equal b[:affinity_cpus], b[:cpus]
      assert_match(/affinity mask/, b[:reason])
    end
    assert_equal 10.0, b[:park_limit_ms] unless b[:quota_cpus] # under a quota, its period
  end

  # --- A real quota (cgroup v1's cpu controller, as root) -------------------

  CHILD = File.expand_path("support/cpu_budget_child.rb", __dir__)
  FORK_CHILD = File.expand_path("support/cpu_budget_fork_child.rb", __dir__)
  FAN_OUT_CHILD = File.expand_path("support/fan_out_child.rb", __dir__)

  # Runs the child script in a group with `quota_us` per 100 ms (removed
  # afterwards: benchmark/cgroup.rb), beside `hogs` CPU-bound processes in
  # the same group; returns its report.
  def child_under_quota(quota_us, hogs: 0, script: CHILD)
    skip "the machine has one CPU: nothing to tell apart" if Etc.nprocessors < 2
    skip "the portable build reads no cgroup" if PORTABLE_BUILD
    skip "no CPU quota possible: #{CpuQuota.unavailable}" if CpuQuota.unavailable
    CpuQuota.with(quota_us) do |q|
      hog_pids = Array.new(hogs) { Process.spawn(*q.command(RbConfig.ruby, "-e", "loop { }")) }
      begin
        lib = File.expand_path("../lib", __dir__)
        out, err, status = Open3.capture3(*q.command(RbConfig.ruby, "-I#{lib}", script), stdin_data: "", timeout: 60)
        assert status.success?, "child failed (#{status.inspect}):\n#{err}\n#{out}"
        JSON.parse(out, symbolize_names: true).merge(cgroup: q.cpu_dir)
      ensure
        hog_pids.each { |pid| Process.kill(:KILL, pid) }
        hog_pids.each { |pid| Process.wait(pid) }
      end
    end
  end

  # A quota of at most one CPU is one CPU: no wait spins (active ones
  # park, as pinned), and nothing is lost. (On 3.3+ a list parks while its
  # hand-offs are prompt, and this child is not pinned: its wake-ups may
  # cross CPUs and run late, so there it need only have parked.)
  #
  # A park's limit is the quota's period (100 ms here), not 10 ms: a park
  # that ran out while the group was throttled queued its thread on a
  # second CPU (spin.rs, `park_limit`).
  def test_a_half_cpu_quota_counts_as_one_cpu
    r = child_under_quota(50_000)
    assert_equal [1, 0.5, 1, r[:cgroup]], r[:budget].values_at(:cpus, :quota_cpus, :cgroup_version, :cgroup)
    assert_equal 100.0, r[:budget][:park_limit_ms]
    assert_equal [(0...2000).sum, 0], [r[:sum], r[:stats][:spins]]
    assert_operator r[:stats][:parks], :>, RUBY_VERSION < "3.3" ? 1000 : 0 if WAITS_PARK
  end

  # A quota of 1.2 CPUs counts as 2 CPUs but never leaves the one and a
  # half free that a spinner and its waker need: no wait spins, where
  # without the quota an idle 2-CPU machine lets them.
  def test_a_quota_under_one_and_a_half_cpus_never_spins
    r = child_under_quota(120_000)
    assert_equal [2, 1.2], r[:budget].values_at(:cpus, :quota_cpus)
    assert_equal [(0...2000).sum, 0], [r[:sum], r[:stats][:spins]]
  end

  # CPU free is the quota less what the rest of the group uses (and none
  # in a window the group was throttled in): 1.6 CPUs beside a CPU-bound
  # process of the same group leave about 0.6 free (or none, throttled),
  # where the machine alone would show one CPU free of two.
  def test_cpu_free_is_measured_against_the_quota_with_the_groups_usage
    r = child_under_quota(160_000, hogs: 1)
    assert_equal [2, 1.6], r[:budget].values_at(:cpus, :quota_cpus)
    assert_operator r[:budget][:free_cpus], :<, 0.9
    assert_equal [(0...2000).sum, 0], [r[:sum], r[:stats][:spins]]
  end

  # In a quota of at most one CPU on a machine of several, a thread that
  # wakes many parked workers (a job each, each on its own queue) wakes
  # one per suspension and the rest in turn (sys/park.rs, relayed
  # wake-ups; Ruby 3.3+, not under M:N threads): woken together, they ran
  # on two CPUs at once and raced for the GVL. Four woken a suspension
  # made 2.9 context switches a job here, one 1.6-1.7, stock's Queue
  # 2.1-2.2 (Ruby 3.4.5). Elsewhere nothing is relayed: the jobs still
  # all come back.
  def test_a_fan_out_in_a_half_cpu_quota_wakes_its_workers_in_turn
    r = child_under_quota(50_000, script: FAN_OUT_CHILD)
    assert_equal 300 * (0...32).sum, r[:sum]
    return if RUBY_VERSION < "3.3" || ENV["RUBY_MN_THREADS"] == "1" # no deferred wake-ups

    assert_operator r[:stats][:relayed], :>, 0, r
    assert_operator r[:switches_per_job], :<, 2.3, r
  end

  # A forked child (puma's cluster workers) stays in its parent's group
  # and starts with the quota its parent found, not with none until its
  # next look (which is what it measures CPU free against: spin.rs,
  # `inherit_quota`). The child asks within the parent's refresh interval.
  def test_a_forked_child_keeps_the_quota_its_parent_found
    r = child_under_quota(50_000, script: FORK_CHILD)
    keys = %i[cpus quota_cpus cgroup cgroup_version park_limit_ms]
    assert_equal [1, 0.5, r[:cgroup], 1, 100.0], r[:budget].values_at(*keys)
    assert_equal r[:budget].values_at(*keys), r[:child].values_at(*keys)
  end

  # The benchmarks' group (benchmark/cgroup.rb): one of its directories
  # that cannot be removed (here: a group inside it, EBUSY) leaves the
  # others removed and is named in the error, so a run fails with its
  # cause and no group is left behind unsaid.
  def test_a_quota_group_that_cannot_be_removed_is_named
    skip "no CPU quota possible: #{CpuQuota.unavailable}" if CpuQuota.unavailable
    quota = nil
    error = assert_raises(Errno::EBUSY) do
      CpuQuota.with(50_000) do |q|
        quota = q
        Dir.mkdir(File.join(q.dirs.last, "inner"))
      end
    end
    blocked, *others = quota.dirs.reverse
    assert_includes error.message, "cgroup left behind"
    assert_includes error.message, blocked
    assert File.directory?(blocked)
    others.each { |d| refute File.directory?(d), d }
  ensure
    if quota
      Dir.rmdir(File.join(quota.dirs.last, "inner")) if File.directory?(File.join(quota.dirs.last, "inner"))
      quota.dirs.each { |d| Dir.rmdir(d) if File.directory?(d) }
    end
  end
end
