//! What the extension asks of the operating system beyond Ruby and std:
//! sleeping on a word (futex), the CPU a thread runs on, its affinity,
//! clocks and the machine's load (the cgroup's CPU quota, plain file
//! reads, is crate::cgroup's, asked on Linux only).
//!
//! Two implementations of one interface. On Linux: futexes,
//! `sched_getcpu`, `sched_getaffinity` and /proc.
//! Elsewhere, and on Linux in the portable build (cargo feature
//! `portable`, `RAPID_THREAD_PORTABLE=1` at compile time, which CI tests),
//! only POSIX and std: a word's sleep is a condition variable per address
//! bucket, the CPU and the machine's load are unknown, the CPUs allowed
//! are std's `available_parallelism`, and there is no parking
//! (`PARKING`). The spin policy then decides on the CPU count alone, and
//! its late-spin rule (crate::spin).

use std::sync::atomic::AtomicU32;
use std::time::Duration;

pub use imp::*;

/// Whether this is the Linux implementation (false: the portable one).
pub const LINUX: bool = cfg!(all(target_os = "linux", not(feature = "portable")));

/// Whether a wait may park on its futex word (`sys::park`): parking was
/// measured with futexes only (docs/design-details.md, "Parking"); the
/// portable word sleep takes a lock and wakes a whole bucket.
pub const PARKING: bool = LINUX;

/// Makes the statics whose first use could otherwise race a fork (a
/// forked child would wait for ever on a OnceLock that another thread of
/// the parent was filling): called when the extension loads.
pub fn init_statics() {
    online_cpus();
    imp::init();
}

/// How many CPUs the machine has online (read once).
pub fn online_cpus() -> usize {
    static ONLINE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: a plain query.
    *ONLINE.get_or_init(|| unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize)
}

/// CPU time this process has used, in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The process-wide monotonic clock that fits an atomic: CLOCK_MONOTONIC
/// in nanoseconds, read directly (an `Instant` since a OnceLock'd epoch
/// cost a wake-up more in arithmetic than the read), never 0, so that 0
/// can stand for "never".
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC).max(1)
}

/// `clock_gettime(clock)` in nanoseconds (0 if the clock cannot be read).
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is on our stack; the call only writes it, and leaves it
    // zero for a clock the system lacks.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
mod imp {
    use super::*;

    /// The start of a file, as much as `buf` holds (the lines wanted come
    /// first); None where it cannot be read.
    fn read_start<'a>(path: &str, buf: &'a mut [u8]) -> Option<&'a str> {
        use std::io::Read;
        let n = std::fs::File::open(path)
            .and_then(|mut f| f.read(buf))
            .ok()?;
        std::str::from_utf8(&buf[..n]).ok()
    }

    /// Sleeps while `word` holds `expected`, for at most `timeout` (None:
    /// no limit). Returns early on a wake-up, a signal (EINTR), or
    /// spuriously: callers re-check. True if it slept until `timeout`.
    pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        });
        let ts_ptr = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `word` and `ts` outlive the call; FUTEX_WAIT only reads
        // them (EINTR, EAGAIN and ETIMEDOUT are all "re-check").
        let r = unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                expected,
                ts_ptr,
            )
        };
        r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT)
    }

    /// Wakes up to `n` threads sleeping on `word`. A plain system call:
    /// safe inside a signal handler, and while a `GvlCell` is borrowed.
    pub fn futex_wake(word: &AtomicU32, n: i32) {
        // SAFETY: FUTEX_WAKE uses the address only as a key; it never
        // reads or writes the memory.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                n,
            );
        }
    }

    /// Wakes one thread sleeping on the futex word at `addr`, which may be
    /// gone: a private FUTEX_WAKE uses the address only as a key, and
    /// futex(2) has every waiter take a wake-up as possibly spurious, from
    /// code that used the same address before (sys::park, deferred
    /// wake-ups).
    pub fn futex_wake_key(addr: usize) {
        // SAFETY: the kernel neither reads nor writes the address.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                addr as *const u32,
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                1,
            );
        }
    }

    /// While alive, the calling thread does not preempt its waker when it
    /// is woken (sys::park): its policy is SCHED_BATCH, which Linux's fair
    /// scheduler never lets preempt on wake-up ("driven by the tick"), and
    /// back to SCHED_OTHER on drop. Only a thread whose policy is
    /// SCHED_OTHER is changed (a real-time or idle one is left alone), and
    /// nothing is changed where the calls fail (a seccomp filter). System
    /// calls, not libc's wrappers: musl's are stubs that fail. A
    /// policy that another thread gives this one while it is parked
    /// (`chrt -p`, 10 ms at most) is overwritten by the restore.
    pub struct WakeupPreemptionOff(bool);

    impl WakeupPreemptionOff {
        pub fn new() -> WakeupPreemptionOff {
            // SAFETY: a plain query of the calling thread (0).
            let policy = unsafe { libc::syscall(libc::SYS_sched_getscheduler, 0) };
            WakeupPreemptionOff(
                policy == libc::SCHED_OTHER as libc::c_long && set_policy(libc::SCHED_BATCH),
            )
        }
    }

    impl Drop for WakeupPreemptionOff {
        fn drop(&mut self) {
            // Back to the policy `new` found.
            if self.0 {
                let restored = set_policy(libc::SCHED_OTHER);
                debug_assert!(restored, "could not restore SCHED_OTHER");
            }
        }
    }

    /// Sets the calling thread's policy (priority 0; the nice value is
    /// kept); whether it took.
    fn set_policy(policy: libc::c_int) -> bool {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: the calling thread (0); the kernel only reads `param`,
        // on our stack.
        unsafe {
            libc::syscall(
                libc::SYS_sched_setscheduler,
                0,
                policy,
                &param as *const libc::sched_param,
            ) == 0
        }
    }

    /// Nothing to make ahead (see the portable one).
    pub(super) fn init() {}

    /// The CPU the calling thread runs on now (-1 if unknown).
    pub fn current_cpu() -> i32 {
        // SAFETY: a plain query (glibc reads it from rseq or the vDSO).
        unsafe { libc::sched_getcpu() }
    }

    /// How many CPUs this thread may run on (its affinity mask). When the
    /// mask cannot be read (a kernel with more CPUs than `cpu_set_t`
    /// holds), the online CPU count: the machine surely has more than one.
    pub fn cpus_allowed() -> usize {
        // SAFETY: `set` is a plain bit mask on our stack, its size passed.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                return online_cpus();
            }
            libc::CPU_COUNT(&set).max(1) as usize
        }
    }

    /// Nanoseconds on the kernel's coarse monotonic clock (the last tick:
    /// a few milliseconds' resolution, for a fraction of a precise read's
    /// cost in a VM). Its own time base: compare only with itself.
    pub fn coarse_monotonic_ns() -> u64 {
        clock_ns(libc::CLOCK_MONOTONIC_COARSE)
    }

    /// CPU time the whole machine has spent busy (all CPUs: user, nice,
    /// system, irq, softirq, steal), from /proc/stat's first line, in
    /// nanoseconds; None where it cannot be read. Counted in clock ticks
    /// (10 ms each, usually): compare over windows of many ticks.
    pub fn machine_busy_ns() -> Option<u64> {
        let mut buf = [0u8; 256];
        let line = read_start("/proc/stat", &mut buf)?.lines().next()?;
        let mut fields = line.split_ascii_whitespace();
        if fields.next()? != "cpu" {
            return None;
        }
        let ticks: Vec<u64> = fields
            .take(8)
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        let [user, nice, system, _idle, _iowait, irq, softirq, steal] = ticks[..] else {
            return None;
        };
        // SAFETY: a plain query.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        (user + nice + system + irq + softirq + steal).checked_mul(1_000_000_000 / hz)
    }

    /// How many tasks of the machine are runnable right now, the caller
    /// included (/proc/loadavg's "running/total"); None where unreadable.
    pub fn runnable_tasks() -> Option<u64> {
        let mut buf = [0u8; 128];
        read_start("/proc/loadavg", &mut buf)?
            .split_ascii_whitespace()
            .nth(3)?
            .split('/')
            .next()?
            .parse()
            .ok()
    }
}

#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
mod imp {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::{Condvar, Mutex, OnceLock};

    use super::super::ForkCell;

    /// Sleepers are grouped by their word's address into this many
    /// buckets, each a lock and a condition variable (as parking_lot's
    /// table, without its per-thread queues).
    const BUCKETS: usize = 64;

    /// The longest one sleep lasts. A condition variable's wait does not
    /// end on a signal, and Ruby interrupts a thread blocked in
    /// `sys::without_gvl` (RactorQueue) only with one: the sleeper looks
    /// at its interrupts at least this often.
    const SLICE: Duration = Duration::from_millis(10);

    struct Bucket {
        lock: Mutex<()>,
        cond: Condvar,
    }

    const fn bucket_new() -> Bucket {
        Bucket {
            lock: Mutex::new(()),
            cond: Condvar::new(),
        }
    }

    /// The buckets, fresh in a forked child: a thread of the parent (in
    /// another Ractor, or without the GVL) may have held a bucket's lock
    /// in the fork, for ever in the child.
    static TABLE: OnceLock<ForkCell<[Bucket; BUCKETS]>> = OnceLock::new();

    pub(super) fn init() {
        table();
    }

    fn table() -> &'static [Bucket; BUCKETS] {
        TABLE
            .get_or_init(|| {
                ForkCell::new([const { bucket_new() }; BUCKETS], |_| {
                    [const { bucket_new() }; BUCKETS]
                })
            })
            .get()
    }

    fn bucket(word: &AtomicU32) -> &'static Bucket {
        &table()[(word.as_ptr() as usize >> 2) % BUCKETS]
    }

    /// As Linux's: sleeps while `word` holds `expected`, for at most
    /// `timeout` and at most [`SLICE`]; may return early or spuriously.
    pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
        let b = bucket(word);
        let guard = b.lock.lock().unwrap_or_else(|e| e.into_inner());
        // Looked at under the bucket's lock, which a waker takes after it
        // changed the word: a change before the look is seen, one after
        // it comes with a notify this wait receives.
        if word.load(Ordering::SeqCst) != expected {
            return false;
        }
        let limit = timeout.map_or(SLICE, |t| t.min(SLICE));
        let (guard, r) = b
            .cond
            .wait_timeout(guard, limit)
            .unwrap_or_else(|e| e.into_inner());
        drop(guard);
        r.timed_out() && timeout.is_some_and(|t| t <= SLICE)
    }

    /// Wakes the threads sleeping on `word` (every sleeper of its bucket:
    /// they re-check). Takes a lock: not for a signal handler.
    pub fn futex_wake(word: &AtomicU32, _n: i32) {
        let b = bucket(word);
        drop(b.lock.lock().unwrap_or_else(|e| e.into_inner()));
        b.cond.notify_all();
    }

    /// Nothing here: no thread parks (`PARKING`), so none defers a
    /// wake-up.
    pub fn futex_wake_key(_addr: usize) {}

    /// Nothing here (no parking, which is what it serves on Linux).
    pub struct WakeupPreemptionOff;

    impl WakeupPreemptionOff {
        pub fn new() -> WakeupPreemptionOff {
            WakeupPreemptionOff
        }
    }

    /// Unknown here.
    pub fn current_cpu() -> i32 {
        -1
    }

    /// What std finds this process may use (the affinity mask where the
    /// system has one, else the online CPUs).
    pub fn cpus_allowed() -> usize {
        std::thread::available_parallelism().map_or_else(|_| online_cpus(), |n| n.get())
    }

    /// The precise monotonic clock (no coarse one everywhere).
    pub fn coarse_monotonic_ns() -> u64 {
        clock_ns(libc::CLOCK_MONOTONIC)
    }

    /// Unknown here.
    pub fn machine_busy_ns() -> Option<u64> {
        None
    }

    /// Unknown here.
    pub fn runnable_tasks() -> Option<u64> {
        None
    }
}

/// Names the current native thread (what `top -H`, `ps -L`, perf and gdb
/// show), cut to the 15 bytes Linux keeps, as Ruby cuts a thread's name;
/// Linux only (other systems' calls differ), in the portable build too.
pub fn name_native_thread(name: &str) {
    #[cfg(target_os = "linux")]
    {
        let mut buf = [0u8; 16];
        let n = name.len().min(15);
        buf[..n].copy_from_slice(&name.as_bytes()[..n]);
        // SAFETY: `buf` is NUL-terminated within 16 bytes (the limit);
        // naming the calling thread cannot fail then, and changes nothing
        // Ruby reads.
        unsafe {
            libc::pthread_setname_np(libc::pthread_self(), buf.as_ptr().cast());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = name;
}

/// The calling native thread's `errno`.
fn errno_slot() -> *mut libc::c_int {
    // SAFETY: each returns the calling thread's errno slot, valid for the
    // thread's life.
    unsafe {
        #[cfg(any(target_os = "linux", target_os = "emscripten"))]
        return libc::__errno_location();
        #[cfg(any(
            target_os = "macos",
            target_os = "ios",
            target_os = "freebsd",
            target_os = "dragonfly"
        ))]
        return libc::__error();
        #[cfg(any(target_os = "openbsd", target_os = "netbsd", target_os = "android"))]
        return libc::__errno();
    }
}

/// Runs `f` and gives the native thread back the `errno` it had before:
/// what runs without the GVL must leave none behind (see `call_without_gvl`).
pub fn keeping_errno<R>(f: impl FnOnce() -> R) -> R {
    let slot = errno_slot();
    // SAFETY: the calling thread's own errno, read and written by it alone.
    let saved = unsafe { *slot };
    let r = f();
    // SAFETY: as above.
    unsafe { *slot = saved };
    r
}
