//! Ruby's sleep (the second phase of a wait), interrupts, and jumps.

use std::marker::PhantomData;
use std::time::Duration;

use magnus::rb_sys::protect;
use magnus::{Error, Ruby};
use rb_sys::VALUE;

use super::*;
use crate::errors::is_thread_error;

/// Runs pending interrupts (Thread#raise, kill, signal handlers).
pub fn check_ints(_: &Ruby) -> Result<(), Error> {
    // SAFETY: GVL held (the handle); may raise; caught by protect.
    protect(|| unsafe {
        rb_sys::rb_thread_check_ints();
        QNIL
    })?;
    Ok(())
}

/// `check_ints` right before Ruby's sleep, which gives up the GVL itself:
/// it looks at the thread's interrupt flags first (`rb_thread_interrupted`:
/// a Thread#raise, kill or trap handler pending and not masked) and makes
/// the protected call only then. What it leaves to the sleep's own first
/// check: a time-slice switch and postponed jobs (finalizers), which run
/// there with the thread already marked asleep, so a wake-up they send
/// ends the sleep (a trap handler's would be overwritten: the flags show
/// those).
/// Called by `w`'s own thread.
pub fn check_ints_before_sleep(w: &Waiter) -> Result<(), Error> {
    if !w.thread_interrupted() {
        return Ok(());
    }
    check_ints(&w.ruby())
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
/// (Only the main thread runs trap handlers, but Ruby's own sleep on the
/// other threads, tried twice, made more context switches: see
/// docs/design-details.md, "One CPU on Ruby 3.3+".)
pub fn ruby_sleep(ruby: &Ruby, timeout: Option<Duration>) -> Result<(), Error> {
    Sleeper::new(ruby)?.sleep(timeout)
}

/// What [`ruby_sleep`] sleeps on: a private Thread::Mutex of the waiting
/// thread, locked for the wait (nil in trap context). Taken before the
/// wait's last check of its condition, so that no allocation (and no GC)
/// lies between that check and the sleep, where a signal handler's
/// wake-up could be lost.
///
/// Each fiber (a thread's root fiber included) keeps one such mutex in a
/// hidden instance variable (a name without `@`: no Ruby code can see or
/// reach it, and the fiber marks and moves it), so that a wait allocates
/// nothing: a fresh mutex per wait cost an allocation, its free, and the
/// minor GCs they brought. Per fiber, not per thread, because a Mutex
/// belongs to a fiber: kept per thread, a wait of another fiber resumed by
/// a finalizer could take it while an outer wait sleeps (rb_mutex_sleep
/// unlocks it), be suspended holding it, and make the outer wait's re-lock
/// fail. Only the fiber's own waits lock it, and one nested in an outer
/// wait (a finalizer run by the outer wait's interrupt checks) has
/// unlocked it before the outer wait can go on. A wait that finds it
/// locked (nested where the outer wait holds it) takes a fresh mutex
/// instead, as every wait did before; so does a wait of a frozen fiber.
///
/// Unlocked when the wait ends (drop): a thread keeps the mutexes it holds
/// in a list that every unlock walks, so mutexes left locked until the GC
/// freed them made each unlock, and each free, walk thousands of them (a
/// third of a ping-pong's CPU time once waits slept).
pub struct Sleeper {
    mutex: VALUE,
    /// Not Send: dropped on another thread (one without the GVL), its
    /// unlock would call Ruby there.
    _here: PhantomData<*mut ()>,
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        if self.mutex != QNIL {
            // SAFETY: unlocks our private mutex, which this thread holds on
            // every path (see `private_mutex_sleep`); rb_mutex_unlock raises
            // only for a mutex the thread does not hold, and runs no
            // interrupts. Nothing can fail here, so nothing is dropped.
            let _unlocked = protect(|| unsafe { rb_sys::rb_mutex_unlock(self.mutex) });
            debug_assert!(_unlocked.is_ok());
        }
    }
}

impl Sleeper {
    pub fn new(ruby: &Ruby) -> Result<Sleeper, Error> {
        let id = name!(c"__rapid_thread_sleep_mutex").id(ruby)?;
        let mut mutex = QNIL;
        let slot = &mut mutex as *mut VALUE;
        // SAFETY: reads (and once sets) a hidden ivar of the current
        // fiber (rb_fiber_current may allocate a thread's root Fiber
        // object the first time), may allocate a Thread::Mutex, and locks a mutex that is
        // free: all may raise (interning the name and allocating can raise
        // NoMemoryError), caught by protect. Neither an ivar access nor
        // locking a free mutex runs interrupts, so the one error the lock
        // raises is ThreadError "can't be called from trap context". Inside
        // a trap handler no other handler can run (they do not nest), so
        // Ruby's own sleep loses no wake-up there. A frozen fiber (whose
        // ivar cannot be set) gets a fresh mutex per wait. `slot` points
        // at `mutex`, on this stack frame (where the GC sees it) for the
        // whole call.
        let locked = protect(|| unsafe {
            let fiber = rb_sys::rb_fiber_current();
            let cached = rb_sys::rb_ivar_get(fiber, id);
            let m = if cached != QNIL
                && rb_sys::rb_mutex_locked_p(cached) == rb_sys::special_consts::Qfalse as VALUE
            {
                cached
            } else {
                let fresh = rb_sys::rb_mutex_new();
                if cached == QNIL
                    && rb_sys::rb_obj_frozen_p(fiber) == rb_sys::special_consts::Qfalse as VALUE
                {
                    rb_sys::rb_ivar_set(fiber, id, fresh);
                }
                fresh
            };
            *slot = m;
            rb_sys::rb_mutex_lock(m)
        });
        match locked {
            Ok(_) => Ok(Sleeper {
                mutex,
                _here: PhantomData,
            }),
            Err(e) if is_thread_error(&e) => Ok(Sleeper {
                mutex: QNIL,
                _here: PhantomData,
            }),
            Err(e) => Err(e),
        }
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
    if slept.is_ok() {
        // Returned: re-locked (and the interrupts after it ran).
        return Ok(());
    }
    // The re-lock cannot fail on a private, uncontended mutex outside trap
    // context, so `m` is held here on every path, ready for the next sleep.
    // Make sure of it where an error cut the sleep short (a mutex left
    // unlocked would make the next rb_mutex_sleep raise).
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
pub fn cleanup_during_jump<F: FnOnce()>(_: &Ruby, jump: Error, cleanup: F) -> Error {
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
        // SAFETY: `data` is the Ctx on cleanup_during_jump's stack;
        // rb_jump_tag resumes the jump that tag stands for (it does not
        // return), as rb_ensure's body may.
        unsafe { rb_sys::rb_jump_tag((*(data as *const Ctx<G>)).tag) };
    }
    unsafe extern "C" fn run<G: FnOnce()>(data: VALUE) -> VALUE {
        // SAFETY: as in `resume`; rb_ensure calls this exactly once.
        if let Some(f) = unsafe { (*(data as *mut Ctx<G>)).cleanup.take() } {
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
pub fn clear_errinfo(_: &Ruby) {
    // SAFETY: GVL held (the handle); setting nil never raises.
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
