//! `RapidThread.spawn` / `Thread.spawn`: Thread.new semantics served by a
//! cache of reusable Ruby threads (docs/design-details.md, "Thread cache").
//!
//! * `spawn` queues a Task and wakes an idle worker if there is one: the
//!   most recently idle (LIFO), the one most likely still spinning and
//!   cache-warm. The others get no work while it keeps up, so they reach
//!   `idle_timeout` and exit even under steady load: after a burst the
//!   cache shrinks back to what the load needs.
//! * Workers are Ruby threads running [`worker_body`] natively (no Ruby
//!   frame beneath the block, so backtraces are the block's own). A worker
//!   that finishes a block takes the next pending one without sleeping;
//!   with nothing pending it waits on the idle list (the shared two-phase
//!   wait) and exits after `idle_timeout`, or at once when `max_idle`
//!   workers already wait.
//! * Growth rule: a pending task needs a worker that can take it. When none
//!   is idle, none is starting and no other busy worker is runnable (all
//!   are blocked), `spawn` (or a `join` on a pending task) starts one at
//!   once. Otherwise a monitor thread re-checks every `GROW_TICK` while
//!   tasks are pending (see [`monitor_body`]). Every pending task therefore
//!   gets a thread, even when every other block blocks (or runs) forever,
//!   and the thread count follows the number of blocks actually blocked.
//!
//! Here: the pool, `spawn`, threads of their own, the growth rule's
//! callers, settings and statistics. `monitor.rs`: the monitor thread.
//! `worker.rs`: a worker's loop and the run of one task.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use magnus::error::ErrorType;
use magnus::gc::{Compactor, Marker};
use magnus::{
    function, prelude::*, DataTypeFunctions, Error, Exception, RClass, RHash, RModule, Ruby,
    TypedData, Value,
};

use crate::errors;
use crate::sys::{self, GvlStatic, Held, WaitList};
use crate::task::{Phase, Task};
use crate::wait::{self, End};

mod monitor;
mod worker;

use monitor::*;
use worker::*;

/// The monitor thread's name.
const MONITOR_NAME: &str = "rapid_thread monitor";

/// A worker's native thread name (its Ruby name stays nil, as a Thread.new
/// thread's): without one, every worker showed the monitor's, its creator.
const WORKER_NATIVE_NAME: &str = "rapid_thread worker";

/// The shortest `own_threads` that is swept for lost threads.
const OWN_SWEEP_MIN: usize = 64;

/// How often the monitor re-checks pending tasks for a stall.
const GROW_TICK: Duration = Duration::from_millis(1);

/// ... while the workers starting are enough for every pending task
/// (`Pool::starters_suffice`): the rules wait for them anyway, and the
/// tick only finds a starter lost before its body ran.
const STARTING_TICK: Duration = Duration::from_millis(20);

pub struct Pool {
    /// Tasks waiting for a worker (some may have been killed meanwhile).
    pending: VecDeque<Held>,
    /// Workers waiting for a task.
    idle: WaitList,
    /// The Threads of workers running a block.
    busy: Vec<Held>,
    /// Workers created that have not reached the pool yet.
    starting: usize,
    /// Their threads, until each reaches the pool or ends. A thread can
    /// end before its body runs (killed in a `:thread_begin` hook, where
    /// a pending Thread#kill also lands): the monitor finds it dead here
    /// and stops counting it, or it would wait for it forever.
    starting_threads: Vec<Held>,
    /// Worker threads alive.
    live: usize,
    /// Threads of their own (not workers) for blocks spawned from a
    /// ThreadGroup other than the workers' (see `spawner_placement`), each
    /// with its task, until its body takes it (`spawn_on_own_thread`).
    own_threads: Vec<(Held, Held)>,
    /// `own_threads` is swept for threads lost before their body ran when
    /// it reaches this length (see `spawn_on_own_thread`).
    own_sweep_at: usize,
    /// Where workers rest: `ThreadGroup::Default` (set at load time).
    home: Held,
    monitor: Held,
    /// The monitor's body has run (see `arm_monitor`).
    monitor_started: bool,
    /// The monitor is in a sleep (timed or not) that a wake-up ends.
    monitor_sleeping: bool,
    /// ... in an untimed sleep: nothing was pending (for a test).
    monitor_dormant: bool,
    /// Workers that spawn, join or a blocked thread (`before_blocking`)
    /// asked the monitor to start.
    wanted: usize,
    /// How many workers the next stall starts (`Pool::next_batch`).
    batch: usize,
    spawned: u64,
    reused: u64,
    /// Tasks taken by workers (progress, for the monitor).
    started: u64,
    created: u64,
    /// Monitor ticks that found pending tasks stalled, every worker
    /// blocked, and took the next batch (`cache_stats[:stalls]`).
    stalls: u64,
    peak: usize,
    idle_timeout: Duration,
    max_idle: usize,
    fork_gen: u64,
}

impl Pool {
    const fn new() -> Pool {
        Pool {
            pending: VecDeque::new(),
            idle: WaitList::new(),
            busy: Vec::new(),
            starting: 0,
            starting_threads: Vec::new(),
            live: 0,
            own_threads: Vec::new(),
            own_sweep_at: OWN_SWEEP_MIN,
            home: Held::NIL,
            monitor: Held::NIL,
            monitor_started: false,
            monitor_sleeping: false,
            monitor_dormant: false,
            wanted: 0,
            spawned: 0,
            reused: 0,
            started: 0,
            created: 0,
            stalls: 0,
            batch: 1,
            peak: 0,
            idle_timeout: Duration::from_secs(3),
            max_idle: 64,
            fork_gen: 0,
        }
    }

    /// After fork the child has none of the parent's workers: it starts
    /// with an empty cache (tasks of the parent are dead, see Task).
    #[inline(always)]
    fn fresh(&mut self) -> &mut Pool {
        let gen = sys::fork_generation();
        if self.fork_gen != gen {
            self.forget_parent(gen);
        }
        self
    }

    /// `fresh`'s reset, out of line: every access to the pool checks the
    /// fork generation, and only a child's first one resets.
    #[cold]
    #[inline(never)]
    fn forget_parent(&mut self, gen: u64) {
        *self = Pool {
            idle_timeout: self.idle_timeout,
            max_idle: self.max_idle,
            home: self.home,
            fork_gen: gen,
            ..Pool::new()
        };
    }

    /// What an idle worker decides by: `idle_timeout` and `max_idle`.
    fn idle_settings(&mut self) -> (Duration, usize) {
        (self.idle_timeout, self.max_idle)
    }

    /// Whether the monitor is there and its body has started (it clears
    /// `monitor` on every way out; one killed before it started does not).
    fn monitor_running(&mut self) -> bool {
        !self.monitor.is_nil() && self.monitor_started
    }

    /// Drops killed tasks from the head; whether a runnable one is left.
    fn has_pending(&mut self, ruby: &Ruby) -> bool {
        while let Some(t) = self.pending.front() {
            if Task::of_held(ruby, t).runnable() {
                return true;
            }
            self.pending.pop_front();
        }
        false
    }

    /// Whether an idle worker must be woken for the pending tasks: more
    /// of them than idle workers already woken and not back yet (each of
    /// those takes a task when it runs, and one killed on the way hands
    /// its wake-up on: `wait::enlisted` with `End::Newest`, `Live::drop`).
    /// A second wake-up for the same task went to the next newest idle
    /// worker, which found it taken and came back as the newest: work left
    /// the hot worker.
    fn must_wake_idle(&mut self, ruby: &Ruby) -> bool {
        // `len`, not `runnable_pending`: O(1) per spawn; a killed task
        // counted costs at most one wake-up.
        !self.idle.is_empty()
            && self.has_pending(ruby)
            && self.pending.len() > self.idle.handed_out()
    }

    /// Whether tasks are pending and the workers starting will take every
    /// one (killed ones counted: O(1), and a wrong "no" only ticks sooner).
    fn starters_suffice(&mut self) -> bool {
        self.starting > 0
            && self.wanted == 0
            && !self.pending.is_empty()
            && self.pending.len() <= self.starting
    }

    /// Whether a worker is idle (or just woken), starting or asked for.
    fn worker_coming(&mut self) -> bool {
        self.idle.waiting() > 0 || self.starting > 0 || self.wanted > 0
    }

    /// How many workers a stall starts: 1, then twice as many each time
    /// it lasts, up to `MAX_BATCH` (64 blocked blocks need 7 batches, not
    /// 64), until tasks make progress again (`monitor::grow_if_stalled`).
    fn next_batch(&mut self) -> usize {
        let n = self.batch;
        self.batch = (n * 2).min(MAX_BATCH);
        n
    }

    /// The next batch for a stall, unless a worker is now on its way: the
    /// `stop?` calls that found the stall can switch threads, and the
    /// monitor's tick and a blocked thread (`before_blocking`) may both
    /// have found it.
    fn stall_batch(&mut self) -> Option<usize> {
        (!self.worker_coming()).then(|| self.next_batch())
    }

    /// Pending tasks that still want to run (killed ones stay queued
    /// until a worker or `has_pending` drops them).
    fn runnable_pending(&mut self, ruby: &Ruby) -> usize {
        self.pending
            .iter()
            .filter(|t| Task::of_held(ruby, t).runnable())
            .count()
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut Held> {
        self.pending
            .iter_mut()
            .chain(self.busy.iter_mut())
            .chain(self.starting_threads.iter_mut())
            .chain(self.own_threads.iter_mut().flat_map(|(t, k)| [t, k]))
            .chain(std::iter::once(&mut self.monitor))
            .chain(std::iter::once(&mut self.home))
    }
}

static POOL: GvlStatic<Pool> = GvlStatic::new(Pool::new());

fn idle(p: &mut Pool) -> &mut WaitList {
    &mut p.fresh().idle
}

fn with<R>(f: impl FnOnce(&mut Pool) -> R) -> R {
    POOL.with(|p| f(p.fresh()))
}

/// Marks the cache's Ruby values (pending tasks, busy threads, the
/// monitor, own threads and their tasks, the home ThreadGroup). One
/// instance is created at load time and registered with
/// `rb_gc_register_mark_object`; it is not write-barrier protected, so the
/// GC re-marks it on every minor GC and stores into the pool need no
/// barrier.
#[derive(Default, TypedData)]
#[magnus(
    class = "RapidThread::ThreadCacheRoots",
    free_immediately,
    mark,
    compact
)]
struct Roots;

impl DataTypeFunctions for Roots {
    fn mark(&self, m: &Marker) {
        sys::mark_from(m, POOL.marking(m), |p, mark| {
            p.values_mut().for_each(|v| mark(*v))
        });
    }

    fn compact(&self, c: &Compactor) {
        POOL.compacting(c)
            .with(|p| p.values_mut().for_each(|v| *v = sys::gc_location(c, *v)));
    }
}

// ---------------------------------------------------------------------------
// Spawning
// ---------------------------------------------------------------------------

fn spawn(ruby: &Ruby, args: &[Value]) -> Result<Value, Error> {
    let Some(block) = sys::block_proc(ruby) else {
        return Err(errors::thread_error("must be called with a block"));
    };
    let kw_splat = sys::keyword_given(ruby);
    let me = sys::current_thread(ruby);
    let [report, priority, group] = sys::funcalls(
        ruby,
        [
            (
                ruby.class_thread().as_value(),
                sys::name!(c"report_on_exception"),
                &[],
            ),
            (me, sys::name!(c"priority"), &[]),
            (me, sys::name!(c"group"), &[]),
        ],
    )?;
    let report = report.to_bool();
    let place = spawner_placement(priority, group)?;
    // The copy of its fiber storage a Thread.new thread starts with (a
    // thread of its own copies it itself).
    let storage = match place {
        Where::Pool { .. } => sys::current_fiber_storage(ruby)?,
        Where::OwnThread => sys::nil(ruby),
    };
    // No Array for a block spawned without arguments (most are): one
    // object fewer per spawn.
    let args = (!args.is_empty()).then(|| ruby.ary_new_from_values(args));
    let priority = match place {
        Where::Pool { priority } => priority,
        Where::OwnThread => 0,
    };
    let task = ruby.obj_wrap(Task::new(block, args, kw_splat, report, priority, storage));
    // Until the Task object exists (its allocation may run the GC), the
    // Proc, the Array and the storage's copy were reachable only from the
    // Rust value being boxed: keep them on this stack frame up to here.
    sys::gc_guard(sys::raw(block));
    sys::gc_guard(sys::raw(storage));
    if let Some(args) = args {
        sys::gc_guard(sys::raw(args.as_value()));
    }
    let obj = task.as_value();
    if let Where::OwnThread = place {
        spawn_on_own_thread(ruby, obj)?;
        return Ok(obj);
    }
    let held = Held::new(obj);
    with(|p| {
        p.spawned += 1;
        p.pending.push_back(held);
    });
    wait::arm_blocking_hook(true);
    if let Err(e) = dispatch(ruby) {
        // Nothing can run it (no thread could be created, ThreadError): as
        // Thread.new, raise and leave nothing behind. Any other error (an
        // interrupt aimed at this thread) leaves the task queued: it runs,
        // as a Thread.new thread already created would.
        if e.is_kind_of(ruby.exception_thread_error()) {
            with(|p| p.pending.retain(|&t| t != held));
        }
        return Err(e);
    }
    Ok(obj)
}

/// Where a spawned block runs: on a worker of the pool, at the spawner's
/// priority for the block, or on a thread of its own.
enum Where {
    Pool { priority: i32 },
    OwnThread,
}

/// Thread.new gives its thread the creator's priority and ThreadGroup,
/// fixed when the thread is made. A worker takes on the priority for the
/// block (`prepare_thread`) and drops it after (`rest_from`); the common
/// case, priority 0 in the home group, costs two reads here and nothing on
/// the worker's way in.
///
/// A block spawned from any other group (or from a frozen home group)
/// runs on a thread of its own, made here by the spawner, which Ruby
/// places exactly as a Thread.new thread (`spawn_on_own_thread`), at
/// Thread.new's cost. A worker cannot be in that group from the spawn on:
/// it is not chosen before the block starts, after the spawner gives up
/// the GVL, and by then the group may be enclosed or frozen
/// (`spawn { }; group.enclose` does that every time), when
/// `ThreadGroup#add` refuses it, though a Thread.new thread is inside
/// already. `priority` and `group`: the spawner's.
fn spawner_placement(priority: Value, group: Value) -> Result<Where, Error> {
    if Held::new(group) != with(|p| p.home) || group.is_frozen() {
        return Ok(Where::OwnThread);
    }
    let priority = if sys::raw(priority) == sys::fixnum(0) {
        0
    } else {
        // -3..3 (Thread#priority= clamps).
        sys::num2long(priority)? as i32
    };
    Ok(Where::Pool { priority })
}

/// Whether ThreadGroup#add lets threads into and out of `group`: it is
/// neither frozen nor enclosed.
fn movable(group: Value) -> Result<bool, Error> {
    if group.is_frozen() {
        return Ok(false);
    }
    let enclosed = sys::funcall(group, sys::name!(c"enclosed?"), &[])?;
    Ok(!enclosed.to_bool())
}

/// Brings a thread of the pool back to rest: priority 0, in the home
/// ThreadGroup. Fails (ThreadError) when its group or home is enclosed or
/// frozen: the caller then retires the thread rather than keep it
/// elsewhere.
fn rest(ruby: &Ruby, me: Value) -> Result<(), Error> {
    let [priority, group] = sys::funcalls(
        ruby,
        [
            (me, sys::name!(c"priority"), &[]),
            (me, sys::name!(c"group"), &[]),
        ],
    )?;
    rest_from(ruby, me, priority, group)
}

/// `rest`, given the thread's priority and group as just read.
fn rest_from(ruby: &Ruby, me: Value, priority: Value, group: Value) -> Result<(), Error> {
    if sys::raw(priority) != sys::fixnum(0) {
        sys::funcall(
            me,
            sys::name!(c"priority="),
            &[ruby.integer_from_i64(0).as_value()],
        )?;
    }
    let home = with(|p| p.home);
    if Held::new(group) != home {
        sys::funcall(home.get(ruby), sys::name!(c"add"), &[me])?;
    }
    Ok(())
}

/// Runs the task `obj` on a new thread made here, by the spawner: Ruby
/// gives it the spawner's ThreadGroup (enclosed or not), priority and
/// `handle_interrupt` masks, as to a Thread.new thread, and raises
/// Thread.new's ThreadError when it cannot (a frozen group, no threads
/// left). The thread runs this one block as a worker would, then ends.
fn spawn_on_own_thread(ruby: &Ruby, obj: Value) -> Result<(), Error> {
    // A thread lost before its body ran leaves its entry until its task
    // is joined or polled; one that nobody joins would stay for good.
    // Swept when the list doubles: amortized, a few checks per spawn.
    if with(|p| p.own_threads.len() >= p.own_sweep_at) {
        let mut i = 0;
        while let Some((t, task)) = with(|p| p.own_threads.get(i).copied()) {
            if !forget_if_lost(t.get(ruby), task.get(ruby))? {
                i += 1;
            }
        }
        with(|p| p.own_sweep_at = OWN_SWEEP_MIN.max(2 * p.own_threads.len()));
    }
    let t = Held::new(sys::create_thread(ruby, own_thread_body, false)?);
    // The thread cannot look for its task before this one gives up the GVL.
    with(|p| {
        p.spawned += 1;
        p.own_threads.push((t, Held::new(obj)));
    });
    Ok(())
}

fn own_thread_body(ruby: &Ruby) -> Option<i32> {
    let me = sys::current_thread(ruby);
    sys::name_native_thread(WORKER_NATIVE_NAME);
    let task = with(|p| {
        let i = p
            .own_threads
            .iter()
            .position(|&(t, _)| t == Held::new(me))?;
        Some(p.own_threads.swap_remove(i).1)
    })
    .map(|t| t.get(ruby));
    match task {
        // Not when it was killed before it started.
        Some(task) if Task::of(&task).runnable() => match run(ruby, task, me, None) {
            After::End(tag) => tag,
            After::Continue => None,
        },
        _ => None,
    }
}

/// Whether the pending task `task` waits for a thread of its own (see
/// `spawn_on_own_thread`), not for the pool. If that thread died before
/// its body ran (killed in a `:thread_begin` hook, where a pending
/// Thread#kill lands too), the task ends as killed: as the join of such a
/// Thread.new thread, a join of the task returns. Called by joins and
/// polls of pending tasks; each looks at its own task only, so joining a
/// burst of them costs no scan of the others' threads.
fn waits_for_own_thread(task: Value) -> Result<bool, Error> {
    let key = Held::new(task);
    let Some(t) = with(|p| p.own_threads.iter().find(|e| e.1 == key).map(|e| e.0)) else {
        return Ok(false);
    };
    forget_if_lost(t.get(&Ruby::get_with(task)), task)?;
    Ok(true)
}

/// For the listed thread of its own `t` and its task: if `t` is dead, its
/// body never ran (that would have removed the entry), so the entry goes
/// and the task ends as killed. Whether it was lost.
fn forget_if_lost(t: Value, task: Value) -> Result<bool, Error> {
    if sys::funcall(t, sys::name!(c"alive?"), &[])?.to_bool() {
        return Ok(false);
    }
    let key = Held::new(task);
    with(|p| p.own_threads.retain(|e| e.1 != key));
    if Task::of(&task).runnable() {
        Task::of(&task).kill_pending()?;
    }
    Ok(true)
}

/// `PendingHooks::join`: a join of a task that has not started.
fn join_pending(task: Value) -> Result<(), Error> {
    if waits_for_own_thread(task)? {
        return Ok(());
    }
    ensure_progress(&Ruby::get_with(task))
}

/// `PendingHooks::poll`: a poll of a task that has not started.
fn poll_pending(task: Value) -> Result<(), Error> {
    if waits_for_own_thread(task)? {
        return Ok(());
    }
    ensure_progress_if_orphaned(&Ruby::get_with(task))
}

/// Gets the pending tasks going: wakes the newest idle worker unless the
/// idle workers already woken cover them (`must_wake_idle`); otherwise arms
/// the monitor (a safety net when woken workers cover the tasks) and has it
/// start a worker now when no worker can take them.
fn dispatch(ruby: &Ruby) -> Result<(), Error> {
    if with(|p| p.must_wake_idle(ruby)) {
        return wait::wake_newest(POOL.cell(), idle);
    }
    // As Thread.new, refused once the process is ending (sys::create_thread
    // says why; the monitor, told to end, may not have yet).
    if sys::process_ending(ruby)? {
        return Err(errors::thread_error("can't alloc thread"));
    }
    // Armed first: `ensure_progress` calls `stop?` on busy workers, where
    // an interrupt (Thread#raise, Ctrl-C) can end the spawn with the task
    // left queued; the monitor's ticks then do what it would have done.
    // The monitor cannot run before this thread gives up the GVL.
    arm_monitor(ruby)?;
    ensure_progress(ruby)
}

/// Asks for a worker now when tasks are pending and nobody else can take
/// them: no worker idle, starting or asked for, and every busy worker
/// (other than the caller) blocked. Workers are always started by the
/// monitor thread: a Ruby thread inherits its creator's handle_interrupt
/// masks, and the monitor runs unmasked (sys::create_thread), whereas the
/// caller may be inside `Thread.handle_interrupt(Object => :never)`.
///
/// Also restarts the monitor when workers are wanted but it is gone (it
/// was killed, e.g. by a stray Thread#kill), so a spawn or join never
/// leaves wanted workers waiting for a monitor. One exception (known, not
/// fixed): a caller whose thread the monitor could not send home (an
/// enclosed ThreadGroup) does not restart it, and a join from there waits
/// until a thread of another group spawns, joins or polls.
fn ensure_progress(ruby: &Ruby) -> Result<(), Error> {
    if !with(|p| p.has_pending(ruby)) {
        return Ok(());
    }
    // A join finds an idle worker nobody woke (the monitor that would
    // have, on its tick, was killed): wake it.
    if with(|p| p.must_wake_idle(ruby)) {
        return wait::wake_newest(POOL.cell(), idle);
    }
    if !can_progress(ruby)? {
        with(|p| p.wanted += 1);
    }
    // Workers starting count as coming, but one can die before it gets
    // here (Pool::starting_threads): the monitor's tick finds out, so it
    // must be ticking (it may have been killed, or be asleep). Without a
    // monitor (a stray kill), nothing would start a worker for a task
    // behind a busy block that never ends: only the monitor's tick does.
    if with(|p| p.wanted > 0 || p.starting > 0 || !p.monitor_running()) {
        return arm_monitor(ruby);
    }
    Ok(())
}

/// For a poll of a pending task (`Task#alive?`, `#status`): a program that
/// only polls makes no spawn or join, so it would wait forever on tasks a
/// killed monitor left behind. A running monitor (the usual case) costs
/// one look at the pool. Without one, a poll wakes an idle worker nobody
/// woke, or restarts the monitor, whose tick does the rest (it grows the
/// cache when the tasks make no progress). Unlike a join:
/// - once the main thread has ended (finalizers at exit), a poll starts
///   nothing, as Thread.new refuses to then;
/// - a monitor that cannot be created (ThreadError) is not the poll's
///   answer: the task is still pending, and the next poll tries again.
fn ensure_progress_if_orphaned(ruby: &Ruby) -> Result<(), Error> {
    if with(Pool::monitor_running) || !with(|p| p.has_pending(ruby)) {
        return Ok(());
    }
    if sys::process_ending(ruby)? {
        return Ok(());
    }
    if with(|p| p.must_wake_idle(ruby)) {
        return wait::wake_newest(POOL.cell(), idle);
    }
    // Refused: the next poll tries again.
    let _refused = try_arm_monitor(ruby)?;
    Ok(())
}

/// `wait::on_blocking`: the current thread is about to block in a wait.
/// If tasks are pending and no worker can take them (none idle, starting
/// or asked for, every other busy one blocked), the stall's next batch of
/// workers is asked for now, where the monitor's next tick would find it.
/// Blocks spawned in a burst that each block at once (ten consumers
/// waiting on an empty queue) got their batches one tick (`GROW_TICK`)
/// apart: 5-10 ms on runs of 20-45 ms on one CPU (docs/design-details.md,
/// "Blocks that block at once").
fn before_blocking(ruby: &Ruby) -> Result<(), Error> {
    // Called while a task may be pending (`spawn` arms the hook, and it
    // disarms itself when it finds none). Only the main Ractor spawns; the
    // pool is its state.
    if !sys::on_main_ractor(ruby) {
        return Ok(());
    }
    // One look at the pool on the way of every wait while tasks are
    // queued (a join of each spawn passes here): most find a worker coming.
    // An idle worker counts as one that can take them (spawn woke it, or
    // it is the caller, enlisted on the idle list).
    let coming = with(|p| {
        let pending = p.has_pending(ruby);
        if !pending {
            wait::arm_blocking_hook(false);
        }
        !pending || p.worker_coming()
    });
    if coming || any_busy_runnable(ruby)? {
        return Ok(());
    }
    let asked = with(|p| {
        let n = p.stall_batch()?.min(p.runnable_pending(ruby));
        p.wanted += n;
        Some(n)
    })
    .unwrap_or(0);
    if asked == 0 {
        return Ok(());
    }
    // A monitor that cannot be made (the process is ending, or out of
    // threads) is not this wait's error: stock's waits never raise
    // ThreadError. The workers asked for are taken back, and the next
    // spawn, join or blocked thread asks again. An interrupt met on the
    // way is raised.
    if try_arm_monitor(ruby)?.is_err() {
        with(|p| p.wanted = p.wanted.saturating_sub(asked));
    }
    Ok(())
}

/// Whether a worker can take pending tasks soon: one is idle (or just
/// woken), starting or asked for, or busy but runnable.
fn can_progress(ruby: &Ruby) -> Result<bool, Error> {
    if with(Pool::worker_coming) {
        return Ok(true);
    }
    any_busy_runnable(ruby)
}

/// Whether some busy worker other than the current thread can run (is
/// not sleeping or blocked); it will take pending tasks when done.
fn any_busy_runnable(ruby: &Ruby) -> Result<bool, Error> {
    let me = Held::new(sys::current_thread(ruby));
    let mut i = 0;
    while let Some(t) = with(|p| p.busy.get(i).copied()) {
        i += 1;
        if t != me && !sys::funcall(t.get(ruby), sys::name!(c"stop?"), &[])?.to_bool() {
            return Ok(true);
        }
    }
    Ok(false)
}

fn start_worker(ruby: &Ruby) -> Result<(), Error> {
    with(|p| {
        p.starting += 1;
        p.live += 1;
        p.created += 1;
        p.peak = p.peak.max(p.live);
    });
    // Workers inherit the monitor's (unmasked) interrupt state. The new
    // thread cannot reach the pool before this one gives up the GVL.
    match sys::create_thread(ruby, worker_body, false) {
        Ok(t) => {
            with(|p| p.starting_threads.push(Held::new(t)));
            Ok(())
        }
        Err(e) => {
            with(|p| {
                p.starting -= 1;
                p.live -= 1;
                p.created -= 1;
            });
            Err(e)
        }
    }
}

/// A worker reached the pool, or ended on its way there.
fn arrived(p: &mut Pool, me: Held) {
    p.starting = p.starting.saturating_sub(1);
    if let Some(i) = p.starting_threads.iter().position(|&t| t == me) {
        p.starting_threads.swap_remove(i);
    }
}

/// Stops counting as starting the workers whose thread ended before their
/// body ran (see `Pool::starting_threads`): they never reach the pool.
fn forget_lost_starters(ruby: &Ruby) -> Result<(), Error> {
    let mut i = 0;
    while let Some(t) = with(|p| p.starting_threads.get(i).copied()) {
        if sys::funcall(t.get(ruby), sys::name!(c"alive?"), &[])?.to_bool() {
            i += 1;
            continue;
        }
        with(|p| {
            // Still listed: its body never ran (that would have removed it).
            if p.starting_threads.contains(&t) {
                arrived(p, t);
                p.live = p.live.saturating_sub(1);
            }
        });
    }
    Ok(())
}

/// Makes sure the monitor runs: starts it (unmasked) if there is none,
/// wakes it if it sleeps. Fails if it cannot be created (ThreadError), or
/// with an interrupt that lands in a call made on the way.
fn arm_monitor(ruby: &Ruby) -> Result<(), Error> {
    try_arm_monitor(ruby)?
}

/// arm_monitor, with the monitor's creation refused (the inner error, a
/// ThreadError) kept apart from interrupts (the outer one).
fn try_arm_monitor(ruby: &Ruby) -> Result<Result<(), Error>, Error> {
    let (monitor, sleeping) = loop {
        let (monitor, sleeping, started) =
            with(|p| (p.monitor, p.monitor_sleeping, p.monitor_started));
        // A monitor killed before its body ran (in a `:thread_begin` hook)
        // never clears `monitor` on its way out (`MonitorExit`): replace it.
        if monitor.is_nil()
            || started
            || sys::funcall(monitor.get(ruby), sys::name!(c"alive?"), &[])?.to_bool()
        {
            break (monitor, sleeping);
        }
        let still = with(|p| {
            let same = p.monitor == monitor;
            if same {
                p.monitor = Held::NIL;
            }
            same
        });
        if still {
            break (Held::NIL, false);
        }
        // Another thread replaced it meanwhile (`alive?` can run Ruby
        // code): look again.
    };
    if monitor.is_nil() {
        if !can_send_home(ruby, sys::current_thread(ruby))? {
            // The monitor would be born in this thread's group and could
            // not leave it (see `monitor_body`): leave it to a spawn, join
            // or poll from a thread that can make one. (Spawns from here
            // run on threads of their own and need none.)
            return Ok(Ok(()));
        }
        let t = match sys::create_thread(ruby, monitor_body, true) {
            Ok(t) => t,
            Err(refused) => return Ok(Err(refused)),
        };
        with(|p| {
            p.monitor = Held::new(t);
            p.monitor_started = false;
        });
        // Named, as Thread.list shows it (it runs no user code).
        sys::funcall(
            t,
            sys::name!(c"name="),
            &[ruby.str_new(MONITOR_NAME).as_value()],
        )?;
    } else if sleeping {
        sys::wakeup_thread(monitor.get(ruby));
    }
    Ok(Ok(()))
}

/// Whether a thread that `me` creates (in `me`'s ThreadGroup) can move to
/// the home group: `me` is there, or both groups let threads move.
fn can_send_home(ruby: &Ruby, me: Value) -> Result<bool, Error> {
    let group = sys::funcall(me, sys::name!(c"group"), &[])?;
    let home = with(|p| p.home);
    Ok(Held::new(group) == home || (movable(group)? && movable(home.get(ruby))?))
}

// ---------------------------------------------------------------------------
// Configuration and statistics
// ---------------------------------------------------------------------------

fn idle_timeout() -> f64 {
    with(|p| p.idle_timeout.as_secs_f64())
}

fn set_idle_timeout(secs: f64) -> Result<f64, Error> {
    if secs.is_nan() || secs < 0.0 {
        return Err(errors::arg_error(
            "idle_timeout must be a non-negative number",
        ));
    }
    let d = Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX);
    with(|p| p.idle_timeout = d);
    // Idle workers re-check their deadline against the new timeout.
    wait::wake_all(POOL.cell(), idle)?;
    Ok(secs)
}

fn max_idle() -> usize {
    with(|p| p.max_idle)
}

fn set_max_idle(n: i64) -> Result<i64, Error> {
    if n < 0 {
        return Err(errors::arg_error("max_idle must not be negative"));
    }
    with(|p| p.max_idle = n as usize);
    // Idle workers over the new limit exit.
    wait::wake_all(POOL.cell(), idle)?;
    Ok(n)
}

/// Whether the monitor sleeps untimed (nothing pending): no tick of its
/// will start a worker until it is woken.
fn monitor_dormant() -> bool {
    with(|p| p.monitor_dormant)
}

fn cache_stats(ruby: &Ruby) -> Result<RHash, Error> {
    let (spawned, reused, created, stalls, idle, live, busy, peak, pending) = with(|p| {
        (
            p.spawned,
            p.reused,
            p.created,
            p.stalls,
            p.idle.waiting(),
            p.live,
            p.busy.len(),
            p.peak,
            // Blocks waiting for a thread: queued for a worker, or for a
            // thread of their own whose body has not run.
            p.pending.len() + p.own_threads.len(),
        )
    });
    let h = ruby.hash_new();
    h.aset(ruby.to_symbol("spawned"), spawned)?;
    h.aset(ruby.to_symbol("reused"), reused)?;
    h.aset(ruby.to_symbol("created"), created)?;
    h.aset(ruby.to_symbol("stalls"), stalls)?;
    h.aset(ruby.to_symbol("idle"), idle)?;
    h.aset(ruby.to_symbol("busy"), busy)?;
    h.aset(ruby.to_symbol("peak"), peak)?;
    h.aset(ruby.to_symbol("threads"), live)?;
    h.aset(ruby.to_symbol("pending"), pending)?;
    Ok(h)
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let roots_class = module.define_class("ThreadCacheRoots", ruby.class_object())?;
    roots_class.undef_default_alloc_func();
    let roots = ruby.obj_wrap(Roots);
    module.funcall::<_, _, Value>("private_constant", (ruby.to_symbol("ThreadCacheRoots"),))?;
    sys::register_mark_object(roots.as_value());
    let home: Value = ruby
        .class_object()
        .const_get::<_, RClass>("ThreadGroup")?
        .const_get("Default")?;
    with(|p| p.home = Held::new(home));
    crate::task::on_pending(crate::task::PendingHooks {
        join: join_pending,
        poll: poll_pending,
    });
    wait::on_blocking(before_blocking);
    module.define_singleton_method("spawn", function!(spawn, -1))?;
    let thread: RClass = ruby.class_thread();
    thread.define_singleton_method("spawn", function!(spawn, -1))?;
    module.define_singleton_method("idle_timeout", function!(idle_timeout, 0))?;
    module.define_singleton_method("idle_timeout=", function!(set_idle_timeout, 1))?;
    module.define_singleton_method("max_idle", function!(max_idle, 0))?;
    module.define_singleton_method("max_idle=", function!(set_max_idle, 1))?;
    module.define_singleton_method("cache_stats", function!(cache_stats, 0))?;
    // For a test that needs the monitor out of the way (not ticking).
    module.define_singleton_method("__monitor_dormant_for_tests", function!(monitor_dormant, 0))?;
    Ok(())
}
