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

#[cfg(ruby_thread_event_hooks)]
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

#[cfg(ruby_thread_event_hooks)]
use magnus::rb_sys::protect;
use magnus::{Error, Ruby};

use super::*;

/// A park where the wake-up comes from this thread's own CPU (one CPU, or
/// a local waker: crate::spin's `plan`). Woken, the thread would run at
/// once, preempting its waker, which holds the GVL: it finds the GVL
/// taken, sleeps again, and waits for the waker to give it up; two
/// context switches more per hand-off. With one CPU and a calm list
/// (`WaitList::calm`, hand-offs like a ping-pong's, whose waker blocks
/// right after the wake-up) the wake-up does not preempt ([`Calm`]): the
/// waker runs on until it gives up the GVL, and the woken thread then
/// takes it. A pinned condition-variable ping-pong made 2 context switches
/// per round trip so, 4.8 before (Ruby 3.1.2). Where many threads wait, or
/// the waker runs on, it cost more than it saved: there a woken thread
/// that runs at once queues for the GVL in wake-up order
/// (docs/design-details.md, "Parking: wake-ups that do not preempt").
fn park_phase(w: &Waiter, limit: Duration, calm: Calm, start_ns: u64) {
    // A spinner waiting for its waker to give up the GVL may be waiting
    // for us.
    note_gvl_release();
    let _calm = (calm == Calm::Batch).then(WakeupPreemptionOff::new);
    sleep_on_word(w, limit, start_ns);
}

/// How a calm park's wake-up keeps from preempting its waker.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Calm {
    /// It may preempt (not a calm park).
    No,
    /// The parked thread is SCHED_BATCH while it sleeps
    /// (`WakeupPreemptionOff`): two system calls a park, 0.8-0.9 µs.
    Batch,
    /// The waker defers the futex wake-up until it gives up the GVL
    /// ([`defer_wake`]): no system call but the wake-up itself. Where Ruby
    /// reports a thread's suspensions (Ruby 3.3+), not under M:N threads,
    /// and once waits that may park are a large share of the process's
    /// waits ([`CALM_WINDOW`]); there any list's wait parks so (see
    /// `RELAY`).
    Deferred,
}

// Deferred wake-ups. A calm park's waker holds the GVL, and on one CPU the
// woken thread can do nothing but queue for it until the waker gives it
// up; so the waker keeps the futex word to wake (one, in its native
// thread's storage; any more go to the relay, `RELAY`) and wakes it when
// it gives up the GVL: at the start of its own park, spin or other
// blocking region (`call_without_gvl`), where the woken thread then takes
// the free GVL, or at any other suspension (an IO wait, a sleep, a Mutex,
// the timer's switch, its end: Ruby's hook, [`wake_deferred_on_suspension`]),
// which Ruby reports before it hands the GVL on. On a busy CPU the woken
// thread would have found the GVL taken. A waker that holds the GVL for
// longer than the park's limit (10 ms; a CPU quota's period, crate::spin)
// finds its waiter gone on by itself: the word was set at once. The
// wake-up may then reach a word whose waiter has left: FUTEX_WAKE uses the
// address only as a key, and futex(2) has every waiter take a wake-up as
// possibly spurious, as ours do.
#[cfg(ruby_thread_event_hooks)]
thread_local! {
    /// The futex word (a tagged address, see `TAGS`) whose wake-up this
    /// thread deferred; 0: none.
    static DEFERRED: Cell<usize> = const { Cell::new(0) };
    /// This thread is in `call_without_gvl`'s blocking region, whose body
    /// wakes the deferred word once the GVL is given up.
    static OWN_REGION: Cell<bool> = const { Cell::new(false) };
}

/// Sets a parked waiter's word and wakes it, or, if the waiter's park
/// asked so (`Waiter::deferred`), leaves the wake-up to the moment this
/// thread gives up the GVL, or to the relay ([`RELAY`]: any but the one
/// this thread keeps). Within a broadcast
/// (`relay`), the first parked waiter that asked is held; a second has it
/// woken at once and is relayed, as the rest are. GVL held.
pub(super) fn wake_parked(w: &Waiter, relay: Option<&mut Relay>) {
    w.park_word.fetch_or(PARK_SIGNALED, Ordering::SeqCst);
    if w.deferred.get() {
        let word = w.park_word.as_ptr() as usize | if w.list_crowded() { CROWD_TAG } else { 0 };
        let taken = match relay {
            Some(r) if r.started => queue_relay(word),
            Some(r) => match r.first.replace(word) {
                None => true,
                Some(first) => {
                    r.first = None;
                    r.started = true;
                    futex_wake_key(first & !TAGS);
                    queue_relay(word)
                }
            },
            None => defer_or_relay(word),
        };
        if taken {
            return;
        }
    }
    futex_wake(&w.park_word, 1);
}

/// Defers the wake-up of a tagged futex word (see [`defer_wake`]), or
/// relays it; false if neither took it.
fn defer_or_relay(word: usize) -> bool {
    defer_wake(word) || queue_relay(word)
}

/// Keeps a tagged futex word to wake later; false if this thread keeps
/// one that this word may not displace (which words go where: `RELAY`).
#[cfg(ruby_thread_event_hooks)]
fn defer_wake(word: usize) -> bool {
    DEFERRED.with(|deferred| {
        let kept = deferred.get();
        if kept != 0 {
            // Only a crowd's word that never gave way gives way, and
            // only to a calm list's.
            if kept & TAGS != CROWD_TAG || word & CROWD_TAG != 0 {
                return false;
            }
            relay_first(kept | KEPT_TAG);
        }
        deferred.set(word);
        true
    })
}

/// Tags on a futex word's address in `DEFERRED`, `RELAY` and `Relay`
/// (futex words are 4-byte aligned, so an address has neither bit): a
/// crowded list's waiter's, and one that gave way to a calm list's once.
const CROWD_TAG: usize = 1;
const KEPT_TAG: usize = 2;
const TAGS: usize = CROWD_TAG | KEPT_TAG;

/// Before Ruby 3.3 no park asks to defer (`deferring`).
#[cfg(not(ruby_thread_event_hooks))]
fn defer_wake(_: usize) -> bool {
    false
}

// Relayed wake-ups (Ruby 3.3+, where wake-ups are deferred). On one CPU
// every active wait parks there, whatever its list (`deferral_possible`;
// not only calm lists, as elsewhere), and its waker wakes one waiter per
// suspension (the word it keeps, `DEFERRED`); the others queue here, in
// order, and every park that ends (`park_without_gvl`, GVL held) takes the
// next word and defers its wake-up until its own thread gives up the GVL.
// So each woken thread runs when the one before it gives up the GVL and
// finds it free, as in a ping-pong, and as Ruby 3.3's own scheduler hands
// the GVL to a sleeping thread it woke; a futex wake-up of several at once
// had each run only to find the GVL taken and queue for it. That holds
// for two woken at one suspension too, wherever two can run at once (a
// CPU quota of at most one CPU on a machine of several), so a thread
// keeps one (docs/design-details.md, "One deferred wake-up a thread").
// Which words go where:
// - a crowded list's waiter (`WaitList::crowded`: many producers or
//   consumers): kept if this thread keeps none, else here;
// - a calm list's waiter: kept if this thread keeps none, or only a
//   crowd's word, which goes back to the head of the queue (a consumer
//   that wakes its producer and the next consumer would have them race),
//   but only once (two threads of a calm ping-pong would pass it back and
//   forth until its park's limit); else here;
// - a broadcast's: the first is held (`Relay`); if a second comes, the
//   first is woken at once and the rest queue here, and if none comes it
//   is deferred as a signal's would be. Woken at once, the first of a
//   crowd queues for the GVL, which a broadcaster that then polls with
//   `Thread.pass` hands it (with nobody queued for the GVL a pass yields
//   nothing, and Ruby reports no suspension: a deferred first waited for
//   the parks' limit, every round).
// A waiter whose wake-up is deferred behind a thread that keeps the GVL
// (a `Thread.pass` loop that waits for it, or Ruby code that runs on past
// Ruby's time slice: a parked waiter is not queued for the GVL, so
// nothing preempts its waker) goes on by its park's limit
// (`spin_stats[:park_timeouts]`). Nothing waits on the relay alone:
// every word was set under the GVL when its waiter was woken, and a park
// ends by itself within its limit (10 ms, or a quota's period). Every
// queued word's own park takes one word when it ends, however it ends
// (a word put back at the head is matched by the calm waiter's park that
// took its place), so the queue empties as they go on; a word whose
// waiter went on first (its limit) gets a FUTEX_WAKE that is spurious,
// as a deferred one can be (see above), and the word its park took
// instead waits one park more. So a waiter can wait behind the queue,
// at most its park's limit. Where wake-ups are not deferred, nothing is
// relayed: on Ruby 3.1/3.2 parked waiters are woken at once (a calm
// list's without preempting its waker, `Calm::Batch`); under M:N threads
// only calm lists' waits park, and others sleep in Ruby: woken at once,
// a crowd's parked waiters lost to Ruby's sleep (docs/design-details.md,
// "Relayed wake-ups").

/// One broadcast's wake-ups (see `RELAY`): the first of its parked waiters
/// that would defer is held here; if a second comes, the first is woken
/// at once and the rest are relayed, and if none does, it is deferred as
/// a signal's would be when the broadcast ends (the drop).
#[derive(Default)]
pub struct Relay {
    /// The held first word (tagged, see `TAGS`).
    first: Option<usize>,
    /// A second came: every later word is relayed.
    started: bool,
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(word) = self.first.take() {
            if !defer_or_relay(word) {
                futex_wake_key(word & !TAGS);
            }
        }
    }
}

/// The relayed futex words (tagged, see `TAGS`), oldest first, of the
/// fork generation `gen` (a child has none of its parent's waiters).
#[cfg(all(ruby_thread_event_hooks, not(test)))]
struct RelayQueue {
    gen: u64,
    words: std::collections::VecDeque<usize>,
}

#[cfg(all(ruby_thread_event_hooks, not(test)))]
static RELAY: GvlStatic<RelayQueue> = GvlStatic::new(RelayQueue {
    gen: 0,
    words: std::collections::VecDeque::new(),
});

/// Whether `RELAY` may hold a word: every park's end looks here first,
/// without the GVL check that `RELAY` costs.
#[cfg(all(ruby_thread_event_hooks, not(test)))]
static RELAY_QUEUED: AtomicBool = AtomicBool::new(false);

/// How many wake-ups were relayed: words queued on the relay, each once
/// (`RapidThread.spin_stats`; a word whose waiter went on by itself
/// first counts too).
static RELAYED: AtomicU64 = AtomicU64::new(0);

pub fn relayed_wake_ups() -> u64 {
    RELAYED.load(Ordering::Relaxed)
}

/// How many parks (or spins' parks) ran out their limit before their
/// wake-up came (`RapidThread.spin_stats`): their waiter went on to
/// Ruby's sleep, or found its word set by itself (a deferred or relayed
/// wake-up that came late).
static PARK_TIMEOUTS: AtomicU64 = AtomicU64::new(0);

pub fn park_timeouts() -> u64 {
    PARK_TIMEOUTS.load(Ordering::Relaxed)
}

/// Runs `f` on the relay's words of this fork generation (a child
/// forgets its parent's), and notes in `RELAY_QUEUED` whether any are
/// left. GVL held.
#[cfg(all(ruby_thread_event_hooks, not(test)))]
fn with_relay<R>(f: impl FnOnce(&mut std::collections::VecDeque<usize>) -> R) -> R {
    RELAY.with(|q| {
        let gen = fork_generation();
        if q.gen != gen {
            q.gen = gen;
            q.words.clear();
        }
        let r = f(&mut q.words);
        RELAY_QUEUED.store(!q.words.is_empty(), Ordering::Relaxed);
        r
    })
}

/// Queues a tagged futex word on the relay (counted in `RELAYED`). GVL
/// held.
#[cfg(all(ruby_thread_event_hooks, not(test)))]
fn queue_relay(word: usize) -> bool {
    RELAYED.fetch_add(1, Ordering::Relaxed);
    with_relay(|words| words.push_back(word));
    true
}

/// Puts a tagged futex word back at the head of the relay. GVL held.
#[cfg(all(ruby_thread_event_hooks, not(test)))]
fn relay_first(word: usize) {
    with_relay(|words| words.push_front(word));
}

/// Before Ruby 3.3 nothing defers, so nothing is relayed; nor in the unit
/// tests, which run without Ruby (the relay is `RELAY`, a GVL-checked
/// static).
#[cfg(any(not(ruby_thread_event_hooks), test))]
fn queue_relay(_: usize) -> bool {
    false
}

#[cfg(all(ruby_thread_event_hooks, test))]
fn relay_first(word: usize) {
    futex_wake_key(word & !TAGS);
}

/// At the end of a park (GVL held): defers the wake-up of the next relayed
/// waiter until this thread gives up the GVL (or wakes it now if this
/// thread keeps a word already).
#[cfg(all(ruby_thread_event_hooks, not(test)))]
fn relay_next() {
    if !RELAY_QUEUED.load(Ordering::Relaxed) {
        return;
    }
    if let Some(word) = with_relay(|words| words.pop_front()) {
        if !defer_wake(word) {
            futex_wake_key(word & !TAGS);
        }
    }
}

#[cfg(any(not(ruby_thread_event_hooks), test))]
#[inline(always)]
fn relay_next() {}

/// Whether wake-ups are deferred or may yet be (Ruby 3.3+, not under M:N
/// threads): there any wait may park as a calm one does (see `RELAY`).
#[cfg(ruby_thread_event_hooks)]
pub fn deferral_possible() -> bool {
    defer_state::STATE.load(Ordering::Relaxed) != defer_state::OFF
}

#[cfg(not(ruby_thread_event_hooks))]
pub fn deferral_possible() -> bool {
    false
}

/// Wakes the futex word this thread deferred, keeping errno (the wait
/// that follows may read it). Not for a signal handler (only Ruby's hook
/// and our own regions call it).
#[cfg(ruby_thread_event_hooks)]
pub(super) fn wake_deferred() {
    keeping_errno(|| {
        let addr = DEFERRED.with(|deferred| deferred.replace(0)) & !TAGS;
        if addr != 0 {
            futex_wake_key(addr);
        }
    });
}

/// Without Ruby's suspension hook nothing is deferred (`deferring`): every
/// blocking region would otherwise pay for a look at an empty word.
#[cfg(not(ruby_thread_event_hooks))]
#[inline(always)]
pub(super) fn wake_deferred() {}

/// A forked child has none of the parent's other threads to wake.
#[cfg(ruby_thread_event_hooks)]
pub(super) fn forget_deferred() {
    DEFERRED.with(|deferred| deferred.set(0));
}

#[cfg(not(ruby_thread_event_hooks))]
pub(super) fn forget_deferred() {}

/// Runs `f` (which releases the GVL and wakes the deferred word itself)
/// with Ruby's suspension hook told to leave it.
#[cfg(ruby_thread_event_hooks)]
pub(super) fn in_own_region<R>(f: impl FnOnce() -> R) -> R {
    let outer = OWN_REGION.replace(true);
    let r = f();
    OWN_REGION.set(outer);
    r
}

/// Without the hook there is nobody to tell.
#[cfg(not(ruby_thread_event_hooks))]
#[inline(always)]
pub(super) fn in_own_region<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// When the process starts deferring. Ruby's hook, once installed, costs
/// every thread's GVL events a read lock on Ruby's hook list, which only
/// deferred wake-ups repay: vm_thread_condvar2 (pinned, Ruby 3.4.5), one
/// calm wait in a hundred (its other waits sleep in Ruby), ran 2% slower
/// with it. A calm park that does not defer (the batch policy) cost
/// condvar2 another 1.5% against Ruby's sleep (docs/design-details.md,
/// "Where condvar2's time goes on one CPU"). So on Ruby 3.3+ the waits
/// that would park (on one CPU, on an active list; "calm" here, whatever
/// their list, see `RELAY`) sleep in Ruby and are counted, in windows of
/// [`CALM_WINDOW`]; from the first window in which they were at least a
/// quarter of the GVL releases of the gem's waits ([`GVL_RELEASES`]) they
/// park and defer their wake-ups: a ping-pong, with two such waits a round
/// trip, gets there in a few milliseconds. What keeps a process below it
/// is waits that find their lists dormant (idle workers).
#[cfg(ruby_thread_event_hooks)]
const CALM_WINDOW: u64 = 256;

/// Where the process stands with deferred wake-ups (Ruby 3.3+).
#[cfg(ruby_thread_event_hooks)]
mod defer_state {
    use std::sync::atomic::{AtomicU64, AtomicU8};
    /// Counting calm waits, which sleep in Ruby.
    pub const UNTRIED: u8 = 0;
    /// A window passed: the next calm park installs Ruby's hook.
    pub const WANTED: u8 = 1;
    /// Deferring.
    pub const ON: u8 = 2;
    /// Refused (M:N threads): calm waits park with the batch policy, as
    /// before deferred wake-ups existed (not measured against Ruby's sleep
    /// under M:N).
    pub const OFF: u8 = 3;
    pub static STATE: AtomicU8 = AtomicU8::new(UNTRIED);
    pub static CALM_WAITS: AtomicU64 = AtomicU64::new(0);
    pub static WINDOW_RELEASES: AtomicU64 = AtomicU64::new(0);
}

/// Whether a calm wait on one CPU should park (`crate::spin`'s plan asks,
/// GVL held): on Ruby 3.3+, once its wake-up will be deferred (see
/// [`CALM_WINDOW`]); until then it counts the wait, which sleeps in Ruby.
#[cfg(ruby_thread_event_hooks)]
pub fn calm_park_pays() -> bool {
    use defer_state::*;
    if STATE.load(Ordering::Relaxed) != UNTRIED {
        return true;
    }
    if CALM_WAITS.fetch_add(1, Ordering::Relaxed) + 1 < CALM_WINDOW {
        return false;
    }
    CALM_WAITS.store(0, Ordering::Relaxed);
    let now = GVL_RELEASES.load(Ordering::Relaxed);
    let released = now.saturating_sub(WINDOW_RELEASES.swap(now, Ordering::Relaxed));
    if released > 4 * CALM_WINDOW {
        return false;
    }
    STATE.store(WANTED, Ordering::Relaxed);
    true
}

/// Before Ruby 3.3 calm parks keep the batch policy, which pays there.
#[cfg(not(ruby_thread_event_hooks))]
pub fn calm_park_pays() -> bool {
    true
}

/// Whether this calm park defers its wake-up ([`Calm::Deferred`]): installs
/// Ruby's suspension hook for the first one after a window passed (GVL
/// held: the handle).
#[cfg(ruby_thread_event_hooks)]
fn deferring(_: &Ruby) -> Result<bool, Error> {
    use defer_state::*;
    match STATE.load(Ordering::Relaxed) {
        WANTED => {
            let on = !mn_threads();
            if on {
                // Ruby allocates the hook's entry, which can raise
                // (NoMemoryError): then calm waits count a window again.
                // SAFETY: the GVL is held (the handle); the hook only reads
                // and writes this thread's own deferred word and makes system
                // calls.
                let installed = protect(|| unsafe {
                    rb_sys::rb_internal_thread_add_event_hook(
                        Some(wake_deferred_on_suspension),
                        rb_sys::RUBY_INTERNAL_THREAD_EVENT_SUSPENDED,
                        std::ptr::null_mut(),
                    );
                    QNIL
                });
                if let Err(e) = installed {
                    STATE.store(UNTRIED, Ordering::Relaxed);
                    return Err(e);
                }
            }
            STATE.store(if on { ON } else { OFF }, Ordering::Relaxed);
            Ok(on)
        }
        s => Ok(s == ON),
    }
}

#[cfg(not(ruby_thread_event_hooks))]
fn deferring(_: &Ruby) -> Result<bool, Error> {
    Ok(false)
}

/// Ruby's hook on a thread's suspension, which runs on that thread (maybe
/// under Ruby's scheduler lock) before it gives up the GVL: wakes what it
/// deferred, unless the suspension begins one of our own regions. errno
/// is kept: the wait that follows may read it.
///
/// # Safety
/// Only Ruby calls it, as a `RUBY_INTERNAL_THREAD_EVENT_SUSPENDED` hook, on
/// the suspending native thread. It touches only that thread's own
/// deferred word and makes FUTEX_WAKE calls: no Ruby, no allocation, no lock.
#[cfg(ruby_thread_event_hooks)]
unsafe extern "C" fn wake_deferred_on_suspension(
    _: rb_sys::rb_event_flag_t,
    _: *const rb_sys::rb_internal_thread_event_data_t,
    _: *mut c_void,
) {
    if !OWN_REGION.get() {
        wake_deferred();
    }
}

/// Whether Ruby runs this process's main-Ractor threads M:N
/// (`RUBY_MN_THREADS`, read as Ruby 3.3+ reads it when it starts, from
/// the environment the process began with): there a native thread runs
/// many Ruby threads, and deferring was not measured.
#[cfg(ruby_thread_event_hooks)]
fn mn_threads() -> bool {
    let Ok(env) = std::fs::read("/proc/self/environ") else {
        // Unknown: the side that was measured.
        return true;
    };
    env.split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(b"RUBY_MN_THREADS="))
        .is_some_and(|v| atoi(v) > 0)
}

/// C's `atoi`, as Ruby reads RUBY_MN_THREADS: leading white space, a sign,
/// then digits (saturating where C's would overflow).
#[cfg(ruby_thread_event_hooks)]
fn atoi(v: &[u8]) -> i64 {
    let v = v.trim_ascii_start();
    let (negative, digits) = match v.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, v),
    };
    let n = digits
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .fold(0i64, |n, &d| {
            n.saturating_mul(10).saturating_add(i64::from(d - b'0'))
        });
    if negative {
        -n
    } else {
        n
    }
}

/// Sleeps on the waiter's futex word until it is set (and its wake-up
/// came) or `limit` passes from `start_ns` (`monotonic_ns`; a park's
/// limit so also covers giving up the GVL, where another thread may run
/// first).
fn sleep_on_word(w: &Waiter, limit: Duration, start_ns: u64) {
    // The waker sets the word before it wakes the futex, and the unblock
    // function too, so a wake-up or interrupt that lands between the look
    // at the word and FUTEX_WAIT makes it return at once.
    let mut ran_out = false;
    while w.park_word.load(Ordering::SeqCst) == 0 {
        let spent = Duration::from_nanos(monotonic_ns().saturating_sub(start_ns));
        if spent >= limit {
            ran_out = true;
            break;
        }
        ran_out = futex_wait(&w.park_word, 0, Some(limit - spent));
    }
    // A relayed or deferred word is set before its wake-up comes: the
    // wait that then finds it set may have run out its limit all the same.
    if ran_out {
        PARK_TIMEOUTS.fetch_add(1, Ordering::Relaxed);
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
    sleep_on_word(w, limit, monotonic_ns());
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
/// (see `park_phase`). Returns with the GVL held. Its only error is the
/// one raised while it sets deferred wake-ups up (`deferring`), before it
/// parks; the caller runs pending interrupts (`Waiter::interrupted` tells
/// whether one ended the park).
pub fn park_without_gvl(w: &Waiter, limit: Duration, calm: bool) -> Result<(), Error> {
    // A Waiter serves one wait: an interrupt flag left from an earlier
    // phase would end this one at once.
    debug_assert!(!w.interrupted.load(Ordering::SeqCst));
    let calm = match calm {
        false => Calm::No,
        true if deferring(&w.ruby())? => Calm::Deferred,
        // A wait on a list that is not calm parks only where its wake-up
        // is deferred (under M:N threads it sleeps in Ruby).
        true if !w.list_calm() => return Ok(()),
        true => Calm::Batch,
    };
    // Under the GVL, as the waker reads it: set from before the GVL is
    // released until it is taken back.
    w.parked.set(true);
    w.deferred.set(calm == Calm::Deferred);
    // The park's limit runs from here (the stamp saves a clock read).
    let start_ns = note_block();
    // SAFETY: the waiter outlives the call; the unblock function only
    // touches the waiter's atomics and wakes its futex; park_phase
    // does not touch Ruby.
    unsafe {
        call_without_gvl(
            || park_phase(w, limit, calm, start_ns),
            interrupt_waiter,
            w as *const Waiter as *const c_void,
        )
    };
    w.deferred.set(false);
    w.parked.set(false);
    relay_next();
    // Its list judges how soon a woken parked waiter went on (a park that
    // timed out says nothing of that).
    w.parked_first.set(w.signaled());
    Ok(())
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

#[cfg(all(test, ruby_thread_event_hooks))]
mod tests {
    use super::atoi;

    #[test]
    fn reads_ruby_mn_threads_as_c_atoi_does() {
        for (v, n) in [
            (&b"1"[..], 1),
            (b" +1", 1),
            (b"\t\n 2x", 2),
            (b"-1", -1),
            (b"0", 0),
            (b"", 0),
            (b"x1", 0),
            (b"+", 0),
            (b"99999999999999999999999", i64::MAX),
        ] {
            assert_eq!(atoi(v), n, "{:?}", String::from_utf8_lossy(v));
        }
    }
}
