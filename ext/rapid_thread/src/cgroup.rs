//! The CPU quota of the process's cgroup, found as the JVM's container
//! support finds it (Go's container-aware GOMAXPROCS reads the same files,
//! the leaf group only): the process's group from /proc/self/cgroup, the
//! controller's mount from /proc/self/mountinfo, then the smallest quota
//! on the way from the group up to the mount's root (a pod's limit sits on
//! an ancestor of its container's group). cgroup v2 (`cpu.max`) and v1 (`cpu.cfs_quota_us` /
//! `cpu.cfs_period_us`, the cpu controller on v1 winning on a hybrid
//! mount). Also where the limiting group's usage and throttling are read
//! from (v2 `cpu.stat`; v1 `cpuacct.usage` and the cpu controller's
//! `cpu.stat`). How the spin policy uses them: crate::spin.
//!
//! Plain file reads: any error or unexpected content means "no quota".

use std::path::{Path, PathBuf};

/// A quota found: `quota_us` of CPU time per `period_us`, on `dir`.
#[derive(Clone, Debug, PartialEq)]
pub struct Quota {
    pub version: u8,
    /// The group whose quota binds (the smallest on the way up).
    pub dir: PathBuf,
    pub quota_us: u64,
    pub period_us: u64,
    /// `dir`'s CPU usage for v1, `cpuacct.usage` (nanoseconds); None
    /// where v1's cpuacct is not mounted, and for v2 (in `stat`).
    usage: Option<PathBuf>,
    /// `dir`'s `cpu.stat` (`nr_throttled`; v2's `usage_usec` too).
    stat: PathBuf,
}

/// What [`Quota::sample`] read (None: unreadable).
pub struct Sample {
    pub usage_ns: Option<u64>,
    pub throttled_periods: Option<u64>,
}

impl Quota {
    /// The quota in thousandths of a CPU.
    pub fn millicpus(&self) -> u64 {
        (self.quota_us.saturating_mul(1000)).div_ceil(self.period_us.max(1))
    }

    /// The quota in CPUs, rounded up (at least 1).
    pub fn cpus(&self) -> u64 {
        self.quota_us.div_ceil(self.period_us.max(1)).max(1)
    }

    /// The group's CPU usage (nanoseconds) and throttled periods (its
    /// quota used up), read now: v2 keeps both in `cpu.stat`, read once.
    pub fn sample(&self) -> Sample {
        let stat = std::fs::read_to_string(&self.stat).ok();
        let field = |key| stat.as_deref().and_then(|t| stat_field(t, key));
        let usage_ns = match &self.usage {
            _ if self.version == 2 => field("usage_usec").and_then(|us| us.checked_mul(1000)),
            Some(path) => std::fs::read_to_string(path)
                .ok()
                .and_then(|t| t.trim().parse().ok()),
            None => None,
        };
        Sample {
            usage_ns,
            throttled_periods: field("nr_throttled"),
        }
    }
}

/// The process's quota (None: none, or no cgroup to read).
pub fn own() -> Option<Quota> {
    find(
        Path::new("/proc/self/cgroup"),
        Path::new("/proc/self/mountinfo"),
    )
}

/// The quota of the group `proc_cgroup` names (a /proc/<pid>/cgroup), on
/// the mounts `mountinfo` lists (a /proc/<pid>/mountinfo).
pub fn find(proc_cgroup: &Path, mountinfo: &Path) -> Option<Quota> {
    // Bytes, not UTF-8: mountinfo escapes only whitespace and backslashes,
    // and one mount point with other bytes must not hide the rest.
    let groups = String::from_utf8_lossy(&std::fs::read(proc_cgroup).ok()?).into_owned();
    let mounts = String::from_utf8_lossy(&std::fs::read(mountinfo).ok()?).into_owned();
    let group_of = |want: &str| {
        groups.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (id, controllers, path) = (f.next()?, f.next()?, f.next()?);
            let hit = if want.is_empty() {
                id == "0" && controllers.is_empty()
            } else {
                controllers.split(',').any(|c| c == want)
            };
            hit.then_some(path)
        })
    };
    // The mount of the controller that shows the group `path`, and the
    // group's path under its mount point: of the mounts whose root holds
    // the group, the deepest root, the last mounted when several (the one
    // on top). None when no mount shows the group (the JVM's rule too).
    let mount_of = |fstype: &str, controller: &str, path: &str| {
        mounts
            .lines()
            .filter_map(Mount::parse)
            .filter(|m| m.fstype == fstype && (controller.is_empty() || m.has_option(controller)))
            .filter_map(|m| m.relative(path).map(|rel| (m, rel)))
            .fold(
                None,
                |best: Option<(Mount, String)>, (m, rel)| match &best {
                    Some((b, _)) if b.root.len() > m.root.len() => best,
                    _ => Some((m, rel)),
                },
            )
    };
    if let Some((m, rel)) = group_of("cpu").and_then(|p| mount_of("cgroup", "cpu", p)) {
        let acct = group_of("cpuacct")
            .and_then(|p| mount_of("cgroup", "cpuacct", p))
            .map(|(a, acct_rel)| (acct_rel, a.point));
        return smallest(&m.point, &rel, v1_quota).map(|(dir, (q, p))| {
            // The same group in the cpuacct hierarchy (the same directory
            // when the two are mounted together); none where the process
            // sits in another group there (that group's usage is not its own).
            let usage = acct
                .filter(|(acct_rel, _)| acct_rel.trim_end_matches('/') == rel.trim_end_matches('/'))
                .map(|(_, acct_point)| join(&acct_point, &dir).join("cpuacct.usage"));
            let dir = join(&m.point, &dir);
            Quota {
                version: 1,
                stat: dir.join("cpu.stat"),
                dir,
                quota_us: q,
                period_us: p,
                usage,
            }
        });
    }
    let (m, rel) = mount_of("cgroup2", "", group_of("")?)?;
    smallest(&m.point, &rel, v2_quota).map(|(dir, (q, p))| {
        let dir = join(&m.point, &dir);
        Quota {
            version: 2,
            usage: None,
            stat: dir.join("cpu.stat"),
            dir,
            quota_us: q,
            period_us: p,
        }
    })
}

/// The group, from `rel` up to the mount's root, with the smallest quota
/// (`read` gives a group's quota and period), as a path relative to the
/// mount point.
fn smallest(
    point: &Path,
    rel: &str,
    read: impl Fn(&Path) -> Option<(u64, u64)>,
) -> Option<(String, (u64, u64))> {
    let mut best: Option<(String, (u64, u64))> = None;
    let mut at = rel.trim_end_matches('/').to_string();
    loop {
        if let Some((q, p)) = read(&join(point, &at)) {
            // q / p < bq / bp, without division.
            let smaller = best.as_ref().is_none_or(|(_, (bq, bp))| {
                u128::from(q) * u128::from(*bp) < u128::from(*bq) * u128::from(p)
            });
            if smaller {
                best = Some((at.clone(), (q, p)));
            }
        }
        match at.rfind('/') {
            Some(i) => at.truncate(i),
            None => break,
        }
    }
    best
}

fn join(point: &Path, rel: &str) -> PathBuf {
    match rel.trim_matches('/') {
        "" => point.to_path_buf(),
        rel => point.join(rel),
    }
}

/// v1: `cpu.cfs_quota_us` (-1: none) per `cpu.cfs_period_us`.
fn v1_quota(dir: &Path) -> Option<(u64, u64)> {
    let quota: i64 = read_trimmed(&dir.join("cpu.cfs_quota_us"))?.parse().ok()?;
    let period: u64 = read_trimmed(&dir.join("cpu.cfs_period_us"))?.parse().ok()?;
    (quota > 0 && period > 0).then_some((quota as u64, period))
}

/// v2: `cpu.max`, "$MAX $PERIOD" ("max": none).
fn v2_quota(dir: &Path) -> Option<(u64, u64)> {
    let text = read_trimmed(&dir.join("cpu.max"))?;
    let mut f = text.split_ascii_whitespace();
    let quota: u64 = f.next()?.parse().ok()?; // "max" fails here
    let period: u64 = f.next().map_or(Some(100_000), |p| p.parse().ok())?;
    (quota > 0 && period > 0).then_some((quota, period))
}

fn read_trimmed(path: &Path) -> Option<String> {
    Some(std::fs::read_to_string(path).ok()?.trim().to_string())
}

/// The value of a "key value" line.
fn stat_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// One line of mountinfo: "id parent maj:min root point options
/// [optional...] - fstype source super-options".
struct Mount {
    root: String,
    point: PathBuf,
    fstype: String,
    super_options: String,
}

impl Mount {
    fn parse(line: &str) -> Option<Mount> {
        let (left, right) = line.split_once(" - ")?;
        let mut l = left.split(' ');
        let (root, point) = (l.nth(3)?, l.next()?);
        let mut r = right.split(' ');
        let (fstype, _source, super_options) = (r.next()?, r.next()?, r.next().unwrap_or(""));
        Some(Mount {
            root: unescape(root),
            point: PathBuf::from(unescape(point)),
            fstype: fstype.to_string(),
            super_options: super_options.to_string(),
        })
    }

    fn has_option(&self, o: &str) -> bool {
        self.super_options.split(',').any(|x| x == o)
    }

    /// `path` (the process's group) under this mount's point: the mount's
    /// root stripped. None for a group outside the root, or a path that
    /// climbs (`..`: a group outside the process's cgroup namespace).
    fn relative(&self, path: &str) -> Option<String> {
        if path.split('/').any(|c| c == "..") {
            return None;
        }
        if self.root == "/" {
            return Some(path.to_string());
        }
        match path.strip_prefix(self.root.as_str()) {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => Some(rest.to_string()),
            _ => None,
        }
    }
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let code = (b[i] == b'\\' && i + 3 < b.len())
            .then(|| std::str::from_utf8(&b[i + 1..i + 4]).ok())
            .flatten()
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match code {
            Some(c) => {
                out.push(c);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
