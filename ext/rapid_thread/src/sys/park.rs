//! Parking: the first phase of a wait where no CPU is free to spin on,
//! and the end of a spin that saw no wake-up (`park_after_spin`, inside
//! the spin's own blocking region). The waiter gives up the GVL and
//! sleeps on a futex word in its `Waiter`
//! until its waker sets the word and wakes it, an interrupt's unblock
//! function wakes it, or a time limit passes; then it takes the GVL back
//! as any thread leaving a blocking region does.
//!
//! Why not Ruby's sleep at once: Ruby wakes a sleeping thread by signalling
//! a condition variable while holding the thread's interrupt lock, so on a
//! busy CPU the woken thread often runs at once, finds the lock held, and
//! sleeps again before it can go on (docs/design-details.md, "Parking:
//! where no CPU is free to spin on").
//! A futex word needs no lock.
//!
//! Why not park for good: a parked thread is in a blocking region, which
//! Ruby's deadlock detector does not count as asleep. The limit (see
//! `crate::spin`) hands the wait to Ruby's sleep in time.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::*;

/// A park where the wake-up comes from this thread's own CPU (one CPU, or
/// a local waker: crate::spin's `plan`). Woken, the thread would run at
/// once, preempting its waker, which holds the GVL: it finds the GVL
/// taken, sleeps again, and waits for the waker to give it up; two
/// context switches more per hand-off. With one CPU and a calm list
/// (`calm`: `WaitList::calm`, hand-offs like a ping-pong's, whose waker
/// blocks right after the wake-up) the parked thread does not preempt on
/// wake-up (`WakeupPreemptionOff`): the waker runs on until it blocks,
/// and the woken thread then takes the free GVL. A pinned
/// condition-variable ping-pong made 2 context switches per round trip
/// so, 4.8 before (Ruby 3.1.2). Where many threads wait, or the waker
/// runs on, it cost more than it saved: there a woken thread that runs at
/// once queues for the GVL in wake-up order (docs/design-details.md,
/// "Parking: wake-ups that do not preempt").
fn park_phase(w: &Waiter, limit: Duration, calm: bool) {
    // A spinner waiting for its waker to give up the GVL may be waiting
    // for us.
    note_gvl_release();
    let _calm = calm.then(WakeupPreemptionOff::new);
    sleep_on_word(w, limit);
}

/// Sleeps on the waiter's futex word until it is set or `limit` passes.
fn sleep_on_word(w: &Waiter, limit: Duration) {
    let start = Instant::now();
    // The waker sets the word before it wakes the futex, and the unblock
    // function too, so a wake-up or interrupt that lands between the look
    // at the word and FUTEX_WAIT makes it return at once.
    while w.park_word.load(Ordering::SeqCst) == 0 {
        let spent = start.elapsed();
        if spent >= limit {
            break;
        }
        futex_wait(&w.park_word, 0, Some(limit - spent));
    }
}

/// The end of a spin that saw no wake-up, still without the GVL: parks
/// for up to `limit` (see `crate::spin`, "A spin that ends without").
/// The waker wakes the futex if it sees `parking`, and if it does not,
/// this sees its signal (both SeqCst) and does not sleep. Whether it
/// slept.
pub(super) fn park_after_spin(w: &Waiter, limit: Duration) -> bool {
    w.parking.store(true, Ordering::SeqCst);
    if w.signaled.load(Ordering::SeqCst) || w.interrupted.load(Ordering::SeqCst) {
        return false;
    }
    sleep_on_word(w, limit);
    true
}

/// The unblock function of a waiter's spin or park: marks it interrupted
/// and, if it is parked, wakes it. Only atomics and a word's wake-up
/// (`futex_wake`; a lock in the portable build): safe from another
/// thread, which is where Ruby calls unblock functions (the interrupting
/// thread or the timer thread, under the target's interrupt lock).
///
/// # Safety
/// `arg` is the waiter, alive while its wait runs (Ruby calls the unblock
/// function only while the wait is in its blocking region).
pub(super) unsafe extern "C" fn interrupt_waiter(arg: *mut c_void) {
    // SAFETY: the caller's promise: `arg` is a live waiter.
    let w = unsafe { &*(arg as *const Waiter) };
    w.interrupted.store(true, Ordering::SeqCst);
    w.park_word.fetch_or(PARK_INTERRUPTED, Ordering::SeqCst);
    futex_wake(&w.park_word, 1);
}

/// `Waiter::park_word` bits: signaled by a waker, or interrupted.
pub(super) const PARK_SIGNALED: u32 = 1;
const PARK_INTERRUPTED: u32 = 2;

/// Parks the current thread with the GVL released until `w` is signaled,
/// an interrupt arrives (Thread#raise, kill, a signal, Thread#wakeup) or
/// `limit` passes; without preempting its waker when woken if `calm`
/// (see `park_phase`). Returns with the GVL held; never raises (the
/// caller runs pending interrupts; `Waiter::interrupted` tells whether one
/// ended it).
pub fn park_without_gvl(w: &Waiter, limit: Duration, calm: bool) {
    // A Waiter serves one wait: an interrupt flag left from an earlier
    // phase would end this one at once.
    debug_assert!(!w.interrupted.load(Ordering::SeqCst));
    // Under the GVL, as the waker reads it: set from before the GVL is
    // released until it is taken back.
    w.parked.set(true);
    // SAFETY: the waiter outlives the call; the unblock function only
    // touches the waiter's atomics and wakes its futex; park_phase
    // does not touch Ruby.
    unsafe {
        call_without_gvl(
            || park_phase(w, limit, calm),
            interrupt_waiter,
            w as *const Waiter as *const c_void,
        )
    };
    w.parked.set(false);
    // Its list judges how soon a woken parked waiter went on (a park that
    // timed out says nothing of that).
    w.parked_first.set(w.signaled());
}

/// Whether wake-ups record their waker's CPU (`waker_cpu`): set once at
/// load by the spin policy, which reads it only to decide on parking.
static WAKER_CPU_WANTED: AtomicBool = AtomicBool::new(true);

pub fn set_waker_cpu_wanted(wanted: bool) {
    WAKER_CPU_WANTED.store(wanted, Ordering::Relaxed);
}

/// The CPU a waker runs on, for the park decision on a busy machine; -1
/// (unknown) where that decision is never made (Ruby 3.3+, where only one
/// CPU parks), which saves a `sched_getcpu` per wake-up.
pub fn waker_cpu() -> i32 {
    if WAKER_CPU_WANTED.load(Ordering::Relaxed) {
        current_cpu()
    } else {
        -1
    }
}

/// Whether the extension was built for Ruby 3.3 or later (its thread
/// scheduler, M:N threads).
pub fn ruby_3_3_or_later() -> bool {
    (
        rb_sys::RUBY_API_VERSION_MAJOR,
        rb_sys::RUBY_API_VERSION_MINOR,
    ) >= (3, 3)
}
