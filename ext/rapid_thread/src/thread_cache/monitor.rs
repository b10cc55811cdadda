//! The thread cache's monitor (see [`monitor_body`]): it starts workers
//! that `spawn` and `join` ask for, and grows the cache when pending tasks
//! stall. Workers are always made here, by a thread that runs unmasked.

use super::*;

/// Sleeps while nothing is pending (woken by `arm_monitor`); otherwise
/// checks every GROW_TICK (STARTING_TICK while the workers starting will
/// take every pending task; a spawn meanwhile wakes it) that pending
/// tasks can make progress, and grows the cache when they cannot:
/// * every busy worker is blocked and none is idle or starting: start
///   the stall's next batch of workers (`Pool::next_batch`), one batch
///   each tick the stall lasts (a thread that blocks in one of the gem's
///   waits asks for the batch at once: `before_blocking`);
/// * or no task has started for `STALL` although workers are runnable
///   (blocks that compute forever, or never end while passing the GVL):
///   one more worker, so that a waiting block still starts, as it would
///   on its own Thread.
pub(super) fn monitor_body(ruby: &Ruby) -> Option<i32> {
    let me = Held::new(sys::current_thread(ruby));
    with(|p| {
        if p.monitor == me {
            p.monitor_started = true;
        }
    });
    let _exit = MonitorExit(me);
    // Born with its creator's priority and ThreadGroup (any spawner's,
    // joiner's or poller's): drop them, or every worker would inherit them.
    // One that cannot leave its group (enclosed since) ends; the next
    // spawn, join or poll makes another.
    if let Err(e) = rest(ruby, me.get(ruby)) {
        return jump_tag(&e);
    }
    // Born with a copy of its creator's fiber storage too: let it go (it
    // stayed alive as long as the monitor).
    if let Err(e) = sys::current_fiber(ruby).and_then(|f| sys::clear_fiber_storage(ruby, f)) {
        return jump_tag(&e);
    }
    let mut seen = with(|p| p.started);
    let mut since = Instant::now();
    loop {
        if with(|p| p.monitor) != me {
            return None; // forked, or replaced
        }
        // Workers asked for by spawn / join.
        while with(|p| p.wanted > 0) {
            match start_worker(ruby) {
                Ok(()) => with(|p| p.wanted -= 1),
                Err(e) => match jump_tag(&e) {
                    Some(tag) => return Some(tag),
                    // Out of threads for now (ThreadError); the next tick
                    // tries again.
                    None => break,
                },
            }
        }
        // A shorter tick while workers start for every pending task cost a
        // cold spawn on one CPU (docs/design-details.md, "Where condvar2's
        // time goes on one CPU").
        let nap = with(|p| {
            if p.starters_suffice() {
                Some(STARTING_TICK)
            } else if p.has_pending(ruby) || p.wanted > 0 {
                Some(GROW_TICK)
            } else {
                None
            }
        });
        with(|p| {
            p.monitor_sleeping = true;
            p.monitor_dormant = nap.is_none();
        });
        let slept = sys::ruby_sleep(ruby, nap);
        with(|p| {
            p.monitor_sleeping = false;
            p.monitor_dormant = false;
        });
        if let Err(e) = slept {
            match jump_tag(&e) {
                Some(tag) => return Some(tag),
                // Thread#raise at the monitor: nothing to do with it.
                None => continue,
            }
        }
        if nap.is_none() {
            seen = with(|p| p.started);
            since = Instant::now();
            with(|p| p.batch = 1);
            continue;
        }
        let grown = grow_if_stalled(ruby, &mut seen, &mut since);
        if let Err(e) = grown {
            if let Some(tag) = jump_tag(&e) {
                return Some(tag);
            }
        }
    }
}

/// Clears the monitor on every way out of its body (killed, or a panic):
/// the next spawn or join re-arms one. A monitor left recorded but dead
/// would never be replaced. In a forked child the pool is fresh: nothing
/// to clear there.
pub(super) struct MonitorExit(Held);

impl Drop for MonitorExit {
    fn drop(&mut self) {
        let me = self.0;
        with(|p| {
            if p.monitor == me {
                p.monitor = Held::NIL;
                p.monitor_sleeping = false;
                p.monitor_dormant = false;
            }
        });
    }
}

/// No task started for this long while workers were runnable: grow anyway.
pub(super) const STALL: Duration = Duration::from_millis(20);
/// ... or while workers were starting (held before their body runs).
pub(super) const STARTING_STALL: Duration = Duration::from_millis(500);
pub(super) const MAX_BATCH: usize = 64;

pub(super) fn grow_if_stalled(
    ruby: &Ruby,
    seen: &mut u64,
    since: &mut Instant,
) -> Result<(), Error> {
    if with(|p| p.must_wake_idle(ruby)) {
        return wait::wake_newest(POOL.cell(), idle);
    }
    let (pending, started) = with(|p| (p.has_pending(ruby), p.started));
    if started != *seen {
        *seen = started;
        *since = Instant::now();
    }
    if with(|p| !p.starting_threads.is_empty()) {
        forget_lost_starters(ruby)?;
    }
    if !pending {
        with(|p| p.batch = 1);
        return Ok(());
    }
    if with(|p| p.starting + p.wanted) > 0 && since.elapsed() < STARTING_STALL {
        // The last batch has not started yet (the spawner holds the GVL):
        // wait for it, keeping the batch size, so that a stall that lasts
        // still doubles it (resetting here made 1000 blocked blocks grow
        // one or two threads at a time: vm_thread_close). But not for
        // ever: a new thread can be held before its body runs (a
        // `:thread_begin` hook that waits), and a Thread.new block would
        // not wait for it. After STARTING_STALL without a task started the
        // rules below apply (one more worker per STARTING_STALL).
        return Ok(());
    }
    let n = if !can_progress(ruby)? {
        let Some(n) = with(|p| {
            let n = p.stall_batch();
            p.stalls += u64::from(n.is_some());
            n
        }) else {
            return Ok(());
        };
        n
    } else if since.elapsed() >= STALL {
        if with(|p| !p.idle.is_empty()) {
            // The idle workers woken for the tasks are held up: another
            // idle one takes a task rather than a new thread.
            *since = Instant::now();
            return wait::wake_newest(POOL.cell(), idle);
        }
        1
    } else {
        with(|p| p.batch = 1);
        return Ok(());
    };
    *since = Instant::now();
    for _ in 0..n.min(with(|p| p.runnable_pending(ruby))) {
        if let Err(e) = start_worker(ruby) {
            if jump_tag(&e).is_some() {
                return Err(e);
            }
            break; // out of threads for now; the next tick tries again
        }
    }
    Ok(())
}

/// The tag of a kill / exit (which must end the thread), or None for an
/// exception.
pub(super) fn jump_tag(e: &Error) -> Option<i32> {
    match e.error_type() {
        ErrorType::Jump(tag) => Some(sys::tag_number(tag)),
        _ => None,
    }
}
