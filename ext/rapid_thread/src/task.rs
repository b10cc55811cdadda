//! `RapidThread::Task`: the handle `RapidThread.spawn` returns. It has
//! Thread's interface for one block, which a cached worker thread
//! (thread_cache/) runs as if on a fresh thread.
//!
//! A task is Pending (queued, not started), Running (on a worker, whose
//! Thread is `thread`) or done (Finished, Raised or Killed). Joiners wait on
//! the task's own wait list with the shared two-phase wait of `wait.rs`.
//!
//! Dependencies run one way: the pool (thread_cache/) owns tasks and
//! drives their phases through this module; a task knows nothing of the
//! pool. The one thing a join or a poll needs from it (that a pending task
//! will get a worker) comes through the hooks the pool registers at load
//! time, [`on_pending`].

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use magnus::gc::{Compactor, Marker};
use magnus::scan_args::scan_args;
use magnus::{
    method, prelude::*, DataTypeFunctions, Error, Exception, RArray, RClass, RModule, Ruby,
    TypedData, Value,
};

use crate::errors;
use crate::spin;
use crate::sys::{self, GvlCell, Held, WaitList};
use crate::wait::{self, park};

/// What a task still pending asks of the pool (set once by the pool).
pub struct PendingHooks {
    /// Called by a join with the task object: makes sure some thread will
    /// take the task.
    pub join: fn(Value) -> Result<(), Error>,
    /// Called by a poll (`alive?`, `status`): the same, but only when the
    /// pool's monitor is gone (a stray kill); otherwise one look.
    pub poll: fn(Value) -> Result<(), Error>,
}

static PENDING: OnceLock<PendingHooks> = OnceLock::new();

/// Registers what a task still pending calls.
pub fn on_pending(hooks: PendingHooks) {
    // A second registration (never made) would keep the first.
    let _ = PENDING.set(hooks);
}

fn pending_hooks() -> &'static PendingHooks {
    // Registered by thread_cache::init before `spawn` exists.
    PENDING.get().expect("the pool registered its hooks")
}

/// A poll (`alive?`, `status`) of a task still pending: the pool's
/// `PendingHooks::poll`.
fn poll_pending(rb_self: Value, task: &Task) -> Result<(), Error> {
    if task.phase() == Phase::Pending {
        (pending_hooks().poll)(rb_self)?;
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Phase {
    Pending,
    Running,
    Finished,
    Raised,
    Killed,
}

pub struct State {
    pub phase: Phase,
    /// The block (a Proc) and its arguments (an Array, or nil for none),
    /// dropped once run.
    block: Held,
    args: Held,
    kw_splat: bool,
    /// The block's value, or the exception that ended it.
    result: Held,
    /// The worker running the block, while Running (not marked: see
    /// `marked_values`).
    pub thread: Held,
    name: Held,
    report_on_exception: bool,
    abort_on_exception: bool,
    /// An exception sent with Task#raise before the block started.
    pending_raise: Held,
    /// The spawner's fiber storage, copied at `spawn` (a Hash, or nil),
    /// which Thread.new gives its thread (Ruby 3.3+); dropped once the
    /// block starts.
    storage: Held,
    /// The spawner's priority at `spawn` (Thread.new gives it to its
    /// thread); 0 is a worker's own. A block spawned from a ThreadGroup
    /// other than the workers' runs on a thread of its own (thread_cache's
    /// `spawner_placement`), so a task needs no group.
    priority: i32,
    joiners: WaitList,
    fork_gen: u64,
}

impl State {
    /// A task created before a fork is dead in the child: its worker does
    /// not exist there (as Thread objects of the parent are dead after fork).
    fn fresh(&mut self) -> &mut State {
        let gen = sys::fork_generation();
        if self.fork_gen != gen {
            self.fork_gen = gen;
            self.joiners.forget_all();
            if matches!(self.phase, Phase::Pending | Phase::Running) {
                self.phase = Phase::Killed;
                self.thread = Held::NIL;
                self.storage = Held::NIL;
            }
        }
        self
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.fresh().phase, Phase::Pending | Phase::Running)
    }

    /// What `mark` marks. Not `thread`: it is set only while Running, when
    /// it is a living thread, which Ruby itself marks (and pins). Marked
    /// from here, every worker running a long block became a write-barrier
    /// unprotected object referenced by an old one (the task), which the
    /// GC counts as "shady": 1000 sleeping blocks (vm_thread_close) then
    /// cost a major GC that 1000 Thread.new threads do not. `compact` still
    /// updates it.
    fn marked_values(&self) -> [Held; 6] {
        [
            self.block,
            self.args,
            self.result,
            self.name,
            self.pending_raise,
            self.storage,
        ]
    }

    fn values_mut(&mut self) -> [&mut Held; 7] {
        [
            &mut self.block,
            &mut self.args,
            &mut self.result,
            &mut self.thread,
            &mut self.name,
            &mut self.pending_raise,
            &mut self.storage,
        ]
    }
}

/// When a task last finished (under the GVL), and on which CPU (-1:
/// unknown). A new task's joiner list starts from it, so that a join right
/// after recent completions spins (or parks) for the hand-off as a busy
/// queue's pop does (crate::spin, ACTIVE_WINDOW), while joins of
/// long-running tasks go straight to sleep. Atomics (a torn pair only
/// misjudges one join's plan), as `PROCESS_LAST_WAKE_NS` in sys.
static LAST_FINISH_NS: AtomicU64 = AtomicU64::new(0);
static LAST_FINISH_CPU: AtomicI32 = AtomicI32::new(-1);

fn joiners(s: &mut State) -> &mut WaitList {
    &mut s.fresh().joiners
}

#[derive(TypedData)]
#[magnus(
    class = "RapidThread::Task",
    free_immediately,
    size,
    mark,
    compact,
    wb_protected
)]
pub struct Task {
    pub state: GvlCell<State>,
}

impl DataTypeFunctions for Task {
    fn mark(&self, m: &Marker) {
        sys::mark_from(m, &self.state, |s, mark| {
            s.marked_values().into_iter().for_each(mark)
        });
    }

    fn compact(&self, c: &Compactor) {
        self.state.with(|s| {
            // In a forked child a task that was Running lets go of its
            // worker first: that thread is dead here and, unmarked, may be
            // freed, so `thread` must not be looked at.
            s.fresh()
                .values_mut()
                .into_iter()
                .for_each(|v| *v = sys::gc_location(c, *v))
        });
    }
}

/// What the worker needs to start a task (on its stack, where the GC sees
/// it, while the block runs).
pub struct Start {
    pub block: Value,
    /// The arguments, an Array, or nil for none.
    pub args: Value,
    pub kw_splat: bool,
    pub pending_raise: Value,
    pub name: Value,
    pub report_on_exception: bool,
    pub abort_on_exception: bool,
    /// The spawner's Thread#priority (-3..3); 0 is a worker's own.
    pub priority: i32,
    /// The spawner's fiber storage (a copy: a Hash, or nil).
    pub storage: Value,
}

impl Task {
    /// A pending task. Its values need no write barrier: the Task object
    /// that will hold them does not exist yet (it is born young).
    pub fn new(
        block: Value,
        args: Option<RArray>,
        kw_splat: bool,
        report_on_exception: bool,
        priority: i32,
        storage: Value,
    ) -> Task {
        Task {
            state: GvlCell::new(State {
                phase: Phase::Pending,
                block: Held::new(block),
                args: args.map_or(Held::NIL, |a| Held::new(a.as_value())),
                kw_splat,
                result: Held::NIL,
                thread: Held::NIL,
                name: Held::NIL,
                report_on_exception,
                abort_on_exception: false,
                pending_raise: Held::NIL,
                storage: Held::new(storage),
                priority,
                joiners: {
                    let mut l = WaitList::new();
                    l.set_last_wake(
                        LAST_FINISH_NS.load(Ordering::Relaxed),
                        LAST_FINISH_CPU.load(Ordering::Relaxed),
                    );
                    l
                },
                fork_gen: sys::fork_generation(),
            }),
        }
    }

    /// The receiver, checked by hand (see sys::typed_ref).
    #[inline(always)]
    pub fn get(rb_self: &Value) -> Result<&Task, Error> {
        sys::typed_ref::<Task>(rb_self)
            .ok_or_else(|| errors::wrong_receiver(*rb_self, "RapidThread::Task"))
    }

    /// A task object the cache holds (always a Task), for as long as the
    /// caller's Value is borrowed.
    pub fn of(obj: &Value) -> &Task {
        sys::typed_ref::<Task>(obj).expect("the thread cache only holds tasks")
    }

    /// A task object the cache keeps (always a Task), for as long as the
    /// Held is borrowed.
    pub fn of_held<'a>(ruby: &Ruby, obj: &'a Held) -> &'a Task {
        sys::typed_ref_held::<Task>(ruby, obj).expect("the thread cache only holds tasks")
    }

    /// Whether a queued task still wants to run (it may have been killed
    /// while pending, or belong to a parent process).
    pub fn runnable(&self) -> bool {
        self.state.with(|s| s.fresh().phase == Phase::Pending)
    }

    /// Pending -> Running on `thread`; returns what the worker needs.
    pub fn start(&self, ruby: &Ruby, thread: Value) -> Start {
        // No write barrier for `thread`: the task does not mark it (see
        // State::marked_values).
        self.state.with(|s| {
            s.phase = Phase::Running;
            s.thread = Held::new(thread);
            let start = Start {
                block: s.block.get(ruby),
                args: s.args.get(ruby),
                kw_splat: s.kw_splat,
                pending_raise: s.pending_raise.get(ruby),
                name: s.name.get(ruby),
                report_on_exception: s.report_on_exception,
                abort_on_exception: s.abort_on_exception,
                priority: s.priority,
                storage: s.storage.get(ruby),
            };
            // The worker's stack keeps these alive while the block runs;
            // the task lets go of them so that a kept handle pins nothing.
            s.args = Held::NIL;
            s.pending_raise = Held::NIL;
            s.storage = Held::NIL;
            start
        })
    }

    /// Running -> done, recording the outcome; then wakes every joiner.
    pub fn finish(&self, obj: Value, phase: Phase, result: Value) -> Result<(), Error> {
        let result = Held::new(result);
        sys::write_barrier(obj, result);
        self.state.with(|s| {
            s.phase = phase;
            s.result = result;
            s.thread = Held::NIL;
            s.block = Held::NIL;
        });
        LAST_FINISH_NS.store(sys::monotonic_ns(), Ordering::Relaxed);
        LAST_FINISH_CPU.store(sys::waker_cpu(), Ordering::Relaxed);
        wait::wake_all(&self.state, joiners)
    }

    /// Records the worker's flags as they were when the block ended (the
    /// block may have set them through Thread.current).
    pub fn set_flags(&self, report: bool, abort: bool) {
        self.state.with(|s| {
            s.report_on_exception = report;
            s.abort_on_exception = abort;
        });
    }

    pub fn name(&self, ruby: &Ruby) -> Value {
        self.state.with(|s| s.name).get(ruby)
    }

    pub fn set_name(&self, obj: Value, name: Value) {
        let name = Held::new(name);
        sys::write_barrier(obj, name);
        self.state.with(|s| s.name = name);
    }

    /// The block's [file, line] (nil once the task is done).
    pub fn block(&self, ruby: &Ruby) -> Value {
        self.state.with(|s| s.block).get(ruby)
    }

    /// Ends a task that has not started as killed (it never will): lets go
    /// of what it held and wakes its joiners.
    pub fn kill_pending(&self) -> Result<(), Error> {
        self.state.with(|s| {
            s.phase = Phase::Killed;
            s.block = Held::NIL;
            s.args = Held::NIL;
            s.pending_raise = Held::NIL;
            s.storage = Held::NIL;
        });
        wait::wake_all(&self.state, joiners)
    }

    /// The worker running the block, while Running (alive: Ruby marks it).
    fn running_thread(&self, ruby: &Ruby) -> Option<Value> {
        self.state
            .with(|s| {
                let s = s.fresh();
                (s.phase == Phase::Running).then_some(s.thread)
            })
            .map(|t| t.get(ruby))
    }

    fn phase(&self) -> Phase {
        self.state.with(|s| s.fresh().phase)
    }
}

/// Thread#join's `limit`: nil waits forever, an Integer is whole seconds,
/// anything else goes through Float (its TypeError); zero or negative does
/// not wait, and a limit too large for the clock (or NaN) waits forever.
fn join_limit(limit: Option<Value>) -> Result<Option<Duration>, Error> {
    match limit {
        None => Ok(None),
        Some(v) if v.is_nil() => Ok(None),
        Some(v) => {
            let secs = sys::num2dbl(v)?;
            if secs.is_nan() {
                // Thread#join(NaN) waits forever (double2hrtime's cast).
                Ok(None)
            } else if secs <= 0.0 {
                Ok(Some(Duration::ZERO))
            } else {
                Ok(Duration::try_from_secs_f64(secs).ok())
            }
        }
    }
}

/// How often a join on a task that has not started re-checks that a
/// worker is on its way.
const PENDING_RECHECK: Duration = Duration::from_millis(10);

/// Waits for the task to end; false if `limit` ran out first.
fn wait_done(rb_self: Value, task: &Task, limit: Option<Duration>) -> Result<bool, Error> {
    let ruby = Ruby::get_with(rb_self);
    let me = sys::raw(sys::current_thread(&ruby));
    if task.running_thread(&ruby).map(sys::raw) == Some(me) {
        return Err(errors::thread_error(
            "Target thread must not be current thread",
        ));
    }
    let deadline = wait::deadline_after(limit);
    loop {
        let phase = task.phase();
        match phase {
            Phase::Finished | Phase::Raised | Phase::Killed => return Ok(true),
            Phase::Pending => {
                (pending_hooks().join)(rb_self)?;
                // The hook's Ruby calls can switch threads: the task may
                // have started, or ended and woken its joiners, before
                // this one enlists below. Look again.
                if task.phase() != Phase::Pending {
                    continue;
                }
            }
            Phase::Running => {}
        }
        if deadline.is_some_and(|d| d <= Instant::now()) || limit == Some(Duration::ZERO) {
            return Ok(false);
        }
        // While the task waits for a worker, wake up now and then to make
        // sure one is coming (the monitor may have been killed).
        let until = match phase {
            Phase::Pending => {
                let recheck = Instant::now() + PENDING_RECHECK;
                Some(deadline.map_or(recheck, |d| d.min(recheck)))
            }
            _ => deadline,
        };
        park(&task.state, joiners, rb_self, until, |_| false)?;
    }
}

/// The exception a task ended with, re-raised as Thread#join does.
fn reraise(ruby: &Ruby, task: &Task) -> Result<(), Error> {
    let (phase, result) = task.state.with(|s| (s.phase, s.result));
    if phase == Phase::Raised {
        if let Some(e) = Exception::from_value(result.get(ruby)) {
            return Err(e.into());
        }
    }
    Ok(())
}

fn join(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    let limit = match args {
        [] => None,
        [limit] => Some(*limit),
        // Thread#join's arity error. (scan_args on every join cost about
        // 270 instructions on 3.1: it formats its argument spec each call.)
        _ => {
            scan_args::<(), (Option<Value>,), (), (), (), ()>(args)?
                .optional
                .0
        }
    };
    let task = Task::get(&rb_self)?;
    let limit = join_limit(limit)?;
    if !wait_done(rb_self, task, limit)? {
        return Ok(sys::nil(ruby));
    }
    reraise(ruby, task)?;
    Ok(rb_self)
}

fn value(ruby: &Ruby, rb_self: Value) -> Result<Value, Error> {
    let task = Task::get(&rb_self)?;
    wait_done(rb_self, task, None)?;
    reraise(ruby, task)?;
    let result = task.state.with(|s| match s.phase {
        Phase::Finished => s.result,
        _ => Held::NIL,
    });
    Ok(result.get(ruby))
}

/// Thread#alive?. Polling a task that has not started (`while t.alive?;
/// Thread.pass; end`) is waiting for it: its woken worker spins for the
/// GVL where Thread.pass does not see it, so the poll hands the GVL over
/// through our own hint instead (docs/design-details.md, "Thread cache").
fn is_alive(ruby: &Ruby, rb_self: Value) -> Result<bool, Error> {
    let task = Task::get(&rb_self)?;
    poll_pending(rb_self, task)?;
    if task.phase() == Phase::Pending && !sys::thread_alone(ruby) {
        if let Some(budget) = spin::handover_budget() {
            let cpu_busy = sys::yield_gvl(ruby, budget, spin::LATE);
            spin::record(None, cpu_busy);
        }
        // Interrupts that arrived meanwhile are raised here, as by Thread.pass.
        sys::check_ints(ruby)?;
    }
    Ok(task.state.with(State::alive))
}

/// Thread#status: "run" until the block starts, the worker's status while
/// it runs, false once it ended normally or was killed, nil after an
/// exception.
fn status(ruby: &Ruby, rb_self: Value) -> Result<Value, Error> {
    let task = Task::get(&rb_self)?;
    poll_pending(rb_self, task)?;
    Ok(match task.phase() {
        Phase::Pending => ruby.str_new("run").as_value(),
        Phase::Running => {
            let t = task.running_thread(ruby).unwrap_or_else(|| sys::nil(ruby));
            sys::funcall(t, sys::name!(c"status"), &[])?
        }
        Phase::Finished | Phase::Killed => ruby.qfalse().as_value(),
        Phase::Raised => ruby.qnil().as_value(),
    })
}

/// Thread#kill: a pending task never starts; a running one is stopped by
/// killing its worker (Thread#kill's semantics: `ensure` runs, `rescue`
/// cannot catch it); the cache replaces the worker.
fn kill(ruby: &Ruby, rb_self: Value) -> Result<Value, Error> {
    let task = Task::get(&rb_self)?;
    match task.phase() {
        Phase::Pending => task.kill_pending()?,
        Phase::Running => {
            if let Some(t) = task.running_thread(ruby) {
                sys::funcall(t, sys::name!(c"kill"), &[])?;
            }
        }
        _ => {}
    }
    Ok(rb_self)
}

/// Thread#raise. Before the block starts, the exception is built now (the
/// same argument errors) and raised in place of the block when it would
/// start, as for a thread that has not run yet.
fn raise_m(ruby: &Ruby, rb_self: Value, args: RArray) -> Result<Value, Error> {
    let task = Task::get(&rb_self)?;
    match task.phase() {
        Phase::Pending => {
            // Thread#raise without arguments: RuntimeError, "unhandled exception".
            let argv: Vec<Value> = if args.is_empty() {
                vec![
                    ruby.exception_runtime_error().as_value(),
                    ruby.str_new("unhandled exception").as_value(),
                ]
            } else {
                args.into_iter().collect()
            };
            let exc = Held::new(sys::make_exception(ruby, &argv)?);
            sys::write_barrier(rb_self, exc);
            task.state.with(|s| s.pending_raise = exc);
        }
        Phase::Running => {
            if let Some(t) = task.running_thread(ruby) {
                let argv: Vec<Value> = args.into_iter().collect();
                sys::funcall(t, sys::name!(c"raise"), &argv)?;
            }
        }
        _ => {}
    }
    Ok(sys::nil(ruby))
}

fn name(ruby: &Ruby, rb_self: Value) -> Result<Value, Error> {
    let task = Task::get(&rb_self)?;
    if let Some(t) = task.running_thread(ruby) {
        return sys::funcall(t, sys::name!(c"name"), &[]);
    }
    Ok(task.name(ruby))
}

/// Stores an already validated name (lib/rapid_thread/task.rb).
fn set_name(ruby: &Ruby, rb_self: Value, name: Value) -> Result<Value, Error> {
    let task = Task::get(&rb_self)?;
    task.set_name(rb_self, name);
    if let Some(t) = task.running_thread(ruby) {
        sys::funcall(t, sys::name!(c"name="), &[name])?;
    }
    Ok(name)
}

fn flag(rb_self: Value, getter: &'static sys::Name, report: bool) -> Result<bool, Error> {
    let task = Task::get(&rb_self)?;
    if let Some(t) = task.running_thread(&Ruby::get_with(rb_self)) {
        return Ok(sys::funcall(t, getter, &[])?.to_bool());
    }
    Ok(task.state.with(|s| {
        if report {
            s.report_on_exception
        } else {
            s.abort_on_exception
        }
    }))
}

fn set_flag(
    rb_self: Value,
    setter: &'static sys::Name,
    report: bool,
    v: Value,
) -> Result<Value, Error> {
    let task = Task::get(&rb_self)?;
    let on = v.to_bool();
    task.state.with(|s| {
        if report {
            s.report_on_exception = on;
        } else {
            s.abort_on_exception = on;
        }
    });
    if let Some(t) = task.running_thread(&Ruby::get_with(rb_self)) {
        sys::funcall(t, setter, &[v])?;
    }
    Ok(v)
}

fn report_on_exception(rb_self: Value) -> Result<bool, Error> {
    flag(rb_self, sys::name!(c"report_on_exception"), true)
}

fn set_report_on_exception(rb_self: Value, v: Value) -> Result<Value, Error> {
    set_flag(rb_self, sys::name!(c"report_on_exception="), true, v)
}

fn abort_on_exception(rb_self: Value) -> Result<bool, Error> {
    flag(rb_self, sys::name!(c"abort_on_exception"), false)
}

fn set_abort_on_exception(rb_self: Value, v: Value) -> Result<Value, Error> {
    set_flag(rb_self, sys::name!(c"abort_on_exception="), false, v)
}

/// Thread#backtrace: the worker's while the block runs (only the block's
/// frames: workers have no Ruby frames of their own), [] before it starts,
/// nil once it ended.
fn backtrace(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    // Thread#backtrace(start = 0, length = nil): the same arity error.
    scan_args::<(), (Option<Value>, Option<Value>), (), (), (), ()>(args)?;
    let task = Task::get(&rb_self)?;
    if task.phase() != Phase::Running {
        // Thread#backtrace checks its arguments whatever the thread's
        // state: run the same checks on the current thread.
        sys::funcall(sys::current_thread(ruby), sys::name!(c"backtrace"), args)?;
    }
    Ok(match task.phase() {
        Phase::Pending => ruby.ary_new().as_value(),
        Phase::Running => {
            let t = task.running_thread(ruby).unwrap_or_else(|| sys::nil(ruby));
            sys::funcall(t, sys::name!(c"backtrace"), args)?
        }
        _ => ruby.qnil().as_value(),
    })
}

fn thread(ruby: &Ruby, rb_self: Value) -> Result<Value, Error> {
    Ok(Task::get(&rb_self)?
        .running_thread(ruby)
        .unwrap_or_else(|| sys::nil(ruby)))
}

/// The block, for Task#inspect (nil once done).
fn block(ruby: &Ruby, rb_self: Value) -> Result<Value, Error> {
    Ok(Task::get(&rb_self)?.block(ruby))
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<RClass, Error> {
    let class = module.define_class("Task", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_method("join", method!(join, -1))?;
    class.define_method("value", method!(value, 0))?;
    class.define_method("alive?", method!(is_alive, 0))?;
    class.define_method("status", method!(status, 0))?;
    class.define_method("kill", method!(kill, 0))?;
    class.define_method("__raise", method!(raise_m, 1))?;
    class.define_method("name", method!(name, 0))?;
    class.define_method("__set_name", method!(set_name, 1))?;
    class.define_method("report_on_exception", method!(report_on_exception, 0))?;
    class.define_method("report_on_exception=", method!(set_report_on_exception, 1))?;
    class.define_method("abort_on_exception", method!(abort_on_exception, 0))?;
    class.define_method("abort_on_exception=", method!(set_abort_on_exception, 1))?;
    class.define_method("backtrace", method!(backtrace, -1))?;
    class.define_method("thread", method!(thread, 0))?;
    class.define_method("__block", method!(block, 0))?;
    Ok(class)
}
