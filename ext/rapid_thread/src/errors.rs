//! Exceptions raised by the extension. All of them are Ruby's own classes,
//! looked up once, so `rescue` clauses written for stock Ruby still match.

use magnus::value::{Lazy, ReprValue};
use magnus::{prelude::*, Error, ExceptionClass, RClass, Ruby, Value};

/// `::ClosedQueueError` (a StopIteration), which stock's Queue raises.
static CLOSED_QUEUE_ERROR: Lazy<ExceptionClass> = Lazy::new(|ruby| {
    let class: RClass = ruby
        .class_object()
        .const_get("ClosedQueueError")
        .expect("ClosedQueueError is defined by Ruby");
    ExceptionClass::from_value(class.as_value()).expect("ClosedQueueError is an exception class")
});

/// Looks the lazily found classes up now, in the main Ractor at load time:
/// a first lookup allocates and registers a GC root, which must not happen
/// where the GC cannot run (RactorQueue builds errors from any Ractor).
pub fn init(ruby: &Ruby) {
    Lazy::force(&CLOSED_QUEUE_ERROR, ruby);
}

fn ruby() -> Ruby {
    // Every caller runs on a Ruby thread holding the GVL, so this succeeds.
    Ruby::get().expect("called from a Ruby thread")
}

pub fn closed_queue() -> Error {
    let ruby = ruby();
    Error::new(ruby.get_inner(&CLOSED_QUEUE_ERROR), "queue closed")
}

pub fn thread_error(msg: &'static str) -> Error {
    Error::new(ruby().exception_thread_error(), msg)
}

pub fn arg_error(msg: &'static str) -> Error {
    Error::new(ruby().exception_arg_error(), msg)
}

pub fn type_error(msg: String) -> Error {
    Error::new(ruby().exception_type_error(), msg)
}

fn inspect(obj: Value) -> String {
    obj.inspect()
}

/// `"%+"PRIsVALUE" not initialized"`: a method called on an `allocate`d
/// object whose `initialize` never ran.
pub fn not_initialized(obj: Value) -> Error {
    type_error(format!("{} not initialized", inspect(obj)))
}

/// Ruby 3.3+'s `Queue#freeze`: "cannot freeze #<...>".
pub fn cannot_freeze(obj: Value) -> Error {
    type_error(format!("cannot freeze {}", inspect(obj)))
}

/// `undumpable` in thread_sync.c: "can't dump Klass".
pub fn cannot_dump(obj: Value) -> Error {
    type_error(format!("can't dump {}", obj.class()))
}

/// The receiver is not one of our objects (only reachable through
/// `bind_call` tricks); the same text as `rb_check_typeddata`.
pub fn wrong_receiver(obj: Value, expected: &str) -> Error {
    type_error(format!(
        "wrong argument type {} (expected {})",
        obj.class(),
        expected
    ))
}

/// Whether `e` is a non-local exit (a kill, `throw`, ...), which must
/// always reach Ruby: a kill that is dropped leaves the thread marked as
/// being killed, and every later kill of it a no-op.
pub fn is_jump(e: &Error) -> bool {
    matches!(e.error_type(), magnus::error::ErrorType::Jump(_))
}

/// Whether `e` is a raised ThreadError (never true for a jump: a kill).
/// Where a lock or a sleep can refuse (trap context, recursive locking),
/// this is that refusal, never an interrupt's.
pub fn is_thread_error(e: &Error) -> bool {
    e.is_kind_of(ruby().exception_thread_error())
}

/// Ruby's `fatal` (e.g. "No live threads left. Deadlock?"): raised, not a
/// jump, but it must not be replaced by an ordinary exception either.
fn is_fatal(e: &Error) -> bool {
    e.is_kind_of(ruby().exception_fatal())
}

/// Of two errors that met on one path, the one to raise: a jump (a kill)
/// before `fatal` before any other exception; on a tie, the first.
pub fn more_urgent(first: Error, second: Error) -> Error {
    let rank = |e: &Error| {
        if is_jump(e) {
            2
        } else if is_fatal(e) {
            1
        } else {
            0
        }
    };
    if rank(&second) > rank(&first) {
        second
    } else {
        first
    }
}
