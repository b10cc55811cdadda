//! `RapidThread.select(*queues, timeout: nil)`: takes an item from whichever
//! of several queues has one first, as Go's `select` over channels.
//!
//! The waiting thread enlists one waiter per queue, all standing for one
//! head it blocks on (`wait::park_any`); the first wake-up signals the head,
//! and the other queues then pass its waiters over, so a push never wakes a
//! selector that is already awake while a plain `pop` sleeps. A woken
//! selector looks first at the queue that woke it. Everything else (interrupts, deadlock detection, fork, the
//! fiber scheduler) is `pop`'s own machinery.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use magnus::scan_args::{get_kwargs, scan_args};
use magnus::{function, prelude::*, Error, RArray, RHash, RModule, Value};
use rb_sys::VALUE;

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
    // The queues are this method's arguments, on Ruby's VM stack, which
    // keeps them alive and unmoved for the whole call (the waiters point
    // at them).
    let args = scan_args::<(), (), RArray, (), RHash, ()>(args)?;
    let kw = get_kwargs::<_, (), (Option<Value>,), ()>(args.keywords, &[], &["timeout"])?;
    let timeout = kw
        .optional
        .0
        .map(wait::timeout_duration)
        .transpose()?
        .flatten();
    let mut raw = Vec::new();
    sys::array_values(args.splat.as_value(), &mut raw);
    let values: Vec<Value> = raw.into_iter().map(sys::value).collect();
    if values.is_empty() {
        return Err(errors::arg_error(
            "wrong number of arguments (given 0, expected 1+)",
        ));
    }
    let queues = values
        .iter()
        .map(Queue::get)
        .collect::<Result<Vec<&Queue>, Error>>()?;
    let cells: Vec<(&GvlCell<State>, VALUE)> = queues
        .iter()
        .zip(&values)
        .map(|(q, v)| (&q.state, sys::raw(*v)))
        .collect();
    let n = queues.len();
    let start = TURN.fetch_add(1, Ordering::Relaxed) % n;
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
                    let item = sys::raw(queues[k].took(item, wake_pusher)?);
                    return Ok(sys::value(sys::pair(cells[k].1, item)?));
                }
                Take::NotInitialized => return Err(errors::not_initialized(values[k])),
                Take::Empty => open |= !queues[k].state.with(|s| s.closed),
            }
        }
        if !open {
            // Every queue is closed and empty: nothing can come any more.
            return Ok(sys::value(sys::QNIL));
        }
        if timeout == Some(Duration::ZERO) || deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(sys::value(sys::QNIL));
        }
        woken_by = wait::park_any(&cells, poppers, deadline, has_items)?;
    }
}

pub fn init(module: RModule) -> Result<(), Error> {
    module.define_singleton_method("select", function!(select, -1))?;
    Ok(())
}
