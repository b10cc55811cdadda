//! `RapidThread.select(*queues, timeout: nil)`: takes an item from whichever
//! of several queues has one first, as Go's `select` over channels.
//!
//! The waiting thread enlists one waiter per queue, all standing for one
//! head it blocks on (`wait::park_any`); the first wake-up signals the head,
//! and the other queues then pass its waiters over, so a push never wakes a
//! selector that is already awake while a plain `pop` sleeps. A woken
//! selector looks first at the queue that woke it. Everything else
//! (interrupts, deadlock detection, fork, the fiber scheduler) is `pop`'s
//! own machinery.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use magnus::scan_args::{get_kwargs, scan_args};
use magnus::{function, prelude::*, Error, RArray, RHash, RModule, Ruby, Value};

use crate::errors;
use crate::queue::{poppers, Queue, State, Take};
use crate::sys::{self, GvlCell};
use crate::wait;

/// Where the next select starts looking: it moves on every call, so a
/// queue that always has items does not starve the ones after it.
static TURN: AtomicUsize = AtomicUsize::new(0);

fn has_items(s: &mut State) -> bool {
    !s.items.is_empty()
}

fn select(args: &[Value]) -> Result<Value, Error> {
    // The queues are held by `splat`, a fresh Array kept on this stack
    // frame to the end. It marks them movable (on Ruby 3.3 a long argument
    // list does not stay on the VM stack either), so every VALUE of a queue
    // is read from it when used, never kept across a wait; the `&Queue`
    // references point into the typed data, which does not move.
    let args = scan_args::<(), (), RArray, (), RHash, ()>(args)?;
    let splat = args.splat;
    let kw = get_kwargs::<_, (), (Option<Value>,), ()>(args.keywords, &[], &["timeout"])?;
    let timeout = kw
        .optional
        .0
        .map(wait::timeout_duration)
        .transpose()?
        .flatten();
    let r = select_from(splat, timeout);
    sys::gc_guard(sys::raw(splat.as_value()));
    r
}

fn select_from(splat: RArray, timeout: Option<Duration>) -> Result<Value, Error> {
    let ruby = Ruby::get_with(splat);
    let n = sys::ary_len(splat);
    if n == 0 {
        return Err(errors::arg_error(
            "wrong number of arguments (given 0, expected 1+)",
        ));
    }
    let queue_at = |k: usize| sys::ary_entry(splat, k);
    // Read once, before any wait: `splat` keeps the queues alive for the
    // whole call, and the references point into their typed data, which
    // compaction does not move (the Values themselves may go stale).
    let values: Vec<Value> = (0..n).map(queue_at).collect();
    let mut queues = Vec::with_capacity(n);
    for v in &values {
        let q = sys::typed_ref::<Queue>(v)
            .ok_or_else(|| errors::wrong_receiver(*v, "RapidThread::Queue"))?;
        if !q.state.with(|s| s.initialized) {
            return Err(errors::not_initialized(*v));
        }
        queues.push(q);
    }
    let start = TURN.fetch_add(1, Ordering::Relaxed) % n;
    let cells: Vec<&GvlCell<State>> = queues.iter().map(|q| &q.state).collect();
    let deadline = wait::deadline_after(timeout);
    let mut woken_by: Option<usize> = None;
    loop {
        let mut open = false;
        // The queue whose wake-up this is first, then all from `start`.
        // Trying it first means a wake-up is never left unused while its
        // queue has an item: either this thread takes that item, or the
        // queue was empty when it looked (someone else took it).
        for k in woken_by.into_iter().chain((0..n).map(|i| (start + i) % n)) {
            match queues[k].try_shift() {
                Take::Item(item, wake_pusher) => {
                    let item = queues[k].took(&ruby, item, wake_pusher)?;
                    return sys::pair(queue_at(k), item);
                }
                Take::NotInitialized => return Err(errors::not_initialized(queue_at(k))),
                Take::Empty => open |= !queues[k].state.with(|s| s.closed),
            }
        }
        if !open {
            // Every queue is closed and empty: nothing can come any more.
            return Ok(sys::nil(&ruby));
        }
        if timeout == Some(Duration::ZERO) || deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(sys::nil(&ruby));
        }
        let blocker = queue_at(0);
        woken_by = wait::park_any(&cells, blocker, poppers, deadline, has_items)?;
        // It takes one item at most, from a queue it has yet to choose;
        // every queue passes its wake-up on, whatever fails on the way.
        let mut passed = Ok(());
        for q in &queues {
            passed = wait::finally(&ruby, passed, || q.pass_chain_on(0));
        }
        passed?;
    }
}

pub fn init(module: RModule) -> Result<(), Error> {
    module.define_singleton_method("select", function!(select, -1))?;
    Ok(())
}
