//! Lock designs for a multi-producer/multi-consumer queue of `u64` shared
//! between OS threads, as `RapidThread::RactorQueue` needs (see
//! ext/rapid_thread/src/ractor_queue.rs):
//!
//! * A: `std::sync::Mutex<VecDeque>` + two `std::sync::Condvar`
//!   (not_empty / not_full), sleeper counters under the lock (what the gem
//!   does today);
//! * B: the same with `parking_lot::Mutex` + `parking_lot::Condvar`;
//! * C: `crossbeam_queue::SegQueue` for the items, a `parking_lot`
//!   Mutex<()>+Condvar pair used only to sleep when the queue is empty.
//!
//! Every consumer first spins for up to `SPIN` (yield_now, re-checking),
//! as the gem's waits do, then sleeps.
//!
//! Measures: (1) throughput, 1 producer / 2 consumers, N items, wall and
//! process CPU time; (2) single-thread push+pop pair cost; (3) the cost of
//! a GC "mark" walk over M queued items, and of an "update in place" walk
//! (compaction). Each measurement runs `rounds` times, designs interleaved
//! (A B C A B C ...), and prints the median and min-max.
//!
//! Usage: ractor_queue_locks [N] [pairs] [M] [rounds]

use std::collections::VecDeque;
use std::hint::black_box;
use std::ops::DerefMut;
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crossbeam_queue::SegQueue;

/// The spin phase before sleeping, as `RapidThread.spin_us` defaults to.
const SPIN: Duration = Duration::from_micros(50);

// ---------------------------------------------------------------------------
// The common interface
// ---------------------------------------------------------------------------

trait Queue: Send + Sync + 'static {
    const NAME: &'static str;
    fn new() -> Self;
    /// Appends `v` (blocks while a bounded queue is full; all runs here
    /// are unbounded, as the gem's queue is by default).
    fn push(&self, v: u64);
    /// Takes the oldest item, blocking while the queue is empty; `None`
    /// once the queue is closed and empty.
    fn pop(&self) -> Option<u64>;
    /// Marks the queue closed and wakes every sleeper.
    fn close(&self);
    fn len(&self) -> usize;
    /// Visits every item once, nothing else running (GC mark callback).
    fn mark_walk(&self);
    /// Rewrites every item in place, nothing else running (GC compaction
    /// callback): here, `v + 1`.
    fn update_walk(&self);
    /// Empties the queue (single-threaded), returning the items in order.
    fn drain(&self) -> Vec<u64>;
}

// ---------------------------------------------------------------------------
// A and B: one lock around a VecDeque, two condition variables
// ---------------------------------------------------------------------------

#[derive(Default)]
struct State {
    items: VecDeque<u64>,
    /// Threads asleep on `not_empty` / `not_full` (not those spinning).
    poppers: usize,
    pushers: usize,
}

/// The lock and condition variable types of one design (std or
/// parking_lot), so that A and B share all their logic.
trait LockKind: 'static {
    const NAME: &'static str;
    type M: Send + Sync;
    type G<'a>: DerefMut<Target = State>;
    type C: Send + Sync;
    fn new_mutex() -> Self::M;
    fn new_cv() -> Self::C;
    fn lock(m: &Self::M) -> Self::G<'_>;
    fn wait<'a>(c: &Self::C, g: Self::G<'a>) -> Self::G<'a>;
    fn notify_one(c: &Self::C);
    fn notify_all(c: &Self::C);
}

struct StdKind;
impl LockKind for StdKind {
    const NAME: &'static str = "A std Mutex+Condvar";
    type M = std::sync::Mutex<State>;
    type G<'a> = std::sync::MutexGuard<'a, State>;
    type C = std::sync::Condvar;
    fn new_mutex() -> Self::M {
        std::sync::Mutex::default()
    }
    fn new_cv() -> Self::C {
        std::sync::Condvar::new()
    }
    #[inline]
    fn lock(m: &Self::M) -> Self::G<'_> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }
    #[inline]
    fn wait<'a>(c: &Self::C, g: Self::G<'a>) -> Self::G<'a> {
        c.wait(g).unwrap_or_else(|p| p.into_inner())
    }
    #[inline]
    fn notify_one(c: &Self::C) {
        c.notify_one();
    }
    #[inline]
    fn notify_all(c: &Self::C) {
        c.notify_all();
    }
}

struct PlKind;
impl LockKind for PlKind {
    const NAME: &'static str = "B parking_lot Mutex+Condvar";
    type M = parking_lot::Mutex<State>;
    type G<'a> = parking_lot::MutexGuard<'a, State>;
    type C = parking_lot::Condvar;
    fn new_mutex() -> Self::M {
        parking_lot::Mutex::default()
    }
    fn new_cv() -> Self::C {
        parking_lot::Condvar::new()
    }
    #[inline]
    fn lock(m: &Self::M) -> Self::G<'_> {
        m.lock()
    }
    #[inline]
    fn wait<'a>(c: &Self::C, mut g: Self::G<'a>) -> Self::G<'a> {
        c.wait(&mut g);
        g
    }
    #[inline]
    fn notify_one(c: &Self::C) {
        c.notify_one();
    }
    #[inline]
    fn notify_all(c: &Self::C) {
        c.notify_all();
    }
}

#[derive(Clone, Copy)]
enum Side {
    Pop,
    Push,
}

/// Designs A and B: the gem's `Shared`, minus Ruby.
struct LockedQueue<K: LockKind> {
    state: K::M,
    not_empty: K::C,
    not_full: K::C,
    /// Mirrors of the state for the spin phase, which reads them without
    /// the lock (written under the lock).
    len: AtomicUsize,
    closed: AtomicBool,
    /// Capacity; 0 for unbounded (every run here).
    max: usize,
}

impl<K: LockKind> LockedQueue<K> {
    fn has_room(&self, s: &State) -> bool {
        self.max == 0 || s.items.len() < self.max
    }

    fn ready(&self, side: Side, s: &State) -> bool {
        match side {
            Side::Pop => !s.items.is_empty(),
            Side::Push => self.has_room(s),
        }
    }

    fn ready_unlocked(&self, side: Side) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return true;
        }
        let len = self.len.load(Ordering::Acquire);
        match side {
            Side::Pop => len > 0,
            Side::Push => self.max == 0 || len < self.max,
        }
    }

    fn condvar(&self, side: Side) -> &K::C {
        match side {
            Side::Pop => &self.not_empty,
            Side::Push => &self.not_full,
        }
    }

    fn sleepers(side: Side, s: &mut State) -> &mut usize {
        match side {
            Side::Pop => &mut s.poppers,
            Side::Push => &mut s.pushers,
        }
    }

    /// Returns once the condition of `side` may hold (or the queue is
    /// closed): spins on the mirrors first, then sleeps once.
    fn block(&self, side: Side) {
        let start = Instant::now();
        while start.elapsed() < SPIN {
            if self.ready_unlocked(side) {
                return;
            }
            std::thread::yield_now();
        }
        let mut s = K::lock(&self.state);
        if self.ready(side, &s) || self.closed.load(Ordering::Acquire) {
            return;
        }
        *Self::sleepers(side, &mut s) += 1;
        s = K::wait(self.condvar(side), s);
        *Self::sleepers(side, &mut s) -= 1;
    }
}

impl<K: LockKind> Queue for LockedQueue<K> {
    const NAME: &'static str = K::NAME;

    fn new() -> Self {
        LockedQueue {
            state: K::new_mutex(),
            not_empty: K::new_cv(),
            not_full: K::new_cv(),
            len: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            max: 0,
        }
    }

    #[inline]
    fn push(&self, v: u64) {
        loop {
            {
                let mut s = K::lock(&self.state);
                if self.has_room(&s) {
                    s.items.push_back(v);
                    self.len.store(s.items.len(), Ordering::Release);
                    if s.poppers > 0 {
                        K::notify_one(&self.not_empty);
                    }
                    return;
                }
            }
            self.block(Side::Push);
        }
    }

    #[inline]
    fn pop(&self) -> Option<u64> {
        loop {
            {
                let mut s = K::lock(&self.state);
                if let Some(v) = s.items.pop_front() {
                    self.len.store(s.items.len(), Ordering::Release);
                    if s.pushers > 0 {
                        K::notify_one(&self.not_full);
                    }
                    return Some(v);
                }
                // Checked under the lock, with the queue seen empty.
                if self.closed.load(Ordering::Acquire) {
                    return None;
                }
            }
            self.block(Side::Pop);
        }
    }

    fn close(&self) {
        let _s = K::lock(&self.state);
        self.closed.store(true, Ordering::Release);
        K::notify_all(&self.not_empty);
        K::notify_all(&self.not_full);
    }

    fn len(&self) -> usize {
        K::lock(&self.state).items.len()
    }

    fn mark_walk(&self) {
        let s = K::lock(&self.state);
        s.items.iter().for_each(|v| {
            black_box(*v);
        });
    }

    fn update_walk(&self) {
        let mut s = K::lock(&self.state);
        s.items
            .iter_mut()
            .for_each(|v| *v = black_box(*v).wrapping_add(1));
    }

    fn drain(&self) -> Vec<u64> {
        let mut s = K::lock(&self.state);
        let out: Vec<u64> = s.items.drain(..).collect();
        self.len.store(0, Ordering::Release);
        out
    }
}

type QueueA = LockedQueue<StdKind>;
type QueueB = LockedQueue<PlKind>;

// ---------------------------------------------------------------------------
// C: lock-free SegQueue for the items, a lock only to sleep
// ---------------------------------------------------------------------------

/// Design C.
///
/// No lost wake-up. A consumer goes to sleep only through this sequence,
/// all under `lock`:
///
///   (c1) sleepers.fetch_add(1, SeqCst); (c2) fence(SeqCst);
///   (c3) q.pop() -> None and closed == false;  (c4) cv.wait (releases lock)
///
/// and a producer does
///
///   (p1) q.push(v); (p2) fence(SeqCst); (p3) sleepers.load(SeqCst);
///   (p4) if > 0: lock, notify_one, unlock.
///
/// The two SeqCst fences are ordered one way or the other in the single
/// total order S of SeqCst operations:
///
/// * p2 before c2: then c3's pop (its loads of the queue's head/tail
///   indices, sequenced after c2) sees the tail advanced by p1's push
///   (sequenced before p2) [the SeqCst fence-fence rule of the C++20
///   memory model, which Rust uses: [atomics.order]], so it
///   finds the item (SegQueue's pop waits for the slot's write to finish)
///   and the consumer does not sleep.
/// * c2 before p2: then p3 (after p2) reads the increment c1 (before c2),
///   so it sees sleepers > 0 and takes the lock. The consumer held the
///   lock from c1 to c4, and `wait` releases it atomically with going to
///   sleep, so the producer's lock is acquired only after the consumer is
///   in the condvar's wait queue: the notify_one reaches a sleeper.
///
/// A SeqCst *load* at p3 alone is not enough in the memory model: the
/// push's own stores are Release/relaxed RMWs inside crossbeam, and the
/// StoreLoad ordering "push then read sleepers" needs a SeqCst fence (on
/// x86 an `mfence`, paid by every push; measured here as part of C).
///
/// `sleepers` also counts a sleeper that was notified but has not yet
/// re-taken the lock; a notify_one then may find nobody in the wait queue.
/// That is harmless: that woken consumer re-checks the queue after it runs
/// (it returns to the top of `pop`), and each push that finds a consumer
/// really waiting wakes one. So no item stays queued while every consumer
/// sleeps.
///
/// Closing: `closed` is stored (SeqCst) and then notify_all is sent under
/// the lock, so a consumer that read closed == false under the lock is
/// already waiting when the notify comes. The producer closes after its
/// last push, so a consumer that sees `closed` and then an empty pop knows
/// that every item has been taken.
///
/// Caveat for the real gem: this pop/push walk is only valid if nothing
/// pops concurrently. In the gem, spinning waiters run without the GVL;
/// with C they must only *peek* (is_empty) while spinning and pop after
/// taking the GVL back, or the GC walk (which stops Ractors, not GVL-less
/// threads) could race with them.
struct SegQ {
    q: SegQueue<u64>,
    lock: parking_lot::Mutex<()>,
    cv: parking_lot::Condvar,
    sleepers: AtomicUsize,
    closed: AtomicBool,
}

impl SegQ {
    /// Sleeps until notified, unless an item or the close is seen after
    /// registering as a sleeper (then returns it / returns at once).
    fn sleep(&self) -> Option<u64> {
        let mut g = self.lock.lock();
        self.sleepers.fetch_add(1, Ordering::SeqCst); // c1
        fence(Ordering::SeqCst); // c2
        if let Some(v) = self.q.pop() {
            // c3
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
            return Some(v);
        }
        if !self.closed.load(Ordering::SeqCst) {
            self.cv.wait(&mut g); // c4
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        None
    }
}

impl Queue for SegQ {
    const NAME: &'static str = "C SegQueue + pl sleep lock";

    fn new() -> Self {
        SegQ {
            q: SegQueue::new(),
            lock: parking_lot::Mutex::new(()),
            cv: parking_lot::Condvar::new(),
            sleepers: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        }
    }

    #[inline]
    fn push(&self, v: u64) {
        self.q.push(v); // p1
        fence(Ordering::SeqCst); // p2
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            // p3
            let _g = self.lock.lock(); // p4
            self.cv.notify_one();
        }
    }

    #[inline]
    fn pop(&self) -> Option<u64> {
        loop {
            if let Some(v) = self.q.pop() {
                return Some(v);
            }
            if self.closed.load(Ordering::SeqCst) {
                // Every push happened before the close: one more try
                // decides.
                return self.q.pop();
            }
            let start = Instant::now();
            while start.elapsed() < SPIN {
                if let Some(v) = self.q.pop() {
                    return Some(v);
                }
                if self.closed.load(Ordering::SeqCst) {
                    return self.q.pop();
                }
                std::thread::yield_now();
            }
            if let Some(v) = self.sleep() {
                return Some(v);
            }
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _g = self.lock.lock();
        self.cv.notify_all();
    }

    fn len(&self) -> usize {
        self.q.len()
    }

    /// No iteration API: pop every item and push it back (FIFO order is
    /// kept since nothing else runs).
    fn mark_walk(&self) {
        for _ in 0..self.q.len() {
            let v = self.q.pop().expect("walk: queue changed under us");
            self.q.push(black_box(v));
        }
    }

    fn update_walk(&self) {
        for _ in 0..self.q.len() {
            let v = self.q.pop().expect("walk: queue changed under us");
            self.q.push(black_box(v).wrapping_add(1));
        }
    }

    fn drain(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.q.len());
        while let Some(v) = self.q.pop() {
            out.push(v);
        }
        out
    }
}

// ---------------------------------------------------------------------------
// Process CPU time
// ---------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Usage {
    cpu: f64,
    vcsw: i64,
    ivcsw: i64,
}

fn usage() -> Usage {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage failed");
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Usage {
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        vcsw: ru.ru_nvcsw as i64,
        ivcsw: ru.ru_nivcsw as i64,
    }
}

// ---------------------------------------------------------------------------
// Measurements
// ---------------------------------------------------------------------------

struct Throughput {
    wall: f64,
    cpu: f64,
    ctx_switches: i64,
}

/// 1 producer pushes 1..=n, 2 consumers pop until closed; checks count and
/// sum of what the consumers got. The threads wait at a barrier (asleep,
/// so that the CPU count starts clean) and the clock starts when the main
/// thread releases them; CPU time is that of the whole process, from the
/// barrier to the last join (thread exit included, a few µs).
fn throughput<Q: Queue>(n: u64) -> Throughput {
    let q = Arc::new(Q::new());
    let start = Arc::new(Barrier::new(4));
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let q = Arc::clone(&q);
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                let (mut count, mut sum) = (0u64, 0u128);
                while let Some(v) = q.pop() {
                    count += 1;
                    sum += v as u128;
                }
                (count, sum)
            })
        })
        .collect();
    let producer = {
        let q = Arc::clone(&q);
        let start = Arc::clone(&start);
        std::thread::spawn(move || {
            start.wait();
            for v in 1..=n {
                q.push(v);
            }
            q.close();
        })
    };
    // Let the threads reach the barrier and fall asleep there (not timed).
    std::thread::sleep(Duration::from_millis(5));
    let u0 = usage();
    let t0 = Instant::now();
    start.wait();
    producer.join().unwrap();
    let (mut count, mut sum) = (0u64, 0u128);
    for c in consumers {
        let (k, s) = c.join().unwrap();
        count += k;
        sum += s;
    }
    let wall = t0.elapsed().as_secs_f64();
    let u1 = usage();
    let want = n as u128 * (n as u128 + 1) / 2;
    assert!(
        count == n && sum == want,
        "{}: throughput check failed: got {count} items, sum {sum}, want {n}, {want}",
        Q::NAME
    );
    assert_eq!(q.len(), 0);
    Throughput {
        wall,
        cpu: u1.cpu - u0.cpu,
        ctx_switches: (u1.vcsw - u0.vcsw) + (u1.ivcsw - u0.ivcsw),
    }
}

/// Exactly-once check, not timed: `producers` threads push disjoint ranges
/// covering 1..=n, `consumers` threads pop; every value must come out
/// exactly once, and each producer's values in its push order.
fn self_check<Q: Queue>(n: u64, producers: u64, consumers: usize) {
    let q = Arc::new(Q::new());
    let cs: Vec<_> = (0..consumers)
        .map(|_| {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                let mut got = Vec::new();
                while let Some(v) = q.pop() {
                    got.push(v);
                }
                got
            })
        })
        .collect();
    let chunk = n.div_ceil(producers);
    let ps: Vec<_> = (0..producers)
        .map(|p| {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                let lo = p * chunk + 1;
                let hi = ((p + 1) * chunk).min(n);
                for v in lo..=hi {
                    q.push(v);
                }
            })
        })
        .collect();
    for p in ps {
        p.join().unwrap();
    }
    q.close();
    let mut all = Vec::with_capacity(n as usize);
    for c in cs {
        let got = c.join().unwrap();
        // FIFO per producer: within one consumer, a producer's values rise.
        let mut last = vec![0u64; producers as usize];
        for &v in &got {
            let p = ((v - 1) / chunk) as usize;
            assert!(v > last[p], "{}: FIFO order broken", Q::NAME);
            last[p] = v;
        }
        all.extend(got);
    }
    all.sort_unstable();
    assert_eq!(all.len() as u64, n, "{}: lost or duplicated items", Q::NAME);
    for (i, &v) in all.iter().enumerate() {
        assert_eq!(
            v,
            i as u64 + 1,
            "{}: item {} missing or duplicated",
            Q::NAME,
            i + 1
        );
    }
}

/// Lost-wake-up check, not timed: two threads bounce `k` items through two
/// queues of the design, one item in flight at a time, so each pop finds
/// the queue empty and must be woken by the other thread's push. Every 8th
/// round the initiator pauses longer than the spin phase, so that the
/// other side goes all the way to sleeping on the condition variable. A
/// lost wake-up here hangs (caught by the watchdog in `main`).
fn ping_pong_check<Q: Queue>(k: u64) {
    let there = Arc::new(Q::new());
    let back = Arc::new(Q::new());
    let echo = {
        let (there, back) = (Arc::clone(&there), Arc::clone(&back));
        std::thread::spawn(move || {
            while let Some(v) = there.pop() {
                back.push(v);
            }
            back.close();
        })
    };
    for i in 1..=k {
        if i % 8 == 0 {
            std::thread::sleep(SPIN * 3);
        }
        there.push(i);
        assert_eq!(
            back.pop(),
            Some(i),
            "{}: ping-pong got a wrong item",
            Q::NAME
        );
    }
    there.close();
    assert_eq!(back.pop(), None);
    echo.join().unwrap();
}

/// ns per push+pop pair, one thread, no contention.
fn pair_cost<Q: Queue>(pairs: u64) -> f64 {
    let q = Q::new();
    let mut sum = 0u64;
    let t0 = Instant::now();
    for i in 0..pairs {
        q.push(black_box(i));
        sum = sum.wrapping_add(q.pop().unwrap());
    }
    let ns = t0.elapsed().as_nanos() as f64 / pairs as f64;
    assert_eq!(sum, pairs.wrapping_mul(pairs.wrapping_sub(1)) / 2);
    black_box(sum);
    ns
}

/// ns per item of a mark walk and of an update walk over m items.
fn walk_cost<Q: Queue>(m: u64) -> (f64, f64) {
    let q = Q::new();
    for v in 0..m {
        q.push(v);
    }
    let t0 = Instant::now();
    q.mark_walk();
    let mark = t0.elapsed().as_nanos() as f64 / m as f64;
    let t0 = Instant::now();
    q.update_walk();
    let update = t0.elapsed().as_nanos() as f64 / m as f64;
    // Same items, same order, each incremented once.
    let out = q.drain();
    assert_eq!(out.len() as u64, m, "{}: walk lost items", Q::NAME);
    assert!(
        out.iter().enumerate().all(|(i, &v)| v == i as u64 + 1),
        "{}: walk changed order or values",
        Q::NAME
    );
    (mark, update)
}

// ---------------------------------------------------------------------------
// Reporting
// ---------------------------------------------------------------------------

fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (med, s[0], s[n - 1])
}

fn fmt(v: &[f64], prec: usize) -> String {
    let (med, lo, hi) = stats(v);
    if v.len() == 1 {
        format!("{med:.prec$}")
    } else {
        format!("{med:.prec$} ({lo:.prec$}–{hi:.prec$})")
    }
}

fn fmt_rate(v: &[f64]) -> String {
    let m: Vec<f64> = v.iter().map(|x| x / 1e6).collect();
    let (med, lo, hi) = stats(&m);
    if v.len() == 1 {
        format!("{med:.2} M/s")
    } else {
        format!("{med:.2} M/s ({lo:.2}–{hi:.2})")
    }
}

fn machine_facts() {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let online = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let usable = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    println!("- CPU: {model}");
    println!("- CPUs: {online} online, {usable} usable by this process (affinity)");
    if let Ok(out) = std::process::Command::new("rustc")
        .arg("--version")
        .output()
    {
        if out.status.success() {
            println!("- rustc: {}", String::from_utf8_lossy(&out.stdout).trim());
        }
    }
    if let Ok(k) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        println!("- kernel: {}", k.trim());
    }
}

fn arg(args: &[String], i: usize, default: u64) -> u64 {
    match args.get(i) {
        None => default,
        Some(s) => s
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("argument {i} ({s:?}) is not a number")),
    }
}

/// Runs `f` for A, B and C in turn, `rounds` times (A B C A B C ...),
/// collecting each design's results.
fn interleaved<T>(rounds: u64, mut f: impl FnMut(usize) -> T) -> [Vec<T>; 3] {
    let mut out: [Vec<T>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for (d, o) in out.iter_mut().enumerate() {
            o.push(f(d));
        }
    }
    out
}

const NAMES: [&str; 3] = [QueueA::NAME, QueueB::NAME, SegQ::NAME];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n = arg(&args, 1, 2_000_000);
    let pairs = arg(&args, 2, 10_000_000);
    let m = arg(&args, 3, 1_000_000);
    let rounds = arg(&args, 4, 5);
    assert!(
        n > 0 && pairs > 0 && m > 0 && rounds > 0,
        "arguments must be > 0"
    );

    println!("# RactorQueue lock designs\n");
    machine_facts();
    println!(
        "- N = {n} items (1 producer, 2 consumers), pairs = {pairs}, M = {m}, \
         rounds = {rounds} (interleaved A B C), spin = {} µs (yield_now), unbounded queues",
        SPIN.as_micros()
    );

    // Exactly-once and lost-wake-up self-checks of every design (not
    // timed), under a watchdog: a hang ends the process with an error.
    let checked = Arc::new(AtomicBool::new(false));
    {
        let checked = Arc::clone(&checked);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(120));
            if !checked.load(Ordering::Acquire) {
                eprintln!("self-check did not finish in 120 s: a design hangs");
                std::process::exit(2);
            }
        });
    }
    let check_n = n.min(200_000);
    let check_k = (n / 10).clamp(100, 4_000);
    ping_pong_check::<QueueA>(check_k);
    ping_pong_check::<QueueB>(check_k);
    ping_pong_check::<SegQ>(check_k);
    self_check::<QueueA>(check_n, 1, 2);
    self_check::<QueueB>(check_n, 1, 2);
    self_check::<SegQ>(check_n, 1, 2);
    self_check::<QueueA>(check_n, 2, 2);
    self_check::<QueueB>(check_n, 2, 2);
    self_check::<SegQ>(check_n, 2, 2);
    checked.store(true, Ordering::Release);
    println!(
        "- self-check passed, each design: {check_n} items exactly once with \
         per-producer FIFO (1P/2C and 2P/2C); {check_k} ping-pong hand-offs \
         through the sleep path, no lost wake-up\n"
    );

    // 1. Throughput.
    let t = interleaved(rounds, |d| match d {
        0 => throughput::<QueueA>(n),
        1 => throughput::<QueueB>(n),
        _ => throughput::<SegQ>(n),
    });
    println!("## 1. Throughput, 1 producer → 2 consumers, {n} items\n");
    println!("median (min–max) of {rounds} round(s)\n");
    println!("| design | items/s (wall) | wall ms | process CPU ms | CPU/wall | ctx switches |");
    println!("|---|---|---|---|---|---|");
    for (d, rs) in t.iter().enumerate() {
        let rate: Vec<f64> = rs.iter().map(|r| n as f64 / r.wall).collect();
        let wall: Vec<f64> = rs.iter().map(|r| r.wall * 1e3).collect();
        let cpu: Vec<f64> = rs.iter().map(|r| r.cpu * 1e3).collect();
        let ratio: Vec<f64> = rs.iter().map(|r| r.cpu / r.wall).collect();
        let cs: Vec<f64> = rs.iter().map(|r| r.ctx_switches as f64).collect();
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            NAMES[d],
            fmt_rate(&rate),
            fmt(&wall, 1),
            fmt(&cpu, 1),
            fmt(&ratio, 2),
            fmt(&cs, 0)
        );
    }

    // 2. Uncontended push+pop pairs.
    let p = interleaved(rounds, |d| match d {
        0 => pair_cost::<QueueA>(pairs),
        1 => pair_cost::<QueueB>(pairs),
        _ => pair_cost::<SegQ>(pairs),
    });
    println!("\n## 2. Single thread push+pop pair, {pairs} pairs, no contention\n");
    println!("| design | ns per pair |");
    println!("|---|---|");
    for (d, rs) in p.iter().enumerate() {
        println!("| {} | {} |", NAMES[d], fmt(rs, 1));
    }

    // 3. GC walks.
    let w = interleaved(rounds, |d| match d {
        0 => walk_cost::<QueueA>(m),
        1 => walk_cost::<QueueB>(m),
        _ => walk_cost::<SegQ>(m),
    });
    println!("\n## 3. GC walks over {m} queued items, nothing else running\n");
    println!(
        "A/B iterate the VecDeque under the lock; C pops every item and pushes it back \
         (SegQueue has no iteration API).\n"
    );
    println!("| design | mark walk ns/item | update-in-place walk ns/item |");
    println!("|---|---|---|");
    for (d, rs) in w.iter().enumerate() {
        let mark: Vec<f64> = rs.iter().map(|r| r.0).collect();
        let upd: Vec<f64> = rs.iter().map(|r| r.1).collect();
        println!("| {} | {} | {} |", NAMES[d], fmt(&mark, 2), fmt(&upd, 2));
    }
}
