//! `RapidThread::ConditionVariable`: a drop-in for Ruby 3.1's
//! `Thread::ConditionVariable` (thread_sync.c).
//!
//! `wait(mutex, timeout = nil)` releases the mutex through `mutex.sleep`,
//! so Thread::Mutex, Monitor's mutex and any object responding to `sleep`
//! work. For a plain `Thread::Mutex` (also what MonitorMixin uses) the same
//! steps run natively: unlock, the shared two-phase wait of `wait.rs`, an
//! uninterruptible re-lock, then pending interrupts; the return value is
//! still Mutex#sleep's (whole seconds slept). A wait that would go
//! straight to Ruby's sleep (no spin, no park: `wait::first_step`) runs
//! pending interrupts, then sleeps in that Mutex#sleep itself, as stock's.

use magnus::scan_args::scan_args;
use magnus::{
    method, prelude::*, DataTypeFunctions, Error, RClass, RModule, Ruby, TypedData, Value,
};

use crate::errors;
use crate::sys::{self, GvlCell, WaitList};
use crate::wait::{self, enlisted, End, Step};

#[derive(Default)]
pub struct State {
    waiters: WaitList,
    fork_gen: u64,
}

impl State {
    fn fresh(&mut self) -> &mut State {
        let gen = sys::fork_generation();
        if self.fork_gen != gen {
            self.fork_gen = gen;
            self.waiters.forget_all();
        }
        self
    }
}

fn waiters(s: &mut State) -> &mut WaitList {
    &mut s.fresh().waiters
}

/// Holds no Ruby values: waiters live on their own threads' stacks.
#[derive(Default, TypedData)]
#[magnus(
    class = "RapidThread::ConditionVariable",
    free_immediately,
    size,
    wb_protected
)]
pub struct ConditionVariable {
    state: GvlCell<State>,
}

impl DataTypeFunctions for ConditionVariable {}

impl ConditionVariable {
    fn get(rb_self: &Value) -> Result<&ConditionVariable, Error> {
        sys::typed_ref::<ConditionVariable>(rb_self)
            .ok_or_else(|| errors::wrong_receiver(*rb_self, "RapidThread::ConditionVariable"))
    }
}

fn initialize(rb_self: Value) -> Result<Value, Error> {
    ConditionVariable::get(&rb_self)?.state.with(|s| {
        s.fresh();
    });
    Ok(rb_self)
}

fn wait(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    let cv = ConditionVariable::get(&rb_self)?;
    let (mutex, timeout) = match *args {
        [m] => (m, ruby.qnil().as_value()),
        [m, t] => (m, t),
        // Stock's arity error. (scan_args on every wait cost a String
        // built and freed: magnus formats its argument spec each call.)
        _ => {
            let a = scan_args::<(Value,), (Option<Value>,), (), (), (), ()>(args)?;
            (
                a.required.0,
                a.optional.0.unwrap_or_else(|| ruby.qnil().as_value()),
            )
        }
    };
    let native = sys::NativeMutex::new(ruby, mutex);
    // A signal is always worth passing on (stock loses it).
    enlisted(
        &cv.state,
        waiters,
        End::Oldest,
        mutex,
        |_| true,
        |w| {
            let native = match native {
                Some(m) if !w.has_scheduler() => m,
                _ => {
                    // Stock's path: whatever `sleep` does, woken by a real
                    // wake-up.
                    w.set_sleeping();
                    return sys::call_sleep(mutex, timeout);
                }
            };
            // Mutex#sleep, natively: convert the timeout first (same errors),
            // unlock (ThreadError if not owned), wait, re-lock no matter what.
            let limit = (!timeout.is_nil())
                .then(|| sys::time_interval(timeout))
                .transpose()?;
            let deadline = wait::deadline_after(limit);
            let mut step = wait::first_step(w, deadline)?;
            if let Step::Sleep = step {
                // Ruby's sleep at once (a dormant list; on 3.3+ a busy
                // machine, or a list that is not calm):
                // in Mutex#sleep itself, as stock's wait sleeps, instead
                // of unlocking, sleeping on a private mutex and re-locking
                // (8% of a pinned condvar ping-pong on 3.3.8). A trap
                // handler pending now runs first, here: in the sleep's own
                // first interrupt check, Ruby would overwrite the wake-up
                // it sends (stock loses it so; see wait::block_from).
                sys::check_ints_before_sleep(w)?;
                if !w.signaled() {
                    w.set_sleeping();
                    sys::note_ruby_sleep();
                    return sys::mutex_sleep(native, timeout);
                }
                step = Step::Done;
            }
            sys::mutex_unlock(native)?;
            let started = sys::wall_seconds();
            let waited = wait::block_from(w, deadline, true, step);
            // Mutex#sleep returns nil when its timeout ran out without a
            // wake-up (sleep_hrtime's `woke`), else the seconds slept.
            let timed_out =
                !w.signaled() && deadline.is_some_and(|d| d <= std::time::Instant::now());
            // As in Mutex#sleep's ensure: the re-lock always runs (while a
            // kill propagates, as Ruby runs ensure clauses). When both fail,
            // the wait's error is raised (as stock raises it, the re-lock's
            // interrupt being deferred) unless the re-lock's is more urgent
            // (a kill, fatal).
            wait::finally(ruby, waited, || relock(ruby, native))?;
            sys::check_ints(ruby)?;
            if timed_out {
                return Ok(sys::nil(ruby));
            }
            Ok(ruby
                .integer_from_i64(sys::wall_seconds() - started)
                .as_value())
        },
    )
}

/// Re-locks the mutex after the wait, as stock's uninterruptible re-lock:
/// no interrupt leaves it unlocked. Usually one (try-)lock does it; an
/// interrupt that breaks a contended lock is kept, the mutex taken with
/// further interrupts deferred, and the kept error returned with the mutex
/// held (stock raises it right after the re-lock too).
fn relock(ruby: &Ruby, mutex: sys::NativeMutex) -> Result<(), Error> {
    match sys::mutex_lock_once(mutex) {
        Ok(()) => Ok(()),
        Err(e) if errors::is_thread_error(&e) => Err(e),
        Err(e) => Err(wait::after_error(ruby, e, || {
            sys::mutex_relock_masked(mutex)
        })),
    }
}

fn signal(rb_self: Value) -> Result<Value, Error> {
    wait::wake_one(&ConditionVariable::get(&rb_self)?.state, waiters)?;
    Ok(rb_self)
}

fn broadcast(rb_self: Value) -> Result<Value, Error> {
    wait::broadcast(&ConditionVariable::get(&rb_self)?.state, waiters)?;
    Ok(rb_self)
}

/// Hot path of `signal` and `broadcast` (`n` wake-ups): with nobody
/// waiting (most calls in concurrent-ruby, whose every resolution
/// broadcasts) or threads waiting, the whole call, which raises nothing
/// (`wait::wake_plain`). A waiter under a fiber scheduler, whose unblock
/// hook may raise, or a wrong receiver, takes the full method, which
/// wakes what is left.
#[inline(always)]
fn wake_fast(rb_self: Value, n: usize) -> Option<Value> {
    let cv = sys::typed_ref::<ConditionVariable>(&rb_self)?;
    // Nobody waiting, the common case, costs one look (the wake-up loop,
    // out of line, would cost it a call's set-up).
    if cv.state.with(|s| waiters(s).is_empty()) {
        return Some(rb_self);
    }
    wake_waiting(cv, n).then_some(rb_self)
}

#[inline(never)]
fn wake_waiting(cv: &ConditionVariable, n: usize) -> bool {
    wait::wake_plain(&cv.state, waiters, n).is_some()
}

struct SignalFast;

impl sys::FastMethod0 for SignalFast {
    const SLOW: sys::RawMethod0 = method!(signal, 0);

    fn fast(_: &Ruby, rb_self: Value) -> Option<Value> {
        wake_fast(rb_self, 1)
    }
}

struct BroadcastFast;

impl sys::FastMethod0 for BroadcastFast {
    const SLOW: sys::RawMethod0 = method!(broadcast, 0);

    fn fast(_: &Ruby, rb_self: Value) -> Option<Value> {
        wake_fast(rb_self, wait::ALL)
    }
}

fn marshal_dump(rb_self: Value) -> Result<Value, Error> {
    Err(errors::cannot_dump(rb_self))
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<RClass, Error> {
    let class = module.define_class("ConditionVariable", ruby.class_object())?;
    class.define_alloc_func::<ConditionVariable>();
    class.define_method("initialize", method!(initialize, 0))?;
    sys::undef_method(class, c"initialize_copy");
    class.define_method("marshal_dump", method!(marshal_dump, 0))?;
    class.define_method("wait", method!(wait, -1))?;
    class.define_method("signal", sys::entry0::<SignalFast> as sys::RawMethod0)?;
    class.define_method("broadcast", sys::entry0::<BroadcastFast> as sys::RawMethod0)?;
    Ok(class)
}
