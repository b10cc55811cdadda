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

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use magnus::error::ErrorType;
use magnus::gc::{Compactor, Marker};
use magnus::{
    function, prelude::*, DataTypeFunctions, Error, Exception, RClass, RHash, RModule, Ruby,
    TypedData, Value,
};
use rb_sys::VALUE;

use crate::errors;
use crate::sys::{self, GvlCell, WaitList, QNIL};
use crate::task::{Phase, Task};
use crate::wait::{self, End};

/// The monitor thread's name.
const MONITOR_NAME: &str = "rapid_thread monitor";

/// A worker's native thread name (its Ruby name stays nil, as a Thread.new
/// thread's): without one, every worker showed the monitor's, its creator.
const WORKER_NATIVE_NAME: &str = "rapid_thread worker";

/// The shortest `own_threads` that is swept for lost threads.
const OWN_SWEEP_MIN: usize = 64;

/// How often the monitor re-checks pending tasks for a stall.
const GROW_TICK: Duration = Duration::from_millis(1);

pub struct Pool {
    /// Tasks waiting for a worker (some may have been killed meanwhile).
    pending: VecDeque<VALUE>,
    /// Workers waiting for a task.
    idle: WaitList,
    /// The Threads of workers running a block.
    busy: Vec<VALUE>,
    /// Workers created that have not reached the pool yet.
    starting: usize,
    /// Their threads, until each reaches the pool or ends. A thread can
    /// end before its body runs (killed in a `:thread_begin` hook, where
    /// a pending Thread#kill also lands): the monitor finds it dead here
    /// and stops counting it, or it would wait for it forever.
    starting_threads: Vec<VALUE>,
    /// Worker threads alive.
    live: usize,
    /// Threads of their own (not workers) for blocks spawned from a
    /// ThreadGroup other than the workers' (see `spawner_placement`), each
    /// with its task, until its body takes it (`spawn_on_own_thread`).
    own_threads: Vec<(VALUE, VALUE)>,
    /// `own_threads` is swept for threads lost before their body ran when
    /// it reaches this length (see `spawn_on_own_thread`).
    own_sweep_at: usize,
    /// Where workers rest: `ThreadGroup::Default` (set at load time).
    home: VALUE,
    monitor: VALUE,
    /// The monitor's body has run (see `arm_monitor`).
    monitor_started: bool,
    /// The monitor is in a sleep (timed or not) that a wake-up ends.
    monitor_sleeping: bool,
    /// ... in an untimed sleep: nothing was pending (for a test).
    monitor_dormant: bool,
    /// Workers that spawn / join asked the monitor to start.
    wanted: usize,
    spawned: u64,
    reused: u64,
    /// Tasks taken by workers (progress, for the monitor).
    started: u64,
    created: u64,
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
            home: QNIL,
            monitor: QNIL,
            monitor_started: false,
            monitor_sleeping: false,
            monitor_dormant: false,
            wanted: 0,
            spawned: 0,
            reused: 0,
            started: 0,
            created: 0,
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

    /// Whether the monitor is there and its body has started (it clears
    /// `monitor` on every way out; one killed before it started does not).
    fn monitor_running(&mut self) -> bool {
        self.monitor != QNIL && self.monitor_started
    }

    /// Drops killed tasks from the head; whether a runnable one is left.
    fn has_pending(&mut self) -> bool {
        while let Some(&t) = self.pending.front() {
            if Task::of(t).runnable() {
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
    fn must_wake_idle(&mut self) -> bool {
        // `len`, not `runnable_pending`: O(1) per spawn; a killed task
        // counted costs at most one wake-up.
        !self.idle.is_empty() && self.has_pending() && self.pending.len() > self.idle.handed_out()
    }

    /// Pending tasks that still want to run (killed ones stay queued
    /// until a worker or `has_pending` drops them).
    fn runnable_pending(&mut self) -> usize {
        self.pending
            .iter()
            .filter(|&&t| Task::of(t).runnable())
            .count()
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut VALUE> {
        self.pending
            .iter_mut()
            .chain(self.busy.iter_mut())
            .chain(self.starting_threads.iter_mut())
            .chain(self.own_threads.iter_mut().flat_map(|(t, k)| [t, k]))
            .chain(std::iter::once(&mut self.monitor))
            .chain(std::iter::once(&mut self.home))
    }
}

static POOL: GvlCell<Pool> = GvlCell::new(Pool::new());

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
    fn mark(&self, _: &Marker) {
        POOL.with(|p| p.values_mut().for_each(|v| sys::mark_movable(*v)));
    }

    fn compact(&self, _: &Compactor) {
        POOL.with(|p| p.values_mut().for_each(|v| *v = sys::gc_location(*v)));
    }
}

// ---------------------------------------------------------------------------
// Spawning
// ---------------------------------------------------------------------------

fn spawn(ruby: &Ruby, args: &[Value]) -> Result<Value, Error> {
    let Some(block) = sys::block_proc() else {
        return Err(errors::thread_error("must be called with a block"));
    };
    let kw_splat = sys::keyword_given();
    let me = sys::current_thread();
    let [report, priority, group] = sys::funcalls([
        (
            sys::raw(ruby.class_thread().as_value()),
            sys::name!(c"report_on_exception"),
            &[],
        ),
        (me, sys::name!(c"priority"), &[]),
        (me, sys::name!(c"group"), &[]),
    ])?;
    let report = sys::value(report).to_bool();
    let place = spawner_placement(priority, group)?;
    // No Array for a block spawned without arguments (most are): one
    // object fewer per spawn.
    let args = if args.is_empty() {
        QNIL
    } else {
        sys::raw(ruby.ary_new_from_values(args).as_value())
    };
    let priority = match place {
        Where::Pool { priority } => priority,
        Where::OwnThread => 0,
    };
    let task = ruby.obj_wrap(Task::new(block, args, kw_splat, report, priority));
    // Until the Task object exists (its allocation may run the GC), the
    // Proc and the Array were reachable only from the Rust value being
    // boxed: keep them on this stack frame up to here.
    sys::gc_guard(block);
    sys::gc_guard(args);
    let obj = sys::raw(task.as_value());
    if let Where::OwnThread = place {
        spawn_on_own_thread(obj)?;
        return Ok(task.as_value());
    }
    with(|p| {
        p.spawned += 1;
        p.pending.push_back(obj);
    });
    if let Err(e) = dispatch() {
        // Nothing can run it (no thread could be created, ThreadError): as
        // Thread.new, raise and leave nothing behind. Any other error (an
        // interrupt aimed at this thread) leaves the task queued: it runs,
        // as a Thread.new thread already created would.
        if e.is_kind_of(ruby.exception_thread_error()) {
            with(|p| p.pending.retain(|&t| t != obj));
        }
        return Err(e);
    }
    Ok(task.as_value())
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
fn spawner_placement(priority: VALUE, group: VALUE) -> Result<Where, Error> {
    let home = with(|p| p.home);
    if group != home || sys::value(group).is_frozen() {
        return Ok(Where::OwnThread);
    }
    let priority = if priority == sys::fixnum(0) {
        0
    } else {
        // -3..3 (Thread#priority= clamps).
        sys::num2long(priority)? as i32
    };
    Ok(Where::Pool { priority })
}

/// Whether ThreadGroup#add lets threads into and out of `group`: it is
/// neither frozen nor enclosed.
fn movable(group: VALUE) -> Result<bool, Error> {
    if sys::value(group).is_frozen() {
        return Ok(false);
    }
    let enclosed = sys::funcall(group, sys::name!(c"enclosed?"), &[])?;
    Ok(!sys::value(enclosed).to_bool())
}

/// Brings a thread of the pool back to rest: priority 0, in the home
/// ThreadGroup. Fails (ThreadError) when its group or home is enclosed or
/// frozen: the caller then retires the thread rather than keep it
/// elsewhere.
fn rest(me: VALUE) -> Result<(), Error> {
    let [priority, group] = sys::funcalls([
        (me, sys::name!(c"priority"), &[]),
        (me, sys::name!(c"group"), &[]),
    ])?;
    rest_from(me, priority, group)
}

/// `rest`, given the thread's priority and group as just read.
fn rest_from(me: VALUE, priority: VALUE, group: VALUE) -> Result<(), Error> {
    if priority != sys::fixnum(0) {
        sys::funcall(me, sys::name!(c"priority="), &[sys::fixnum(0)])?;
    }
    let home = with(|p| p.home);
    if group != home {
        sys::funcall(home, sys::name!(c"add"), &[me])?;
    }
    Ok(())
}

/// Runs the task `obj` on a new thread made here, by the spawner: Ruby
/// gives it the spawner's ThreadGroup (enclosed or not), priority and
/// `handle_interrupt` masks, as to a Thread.new thread, and raises
/// Thread.new's ThreadError when it cannot (a frozen group, no threads
/// left). The thread runs this one block as a worker would, then ends.
fn spawn_on_own_thread(obj: VALUE) -> Result<(), Error> {
    // A thread lost before its body ran leaves its entry until its task
    // is joined or polled; one that nobody joins would stay for good.
    // Swept when the list doubles: amortized, a few checks per spawn.
    if with(|p| p.own_threads.len() >= p.own_sweep_at) {
        let mut i = 0;
        while let Some((_, task)) = with(|p| p.own_threads.get(i).copied()) {
            // Removes the entry of a lost thread (and ends its task).
            waits_for_own_thread(task)?;
            if with(|p| p.own_threads.get(i).is_some_and(|e| e.1 == task)) {
                i += 1;
            }
        }
        with(|p| p.own_sweep_at = OWN_SWEEP_MIN.max(2 * p.own_threads.len()));
    }
    let t = sys::create_thread(own_thread_body, false)?;
    // The thread cannot look for its task before this one gives up the GVL.
    with(|p| {
        p.spawned += 1;
        p.own_threads.push((t, obj));
    });
    Ok(())
}

fn own_thread_body() -> Option<i32> {
    let me = sys::current_thread();
    sys::name_native_thread(WORKER_NATIVE_NAME);
    let task = with(|p| {
        let i = p.own_threads.iter().position(|&(t, _)| t == me)?;
        Some(p.own_threads.swap_remove(i).1)
    });
    match task {
        // Not when it was killed before it started.
        Some(task) if Task::of(task).runnable() => match run(task, me, None) {
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
fn waits_for_own_thread(task: VALUE) -> Result<bool, Error> {
    let Some(t) = with(|p| p.own_threads.iter().find(|e| e.1 == task).map(|e| e.0)) else {
        return Ok(false);
    };
    if !sys::value(sys::funcall(t, sys::name!(c"alive?"), &[])?).to_bool() {
        // Still listed: its body never ran (that would have removed it).
        with(|p| p.own_threads.retain(|e| e.1 != task));
        if Task::of(task).runnable() {
            Task::of(task).kill_pending()?;
        }
    }
    Ok(true)
}

/// `PendingHooks::join`: a join of a task that has not started.
fn join_pending(task: VALUE) -> Result<(), Error> {
    if waits_for_own_thread(task)? {
        return Ok(());
    }
    ensure_progress()
}

/// `PendingHooks::poll`: a poll of a task that has not started.
fn poll_pending(task: VALUE) -> Result<(), Error> {
    if waits_for_own_thread(task)? {
        return Ok(());
    }
    ensure_progress_if_orphaned()
}

/// Gets the pending tasks going: wakes the newest idle worker unless the
/// idle workers already woken cover them (`must_wake_idle`); otherwise arms
/// the monitor (a safety net when woken workers cover the tasks) and has it
/// start a worker now when no worker can take them.
fn dispatch() -> Result<(), Error> {
    if with(Pool::must_wake_idle) {
        return wait::wake_newest(&POOL, idle);
    }
    // Armed first: `ensure_progress` calls `stop?` on busy workers, where
    // an interrupt (Thread#raise, Ctrl-C) can end the spawn with the task
    // left queued; the monitor's ticks then do what it would have done.
    // The monitor cannot run before this thread gives up the GVL.
    arm_monitor()?;
    ensure_progress()
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
fn ensure_progress() -> Result<(), Error> {
    if !with(Pool::has_pending) {
        return Ok(());
    }
    // A join finds an idle worker nobody woke (the monitor that would
    // have, on its tick, was killed): wake it.
    if with(Pool::must_wake_idle) {
        return wait::wake_newest(&POOL, idle);
    }
    if !can_progress()? {
        with(|p| p.wanted += 1);
    }
    // Workers starting count as coming, but one can die before it gets
    // here (Pool::starting_threads): the monitor's tick finds out, so it
    // must be ticking (it may have been killed, or be asleep). Without a
    // monitor (a stray kill), nothing would start a worker for a task
    // behind a busy block that never ends: only the monitor's tick does.
    if with(|p| p.wanted > 0 || p.starting > 0 || !p.monitor_running()) {
        return arm_monitor();
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
fn ensure_progress_if_orphaned() -> Result<(), Error> {
    if with(Pool::monitor_running) || !with(Pool::has_pending) {
        return Ok(());
    }
    let main = sys::main_thread();
    if !sys::value(sys::funcall(main, sys::name!(c"alive?"), &[])?).to_bool() {
        return Ok(());
    }
    if with(Pool::must_wake_idle) {
        return wait::wake_newest(&POOL, idle);
    }
    // Refused: the next poll tries again.
    let _refused = try_arm_monitor()?;
    Ok(())
}

/// Whether a worker can take pending tasks soon: one is idle (or just
/// woken), starting or asked for, or busy but runnable.
fn can_progress() -> Result<bool, Error> {
    if with(|p| p.idle.waiting() > 0 || p.starting > 0 || p.wanted > 0) {
        return Ok(true);
    }
    any_busy_runnable()
}

/// Whether some busy worker other than the current thread can run (is
/// not sleeping or blocked); it will take pending tasks when done.
fn any_busy_runnable() -> Result<bool, Error> {
    let me = sys::current_thread();
    let mut i = 0;
    while let Some(t) = with(|p| p.busy.get(i).copied()) {
        i += 1;
        if t != me && !sys::value(sys::funcall(t, sys::name!(c"stop?"), &[])?).to_bool() {
            return Ok(true);
        }
    }
    Ok(false)
}

fn start_worker() -> Result<(), Error> {
    with(|p| {
        p.starting += 1;
        p.live += 1;
        p.created += 1;
        p.peak = p.peak.max(p.live);
    });
    // Workers inherit the monitor's (unmasked) interrupt state. The new
    // thread cannot reach the pool before this one gives up the GVL.
    match sys::create_thread(worker_body, false) {
        Ok(t) => {
            with(|p| p.starting_threads.push(t));
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
fn arrived(p: &mut Pool, me: VALUE) {
    p.starting = p.starting.saturating_sub(1);
    if let Some(i) = p.starting_threads.iter().position(|&t| t == me) {
        p.starting_threads.swap_remove(i);
    }
}

/// Stops counting as starting the workers whose thread ended before their
/// body ran (see `Pool::starting_threads`): they never reach the pool.
fn forget_lost_starters() -> Result<(), Error> {
    let mut i = 0;
    while let Some(t) = with(|p| p.starting_threads.get(i).copied()) {
        if sys::value(sys::funcall(t, sys::name!(c"alive?"), &[])?).to_bool() {
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
fn arm_monitor() -> Result<(), Error> {
    try_arm_monitor()?
}

/// arm_monitor, with the monitor's creation refused (the inner error, a
/// ThreadError) kept apart from interrupts (the outer one).
fn try_arm_monitor() -> Result<Result<(), Error>, Error> {
    let (monitor, sleeping) = loop {
        let (monitor, sleeping, started) =
            with(|p| (p.monitor, p.monitor_sleeping, p.monitor_started));
        // A monitor killed before its body ran (in a `:thread_begin` hook)
        // never clears `monitor` on its way out (`MonitorExit`): replace it.
        if monitor == QNIL
            || started
            || sys::value(sys::funcall(monitor, sys::name!(c"alive?"), &[])?).to_bool()
        {
            break (monitor, sleeping);
        }
        let still = with(|p| {
            let same = p.monitor == monitor;
            if same {
                p.monitor = QNIL;
            }
            same
        });
        if still {
            break (QNIL, false);
        }
        // Another thread replaced it meanwhile (`alive?` can run Ruby
        // code): look again.
    };
    if monitor == QNIL {
        if !can_send_home(sys::current_thread())? {
            // The monitor would be born in this thread's group and could
            // not leave it (see `monitor_body`): leave it to a spawn, join
            // or poll from a thread that can make one. (Spawns from here
            // run on threads of their own and need none.)
            return Ok(Ok(()));
        }
        let t = match sys::create_thread(monitor_body, true) {
            Ok(t) => t,
            Err(refused) => return Ok(Err(refused)),
        };
        with(|p| {
            p.monitor = t;
            p.monitor_started = false;
        });
        // Named, as Thread.list shows it (it runs no user code).
        let ruby = Ruby::get().expect("a Ruby thread");
        sys::funcall(
            t,
            sys::name!(c"name="),
            &[sys::raw(ruby.str_new(MONITOR_NAME).as_value())],
        )?;
    } else if sleeping {
        sys::wakeup_thread(monitor);
    }
    Ok(Ok(()))
}

/// Whether a thread that `me` creates (in `me`'s ThreadGroup) can move to
/// the home group: `me` is there, or both groups let threads move.
fn can_send_home(me: VALUE) -> Result<bool, Error> {
    let group = sys::funcall(me, sys::name!(c"group"), &[])?;
    let home = with(|p| p.home);
    Ok(group == home || (movable(group)? && movable(home)?))
}

// ---------------------------------------------------------------------------
// The monitor
// ---------------------------------------------------------------------------

/// Sleeps while nothing is pending (woken by `arm_monitor`); otherwise
/// checks every GROW_TICK that pending tasks can make progress, and grows
/// the cache when they cannot:
/// * every busy worker is blocked and none is idle or starting: start
///   workers at once, one more each tick the stall lasts, doubling up to
///   `MAX_BATCH` (1, 2, 4, ...: 64 blocked blocks need 7 ticks, not 64);
/// * or no task has started for `STALL` although workers are runnable
///   (blocks that compute forever, or never end while passing the GVL):
///   one more worker, so that a waiting block still starts, as it would
///   on its own Thread.
fn monitor_body() -> Option<i32> {
    let me = sys::current_thread();
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
    if let Err(e) = rest(me) {
        return jump_tag(&e);
    }
    let mut seen = with(|p| p.started);
    let mut since = Instant::now();
    let mut batch = 1usize;
    loop {
        if with(|p| p.monitor) != me {
            return None; // forked, or replaced
        }
        // Workers asked for by spawn / join.
        while with(|p| p.wanted > 0) {
            match start_worker() {
                Ok(()) => with(|p| p.wanted -= 1),
                Err(e) => match jump_tag(&e) {
                    Some(tag) => return Some(tag),
                    // Out of threads for now (ThreadError); the next tick
                    // tries again.
                    None => break,
                },
            }
        }
        let nap = if with(|p| p.has_pending() || p.wanted > 0) {
            Some(GROW_TICK)
        } else {
            None
        };
        with(|p| {
            p.monitor_sleeping = true;
            p.monitor_dormant = nap.is_none();
        });
        let slept = sys::ruby_sleep(nap);
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
            batch = 1;
            continue;
        }
        let grown = grow_if_stalled(&mut seen, &mut since, &mut batch);
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
struct MonitorExit(VALUE);

impl Drop for MonitorExit {
    fn drop(&mut self) {
        let me = self.0;
        with(|p| {
            if p.monitor == me {
                p.monitor = QNIL;
                p.monitor_sleeping = false;
                p.monitor_dormant = false;
            }
        });
    }
}

/// No task started for this long while workers were runnable: grow anyway.
const STALL: Duration = Duration::from_millis(20);
/// ... or while workers were starting (held before their body runs).
const STARTING_STALL: Duration = Duration::from_millis(500);
const MAX_BATCH: usize = 64;

fn grow_if_stalled(seen: &mut u64, since: &mut Instant, batch: &mut usize) -> Result<(), Error> {
    if with(Pool::must_wake_idle) {
        return wait::wake_newest(&POOL, idle);
    }
    let (pending, started) = with(|p| (p.has_pending(), p.started));
    if started != *seen {
        *seen = started;
        *since = Instant::now();
    }
    if with(|p| !p.starting_threads.is_empty()) {
        forget_lost_starters()?;
    }
    if !pending {
        *batch = 1;
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
    let n = if !can_progress()? {
        let n = *batch;
        *batch = (*batch * 2).min(MAX_BATCH);
        n
    } else if since.elapsed() >= STALL {
        if with(|p| !p.idle.is_empty()) {
            // The idle workers woken for the tasks are held up: another
            // idle one takes a task rather than a new thread.
            *since = Instant::now();
            return wait::wake_newest(&POOL, idle);
        }
        1
    } else {
        *batch = 1;
        return Ok(());
    };
    *since = Instant::now();
    for _ in 0..n.min(with(Pool::runnable_pending)) {
        if let Err(e) = start_worker() {
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
fn jump_tag(e: &Error) -> Option<i32> {
    match e.error_type() {
        ErrorType::Jump(tag) => Some(sys::tag_number(tag)),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Workers
// ---------------------------------------------------------------------------

/// Keeps the live count right on every way out of a worker.
struct Live {
    me: VALUE,
    /// The thread's class word when the worker started: a `:thread_begin`
    /// hook may have given it a singleton class already (see
    /// `clean_thread`).
    class_word: VALUE,
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
        let wake_monitor = with(|p| {
            p.live -= 1;
            if self.starting {
                arrived(p, self.me);
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
            let stranded = p.has_pending() && p.pending.len() > coming;
            if stranded && p.idle.is_empty() {
                p.wanted += 1;
            }
            // Workers starting may never come (Pool::starting_threads): the
            // monitor's tick finds out.
            let unsure = p.has_pending() && p.starting > 0;
            ((stranded || unsure) && p.monitor != QNIL && p.monitor_sleeping).then_some(p.monitor)
        });
        if let Some(monitor) = wake_monitor {
            sys::wakeup_thread(monitor);
        }
    }
}

fn worker_body() -> Option<i32> {
    let me = sys::current_thread();
    sys::name_native_thread(WORKER_NATIVE_NAME);
    let mut live = Live {
        me,
        class_word: sys::class_word(me),
        fork_gen: sys::fork_generation(),
        starting: true,
        ran: false,
    };
    loop {
        // An interrupt aimed at the previous block that arrived after it
        // ended must not hit the next one: run it here. A kill ends the
        // worker; an exception is dropped.
        if let Err(e) = sys::check_ints() {
            if let Some(tag) = jump_tag(&e) {
                return Some(tag);
            }
        }
        let task = match next_task(&mut live, me) {
            Ok(Some(t)) => t,
            Ok(None) => return None,
            Err(e) => match jump_tag(&e) {
                Some(tag) => return Some(tag),
                None => continue,
            },
        };
        if let After::End(tag) = run(task, me, Some(live.class_word)) {
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
fn next_task(live: &mut Live, me: VALUE) -> Result<Option<VALUE>, Error> {
    // Read when first needed: a worker sent to pending tasks (the usual
    // case under load) takes one without reading the clock.
    let mut idle_since = None;
    // Whether the worker comes to `pending` sent (just started, back from
    // a task, or woken by a wake-up) rather than by its idle timeout.
    let mut sent = true;
    loop {
        if sent {
            if let Some(t) = with(|p| take_pending(p, live, me)) {
                return Ok(Some(t));
            }
        }
        // Re-read each time: a changed idle_timeout applies to waiting
        // workers too (the setter wakes them).
        let since = *idle_since.get_or_insert_with(Instant::now);
        let deadline = since.checked_add(with(|p| p.idle_timeout));
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
                if let Some(t) = take_pending(p, live, me) {
                    return Some(Some(t));
                }
            }
            let over = expired || p.idle.waiting() >= p.max_idle;
            over.then_some(None)
        });
        match took {
            Some(Some(t)) => return Ok(Some(t)),
            Some(None) => return Ok(None),
            None => {}
        }
        sent = wait::enlisted(&POOL, idle, End::Newest, QNIL, Pool::has_pending, |w| {
            wait::block(w, deadline, false)?;
            Ok(w.signaled())
        })?;
    }
}

/// The next pending task, if any, taken by this worker (now busy).
fn take_pending(p: &mut Pool, live: &mut Live, me: VALUE) -> Option<VALUE> {
    if std::mem::replace(&mut live.starting, false) {
        arrived(p, me);
    }
    if !p.has_pending() {
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
enum After {
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
struct Aftermath {
    jump: Option<i32>,
    retire: bool,
}

impl Aftermath {
    fn take<T>(&mut self, r: Result<T, Error>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                match jump_tag(&e) {
                    Some(tag) => {
                        self.jump.get_or_insert(tag);
                        // The worker resumes it from its entry frame, with
                        // no Ruby frame above: until then, later calls
                        // rescue errors with a plain `$!`.
                        sys::clear_errinfo();
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
struct Unfinished {
    obj: VALUE,
    me: VALUE,
    armed: bool,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if self.armed {
            leave_busy(self.me);
            // Nowhere to report an error while unwinding; the task is
            // recorded as killed before any Ruby call is made.
            let _ = Task::of(self.obj).finish(self.obj, Phase::Killed, QNIL);
        }
    }
}

fn leave_busy(me: VALUE) {
    with(|p| {
        if let Some(i) = p.busy.iter().position(|&t| t == me) {
            p.busy.swap_remove(i);
        }
    });
}

/// Runs one task on this worker, as Thread.new runs its block, and says
/// whether the worker goes on. `class_word`: the worker's (see
/// `clean_thread`), or None for a thread of its own, which ends after
/// the block as it is.
fn run(obj: VALUE, me: VALUE, class_word: Option<VALUE>) -> After {
    let task = Task::of(obj);
    let start = task.start(me);
    let mut guard = Unfinished {
        obj,
        me,
        armed: true,
    };
    // The block starts with the task's name and flags (defaults, unless
    // set on the task before it started).
    let prepared = prepare_thread(me, &start);
    let outcome = prepared.and_then(|()| {
        if start.pending_raise != QNIL {
            Err(exception_error(start.pending_raise))
        } else {
            let v = sys::call_proc(start.block, start.args, start.kw_splat)?;
            // As when a thread's block returns: close a scheduler it set.
            sys::close_fiber_scheduler()?;
            Ok(v)
        }
    });
    sys::gc_guard(start.block);
    sys::gc_guard(start.args);
    if outcome.as_ref().is_err_and(errors::is_jump) {
        sys::clear_errinfo(); // see Aftermath::take
    }
    let mut aftermath = Aftermath::default();
    // If reading them fails (an interrupt consumed there), the flags the
    // block started with.
    let (report, abort) = aftermath
        .take(thread_flags(me))
        .unwrap_or((start.report_on_exception, start.abort_on_exception));
    task.set_flags(report, abort);
    let (phase, result, raised) = match outcome {
        Ok(v) => (Phase::Finished, v, None),
        Err(e) => match (jump_tag(&e), e.value()) {
            // Killed (Task#kill, Thread.exit, process exit): the worker ends.
            (Some(tag), _) => {
                aftermath.jump.get_or_insert(tag);
                (Phase::Killed, QNIL, None)
            }
            (None, Some(exc)) => {
                let exc = sys::raw(exc.as_value());
                // A scheduler the block set is closed on this path too, so
                // the next block does not inherit it.
                aftermath.take(sys::close_fiber_scheduler());
                if report && !is_system_exit(exc) {
                    aftermath.take(report_exception(me, task, exc));
                }
                (Phase::Raised, exc, Some(exc))
            }
            (None, None) => (Phase::Killed, QNIL, None),
        },
    };
    match class_word {
        Some(class_word) => {
            aftermath.take(clean_thread(me, class_word));
        }
        None => aftermath.retire = true,
    }
    leave_busy(me);
    guard.armed = false;
    aftermath.take(task.finish(obj, phase, result));
    if let Some(exc) = raised {
        // SystemExit always, other exceptions with abort_on_exception: the
        // main thread gets it, as Ruby does for its threads.
        let to_main = if is_system_exit(exc) || abort {
            Ok(true)
        } else {
            global_abort()
        };
        if aftermath.take(to_main) == Some(true) {
            aftermath.take(sys::funcall(
                sys::main_thread(),
                sys::name!(c"raise"),
                &[exc],
            ));
        }
    }
    aftermath.after()
}

fn exception_error(exc: VALUE) -> Error {
    match Exception::from_value(sys::value(exc)) {
        Some(e) => e.into(),
        None => errors::type_error("exception object expected".into()),
    }
}

fn is_system_exit(exc: VALUE) -> bool {
    let ruby = Ruby::get_with(sys::value(exc));
    sys::value(exc).is_kind_of(ruby.exception_system_exit())
}

/// `Thread.abort_on_exception` or `$DEBUG`.
fn global_abort() -> Result<bool, Error> {
    let ruby = Ruby::get().expect("a Ruby thread");
    let thread = sys::raw(ruby.class_thread().as_value());
    let abort = sys::value(sys::funcall(
        thread,
        sys::name!(c"abort_on_exception"),
        &[],
    )?)
    .to_bool();
    Ok(abort || sys::value(sys::global_variable(c"$DEBUG")).to_bool())
}

/// Sets the worker's name and exception flags for the task about to run.
fn prepare_thread(me: VALUE, start: &crate::task::Start) -> Result<(), Error> {
    let ruby = Ruby::get().expect("a Ruby thread");
    let t = |b: bool| sys::raw(ruby.into_value(b));
    if start.name != QNIL {
        sys::funcall(me, sys::name!(c"name="), &[start.name])?;
    }
    sys::funcalls([
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
    ])?;
    // The spawner's priority, as Thread.new gives it (its group is the
    // worker's: see `spawner_placement`).
    if start.priority != 0 {
        sys::funcall(me, sys::name!(c"priority="), &[sys::fixnum(start.priority)])?;
    }
    Ok(())
}

/// The worker's exception flags when the block ended.
fn thread_flags(me: VALUE) -> Result<(bool, bool), Error> {
    let [report, abort] = sys::funcalls([
        (me, sys::name!(c"report_on_exception"), &[]),
        (me, sys::name!(c"abort_on_exception"), &[]),
    ])?;
    Ok((sys::value(report).to_bool(), sys::value(abort).to_bool()))
}

/// Leaves nothing of the block on the worker: fiber-locals, thread
/// variables, its name, priority and ThreadGroup go, so the next block
/// starts fresh and an idle worker keeps no user object alive.
fn clean_thread(me: VALUE, class_word: VALUE) -> Result<(), Error> {
    if sys::value(me).is_frozen() {
        // A block froze Thread.current: the next block could not set a
        // fiber-local on it. Retire the worker (any error here does).
        return Err(errors::thread_error("a block froze its thread"));
    }
    // Read together (one protect): the resets below run no code of the
    // block's (a block that gave its thread methods retires it, last).
    let [keys, name, priority, group] = sys::funcalls([
        (me, sys::name!(c"keys"), &[]),
        (me, sys::name!(c"name"), &[]),
        (me, sys::name!(c"priority"), &[]),
        (me, sys::name!(c"group"), &[]),
    ])?;
    if let Some(keys) = magnus::RArray::from_value(sys::value(keys)) {
        for k in keys.into_iter() {
            sys::funcall(me, sys::name!(c"[]="), &[sys::raw(k), QNIL])?;
        }
    }
    sys::clear_thread_variables(me);
    if sys::has_user_ivars(me) {
        // Instance variables set on Thread.current (Rails 7 keeps its
        // per-thread execution state, CurrentAttributes included, in one):
        // a fresh thread has none, so the next block must not see them.
        sys::remove_ivars(me)?;
    }
    if name != QNIL {
        // Ruby gave the native thread the block's name, and clears it here.
        sys::funcall(me, sys::name!(c"name="), &[QNIL])?;
        sys::name_native_thread(WORKER_NATIVE_NAME);
    }
    // Priority: the spawner's, or what the block set; a ThreadGroup only
    // a block puts its worker in. A worker stuck in a group (the block
    // enclosed it, or joined an enclosed one) retires: it ends there, as
    // its thread would have.
    rest_from(me, priority, group)?;
    if sys::class_word(me) != class_word {
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
fn report_exception(me: VALUE, task: &Task, exc: VALUE) -> Result<(), Error> {
    let ruby = Ruby::get().expect("a Ruby thread");
    let header = thread_to_s(me, task)?;
    let module = ruby.class_object().const_get::<_, RModule>("RapidThread")?;
    sys::funcall(
        sys::raw(module.as_value()),
        sys::name!(c"__report_exception"),
        &[sys::raw(ruby.str_new(&header).as_value()), exc],
    )?;
    Ok(())
}

/// `rb_thread_to_s` as it reads for a Thread.new thread running the
/// task's block: the worker's address and name, the block's location.
fn thread_to_s(me: VALUE, task: &Task) -> Result<String, Error> {
    let mut s = format!("#<Thread:{:#018x}", me);
    let name = sys::funcall(me, sys::name!(c"name"), &[])?;
    if name != QNIL {
        s.push('@');
        s.push_str(&String::try_convert(sys::value(name))?);
    }
    let block = task.block();
    if block != QNIL {
        let loc = sys::funcall(block, sys::name!(c"source_location"), &[])?;
        if let Ok((file, line)) = <(String, i64)>::try_convert(sys::value(loc)) {
            s.push_str(&format!(" {}:{}", file, line));
        }
    }
    s.push_str(" run> terminated with exception (report_on_exception is true):\n");
    Ok(s)
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
    wait::wake_all(&POOL, idle)?;
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
    wait::wake_all(&POOL, idle)?;
    Ok(n)
}

/// Whether the monitor sleeps untimed (nothing pending): no tick of its
/// will start a worker until it is woken.
fn monitor_dormant() -> bool {
    with(|p| p.monitor_dormant)
}

fn cache_stats(ruby: &Ruby) -> Result<RHash, Error> {
    let (spawned, reused, created, idle, live, busy, peak, pending) = with(|p| {
        (
            p.spawned,
            p.reused,
            p.created,
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
    sys::register_mark_object(sys::raw(roots.as_value()));
    let home: Value = ruby
        .class_object()
        .const_get::<_, RClass>("ThreadGroup")?
        .const_get("Default")?;
    with(|p| p.home = sys::raw(home));
    crate::task::on_pending(crate::task::PendingHooks {
        join: join_pending,
        poll: poll_pending,
    });
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
