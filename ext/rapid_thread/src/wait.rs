//! Waiting and waking, shared by every class.
//!
//! A blocking operation that cannot proceed calls [`park`]: it enlists an
//! on-stack [`Waiter`] on one of the object's wait lists, blocks, and leaves
//! the list on every exit path (a drop guard plays the role of the
//! `rb_ensure` cleanup in thread_sync.c). The caller re-checks its
//! condition after every wake-up.
//!
//! Blocking is two-phase (docs/design.md, "Hand-off"):
//! 1. with the GVL released, yield the CPU for up to `spin_us` waiting for
//!    the signal, then for up to `gvl_spin_us` until the waker has given
//!    up the GVL;
//! 2. otherwise fall back to Ruby's own sleep (`rb_thread_sleep_deadly`),
//!    which the deadlock detector sees and every interrupt wakes.
//!
//! A lone thread, or a fiber with a scheduler, skips phase 1.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use magnus::{Error, Value};
use rb_sys::VALUE;

use crate::sys::{self, GvlCell, WaitList, Waiter, GVL_SPIN_US, QNIL, SPIN_US};

/// How a wait ended, seen from the waiter.
pub struct Parked {
    /// A waker chose this waiter (it may still have failed with an error).
    pub signaled: bool,
    /// An interrupt (Thread#raise, kill, ...) to re-raise after cleanup.
    pub result: Result<(), Error>,
}

/// Blocks the current thread (or fiber) on the list chosen by `list` until
/// it is woken, `deadline` passes or an interrupt arrives. The waiter is off
/// the list and out of its waiting count when this returns.
pub fn park<S>(
    cell: &GvlCell<S>,
    list: fn(&mut S) -> &mut WaitList,
    blocker: VALUE,
    deadline: Option<Instant>,
) -> Parked {
    struct Leave<'a, S> {
        cell: &'a GvlCell<S>,
        list: fn(&mut S) -> &mut WaitList,
        w: &'a Waiter,
    }
    impl<S> Drop for Leave<'_, S> {
        fn drop(&mut self) {
            self.cell.with(|s| (self.list)(s).leave(self.w));
        }
    }

    let w = Waiter::current();
    // SAFETY (contract of `enter`): `w` stays on this frame until the guard
    // below calls `leave`, on every path including a panic.
    cell.with(|s| unsafe { list(s).enter(&w) });
    let guard = Leave { cell, list, w: &w };
    let result = block(&w, blocker, deadline);
    drop(guard);
    Parked {
        signaled: w.signaled(),
        result,
    }
}

fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

fn block(w: &Waiter, blocker: VALUE, deadline: Option<Instant>) -> Result<(), Error> {
    if remaining(deadline).is_some_and(|left| left.is_zero()) {
        return Ok(());
    }
    if w.scheduler != QNIL {
        return sys::scheduler_block(w, blocker, remaining(deadline));
    }
    let spin_us = SPIN_US.load(Ordering::Relaxed);
    if spin_us > 0 && !sys::thread_alone() {
        let mut spin = Duration::from_micros(spin_us as u64);
        if let Some(left) = remaining(deadline) {
            spin = spin.min(left);
        }
        let gvl = Duration::from_micros(GVL_SPIN_US.load(Ordering::Relaxed) as u64);
        sys::spin_without_gvl(w, spin, gvl);
        // Interrupts that arrived while spinning are raised here.
        sys::check_ints()?;
        if w.signaled() {
            return Ok(());
        }
    }
    w.set_sleeping();
    // We are about to give up the GVL in Ruby's sleep: let a signaled
    // spinner stop waiting for it.
    sys::note_gvl_release();
    loop {
        if w.signaled() {
            return Ok(());
        }
        match remaining(deadline) {
            None => sys::ruby_sleep(None)?,
            Some(left) if left.is_zero() => return Ok(()),
            Some(left) => sys::ruby_sleep(Some(left))?,
        }
    }
}

/// Wakes the longest waiter on the list, if any. Returns whether one was
/// woken.
pub fn wake_one<S>(
    cell: &GvlCell<S>,
    list: fn(&mut S) -> &mut WaitList,
    blocker: VALUE,
) -> Result<bool, Error> {
    loop {
        let next = cell.with(|s| {
            list(s).pop_front().map(|w| {
                let target = (w.thread, w.scheduler, w.fiber, w.is_sleeping());
                w.signal();
                target
            })
        });
        let Some((thread, scheduler, fiber, sleeping)) = next else {
            return Ok(false);
        };
        if sys::wake(thread, scheduler, fiber, sleeping, blocker)? {
            return Ok(true);
        }
    }
}

/// Wakes every waiter on the list.
pub fn wake_all<S>(
    cell: &GvlCell<S>,
    list: fn(&mut S) -> &mut WaitList,
    blocker: VALUE,
) -> Result<(), Error> {
    while wake_one(cell, list, blocker)? {}
    Ok(())
}

/// Converts a `timeout:` argument the way Ruby 3.2's Queue does
/// (`queue_timeout2hrtime`): nil means no timeout, an Integer is seconds,
/// anything else goes through `Float()`-like `rb_num2dbl` (same TypeError).
/// Negative and NaN values mean "do not wait"; a timeout too large for the
/// clock means "no deadline".
pub fn timeout_duration(timeout: Value) -> Result<Option<Duration>, Error> {
    let t = sys::raw(timeout);
    if t == QNIL {
        return Ok(None);
    }
    let secs = sys::num2dbl(t)?;
    if secs.is_nan() || secs <= 0.0 {
        return Ok(Some(Duration::ZERO));
    }
    Ok(Some(
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX),
    ))
}

/// The monotonic deadline for a timeout (None: wait forever).
pub fn deadline_after(d: Option<Duration>) -> Option<Instant> {
    d.and_then(|d| Instant::now().checked_add(d))
}
