//! Every `unsafe` block of the extension lives in this module.
//!
//! The rest of the crate is safe Rust built on the small, documented
//! primitives below:
//!
//! * [`GvlCell`]: interior mutability for state that is only ever touched
//!   while holding the GVL;
//! * [`typed_ref`]: the hand-rolled receiver check used on hot paths
//!   (magnus' `&Self` conversion wraps `rb_check_typeddata` in `rb_protect`
//!   and costs ~15 ns per call, see docs/design-details.md);
//! * [`WaitList`] / [`Waiter`]: an intrusive, doubly linked list of waiters
//!   that live on the waiting thread's stack, as in `thread_sync.c`;
//! * thin wrappers over the CRuby thread API (sleep, wake-up, releasing the
//!   GVL, fiber scheduler hooks), each wrapped in `rb_protect` when it can
//!   raise so that no Ruby `longjmp` crosses a Rust frame that owns data.

use std::cell::{Cell, UnsafeCell};
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use magnus::rb_sys::{protect, AsRawValue, FromRawValue};
use magnus::{Error, TypedData, Value};
use rb_sys::{ruby_value_type, VALUE};

// ---------------------------------------------------------------------------
// GvlCell
// ---------------------------------------------------------------------------

/// A cell whose contents are only accessed by the thread holding the GVL.
///
/// Ruby runs at most one thread of a ractor at a time, and every method of
/// our classes (and the GC's mark/compact callbacks) run with the GVL held,
/// so accesses are serialised by the GVL itself and need no lock.
pub struct GvlCell<T>(UnsafeCell<T>);

// SAFETY: all access goes through `with`, whose callers hold the GVL (they
// are Ruby methods or GC callbacks), so there is never concurrent access.
// Our classes are not Ractor-shareable, so one GVL covers every access.
unsafe impl<T> Sync for GvlCell<T> {}
unsafe impl<T> Send for GvlCell<T> {}

impl<T: Default> Default for GvlCell<T> {
    fn default() -> Self {
        GvlCell(UnsafeCell::new(T::default()))
    }
}

impl<T> GvlCell<T> {
    pub const fn new(v: T) -> Self {
        GvlCell(UnsafeCell::new(v))
    }

    /// Runs `f` with exclusive access to the contents.
    ///
    /// The caller must hold the GVL, and `f` must not call back into Ruby
    /// (no allocation, no method calls): Ruby could otherwise run the GC
    /// (which reads the cell from `mark`) or switch threads in the middle.
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: see the type-level comment; `f` cannot re-enter Ruby, so
        // no other reference to the contents exists while it runs.
        unsafe { f(&mut *self.0.get()) }
    }
}

// ---------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------

#[inline(always)]
pub fn raw(v: Value) -> VALUE {
    v.as_raw()
}

#[inline(always)]
pub fn value(v: VALUE) -> Value {
    // SAFETY: callers only pass VALUEs that Ruby handed us and that are kept
    // alive (marked, on the stack, or held by Ruby).
    unsafe { Value::from_raw(v) }
}

#[inline(always)]
pub fn special_const(v: VALUE) -> bool {
    rb_sys::SPECIAL_CONST_P(v)
}

pub const QNIL: VALUE = rb_sys::special_consts::Qnil as VALUE;

/// Returns the Rust struct wrapped by `v` when `v` is an RTypedData object of
/// type `T`, without magnus' `rb_protect`-wrapped `rb_check_typeddata`.
///
/// The check is the same as Ruby's `rb_typeddata_is_kind_of` for types
/// without a parent: not a special constant, T_DATA, typed, and the type
/// pointer is `T`'s static `rb_data_type_t`.
#[inline(always)]
pub fn typed_ref<T: TypedData>(v: &Value) -> Option<&T> {
    let obj = v.as_raw();
    if special_const(obj) {
        return None;
    }
    // SAFETY: `obj` is a heap object (not a special constant) that Ruby
    // passed to us, so its RBasic header can be read; RTYPEDDATA_TYPE and
    // the data pointer are only read after T_DATA and the typed flag have
    // been checked. magnus stores a `Box<T>` as the data pointer, and the
    // object (the method receiver) outlives the borrow.
    unsafe {
        if rb_sys::RB_BUILTIN_TYPE(obj) != ruby_value_type::RUBY_T_DATA
            || !rb_sys::RTYPEDDATA_P(obj)
        {
            return None;
        }
        let ty = rb_sys::RTYPEDDATA_TYPE(obj);
        if ty != (T::data_type() as *const magnus::DataType).cast() {
            return None;
        }
        let data = rb_sys::RTYPEDDATA_GET_DATA(obj) as *const T;
        data.as_ref()
    }
}

/// [`typed_ref`] for a VALUE held elsewhere (a task in the thread cache's
/// queue). The caller keeps `obj` alive (marked or on the stack) while it
/// uses the reference.
#[inline(always)]
pub fn typed_ref_raw<'a, T: TypedData>(obj: VALUE) -> Option<&'a T> {
    let v = value(obj);
    // SAFETY: the object outlives `'a` by the caller's contract; typed_ref
    // only ties the borrow to the local `v`.
    typed_ref::<T>(&v).map(|r| unsafe { &*(r as *const T) })
}

/// The write barrier for storing `child` into the object `parent`.
#[inline(always)]
pub fn write_barrier(parent: VALUE, child: VALUE) {
    if !special_const(child) {
        // SAFETY: both are live VALUEs and we hold the GVL.
        unsafe { rb_sys::rb_gc_writebarrier(parent, child) }
    }
}

/// Marks `v` for the GC, allowing compaction to move it.
#[inline(always)]
pub fn mark_movable(v: VALUE) {
    // SAFETY: called from a dmark callback with a VALUE we hold.
    unsafe { rb_sys::rb_gc_mark_movable(v) }
}

/// The new address of `v` after compaction.
#[inline(always)]
pub fn gc_location(v: VALUE) -> VALUE {
    // SAFETY: called from a dcompact callback with a VALUE we marked.
    unsafe { rb_sys::rb_gc_location(v) }
}

/// `rb_convert_type(v, T_ARRAY, "Array", "to_a")`, exactly what stock's
/// `rb_to_array` does in `Queue#initialize`, so errors match.
pub fn to_array(v: Value) -> Result<Value, Error> {
    let obj = v.as_raw();
    // SAFETY: rb_convert_type may raise; `protect` catches the longjmp.
    let r = protect(|| unsafe {
        rb_sys::rb_convert_type(
            obj,
            ruby_value_type::RUBY_T_ARRAY as _,
            c"Array".as_ptr(),
            c"to_a".as_ptr(),
        )
    })?;
    Ok(value(r))
}

/// Copies the elements of a Ruby Array into `out`.
pub fn array_values(ary: Value, out: &mut Vec<VALUE>) {
    let a = ary.as_raw();
    // SAFETY: `ary` is a T_ARRAY (checked by rb_convert_type); we read its
    // elements with rb_ary_entry, which neither allocates nor raises.
    unsafe {
        let len = rb_sys::RARRAY_LEN(a);
        out.reserve(len as usize);
        for i in 0..len {
            out.push(rb_sys::rb_ary_entry(a, i));
        }
    }
}

// ---------------------------------------------------------------------------
// Fork generation
// ---------------------------------------------------------------------------

static FORK_GEN: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_child() {
    FORK_GEN.fetch_add(1, Ordering::Relaxed);
}

/// Registers the child-side `pthread_atfork` handler that bumps the fork
/// generation. Ruby's `fork` goes through fork(2), so the handler runs in
/// every child.
pub fn install_fork_hook() {
    // SAFETY: registering a plain function with no captured state.
    unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_child));
    }
}

#[inline(always)]
pub fn fork_generation() -> u64 {
    FORK_GEN.load(Ordering::Relaxed)
}

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
    /// Set (under the GVL) by the waker; read without the GVL by the spinner.
    signaled: AtomicBool,
    /// Set by the unblock function (Thread#raise, kill, signals, ...).
    interrupted: AtomicBool,
    /// `GVL_RELEASES` at wake time; the spinner waits for it to move.
    wake_epoch: AtomicU64,
    /// True once the waiter may be in a Ruby sleep and needs a real wake-up.
    sleeping: Cell<bool>,
    /// When the list last woke anyone, as seen when this waiter entered.
    list_last_wake: Cell<Option<Instant>>,
    thread: VALUE,
    fiber: VALUE,
    /// The fiber scheduler to unblock through, or nil.
    scheduler: VALUE,
    /// What the waiter blocks on (the queue, or the condvar's mutex), passed
    /// to the scheduler's block/unblock hooks.
    blocker: VALUE,
}

impl Waiter {
    /// A waiter for the current thread and fiber, blocked on `blocker`.
    pub fn current(blocker: VALUE) -> Waiter {
        // SAFETY: plain queries of the current thread, GVL held.
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
        Waiter {
            prev: Cell::new(ptr::null()),
            next: Cell::new(ptr::null()),
            linked: Cell::new(false),
            signaled: AtomicBool::new(false),
            interrupted: AtomicBool::new(false),
            wake_epoch: AtomicU64::new(0),
            sleeping: Cell::new(false),
            list_last_wake: Cell::new(None),
            thread,
            fiber,
            scheduler,
            blocker,
        }
    }

    #[inline]
    pub fn signaled(&self) -> bool {
        self.signaled.load(Ordering::Acquire)
    }

    /// Whether the waiter blocks through a fiber scheduler.
    pub fn has_scheduler(&self) -> bool {
        self.scheduler != QNIL
    }

    /// When the list this waiter is on last woke a waiter (at entry).
    pub fn list_last_wake(&self) -> Option<Instant> {
        self.list_last_wake.get()
    }

    pub fn set_sleeping(&self) {
        self.sleeping.set(true);
    }

    /// Marks the waiter woken and says how to complete the wake-up.
    /// Called by the waker, GVL held, right after unlinking it.
    pub fn signal(&self) -> WakeTarget {
        self.wake_epoch
            .store(GVL_RELEASES.load(Ordering::Acquire), Ordering::Relaxed);
        self.signaled.store(true, Ordering::Release);
        WakeTarget {
            thread: self.thread,
            fiber: self.fiber,
            scheduler: self.scheduler,
            blocker: self.blocker,
            sleeping: self.sleeping.get(),
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
}

impl WakeTarget {
    /// Completes a wake-up. `false` means the thread is dead and the
    /// wake-up should go to the next waiter.
    pub fn wake(self) -> Result<bool, Error> {
        if self.scheduler != QNIL {
            // SAFETY: may call Ruby code and raise; caught by protect.
            protect(|| unsafe {
                rb_sys::rb_fiber_scheduler_unblock(self.scheduler, self.blocker, self.fiber)
            })?;
            Ok(true)
        } else if self.sleeping {
            // SAFETY: rb_thread_wakeup_alive does not raise; it returns nil
            // for a dead thread.
            Ok(unsafe { rb_sys::rb_thread_wakeup_alive(self.thread) } != QNIL)
        } else {
            // Spinning without the GVL: the signal flag is all it needs.
            Ok(true)
        }
    }
}

/// A FIFO of waiters with O(1) push, pop and removal from the middle.
pub struct WaitList {
    head: *const Waiter,
    tail: *const Waiter,
    /// Waiters registered and not yet returned (stock's `num_waiting`): a
    /// woken waiter stays counted until it has left its wait.
    waiting: usize,
    /// When `pop_front` last handed out a waiter (a wake-up).
    last_wake: Option<Instant>,
}

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
            last_wake: None,
        }
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Seeds when the list last woke someone, for a new list that stands
    /// in for an older one (each Task has its own joiner list, but joins
    /// of tasks follow each other as pops of a queue do).
    pub fn set_last_wake(&mut self, t: Option<Instant>) {
        self.last_wake = t;
    }

    /// Appends `w`.
    ///
    /// # Safety
    /// `w` must stay at its address until `leave` has been called for it.
    unsafe fn enter(&mut self, w: &Waiter) {
        debug_assert!(!w.linked.get());
        w.prev.set(self.tail);
        w.next.set(ptr::null());
        if let Some(t) = self.tail.as_ref() {
            t.next.set(w);
        } else {
            self.head = w;
        }
        self.tail = w;
        w.linked.set(true);
        w.list_last_wake.set(self.last_wake);
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
    }

    /// Removes and returns the longest waiter. It stays alive until the
    /// GVL is released: its owner can only leave after re-taking it.
    pub fn pop_front(&mut self) -> Option<&Waiter> {
        // SAFETY: see `unlink`.
        let w = unsafe { self.head.as_ref()? };
        self.unlink(w);
        self.last_wake = Some(Instant::now());
        // SAFETY: as above; the lifetime is tied to `&mut self`, i.e. to a
        // region during which the GVL is held.
        Some(unsafe { &*(w as *const Waiter) })
    }

    /// Deregisters `w`: unlinks it if still linked (O(1)) and drops it
    /// from the waiting count. Called on every exit path of a wait.
    fn leave(&mut self, w: &Waiter) {
        if w.linked.get() {
            self.unlink(w);
        }
        self.waiting = self.waiting.saturating_sub(1);
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
    // SAFETY (contract of `enter`): `w` is borrowed for this whole call and
    // the guard, which this function owns and nobody can forget, calls
    // `leave` before it returns or unwinds.
    cell.with(|s| unsafe { list(s).enter(w) });
    let _leave = Leave { cell, list, w };
    body()
}

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

/// Whether the current thread is the only live thread.
pub fn thread_alone() -> bool {
    // SAFETY: a plain query, GVL held.
    unsafe { rb_sys::rb_thread_alone() != 0 }
}

/// Spin budgets, in microseconds (see `RapidThread.spin_us`).
pub static SPIN_US: AtomicU32 = AtomicU32::new(50);
pub static GVL_SPIN_US: AtomicU32 = AtomicU32::new(50);

struct SpinArgs<'a> {
    w: &'a Waiter,
    spin: Duration,
    gvl: Duration,
}

fn spin_phase(a: &SpinArgs) {
    note_gvl_release();
    let w = a.w;
    let start = std::time::Instant::now();
    // Phase 1: wait for the signal, yielding the CPU between checks.
    loop {
        if w.signaled() {
            break;
        }
        if w.interrupted.load(Ordering::Relaxed) || start.elapsed() >= a.spin {
            return;
        }
        // SAFETY: a plain system call.
        unsafe { libc::sched_yield() };
    }
    // Phase 2: the waker still holds the GVL; wait until it has released
    // it through one of our waits, so that re-acquiring it does not sleep.
    let epoch = w.wake_epoch.load(Ordering::Relaxed);
    let start = std::time::Instant::now();
    while GVL_RELEASES.load(Ordering::Acquire) == epoch
        && !w.interrupted.load(Ordering::Relaxed)
        && start.elapsed() < a.gvl
    {
        // SAFETY: a plain system call.
        unsafe { libc::sched_yield() };
    }
}

unsafe extern "C" fn spin_nogvl(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `arg` is the `SpinArgs` on the caller's stack, alive for the
    // whole call. A panic here would abort (extern "C"), and nothing in
    // spin_phase panics.
    spin_phase(&*(arg as *const SpinArgs));
    ptr::null_mut()
}

unsafe extern "C" fn spin_ubf(arg: *mut c_void) {
    // SAFETY: `arg` is the waiter, alive while its wait runs.
    (*(arg as *const Waiter))
        .interrupted
        .store(true, Ordering::Relaxed);
}

/// Spins for the signal with the GVL released (two-phase, see
/// docs/design-details.md). Returns with the GVL held; never raises.
pub fn spin_without_gvl(w: &Waiter, spin: Duration, gvl: Duration) {
    let args = SpinArgs { w, spin, gvl };
    // SAFETY: both pointers refer to locals that outlive the call; the
    // unblock function only stores an atomic flag. The `2` variant matters:
    // plain rb_thread_call_without_gvl runs pending interrupts on the way
    // out and may longjmp over our frames; this one never raises (it skips
    // `spin_nogvl` when an interrupt is pending), and the caller runs
    // interrupts itself under rb_protect.
    unsafe {
        rb_sys::rb_thread_call_without_gvl2(
            Some(spin_nogvl),
            &args as *const SpinArgs as *mut c_void,
            Some(spin_ubf),
            w as *const Waiter as *mut c_void,
        );
    }
}

/// Runs pending interrupts (Thread#raise, kill, signal handlers).
pub fn check_ints() -> Result<(), Error> {
    // SAFETY: may raise; caught by protect.
    protect(|| unsafe {
        rb_sys::rb_thread_check_ints();
        QNIL
    })?;
    Ok(())
}

/// Sleeps until woken, until `timeout` passes, or until any interrupt
/// runs (a signal handler, Thread#raise, ...): it may return spuriously, and
/// the caller re-checks its condition after every return. Visible to the
/// deadlock detector when untimed.
///
/// Ruby's `rb_thread_sleep_deadly` / `rb_thread_wait_for` do not return
/// after a signal handler: the handler runs with the thread marked
/// runnable and the sleeping status is restored afterwards, so a wake-up
/// that lands meanwhile (from the handler itself or another thread) is a
/// no-op and the thread sleeps on. Stock's queue waits use a sleep that
/// returns after any interrupt (`rb_thread_sleep_deadly_allow_spurious_wakeup`,
/// not exported); the one public way to it is `Mutex#sleep`
/// (`rb_mutex_sleep`), here on a fresh private mutex nobody else can see.
pub fn ruby_sleep(timeout: Option<Duration>) -> Result<(), Error> {
    Sleeper::new()?.sleep(timeout)
}

/// What [`ruby_sleep`] sleeps on, made once per wait: a fresh private
/// Thread::Mutex (nil in trap context). Made before the wait's last check
/// of its condition, so that no allocation (and no GC) lies between that
/// check and the sleep, where a signal handler's wake-up could be lost.
/// It lives on the waiting thread's stack, where the GC sees the mutex.
pub struct Sleeper {
    mutex: VALUE,
}

impl Sleeper {
    pub fn new() -> Result<Sleeper, Error> {
        // SAFETY: allocates a Thread::Mutex and locks it; may raise (no
        // memory), caught by protect. A fresh mutex is free, so locking it
        // neither waits nor runs interrupts: the one error it raises is
        // ThreadError "can't be called from trap context". Inside a trap
        // handler no other handler can run (they do not nest), so Ruby's
        // own sleep loses no wake-up there.
        let m = protect(|| unsafe { rb_sys::rb_mutex_new() })?;
        let mutex = match protect(|| unsafe { rb_sys::rb_mutex_lock(m) }) {
            Ok(_) => m,
            Err(e) if is_thread_error(&e) => QNIL,
            Err(e) => return Err(e),
        };
        Ok(Sleeper { mutex })
    }

    /// Sleeps once (see [`ruby_sleep`]); the caller re-checks its condition.
    pub fn sleep(&self, timeout: Option<Duration>) -> Result<(), Error> {
        let r = if self.mutex == QNIL {
            sleep_in_trap_context(timeout)
        } else {
            private_mutex_sleep(self.mutex, timeout)
        };
        gc_guard(self.mutex);
        r
    }
}

fn private_mutex_sleep(m: VALUE, timeout: Option<Duration>) -> Result<(), Error> {
    // SAFETY: rb_mutex_sleep unlocks `m` (ours, locked by this thread),
    // sleeps, re-locks it uninterruptibly in an ensure, then runs pending
    // interrupts, which may raise or jump: caught by protect. The Float is
    // a flonum or kept on this stack frame until the call returns.
    let slept = protect(|| unsafe {
        let t = match timeout {
            None => QNIL,
            Some(d) => rb_sys::rb_float_new(d.as_secs_f64()),
        };
        rb_sys::rb_mutex_sleep(m, t)
    });
    // The re-lock cannot fail on a private, uncontended mutex outside trap
    // context, so `m` is held here on every path, ready for the next sleep.
    // Make sure of it (a mutex left unlocked would make the next
    // rb_mutex_sleep raise).
    // SAFETY: plain query / lock of a free mutex only this thread uses.
    let relocked = protect(|| unsafe {
        if rb_sys::rb_mutex_locked_p(m) == rb_sys::special_consts::Qfalse as VALUE {
            rb_sys::rb_mutex_lock(m);
        }
        QNIL
    });
    slept.and(relocked).map(drop)
}

fn sleep_in_trap_context(timeout: Option<Duration>) -> Result<(), Error> {
    // SAFETY: both calls may raise (interrupts); caught by protect.
    protect(|| unsafe {
        match timeout {
            None => rb_sys::rb_thread_sleep_deadly(),
            Some(d) => rb_sys::rb_thread_wait_for(rb_sys::timeval {
                tv_sec: d.as_secs() as _,
                tv_usec: d.subsec_micros() as _,
            }),
        }
        QNIL
    })?;
    Ok(())
}

/// Whether `e` is a raised ThreadError (never true for a jump: a kill).
fn is_thread_error(e: &Error) -> bool {
    // SAFETY: called on a Ruby thread holding the GVL.
    let ruby = unsafe { magnus::Ruby::get_unchecked() };
    e.is_kind_of(ruby.exception_thread_error())
}

/// Runs `cleanup` while the jump `jump` (a kill, a `throw`) is pending,
/// as Ruby runs an `ensure` clause, and returns the jump to propagate.
///
/// While a jump propagates, `$!` holds a marker that is not an exception
/// (INT2FIX(TAG_FATAL) for a kill). A Ruby call that raises and is rescued
/// meanwhile must put `$!` back, and Ruby refuses to set it to the marker
/// (TypeError "assigning non-exception to $!", which would replace the
/// kill). `rb_ensure` handles it as Ruby's own ensure clauses do: `$!` is
/// nil while `cleanup` runs, and the marker is restored before the jump
/// resumes. `cleanup` catches its own errors; any other error is `jump`.
pub fn cleanup_during_jump<F: FnOnce()>(jump: Error, cleanup: F) -> Error {
    let tag = match jump.error_type() {
        magnus::error::ErrorType::Jump(tag) => tag_number(tag),
        _ => {
            cleanup();
            return jump;
        }
    };
    struct Ctx<G> {
        tag: i32,
        cleanup: Option<G>,
    }
    unsafe extern "C" fn resume<G>(data: VALUE) -> VALUE {
        // SAFETY: `data` is the Ctx on cleanup_during_jump's stack.
        rb_sys::rb_jump_tag((*(data as *const Ctx<G>)).tag);
    }
    unsafe extern "C" fn run<G: FnOnce()>(data: VALUE) -> VALUE {
        // SAFETY: as in `resume`; rb_ensure calls this exactly once.
        if let Some(f) = (*(data as *mut Ctx<G>)).cleanup.take() {
            f();
        }
        QNIL
    }
    let mut ctx = Ctx {
        tag,
        cleanup: Some(cleanup),
    };
    let data = &mut ctx as *mut Ctx<F> as VALUE;
    // SAFETY: `ctx` outlives the call; `resume` re-raises the jump, which
    // rb_ensure catches, runs `run`, restores `$!` and jumps on; protect
    // catches it again.
    match protect(|| unsafe { rb_sys::rb_ensure(Some(resume::<F>), data, Some(run::<F>), data) }) {
        Err(e) => e,
        Ok(_) => jump,
    }
}

/// Sets `$!` to nil, after a jump was caught that will be resumed from a
/// frame with no Ruby frame above it (a cached worker ends with it): the
/// worker's clean-up calls can then rescue errors as usual.
pub fn clear_errinfo() {
    // SAFETY: setting nil never raises.
    unsafe { rb_sys::rb_set_errinfo(QNIL) }
}

/// Keeps `v` on this stack frame (where Ruby's conservative GC sees it)
/// up to this point, as `RB_GC_GUARD` does: a VALUE otherwise dead to the
/// compiler may live only in a register or nowhere while Ruby allocates.
#[inline(always)]
pub fn gc_guard(v: VALUE) {
    std::hint::black_box(&v);
}

/// Blocks the current fiber through its scheduler.
pub fn scheduler_block(w: &Waiter, timeout: Option<Duration>) -> Result<(), Error> {
    let (scheduler, blocker) = (w.scheduler, w.blocker);
    // SAFETY: may call Ruby code and raise; caught by protect.
    protect(|| unsafe {
        let t = match timeout {
            None => QNIL,
            Some(d) => rb_sys::rb_float_new(d.as_secs_f64()),
        };
        rb_sys::rb_fiber_scheduler_block(scheduler, blocker, t)
    })?;
    Ok(())
}

/// `rb_num2dbl`, with Ruby's own TypeError for non-numeric values.
pub fn num2dbl(v: VALUE) -> Result<f64, Error> {
    let mut out = 0.0f64;
    let out_ptr = &mut out as *mut f64;
    // SAFETY: rb_num2dbl may raise; protect catches it. `out` outlives the
    // closure.
    protect(|| unsafe {
        *out_ptr = rb_sys::rb_num2dbl(v);
        QNIL
    })?;
    Ok(out)
}

/// `rb_undef_method(klass, name)` (stock undefines `initialize_copy`).
pub fn undef_method(class: Value, name: &std::ffi::CStr) {
    // SAFETY: called at load time on a class we just defined.
    unsafe { rb_sys::rb_undef_method(class.as_raw(), name.as_ptr()) }
}

// ---------------------------------------------------------------------------
// Hot-path method entry points
// ---------------------------------------------------------------------------

/// A method body as `rb_define_method` sees it with arity 1.
pub type RawMethod1 = unsafe extern "C" fn(Value, Value) -> Value;
/// A method body with arity -1 (`argc, argv, self`).
pub type RawMethodV = unsafe extern "C" fn(std::os::raw::c_int, *const Value, Value) -> Value;

/// Calls a `magnus::method!`-generated wrapper. Those wrappers catch
/// panics and raise errors themselves, so calling them is as safe as Ruby
/// calling them; hot paths use this to fall back to the full method.
#[inline(always)]
pub fn call_method1(f: RawMethod1, rb_self: Value, a: Value) -> Value {
    // SAFETY: `f` is a magnus wrapper expecting exactly these arguments,
    // called on a Ruby thread with the GVL held, as Ruby would call it.
    unsafe { f(rb_self, a) }
}

/// As [`call_method1`] for arity -1 wrappers.
#[inline(always)]
pub fn call_method_v(
    f: RawMethodV,
    argc: std::os::raw::c_int,
    argv: *const Value,
    rb_self: Value,
) -> Value {
    // SAFETY: as for call_method1; `argc`/`argv` are Ruby's own.
    unsafe { f(argc, argv, rb_self) }
}

/// `NUM2LONG`, with Ruby's own TypeError / RangeError.
pub fn num2long(v: VALUE) -> Result<i64, Error> {
    let mut out = 0i64;
    let out_ptr = &mut out as *mut i64;
    // SAFETY: rb_num2long may raise; protect catches it. `out` outlives the
    // closure.
    protect(|| unsafe {
        *out_ptr = rb_sys::rb_num2long(v) as i64;
        QNIL
    })?;
    Ok(out)
}

/// Argument `i` of an arity -1 call, if there is one.
#[inline(always)]
pub fn arg(argc: std::os::raw::c_int, argv: *const Value, i: usize) -> Option<Value> {
    // SAFETY: Ruby passes `argc` valid VALUEs at `argv`; `i` is checked.
    (i < argc as usize).then(|| unsafe { *argv.add(i) })
}

// ---------------------------------------------------------------------------
// Mutexes (ConditionVariable#wait)
// ---------------------------------------------------------------------------

/// `rb_time_interval`: Mutex#sleep's conversion of its timeout, with its
/// errors ("time interval must not be negative", "can't convert ...").
pub fn time_interval(v: VALUE) -> Result<Duration, Error> {
    let mut tv = rb_sys::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let tv_ptr = &mut tv as *mut rb_sys::timeval;
    // SAFETY: may raise; protect catches it. `tv` outlives the closure.
    protect(|| unsafe {
        *tv_ptr = rb_sys::rb_time_interval(v);
        QNIL
    })?;
    Ok(Duration::from_secs(tv.tv_sec.max(0) as u64)
        + Duration::from_micros(tv.tv_usec.max(0) as u64))
}

pub fn mutex_unlock(m: VALUE) -> Result<(), Error> {
    // SAFETY: raises ThreadError when not owned; caught by protect.
    protect(|| unsafe { rb_sys::rb_mutex_unlock(m) })?;
    Ok(())
}

/// Locks `m` once: `trylock`, else `rb_mutex_lock`, which waits and runs
/// interrupts while it waits; an interrupt's error comes back without the
/// mutex. The first half of re-locking after a wait (see
/// condition_variable.rs): the rare interrupted case finishes with
/// [`mutex_relock_masked`].
pub fn mutex_lock_once(m: VALUE) -> Result<(), Error> {
    // SAFETY: a plain try-lock; does not raise.
    if unsafe { rb_sys::rb_mutex_trylock(m) } != rb_sys::special_consts::Qfalse as VALUE {
        return Ok(());
    }
    // SAFETY: may raise (interrupts, ThreadError); caught by protect.
    protect(|| unsafe { rb_sys::rb_mutex_lock(m) }).map(drop)
}

/// Whether `e` is a raised ThreadError: the lock's own refusal (trap
/// context, recursive locking), never an interrupt's.
pub fn refused_lock(e: &Error) -> bool {
    is_thread_error(e)
}

/// Locks `m` as stock's `mutex_lock_uninterruptible` does after
/// Mutex#sleep: no interrupt breaks the attempt. It waits inside
/// `Thread.handle_interrupt(Object => :never)`, so that Thread#raise / kill
/// / Timeout stay pending until the mutex is held; they are then raised (a
/// jump for a kill) as the returned error, with the mutex held. The error
/// is ThreadError without the mutex only where stock raises it too (a trap
/// handler). Costs a method call and a Hash: only for the rare re-lock that
/// an interrupt broke.
pub fn mutex_relock_masked(m: VALUE) -> Result<(), Error> {
    // SAFETY: a plain try-lock; does not raise.
    if unsafe { rb_sys::rb_mutex_trylock(m) } != rb_sys::special_consts::Qfalse as VALUE {
        return Ok(());
    }
    let mut state = Relock {
        mutex: m,
        kept: None,
    };
    let data = &mut state as *mut Relock as VALUE;
    // SAFETY: builds `{Object => :never}` and calls Thread.handle_interrupt
    // with a C block that locks the mutex (see relock_block); `state`
    // outlives the call. Leaving handle_interrupt runs the deferred
    // interrupts, which may raise or jump: caught by protect.
    let masked = protect(|| unsafe {
        let h = rb_sys::rb_hash_new();
        let never = rb_sys::rb_id2sym(rb_sys::rb_intern(c"never".as_ptr()));
        rb_sys::rb_hash_aset(h, rb_sys::rb_cObject, never);
        rb_sys::rb_block_call(
            rb_sys::rb_cThread,
            rb_sys::rb_intern(c"handle_interrupt".as_ptr()),
            1,
            &h,
            Some(relock_block),
            data,
        )
    });
    gc_guard(m);
    match (state.kept, masked) {
        (None, r) => r.map(drop),
        (Some(k), Ok(_)) => Err(k),
        (Some(k), Err(e)) => Err(crate::errors::more_urgent(k, e)),
    }
}

/// The state of a contended re-lock, on [`mutex_relock_masked`]'s stack (which
/// the GC scans: the kept error's exception stays alive).
struct Relock {
    mutex: VALUE,
    /// The most urgent error met while locking (a trap handler that raised
    /// or called exit); returned once the mutex is held.
    kept: Option<Error>,
}

unsafe extern "C" fn relock_block(
    _yielded: VALUE,
    data: VALUE,
    _argc: std::os::raw::c_int,
    _argv: *const VALUE,
    _blockarg: VALUE,
) -> VALUE {
    // SAFETY: `data` is the Relock on mutex_relock_masked's stack, alive for the
    // whole call; nothing here unwinds (errors are caught by protect).
    let state = &mut *(data as *mut Relock);
    let m = state.mutex;
    // Thread#raise and kill are deferred here, but trap handlers (main
    // thread) still run while rb_mutex_lock waits and may raise, exit or
    // throw; the mutex is then not held. Keep the error and lock again, as
    // stock's uninterruptible re-lock would have run the handler after
    // taking the mutex. A ThreadError is the lock's own refusal (trap
    // context; another fiber of this thread holds it): stock raises it
    // too, without the mutex.
    loop {
        let r = protect(|| rb_sys::rb_mutex_lock(m));
        let Err(e) = r else {
            return QNIL;
        };
        let refused = is_thread_error(&e);
        state.kept = Some(match state.kept.take() {
            Some(k) => crate::errors::more_urgent(k, e),
            None => e,
        });
        if refused {
            return QNIL;
        }
    }
}

/// `mutex.sleep(timeout)` through a normal method call (any object that
/// responds to `sleep`).
pub fn call_sleep(m: VALUE, timeout: VALUE) -> Result<VALUE, Error> {
    // SAFETY: a method call that may raise; caught by protect.
    protect(|| unsafe {
        let id = rb_sys::rb_intern(c"sleep".as_ptr());
        rb_sys::rb_funcallv(m, id, 1, &timeout)
    })
}

/// `rb_obj_class(v)`.
pub fn class_of(v: VALUE) -> VALUE {
    // SAFETY: a plain query of a live object.
    unsafe { rb_sys::rb_obj_class(v) }
}

/// Seconds since the epoch, as `time(0)` (Mutex#sleep returns the
/// difference of two of these).
pub fn wall_seconds() -> i64 {
    // SAFETY: time(NULL) has no preconditions.
    unsafe { libc::time(ptr::null_mut()) as i64 }
}

// ---------------------------------------------------------------------------
// Ruby threads, blocks and calls (thread cache)
// ---------------------------------------------------------------------------

/// The body of a thread started by [`create_thread`]: returns the
/// non-local exit tag (kill, exit) to resume once it has cleaned up, or
/// None to end the thread normally.
pub type ThreadBody = fn() -> Option<i32>;

unsafe extern "C" fn thread_entry(arg: *mut c_void) -> VALUE {
    // SAFETY: `arg` is the `ThreadBody` that create_thread cast to a
    // pointer; function pointers round-trip through `*mut c_void`.
    let body: ThreadBody = std::mem::transmute::<*mut c_void, ThreadBody>(arg);
    // A panic must not unwind into Ruby's C frames: end the thread instead
    // (the body's drop guards have run by then).
    finish_thread(std::panic::catch_unwind(body).unwrap_or(None))
}

unsafe extern "C" fn unmasked_thread_entry(arg: *mut c_void) -> VALUE {
    // SAFETY: as in thread_entry.
    let body: ThreadBody = std::mem::transmute::<*mut c_void, ThreadBody>(arg);
    finish_thread(run_unmasked(body))
}

unsafe fn finish_thread(tag: Option<i32>) -> VALUE {
    if let Some(tag) = tag {
        // SAFETY: resumes a kill/exit caught by `protect` deeper down. Only
        // the entry frame, which owns nothing, is jumped over; Ruby's own
        // thread start-up code catches it and ends the thread as killed.
        rb_sys::rb_jump_tag(tag);
    }
    QNIL
}

unsafe extern "C" fn unmasked_block(
    _yielded: VALUE,
    data: VALUE,
    _argc: std::os::raw::c_int,
    _argv: *const VALUE,
    _blockarg: VALUE,
) -> VALUE {
    // SAFETY: `data` points at the (body, result) pair on run_unmasked's
    // stack, alive for the whole call.
    let slot = &mut *(data as *mut (ThreadBody, Option<i32>));
    // A panic must not unwind into Ruby's C frames (see thread_entry).
    slot.1 = std::panic::catch_unwind(slot.0).unwrap_or(None);
    QNIL
}

/// Runs `body` inside `Thread.handle_interrupt(Object => :immediate)`.
/// A Ruby thread inherits its creator's handle_interrupt masks; a thread
/// created inside `handle_interrupt(Object => :never)` would otherwise
/// never see a kill (Task#kill, or the one Ruby sends at exit), and the
/// threads it creates would inherit the mask too.
fn run_unmasked(body: ThreadBody) -> Option<i32> {
    let mut slot: (ThreadBody, Option<i32>) = (body, None);
    let data = &mut slot as *mut (ThreadBody, Option<i32>) as VALUE;
    // SAFETY: builds `{Object => :immediate}` and calls
    // Thread.handle_interrupt with a C block; `slot` outlives the call.
    // handle_interrupt runs pending interrupts when it returns, which may
    // raise or jump: protect catches that.
    let r = protect(|| unsafe {
        let h = rb_sys::rb_hash_new();
        let immediate = rb_sys::rb_id2sym(rb_sys::rb_intern(c"immediate".as_ptr()));
        rb_sys::rb_hash_aset(h, rb_sys::rb_cObject, immediate);
        rb_sys::rb_block_call(
            rb_sys::rb_cThread,
            rb_sys::rb_intern(c"handle_interrupt".as_ptr()),
            1,
            &h,
            Some(unmasked_block),
            data,
        )
    });
    match r {
        Ok(_) => slot.1,
        Err(e) => match e.error_type() {
            magnus::error::ErrorType::Jump(tag) => slot.1.or(Some(tag_number(tag))),
            _ => slot.1,
        },
    }
}

/// Starts a Ruby thread (`rb_thread_create`) running `body` natively, with
/// no Ruby frame beneath it: backtraces raised in it contain only what the
/// body calls. With `unmasked`, the body runs inside
/// `Thread.handle_interrupt(Object => :immediate)` (see [`run_unmasked`];
/// that adds a frame, so it is for threads that run no user code). Raises
/// ThreadError when the thread cannot be created.
pub fn create_thread(body: ThreadBody, unmasked: bool) -> Result<VALUE, Error> {
    let entry = if unmasked {
        unmasked_thread_entry
    } else {
        thread_entry
    };
    // SAFETY: both entries match the expected signature and the argument
    // is a plain function pointer with no captured state; may raise
    // ThreadError, caught by protect.
    protect(|| unsafe { rb_sys::rb_thread_create(Some(entry), body as *mut c_void) })
}

/// The tag number of a non-local exit (`Error::Jump`).
pub fn tag_number(tag: &magnus::error::Tag) -> i32 {
    use magnus::error::Tag;
    match tag {
        Tag::Return => 1,
        Tag::Break => 2,
        Tag::Next => 3,
        Tag::Retry => 4,
        Tag::Redo => 5,
        Tag::Raise => 6,
        Tag::Throw => 7,
        Tag::Fatal => 8,
    }
}

pub fn current_thread() -> VALUE {
    // SAFETY: a plain query, GVL held.
    unsafe { rb_sys::rb_thread_current() }
}

pub fn main_thread() -> VALUE {
    // SAFETY: a plain query, GVL held.
    unsafe { rb_sys::rb_thread_main() }
}

/// The block passed to the current method as a Proc, if any.
pub fn block_proc() -> Option<VALUE> {
    // SAFETY: called from a method body with the GVL held; rb_block_proc
    // only allocates.
    unsafe { (rb_sys::rb_block_given_p() != 0).then(|| rb_sys::rb_block_proc()) }
}

/// Whether the current method was called with keywords (`**kw`).
pub fn keyword_given() -> bool {
    // SAFETY: a plain query of the current frame.
    unsafe { rb_sys::rb_keyword_given_p() != 0 }
}

/// `proc.call(*args)` (with `**` of the last element when `kw_splat`),
/// as Thread.new invokes its block.
pub fn call_proc(proc: VALUE, args: VALUE, kw_splat: bool) -> Result<VALUE, Error> {
    // SAFETY: `args` is an Array we built; the call may raise or throw,
    // caught by protect.
    protect(|| unsafe { rb_sys::rb_proc_call_kw(proc, args, kw_splat as _) })
}

/// What Ruby does when a thread's block returns: a fiber scheduler set by
/// the block is closed (`rb_fiber_scheduler_set(Qnil)`, which runs it).
pub fn close_fiber_scheduler() -> Result<(), Error> {
    // SAFETY: may run the scheduler's Ruby code and raise; caught by
    // protect.
    protect(|| unsafe {
        if rb_sys::rb_fiber_scheduler_get() != QNIL {
            rb_sys::rb_fiber_scheduler_set(QNIL);
        }
        QNIL
    })?;
    Ok(())
}

/// `recv.name(*args)`, protected.
pub fn funcall(recv: VALUE, name: &std::ffi::CStr, args: &[VALUE]) -> Result<VALUE, Error> {
    // SAFETY: a method call that may raise; caught by protect. `args`
    // outlives the call.
    protect(|| unsafe {
        let id = rb_sys::rb_intern(name.as_ptr());
        rb_sys::rb_funcallv(recv, id, args.len() as _, args.as_ptr())
    })
}

/// The value of a global variable such as `$DEBUG` (`rb_gv_get`; reading
/// a plain global runs no Ruby code).
pub fn global_variable(name: &std::ffi::CStr) -> VALUE {
    // SAFETY: a plain read, GVL held; `name` is NUL-terminated.
    unsafe { rb_sys::rb_gv_get(name.as_ptr()) }
}

/// Empties a thread's `thread_variable_set` storage (the hash Ruby keeps in
/// the thread's hidden `locals` ivar), if it has any.
pub fn clear_thread_variables(thread: VALUE) {
    // SAFETY: reading an ivar of a live thread; rb_ivar_get returns nil for
    // an unset one. rb_hash_clear on an unfrozen Hash does not raise, and
    // a frozen one is left alone.
    unsafe {
        let locals = rb_sys::rb_ivar_get(thread, rb_sys::rb_intern(c"locals".as_ptr()));
        if !special_const(locals)
            && rb_sys::RB_BUILTIN_TYPE(locals) == ruby_value_type::RUBY_T_HASH
            && rb_sys::rb_obj_frozen_p(locals) == rb_sys::special_consts::Qfalse as VALUE
            && rb_sys::RHASH_SIZE(locals) > 0
        {
            rb_sys::rb_hash_clear(locals);
        }
    }
}

/// Keeps `v` (and what its mark function marks) alive for the life of the
/// process.
pub fn register_mark_object(v: VALUE) {
    // SAFETY: `v` is a live object created at load time.
    unsafe { rb_sys::rb_gc_register_mark_object(v) }
}

/// `rb_thread_wakeup_alive`: makes a sleeping thread runnable; false if
/// the thread is dead.
pub fn wakeup_thread(thread: VALUE) -> bool {
    // SAFETY: does not raise; returns nil for a dead thread.
    unsafe { rb_sys::rb_thread_wakeup_alive(thread) != QNIL }
}

/// `rb_make_exception`: what Kernel#raise / Thread#raise build from their
/// arguments, with the same errors.
pub fn make_exception(args: &[VALUE]) -> Result<VALUE, Error> {
    // SAFETY: may raise (TypeError, ArgumentError); caught by protect.
    // `args` outlives the call.
    protect(|| unsafe { rb_sys::rb_make_exception(args.len() as _, args.as_ptr()) })
}

struct YieldArgs {
    budget: Duration,
    interrupted: AtomicBool,
}

unsafe extern "C" fn yield_nogvl(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `arg` is the YieldArgs on the caller's stack, alive for the
    // whole call; nothing here panics.
    let a = &*(arg as *const YieldArgs);
    let epoch = GVL_RELEASES.load(Ordering::Acquire);
    let start = Instant::now();
    while GVL_RELEASES.load(Ordering::Acquire) == epoch
        && !a.interrupted.load(Ordering::Relaxed)
        && start.elapsed() < a.budget
    {
        libc::sched_yield();
    }
    ptr::null_mut()
}

unsafe extern "C" fn yield_ubf(arg: *mut c_void) {
    // SAFETY: `arg` is the YieldArgs, alive while the call runs.
    (*(arg as *const YieldArgs))
        .interrupted
        .store(true, Ordering::Relaxed);
}

/// Gives the GVL to a thread spinning for it in one of our waits (phase 2
/// of the two-phase wait, which Thread.pass cannot see: it is not queued
/// on the GVL), and takes it back once that thread has released it again
/// through one of our waits, or after `budget`. Never raises.
pub fn yield_gvl(budget: Duration) {
    note_gvl_release();
    let args = YieldArgs {
        budget,
        interrupted: AtomicBool::new(false),
    };
    let p = &args as *const YieldArgs as *mut c_void;
    // SAFETY: `args` outlives the call; the unblock function only stores
    // an atomic flag; the `2` variant never raises (see spin_without_gvl).
    unsafe {
        rb_sys::rb_thread_call_without_gvl2(Some(yield_nogvl), p, Some(yield_ubf), p);
    }
}
