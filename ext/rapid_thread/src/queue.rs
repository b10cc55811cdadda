//! `RapidThread::Queue`: a drop-in for Ruby 3.1's `Thread::Queue`
//! (thread_sync.c), plus Ruby 3.2's `pop(timeout:)`.
//!
//! The same Rust struct backs `RapidThread::SizedQueue` (a Ruby subclass);
//! `max == 0` means unbounded.
//!
//! **Chained wake-ups** (private, `__chain_wakeups!`; RapidThread::Executor's
//! job queue, whose poppers are its worker threads): a push wakes a popper
//! only when no popper woken before is still on its way
//! (`WaitList::in_flight`), and a woken popper, once it has left its wait,
//! wakes the next when more items are left than it takes. A burst of n
//! pushes then wakes one worker, not n: the workers woken one per item
//! queued for the GVL one after another, where one running worker takes
//! the items in turn (docs/design-details.md, "Executor"). Every item
//! still finds a popper: an item is only ever queued with poppers asleep
//! while one woken popper is on its way, and that one passes the wake-up
//! on when it leaves its wait, on every path (an error passes it on as any
//! wake-up is, `wait::enlisted`).
//!
//! The chain waits for each woken popper to get the GVL. Where another
//! thread holds it for a while (a CPU-bound thread runs its 100 ms time
//! slices), each hop would cost a slice, and tasks that block would start
//! one slice apart. So a wake-up that has not taken effect within
//! `CHAIN_PATIENCE` counts as stuck: a push then wakes another popper, and
//! the popper that was that slow to come wakes one per item left.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::errors;
use crate::sys::{self, GvlCell, Held, WaitList};
use crate::wait::{self, park};
use magnus::gc::{Compactor, Marker};
use magnus::scan_args::{get_kwargs, scan_args};
use magnus::{
    method, prelude::*, DataTypeFunctions, Error, Integer, RClass, RHash, RModule, Ruby, TypedData,
    Value,
};

#[derive(Default)]
pub struct State {
    pub items: VecDeque<Held>,
    pub initialized: bool,
    /// Set once, by `close`, which also sets the object's closed flag
    /// (`sys::set_closed_flag`) that `closed?` reads (`sys::define_closed_p`).
    pub closed: bool,
    /// Capacity for SizedQueue; 0 for an unbounded Queue.
    pub max: usize,
    pub poppers: WaitList,
    pub pushers: WaitList,
    /// Chained wake-ups (see the module header).
    chain: bool,
    fork_gen: u64,
}

impl State {
    /// Forgets waiters inherited across fork (queue_fork_check): the
    /// parent's threads and their stacks do not exist in the child.
    #[inline(always)]
    pub fn fresh(&mut self) -> &mut State {
        let gen = sys::fork_generation();
        if self.fork_gen != gen {
            self.fork_gen = gen;
            self.poppers.forget_all();
            self.pushers.forget_all();
        }
        self
    }

    pub fn num_waiting(&mut self) -> usize {
        let s = self.fresh();
        s.poppers.waiting() + s.pushers.waiting()
    }

    /// How many blocked poppers a push of `n` items wakes: one per item,
    /// or with chained wake-ups one, and none while a woken popper is on
    /// its way (see the module header).
    fn poppers_to_wake(&self, n: usize) -> usize {
        match (self.poppers.is_empty(), self.chain) {
            (true, _) => 0,
            (false, false) => n,
            (false, true) => {
                usize::from(n > 0 && (self.poppers.in_flight() == 0 || self.last_wake_stuck()))
            }
        }
    }

    /// Chained wake-ups: the list's last wake-up is `CHAIN_PATIENCE` old.
    fn last_wake_stuck(&self) -> bool {
        sys::monotonic_ns().saturating_sub(self.poppers.last_wake()) >= CHAIN_PATIENCE_NS
    }
}

/// How long a chained wake-up may take to reach its popper before the
/// chain stops waiting for it (see the module header): far above the few
/// hundred µs a burst of posts takes, far below Ruby's 100 ms time slice.
const CHAIN_PATIENCE_NS: u64 = 5_000_000;

pub fn poppers(s: &mut State) -> &mut WaitList {
    &mut s.poppers
}

pub fn pushers(s: &mut State) -> &mut WaitList {
    &mut s.pushers
}

#[derive(Default, TypedData)]
#[magnus(
    class = "RapidThread::Queue",
    free_immediately,
    size,
    mark,
    compact,
    wb_protected
)]
pub struct Queue {
    pub state: GvlCell<State>,
}

impl DataTypeFunctions for Queue {
    fn mark(&self, m: &Marker) {
        sys::mark_from(m, &self.state, |s, mark| {
            s.items.iter().for_each(|&v| mark(v))
        });
    }

    fn compact(&self, c: &Compactor) {
        self.state.with(|s| {
            s.items
                .iter_mut()
                .for_each(|v| *v = sys::gc_location(c, *v))
        });
    }

    fn size(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.state.with(|s| s.items.capacity()) * std::mem::size_of::<Held>()
    }
}

/// Outcome of a non-blocking attempt, decided under the GVL without
/// calling Ruby; errors are built afterwards.
pub enum Take {
    Item(Held, bool),
    Empty,
    NotInitialized,
}

impl Queue {
    /// The receiver, checked by hand (see sys::typed_ref).
    #[inline(always)]
    pub fn get(rb_self: &Value) -> Result<&Queue, Error> {
        match sys::typed_ref::<Queue>(rb_self) {
            Some(q) => Ok(q),
            None => Err(errors::wrong_receiver(*rb_self, "RapidThread::Queue")),
        }
    }

    /// Shifts the first item; the flag says a blocked pusher should be
    /// woken (SizedQueue only).
    #[inline(always)]
    pub fn try_shift(&self) -> Take {
        self.state.with(|s| {
            let s = s.fresh();
            if !s.initialized {
                return Take::NotInitialized;
            }
            match s.items.pop_front() {
                Some(v) => Take::Item(
                    v,
                    s.max != 0 && s.items.len() < s.max && !s.pushers.is_empty(),
                ),
                None => Take::Empty,
            }
        })
    }

    /// Blocking or non-blocking pop with an optional timeout, following
    /// `queue_do_pop` in Ruby 3.2. The first attempt is inlined; waiting
    /// lives in `pop_wait`.
    #[inline(always)]
    pub fn pop_impl(
        &self,
        rb_self: Value,
        should_block: bool,
        timeout: Option<Duration>,
    ) -> Result<Value, Error> {
        match self.try_shift() {
            Take::Item(v, wake_pusher) => self.took(&Ruby::get_with(rb_self), v, wake_pusher),
            Take::NotInitialized => Err(errors::not_initialized(rb_self)),
            Take::Empty if !should_block => Err(errors::thread_error("queue empty")),
            Take::Empty if timeout == Some(Duration::ZERO) => {
                Ok(sys::nil(&Ruby::get_with(rb_self)))
            }
            Take::Empty => self.pop_wait(rb_self, wait::deadline_after(timeout)),
        }
    }

    #[inline(always)]
    pub fn took(&self, ruby: &Ruby, v: Held, wake_pusher: bool) -> Result<Value, Error> {
        // On this stack (where the GC sees it) before the wake-up runs Ruby.
        let v = v.get(ruby);
        if wake_pusher {
            wait::wake_one(&self.state, pushers)?;
        }
        Ok(v)
    }

    #[inline(never)]
    fn pop_wait(&self, rb_self: Value, deadline: Option<Instant>) -> Result<Value, Error> {
        let ruby = Ruby::get_with(rb_self);
        loop {
            if self.state.with(|s| s.closed) {
                return Ok(sys::nil(&ruby));
            }
            park(&self.state, poppers, rb_self, deadline, |s| {
                !s.items.is_empty()
            })?;
            self.pass_chain_on(1)?;
            match self.try_shift() {
                Take::Item(v, wake_pusher) => return self.took(&ruby, v, wake_pusher),
                Take::NotInitialized => return Err(errors::not_initialized(rb_self)),
                Take::Empty => {}
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(sys::nil(&ruby));
            }
        }
    }

    /// Appends `v`, waking one blocked popper.
    #[inline(always)]
    pub fn push_item(&self, rb_self: Value, v: Value) -> Result<Value, Error> {
        let v = Held::new(v);
        let r = self.state.with(|s| {
            let s = s.fresh();
            if s.closed {
                return Err(true);
            }
            if !s.initialized {
                return Err(false);
            }
            s.items.push_back(v);
            Ok(s.poppers_to_wake(1) > 0)
        });
        match r {
            Ok(wake) => {
                sys::write_barrier(rb_self, v);
                if wake {
                    wait::wake_one(&self.state, poppers)?;
                }
                Ok(rb_self)
            }
            Err(true) => Err(errors::closed_queue()),
            Err(false) => Err(errors::not_initialized(rb_self)),
        }
    }

    /// SizedQueue#push with Ruby 3.2's `timeout:`; blocks while full.
    pub fn push_bounded(
        &self,
        rb_self: Value,
        v: Value,
        should_block: bool,
        timeout: Option<Duration>,
    ) -> Result<Value, Error> {
        enum Put {
            Done(bool),
            Full(bool),
            Closed,
            NotInitialized,
        }
        let ruby = Ruby::get_with(rb_self);
        let v = Held::new(v);
        let deadline = wait::deadline_after(timeout);
        let mut first = true;
        loop {
            let put = self.state.with(|s| {
                let s = s.fresh();
                if !s.initialized {
                    Put::NotInitialized
                } else if s.items.len() >= s.max {
                    Put::Full(s.closed)
                } else if s.closed {
                    Put::Closed
                } else {
                    s.items.push_back(v);
                    Put::Done(s.poppers_to_wake(1) > 0)
                }
            });
            match put {
                Put::Done(wake_popper) => {
                    sys::write_barrier(rb_self, v);
                    if wake_popper {
                        wait::wake_one(&self.state, poppers)?;
                    }
                    return Ok(rb_self);
                }
                Put::NotInitialized => return Err(errors::not_initialized(rb_self)),
                Put::Closed => return Err(errors::closed_queue()),
                Put::Full(closed) => {
                    let stop = instead_of_waiting(
                        &ruby,
                        &mut first,
                        should_block,
                        timeout,
                        deadline,
                        "queue full",
                    );
                    if let Some(r) = stop {
                        return r;
                    }
                    if closed {
                        return Err(errors::closed_queue());
                    }
                }
            }
            park(&self.state, pushers, rb_self, deadline, |s| {
                s.items.len() < s.max
            })?;
        }
    }

    /// `pop_batch`: 1 to `max` items, oldest first, as a new Array; the
    /// edge cases are `pop`'s. On a SizedQueue it wakes as many blocked
    /// pushers as it made room for.
    pub fn pop_batch_impl(
        &self,
        rb_self: Value,
        max: usize,
        should_block: bool,
        timeout: Option<Duration>,
    ) -> Result<Value, Error> {
        let ruby = Ruby::get_with(rb_self);
        let deadline = wait::deadline_after(timeout);
        let mut first = true;
        loop {
            let ready = self.with_initialized(rb_self, |s| s.items.len().min(max))?;
            if ready > 0 {
                // The items stay in the queue (marked) while Ruby allocates
                // the Array; then they move into it with no allocation.
                // (Should the Array fail, the items stay: with chained
                // wake-ups another popper must come for them.)
                let mut fresh = sys::FreshArray::new(&ruby, ready)
                    .map_err(|e| wait::after_error(&ruby, e, || self.pass_chain_on(0)))?;
                let (taken, wake_pushers) = self.state.with(|s| {
                    let taken = sys::ary_take_front(&mut fresh, &mut s.items, ready);
                    (taken, s.max != 0 && !s.pushers.is_empty())
                });
                let ary = fresh.into_array();
                if taken > 0 {
                    if wake_pushers {
                        if let Err(e) = wait::wake_n(&self.state, pushers, taken) {
                            // The batch goes back rather than down with the
                            // error (pushers woken meanwhile may have filled
                            // the room: the queue can then hold more than
                            // max for a while; those woken later find no
                            // room and wait again). Ruby code ran in the
                            // wake-up, so a popper may have parked on the
                            // empty queue since: wake as many as there are
                            // items back, the error staying the one raised.
                            self.state
                                .with(|s| sys::ary_put_back_front(ary, &mut s.items));
                            sys::write_barrier_from(rb_self, sys::Items::of(ary), 0, taken);
                            sys::gc_guard(sys::raw(ary.as_value()));
                            return Err(wait::after_error(&ruby, e, || {
                                wait::wake_n(&self.state, poppers, taken).map(drop)
                            }));
                        }
                    }
                    return Ok(ary.as_value());
                }
            }
            let stop = instead_of_waiting(
                &ruby,
                &mut first,
                should_block,
                timeout,
                deadline,
                "queue empty",
            );
            if let Some(r) = stop {
                return r;
            }
            if self.state.with(|s| s.closed) {
                return Ok(sys::nil(&ruby));
            }
            park(&self.state, poppers, rb_self, deadline, |s| {
                !s.items.is_empty()
            })?;
            self.pass_chain_on(max)?;
        }
    }

    /// With chained wake-ups, a popper back from its wait that is about to
    /// take up to `taking` items wakes the next popper when more are left
    /// and no woken popper is on its way, or one per item left when its
    /// own wake-up took `CHAIN_PATIENCE` (see the module header). Before it
    /// takes them, so that no item it took is held here while Ruby may run
    /// (a fiber scheduler's unblock); should the items be gone when it
    /// looks, the poppers woken find none and wait again.
    pub fn pass_chain_on(&self, taking: usize) -> Result<(), Error> {
        let n = self.state.with(|s| {
            // (`chain` survives a fork; the lists are read after `fresh`.)
            if !s.chain {
                return 0;
            }
            let s = s.fresh();
            let left = s.items.len().saturating_sub(taking);
            if left == 0 || s.poppers.is_empty() {
                0
            } else if s.last_wake_stuck() {
                left
            } else {
                usize::from(s.poppers.in_flight() == 0)
            }
        });
        if n > 0 {
            wait::wake_n(&self.state, poppers, n)?;
        }
        Ok(())
    }

    /// `push_all`: appends the items of `vals` (a private Array, see
    /// `with_values`) in order and wakes one blocked popper per
    /// item appended (as many as there are). On a SizedQueue it fills the
    /// room there is, then blocks for more as `push` does: it is
    /// `vals.each { push(_1, non_block, timeout:) }` with one deadline, so
    /// after "queue full", a timeout or ClosedQueueError the items before
    /// stay pushed. A closed queue raises ClosedQueueError even for no
    /// items.
    pub fn push_values(
        &self,
        rb_self: Value,
        vals: sys::Items,
        should_block: bool,
        timeout: Option<Duration>,
    ) -> Result<Value, Error> {
        enum Put {
            Added(usize, usize),
            Full(bool),
            Closed,
            NotInitialized,
        }
        let ruby = Ruby::get_with(rb_self);
        let deadline = wait::deadline_after(timeout);
        let n = vals.len();
        let mut done = 0;
        let mut first = true;
        loop {
            let put = self.state.with(|s| {
                let s = s.fresh();
                if !s.initialized {
                    return Put::NotInitialized;
                }
                let room = match s.max {
                    0 => usize::MAX,
                    max => max.saturating_sub(s.items.len()),
                };
                if room == 0 && done < n {
                    return Put::Full(s.closed);
                }
                if s.closed {
                    return Put::Closed;
                }
                let k = room.min(n - done);
                sys::ary_extend_from(vals, done, k, &mut s.items);
                Put::Added(k, s.poppers_to_wake(k))
            });
            match put {
                Put::NotInitialized => return Err(errors::not_initialized(rb_self)),
                Put::Closed => return Err(errors::closed_queue()),
                Put::Added(k, wake_poppers) => {
                    sys::write_barrier_from(rb_self, vals, done, k);
                    done += k;
                    if wake_poppers > 0 {
                        wait::wake_n(&self.state, poppers, wake_poppers)?;
                    }
                    if done == n {
                        return Ok(rb_self);
                    }
                }
                Put::Full(closed) => {
                    let stop = instead_of_waiting(
                        &ruby,
                        &mut first,
                        should_block,
                        timeout,
                        deadline,
                        "queue full",
                    );
                    if let Some(r) = stop {
                        return r;
                    }
                    if closed {
                        return Err(errors::closed_queue());
                    }
                    park(&self.state, pushers, rb_self, deadline, |s| {
                        s.items.len() < s.max
                    })?;
                }
            }
        }
    }

    fn with_initialized<R>(
        &self,
        rb_self: Value,
        f: impl FnOnce(&mut State) -> R,
    ) -> Result<R, Error> {
        self.state
            .with(|s| {
                let s = s.fresh();
                s.initialized.then(|| f(s))
            })
            .ok_or_else(|| errors::not_initialized(rb_self))
    }
}

/// What a blocking operation does when it cannot proceed, before it waits
/// (Ruby 3.2's `queue_do_pop` / `rb_szqueue_push`): on the first try,
/// `non_block` raises ThreadError `refusal` ("queue empty" / "queue full")
/// and `timeout: 0` returns nil; after a wait, an expired deadline returns
/// nil. None: wait (again).
fn instead_of_waiting(
    ruby: &Ruby,
    first: &mut bool,
    should_block: bool,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
    refusal: &'static str,
) -> Option<Result<Value, Error>> {
    if std::mem::replace(first, false) {
        if !should_block {
            return Some(Err(errors::thread_error(refusal)));
        }
        if timeout == Some(Duration::ZERO) {
            return Some(Ok(sys::nil(ruby)));
        }
    } else if deadline.is_some_and(|d| Instant::now() >= d) {
        return Some(Ok(sys::nil(ruby)));
    }
    None
}

/// Parses `(non_block = false, timeout: nil)` as Ruby 3.2 does.
pub fn pop_args(args: &[Value]) -> Result<(bool, Option<Duration>), Error> {
    // `pop(timeout: t)` alone (an idle worker's wait) is read directly.
    if let [kw] = args {
        if sys::keyword_given(&Ruby::get_with(*kw)) {
            if let Some(t) = sys::only_keyword(*kw, sys::name!(c"timeout")) {
                return Ok((false, wait::timeout_duration(t)?));
            }
        }
    }
    let args = scan_args::<(), (Option<Value>,), (), (), RHash, ()>(args)?;
    block_and_timeout(args.optional.0, args.keywords)
}

/// The `non_block` flag and `timeout:` keyword shared by `pop` and
/// SizedQueue#push (Ruby 3.2's thread_sync.rb), with its ArgumentError.
pub fn block_and_timeout(
    non_block: Option<Value>,
    keywords: RHash,
) -> Result<(bool, Option<Duration>), Error> {
    let non_block = non_block.is_some_and(|v| v.to_bool());
    let kw = get_kwargs::<_, (), (Option<Value>,), ()>(keywords, &[], &["timeout"])?;
    let timeout = kw.optional.0.filter(|v| !v.is_nil());
    if non_block && timeout.is_some() {
        return Err(errors::arg_error(
            "can't set a timeout if non_block is enabled",
        ));
    }
    Ok((
        non_block,
        timeout.map(wait::timeout_duration).transpose()?.flatten(),
    ))
}

/// The hot path of every push: append `v` when that is all there is to do
/// (initialized, open, room left, no popper to wake) and say whether it did.
/// Skipping `fresh()` is fine: it only matters once a wait list is
/// non-empty, and then the caller takes the full method.
#[inline(always)]
pub fn try_append(rb_self: &Value, v: Value) -> Option<()> {
    let v = Held::new(v);
    let q = sys::typed_ref::<Queue>(rb_self)?;
    q.state.with(|s| {
        let plain = s.initialized
            && !s.closed
            && (s.max == 0 || s.items.len() < s.max)
            && s.poppers.is_empty();
        if plain {
            s.items.push_back(v);
        }
        plain.then_some(())
    })?;
    sys::write_barrier(*rb_self, v);
    Some(())
}

// --- Ruby methods ---------------------------------------------------------

fn initialize(rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    let q = Queue::get(&rb_self)?;
    let args = scan_args::<(), (Option<Value>,), (), (), (), ()>(args)?;
    let mut initial = Vec::new();
    if let Some(enumerable) = args.optional.0 {
        sys::array_values(sys::to_array(enumerable)?, &mut initial);
    }
    initial.iter().for_each(|&v| sys::write_barrier(rb_self, v));
    q.state.with(|s| {
        let s = s.fresh();
        s.items.clear();
        s.items.extend(initial);
        s.initialized = true;
    });
    Ok(rb_self)
}

/// Hot path of `Queue.new` with no argument (concurrent-ruby makes a Queue
/// per worker, connection_pool one per pool): magnus' `scan_args` formats
/// its argument spec into a String on every call, which cost half of
/// `Queue.new` (docs/design-details.md, "Per call"). Anything else (an
/// initial enumerable, a wrong receiver, wrong arity) takes the full
/// `initialize`.
struct InitializeFast;

impl sys::FastMethodV for InitializeFast {
    const SLOW: sys::RawMethodV = method!(initialize, -1);

    fn fast(_: &Ruby, rb_self: Value, args: &[Value]) -> Option<Value> {
        if !args.is_empty() {
            return None;
        }
        sys::typed_ref::<Queue>(&rb_self)?.state.with(|s| {
            let s = s.fresh();
            s.items.clear();
            s.initialized = true;
        });
        Some(rb_self)
    }
}

fn push(rb_self: Value, obj: Value) -> Result<Value, Error> {
    Queue::get(&rb_self)?.push_item(rb_self, obj)
}

fn pop(rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    let q = Queue::get(&rb_self)?;
    if args.is_empty() {
        return q.pop_impl(rb_self, true, None);
    }
    let (non_block, timeout) = pop_args(args)?;
    q.pop_impl(rb_self, !non_block, timeout)
}

/// Hot path of `push`: see `try_append`; everything else (errors, waking a
/// popper) goes through the full magnus-wrapped `push`.
struct PushFast;

impl sys::FastMethod1 for PushFast {
    const SLOW: sys::RawMethod1 = method!(push, 1);

    fn fast(_: &Ruby, rb_self: Value, obj: Value) -> Option<Value> {
        try_append(&rb_self, obj).map(|()| rb_self)
    }
}

/// Hot path of `pop` / `shift` / `deq` with no arguments and an item ready
/// and no blocked pusher to wake; everything else takes the full `pop`.
struct PopFast;

impl sys::FastMethodV for PopFast {
    const SLOW: sys::RawMethodV = method!(pop, -1);

    fn fast(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Option<Value> {
        if !args.is_empty() {
            return None;
        }
        let q = sys::typed_ref::<Queue>(&rb_self)?;
        let item = q.state.with(|s| {
            if s.initialized && (s.max == 0 || s.pushers.is_empty()) {
                s.items.pop_front()
            } else {
                None
            }
        });
        item.map(|v| v.get(ruby))
    }
}

/// `push_all`'s argument, converted as `Queue.new` does, passed to `f` and
/// kept on this stack frame until it returns. For a SizedQueue, whose
/// push_all reads it across waits while other threads run and the GC may
/// move the items, a private copy (`sys::Items::private_copy`); an unbounded
/// Queue appends everything before any Ruby code can run, so it reads the
/// Array as it is.
pub fn with_values<R>(
    q: &Queue,
    enumerable: Value,
    f: impl FnOnce(sys::Items) -> Result<R, Error>,
) -> Result<R, Error> {
    let ary = sys::to_array(enumerable)?;
    let vals = if q.state.with(|s| s.max == 0) {
        sys::Items::of(ary)
    } else {
        sys::Items::private_copy(ary)?
    };
    let r = f(vals);
    vals.guard();
    sys::gc_guard(sys::raw(ary.as_value()));
    r
}

/// `push_all(enumerable)`: see `Queue::push_values`.
fn push_all(rb_self: Value, enumerable: Value) -> Result<Value, Error> {
    let q = Queue::get(&rb_self)?;
    with_values(q, enumerable, |vals| {
        q.push_values(rb_self, vals, true, None)
    })
}

/// `pop_batch(max, non_block = false, timeout: nil)`.
fn pop_batch(rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    let q = Queue::get(&rb_self)?;
    let args = scan_args::<(Value,), (Option<Value>,), (), (), RHash, ()>(args)?;
    let max = batch_max(args.required.0)?;
    let (non_block, timeout) = block_and_timeout(args.optional.0, args.keywords)?;
    q.pop_batch_impl(rb_self, max, !non_block, timeout)
}

/// `pop_batch`'s `max`: a positive Integer (a Bignum means "everything").
fn batch_max(v: Value) -> Result<usize, Error> {
    let invalid = || errors::arg_error("max must be a positive Integer");
    let i = Integer::from_value(v).ok_or_else(invalid)?;
    match i.to_i64() {
        Ok(n) if n > 0 => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        Ok(_) => Err(invalid()),
        Err(_) if i.funcall::<_, _, bool>("positive?", ())? => Ok(usize::MAX),
        Err(_) => Err(invalid()),
    }
}

fn close(rb_self: Value) -> Result<Value, Error> {
    let q = Queue::get(&rb_self)?;
    let newly = q
        .state
        .with(|s| !std::mem::replace(&mut s.fresh().closed, true));
    if newly {
        sys::set_closed_flag::<Queue>(rb_self);
        // Every waiter of both lists is woken, whatever fails on the way.
        wait::finally(
            &Ruby::get_with(rb_self),
            wait::wake_all(&q.state, poppers),
            || wait::wake_all(&q.state, pushers),
        )?;
    }
    Ok(rb_self)
}

/// Hot path of a query (`empty?`, `length`, `num_waiting`): `read`
/// answers in place, or None for anything else (a wrong receiver, an
/// uninitialized queue, a length past Fixnum), which takes the full
/// method (docs/design-details.md, "Per call").
#[inline(always)]
fn query(rb_self: Value, read: impl FnOnce(&mut State) -> Option<Value>) -> Option<Value> {
    sys::typed_ref::<Queue>(&rb_self)?.state.with(read)
}

struct EmptyFast;

impl sys::FastMethod0 for EmptyFast {
    const SLOW: sys::RawMethod0 = method!(is_empty, 0);

    fn fast(ruby: &Ruby, rb_self: Value) -> Option<Value> {
        query(rb_self, |s| {
            let s = s.fresh();
            s.initialized
                .then(|| sys::bool_value(ruby, s.items.is_empty()))
        })
    }
}

struct LengthFast;

impl sys::FastMethod0 for LengthFast {
    const SLOW: sys::RawMethod0 = method!(length, 0);

    fn fast(ruby: &Ruby, rb_self: Value) -> Option<Value> {
        query(rb_self, |s| {
            let s = s.fresh();
            if s.initialized {
                sys::fixnum_value(ruby, s.items.len())
            } else {
                None
            }
        })
    }
}

struct NumWaitingFast;

impl sys::FastMethod0 for NumWaitingFast {
    const SLOW: sys::RawMethod0 = method!(num_waiting, 0);

    fn fast(ruby: &Ruby, rb_self: Value) -> Option<Value> {
        query(rb_self, |s| sys::fixnum_value(ruby, s.num_waiting()))
    }
}

fn is_empty(rb_self: Value) -> Result<bool, Error> {
    Queue::get(&rb_self)?.with_initialized(rb_self, |s| s.items.is_empty())
}

fn clear(rb_self: Value) -> Result<Value, Error> {
    let q = Queue::get(&rb_self)?;
    let wake_pushers = q.with_initialized(rb_self, |s| {
        s.items.clear();
        s.max != 0 && !s.pushers.is_empty()
    })?;
    if wake_pushers {
        wait::wake_all(&q.state, pushers)?;
    }
    Ok(rb_self)
}

fn length(rb_self: Value) -> Result<usize, Error> {
    Queue::get(&rb_self)?.with_initialized(rb_self, |s| s.items.len())
}

fn num_waiting(rb_self: Value) -> Result<usize, Error> {
    Ok(Queue::get(&rb_self)?.state.with(|s| s.num_waiting()))
}

/// `__chain_wakeups!` (private): chained wake-ups from now on (see the
/// module header).
fn chain_wakeups(rb_self: Value) -> Result<Value, Error> {
    Queue::get(&rb_self)?.state.with(|s| s.chain = true);
    Ok(rb_self)
}

fn freeze(rb_self: Value) -> Result<Value, Error> {
    Err(errors::cannot_freeze(rb_self))
}

fn marshal_dump(rb_self: Value) -> Result<Value, Error> {
    Err(errors::cannot_dump(rb_self))
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<RClass, Error> {
    let class = module.define_class("Queue", ruby.class_object())?;
    class.define_alloc_func::<Queue>();
    class.define_method(
        "initialize",
        sys::entry_v::<InitializeFast> as sys::RawMethodV,
    )?;
    sys::undef_method(class, c"initialize_copy");
    class.define_method("marshal_dump", method!(marshal_dump, 0))?;
    class.define_method("freeze", method!(freeze, 0))?;
    class.define_method("close", method!(close, 0))?;
    sys::define_closed_p::<Queue>(ruby, class)?;
    class.define_method("push", sys::entry1::<PushFast> as sys::RawMethod1)?;
    class.define_method("pop", sys::entry_v::<PopFast> as sys::RawMethodV)?;
    class.define_method("empty?", sys::entry0::<EmptyFast> as sys::RawMethod0)?;
    class.define_method("clear", method!(clear, 0))?;
    class.define_method("length", sys::entry0::<LengthFast> as sys::RawMethod0)?;
    class.define_method(
        "num_waiting",
        sys::entry0::<NumWaitingFast> as sys::RawMethod0,
    )?;
    class.define_method("push_all", method!(push_all, 1))?;
    class.define_method("pop_batch", method!(pop_batch, -1))?;
    class.define_private_method("__chain_wakeups!", method!(chain_wakeups, 0))?;
    for (alias, name) in ALIASES {
        class.define_alias(alias, name)?;
    }
    Ok(class)
}

/// Thread::Queue's aliases, which RactorQueue has too.
pub const ALIASES: [(&str, &str); 5] = [
    ("enq", "push"),
    ("<<", "push"),
    ("deq", "pop"),
    ("shift", "pop"),
    ("size", "length"),
];
