//! A worker of the thread cache: the loop a cached thread runs
//! ([`worker_body`]), and one task run as Thread.new runs its block
//! ([`run`]), with the clean-up that leaves nothing of it for the next.

use super::*;

/// Keeps the live count right on every way out of a worker.
pub(super) struct Live {
    /// The worker's Thread (on its stack: the GC sees it).
    me: Value,
    /// The thread's class word when the worker started: a `:thread_begin`
    /// hook may have given it a singleton class already (see
    /// `clean_thread`).
    class_word: sys::ClassWord,
    fork_gen: u64,
    /// Counted in `Pool::starting` (not at the pool yet).
    starting: bool,
    /// Has run a task before (the next one is a reuse).
    ran: bool,
}

impl Drop for Live {
    /// Also keeps pending tasks from being stranded by this exit: a worker
    /// that `dispatch` woke for a task and that was killed before taking
    /// it (dispatch does not arm the monitor when it wakes an idle worker)
    /// would otherwise leave the task waiting for the next spawn. When
    /// pending tasks outnumber the workers on their way, the monitor is
    /// woken (its tick wakes an idle worker), and one more worker is asked
    /// for if none is idle. No Ruby code runs here: this may be a kill's
    /// way out.
    fn drop(&mut self) {
        if sys::fork_generation() != self.fork_gen {
            return;
        }
        let ruby = Ruby::get_with(self.me);
        let wake_monitor = with(|p| {
            p.live -= 1;
            if self.starting {
                arrived(p, Held::new(self.me));
            }

            // On their way: idle workers woken and not back (each takes a
            // task), workers starting and workers asked for. A woken worker
            // killed before taking its task passed its wake-up to the newest
            // idle one if any was left (`wait::enlisted` with `End::Newest`);
            // this covers an empty list. (With the monitor gone, killed by a
            // stray Thread#kill, a join or a poll wakes an idle worker or
            // restarts the monitor; creating a thread here could run Ruby
            // code.)
            let coming = p.idle.handed_out() + p.starting + p.wanted;
            let stranded = p.has_pending(&ruby) && p.pending.len() > coming;
            if stranded && p.idle.is_empty() {
                p.wanted += 1;
            }
            // Workers starting may never come (Pool::starting_threads): the
            // monitor's tick finds out.
            let unsure = p.has_pending(&ruby) && p.starting > 0;
            ((stranded || unsure) && !p.monitor.is_nil() && p.monitor_sleeping).then_some(p.monitor)
        });
        if let Some(monitor) = wake_monitor {
            sys::wakeup_thread(monitor.get(&ruby));
        }
    }
}

pub(super) fn worker_body(ruby: &Ruby) -> Option<i32> {
    let me = sys::current_thread(ruby);
    sys::name_native_thread(WORKER_NATIVE_NAME);
    let mut live = Live {
        me,
        class_word: sys::class_word(me),
        fork_gen: sys::fork_generation(),
        starting: true,
        ran: false,
    };
    // Born with a copy of its creator's (the monitor's) fiber storage: a
    // block gets its spawner's, and nothing else (`prepare_thread`).
    let reuse = match sys::current_fiber(ruby).and_then(|fiber| {
        sys::clear_fiber_storage(ruby, fiber)?;
        Ok(Reuse {
            class_word: live.class_word,
            fiber,
        })
    }) {
        Ok(reuse) => reuse,
        Err(e) => return jump_tag(&e),
    };
    loop {
        // An interrupt aimed at the previous block that arrived after it
        // ended must not hit the next one: run it here. A kill ends the
        // worker; an exception is dropped.
        if let Err(e) = sys::check_ints(ruby) {
            if let Some(tag) = jump_tag(&e) {
                return Some(tag);
            }
        }
        let task = match next_task(ruby, &mut live, me) {
            Ok(Some(t)) => t,
            Ok(None) => return None,
            Err(e) => match jump_tag(&e) {
                Some(tag) => return Some(tag),
                None => continue,
            },
        };
        if let After::End(tag) = run(ruby, task, me, Some(reuse)) {
            return tag;
        }
        if sys::fork_generation() != live.fork_gen {
            // The block forked and this is the child, where this thread is
            // now the main thread: end it as its thread would have ended.
            return None;
        }
    }
}

/// Takes the next pending task (marking this worker busy), waiting on the
/// idle list for one; None when the worker should exit (idle timeout, or
/// `max_idle` workers already idle).
pub(super) fn next_task(ruby: &Ruby, live: &mut Live, me: Value) -> Result<Option<Value>, Error> {
    // Read when first needed: a worker sent to pending tasks (the usual
    // case under load) takes one without reading the clock.
    let mut idle_since = None;
    // Whether the worker comes to `pending` sent (just started, back from
    // a task, or woken by a wake-up) rather than by its idle timeout.
    let mut sent = true;
    loop {
        if sent {
            if let Some(t) = with(|p| take_pending(ruby, p, live, me)) {
                return Ok(Some(t.get(ruby)));
            }
        }
        // Re-read each time: a changed idle_timeout applies to waiting
        // workers too (the setter wakes them).
        let since = *idle_since.get_or_insert_with(Instant::now);
        let settings = with(Pool::idle_settings);
        let deadline = since.checked_add(settings.0);
        let expired = deadline.is_some_and(|d| d <= Instant::now());
        let took = with(|p| {
            // A worker whose idle time ran out leaves pending tasks to the
            // idle workers woken for them, and ends. Taking one kept it for
            // another idle_timeout: under steady load each worker of a past
            // burst took its turn as its time came, the cache never shrank
            // and work left the hot worker. A worker that was sent always
            // takes one (the woken ones are what this one counts on).
            let leave_it = !sent && expired && p.pending.len() <= p.idle.handed_out();
            if !leave_it {
                if let Some(t) = take_pending(ruby, p, live, me) {
                    return Some(Some(t));
                }
            }
            let over = expired || p.idle.waiting() >= settings.1;
            over.then_some(None)
        });
        match took {
            Some(Some(t)) => return Ok(Some(t.get(ruby))),
            Some(None) => return Ok(None),
            None => {}
        }
        // The process is ending and this worker missed Ruby's one call to
        // end (a block's `ensure` that raised took it): end now rather
        // than keep the exit waiting for the idle timeout.
        if sys::process_ending(ruby)? {
            return Ok(None);
        }
        sent = wait::enlisted(
            POOL.cell(),
            idle,
            End::Newest,
            sys::nil(ruby),
            |p: &mut Pool| p.has_pending(&sys::main_ruby()),
            |w| {
                // A setter that ran since the settings were read (the
                // `process_ending` call above can switch threads) found
                // this worker off the list, so its wake-up missed it: go
                // round again rather than sleep out the old idle_timeout.
                if with(Pool::idle_settings) != settings {
                    return Ok(true);
                }
                // Another worker may have passed the `max_idle` check in
                // that same window and enlisted first: one too many would
                // stay idle for idle_timeout. Go round again (and end).
                if with(|p| p.idle.waiting() > settings.1) {
                    return Ok(true);
                }
                wait::block(w, deadline, false)?;
                Ok(w.signaled())
            },
        )?;
    }
}

/// The next pending task, if any, taken by this worker (now busy).
pub(super) fn take_pending(ruby: &Ruby, p: &mut Pool, live: &mut Live, me: Value) -> Option<Held> {
    let me = Held::new(me);
    if std::mem::replace(&mut live.starting, false) {
        arrived(p, me);
    }
    if !p.has_pending(ruby) {
        return None;
    }
    let t = p.pending.pop_front();
    p.busy.push(me);
    p.started += 1;
    if std::mem::replace(&mut live.ran, true) {
        p.reused += 1;
    }
    t
}

/// What a worker does after a task: take the next one, or end (with the
/// tag of a kill / exit to resume, if one hit).
pub(super) enum After {
    Continue,
    End(Option<i32>),
}

/// Collects what the clean-up after a block runs into. A jump (a kill of
/// this worker, the process exiting) must end the worker: Ruby has already
/// marked the thread as being killed, so a dropped one would make it
/// unkillable. Any other error from the clean-up (e.g. a block that froze
/// its thread, so its name cannot be reset) retires the worker: it ends
/// after this task rather than carry the block's state into the next.
#[derive(Default)]
pub(super) struct Aftermath {
    jump: Option<i32>,
    retire: bool,
}

impl Aftermath {
    fn take<T>(&mut self, ruby: &Ruby, r: Result<T, Error>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                match jump_tag(&e) {
                    Some(tag) => {
                        self.jump.get_or_insert(tag);
                        // The worker resumes it from its entry frame, with
                        // no Ruby frame above: until then, later calls
                        // rescue errors with a plain `$!`.
                        sys::clear_errinfo(ruby);
                    }
                    None => self.retire = true,
                }
                None
            }
        }
    }

    fn after(self) -> After {
        match (self.jump, self.retire) {
            (Some(tag), _) => After::End(Some(tag)),
            (None, true) => After::End(None),
            (None, false) => After::Continue,
        }
    }
}

/// Ends a task as killed if its run unwinds (a panic) between start and
/// finish, so that joiners wake and the worker leaves the busy list; the
/// normal paths disarm it.
pub(super) struct Unfinished {
    obj: Value,
    me: Value,
    armed: bool,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if self.armed {
            leave_busy(self.me);
            // Nowhere to report an error while unwinding; the task is
            // recorded as killed before any Ruby call is made.
            let nil = sys::nil(&Ruby::get_with(self.obj));
            let _ = Task::of(&self.obj).finish(self.obj, Phase::Killed, nil);
        }
    }
}

pub(super) fn leave_busy(me: Value) {
    let me = Held::new(me);
    with(|p| {
        if let Some(i) = p.busy.iter().position(|&t| t == me) {
            p.busy.swap_remove(i);
        }
    });
}

/// What a worker's clean-up after a block compares and empties (see
/// `clean_thread`). On the worker's stack, where the GC sees the fiber.
#[derive(Clone, Copy)]
pub(super) struct Reuse {
    /// The thread's class word when the worker started.
    class_word: sys::ClassWord,
    /// The worker's root Fiber.
    fiber: Value,
}

/// Runs one task on this worker, as Thread.new runs its block, and says
/// whether the worker goes on. `reuse`: the worker's (see
/// `clean_thread`), or None for a thread of its own, which ends after
/// the block as it is.
pub(super) fn run(ruby: &Ruby, obj: Value, me: Value, reuse: Option<Reuse>) -> After {
    let task = Task::of(&obj);
    let start = task.start(ruby, me);
    let mut guard = Unfinished {
        obj,
        me,
        armed: true,
    };
    // The block starts with the task's name and flags (defaults, unless
    // set on the task before it started).
    let prepared = prepare_thread(ruby, me, &start);
    let outcome = prepared.and_then(|()| {
        if !start.pending_raise.is_nil() {
            Err(exception_error(start.pending_raise))
        } else {
            let args = magnus::RArray::from_value(start.args);
            let v = sys::call_proc(start.block, args, start.kw_splat)?;
            // As when a thread's block returns: close a scheduler it set.
            sys::close_fiber_scheduler(ruby)?;
            Ok(v)
        }
    });
    sys::gc_guard(sys::raw(start.block));
    sys::gc_guard(sys::raw(start.args));
    if outcome.as_ref().is_err_and(errors::is_jump) {
        sys::clear_errinfo(ruby); // see Aftermath::take
    }
    let mut aftermath = Aftermath::default();
    // If reading them fails (an interrupt consumed there), the flags the
    // block started with.
    let (report, abort) = aftermath
        .take(ruby, thread_flags(ruby, me))
        .unwrap_or((start.report_on_exception, start.abort_on_exception));
    task.set_flags(report, abort);
    let (phase, result, raised) = match outcome {
        Ok(v) => (Phase::Finished, v, None),
        Err(e) => match (jump_tag(&e), e.value()) {
            // Killed (Task#kill, Thread.exit, process exit): the worker ends.
            (Some(tag), _) => {
                aftermath.jump.get_or_insert(tag);
                (Phase::Killed, sys::nil(ruby), None)
            }
            (None, Some(exc)) => {
                let exc = exc.as_value();
                // A scheduler the block set is closed on this path too, so
                // the next block does not inherit it.
                aftermath.take(ruby, sys::close_fiber_scheduler(ruby));
                if report && !is_system_exit(exc) {
                    aftermath.take(ruby, report_exception(ruby, me, task, exc));
                }
                (Phase::Raised, exc, Some(exc))
            }
            (None, None) => (Phase::Killed, sys::nil(ruby), None),
        },
    };
    match reuse {
        Some(reuse) => {
            aftermath.take(ruby, clean_thread(ruby, me, reuse));
        }
        None => aftermath.retire = true,
    }
    leave_busy(me);
    guard.armed = false;
    aftermath.take(ruby, task.finish(obj, phase, result));
    if let Some(exc) = raised {
        // SystemExit always, other exceptions with abort_on_exception: the
        // main thread gets it, as Ruby does for its threads.
        let to_main = if is_system_exit(exc) || abort {
            Ok(true)
        } else {
            global_abort(ruby)
        };
        if aftermath.take(ruby, to_main) == Some(true) {
            let raised = sys::funcall(sys::main_thread(ruby), sys::name!(c"raise"), &[exc]);
            aftermath.take(ruby, raised);
        }
    }
    aftermath.after()
}

pub(super) fn exception_error(exc: Value) -> Error {
    match Exception::from_value(exc) {
        Some(e) => e.into(),
        None => errors::type_error("exception object expected".into()),
    }
}

pub(super) fn is_system_exit(exc: Value) -> bool {
    exc.is_kind_of(Ruby::get_with(exc).exception_system_exit())
}

/// `Thread.abort_on_exception` or `$DEBUG`.
pub(super) fn global_abort(ruby: &Ruby) -> Result<bool, Error> {
    let thread = ruby.class_thread().as_value();
    let abort = sys::funcall(thread, sys::name!(c"abort_on_exception"), &[])?.to_bool();
    Ok(abort || sys::global_variable(ruby, c"$DEBUG").to_bool())
}

/// Sets the worker's name and exception flags for the task about to run.
pub(super) fn prepare_thread(
    ruby: &Ruby,
    me: Value,
    start: &crate::task::Start,
) -> Result<(), Error> {
    let t = |b: bool| sys::bool_value(ruby, b);
    if !start.name.is_nil() {
        sys::funcall(me, sys::name!(c"name="), &[start.name])?;
    }
    sys::funcalls(
        ruby,
        [
            (
                me,
                sys::name!(c"report_on_exception="),
                &[t(start.report_on_exception)],
            ),
            (
                me,
                sys::name!(c"abort_on_exception="),
                &[t(start.abort_on_exception)],
            ),
        ],
    )?;
    // The spawner's priority, as Thread.new gives it (its group is the
    // worker's: see `spawner_placement`).
    if start.priority != 0 {
        let priority = ruby.integer_from_i64(start.priority.into()).as_value();
        sys::funcall(me, sys::name!(c"priority="), &[priority])?;
    }
    // The spawner's fiber storage, as Thread.new copies it (the worker's
    // own is empty: `clean_thread`). Emptied key by key, a worker's storage
    // is {} where a Thread.new thread whose creator had none has nil.
    sys::set_fiber_storage(ruby, start.storage)?;
    Ok(())
}

/// The worker's exception flags when the block ended.
pub(super) fn thread_flags(ruby: &Ruby, me: Value) -> Result<(bool, bool), Error> {
    let [report, abort] = sys::funcalls(
        ruby,
        [
            (me, sys::name!(c"report_on_exception"), &[]),
            (me, sys::name!(c"abort_on_exception"), &[]),
        ],
    )?;
    Ok((report.to_bool(), abort.to_bool()))
}

/// Leaves nothing of the block on the worker: fiber-locals, thread
/// variables, fiber storage, its name, priority and ThreadGroup go, so the
/// next block starts fresh and an idle worker keeps no user object alive.
pub(super) fn clean_thread(ruby: &Ruby, me: Value, reuse: Reuse) -> Result<(), Error> {
    if me.is_frozen() {
        // A block froze Thread.current: the next block could not set a
        // fiber-local on it. Retire the worker (any error here does).
        return Err(errors::thread_error("a block froze its thread"));
    }
    // Read together (one protect): the resets below run no code of the
    // block's (a block that gave its thread methods retires it, last).
    let [keys, name, priority, group] = sys::funcalls(
        ruby,
        [
            (me, sys::name!(c"keys"), &[]),
            (me, sys::name!(c"name"), &[]),
            (me, sys::name!(c"priority"), &[]),
            (me, sys::name!(c"group"), &[]),
        ],
    )?;
    let nil = sys::nil(ruby);
    if let Some(keys) = magnus::RArray::from_value(keys) {
        for k in keys.into_iter() {
            sys::funcall(me, sys::name!(c"[]="), &[k, nil])?;
        }
    }
    sys::clear_thread_variables(me)?;
    sys::clear_fiber_storage(ruby, reuse.fiber)?;
    if sys::has_user_ivars(me) {
        // Instance variables set on Thread.current (Rails 7 keeps its
        // per-thread execution state, CurrentAttributes included, in one):
        // a fresh thread has none, so the next block must not see them.
        sys::remove_ivars(me)?;
    }
    if !name.is_nil() {
        // Ruby gave the native thread the block's name, and clears it here.
        sys::funcall(me, sys::name!(c"name="), &[nil])?;
        sys::name_native_thread(WORKER_NATIVE_NAME);
    }
    // Priority: the spawner's, or what the block set; a ThreadGroup only
    // a block puts its worker in. A worker stuck in a group (the block
    // enclosed it, or joined an enclosed one) retires: it ends there, as
    // its thread would have.
    rest_from(ruby, me, priority, group)?;
    if sys::class_word(me) != reuse.class_word {
        // Singleton methods or modules a block gave Thread.current cannot
        // be taken back: retire the worker rather than pass them on. Last,
        // so that the resets above still run (through any overrides).
        // Compared with the class word the worker started with, so that a
        // thread a `:thread_begin` hook gave a singleton class is not
        // retired after every block (methods a block adds to that class go
        // unnoticed).
        return Err(errors::thread_error("a block changed its thread's class"));
    }
    Ok(())
}

/// Thread.new's report: "#<Thread:0x... file:line run> terminated with
/// exception (report_on_exception is true):" and the exception's full
/// message, on $stderr.
pub(super) fn report_exception(
    ruby: &Ruby,
    me: Value,
    task: &Task,
    exc: Value,
) -> Result<(), Error> {
    let header = thread_to_s(ruby, me, task)?;
    let module = ruby.class_object().const_get::<_, RModule>("RapidThread")?;
    sys::funcall(
        module.as_value(),
        sys::name!(c"__report_exception"),
        &[ruby.str_new(&header).as_value(), exc],
    )?;
    Ok(())
}

/// `rb_thread_to_s` as it reads for a Thread.new thread running the
/// task's block: the worker's address and name, the block's location.
pub(super) fn thread_to_s(ruby: &Ruby, me: Value, task: &Task) -> Result<String, Error> {
    let mut s = format!("#<Thread:{:#018x}", sys::raw(me));
    let name = sys::funcall(me, sys::name!(c"name"), &[])?;
    if !name.is_nil() {
        s.push('@');
        s.push_str(&String::try_convert(name)?);
    }
    let block = task.block(ruby);
    if !block.is_nil() {
        let loc = sys::funcall(block, sys::name!(c"source_location"), &[])?;
        if let Ok((file, line)) = <(String, i64)>::try_convert(loc) {
            s.push_str(&format!(" {}:{}", file, line));
        }
    }
    s.push_str(" run> terminated with exception (report_on_exception is true):\n");
    Ok(s)
}
