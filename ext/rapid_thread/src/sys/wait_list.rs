//! Waiters and wait lists: intrusive, on the waiting thread's stack.

use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

use magnus::rb_sys::{protect, AsRawValue};
use magnus::{Error, Ruby, Value};
use rb_sys::VALUE;

use super::*;

// ---------------------------------------------------------------------------
// Waiters and wait lists
// ---------------------------------------------------------------------------

/// One blocked thread (or fiber). It lives on the blocked thread's stack,
/// which Ruby's GC scans conservatively, so the VALUEs in it stay alive and
/// pinned without marking, exactly as `struct sync_waiter` in thread_sync.c.
pub struct Waiter {
    prev: Cell<*const Waiter>,
    next: Cell<*const Waiter>,
    linked: Cell<bool>,
    /// The fork generation when it entered its list (see `leave`).
    fork_gen: Cell<u64>,
    /// Set (under the GVL) by the waker; read without the GVL by the spinner.
    pub(super) signaled: AtomicBool,
    /// Set by the unblock function (Thread#raise, kill, signals, ...).
    pub(super) interrupted: AtomicBool,
    /// `GVL_RELEASES` at wake time; the spinner waits for it to move.
    pub(super) wake_epoch: AtomicU64,
    /// When it was signaled (`monotonic_ns`, the list's `last_wake`): the
    /// spinner measures how late it noticed (the spin policy's evidence),
    /// and its list how soon it went on (`WaitList::calm`).
    pub(super) signaled_at: AtomicU64,
    /// True once the waiter may be in a Ruby sleep and needs a real wake-up.
    sleeping: Cell<bool>,
    /// The futex word a parked waiter sleeps on without the GVL
    /// (sys::park): 0 while it may sleep; the waker sets PARK_SIGNALED,
    /// the unblock function another bit.
    pub(super) park_word: AtomicU32,
    /// Set (under the GVL) while the waiter may be parked on `park_word`:
    /// its waker must set the word and wake the futex.
    pub(super) parked: Cell<bool>,
    /// Set (under the GVL) while it is in a park whose waker defers the
    /// futex wake-up until it gives up the GVL (`sys::park`, `Calm`).
    pub(super) deferred: Cell<bool>,
    /// Whether its first phase was a park that ended signaled
    /// (`park_without_gvl`): its list then measures how soon it went on.
    pub(super) parked_first: Cell<bool>,
    /// Set without the GVL by a spinner about to park after its spin
    /// (`park_after_spin`): likewise. SeqCst with `signaled`, so that
    /// either the waker sees it or the spinner sees the signal.
    pub(super) parking: AtomicBool,
    /// When the list last woke anyone (`monotonic_ns`, 0: never), as seen
    /// when this waiter entered.
    list_last_wake: Cell<u64>,
    /// The CPU the list's last waker ran on (-1: unknown), as seen at entry.
    list_last_wake_cpu: Cell<i32>,
    /// Whether its list (every list of a group) was calm when it entered
    /// (`WaitList::calm`).
    list_calm: Cell<bool>,
    /// Whether its list was crowded when it entered (`WaitList::crowded`):
    /// its deferred wake-up is relayed behind another crowd's (sys::park,
    /// relayed wake-ups). Never set on a group's head, whose wake-ups
    /// count as a calm list's.
    list_crowded: Cell<bool>,
    /// The list it is enlisted on (`enter`): `leave` must be called on that
    /// one, at that address (see `leave`).
    list: Cell<*const WaitList>,
    /// Handed out by its list for a wake-up (not passed over): counted in
    /// the list's `in_flight` until it leaves.
    woken_here: Cell<bool>,
    /// Woken by a ConditionVariable#broadcast: such a wake-up is not passed
    /// on (`wait::enlisted`).
    woken_by_broadcast: Cell<bool>,
    thread: VALUE,
    fiber: VALUE,
    /// The fiber scheduler to unblock through, or nil.
    pub(super) scheduler: VALUE,
    /// What the waiter blocks on (the queue, or the condvar's mutex), passed
    /// to the scheduler's block/unblock hooks.
    pub(super) blocker: VALUE,
    /// For a member of a group (one waiter enlisted on several lists,
    /// `RapidThread.select`): the group's head, which is never enlisted
    /// itself and is what the thread blocks on. Null otherwise.
    group: *const Waiter,
}

impl Waiter {
    /// A waiter for the current thread and fiber, blocked on `blocker`.
    pub fn current(blocker: Value) -> Waiter {
        // Wait lists are the main Ractor's (see `hand_out`).
        check_main_gvl();
        let blocker = blocker.as_raw();
        // SAFETY: plain queries of the current thread, GVL held (a Value
        // proves it); the thread, its fiber and scheduler, and the
        // blocker (the caller's Value) stay alive on this stack while the
        // waiter does.
        let (thread, scheduler) = unsafe {
            (
                rb_sys::rb_thread_current(),
                rb_sys::rb_fiber_scheduler_current(),
            )
        };
        let fiber = if scheduler == QNIL {
            QNIL
        } else {
            // SAFETY: as above.
            unsafe { rb_sys::rb_fiber_current() }
        };
        Waiter::new(thread, fiber, scheduler, blocker)
    }

    fn new(thread: VALUE, fiber: VALUE, scheduler: VALUE, blocker: VALUE) -> Waiter {
        Waiter {
            prev: Cell::new(ptr::null()),
            next: Cell::new(ptr::null()),
            linked: Cell::new(false),
            fork_gen: Cell::new(0),
            signaled: AtomicBool::new(false),
            interrupted: AtomicBool::new(false),
            wake_epoch: AtomicU64::new(0),
            signaled_at: AtomicU64::new(0),
            sleeping: Cell::new(false),
            park_word: AtomicU32::new(0),
            parked: Cell::new(false),
            deferred: Cell::new(false),
            parked_first: Cell::new(false),
            parking: AtomicBool::new(false),
            list_last_wake: Cell::new(0),
            list_last_wake_cpu: Cell::new(-1),
            list_calm: Cell::new(true),
            list_crowded: Cell::new(false),
            thread,
            fiber,
            scheduler,
            blocker,
            group: ptr::null(),
            list: Cell::new(ptr::null()),
            woken_here: Cell::new(false),
            woken_by_broadcast: Cell::new(false),
        }
    }

    /// A member of the group headed by `head`, to enlist on one more list.
    /// Only `while_enlisted_on_each` makes them, and drops them before
    /// `head` can go. A wake-up reads the head's VALUEs (`signal`), never
    /// the member's: the head lives on the blocked thread's stack, where
    /// the GC sees and pins them; the members live on the heap.
    fn member(head: &Waiter) -> Waiter {
        Waiter {
            group: head,
            ..Waiter::new(head.thread, head.fiber, head.scheduler, head.blocker)
        }
    }

    /// The waiter the thread blocks on: the group's head for a member,
    /// else this one.
    fn head(&self) -> &Waiter {
        // SAFETY: a member never outlives its head (see `member`).
        unsafe { self.group.as_ref() }.unwrap_or(self)
    }

    /// A member whose group was already woken through another list: it
    /// must not take this list's wake-up.
    fn group_woken(&self) -> bool {
        !self.group.is_null() && self.head().signaled()
    }

    #[inline]
    pub fn signaled(&self) -> bool {
        self.signaled.load(Ordering::Acquire)
    }

    /// `rb_thread_interrupted` of the waiter's thread: a Thread#raise,
    /// kill or trap handler pending and not masked (`Waiter::current`
    /// took the thread already; asking Ruby for it again costs a call).
    pub fn thread_interrupted(&self) -> bool {
        // SAFETY: the waiter's Thread is alive while the waiter is (on that
        // thread's stack); rb_thread_interrupted only reads its execution
        // context's flags, and cannot raise for a Thread.
        unsafe { rb_sys::rb_thread_interrupted(self.thread) != 0 }
    }

    /// Whether an unblock function ended a spin or park of this wait
    /// (Thread#raise, kill, a signal, Thread#wakeup).
    pub fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::SeqCst)
    }

    /// Whether the waiter blocks through a fiber scheduler.
    pub fn has_scheduler(&self) -> bool {
        self.scheduler != QNIL
    }

    /// When the list this waiter is on last woke a waiter (at entry;
    /// `monotonic_ns`, 0: never).
    pub fn list_last_wake(&self) -> u64 {
        self.list_last_wake.get()
    }

    /// The CPU the list's last waker ran on (-1: unknown), at entry.
    pub fn list_last_wake_cpu(&self) -> i32 {
        self.list_last_wake_cpu.get()
    }

    /// Whether its list (every list of a group) was calm when it entered
    /// (`WaitList::calm`).
    pub fn list_calm(&self) -> bool {
        self.list_calm.get()
    }

    /// Whether its list was crowded when it entered (`WaitList::crowded`):
    /// its deferred wake-up is relayed behind another crowd's (sys::park,
    /// relayed wake-ups).
    pub fn list_crowded(&self) -> bool {
        self.list_crowded.get()
    }

    /// A handle to Ruby's API for the waiter's code: a waiter is made only
    /// on a thread holding the main Ractor's GVL (`current` checks), is
    /// not Send, reaches another thread only through a list's hand-out
    /// (which checks too), and every function that gives the GVL up while
    /// it exists takes it back before returning (or runs code that may
    /// not touch Ruby: `without_gvl`).
    pub fn ruby(&self) -> Ruby {
        // SAFETY: as said above.
        unsafe { Ruby::get_unchecked() }
    }

    /// Whether its wake-up came from a ConditionVariable#broadcast (see
    /// [`signal_for_broadcast`](Self::signal_for_broadcast)).
    pub fn woken_by_broadcast(&self) -> bool {
        self.woken_by_broadcast.get()
    }

    pub fn set_sleeping(&self) {
        self.sleeping.set(true);
    }

    /// Marks the waiter woken and says how to complete the wake-up.
    /// Called by the waker, GVL held, right after unlinking it.
    /// A member signals its group's head too (which list woke the group
    /// stays readable on the member).
    pub fn signal(&self) -> WakeTarget {
        self.signal_in(false, None)
    }

    /// [`signal`](Self::signal), for one of a ConditionVariable#broadcast's
    /// wake-ups, which a waiter that leaves with an error does not pass on
    /// (`wait::enlisted`).
    pub fn signal_for_broadcast(&self) -> WakeTarget {
        self.signal_in(true, None)
    }

    /// `broadcast`: see [`signal_for_broadcast`](Self::signal_for_broadcast);
    /// `relay`: the broadcast's relay (sys::park, relayed wake-ups), if it
    /// has one.
    fn signal_in(&self, broadcast: bool, relay: Option<&mut Relay>) -> WakeTarget {
        self.woken_by_broadcast.set(broadcast);
        let head = self.head();
        head.wake_epoch
            .store(GVL_RELEASES.load(Ordering::Acquire), Ordering::Relaxed);
        if !ptr::eq(head, self) {
            self.signaled.store(true, Ordering::Release);
        }
        head.signaled.store(true, Ordering::SeqCst);
        // A parked waiter (`parked` is set before it gives up the GVL, so
        // a waker, which holds the GVL, cannot miss it; `parking` is set
        // before a spinner's last look at `signaled`): set its futex word,
        // then wake it (FUTEX_WAIT compares the word atomically). Woken
        // here, where the waiter is sure to be in its frame (it must take
        // the GVL to leave it), or, for a calm park that asked it, when
        // this thread gives up the GVL (`wake_parked`). Other waiters cost
        // two flag reads.
        if head.parked.get() || head.parking.load(Ordering::SeqCst) {
            wake_parked(head, relay);
        }
        WakeTarget {
            thread: head.thread,
            fiber: head.fiber,
            scheduler: head.scheduler,
            blocker: head.blocker,
            sleeping: head.sleeping.get(),
            _here: PhantomData,
        }
    }
}

/// Who to wake and how, copied out of a waiter while the GVL is held:
/// once woken, the waiter may leave and its stack frame is gone.
#[derive(Clone, Copy)]
pub struct WakeTarget {
    thread: VALUE,
    fiber: VALUE,
    scheduler: VALUE,
    blocker: VALUE,
    sleeping: bool,
    /// Not Send: `wake` calls Ruby, so it must run where the GVL is.
    _here: PhantomData<*mut ()>,
}

impl WakeTarget {
    /// A handle to Ruby's API for the waker: a target is made by
    /// `Waiter::signal` on a waiter that a list's checked hand-out gave a
    /// holder of the main Ractor's GVL, and is not Send (see
    /// `Waiter::ruby`).
    pub fn ruby(&self) -> Ruby {
        // SAFETY: as said above.
        unsafe { Ruby::get_unchecked() }
    }

    /// Completes a wake-up. `false` means the thread is dead and the
    /// wake-up should go to the next waiter.
    pub fn wake(self) -> Result<bool, Error> {
        if self.scheduler != QNIL {
            // SAFETY: may call Ruby code and raise; caught by protect.
            protect(|| unsafe {
                rb_sys::rb_fiber_scheduler_unblock(self.scheduler, self.blocker, self.fiber)
            })?;
            Ok(true)
        } else {
            Ok(self.wake_thread())
        }
    }

    /// [`wake`](Self::wake) for a waiter without a fiber scheduler (one
    /// that `signal_front_plain` handed out), which calls nothing that can
    /// raise.
    pub fn wake_thread(self) -> bool {
        debug_assert!(self.scheduler == QNIL);
        if self.sleeping {
            // SAFETY: rb_thread_wakeup_alive does not raise; it returns nil
            // for a dead thread.
            unsafe { rb_sys::rb_thread_wakeup_alive(self.thread) != QNIL }
        } else {
            // Spinning without the GVL: the signal flag is all it needs
            // (a parked waiter was woken by `signal`).
            true
        }
    }
}

/// `signal_front_plain`'s answer when the longest waiter blocks through a
/// fiber scheduler: it was left on the list.
pub struct HasScheduler;

#[cold]
#[inline(never)]
fn list_moved() -> ! {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "rapid_thread: a wait list moved while a waiter was on it (a bug); aborting"
    );
    std::process::abort()
}

/// A list of waiters with O(1) push, pop at either end and removal from
/// the middle. Queues and condition variables wake the longest waiter
/// (`pop_front`, FIFO); the thread cache wakes the most recently idle
/// worker (`pop_back`, LIFO).
pub struct WaitList {
    head: *const Waiter,
    tail: *const Waiter,
    /// Waiters registered and not yet returned (stock's `num_waiting`): a
    /// woken waiter stays counted until it has left its wait.
    waiting: usize,
    /// Waiters on the list now (`waiting` less those handed out).
    linked: usize,
    /// Waiters handed out for a wake-up that have not left their wait yet
    /// (`handed_out` less the group members passed over).
    in_flight: usize,
    /// When `pop_front`, `pop_back` or `signal_front_plain` last handed out
    /// a waiter (a wake-up; `monotonic_ns`, 0: never), and the CPU the
    /// waker ran on then (-1: unknown).
    last_wake: u64,
    last_wake_cpu: i32,
    /// Whether it has ever held two waiters at once (a pool, many
    /// producers), unlike a ping-pong's list (one waiter at a time; two
    /// threads waiting in turn on one condition variable hand each other
    /// the wake-up before they enter). Sticky, until a fork's
    /// `forget_all`. A crowd's parked waiters are woken one per
    /// suspension of their waker, the rest relayed (sys::park).
    crowded: bool,
    /// The share of its woken parked waiters whose hand-off was late (see
    /// [`PROMPT_HANDOFF_NS`]), in 65536ths, a moving average over about
    /// the last 32 (fine enough to decay to 0).
    late_share: u32,
}

/// A parked waiter's hand-off was prompt when it went on within this long
/// of its signal beyond twice the machine's switch ([`SWITCH_NS`]), as in
/// a ping-pong, whose waker blocks right after the wake-up and leaves the
/// CPU to it. The switch differs between VMs far more than Ruby code does:
/// a bar of 10 µs alone judged a ping-pong's hand-offs late on a VM whose
/// hand-offs took 20-30 µs (docs/design-details.md, "Late beyond the
/// machine's switch").
const PROMPT_HANDOFF_NS: u64 = 10_000;

/// The switch before any was seen, and the most a first sample counts
/// for: the slower VM's, with room (a higher one is reached by the 1/64
/// rise).
const UNSEEN_SWITCH_NS: u64 = 20_000;

/// The machine's switch from a thread's block to a woken parked waiter
/// going on: the lowest seen lately, rising by 1/64 a sample while none is
/// lower (0: none seen; from 1 µs to 20 µs takes about 190 samples, each
/// parked hand-off of the process one). A sample is the time from the
/// last of our waits to set out to block (`sys::last_block_ns`), where
/// that came after the waiter's signal, to the waiter going on: the switch
/// itself where the thread that gave up the CPU was ours, more where it
/// blocked in Ruby's own code after it. Main Ractor only, under its GVL.
static SWITCH_NS: AtomicU64 = AtomicU64::new(0);

/// Counts a switch `sample`, if there is one, and returns the estimate
/// (see [`SWITCH_NS`]).
fn switch_ns(sample: Option<u64>) -> u64 {
    let seen = SWITCH_NS.load(Ordering::Relaxed);
    match sample {
        Some(s) => {
            let next = if seen == 0 {
                s.min(UNSEEN_SWITCH_NS)
            } else {
                s.min(seen + seen / 64 + 1)
            }
            .max(1);
            SWITCH_NS.store(next, Ordering::Relaxed);
            next
        }
        None if seen == 0 => UNSEEN_SWITCH_NS,
        None => seen,
    }
}

/// When any wait list of the process last woke someone (`monotonic_ns`;
/// 0: never), and the waker's CPU. A list that has never woken anyone (a
/// fresh one) reports these to its first waiter: concurrent-ruby makes a
/// ConditionVariable per future, whose one wait would otherwise always
/// count as dormant (crate::spin, `ACTIVE_WINDOW`). Atomics, not GVL
/// state: waits in other Ractors run under their own GVLs; a torn pair
/// only misjudges one wait's plan.
static PROCESS_LAST_WAKE_NS: AtomicU64 = AtomicU64::new(0);
static PROCESS_LAST_WAKE_CPU: AtomicI32 = AtomicI32::new(-1);

fn process_last_wake() -> (u64, i32) {
    match PROCESS_LAST_WAKE_NS.load(Ordering::Relaxed) {
        0 => (0, -1),
        ns => (ns, PROCESS_LAST_WAKE_CPU.load(Ordering::Relaxed)),
    }
}

// SAFETY: a list is touched only by the thread holding the GVL, wherever
// the object that owns it goes (Ruby objects move between Ruby threads,
// which is what Send means for typed data); its waiters live on the
// stacks of Ruby threads, which leave the list before their frames go.
unsafe impl Send for WaitList {}

impl Default for WaitList {
    fn default() -> Self {
        WaitList::new()
    }
}

impl WaitList {
    pub const fn new() -> WaitList {
        WaitList {
            head: ptr::null(),
            tail: ptr::null(),
            waiting: 0,
            linked: 0,
            in_flight: 0,
            last_wake: 0,
            last_wake_cpu: -1,
            crowded: false,
            late_share: 0,
        }
    }

    /// Whether its hand-offs look like a ping-pong's: it has never held two
    /// waiters at once, and its woken parked waiters have mostly gone on
    /// promptly (fewer than a quarter late, lately, see
    /// [`PROMPT_HANDOFF_NS`]; a run of nine late ones, such as a pause for
    /// a GC, is not enough). Where one CPU runs the waker and the
    /// woken, a parked waiter of a calm list need not preempt its waker
    /// (sys::park). Where wake-ups are deferred (Ruby 3.3+, not under M:N
    /// threads) none preempts, and every list's waits park
    /// (`wait::first_step`); elsewhere on 3.3+ only a calm list's do
    /// (crate::spin), so one found late stays so: its waits sleep in
    /// Ruby.
    pub fn calm(&self) -> bool {
        !self.crowded && self.late_share < 16384
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Waiters taken off the list (woken, or passed over as members of a
    /// woken group) that have not left their wait yet.
    pub fn handed_out(&self) -> usize {
        self.waiting.saturating_sub(self.linked)
    }

    /// When the list last handed out a waiter for a wake-up
    /// (`monotonic_ns`, 0: never).
    pub fn last_wake(&self) -> u64 {
        self.last_wake
    }

    /// Waiters woken through this list that have not left their wait yet:
    /// each will look at what it was woken for (a queue's chained
    /// wake-ups, `crate::queue`, wait for it to be 0).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Seeds when the list last woke someone, for a new list that stands
    /// in for an older one (each Task has its own joiner list, but joins
    /// of tasks follow each other as pops of a queue do).
    pub fn set_last_wake(&mut self, t: u64, cpu: i32) {
        self.last_wake = t;
        self.last_wake_cpu = cpu;
    }

    /// Appends `w`.
    ///
    /// # Safety
    /// `w` must stay at its address until `leave` has been called for it.
    unsafe fn enter(&mut self, w: &Waiter) {
        debug_assert!(!w.linked.get());
        // A list that never woke anyone lends its first waiter the
        // process's last wake-up (see `PROCESS_LAST_WAKE_NS`); later ones
        // find it dormant, so a mass set-up on one fresh list spins once.
        let (last_wake, last_wake_cpu) = match self.last_wake {
            0 if self.head.is_null() => process_last_wake(),
            0 => (0, -1),
            t => (t, self.last_wake_cpu),
        };
        w.prev.set(self.tail);
        w.next.set(ptr::null());
        // SAFETY: a linked waiter stays at its address until it leaves
        // (`enter`'s contract), and `leave` unlinks it from its neighbours.
        if let Some(t) = unsafe { self.tail.as_ref() } {
            t.next.set(w);
        } else {
            self.head = w;
        }
        self.tail = w;
        w.linked.set(true);
        self.linked += 1;
        w.fork_gen.set(fork_generation());
        w.list.set(self);
        w.list_last_wake.set(last_wake);
        w.list_last_wake_cpu.set(last_wake_cpu);
        // Itself and another.
        self.crowded |= self.linked > 1;
        let calm = self.calm();
        w.list_calm.set(calm);
        w.list_crowded.set(self.crowded);
        // A group is as active as the most active of its lists, and calm
        // only if all are.
        let head = w.head();
        if last_wake > head.list_last_wake.get() {
            head.list_last_wake.set(last_wake);
            head.list_last_wake_cpu.set(last_wake_cpu);
        }
        if !calm {
            head.list_calm.set(false);
        }
        self.waiting += 1;
    }

    fn unlink(&mut self, w: &Waiter) {
        let (p, n) = (w.prev.get(), w.next.get());
        // SAFETY: linked waiters are alive (contract of `enter`).
        unsafe {
            match p.as_ref() {
                Some(p) => p.next.set(n),
                None => self.head = n,
            }
            match n.as_ref() {
                Some(n) => n.prev.set(p),
                None => self.tail = p,
            }
        }
        w.prev.set(ptr::null());
        w.next.set(ptr::null());
        w.linked.set(false);
        self.linked -= 1;
    }

    /// Removes and returns the longest waiter. It stays alive until the
    /// GVL is released: its owner can only leave after re-taking it.
    pub fn pop_front(&mut self) -> Option<&Waiter> {
        self.hand_out(true, |_| true).ok().flatten()
    }

    /// Removes and returns the newest waiter (the one that enlisted last);
    /// otherwise as `pop_front`.
    pub fn pop_back(&mut self) -> Option<&Waiter> {
        self.hand_out(false, |_| true).ok().flatten()
    }

    /// For a waker that must not raise: signals up to `out.len()` of the
    /// longest waiters, stopping at one with a fiber scheduler (whose
    /// unblock hook runs Ruby code: it stays linked, for `pop_front`), and
    /// stores how to wake each in `out`. With a `relay`, the batch is part
    /// of a ConditionVariable#broadcast (see
    /// `Waiter::signal_for_broadcast`), whose parked waiters are relayed
    /// (sys::park). One GVL check, one clock read and
    /// one CPU read stamp the whole batch (per waiter they were about a
    /// quarter of a broadcast's instructions; docs/design-details.md,
    /// "Where condvar2's time goes on one CPU"). Returns how many it
    /// signaled (`out[..n]`), and `HasScheduler` if it stopped there.
    pub fn signal_front_plain(
        &mut self,
        out: &mut [Option<WakeTarget>],
        relay: Option<&mut Relay>,
    ) -> (usize, Option<HasScheduler>) {
        if self.head.is_null() {
            return (0, None);
        }
        // See `hand_out`.
        #[cfg(not(test))]
        check_main_gvl();
        let (now, cpu) = (monotonic_ns(), waker_cpu());
        let broadcast = relay.is_some();
        let mut relay = relay;
        let mut n = 0;
        let mut refused = None;
        while n < out.len() {
            match self.next_out(true, |w| !w.has_scheduler()) {
                Ok(Some(w)) => {
                    w.head().signaled_at.store(now, Ordering::Relaxed);
                    out[n] = Some(w.signal_in(broadcast, relay.as_deref_mut()));
                    n += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        if n > 0 {
            self.stamp_last_wake(now, cpu);
        }
        (n, refused)
    }

    /// Unlinks the waiter at the head (or the tail) for a wake-up and
    /// returns it, if `take` accepts it; `HasScheduler` (the only refusal
    /// there is) leaves it linked. Members of a group already woken
    /// through another list are unlinked and passed over: the wake-up goes
    /// to the next waiter.
    fn hand_out(
        &mut self,
        from_head: bool,
        take: impl Fn(&Waiter) -> bool,
    ) -> Result<Option<&Waiter>, HasScheduler> {
        if self.head.is_null() {
            return Ok(None);
        }
        // The waiters' frames are other threads', whose links and flags
        // only holders of the main Ractor's GVL touch: a list reached
        // through `&mut` can be moved or sent away by safe code, so the
        // one check stands here, where another thread's waiter is reached.
        #[cfg(not(test))]
        check_main_gvl();
        let Some(w) = self.next_out(from_head, take)?.map(|w| w as *const Waiter) else {
            return Ok(None);
        };
        let now = monotonic_ns();
        self.stamp_last_wake(now, waker_cpu());
        // SAFETY: as in `next_out`, which handed it out.
        let w = unsafe { &*w };
        w.head().signaled_at.store(now, Ordering::Relaxed);
        Ok(Some(w))
    }

    /// `hand_out` without the GVL check and the stamps (`stamp_last_wake`),
    /// which its callers make once. The caller checked the GVL.
    fn next_out(
        &mut self,
        from_head: bool,
        take: impl Fn(&Waiter) -> bool,
    ) -> Result<Option<&Waiter>, HasScheduler> {
        loop {
            let w = if from_head { self.head } else { self.tail };
            // SAFETY: see `unlink`.
            let Some(w) = (unsafe { w.as_ref() }) else {
                return Ok(None);
            };
            if w.group_woken() {
                self.unlink(w);
                continue;
            }
            if !take(w) {
                return Err(HasScheduler);
            }
            self.unlink(w);
            w.woken_here.set(true);
            self.in_flight += 1;
            // SAFETY: as above; the lifetime is tied to `&mut self`, i.e.
            // to a region during which the GVL is held.
            return Ok(Some(unsafe { &*(w as *const Waiter) }));
        }
    }

    /// Stamps the list's and the process's last wake-up.
    fn stamp_last_wake(&mut self, now: u64, cpu: i32) {
        self.last_wake = now;
        self.last_wake_cpu = cpu;
        PROCESS_LAST_WAKE_NS.store(now, Ordering::Relaxed);
        PROCESS_LAST_WAKE_CPU.store(cpu, Ordering::Relaxed);
    }

    /// Deregisters `w`: unlinks it if still linked (O(1)) and drops it
    /// from the waiting count. Called on every exit path of a wait.
    ///
    /// A waiter that entered before a fork and leaves in the child (a fiber
    /// of the forking thread, under a fiber scheduler) leaves nothing: the
    /// child's list forgot it (`forget_all`, which every operation runs
    /// first after a fork), and its neighbours' frames are the parent's.
    fn leave(&mut self, w: &Waiter) {
        if w.fork_gen.get() != fork_generation() {
            return;
        }
        if !ptr::eq(w.list.get(), self) {
            // The list moved while the waiter was on it (safe code can
            // `mem::take` a list it holds by `&mut`): it still points at
            // this stack frame, which is about to go.
            list_moved();
        }
        if w.linked.get() {
            self.unlink(w);
        }
        if w.woken_here.replace(false) {
            self.in_flight = self.in_flight.saturating_sub(1);
            let head = w.head();
            if head.parked_first.get() {
                // See PROMPT_HANDOFF_NS.
                let at = head.signaled_at.load(Ordering::Relaxed);
                let now = monotonic_ns();
                let blocked = last_block_ns();
                let switch = switch_ns((blocked >= at).then(|| now - blocked));
                self.note_handoff(now.saturating_sub(at) > PROMPT_HANDOFF_NS + 2 * switch);
            }
        }
        self.waiting = self.waiting.saturating_sub(1);
    }

    /// Counts a woken parked waiter that went on `late` or promptly (see
    /// `late_share`).
    fn note_handoff(&mut self, late: bool) {
        self.late_share = self.late_share - self.late_share / 32 + if late { 2048 } else { 0 };
    }

    /// Forgets every waiter (used in a forked child, whose parent threads
    /// and their stacks no longer exist).
    pub fn forget_all(&mut self) {
        *self = WaitList::default();
    }
}

/// Runs `body` with `w` enlisted on the list chosen by `list`, and takes it
/// off again (and out of the waiting count) on every path out, including a
/// panic: the only way a waiter enters a list, so a list never points at a
/// dead stack frame.
pub fn while_enlisted<S, R>(
    cell: &GvlCell<S>,
    list: fn(&mut S) -> &mut WaitList,
    w: &Waiter,
    body: impl FnOnce() -> R,
) -> R {
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
    // SAFETY: (contract of `enter`) `w` is borrowed for this whole call and
    // the guard, which this function owns and nobody can forget, calls
    // `leave` before it returns or unwinds.
    cell.with(|s| unsafe { list(s).enter(w) });
    let _leave = Leave { cell, list, w };
    body()
}

/// Runs `body` with a member of the group headed by `head` enlisted on the
/// list chosen by `list` of each of `cells` (`RapidThread.select`), and
/// takes every one off again on every path out, as `while_enlisted`.
/// Returns `body`'s result and the index of the list whose wake-up woke
/// the group, if any (at most one: once the head is signaled, the other
/// lists pass its members over).
///
/// The members live in a heap vector that is neither grown nor moved
/// while they are enlisted; the objects owning the cells are kept alive
/// by the caller (the cells themselves, in typed data, do not move).
pub fn while_enlisted_on_each<S, R>(
    head: &Waiter,
    cells: &[&GvlCell<S>],
    list: fn(&mut S) -> &mut WaitList,
    body: impl FnOnce() -> R,
) -> (R, Option<usize>) {
    struct LeaveAll<'a, S> {
        cells: &'a [&'a GvlCell<S>],
        list: fn(&mut S) -> &mut WaitList,
        members: &'a [Waiter],
        entered: Cell<usize>,
    }
    impl<S> Drop for LeaveAll<'_, S> {
        fn drop(&mut self) {
            for (i, m) in self.members[..self.entered.get()].iter().enumerate() {
                self.cells[i].with(|s| (self.list)(s).leave(m));
            }
        }
    }
    let members: Vec<Waiter> = cells.iter().map(|_| Waiter::member(head)).collect();
    let result = {
        let leave = LeaveAll {
            cells,
            list,
            members: &members,
            entered: Cell::new(0),
        };
        for (i, m) in members.iter().enumerate() {
            // SAFETY: (contract of `enter`) `members` is not touched again
            // until the guard, which nobody can forget, has called `leave`
            // for every member entered.
            cells[i].with(|s| unsafe { list(s).enter(m) });
            leave.entered.set(i + 1);
        }
        body()
    };
    let woken_by = members.iter().position(|m| m.signaled());
    (result, woken_by)
}

// The list's logic on plain Rust data: waiters whose `thread` is just an
// id, lists in cells only these tests touch (one thread each, no Ruby).
// One test simulates a fork, which every list notices, and one sets the
// machine's switch and stamps the process's last block (`note_block`),
// which every parked hand-off reads: they take turns (`serial`), whatever
// `--test-threads` says.
#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Mutex, MutexGuard};

    fn serial() -> MutexGuard<'static, ()> {
        static SERIAL: Mutex<()> = Mutex::new(());
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn waiter(id: VALUE) -> Waiter {
        Waiter::new(id, QNIL, QNIL, QNIL)
    }

    fn list(l: &mut WaitList) -> &mut WaitList {
        l
    }

    fn pop(cell: &GvlCell<WaitList>, from_head: bool) -> Option<VALUE> {
        cell.with(|l| {
            if from_head {
                l.pop_front()
            } else {
                l.pop_back()
            }
            .map(|w| w.thread)
        })
    }

    /// `signal_front_plain` with room for `room`: the ids signaled, and
    /// whether it stopped at a waiter with a fiber scheduler.
    fn signal_plain(cell: &GvlCell<WaitList>, room: usize) -> (Vec<VALUE>, bool) {
        let mut out = vec![None; room];
        let (n, refused) = cell.with(|l| l.signal_front_plain(&mut out, None));
        let ids = out.iter().flatten().map(|t| t.thread).collect::<Vec<_>>();
        assert_eq!(ids.len(), n);
        (ids, refused.is_some())
    }

    fn counts(cell: &GvlCell<WaitList>) -> (usize, usize, bool) {
        cell.with(|l| (l.waiting(), l.handed_out(), l.is_empty()))
    }

    /// Runs `body` with waiters `ids` enlisted in that order.
    fn enlisted<R>(cell: &GvlCell<WaitList>, ids: &[VALUE], body: impl FnOnce() -> R) -> R {
        match ids.split_first() {
            None => body(),
            Some((&id, rest)) => {
                let w = waiter(id);
                while_enlisted(cell, list, &w, || enlisted(cell, rest, body))
            }
        }
    }

    #[test]
    fn a_list_is_calm_until_it_holds_two_waiters_or_its_hand_offs_run_late() {
        let _serial = serial();
        let cell = GvlCell::new(WaitList::new());
        // One waiter at a time (a ping-pong): calm, and its waiters know.
        for id in 1..=3 {
            let w = waiter(id);
            while_enlisted(&cell, list, &w, || assert!(w.list_calm()));
        }
        cell.with(|l| {
            assert!(l.calm());
            // A run of nine late hand-offs (a pause) leaves it calm; the
            // tenth does not; prompt ones bring it back.
            for _ in 0..9 {
                l.note_handoff(true);
            }
            assert!(l.calm());
            l.note_handoff(true);
            assert!(!l.calm());
            for _ in 0..3 {
                l.note_handoff(false);
            }
            assert!(l.calm());
        });
        // Two waiters at once: crowded, for good.
        enlisted(&cell, &[1, 2], || {});
        assert!(!cell.with(|l| l.calm()));
        let w = waiter(3);
        while_enlisted(&cell, list, &w, || assert!(!w.list_calm()));
    }

    /// Twelve woken parked waiters, each going on `back_us` after its
    /// signal (or after a 100 µs pause: `leave` measures), with the
    /// machine's switch at `switch_us` (0: none seen yet, which stands for
    /// 20 µs). Late past 10 µs and twice the switch: 30 µs back is prompt
    /// with none seen and late with 1 µs seen. A switch seen as 100 µs
    /// stays so where a wait of ours blocked right after each signal (the
    /// pause was the way to the woken thread: prompt), and falls to about
    /// 0 where it blocked only after the pause (the waker ran on: late).
    /// The same waits, not parked, say nothing.
    #[test]
    fn parked_hand_offs_are_late_beyond_the_machines_switch() {
        let _serial = serial();
        let pause = || std::thread::sleep(std::time::Duration::from_micros(100));
        // (parked, signaled this many µs back (0: pause), switch µs, a
        // wait blocked right after the signal, one after the pause, calm);
        // those that stamp go last: a stamp newer than a signal sent back
        // in time would make a sample.
        for (parked, back_us, switch_us, blocked_at_once, blocked_late, calm) in [
            (false, 0, 1, false, false, true),
            (true, 0, 0, false, false, false),
            (true, 30, 0, false, false, true),
            (true, 30, 1, false, false, false),
            (true, 0, 1, false, false, false),
            (true, 0, 100, true, false, true),
            (true, 0, 100, false, true, false),
        ] {
            SWITCH_NS.store(switch_us * 1000, Ordering::Relaxed);
            let cell = GvlCell::new(WaitList::new());
            // Twelve: a list turns late after ten late ones in a row, and
            // a first sample stretched by a preemption (the last case) may
            // leave its hand-off prompt.
            for id in 1..=12 {
                let w = waiter(id);
                while_enlisted(&cell, list, &w, || {
                    w.parked_first.set(parked);
                    assert_eq!(pop(&cell, true), Some(id));
                    if back_us > 0 {
                        let at = monotonic_ns() - back_us * 1000;
                        w.head().signaled_at.store(at, Ordering::Relaxed);
                        return;
                    }
                    if blocked_at_once {
                        note_block();
                    }
                    pause();
                    if blocked_late {
                        note_block();
                    }
                });
            }
            let got = cell.with(|l| l.calm());
            assert_eq!(
                got, calm,
                "parked {parked}, {back_us} µs back, switch {switch_us} µs, \
                 blocked at once {blocked_at_once}, late {blocked_late}"
            );
        }
        SWITCH_NS.store(0, Ordering::Relaxed);
    }

    /// The switch estimate: 20 µs until a sample, a first sample counted
    /// for no more, then the lowest, rising by 1/64 (and 1 ns) a sample
    /// while none is lower, never 0.
    #[test]
    fn the_switch_is_the_lowest_seen_lately() {
        let _serial = serial();
        SWITCH_NS.store(0, Ordering::Relaxed);
        assert_eq!(switch_ns(None), 20_000);
        assert_eq!(switch_ns(Some(5_000_000)), 20_000);
        assert_eq!(switch_ns(Some(6_400)), 6_400);
        assert_eq!(switch_ns(Some(50_000)), 6_501);
        assert_eq!(switch_ns(None), 6_501);
        assert_eq!(switch_ns(Some(0)), 1);
        SWITCH_NS.store(1_000, Ordering::Relaxed);
        let mut samples = 1;
        while switch_ns(Some(u64::MAX / 4)) < 20_000 {
            samples += 1;
        }
        assert!((185..200).contains(&samples), "{samples}");
        SWITCH_NS.store(0, Ordering::Relaxed);
    }

    #[test]
    fn pop_front_is_fifo_and_pop_back_lifo() {
        let _serial = serial();
        let cell = GvlCell::new(WaitList::new());
        enlisted(&cell, &[1, 2, 3, 4], || {
            assert_eq!(pop(&cell, true), Some(1));
            assert_eq!(pop(&cell, false), Some(4));
            assert_eq!(pop(&cell, true), Some(2));
            assert_eq!(pop(&cell, true), Some(3));
            assert_eq!(pop(&cell, true), None);
            assert_eq!(pop(&cell, false), None);
            // Handed out, still counted until each leaves its wait.
            assert_eq!(counts(&cell), (4, 4, true));
        });
        assert_eq!(counts(&cell), (0, 0, true));
    }

    #[test]
    fn signal_front_plain_leaves_a_waiter_with_a_fiber_scheduler_for_pop_front() {
        let _serial = serial();
        let cell = GvlCell::new(WaitList::new());
        // Any non-nil scheduler: nothing here calls it.
        let under_scheduler = Waiter::new(1, QNIL, 0x100, QNIL);
        while_enlisted(&cell, list, &under_scheduler, || {
            enlisted(&cell, &[2], || {
                assert_eq!(signal_plain(&cell, 4), (vec![], true));
                // Refused: still linked, nothing handed out.
                assert_eq!(counts(&cell), (2, 0, false));
                assert_eq!(pop(&cell, true), Some(1));
                assert_eq!(signal_plain(&cell, 4), (vec![2], false));
                assert_eq!(signal_plain(&cell, 4), (vec![], false));
                assert_eq!(counts(&cell), (2, 2, true));
            })
        });
        assert_eq!(counts(&cell), (0, 0, true));
    }

    #[test]
    fn a_batch_signals_the_longest_waiters_in_order_up_to_its_room_or_a_scheduler() {
        let _serial = serial();
        let cell = GvlCell::new(WaitList::new());
        enlisted(&cell, &[1, 2, 3], || {
            let under_scheduler = Waiter::new(4, QNIL, 0x100, QNIL);
            while_enlisted(&cell, list, &under_scheduler, || {
                enlisted(&cell, &[5], || {
                    assert_eq!(cell.with(|l| l.last_wake), 0);
                    assert_eq!(signal_plain(&cell, 2), (vec![1, 2], false));
                    // Stamped: the list woke someone.
                    assert!(cell.with(|l| l.last_wake) > 0);
                    assert_eq!(signal_plain(&cell, 2), (vec![3], true));
                    assert_eq!(counts(&cell), (5, 3, false));
                    assert!(
                        !under_scheduler.signaled(),
                        "the refused waiter is not signaled"
                    );
                    assert_eq!(pop(&cell, true), Some(4));
                    assert_eq!(signal_plain(&cell, 2), (vec![5], false));
                })
            })
        });
        assert_eq!(counts(&cell), (0, 0, true));
    }

    #[test]
    fn a_waiter_leaving_from_the_middle_or_an_end_keeps_the_order() {
        let _serial = serial();
        let cell = GvlCell::new(WaitList::new());
        for leaving in [1, 2, 3] {
            enlisted(&cell, &[1], || {
                let w2 = waiter(2);
                while_enlisted(&cell, list, &w2, || {
                    enlisted(&cell, &[3], || {
                        // The waiter `leaving` leaves (a timeout, an
                        // interrupt) without being woken.
                        let w = cell.with(|l| {
                            let mut p = l.head;
                            // SAFETY: every linked waiter is alive here.
                            while let Some(w) = unsafe { p.as_ref() } {
                                if w.thread == leaving {
                                    return w as *const Waiter;
                                }
                                p = w.next.get();
                            }
                            ptr::null()
                        });
                        // SAFETY: found on the list above, so alive; it
                        // leaves once here and once more (a no-op for the
                        // links) when its own `while_enlisted` ends, which
                        // the count below allows for.
                        cell.with(|l| l.unlink(unsafe { &*w }));
                        let mut rest = vec![];
                        while let Some(id) = pop(&cell, true) {
                            rest.push(id);
                        }
                        let expected: Vec<VALUE> =
                            [1, 2, 3].into_iter().filter(|&i| i != leaving).collect();
                        assert_eq!(rest, expected);
                        assert_eq!(counts(&cell), (3, 3, true));
                    })
                })
            });
            assert_eq!(counts(&cell), (0, 0, true));
        }
    }

    #[test]
    fn every_way_out_of_a_wait_leaves_the_list() {
        let _serial = serial();
        let cell = GvlCell::new(WaitList::new());
        // Woken, not woken, and a panic out of the wait (a Ruby jump is
        // caught and returned as an error before it reaches here; a panic
        // is the one unwind through these frames).
        enlisted(&cell, &[1, 2], || assert_eq!(pop(&cell, true), Some(1)));
        assert_eq!(counts(&cell), (0, 0, true));
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            enlisted(&cell, &[1, 2, 3], || {
                assert_eq!(counts(&cell), (3, 0, false));
                panic!("out of the wait");
            })
        }));
        assert!(unwound.is_err());
        assert_eq!(counts(&cell), (0, 0, true));
        assert_eq!(pop(&cell, true), None);
    }

    #[test]
    fn a_group_woken_through_one_list_is_passed_over_on_the_others() {
        let _serial = serial();
        let (a, b) = (GvlCell::new(WaitList::new()), GvlCell::new(WaitList::new()));
        let head = waiter(7);
        let ((), woken_by) = while_enlisted_on_each(&head, &[&a, &b], list, || {
            enlisted(&b, &[8], || {
                let w = a.with(|l| l.pop_front().map(|w| (w.thread, w.signal().thread)));
                assert_eq!(w, Some((7, 7)));
                assert!(head.signaled());
                // On `b` the group's member comes first, but its group has
                // been woken: the wake-up goes to the next waiter.
                assert_eq!(pop(&b, true), Some(8));
                assert_eq!(pop(&b, true), None);
            })
        });
        assert_eq!(woken_by, Some(0));
        assert_eq!((counts(&a), counts(&b)), ((0, 0, true), (0, 0, true)));
    }

    #[test]
    fn in_flight_counts_the_waiters_woken_here_until_they_leave() {
        let _serial = serial();
        let (a, b) = (GvlCell::new(WaitList::new()), GvlCell::new(WaitList::new()));
        let in_flight = |c: &GvlCell<WaitList>| c.with(|l| l.in_flight());
        let head = waiter(7);
        let ((), _) = while_enlisted_on_each(&head, &[&a, &b], list, || {
            enlisted(&b, &[8, 9], || {
                let w = a.with(|l| l.pop_front().map(|w| w.signal().thread));
                assert_eq!(w, Some(7));
                assert_eq!(in_flight(&a), 1);
                // The group's member on `b` is passed over, not woken there.
                assert_eq!(pop(&b, true), Some(8));
                assert_eq!((in_flight(&b), counts(&b)), (1, (3, 2, false)));
            });
            // 8 left (9, never woken, too): 7 is still in its wait.
            assert_eq!((in_flight(&a), in_flight(&b)), (1, 0));
        });
        assert_eq!((in_flight(&a), in_flight(&b)), (0, 0));
    }

    #[test]
    fn a_forked_child_forgets_the_parents_waiters() {
        let _serial = serial();
        let cell = GvlCell::new(WaitList::new());
        enlisted(&cell, &[1, 2], || {
            // The child: its lists forget every waiter (`forget_all`, on
            // the first use after the fork), and waiters that entered in
            // the parent leave nothing behind (their neighbours' frames
            // are the parent's).
            crate::sys::values::simulate_fork();
            cell.with(WaitList::forget_all);
            assert_eq!(counts(&cell), (0, 0, true));
            enlisted(&cell, &[3], || {
                assert_eq!(counts(&cell), (1, 0, false));
            });
            assert_eq!(counts(&cell), (0, 0, true));
        });
        // The parent's two waiters left in the child: nothing changed.
        assert_eq!(counts(&cell), (0, 0, true));
        assert_eq!(pop(&cell, true), None);
    }
}
