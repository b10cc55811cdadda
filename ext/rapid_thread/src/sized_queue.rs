//! `RapidThread::SizedQueue`: a drop-in for Ruby 3.1's `Thread::SizedQueue`
//! (a subclass of our Queue, as stock's is of Thread::Queue), plus Ruby
//! 3.2's `push(timeout:)`. It shares `queue::Queue`'s struct; `max` bounds
//! it. Inherited methods (pop, clear, close, length, num_waiting, ...)
//! already wake blocked pushers when room appears.

use magnus::scan_args::scan_args;
use magnus::{method, prelude::*, Error, RClass, RHash, RModule, Ruby, Value};

use crate::errors;
use crate::queue::{self, pushers, Queue};
use crate::sys;
use crate::wait;

/// NUM2LONG plus stock's "queue size must be positive".
fn positive_max(vmax: Value) -> Result<usize, Error> {
    let max = sys::num2long(vmax)?;
    if max <= 0 {
        return Err(errors::arg_error("queue size must be positive"));
    }
    Ok(max as usize)
}

fn initialize(rb_self: Value, vmax: Value) -> Result<Value, Error> {
    let q = Queue::get(&rb_self)?;
    let max = positive_max(vmax)?;
    q.state.with(|s| {
        let s = s.fresh();
        s.items.clear();
        s.max = max;
        s.initialized = true;
    });
    Ok(rb_self)
}

fn max(rb_self: Value) -> Result<usize, Error> {
    Ok(Queue::get(&rb_self)?.state.with(|s| s.max))
}

/// `max=`: raising the bound wakes as many blocked pushers as there is new
/// room. Returns its argument.
fn set_max(rb_self: Value, vmax: Value) -> Result<Value, Error> {
    let q = Queue::get(&rb_self)?;
    let max = positive_max(vmax)?;
    let room = q.state.with(|s| {
        let s = s.fresh();
        let grown = max.saturating_sub(s.max);
        s.max = max;
        grown
    });
    wait::wake_n(&q.state, pushers, room)?;
    Ok(vmax)
}

/// `push(obj, non_block = false, timeout: nil)`.
fn push(rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    let q = Queue::get(&rb_self)?;
    let args = scan_args::<(Value,), (Option<Value>,), (), (), RHash, ()>(args)?;
    let (non_block, timeout) = queue::block_and_timeout(args.optional.0, args.keywords)?;
    q.push_bounded(rb_self, args.required.0, !non_block, timeout)
}

/// `push_all(enumerable, non_block = false, timeout: nil)`: see
/// `Queue::push_values`.
fn push_all(rb_self: Value, args: &[Value]) -> Result<Value, Error> {
    let q = Queue::get(&rb_self)?;
    let args = scan_args::<(Value,), (Option<Value>,), (), (), RHash, ()>(args)?;
    let (non_block, timeout) = queue::block_and_timeout(args.optional.0, args.keywords)?;
    queue::with_values(q, args.required.0, |vals| {
        q.push_values(rb_self, vals, !non_block, timeout)
    })
}

/// Hot path of `push(obj)`: see `queue::try_append`.
struct PushFast;

impl sys::FastMethodV for PushFast {
    const SLOW: sys::RawMethodV = method!(push, -1);

    fn fast(_: &Ruby, rb_self: Value, args: &[Value]) -> Option<Value> {
        let [obj] = *args else {
            return None;
        };
        queue::try_append(&rb_self, obj).map(|()| rb_self)
    }
}

pub fn init(module: RModule, queue: RClass) -> Result<RClass, Error> {
    let class = module.define_class("SizedQueue", queue)?;
    class.define_method("initialize", method!(initialize, 1))?;
    class.define_method("max", method!(max, 0))?;
    class.define_method("max=", method!(set_max, 1))?;
    class.define_method("push", sys::entry_v::<PushFast> as sys::RawMethodV)?;
    class.define_method("push_all", method!(push_all, -1))?;
    for alias in ["enq", "<<"] {
        class.define_alias(alias, "push")?;
    }
    Ok(class)
}
