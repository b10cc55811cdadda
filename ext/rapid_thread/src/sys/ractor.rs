//! What RactorQueue needs from CRuby and from `unsafe`: the Ractor-safety
//! flag for method definitions, freezing, shareable copies, blocking with
//! the calling Ractor's GVL released, and a cell that a forked child resets.

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use magnus::rb_sys::{protect, AsRawValue};
use magnus::{Error, Ruby, TypedData, Value};
use rb_sys::VALUE;

use super::*;

/// Marks the methods defined from now on (until called with `false`) as
/// callable from any Ractor (`rb_ext_ractor_safe`). Ruby checks the flag
/// when a method is defined; every other class of the extension is
/// defined with it off (but `Queue#closed?`, which reads only the object's
/// header), so their methods raise Ractor::UnsafeError outside the main
/// Ractor and the GVL-guarded state (`GvlCell`) stays in one.
pub fn ext_ractor_safe(_: &Ruby, flag: bool) {
    // SAFETY: sets a flag of the current thread's extension-loading state
    // (GVL held: the handle).
    unsafe { rb_sys::rb_ext_ractor_safe(flag) }
}

/// `obj.freeze`.
pub fn freeze<T: TypedData>(obj: Value) {
    if typed_ref::<T>(&obj).is_some() {
        // SAFETY: a live T_DATA object of the extension's (checked), GVL
        // held (a Value): freezing one never raises (no singleton class
        // to freeze that could fail).
        unsafe {
            rb_sys::rb_obj_freeze(obj.as_raw());
        }
    }
}

/// `obj` when it is shareable, else `Ractor.make_shareable(obj, copy: true)`:
/// a deep copy, frozen, leaving `obj` untouched. Raises Ractor::Error for
/// what cannot be made shareable (a Thread, a Proc with unshareable self).
pub fn shareable(v: Value) -> Result<Value, Error> {
    let obj = v.as_raw();
    if special_const(obj) {
        return Ok(v);
    }
    // SAFETY: `obj` is a live heap object passed by Ruby, so its flags can
    // be read. FL_SHAREABLE is set by Ruby once an object is known to be
    // shareable; without it, rb_ractor_make_shareable_copy checks (and
    // keeps shareable parts as they are, copying the rest); it may raise,
    // caught by protect.
    unsafe {
        let flags = (*(obj as *const rb_sys::RBasic)).flags;
        if flags & (rb_sys::ruby_fl_type::RUBY_FL_SHAREABLE as VALUE) != 0 {
            return Ok(v);
        }
        // The copy is alive on this stack.
        protect(|| rb_sys::rb_ractor_make_shareable_copy(obj)).map(|c| value(c))
    }
}

/// Runs `body` with the calling Ractor's GVL released, as Ruby's own
/// blocking IO does (`rb_thread_call_without_gvl2` with `RUBY_UBF_IO`):
/// when an interrupt (Thread#raise, kill, a signal for the main thread) is
/// pending, `body` is skipped and false returned; while it runs, Ruby
/// interrupts the thread with a signal (SIGVTALRM, repeated until `body`
/// returns), which ends a futex sleep early (see `Event`).
/// `body` must therefore sleep at most once and return: the caller runs
/// the interrupts (`check_ints`) and re-checks its condition. Never raises.
///
/// Ruby's `ubf_select` rather than an unblocking function of ours: for a
/// custom one, Ruby calls it for a signal only through a helper thread it
/// starts when the main thread is alone, and a thread that leaves after
/// the wait began left Ctrl-C with nobody to deliver it (a hang, found by
/// test_ctrl_c_interrupts_a_blocked_pop).
///
/// # Safety
/// `body` runs without the GVL: it must not touch Ruby (no `Value`, no
/// `Ruby` handle, no function of sys that calls Ruby) nor any `GvlCell`,
/// and must not panic across this call (a panic aborts). Nothing in the
/// types can say this, so its caller promises it.
pub unsafe fn without_gvl<B: FnOnce()>(body: B) -> bool {
    // SAFETY: RUBY_UBF_IO is `(rb_unblock_function_t *)-1`, a marker Ruby
    // replaces with its own ubf_select before calling anything, and it
    // takes no argument of ours; `body` does not touch Ruby (the caller's
    // promise).
    unsafe {
        let ubf_io: unsafe extern "C" fn(*mut c_void) = std::mem::transmute(usize::MAX);
        call_without_gvl(body, ubf_io, ptr::null())
    }
}

/// A value shared between Ractors that a forked child replaces with a
/// fresh one on first use. A fork can happen while a thread of another
/// Ractor is inside a lock of `T`; that thread does not exist in the
/// child, so the child must not use the parent's `T` at all. `get`,
/// `Drop` and the GC callbacks (through `get`) reset it first. The value
/// lives in a box of its own, and a reset points the cell at a new box:
/// the parent's is leaked, never overwritten, so a reference taken before
/// the fork (by the thread that forked) stays valid.
pub struct ForkCell<T> {
    value: AtomicPtr<T>,
    gen: AtomicU64,
    /// The generation whose reset has been claimed (a stale value, left
    /// by a fork in the middle of a reset, is claimable again).
    resetting: AtomicU64,
    fresh: fn(&T) -> T,
}

// SAFETY: the cell hands out only `&T` (T: Sync, its own locks guard it)
// and replaces the pointer, never the pointee: shared references are
// never invalidated.
unsafe impl<T: Sync + Send> Sync for ForkCell<T> {}
// SAFETY: the cell owns its `T` (or leaks the parent's in a child): moving
// it to another thread moves a `T`, which is Send.
unsafe impl<T: Send> Send for ForkCell<T> {}

impl<T> ForkCell<T> {
    /// `fresh` makes the child's value from the parent's; it must only
    /// read plain fields, or `try_lock` (never wait on a lock: the
    /// parent's locks may be held forever).
    pub fn new(v: T, fresh: fn(&T) -> T) -> ForkCell<T> {
        ForkCell {
            value: AtomicPtr::new(Box::into_raw(Box::new(v))),
            gen: AtomicU64::new(fork_generation()),
            resetting: AtomicU64::new(fork_generation()),
            fresh,
        }
    }

    #[inline(always)]
    pub fn get(&self) -> &T {
        let g = fork_generation();
        if self.gen.load(Ordering::Acquire) != g {
            self.reset(g);
        }
        // SAFETY: the pointer always points at a live box (made by `new`
        // or `reset`), which is freed only by `Drop` (no `&self` left) and
        // otherwise leaked; the Acquire pairs with the Release of the
        // store that published it.
        unsafe { &*self.value.load(Ordering::Acquire) }
    }

    #[cold]
    fn reset(&self, g: u64) {
        loop {
            let r = self.resetting.load(Ordering::Acquire);
            if r == g {
                // Claimed by another thread of this process: wait for it.
                while self.gen.load(Ordering::Acquire) != g {
                    std::hint::spin_loop();
                }
                return;
            }
            if self
                .resetting
                .compare_exchange(r, g, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                break;
            }
        }
        // SAFETY: the box is live (see `get`); `fresh` only reads plain
        // fields of the parent's value. The parent's value is forgotten,
        // not dropped: a thread that vanished in the fork may have left it
        // half updated (its memory is leaked, once per fork).
        let fresh = (self.fresh)(unsafe { &*self.value.load(Ordering::Acquire) });
        self.value
            .store(Box::into_raw(Box::new(fresh)), Ordering::Release);
        self.gen.store(g, Ordering::Release);
    }
}

impl<T> Drop for ForkCell<T> {
    fn drop(&mut self) {
        // The parent's value in a child that never used it is leaked.
        let current = self.get() as *const T as *mut T;
        // SAFETY: the current box, made by `new` or `reset` with
        // Box::into_raw, and no reference to it is left (`&mut self`).
        drop(unsafe { Box::from_raw(current) });
    }
}

/// A futex word that waiters sleep on until it changes: a condition
/// variable whose sleep also ends on a signal (EINTR). std's and
/// parking_lot's condition variables sleep again after EINTR, so Ruby's
/// interrupt signal (see `without_gvl`) could not end their wait (the
/// portable build's word sleep, `sys::os`, wakes up every 10 ms instead).
///
/// Use: under the state's lock, a waiter checks its condition, reads
/// `seq()`, then unlocks and calls `sleep(seen, ..)`; a notifier changes
/// the state and calls `bump()` under the same lock, then `wake(n)` (with
/// or without it). A bump after the waiter's read makes its sleep return
/// at once (the word differs); a change before it was seen by its check.
#[derive(Default)]
pub struct Event(std::sync::atomic::AtomicU32);

impl Event {
    pub fn seq(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }

    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::Release);
    }

    /// Sleeps while the word equals `seen`, for at most `timeout`; returns
    /// on a wake-up, a change, a signal, the timeout, or spuriously.
    pub fn sleep(&self, seen: u32, timeout: Option<std::time::Duration>) {
        futex_wait(&self.0, seen, timeout);
    }

    /// Wakes up to `n` sleepers.
    pub fn wake(&self, n: i32) {
        futex_wake(&self.0, n);
    }
}

/// The current fiber scheduler of a non-blocking fiber, or nil.
pub fn fiber_scheduler(_: &Ruby) -> Value {
    // SAFETY: a plain query, GVL held (the handle); the thread holds its
    // scheduler.
    unsafe { value(rb_sys::rb_fiber_scheduler_current()) }
}

/// `scheduler.kernel_sleep(duration)`: lets the scheduler run other fibers
/// for up to `d`. May raise (an interrupt), caught by protect.
pub fn scheduler_sleep(scheduler: Value, d: std::time::Duration) -> Result<(), Error> {
    let scheduler = scheduler.as_raw();
    // SAFETY: calls the scheduler's Ruby code; the Float is a flonum or
    // kept on this frame until the call returns.
    protect(|| unsafe {
        rb_sys::rb_fiber_scheduler_kernel_sleep(scheduler, rb_sys::rb_float_new(d.as_secs_f64()))
    })?;
    Ok(())
}
