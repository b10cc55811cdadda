//! Every `unsafe` block of the extension lives in this module and its
//! files, one per concern: `values` (GvlCell, VALUEs, typed data, GC,
//! fork generation, conversions), `wait_list` (Waiter, WaitList),
//! `gvl` (spinning without the GVL), `park` (sleeping on a futex
//! without the GVL), `os` (futexes, CPUs, clocks, /proc: Linux, and a
//! portable fallback), `sleep` (Ruby's sleep, interrupts,
//! jumps), `mutex` (ConditionVariable#wait's mutex calls) and `threads`
//! (thread creation and calls for the thread cache).
//!
//! The rest of the crate is safe Rust built on the small, documented
//! primitives below:
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
