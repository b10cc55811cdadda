//! Waiting and waking, shared by every class.
//!
//! A blocking operation that cannot proceed calls [`park`]: it enlists an
//! on-stack [`Waiter`] on one of the object's wait lists, blocks, and leaves
//! the list on every exit path (a drop guard plays the role of the
//! `rb_ensure` cleanup in thread_sync.c). The caller re-checks its
//! condition after every wake-up.
//!
//! Blocking is two-phase (docs/design-details.md, "Hand-off"):
//! 1. with the GVL released, yield the CPU for up to `spin_us` waiting for
//!    the signal, then for up to `gvl_spin_us` until the waker has given
//!    up the GVL (a spin that sees no signal parks, as below, before it
//!    takes the GVL back); or, where no CPU is free to spin on, park on a
//!    futex for up to `spin::PARK_LIMIT` (a CPU quota's period in a
//!    quota; `sys::park`);
//! 2. otherwise fall back to Ruby's own sleep (`sys::Sleeper`: Mutex#sleep
//!    on a private mutex), which the deadlock detector sees and every
//!    interrupt wakes.
//!
//! Whether and how long phase 1 spins or parks is the spin policy's call
//! (`crate::spin`); a fiber with a scheduler does neither.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use magnus::{prelude::*, Error, Ruby, Value};

use crate::errors;
use crate::spin::{self, Plan};
use crate::sys::{self, GvlCell, WaitList, Waiter};

/// Runs `wait` with a waiter for the current thread enlisted on the list
/// chosen by `list`. The waiter is off the list and out of its waiting
/// count when this returns, on every path (a drop guard plays the role of
/// the `rb_ensure` cleanup in thread_sync.c).
///
/// A waiter that a waker chose but that leaves with an error (Thread#raise,
/// kill, ...) hands its wake-up to the next waiter when `worth_passing_on`
/// says there is still something to take; stock loses such a wake-up and
/// can leave an item stranded while another thread sleeps. The next waiter
/// is taken from `end`, the end the list's wake-ups come from. A
/// ConditionVariable#broadcast's wake-up ([`broadcast`]) is not passed on:
/// every waiter it was meant for was woken, and the next one came later,
/// and would return from a wait that stock never ends (other waits
/// re-check what they wait for, and a wake-up of every waiter passed on
/// costs them a look).
pub fn enlisted<S, R>(
    cell: &GvlCell<S>,
    list: fn(&mut S) -> &mut WaitList,
    end: End,
    blocker: Value,
    worth_passing_on: fn(&mut S) -> bool,
    wait: impl FnOnce(&Waiter) -> Result<R, Error>,
) -> Result<R, Error> {
    let w = Waiter::current(blocker);
    let result = sys::while_enlisted(cell, list, &w, || wait(&w));
    result.map_err(|e| {
        passed_on(
            &w.ruby(),
            e,
            w.signaled() && !w.woken_by_broadcast(),
            cell,
            list,
            end,
            worth_passing_on,
        )
    })
}

/// Blocks the current thread (or fiber) on the list chosen by `list` until
/// it is woken, `deadline` passes or an interrupt arrives.
pub fn park<S>(
    cell: &GvlCell<S>,
    list: fn(&mut S) -> &mut WaitList,
    blocker: Value,
    deadline: Option<Instant>,
    worth_passing_on: fn(&mut S) -> bool,
) -> Result<(), Error> {
    enlisted(cell, list, End::Oldest, blocker, worth_passing_on, |w| {
        block(w, deadline, false)
    })
}

/// Blocks the current thread (or fiber) on the list chosen by `list` of
/// every cell at once (`RapidThread.select`), until one of them wakes it,
/// `deadline` passes or an interrupt arrives. `blocker` is what a fiber
/// scheduler is told the fiber blocks on (the first queue). Returns the
/// index of the cell whose wake-up ended the wait, if one did.
///
/// As in `enlisted`, a wake-up that arrives with an error is passed on to
/// the next waiter of that list when `worth_passing_on` says so.
pub fn park_any<S>(
    cells: &[&GvlCell<S>],
    blocker: Value,
    list: fn(&mut S) -> &mut WaitList,
    deadline: Option<Instant>,
    worth_passing_on: fn(&mut S) -> bool,
) -> Result<Option<usize>, Error> {
    let head = Waiter::current(blocker);
    let (result, woken_by) =
        sys::while_enlisted_on_each(&head, cells, list, || block(&head, deadline, false));
    match (result, woken_by) {
        (Err(e), Some(i)) => Err(passed_on(
            &head.ruby(),
            e,
            true,
            cells[i],
            list,
            End::Oldest,
            worth_passing_on,
        )),
        (Err(e), None) => Err(e),
        (Ok(()), woken_by) => Ok(woken_by),
    }
}

/// The error `e` ended a wait. If that wait had been woken through the
/// list (`woken`) and `worth_passing_on` says there is still something to
/// take, the wake-up goes to the next waiter, from the `end` the list's
/// wake-ups come from. The error that ended the wait (a kill, say) stays
/// the one raised unless passing the wake-up on met a more urgent one.
fn passed_on<S>(
    ruby: &Ruby,
    e: Error,
    woken: bool,
    cell: &GvlCell<S>,
    list: fn(&mut S) -> &mut WaitList,
    end: End,
    worth_passing_on: fn(&mut S) -> bool,
) -> Error {
    if woken && cell.with(worth_passing_on) {
        after_error(ruby, e, || wake_from(cell, list, 1, end, false).map(drop))
    } else {
        e
    }
}

fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

/// What a wait on `w` does first (see [`first_step`]).
pub enum Step {
    /// Nothing to wait for: the deadline has passed, or `w` is signaled
    /// already (the GVL was released between enlisting and now).
    Done,
    /// The fiber scheduler's block.
    Scheduler,
    /// Spin or park (crate::spin), then Ruby's sleep.
    Plan(Plan),
    /// Ruby's sleep at once.
    Sleep,
}

/// What a thread about to block in a wait calls first: the thread cache's
/// check that its pending tasks still have a worker coming (this thread's
/// block may have been the one they waited for).
pub type BlockingHook = fn(&Ruby) -> Result<(), Error>;

/// The hook, set once by the thread cache ([`on_blocking`]).
static BLOCKING_HOOK: OnceLock<BlockingHook> = OnceLock::new();

/// Whether the hook has anything to check: set by the thread cache when
/// it queues a task, cleared when the hook finds none queued. A wait of a
/// program that spawns nothing reads this flag only.
static BLOCKING_HOOK_ARMED: AtomicBool = AtomicBool::new(false);

/// Registers what a thread about to block in a wait calls first.
pub fn on_blocking(hook: BlockingHook) {
    // A second registration (never made) would keep the first.
    let _ = BLOCKING_HOOK.set(hook);
}

/// Has the next waits call the blocking hook (`armed`) or not.
pub fn arm_blocking_hook(armed: bool) {
    BLOCKING_HOOK_ARMED.store(armed, Ordering::Relaxed);
}

/// Decides what a wait on `w` until `deadline` does first; [`block_from`]
/// does it. Asked apart by ConditionVariable#wait, which sleeps in the
/// caller's Mutex#sleep, as stock does, when the answer is Ruby's sleep.
/// A wait that will block calls the blocking hook first ([`on_blocking`]);
/// its error (an interrupt met in its Ruby calls) ends the wait.
pub fn first_step(w: &Waiter, deadline: Option<Instant>) -> Result<Step, Error> {
    if remaining(deadline).is_some_and(|left| left.is_zero()) {
        return Ok(Step::Done);
    }
    if w.has_scheduler() {
        return Ok(Step::Scheduler);
    }
    // A waiter already signaled needs no worker (`next_step` then ends it).
    if BLOCKING_HOOK_ARMED.load(Ordering::Relaxed) && !w.signaled() {
        if let Some(hook) = BLOCKING_HOOK.get() {
            // Its Ruby calls can switch threads: `w` may be signaled after.
            hook(&w.ruby())?;
        }
    }
    Ok(next_step(w, deadline))
}

/// `first_step` past the blocking hook, whose Ruby calls may have let a
/// waker signal `w`.
fn next_step(w: &Waiter, deadline: Option<Instant>) -> Step {
    if w.signaled() {
        return Step::Done;
    }
    // Where wake-ups may be deferred (Ruby 3.3+, not under M:N threads)
    // every wait parks as a calm one does: its wake-up will not preempt
    // its waker, whatever its list (sys::park, relayed wake-ups).
    let calm = w.list_calm() || sys::deferral_possible();
    let (wake, cpu) = (w.list_last_wake(), w.list_last_wake_cpu());
    match spin::plan(wake, cpu, calm, deadline, || sys::thread_alone(&w.ruby())) {
        Some(plan) => Step::Plan(plan),
        None => Step::Sleep,
    }
}

/// Blocks until `w` is signaled or `deadline` passes (two-phase: spin with
/// the GVL released, then Ruby's sleep). With `once`, a Ruby-level wake-up
/// that is not our signal (Thread#wakeup / #run) also ends the wait, as in
/// `Mutex#sleep`.
pub fn block(w: &Waiter, deadline: Option<Instant>, once: bool) -> Result<(), Error> {
    block_from(w, deadline, once, first_step(w, deadline)?)
}

/// [`block`] from a first step already decided.
pub fn block_from(
    w: &Waiter,
    deadline: Option<Instant>,
    once: bool,
    step: Step,
) -> Result<(), Error> {
    let ruby = w.ruby();
    match &step {
        Step::Done => return Ok(()),
        Step::Scheduler => return sys::scheduler_block(w, remaining(deadline)),
        Step::Plan(Plan::Spin(b)) => {
            let seen = sys::spin_without_gvl(w, b.signal, b.gvl, spin::LATE, b.park);
            spin::record(seen.noticed_after, seen.cpu_busy);
            if seen.parked {
                spin::count_park_after_spin();
            }
        }
        Step::Plan(Plan::Park { limit, calm }) => sys::park_without_gvl(w, *limit, *calm)?,
        Step::Sleep => {}
    }
    if let Step::Plan(_) = step {
        // A Thread#wakeup / #run sent after the spin or park ended, while
        // this thread waited to take the GVL back (its unblock function
        // cleared, so `interrupted` missed it), left only the thread's
        // interrupt flag, which check_ints consumes: read it first, or the
        // sleep below would wait for a wake-up already spent (ruby/spec's
        // "can be interrupted by Thread#run", about 1 run in 10 on 3.3.8).
        let woken = once && w.thread_interrupted();
        // Interrupts that arrived while spinning or parked are raised here.
        sys::check_ints(&ruby)?;
        // With `once`, an interrupt ends the wait as it ends Mutex#sleep
        // (Thread#wakeup arrives as one).
        if w.signaled() || (once && (woken || w.interrupted())) {
            return Ok(());
        }
    }
    w.set_sleeping();
    sys::note_ruby_sleep();
    let sleeper = sys::Sleeper::new(&ruby)?;
    loop {
        // A signal handler that runs here (and wakes us) runs before the
        // check below, not in the sleep's own first interrupt check, whose
        // wake-up Ruby would overwrite when it restores the sleeping status.
        sys::check_ints_before_sleep(w)?;
        if w.signaled() {
            return Ok(());
        }
        match remaining(deadline) {
            None => sleeper.sleep(None)?,
            Some(left) if left.is_zero() => return Ok(()),
            Some(left) => sleeper.sleep(Some(left))?,
        }
        if once {
            return Ok(());
        }
    }
}

/// Wakes up to `n` of the longest waiters on the list; returns how many.
/// A wake-up that fails (a fiber scheduler's `unblock` raised, or a kill
/// of the waking thread landed in it) still counts: the waiter is
/// signaled and sees it when it runs. The rest are woken all the same and
/// the most urgent error is returned afterwards, so no waiter is left on
/// the list unsignaled.
pub fn wake_n<S>(
    cell: &GvlCell<S>,
    list: fn(&mut S) -> &mut WaitList,
    n: usize,
) -> Result<usize, Error> {
    wake_from(cell, list, n, End::Oldest, false)
}

/// How many a wake-up call wakes: `usize::MAX` is every waiter.
pub const ALL: usize = usize::MAX;

/// Which waiter a wake-up goes to.
#[derive(Clone, Copy)]
pub enum End {
    /// The longest waiter (queues, condition variables: FIFO, as stock).
    Oldest,
    /// The most recent one (the thread cache: the hot worker, LIFO).
    Newest,
}

/// `wake_n` from either end of the list (see `End`).
/// `broadcast`: a ConditionVariable#broadcast's (see `Waiter::signal_for_broadcast`).
fn wake_from<S>(
    cell: &GvlCell<S>,
    list: fn(&mut S) -> &mut WaitList,
    n: usize,
    end: End,
    broadcast: bool,
) -> Result<usize, Error> {
    let mut woken = 0;
    let mut first_err: Option<Error> = None;
    while woken < n {
        let target = cell.with(|s| {
            let l = list(s);
            match end {
                End::Oldest => l.pop_front(),
                End::Newest => l.pop_back(),
            }
            .map(|w| {
                if broadcast {
                    w.signal_for_broadcast()
                } else {
                    w.signal()
                }
            })
        });
        let Some(target) = target else {
            break;
        };
        match target.wake() {
            Ok(true) => woken += 1,
            Ok(false) => {}
            Err(e) => {
                woken += 1;
                if errors::is_jump(&e) {
                    // Wake the rest while the jump is pending.
                    let rest = n - woken;
                    return Err(sys::cleanup_during_jump(&target.ruby(), e, || {
                        // The jump outranks whatever else fails here.
                        let _ = wake_from(cell, list, rest, end, broadcast);
                    }));
                }
                // `fatal` (a deadlock found meanwhile) outranks an
                // ordinary exception; otherwise the first is kept.
                first_err = Some(match first_err.take() {
                    Some(prev) => errors::more_urgent(prev, e),
                    None => e,
                });
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(woken),
    }
}

/// `first`, then `next` whatever `first` gave (an ensure clause): both run,
/// and the more urgent error is returned (see `errors::more_urgent`).
pub fn finally(
    ruby: &Ruby,
    first: Result<(), Error>,
    next: impl FnOnce() -> Result<(), Error>,
) -> Result<(), Error> {
    match first {
        Ok(()) => next(),
        Err(e) => Err(after_error(ruby, e, next)),
    }
}

/// Runs `next` after the error `e` (an ensure clause) and returns the more
/// urgent error. After a jump, `next` runs as Ruby runs ensure clauses
/// (`sys::cleanup_during_jump`), and the jump outranks anything it meets.
pub fn after_error(ruby: &Ruby, e: Error, next: impl FnOnce() -> Result<(), Error>) -> Error {
    if errors::is_jump(&e) {
        return sys::cleanup_during_jump(ruby, e, || {
            let _ = next();
        });
    }
    match next() {
        Ok(()) => e,
        Err(n) => errors::more_urgent(e, n),
    }
}

/// `wake_n` for ConditionVariable#signal's (`n` 1) and #broadcast's (`n`
/// [`ALL`], see [`broadcast`]) hot path, which may not raise: wakes up to
/// `n` of the longest waiters as long as each blocks without a fiber
/// scheduler (a thread's wake-up calls nothing that can raise). Returns
/// how many it woke, or `None` once the next waiter has a scheduler (it
/// stays on the list): the caller then wakes the rest through `wake_n`.
pub fn wake_plain<S>(
    cell: &GvlCell<S>,
    list: fn(&mut S) -> &mut WaitList,
    n: usize,
) -> Option<usize> {
    // Signaled in batches (`signal_front_plain`), each woken before the
    // next is taken; a dead thread's wake-up goes to the next waiter.
    const BATCH: usize = 16;
    let mut woken = 0;
    // A broadcast's parked waiters are relayed (sys::park, `RELAY`).
    let mut relay = sys::Relay::default();
    while woken < n {
        let mut batch = [None; BATCH];
        let want = (n - woken).min(BATCH);
        let (got, refused) = cell.with(|s| {
            list(s).signal_front_plain(&mut batch[..want], (n == ALL).then_some(&mut relay))
        });
        for t in batch[..got].iter().flatten() {
            if t.wake_thread() {
                woken += 1;
            }
        }
        if refused.is_some() {
            return None;
        }
        if got < want {
            break;
        }
    }
    Some(woken)
}

/// Wakes the longest waiter on the list, if any.
pub fn wake_one<S>(cell: &GvlCell<S>, list: fn(&mut S) -> &mut WaitList) -> Result<(), Error> {
    wake_n(cell, list, 1).map(drop)
}

/// Wakes the waiter that enlisted last (see `End::Newest`).
pub fn wake_newest<S>(cell: &GvlCell<S>, list: fn(&mut S) -> &mut WaitList) -> Result<(), Error> {
    wake_from(cell, list, 1, End::Newest, false).map(drop)
}

/// ConditionVariable#broadcast: wakes every waiter on the list; a waiter
/// that then leaves with an error passes nothing on (see `enlisted`).
pub fn broadcast<S>(cell: &GvlCell<S>, list: fn(&mut S) -> &mut WaitList) -> Result<(), Error> {
    wake_from(cell, list, ALL, End::Oldest, true).map(drop)
}

/// Wakes every waiter on the list.
pub fn wake_all<S>(cell: &GvlCell<S>, list: fn(&mut S) -> &mut WaitList) -> Result<(), Error> {
    wake_n(cell, list, ALL).map(drop)
}

/// Converts a `timeout:` argument the way Ruby 3.2's Queue does
/// (`queue_timeout2hrtime`): nil means no timeout, an Integer is seconds,
/// anything else goes through `Float()`-like `rb_num2dbl` (same TypeError).
/// Negative and NaN values mean "do not wait"; a timeout too large for the
/// clock means "no deadline".
pub fn timeout_duration(timeout: Value) -> Result<Option<Duration>, Error> {
    if timeout.is_nil() {
        return Ok(None);
    }
    Ok(Some(timeout_from_secs(sys::num2dbl(timeout)?)))
}

/// Seconds as a wait's length: NaN and negatives do not wait, too large
/// for a Duration (infinity included) is "no deadline" (`Duration::MAX`,
/// which `deadline_after` turns into None).
fn timeout_from_secs(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
}

/// The monotonic deadline for a timeout (None: wait forever).
pub fn deadline_after(d: Option<Duration>) -> Option<Instant> {
    d.and_then(|d| Instant::now().checked_add(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_convert_as_ruby_3_2s_queue_does() {
        assert_eq!(timeout_from_secs(0.0), Duration::ZERO);
        assert_eq!(timeout_from_secs(-0.0), Duration::ZERO);
        assert_eq!(timeout_from_secs(-1.5), Duration::ZERO);
        assert_eq!(timeout_from_secs(f64::NAN), Duration::ZERO);
        assert_eq!(timeout_from_secs(f64::NEG_INFINITY), Duration::ZERO);
        assert_eq!(timeout_from_secs(1e-9), Duration::from_nanos(1));
        assert_eq!(timeout_from_secs(0.25), Duration::from_millis(250));
        assert_eq!(timeout_from_secs(3.0), Duration::from_secs(3));
        assert_eq!(timeout_from_secs(f64::INFINITY), Duration::MAX);
        assert_eq!(timeout_from_secs(1e300), Duration::MAX);
        // Too far for the clock: no deadline rather than a wrapped one.
        assert_eq!(deadline_after(Some(Duration::MAX)), None);
        assert_eq!(deadline_after(None), None);
        let soon = deadline_after(Some(Duration::from_secs(1))).unwrap();
        assert!(soon > Instant::now());
    }
}
