//! Releasing the GVL: the spin phase of a wait, and handing the GVL over.

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use magnus::Ruby;

use super::*;

// ---------------------------------------------------------------------------
// Waiting and waking (CRuby thread API)
// ---------------------------------------------------------------------------

/// Counts GVL releases done by our own waits. A spinner that has been
/// signaled waits for it to move: the thread that woke it has then given
/// up the GVL, so taking it does not sleep. See ../shared/notes/handoff.md.
pub static GVL_RELEASES: AtomicU64 = AtomicU64::new(0);

#[inline]
pub fn note_gvl_release() {
    GVL_RELEASES.fetch_add(1, Ordering::AcqRel);
}

/// When one of our waits last set out to block (a park, or Ruby's sleep
/// where waits park; `monotonic_ns`, 0: never), stamped before it gives
/// up the GVL, so before any thread it woke can go on: the start of the
/// machine's switch to a woken parked waiter (`sys::wait_list`,
/// `SWITCH_NS`). Stamped under the main Ractor's GVL (the waits of wait
/// lists), so in time order; a spin, and the park that may end it, stamp
/// nothing.
static LAST_BLOCK_NS: AtomicU64 = AtomicU64::new(0);

/// One of our waits is about to block: stamps `LAST_BLOCK_NS` and returns
/// the stamp. GVL held.
#[inline]
pub fn note_block() -> u64 {
    let now = monotonic_ns();
    LAST_BLOCK_NS.store(now, Ordering::Relaxed);
    now
}

/// One of our waits is about to give up the GVL in Ruby's sleep: lets a
/// signaled spinner stop waiting for the GVL to move, and, where waits
/// park, stamps the block. GVL held.
#[inline]
pub fn note_ruby_sleep() {
    note_gvl_release();
    if PARKING {
        note_block();
    }
}

/// The last `note_block` stamp (0: none yet).
pub fn last_block_ns() -> u64 {
    LAST_BLOCK_NS.load(Ordering::Relaxed)
}

/// Whether the current thread is the only live thread.
pub fn thread_alone(_: &Ruby) -> bool {
    // SAFETY: a plain query, GVL held (the handle).
    unsafe { rb_sys::rb_thread_alone() != 0 }
}

/// Yields the CPU once; false when it came back later than `late`: the CPU
/// is busy and spinning must stop (the spin policy's rule, crate::spin:
/// `LATE`; `spin::yield_cpu` is this with that bound). Touches no Ruby:
/// safe without the GVL.
pub fn yield_cpu(late: Duration) -> bool {
    let before = Instant::now();
    std::thread::yield_now();
    before.elapsed() <= late
}

/// What a spin saw, for the spin policy (crate::spin).
pub struct SpinReport {
    /// How long after its signal the spinner noticed it (None: it was
    /// not signaled while it spun).
    pub noticed_after: Option<Duration>,
    /// A yield came back late: the CPU was busy.
    pub cpu_busy: bool,
    /// It saw no wake-up in its spin and parked.
    pub parked: bool,
}

struct SpinArgs<'a> {
    w: &'a Waiter,
    spin: Duration,
    gvl: Duration,
    late: Duration,
    noticed_after: Cell<Option<Duration>>,
    cpu_busy: Cell<bool>,
    park: Option<Duration>,
    parked: Cell<bool>,
}

fn spin_phase(a: &SpinArgs) {
    note_gvl_release();
    let w = a.w;
    let start = std::time::Instant::now();
    // Phase 1: wait for the signal, yielding the CPU between checks.
    loop {
        if w.signaled() {
            let at = w.signaled_at.load(Ordering::Relaxed);
            a.noticed_after.set(Some(Duration::from_nanos(
                monotonic_ns().saturating_sub(at),
            )));
            break;
        }
        if w.interrupted.load(Ordering::Relaxed) {
            return;
        }
        if start.elapsed() >= a.spin {
            // The park's limit counts from the plan, as the deadline does.
            if let Some(limit) = a.park.map(|l| l.saturating_sub(start.elapsed())) {
                a.parked.set(!limit.is_zero() && park_after_spin(w, limit));
            }
            return;
        }
        if !yield_cpu(a.late) {
            a.cpu_busy.set(true);
            return;
        }
    }
    // Phase 2: the waker still holds the GVL; wait until it has released
    // it through one of our waits, so that re-acquiring it does not sleep.
    let epoch = w.wake_epoch.load(Ordering::Relaxed);
    let start = std::time::Instant::now();
    while GVL_RELEASES.load(Ordering::Acquire) == epoch
        && !w.interrupted.load(Ordering::Relaxed)
        && start.elapsed() < a.gvl
    {
        if !yield_cpu(a.late) {
            a.cpu_busy.set(true);
            return;
        }
    }
}

struct NoGvl<B> {
    body: Option<B>,
    ran: bool,
}

/// Runs `body` with the GVL released and `ubf(ubf_arg)` as its unblock
/// function (Thread#raise, kill, signals, Thread#wakeup), and returns with
/// the GVL held: whether `body` ran. The `2` variant matters: plain
/// rb_thread_call_without_gvl runs pending interrupts on the way out and
/// may longjmp over our frames; this one skips `body` when an interrupt is
/// pending and runs none, and the caller runs them itself under
/// rb_protect. Never raises; a panic in `body` aborts (it must not unwind
/// into C).
///
/// # Safety
/// `ubf` may be called from another thread (the interrupting one, or
/// Ruby's timer thread; never from a signal handler) while `body` runs,
/// with `ubf_arg`, which must stay valid for the whole call.
/// `body` must not touch Ruby.
pub(super) unsafe fn call_without_gvl<B: FnOnce()>(
    body: B,
    ubf: unsafe extern "C" fn(*mut c_void),
    ubf_arg: *const c_void,
) -> bool {
    unsafe extern "C" fn run<B: FnOnce()>(arg: *mut c_void) -> *mut c_void {
        // SAFETY: `arg` is the NoGvl on call_without_gvl's stack, alive for
        // the whole call, and nothing else uses it meanwhile.
        let a = unsafe { &mut *(arg as *mut NoGvl<B>) };
        // The GVL is given up: wake the parked waiters this thread's
        // hand-offs left to this moment (sys::park, deferred wake-ups),
        // keeping errno as the body does (below).
        wake_deferred();
        if let Some(b) = a.body.take() {
            // Ruby hands this native thread's errno back to the thread that
            // comes next, so the body keeps it: under M:N threads (3.3+,
            // and every non-main Ractor) that may be another Ruby thread,
            // and an ETIMEDOUT left by a timed futex wait made its next
            // pipe read raise IO::TimeoutError (docs/design-details.md,
            // "errno under M:N threads").
            let ran = keeping_errno(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(b)));
            if ran.is_err() {
                std::process::abort();
            }
        }
        a.ran = true;
        ptr::null_mut()
    }
    let mut a = NoGvl {
        body: Some(body),
        ran: false,
    };
    // SAFETY: `a` outlives the call; `run` only runs `body`, which does
    // not touch Ruby (the caller's promise), and `ubf_arg` stays valid for
    // the call (likewise).
    in_own_region(|| unsafe {
        rb_sys::rb_thread_call_without_gvl2(
            Some(run::<B>),
            &mut a as *mut NoGvl<B> as *mut c_void,
            Some(ubf),
            ubf_arg as *mut c_void,
        )
    });
    if !a.ran {
        // Skipped for a pending interrupt, with the GVL kept.
        wake_deferred();
    }
    a.ran
}

/// Spins for the signal with the GVL released (two-phase, see
/// docs/design-details.md), yielding the CPU between checks, and stops
/// early when a yield comes back later than `late` (the CPU is busy). Returns with the
/// GVL held, and what it saw; never raises. With `park`, a spin that
/// sees no wake-up within `spin` parks for up to that long (`sys::park`)
/// before it takes the GVL back.
pub fn spin_without_gvl(
    w: &Waiter,
    spin: Duration,
    gvl: Duration,
    late: Duration,
    park: Option<Duration>,
) -> SpinReport {
    let args = SpinArgs {
        w,
        spin,
        gvl,
        late,
        noticed_after: Cell::new(None),
        cpu_busy: Cell::new(false),
        park,
        parked: Cell::new(false),
    };
    // SAFETY: `args` and the waiter outlive the call; the unblock function
    // only touches the waiter's atomics and wakes its futex (sys::park);
    // spin_phase does not touch Ruby.
    unsafe {
        call_without_gvl(
            || spin_phase(&args),
            interrupt_waiter,
            w as *const Waiter as *const c_void,
        )
    };
    // GVL held: no waker reads it now, and a later one need not wake us.
    // (Written only where set: a store to the line its waker reads costs
    // every prompt spin a transfer of it.)
    if w.parking.load(Ordering::Relaxed) {
        w.parking.store(false, Ordering::Relaxed);
    }
    SpinReport {
        noticed_after: args.noticed_after.get(),
        cpu_busy: args.cpu_busy.get(),
        parked: args.parked.get(),
    }
}

struct YieldArgs {
    budget: Duration,
    late: Duration,
    interrupted: AtomicBool,
    cpu_busy: AtomicBool,
}

fn yield_phase(a: &YieldArgs) {
    let epoch = GVL_RELEASES.load(Ordering::Acquire);
    let start = Instant::now();
    while GVL_RELEASES.load(Ordering::Acquire) == epoch
        && !a.interrupted.load(Ordering::Relaxed)
        && start.elapsed() < a.budget
    {
        if !yield_cpu(a.late) {
            a.cpu_busy.store(true, Ordering::Relaxed);
            break;
        }
    }
}

unsafe extern "C" fn yield_ubf(arg: *mut c_void) {
    // SAFETY: `arg` is the YieldArgs, alive while the call runs.
    unsafe { &*(arg as *const YieldArgs) }
        .interrupted
        .store(true, Ordering::Relaxed);
}

/// Gives the GVL to a thread spinning for it in one of our waits (phase 2
/// of the two-phase wait, which Thread.pass cannot see: it is not queued
/// on the GVL), and takes it back once that thread has released it again
/// through one of our waits, or after `budget`, or once a yield comes
/// back later than `late` (the CPU is busy: then it returns true). Never
/// raises.
pub fn yield_gvl(_: &Ruby, budget: Duration, late: Duration) -> bool {
    note_gvl_release();
    let args = YieldArgs {
        budget,
        late,
        interrupted: AtomicBool::new(false),
        cpu_busy: AtomicBool::new(false),
    };
    let p = &args as *const YieldArgs as *const c_void;
    // SAFETY: `args` outlives the call; the unblock function only stores
    // an atomic flag; yield_phase does not touch Ruby.
    unsafe { call_without_gvl(|| yield_phase(&args), yield_ubf, p) };
    args.cpu_busy.load(Ordering::Relaxed)
}
