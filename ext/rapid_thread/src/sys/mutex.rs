//! Thread::Mutex calls for ConditionVariable#wait.

use std::ptr;
use std::time::Duration;

use magnus::prelude::*;
use magnus::rb_sys::{protect, AsRawValue};
use magnus::value::Lazy;
use magnus::{Error, Ruby, Value};
use rb_sys::VALUE;

use super::threads::handle_interrupt;
use super::*;
use crate::errors::is_thread_error;

// ---------------------------------------------------------------------------
// Mutexes (ConditionVariable#wait)
// ---------------------------------------------------------------------------

/// `rb_time_interval`: Mutex#sleep's conversion of its timeout, with its
/// errors ("time interval must not be negative", "can't convert ...").
pub fn time_interval(v: Value) -> Result<Duration, Error> {
    let v = v.as_raw();
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

/// A `Thread::Mutex` itself (not a subclass, nor one with a singleton
/// class: either may redefine its methods, which stock's wait calls):
/// ConditionVariable#wait runs its Mutex#sleep natively. (A `sleep`
/// redefined in Thread::Mutex itself is not seen: docs/design-details.md,
/// "State and the GVL".)
#[derive(Clone, Copy)]
pub struct NativeMutex(Value);

/// A mutex made for the comparison (kept for the life of the process):
/// its class is Thread::Mutex whatever the constant names later, and its
/// typed-data type is the one every mutex has.
static SAMPLE: Lazy<Value> = Lazy::new(|ruby| ruby.mutex_new().as_value());

impl NativeMutex {
    /// `m` if its class pointer is the sample's (Thread::Mutex, no
    /// singleton class) and it is a mutex's T_DATA. Should the sample get
    /// a singleton class (ObjectSpace reaches it), no mutex is native:
    /// every wait takes stock's path, which is right for any mutex.
    pub fn new(ruby: &Ruby, m: Value) -> Option<NativeMutex> {
        let sample = ruby.get_inner(&SAMPLE);
        let (obj, like) = (m.as_raw(), sample.as_raw());
        if special_const(obj) {
            return None;
        }
        // SAFETY: both are live heap objects (Values), so their headers can
        // be read; the type pointer is read only from a typed T_DATA.
        let native = unsafe {
            (*(obj as *const rb_sys::RBasic)).klass == (*(like as *const rb_sys::RBasic)).klass
                && rb_sys::RB_BUILTIN_TYPE(obj) == rb_sys::ruby_value_type::RUBY_T_DATA
                && rb_sys::RTYPEDDATA_P(obj)
                && rb_sys::RTYPEDDATA_TYPE(obj) == rb_sys::RTYPEDDATA_TYPE(like)
        };
        native.then_some(NativeMutex(m))
    }

    /// `m.try_lock`, which does not raise for a Thread::Mutex.
    fn try_lock(self) -> bool {
        // SAFETY: a live Thread::Mutex (the type), GVL held (a Value).
        unsafe {
            rb_sys::rb_mutex_trylock(self.0.as_raw()) != rb_sys::special_consts::Qfalse as VALUE
        }
    }
}

pub fn mutex_unlock(m: NativeMutex) -> Result<(), Error> {
    let m = m.0.as_raw();
    // SAFETY: a Thread::Mutex; raises ThreadError when not owned; caught
    // by protect.
    protect(|| unsafe { rb_sys::rb_mutex_unlock(m) })?;
    Ok(())
}

/// Locks `m` once: `trylock`, else `rb_mutex_lock`, which waits and runs
/// interrupts while it waits; an interrupt's error comes back without the
/// mutex. The first half of re-locking after a wait (see
/// condition_variable.rs): the rare interrupted case finishes with
/// [`mutex_relock_masked`].
pub fn mutex_lock_once(m: NativeMutex) -> Result<(), Error> {
    if m.try_lock() {
        return Ok(());
    }
    let m = m.0.as_raw();
    // SAFETY: may raise (interrupts, ThreadError); caught by protect.
    protect(|| unsafe { rb_sys::rb_mutex_lock(m) }).map(drop)
}

/// Locks `m` as stock's `mutex_lock_uninterruptible` does after
/// Mutex#sleep: no interrupt breaks the attempt. It waits inside
/// `Thread.handle_interrupt(Object => :never)`, so that Thread#raise / kill
/// / Timeout stay pending until the mutex is held; they are then raised (a
/// jump for a kill) as the returned error, with the mutex held. The error
/// is ThreadError without the mutex only where stock raises it too (a trap
/// handler). Costs a method call and a Hash: only for the rare re-lock that
/// an interrupt broke.
pub fn mutex_relock_masked(m: NativeMutex) -> Result<(), Error> {
    if m.try_lock() {
        return Ok(());
    }
    let ruby = Ruby::get_with(m.0);
    let m = m.0.as_raw();
    let mut state = Relock {
        mutex: m,
        kept: None,
    };
    let data = &mut state as *mut Relock as VALUE;
    // `state` outlives the call (see relock_block).
    let masked = handle_interrupt(&ruby, c"never", relock_block, data);
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
    let state = unsafe { &mut *(data as *mut Relock) };
    let m = state.mutex;
    // Thread#raise and kill are deferred here, but trap handlers (main
    // thread) still run while rb_mutex_lock waits and may raise, exit or
    // throw; the mutex is then not held. Keep the error and lock again, as
    // stock's uninterruptible re-lock would have run the handler after
    // taking the mutex. A ThreadError is the lock's own refusal (trap
    // context; another fiber of this thread holds it): stock raises it
    // too, without the mutex.
    loop {
        // SAFETY: `m` is the live Mutex the Relock holds (on the caller's
        // stack, so the GC sees it); a raise is caught by `protect`.
        let r = protect(|| unsafe { rb_sys::rb_mutex_lock(m) });
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
pub fn call_sleep(m: Value, timeout: Value) -> Result<Value, Error> {
    funcall(m, name!(c"sleep"), &[timeout])
}

/// `Thread::Mutex#sleep(timeout)`, its C function without the method
/// call (for a `Thread::Mutex`; anything else raises TypeError). Unlocks
/// (ThreadError if not owned), sleeps until woken, interrupted or timed
/// out, re-locks uninterruptibly, then runs pending interrupts; nil if it
/// timed out, else the seconds slept. `timeout` is the caller's own
/// object (nil, or what stock's wait would pass on), so that Ruby's
/// conversion and its limits are stock's.
pub fn mutex_sleep(m: NativeMutex, timeout: Value) -> Result<Value, Error> {
    let (m, t) = (m.0.as_raw(), timeout.as_raw());
    // SAFETY: rb_mutex_sleep checks the receiver's type and may raise or
    // jump (a bad timeout, not owned, interrupts), caught by protect.
    let r = protect(|| unsafe { rb_sys::rb_mutex_sleep(m, t) })?;
    // SAFETY: its result (nil or an Integer), alive on this stack.
    Ok(unsafe { value(r) })
}

/// Seconds since the epoch, as `time(0)` (Mutex#sleep returns the
/// difference of two of these).
pub fn wall_seconds() -> i64 {
    // SAFETY: time(NULL) has no preconditions.
    unsafe { libc::time(ptr::null_mut()) as i64 }
}
