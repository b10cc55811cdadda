//! Every `unsafe` block of the extension lives in this module and its
//! files (but for RactorQueue's one call of `without_gvl`), one per
//! concern: `values` (GvlCell, VALUEs, typed data, GC,
//! fork generation, conversions), `wait_list` (Waiter, WaitList),
//! `gvl` (spinning without the GVL), `park` (sleeping on a futex
//! without the GVL), `os` (futexes, CPUs, clocks, /proc: Linux, and a
//! portable fallback), `sleep` (Ruby's sleep, interrupts,
//! jumps), `mutex` (ConditionVariable#wait's mutex calls) and `threads`
//! (thread creation and calls for the thread cache).
//!
//! The rest of the crate is safe Rust built on these files, and their
//! safe functions keep Rust's contract: nothing a caller must promise is
//! left to prose. What proves what (magnus's model):
//!
//! * a `Value` proves a Ruby thread holding its Ractor's GVL and a live
//!   object; a `&Ruby` proves the GVL where no Value is at hand (methods
//!   get one from magnus, or `Ruby::get_with(v)`); a [`Waiter`] or a
//!   [`CurrentThread`], made from one and not Send, prove it too;
//! * typed wrappers prove a type: magnus's `RArray` and `RClass`,
//!   [`NativeMutex`] (a Thread::Mutex), [`FreshArray`] (room to fill
//!   without allocating), [`Items`] (a private copy never handed back to
//!   Ruby), [`ClassWord`] (compared, never read through);
//! * a VALUE kept in Rust memory is a [`Held`], which gives its Value back
//!   only for a `&Ruby`; keeping it alive (marking) is its owner's part,
//!   as with magnus's `Opaque`: GC safety, which the suite checks under
//!   GC.stress, not a type. A raw `VALUE` leaves this module only as a
//!   word to compare or guard (`raw`, `QNIL`, `gc_guard`);
//! * [`typed_ref`] ties its reference to the borrow of a Value;
//! * a GC callback's `Marker` / `Compactor` proves where marking and
//!   moving may happen; where state is reached through `&mut` that safe
//!   code could move or share ([`GvlStatic`], a wait list's waiters), the
//!   main Ractor's GVL is checked at run time ([`main_ruby`]: making a
//!   waiter, handing one out) and leaving a list that moved aborts;
//! * hot-path method bodies are [`entry0`] and its kin, which Ruby alone
//!   calls (`unsafe extern "C"`), over the safe `FastMethod*` traits;
//! * what no type can say is an `unsafe fn` with a `# Safety` section:
//!   `without_gvl` (its body must not touch Ruby).
//!
//! Further primitives:
//!
//! * [`GvlCell`]: interior mutability for state that is only ever touched
//!   while holding the GVL;
//! * [`typed_ref`]: the hand-rolled receiver check used on hot paths
//!   (magnus' `&Self` conversion wraps `rb_check_typeddata` in `rb_protect`
//!   and costs ~15 ns per call, see docs/design-details.md);
//! * [`WaitList`] / [`Waiter`]: an intrusive, doubly linked list of waiters
//!   that live on the waiting thread's stack, as in `thread_sync.c`;
//! * thin wrappers over the CRuby thread API (sleep, wake-up, releasing the
//!   GVL, fiber scheduler hooks), each wrapped in `rb_protect` when it can
//!   raise so that no Ruby `longjmp` crosses a Rust frame that owns data.

mod gvl;
mod mutex;
mod os;
mod park;
mod ractor;
mod sleep;
mod threads;
mod values;
mod wait_list;

pub use gvl::*;
pub use mutex::*;
pub use os::*;
pub use park::*;
pub use ractor::*;
pub use sleep::*;
pub use threads::*;
pub use values::*;
pub use wait_list::*;
