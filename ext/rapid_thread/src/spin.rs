//! The spin policy: whether a wait spins before it sleeps, and for how
//! long. Its one home: Queue, SizedQueue, ConditionVariable, select and
//! the thread cache ask it through `wait::block`, Task#alive? and
//! RactorQueue directly (docs/design-details.md, "Fair under load").
//!
//! A spin is a bet that a CPU is idle and the wake-up near. The spinner
//! yields its CPU between checks (`sched_yield`). On an idle CPU the yield
//! returns at once. On a busy one it puts the spinner behind every other
//! runnable thread of that CPU, where a sleeping waiter, once woken, would
//! be run first: the scheduler favours a thread that slept. A waiter
//! spinning on a busy CPU therefore notices its wake-up late, and whoever
//! waits for it falls behind (puma's accept loop, waiting on its pool's
//! ConditionVariable, accepted fewer connections, and reconnecting clients
//! queued in the listen backlog).
//!
//! The CPUs a process has are its affinity mask's, or fewer where its
//! cgroup has a CPU quota (crate::cgroup; rounded up, read again every
//! second: a container's limits change at run time). A quota of at most
//! one CPU is one CPU. With one CPU to run on (pinned, a one-CPU machine
//! or container), a wait never spins: the waker cannot run beside it,
//! every yield is that lottery, and in a real server it loses (Go's
//! scheduler spins only while a CPU is idle; Linux's mutexes spin only
//! while the owner runs on another CPU).
//!
//! With more, a wait spins only while the machine has a CPU to spare for
//! the spinner and its waker (Go's scheduler spins only while a P is idle):
//! other processes' CPU use over the last 100 ms (/proc/stat, less this
//! process's own CPU time) must leave one and a half CPUs free. Under a
//! quota, "other processes" are the rest of the cgroup (its own usage, not
//! the host's /proc/stat) and the CPUs are the quota's; a window in which
//! the cgroup was throttled (its quota used up) leaves none free. Beside a
//! CPU-bound process pinned to each core, a spinner's `sched_yield` hands
//! its CPU to that process for the rest of its time slice, and stock's
//! sleeping waiter, woken, preempts it at once: a ping-pong ran 5x slower
//! than stock's with spins, 1.2x without (3.1.2).
//!
//! And every spin is judged by what it saw: a wake-up it noticed more than
//! [`LATE`] after it was sent, or a yield that came back later than that,
//! means the CPU was busy (a sleeping waiter is woken in about 50 µs here,
//! even across CPUs). Then no wait of the process spins for a while: 1 ms
//! at first, doubling with each late spin up to [`MAX_QUIET`], halving back
//! with each prompt one. The first spin after a quiet period probes again.
//!
//! Where a wait may not spin (one CPU, no CPU to spare, a quiet period) and
//! its list is active, it parks instead (`sys::park`): it sleeps on a futex
//! word of its own, with the GVL released, for at most [`PARK_LIMIT`] (in
//! a CPU quota, the quota's period: [`park_limit`]), and then goes on to
//! Ruby's sleep. A parked waiter uses no CPU, so it bets
//! nothing; it is woken by its waker at once, as stock's sleeping waiter
//! is, but without the lock hand-off of Ruby's sleep: a pinned ping-pong
//! made 7.6 context switches per round trip in Ruby's sleep (stock: 7.9),
//! 5.0 parked, 2.0 where the woken waiter does not preempt its waker
//! (`sys::park`; with one CPU, on a calm list, `sys::WaitList::calm`). On
//! a busy machine only where the wake-up will come from the waiter's own
//! CPU (see [`plan`]), and there on Ruby 3.1/3.2 only; on 3.3+ only with
//! one CPU and a calm list (see `parking_allowed`; where wake-ups are
//! deferred every list counts as calm there, its parked waiters woken in
//! turn: `sys::park`, relayed wake-ups), and only once a calm window has
//! passed (`sys::calm_park_pays`).
//!
//! A spin that ends without its wake-up parks too, on every Ruby, for at
//! most [`park_limit`] (`Budget::park`; not in the portable build, which
//! has no futexes), before it takes the GVL back. Taking it back only to
//! go to Ruby's sleep queued the futile spinner for the GVL ahead of the
//! thread that the GVL's holder had just woken, one more GVL hand-off on
//! the program's critical path: a concurrent-ruby `then` chain (pool
//! workers handing each step to each other while the caller waits for
//! the last, longer than a spin) ran 0.82x-0.85x stock's on Ruby 3.4.5
//! with twice its CPU time, 1.43x-1.64x when its futile spins park
//! (docs/design-details.md, "Spin, then park").

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::cgroup::{self, Quota};
use crate::sys::{self, ForkCell};

/// How long (µs) a waiter yields for its wake-up (`RapidThread.spin_us`).
static SPIN_US: AtomicU32 = AtomicU32::new(50);
/// How long (µs) a woken waiter yields until the waker has released the
/// GVL (`RapidThread.gvl_spin_us`).
static GVL_SPIN_US: AtomicU32 = AtomicU32::new(50);

/// A wake-up noticed, or a yield returned, later than this: the spin lost
/// its bet. An idle CPU gives the CPU back within microseconds, and a
/// ping-pong partner pinned to the same CPU runs only until it blocks.
pub const LATE: Duration = Duration::from_micros(100);

/// The quiet period after a late spin: from MIN_QUIET, doubled by each late
/// spin up to MAX_QUIET, halved by each prompt one.
pub const MIN_QUIET: Duration = Duration::from_millis(1);
pub const MAX_QUIET: Duration = Duration::from_millis(100);

/// How long a wait may park before Ruby's sleep (`sys::park`). A parked
/// thread is in a blocking region, which the deadlock detector does not
/// count as asleep: a deadlock is reported this much later than stock's.
/// Not shorter: the limit is a kernel timer, and one that comes before
/// the scheduler's next tick reprograms the CPU's timer, which in a VM
/// costs an exit per wait (a pinned ping-pong took 27 µs per round trip
/// with a 50 µs limit, 12 µs with 1 ms, 4.9 µs with 10 ms and with none).
pub const PARK_LIMIT: Duration = Duration::from_millis(10);

/// The longest quota period a park's limit follows (cgroup v1 allows 1 s).
const MAX_PARK_LIMIT: Duration = Duration::from_secs(1);

/// A park's limit: [`PARK_LIMIT`], or under a CPU quota (any, throttled or
/// not) the quota's period. A park begins while the group runs, and a
/// whole period later the group likely runs again, where a 10 ms limit
/// ran out while the group was throttled (its quota used up until the
/// period's end): the thread then waited on a second CPU, which the
/// group's throttled time counts too (vm_thread_condvar2 in a 0.5-CPU
/// quota: 728 ms/s throttled, stock 330; 400 with the period;
/// docs/design-details.md, "CPU quotas"). The cost, in a quota: a
/// deadlock, a trap handler of a parked main thread (Ruby 3.1/3.2), and
/// a waiter whose deferred wake-up waits for a waker that keeps the GVL
/// (`sys::park`), are seen up to a period late, not 10 ms.
fn park_limit() -> Duration {
    match QUOTA_PERIOD_US.load(Ordering::Relaxed) {
        0 => PARK_LIMIT,
        us => Duration::from_micros(us).clamp(PARK_LIMIT, MAX_PARK_LIMIT),
    }
}

/// Whether a wait may park where spins are off for `why`, on a list whose
/// hand-offs look like a ping-pong's (`calm`: `sys::WaitList::calm`) or
/// not: where futexes are (`sys::PARKING`); on Ruby 3.3+ only with one
/// CPU and on a calm list, whose parked waiter does not preempt its waker
/// (`sys::park`; where wake-ups are deferred, every list's waits count
/// as calm: `wait::first_step`). Elsewhere 3.3's own sleep hands over faster: its GVL
/// goes straight to the next thread in line, where a woken thread that
/// preempts its waker, or waits long for the GVL, costs more
/// (docs/design-details.md, "One CPU on Ruby 3.3+"). There a calm park
/// pays only where its waker defers the wake-up until it gives up the
/// GVL; until a calm window has passed (sys/park.rs, `CALM_WINDOW`), such
/// waits sleep in Ruby. Under M:N threads, where nothing is deferred,
/// they then park with the batch policy, as before. (Parking's M:N
/// failure was errno's, fixed since: "errno under M:N threads".)
fn parking_allowed(why: Off, calm: bool) -> bool {
    sys::PARKING && (!sys::ruby_3_3_or_later() || (why == Off::OneCpu && calm))
}

/// A wait list counts as active when it woke someone within this window.
/// Waiters on a dormant list (nobody woken lately: idle workers, threads
/// parked for good) go straight to Ruby's sleep: their spin would almost
/// surely be futile, and a futile spin costs CPU plus one more GVL
/// hand-off just to go to sleep (docs/design-details.md, "Many waiters").
/// The first waiter of a list that never woke anyone (a fresh one, such
/// as the condition variable concurrent-ruby makes for each future) counts
/// from the process's last wake-up of any list (`sys::WaitList`'s enter);
/// the next ones find it dormant, so a mass set-up on a fresh list spins
/// once.
const ACTIVE_WINDOW: Duration = Duration::from_millis(10);

/// When waits may spin again (`sys::monotonic_ns`), 0 for now.
static QUIET_UNTIL: AtomicU64 = AtomicU64::new(0);
/// The next quiet period, in nanoseconds.
static QUIET_NS: AtomicU64 = AtomicU64::new(MIN_QUIET.as_nanos() as u64);
/// How many spins were late (`RapidThread.spin_stats`).
static LATE_SPINS: AtomicU64 = AtomicU64::new(0);
/// How many waits spun, and how many parked (`RapidThread.spin_stats`).
static SPINS: AtomicU64 = AtomicU64::new(0);
static PARKS: AtomicU64 = AtomicU64::new(0);
/// How many spins saw no wake-up and parked (`RapidThread.spin_stats`).
static SPIN_PARKS: AtomicU64 = AtomicU64::new(0);

/// Counts a spin that saw no wake-up and parked.
pub fn count_park_after_spin() {
    SPIN_PARKS.fetch_add(1, Ordering::Relaxed);
}

pub fn spin_us() -> u32 {
    SPIN_US.load(Ordering::Relaxed)
}

pub fn set_spin_us(us: u32) -> u32 {
    SPIN_US.store(us, Ordering::Relaxed);
    us
}

pub fn gvl_spin_us() -> u32 {
    GVL_SPIN_US.load(Ordering::Relaxed)
}

pub fn set_gvl_spin_us(us: u32) -> u32 {
    GVL_SPIN_US.store(us, Ordering::Relaxed);
    us
}

/// How long a wait may spin: for its wake-up, then for the GVL; and how
/// long it parks if the first spin sees no wake-up (None: it does not).
#[derive(Clone, Copy)]
pub struct Budget {
    pub signal: Duration,
    pub gvl: Duration,
    pub park: Option<Duration>,
}

/// How often the CPU count is read again (`taskset -p` can change it).
const CPUS_REFRESH: Duration = Duration::from_millis(100);
/// How often the cgroup's quota is looked for again.
const QUOTA_REFRESH: Duration = Duration::from_secs(1);
/// CPUs this process may use (affinity and quota), 0 before the first read.
static CPUS: AtomicU64 = AtomicU64::new(0);
/// When CPUS was read (`sys::coarse_monotonic_ns`: every wait asks, and a
/// precise clock read costs more than the rest of the question).
static CPUS_READ_AT: AtomicU64 = AtomicU64::new(0);
/// The quota in thousandths of a CPU (0: none), and when it was looked
/// for (0: never).
static QUOTA_MILLICPUS: AtomicU64 = AtomicU64::new(0);
/// The quota's period in µs (0: none), for [`park_limit`].
static QUOTA_PERIOD_US: AtomicU64 = AtomicU64::new(0);
static QUOTA_READ_AT: AtomicU64 = AtomicU64::new(0);
/// The quota found, for its usage files (see `quota`), and a count of
/// the changes of it (a window spanning one does not measure the group).
static QUOTA: OnceLock<ForkCell<Mutex<Option<Quota>>>> = OnceLock::new();
static QUOTA_GEN: AtomicU64 = AtomicU64::new(0);

/// Makes the statics whose first use could otherwise race a fork (a
/// child would wait forever on a OnceLock another thread of the parent
/// was filling), and tells the wait lists whether a wake-up's CPU is
/// worth a `sched_getcpu` (only the park decision reads it): called when
/// the extension loads.
pub fn init() {
    quota_cell();
    sys::set_waker_cpu_wanted(parking_allowed(Off::Busy, true));
}

fn quota_cell() -> &'static Mutex<Option<Quota>> {
    QUOTA
        .get_or_init(|| ForkCell::new(Mutex::new(None), inherit_quota))
        .get()
}

/// A forked child's copy of the quota: its parent's (a child stays in its
/// parent's group, and the atomics above carry the parent's figures).
/// With none, until its next look (up to `QUOTA_REFRESH` after the
/// parent's last) the child measured CPU free without the group's usage,
/// and `cpu_budget` reported no quota beside the quota's park limit. None
/// only if a thread of the parent held the lock in the fork (it never
/// will be unlocked in the child).
fn inherit_quota(parent: &Mutex<Option<Quota>>) -> Mutex<Option<Quota>> {
    Mutex::new(parent.try_lock().ok().and_then(|q| q.clone()))
}

/// The quota last found (a forked child: `inherit_quota`); the lock is
/// held only to copy it in or out, never across a file read.
fn quota() -> Option<Quota> {
    quota_cell()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// Looks for the cgroup's quota again when QUOTA_REFRESH has passed (one
/// thread at a time). `now`: `sys::coarse_monotonic_ns`.
fn refresh_quota(now: u64) {
    let at = QUOTA_READ_AT.load(Ordering::Relaxed);
    if at != 0 && now.saturating_sub(at) < QUOTA_REFRESH.as_nanos() as u64 {
        return;
    }
    if QUOTA_READ_AT
        .compare_exchange(at, now.max(1), Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    let found = if sys::LINUX { cgroup::own() } else { None };
    let millicpus = found.as_ref().map_or(0, Quota::millicpus);
    let period_us = found.as_ref().map_or(0, |q| q.period_us);
    let mut q = quota_cell().lock().unwrap_or_else(|e| e.into_inner());
    if *q != found {
        QUOTA_GEN.fetch_add(1, Ordering::Relaxed);
        *q = found;
    }
    QUOTA_MILLICPUS.store(millicpus, Ordering::Relaxed);
    QUOTA_PERIOD_US.store(period_us, Ordering::Relaxed);
}

/// CPUs the process may use: its affinity, cut to the quota rounded up.
fn cpus_now() -> u64 {
    let affinity = sys::cpus_allowed() as u64;
    match QUOTA_MILLICPUS.load(Ordering::Relaxed) {
        0 => affinity,
        m => affinity.min(m.div_ceil(1000).max(1)),
    }
}

/// Whether the process may run on a single CPU only (read again every
/// CPUS_REFRESH; a thread's own affinity stands for the process's). `now`:
/// `sys::coarse_monotonic_ns`.
fn one_cpu(now: u64) -> bool {
    let cpus = CPUS.load(Ordering::Relaxed);
    if cpus != 0
        && now.saturating_sub(CPUS_READ_AT.load(Ordering::Relaxed)) < CPUS_REFRESH.as_nanos() as u64
    {
        return cpus <= 1;
    }
    refresh_quota(now);
    let cpus = cpus_now();
    CPUS.store(cpus, Ordering::Relaxed);
    CPUS_READ_AT.store(now, Ordering::Relaxed);
    cpus <= 1
}

/// The window over which other processes' CPU use is measured: /proc/stat
/// counts in 10 ms ticks, so a window holds ten per CPU.
const LOAD_WINDOW: Duration = Duration::from_millis(100);
/// CPU the process could have for a spinner and its waker, as measured
/// over the last full window, in thousandths of a CPU, plus one (0: not
/// measured yet).
static FREE_MILLICPUS_PLUS_ONE: AtomicU64 = AtomicU64::new(0);
/// The window being measured: when it began (`sys::coarse_monotonic_ns`),
/// the machine's busy CPU time then, this process's, and, under a quota,
/// the group's usage (0: unknown) and throttled periods (plus one; 0:
/// unknown) and which quota they were of (`QUOTA_GEN`).
static WINDOW_AT: AtomicU64 = AtomicU64::new(0);
static WINDOW_MACHINE_NS: AtomicU64 = AtomicU64::new(0);
static WINDOW_OWN_NS: AtomicU64 = AtomicU64::new(0);
static WINDOW_GROUP_NS: AtomicU64 = AtomicU64::new(0);
static WINDOW_THROTTLED: AtomicU64 = AtomicU64::new(0);
static WINDOW_QUOTA_GEN: AtomicU64 = AtomicU64::new(0);

/// CPU time used by others between two readings, in thousandths of a CPU
/// over `window_ns` (None: not measurable).
fn others_over(busy: u64, last_busy: u64, own: u64, last_own: u64, window_ns: u64) -> Option<u64> {
    // own < last_own: a forked child's clock started again.
    if last_busy == 0 || own < last_own {
        return None;
    }
    let used = busy
        .saturating_sub(last_busy)
        .saturating_sub(own - last_own);
    Some(
        (u128::from(used) * 1000 / u128::from(window_ns.max(1))).min(u128::from(u64::MAX / 2))
            as u64,
    )
}

/// How much CPU is free for a spinner and its waker, in thousandths of a
/// CPU: the machine's CPUs less what other processes used in the last
/// window (/proc/stat less this process's CPU time), and under a quota no
/// more than the quota less what the rest of the group used (its own
/// usage, not the host's), none in a window the group was throttled in.
/// Before the first window ends, and wherever /proc/stat cannot be read,
/// the tasks runnable now stand in for the machine (/proc/loadavg), less
/// this thread and the waker it may be about to wait for: a spin in the
/// first window beside busy CPUs left a ping-pong at 3 ms per round trip
/// for the rest of its run. `now`: `sys::coarse_monotonic_ns`. One thread
/// per window (Ractors call this in parallel) reads the files.
fn free_millicpus(now: u64) -> u64 {
    let now = now.max(1);
    let at = WINDOW_AT.load(Ordering::Relaxed);
    let cached = FREE_MILLICPUS_PLUS_ONE.load(Ordering::Relaxed);
    let fresh = now.saturating_sub(at) < LOAD_WINDOW.as_nanos() as u64;
    if (at != 0 && fresh)
        || WINDOW_AT
            .compare_exchange(at, now, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
    {
        // Fresh, or another thread is refreshing it.
        return cached.saturating_sub(1);
    }
    let window = now.saturating_sub(at);
    let full = at != 0;
    let machine = sys::machine_busy_ns();
    let own = sys::process_cpu_ns();
    let last_machine = WINDOW_MACHINE_NS.swap(machine.unwrap_or(0), Ordering::Relaxed);
    let last_own = WINDOW_OWN_NS.swap(own, Ordering::Relaxed);
    let capacity = sys::online_cpus() as u64 * 1000;
    let machine_others = match machine {
        Some(m) if full => others_over(m, last_machine, own, last_own, window),
        _ => None,
    };
    let mut free = match machine_others {
        Some(others) => capacity.saturating_sub(others),
        None if full && machine.is_some() => cached.saturating_sub(1),
        None => capacity.saturating_sub(
            sys::runnable_tasks()
                .map_or(0, |r| r.saturating_sub(2))
                .saturating_mul(1000),
        ),
    };
    // The group's part (no lock held across the reads).
    let gen = QUOTA_GEN.load(Ordering::Relaxed);
    let limit = QUOTA_MILLICPUS.load(Ordering::Relaxed);
    let group = (limit != 0).then(quota).flatten();
    let sample = group.as_ref().map(Quota::sample);
    let usage = sample.as_ref().and_then(|s| s.usage_ns);
    let throttled = sample.as_ref().and_then(|s| s.throttled_periods);
    let last_usage = WINDOW_GROUP_NS.swap(usage.unwrap_or(0), Ordering::Relaxed);
    let last_throttled = WINDOW_THROTTLED.swap(
        throttled.map_or(0, |t| t.saturating_add(1)),
        Ordering::Relaxed,
    );
    let same_quota = WINDOW_QUOTA_GEN.swap(gen, Ordering::Relaxed) == gen;
    if limit != 0 {
        let group_free = match usage {
            _ if full
                && same_quota
                && throttled.is_some_and(|t| last_throttled != 0 && t >= last_throttled) =>
            {
                0
            }
            Some(u) if full && same_quota => others_over(u, last_usage, own, last_own, window)
                .map_or(limit, |o| limit.saturating_sub(o)),
            _ => limit,
        };
        free = free.min(group_free);
    }
    FREE_MILLICPUS_PLUS_ONE.store(free.saturating_add(1), Ordering::Relaxed);
    free
}

/// Whether the machine has no CPU to spare for a spinner and its waker:
/// less than one and a half CPUs free (`free_millicpus`; Go's scheduler
/// spins only while a P is idle). CPU-bound processes beside the program
/// (a busy machine, puma's other workers, a load generator) make it true.
/// The machine's CPUs, not this thread's affinity: /proc/stat's load is
/// the machine's. (A process confined to some CPUs of a busy host may
/// then spin where its own CPUs are busy; the late-spin rule below stops
/// it.)
fn no_free_cpu(now: u64) -> bool {
    free_millicpus(now) + 500 < 2000
}

/// `spin`, cut to what is left before `deadline`.
fn until_deadline(spin: Duration, deadline: Option<Instant>) -> Duration {
    match deadline {
        Some(d) => spin.min(d.saturating_duration_since(Instant::now())),
        None => spin,
    }
}

/// Whether the process is in a quiet period (a yield came back late).
fn quiet() -> bool {
    let until = QUIET_UNTIL.load(Ordering::Relaxed);
    until != 0 && sys::monotonic_ns() < until
}

/// Whether no wait may spin now, whatever it waits for: a quiet period,
/// one CPU to run on, or no CPU to spare (one coarse clock read for both
/// of the latter).
fn spins_off() -> bool {
    off_reason().is_some()
}

/// Why no wait may spin now (None: spins are allowed).
#[derive(Clone, Copy, PartialEq)]
enum Off {
    /// The process may run on one CPU only.
    OneCpu,
    /// No CPU to spare, or a quiet period after a late spin.
    Busy,
}

fn off_reason() -> Option<Off> {
    let now = sys::coarse_monotonic_ns();
    if one_cpu(now) {
        Some(Off::OneCpu)
    } else if quiet() || no_free_cpu(now) {
        Some(Off::Busy)
    } else {
        None
    }
}

/// What a wait does before Ruby's sleep.
pub enum Plan {
    /// Spin with the GVL released (a CPU is free).
    Spin(Budget),
    /// Park on a futex with the GVL released, for at most `limit`;
    /// `calm`: on one CPU and a calm list, so without preempting its
    /// waker when woken (`sys::park_without_gvl`).
    Park { limit: Duration, calm: bool },
}

/// The first phase of a wait on a list that last woke someone at
/// `list_last_wake` (`sys::monotonic_ns`, 0: never), from CPU
/// `list_last_wake_cpu` (-1: unknown), whose hand-offs are `calm` (see
/// `parking_allowed`) or not, until `deadline`; None: Ruby's sleep at
/// once (the list is idle, the thread alone, or `spin_us` is 0, which
/// turns the first phase off). `alone` is
/// asked last (it is a call into Ruby): a lone thread has nobody to wake
/// it.
///
/// Where spins are off, a wait parks if its wake-up will likely come from
/// its own CPU: always with one CPU (on Ruby 3.3+ only a calm one, or any
/// where wake-ups are deferred, once a calm window has passed:
/// `parking_allowed`); on a busy machine, when
/// the list's last waker ran on the CPU this thread runs on now. A futex wake-up
/// from another CPU beside busy processes cost far more than Ruby's sleep
/// (a ping-pong beside a CPU-bound process pinned to each core: 4.6x
/// stock's CPU time, most of it in the kernel's cross-CPU wake-up), while
/// a local one costs less (the same, pinned to one CPU: 9 µs per round
/// trip).
pub fn plan(
    list_last_wake: u64,
    list_last_wake_cpu: i32,
    calm: bool,
    deadline: Option<Instant>,
    alone: impl FnOnce() -> bool,
) -> Option<Plan> {
    let spin_us = spin_us();
    if spin_us == 0 {
        return None;
    }
    let off = off_reason();
    // Where spins are off and waits may not park (on Ruby 3.3+ a busy
    // machine or a list that is not calm), the answer is Ruby's sleep
    // whatever the list did: no clock read.
    if off.is_some_and(|why| !parking_allowed(why, calm)) {
        return None;
    }
    if list_last_wake == 0
        || sys::monotonic_ns().saturating_sub(list_last_wake) >= ACTIVE_WINDOW.as_nanos() as u64
    {
        return None;
    }
    if let Some(why) = off {
        let local = why == Off::OneCpu
            || (list_last_wake_cpu >= 0 && sys::current_cpu() == list_last_wake_cpu);
        let limit = until_deadline(park_limit(), deadline);
        if !local || limit.is_zero() || alone() {
            return None;
        }
        let calm = calm && why == Off::OneCpu;
        // On Ruby 3.3+ (where every park is calm) a park pays only once its
        // wake-up is deferred; until then it sleeps in Ruby, counted
        // (sys/park.rs, CALM_WINDOW).
        if calm && !sys::calm_park_pays() {
            return None;
        }
        PARKS.fetch_add(1, Ordering::Relaxed);
        return Some(Plan::Park { limit, calm });
    }
    if alone() {
        return None;
    }
    SPINS.fetch_add(1, Ordering::Relaxed);
    let park = until_deadline(park_limit(), deadline);
    Some(Plan::Spin(Budget {
        signal: until_deadline(Duration::from_micros(u64::from(spin_us)), deadline),
        gvl: Duration::from_micros(u64::from(gvl_spin_us())),
        park: (sys::PARKING && !park.is_zero()).then_some(park),
    }))
}

/// How long Task#alive? may hand the GVL to a woken worker that spins for
/// it (None: not now).
pub fn handover_budget() -> Option<Duration> {
    (!spins_off()).then(|| Duration::from_micros(u64::from(gvl_spin_us())))
}

/// The spin of a RactorQueue wait (no GVL hand-off there) until `deadline`.
pub fn ractor_budget(deadline: Option<Instant>) -> Duration {
    if spins_off() {
        return Duration::ZERO;
    }
    until_deadline(Duration::from_micros(u64::from(spin_us())), deadline)
}

/// Yields the CPU once, as a spinner does between checks. Returns false
/// when the yield came back late (the CPU was busy): the spinner stops, and
/// reports it (see [`record`]). Safe to call without the GVL.
pub fn yield_cpu() -> bool {
    sys::yield_cpu(LATE)
}

/// Judges a finished spin: late (`cpu_busy`, or a wake-up noticed more
/// than [`LATE`] after it was sent) starts a quiet period and lengthens the
/// next; prompt (a wake-up noticed in time) shortens it.
pub fn record(noticed_after: Option<Duration>, cpu_busy: bool) {
    let late = cpu_busy || noticed_after.is_some_and(|d| d > LATE);
    let ns = QUIET_NS.load(Ordering::Relaxed);
    let (min, max) = (MIN_QUIET.as_nanos() as u64, MAX_QUIET.as_nanos() as u64);
    if late {
        let until = sys::monotonic_ns() + ns;
        QUIET_UNTIL.store(until.max(1), Ordering::Relaxed);
        QUIET_NS.store((ns * 2).min(max), Ordering::Relaxed);
        LATE_SPINS.fetch_add(1, Ordering::Relaxed);
    } else if noticed_after.is_some() && ns > min {
        QUIET_NS.store((ns / 2).max(min), Ordering::Relaxed);
    }
}

/// What the policy decided so far, for tests and diagnostics.
pub struct Stats {
    pub spins: u64,
    pub late_spins: u64,
    pub parks: u64,
    /// Spins that saw no wake-up and parked.
    pub spin_parks: u64,
    /// Whether waits are in a quiet period now.
    pub quiet: bool,
    /// Wake-ups of parked waiters relayed by the end of a park (any but
    /// the one a waker keeps, a broadcast's: `sys::park`, relayed
    /// wake-ups).
    pub relayed: u64,
    /// Parks that ran out their limit before their wake-up came
    /// (`sys::park_timeouts`).
    pub park_timeouts: u64,
}

pub fn stats() -> Stats {
    Stats {
        spins: SPINS.load(Ordering::Relaxed),
        late_spins: LATE_SPINS.load(Ordering::Relaxed),
        parks: PARKS.load(Ordering::Relaxed),
        spin_parks: SPIN_PARKS.load(Ordering::Relaxed),
        quiet: quiet(),
        relayed: sys::relayed_wake_ups(),
        park_timeouts: sys::park_timeouts(),
    }
}

/// The CPUs the policy counts (see the header), and why.
pub struct CpuBudget {
    pub cpus: u64,
    pub affinity: u64,
    /// CPUs free for a spinner and its waker in the last measured window
    /// (`free_millicpus`), in thousandths; None before the first.
    pub free_millicpus: Option<u64>,
    /// How long a wait parks at most ([`park_limit`]).
    pub park_limit: Duration,
    pub quota: Option<Quota>,
    pub reason: String,
}

/// What the policy decided about CPUs, read again where stale.
pub fn cpu_budget() -> CpuBudget {
    one_cpu(sys::coarse_monotonic_ns());
    let cpus = CPUS.load(Ordering::Relaxed);
    let affinity = sys::cpus_allowed() as u64;
    let quota = quota();
    let plural = |n: u64| if n == 1 { "" } else { "s" };
    let reason = match &quota {
        _ if !sys::LINUX => format!(
            "{cpus} CPU{} (portable build: std's available_parallelism; no cgroup quota read)",
            plural(cpus)
        ),
        Some(q) => format!(
            "cgroup v{} quota {} us per {} us on {}: {:.2} CPUs, rounded up to {}; affinity mask: {affinity}",
            q.version,
            q.quota_us,
            q.period_us,
            q.dir.display(),
            q.quota_us as f64 / q.period_us as f64,
            q.cpus()
        ),
        None => format!("affinity mask: {affinity} CPU{}; no cgroup CPU quota", plural(affinity)),
    };
    CpuBudget {
        cpus,
        affinity,
        free_millicpus: FREE_MILLICPUS_PLUS_ONE
            .load(Ordering::Relaxed)
            .checked_sub(1),
        park_limit: park_limit(),
        quota,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn others_cpu_is_the_machines_busy_time_less_this_processs() {
        // Over a 100 ms window the machine was busy 150 ms, this process
        // 50 ms of it: others used one CPU (1000 thousandths).
        assert_eq!(
            others_over(1150 * MS, 1000 * MS, 300 * MS, 250 * MS, 100 * MS),
            Some(1000)
        );
        // This process alone: others used nothing, even when the counters
        // disagree by a little (the process's time read after the machine's).
        assert_eq!(
            others_over(1050 * MS, 1000 * MS, 300 * MS, 250 * MS, 100 * MS),
            Some(0)
        );
        assert_eq!(
            others_over(1040 * MS, 1000 * MS, 300 * MS, 250 * MS, 100 * MS),
            Some(0)
        );
        // No earlier reading, or a forked child's clock that restarted.
        assert_eq!(
            others_over(1150 * MS, 0, 300 * MS, 250 * MS, 100 * MS),
            None
        );
        assert_eq!(
            others_over(1150 * MS, 1000 * MS, 10 * MS, 250 * MS, 100 * MS),
            None
        );
        // A zero-length window does not divide by zero.
        assert_eq!(others_over(1000 * MS + 1, 1000 * MS, 0, 0, 0), Some(1000));
    }

    #[test]
    fn a_spin_is_cut_to_the_deadline() {
        let spin = Duration::from_micros(50);
        assert_eq!(until_deadline(spin, None), spin);
        assert_eq!(
            until_deadline(spin, Some(Instant::now() + Duration::from_secs(5))),
            spin
        );
        let past = Instant::now()
            .checked_sub(Duration::from_millis(1))
            .unwrap();
        assert_eq!(until_deadline(spin, Some(past)), Duration::ZERO);
        assert!(
            until_deadline(
                Duration::from_secs(10),
                Some(Instant::now() + Duration::from_millis(5))
            ) <= Duration::from_millis(5)
        );
    }
}
