//! `RapidThread::RactorQueue`: a queue that Ractors share. Unlike the other
//! classes, which live under one GVL (`GvlCell`), its state is used by
//! several Ractors at once, each with its own GVL, so it has its own lock:
//! a `Mutex` around a ring (`VecDeque`), with two condition variables for
//! the waits. A blocked `pop`/`push` releases its Ractor's GVL and sleeps
//! on the condition variable; an interrupt wakes it through an unblocking
//! function, and it re-checks after every return (see docs/design-details.md
//! for the measurements behind the choice of lock).
//!
//! Items are shareable: a shareable object is stored as is, anything else
//! as `Ractor.make_shareable(obj, copy: true)` makes it, before the lock
//! is taken. Nothing under the lock calls Ruby or allocates Ruby objects,
//! so the GC (which stops every Ractor at a safe point, never inside the
//! lock) can always take it to mark or move the items.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use magnus::gc::{Compactor, Marker};
use magnus::scan_args::scan_args;
use magnus::{
    method, prelude::*, DataTypeFunctions, Error, RHash, RModule, Ruby, TypedData, Value,
};

use crate::errors;
use crate::queue::block_and_timeout;
use crate::spin;
use crate::sys::{self, CurrentThread, Event, ForkCell, Held};
use crate::wait;

#[derive(Default)]
struct State {
    items: VecDeque<Held>,
    /// Threads asleep on `not_empty` / `not_full` (not those spinning).
    poppers: usize,
    pushers: usize,
}

/// What the queue's threads share. `len` and `closed` mirror the state for
/// the spin phase, which reads them without the lock.
pub struct Shared {
    state: Mutex<State>,
    /// Poppers sleep on `not_empty`, pushers on `not_full`.
    not_empty: Event,
    not_full: Event,
    len: AtomicUsize,
    closed: AtomicBool,
    initialized: AtomicBool,
    /// Capacity; 0 for unbounded. Set once, by `initialize`.
    max: AtomicUsize,
    /// Threads in `pop`/`push` waits (spinning or asleep): `num_waiting`.
    waiting: AtomicUsize,
}

impl Shared {
    fn new(max: usize, initialized: bool, closed: bool) -> Shared {
        Shared {
            state: Mutex::default(),
            not_empty: Event::default(),
            not_full: Event::default(),
            len: AtomicUsize::new(0),
            closed: AtomicBool::new(closed),
            initialized: AtomicBool::new(initialized),
            max: AtomicUsize::new(max),
            waiting: AtomicUsize::new(0),
        }
    }

    /// A forked child's queue: empty, as open and as bounded as it was.
    fn fresh_in_child(old: &Shared) -> Shared {
        Shared::new(
            old.max.load(Ordering::Relaxed),
            old.initialized.load(Ordering::Relaxed),
            old.closed.load(Ordering::Relaxed),
        )
    }

    /// The lock, whatever a panic elsewhere left (nothing under it panics).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn max(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    /// Whether `len` items leave room for one more.
    fn has_room_for(&self, len: usize) -> bool {
        let max = self.max();
        max == 0 || len < max
    }

    fn has_room(&self, s: &State) -> bool {
        self.has_room_for(s.items.len())
    }
}

#[derive(TypedData)]
#[magnus(
    class = "RapidThread::RactorQueue",
    free_immediately,
    size,
    mark,
    compact,
    wb_protected,
    frozen_shareable
)]
pub struct RactorQueue {
    shared: ForkCell<Shared>,
}

impl Default for RactorQueue {
    fn default() -> Self {
        RactorQueue {
            shared: ForkCell::new(Shared::new(0, false, false), Shared::fresh_in_child),
        }
    }
}

impl DataTypeFunctions for RactorQueue {
    fn mark(&self, m: &Marker) {
        // Copied out, then marked with the lock released: marking also runs
        // outside a GC (ObjectSpace.reachable_objects_from), whose callback
        // allocates and can start a GC that marks this queue again.
        let items: Vec<Held> = self.shared.get().lock().items.iter().copied().collect();
        items.iter().for_each(|v| sys::mark_movable(m, *v));
    }

    fn compact(&self, c: &Compactor) {
        let mut s = self.shared.get().lock();
        s.items
            .iter_mut()
            .for_each(|v| *v = sys::gc_location(c, *v));
    }

    fn size(&self) -> usize {
        // The shared state lives in a box of its own (sys::ForkCell).
        std::mem::size_of::<Self>()
            + std::mem::size_of::<Shared>()
            + self.shared.get().lock().items.capacity() * std::mem::size_of::<Held>()
    }
}

/// The longest single sleep of a blocked pop or push: the bound on how
/// late an interrupt can be noticed if its signal is lost (Ruby 3.1, see
/// `block_nogvl`); Ruby's own time slice.
const SLICE: Duration = Duration::from_millis(100);

/// A fiber's polling interval under a fiber scheduler.
const SCHEDULER_SLICE: Duration = Duration::from_millis(10);

/// How a wait without the GVL ended.
#[derive(PartialEq)]
enum Woke {
    /// The condition may hold (or the queue closed): re-check.
    Ready,
    /// The deadline passed.
    TimedOut,
    /// Skipped: an interrupt was pending.
    Interrupted,
}

/// Which side waits: poppers on `not_empty`, pushers on `not_full`.
#[derive(Clone, Copy)]
enum Side {
    Pop,
    Push,
}

impl Shared {
    fn ready(&self, side: Side, s: &State) -> bool {
        match side {
            Side::Pop => !s.items.is_empty(),
            Side::Push => self.has_room(s),
        }
    }

    fn ready_unlocked(&self, side: Side) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return true;
        }
        let len = self.len.load(Ordering::Acquire);
        match side {
            Side::Pop => len > 0,
            Side::Push => self.has_room_for(len),
        }
    }

    fn event(&self, side: Side) -> &Event {
        match side {
            Side::Pop => &self.not_empty,
            Side::Push => &self.not_full,
        }
    }

    fn sleepers(side: Side, s: &mut State) -> &mut usize {
        match side {
            Side::Pop => &mut s.poppers,
            Side::Push => &mut s.pushers,
        }
    }

    fn timed_out(deadline: Option<Instant>) -> Woke {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            Woke::TimedOut
        } else {
            Woke::Ready
        }
    }

    /// Without the GVL. Ruby interrupts this thread (`RUBY_UBF_IO`) with a
    /// signal, which ends the futex sleep (EINTR); one that lands before
    /// the sleep is seen by the `thread_interrupted` checks, and on Ruby
    /// 3.1, where a lone signal can also land between them and the sleep
    /// with nobody to repeat it, the sleep is cut at `SLICE`.
    fn block_nogvl(&self, side: Side, deadline: Option<Instant>, me: CurrentThread) -> Woke {
        let spin = spin::ractor_budget(deadline);
        let start = Instant::now();
        while start.elapsed() < spin {
            if self.ready_unlocked(side) {
                return Woke::Ready;
            }
            if me.interrupted() {
                return Woke::Interrupted;
            }
            if !spin::yield_cpu() {
                spin::record(None, true);
                break;
            }
        }
        let mut s = self.lock();
        if self.ready(side, &s) || self.closed.load(Ordering::Acquire) {
            return Woke::Ready;
        }
        let now = Instant::now();
        let left = match deadline {
            Some(d) if now >= d => return Woke::TimedOut,
            Some(d) => (d - now).min(SLICE),
            None => SLICE,
        };
        *Self::sleepers(side, &mut s) += 1;
        let ev = self.event(side);
        let seen = ev.seq();
        drop(s);
        // One sleep: a notification, Ruby's interrupt signal (EINTR), the
        // slice or a spurious wake-up all return to the caller, which
        // re-checks.
        if !me.interrupted() {
            ev.sleep(seen, Some(left));
        }
        *Self::sleepers(side, &mut self.lock()) -= 1;
        Self::timed_out(deadline)
    }

    /// A waiter that leaves without taking its turn (an interrupt raised,
    /// a timeout) passes a wake-up it may have consumed to another sleeper.
    fn pass_on(&self, side: Side) {
        let mut s = self.lock();
        if *Self::sleepers(side, &mut s) > 0 && self.ready(side, &s) {
            self.notify_one(side, s);
        }
    }

    /// Wakes one sleeper of `side`: bumps its event under the lock `s` (so
    /// a waiter about to sleep returns at once), releases it, then wakes.
    fn notify_one(&self, side: Side, s: MutexGuard<'_, State>) {
        let ev = self.event(side);
        ev.bump();
        drop(s);
        ev.wake(1);
    }

    /// Shifts the first item, waking a sleeping pusher (bounded only).
    fn try_pop(&self) -> Option<Held> {
        let mut s = self.lock();
        let v = s.items.pop_front()?;
        self.len.store(s.items.len(), Ordering::Release);
        if s.pushers > 0 {
            self.notify_one(Side::Push, s);
        }
        Some(v)
    }

    /// Appends `v` (already shareable) when there is room and the queue
    /// is open. Any error is built by the caller, once the lock is
    /// released (building one may allocate, and a GC then marks the items).
    fn try_push(&self, v: Held) -> Stored {
        let mut s = self.lock();
        if !self.has_room(&s) {
            return Stored::Full;
        }
        if self.closed.load(Ordering::Acquire) {
            return Stored::Closed;
        }
        s.items.push_back(v);
        self.len.store(s.items.len(), Ordering::Release);
        if s.poppers > 0 {
            self.notify_one(Side::Pop, s);
        }
        Stored::Yes
    }

    fn is_full(&self) -> bool {
        !self.has_room_for(self.len.load(Ordering::Acquire))
    }

    /// What a push decides without storing, in Ruby 3.3's order
    /// (rb_szqueue_push): full and `non_block`: "queue full"; full and
    /// `timeout: 0`: nil; closed: ClosedQueueError. None: store or wait.
    fn push_refusal(
        &self,
        full: bool,
        first: bool,
        should_block: bool,
        timeout: Option<Duration>,
    ) -> Option<Result<bool, Error>> {
        if full && first {
            if !should_block {
                return Some(Err(errors::thread_error("queue full")));
            }
            if timeout == Some(Duration::ZERO) {
                return Some(Ok(false));
            }
        }
        self.closed
            .load(Ordering::Acquire)
            .then(|| Err(errors::closed_queue()))
    }
}

/// Counts a `pop`/`push` in `num_waiting` from its first wait until it
/// returns, across the wait's slices: counted per slice, the count dropped
/// to 0 between two (for as long as the waiter sat in a GC barrier under
/// GC.stress), as a waiter that was never gone.
struct Waiting<'a> {
    queue: &'a RactorQueue,
    fork_gen: u64,
}

impl<'a> Waiting<'a> {
    /// Counts the caller unless it is counted already (in this process: a
    /// wait that goes on in a forked child counts in the child's queue).
    fn ensure(queue: &'a RactorQueue, counted: &mut Option<Waiting<'a>>) {
        let gen = sys::fork_generation();
        if counted.as_ref().is_some_and(|c| c.fork_gen == gen) {
            return;
        }
        queue.sh().waiting.fetch_add(1, Ordering::AcqRel);
        *counted = Some(Waiting {
            queue,
            fork_gen: gen,
        });
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        // A fork meanwhile (a trap handler, under a scheduler) left this
        // count in the parent's state: the child's starts at 0.
        if sys::fork_generation() == self.fork_gen {
            self.queue.sh().waiting.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

enum Stored {
    Yes,
    Full,
    Closed,
}

/// The waits. Their state is fetched again after every Ruby call (a trap
/// handler, a fiber scheduler or a copy's `initialize_copy` may fork, and
/// the child then has a fresh `Shared`), never held across one.
impl RactorQueue {
    fn sh(&self) -> &Shared {
        self.shared.get()
    }

    /// Blocks (GVL released) until the condition of `side` may hold, the
    /// queue closes, `deadline` passes, an interrupt arrives, or spuriously:
    /// the caller re-checks. First yields the CPU for up to
    /// `RapidThread.spin_us`, watching the lock-free mirrors, as the other
    /// waits of the gem do; then sleeps once on the futex, at most `SLICE`.
    ///
    /// Under a fiber scheduler it lets the scheduler run other fibers for a
    /// slice instead (`kernel_sleep`): a push from another Ractor cannot
    /// call the scheduler's `unblock`, so the fiber polls.
    fn block(&self, ruby: &Ruby, side: Side, deadline: Option<Instant>) -> Result<Woke, Error> {
        let scheduler = sys::fiber_scheduler(ruby);
        if !scheduler.is_nil() {
            let slice = deadline.map_or(SCHEDULER_SLICE, |d| {
                d.saturating_duration_since(Instant::now())
                    .min(SCHEDULER_SLICE)
            });
            sys::scheduler_sleep(scheduler, slice)?;
            return Ok(Shared::timed_out(deadline));
        }
        let me = CurrentThread::get(ruby);
        let q = self.sh();
        let mut woke = Woke::Interrupted;
        // SAFETY: `block_nogvl` touches only the shared state, which other
        // Ractors reach without any GVL (atomics, a std Mutex, futex
        // words), the spin policy's atomics and the interrupt flag of this
        // thread (read as Ruby's own ubf does); it calls no Ruby.
        // The one unsafe block outside sys/: only this module can vouch
        // for its own code.
        unsafe { sys::without_gvl(|| woke = q.block_nogvl(side, deadline, me)) };
        Ok(woke)
    }

    /// After a wait: runs pending interrupts (which may raise, as the
    /// scheduler's sleep may have: a wake-up this thread consumed is then
    /// passed on first).
    fn after_wait(
        &self,
        ruby: &Ruby,
        side: Side,
        woke: Result<Woke, Error>,
    ) -> Result<Woke, Error> {
        woke.and_then(|w| sys::check_ints(ruby).map(|()| w))
            .inspect_err(|_| self.sh().pass_on(side))
    }

    fn pop(
        &self,
        ruby: &Ruby,
        should_block: bool,
        timeout: Option<Duration>,
    ) -> Result<Value, Error> {
        let deadline = wait::deadline_after(timeout);
        let mut first = true;
        let mut timed_out = false;
        let mut counted = None;
        loop {
            let q = self.sh();
            if let Some(v) = q.try_pop() {
                return Ok(v.get(ruby));
            }
            if timed_out {
                // That was the last look, as stock re-checks after its sleep.
                q.pass_on(Side::Pop);
                return Ok(sys::nil(ruby));
            }
            // As queue_do_pop: non_block raises even when closed.
            if std::mem::replace(&mut first, false) && !should_block {
                return Err(errors::thread_error("queue empty"));
            }
            if q.closed.load(Ordering::Acquire) || timeout == Some(Duration::ZERO) {
                return Ok(sys::nil(ruby));
            }
            Waiting::ensure(self, &mut counted);
            let woke = self.block(ruby, Side::Pop, deadline);
            timed_out = self.after_wait(ruby, Side::Pop, woke)? == Woke::TimedOut;
        }
    }

    /// Ok(false): timed out (or `timeout: 0` and full).
    fn push(
        &self,
        me: Value,
        v: Held,
        should_block: bool,
        timeout: Option<Duration>,
    ) -> Result<bool, Error> {
        let ruby = Ruby::get_with(me);
        let deadline = wait::deadline_after(timeout);
        let mut first = true;
        let mut timed_out = false;
        let mut counted = None;
        loop {
            let q = self.sh();
            match q.try_push(v) {
                Stored::Yes => {
                    sys::write_barrier(me, v);
                    return Ok(true);
                }
                Stored::Closed => return Err(errors::closed_queue()),
                Stored::Full => {}
            }
            if timed_out {
                // That was the last look after the deadline.
                q.pass_on(Side::Push);
                return Ok(false);
            }
            let first = std::mem::replace(&mut first, false);
            if let Some(r) = q.push_refusal(true, first, should_block, timeout) {
                return r;
            }
            Waiting::ensure(self, &mut counted);
            let woke = self.block(&ruby, Side::Push, deadline);
            timed_out = self.after_wait(&ruby, Side::Push, woke)? == Woke::TimedOut;
        }
    }
}

// --- Ruby methods ---------------------------------------------------------

fn get(rb_self: &Value) -> Result<&RactorQueue, Error> {
    let q = sys::typed_ref::<RactorQueue>(rb_self)
        .ok_or_else(|| errors::wrong_receiver(*rb_self, "RapidThread::RactorQueue"))?;
    if !q.sh().initialized.load(Ordering::Acquire) {
        return Err(errors::not_initialized(*rb_self));
    }
    Ok(q)
}

/// `initialize(max = nil)`: unbounded, or at most `max` items. Freezes the
/// queue, which makes it shareable (a frozen-shareable typed object).
fn initialize(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    let q = sys::typed_ref::<RactorQueue>(&rb_self)
        .ok_or_else(|| errors::wrong_receiver(rb_self, "RapidThread::RactorQueue"))?;
    if rb_self.is_frozen() {
        return Err(Error::new(
            ruby.exception_frozen_error(),
            format!(
                "can't modify frozen {}: {}",
                rb_self.class(),
                rb_self.inspect()
            ),
        ));
    }
    let args = scan_args::<(), (Option<Value>,), (), (), (), ()>(args)?;
    let max = match args.optional.0.filter(|v| !v.is_nil()) {
        None => 0,
        Some(v) => match sys::num2long(v)? {
            n if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
            _ => return Err(errors::arg_error("queue size must be positive")),
        },
    };
    let shared = q.shared.get();
    shared.max.store(max, Ordering::Relaxed);
    shared.initialized.store(true, Ordering::Release);
    sys::freeze::<RactorQueue>(rb_self);
    Ok(rb_self)
}

/// `push(obj, non_block = false, timeout: nil)`, `<<`, `enq`.
fn push(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    let q = get(&rb_self)?;
    let (obj, non_block, timeout) = if args.len() == 1 {
        (args[0], false, None)
    } else {
        let a = scan_args::<(Value,), (Option<Value>,), (), (), RHash, ()>(args)?;
        let (nb, t) = block_and_timeout(a.optional.0, a.keywords)?;
        (a.required.0, nb, t)
    };
    // Decided before the copy when it can be: a closed (or full and
    // non-blocking) queue refuses without copying.
    let sh = q.sh();
    if let Some(r) = sh.push_refusal(sh.is_full(), true, !non_block, timeout) {
        return r.map(|pushed| if pushed { rb_self } else { sys::nil(ruby) });
    }
    let item = sys::shareable(obj)?;
    let pushed = q.push(rb_self, Held::new(item), !non_block, timeout);
    sys::gc_guard(sys::raw(item));
    Ok(if pushed? { rb_self } else { sys::nil(ruby) })
}

/// `pop(non_block = false, timeout: nil)`, `shift`, `deq`.
fn pop(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    let q = get(&rb_self)?;
    let (non_block, timeout) = if args.is_empty() {
        (false, None)
    } else {
        crate::queue::pop_args(args)?
    };
    q.pop(ruby, !non_block, timeout)
}

fn close(rb_self: Value) -> Result<Value, Error> {
    let q = get(&rb_self)?.sh();
    let newly = {
        let _s = q.lock();
        let newly = !q.closed.swap(true, Ordering::AcqRel);
        q.not_empty.bump();
        q.not_full.bump();
        newly
    };
    if newly {
        q.not_empty.wake(i32::MAX);
        q.not_full.wake(i32::MAX);
    }
    Ok(rb_self)
}

fn is_closed(rb_self: Value) -> Result<bool, Error> {
    Ok(get(&rb_self)?.sh().closed.load(Ordering::Acquire))
}

fn length(rb_self: Value) -> Result<usize, Error> {
    Ok(get(&rb_self)?.sh().lock().items.len())
}

fn is_empty(rb_self: Value) -> Result<bool, Error> {
    Ok(get(&rb_self)?.sh().lock().items.is_empty())
}

/// The capacity, or nil when unbounded.
fn max(rb_self: Value) -> Result<Option<usize>, Error> {
    let m = get(&rb_self)?.sh().max();
    Ok((m != 0).then_some(m))
}

/// Threads (of any Ractor) blocked in `pop` or `push` on this queue.
fn num_waiting(rb_self: Value) -> Result<usize, Error> {
    Ok(get(&rb_self)?.sh().waiting.load(Ordering::Acquire))
}

fn marshal_dump(rb_self: Value) -> Result<Value, Error> {
    Err(errors::cannot_dump(rb_self))
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<(), Error> {
    errors::init(ruby);
    let class = module.define_class("RactorQueue", ruby.class_object())?;
    class.define_alloc_func::<RactorQueue>();
    sys::undef_method(class, c"initialize_copy");
    // Only this class's methods may be called from other Ractors.
    sys::ext_ractor_safe(ruby, true);
    let defined = (|| {
        class.define_method("initialize", method!(initialize, -1))?;
        class.define_method("push", method!(push, -1))?;
        class.define_method("pop", method!(pop, -1))?;
        class.define_method("close", method!(close, 0))?;
        class.define_method("closed?", method!(is_closed, 0))?;
        class.define_method("length", method!(length, 0))?;
        class.define_method("empty?", method!(is_empty, 0))?;
        class.define_method("max", method!(max, 0))?;
        class.define_method("num_waiting", method!(num_waiting, 0))?;
        class.define_method("marshal_dump", method!(marshal_dump, 0))?;
        for (alias, name) in crate::queue::ALIASES {
            class.define_alias(alias, name)?;
        }
        Ok::<(), Error>(())
    })();
    sys::ext_ractor_safe(ruby, false);
    defined
}
