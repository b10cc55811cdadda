//! The spin policy: whether a wait spins before it sleeps, and for how
//! long. Its one home: Queue, SizedQueue, ConditionVariable, select and
//! the thread cache ask it through `wait::block`, Task#alive? and
//! RactorQueue directly (docs/design-details.md, "Fair under load").
//!
//! A spin is a bet that a CPU is idle and the wake-up near. The spinner
//! yields its CPU between checks (`sched_yield`). On an idle CPU the yield
//! returns at once. On a busy one it puts the spinner behind every other
//! runnable thread of that CPU, each for its time slice, where a sleeping
//! waiter, once woken, would be run first: the scheduler favours a thread
//! that slept. A waiter spinning on a busy CPU therefore sees its wake-up
//! late, and a thread that waits for it (puma's accept loop behind its
//! pool's ConditionVariable) falls behind. So a yield that comes back later
//! than [`YIELD_LIMIT`] ends the spin (the waiter sleeps), and no wait of
//! the process spins for [`QUIET`]: the bet is off while the CPUs are busy.
//! The first spin after that probes again.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long (µs) a waiter yields for its wake-up (`RapidThread.spin_us`).
static SPIN_US: AtomicU32 = AtomicU32::new(50);
/// How long (µs) a woken waiter yields until the waker has released the
/// GVL (`RapidThread.gvl_spin_us`).
static GVL_SPIN_US: AtomicU32 = AtomicU32::new(50);

/// A yield that returns later than this found its CPU busy: another thread
/// ran in between, for longer than a whole spin lasts. An idle CPU gives
/// the CPU back within microseconds; a ping-pong partner pinned to the
/// same CPU runs until it blocks again, a few microseconds more.
pub const YIELD_LIMIT: Duration = Duration::from_micros(200);

/// No wait spins for this long after a yield came back late.
pub const QUIET: Duration = Duration::from_millis(100);

/// A wait list counts as active when it woke someone within this window.
/// Waiters on a dormant list (nobody woken lately: a fresh queue, idle
/// workers, threads parked for good) go straight to Ruby's sleep: their spin
/// would almost surely be futile, and a futile spin costs CPU plus one more
/// GVL hand-off just to go to sleep (docs/design-details.md, "Many waiters").
const ACTIVE_WINDOW: Duration = Duration::from_millis(10);

/// When waits may spin again: microseconds since [`epoch`], 0 for now.
static QUIET_UNTIL: AtomicU64 = AtomicU64::new(0);
/// How many spins ended on a late yield (`RapidThread.spin_stats`).
static LATE_YIELDS: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn micros_since_epoch(t: Instant) -> u64 {
    t.saturating_duration_since(epoch()).as_micros() as u64
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

/// How long a wait may spin: for its wake-up, then for the GVL.
#[derive(Clone, Copy)]
pub struct Budget {
    pub signal: Duration,
    pub gvl: Duration,
}

/// Whether the process is in a quiet period (a yield came back late).
fn quiet() -> bool {
    let until = QUIET_UNTIL.load(Ordering::Relaxed);
    until != 0 && micros_since_epoch(Instant::now()) < until
}

/// The spin of a wait on a list that last woke someone at `list_last_wake`,
/// until `deadline`; None: sleep at once. `alone` is asked last (it is a
/// call into Ruby): a lone thread has nobody to wake it.
pub fn budget(
    list_last_wake: Option<Instant>,
    deadline: Option<Instant>,
    alone: impl FnOnce() -> bool,
) -> Option<Budget> {
    let spin_us = spin_us();
    if spin_us == 0 || quiet() {
        return None;
    }
    if list_last_wake.is_none_or(|t| t.elapsed() >= ACTIVE_WINDOW) || alone() {
        return None;
    }
    let mut signal = Duration::from_micros(u64::from(spin_us));
    if let Some(d) = deadline {
        signal = signal.min(d.saturating_duration_since(Instant::now()));
    }
    Some(Budget {
        signal,
        gvl: Duration::from_micros(u64::from(gvl_spin_us())),
    })
}

/// How long Task#alive? may hand the GVL to a woken worker that spins for
/// it (None: not now).
pub fn handover_budget() -> Option<Duration> {
    (!quiet()).then(|| Duration::from_micros(u64::from(gvl_spin_us())))
}

/// The spin of a RactorQueue wait (no GVL hand-off there) until `deadline`.
pub fn ractor_budget(deadline: Option<Instant>) -> Duration {
    if quiet() {
        return Duration::ZERO;
    }
    let spin = Duration::from_micros(u64::from(spin_us()));
    match deadline {
        Some(d) => spin.min(d.saturating_duration_since(Instant::now())),
        None => spin,
    }
}

/// Yields the CPU once, as a spinner does between checks. Returns false
/// when the yield came back late (the CPU was busy): the spinner must stop,
/// and waits stay quiet for [`QUIET`]. Safe to call without the GVL.
pub fn yield_cpu() -> bool {
    let before = Instant::now();
    std::thread::yield_now();
    let after = Instant::now();
    if after - before <= YIELD_LIMIT {
        return true;
    }
    QUIET_UNTIL.store(micros_since_epoch(after + QUIET).max(1), Ordering::Relaxed);
    LATE_YIELDS.fetch_add(1, Ordering::Relaxed);
    false
}

/// (spins ended by a late yield, whether waits are quiet now), for tests
/// and diagnostics.
pub fn stats() -> (u64, bool) {
    (LATE_YIELDS.load(Ordering::Relaxed), quiet())
}
