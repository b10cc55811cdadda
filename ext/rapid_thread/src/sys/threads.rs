//! Ruby threads, blocks and calls (the thread cache).

use std::ffi::c_void;
use std::os::raw::{c_char, c_int};

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::marker::PhantomData;

use magnus::prelude::*;
use magnus::rb_sys::{protect, AsRawValue};
use magnus::{Error, RArray, Ruby, Value};
use rb_sys::{ruby_value_type, VALUE};

use super::*;

// ---------------------------------------------------------------------------
// Ruby threads, blocks and calls (thread cache)
// ---------------------------------------------------------------------------

/// The body of a thread started by [`create_thread`]: returns the
/// non-local exit tag (kill, exit) to resume once it has cleaned up, or
/// None to end the thread normally.
pub type ThreadBody = fn(&Ruby) -> Option<i32>;

unsafe extern "C" fn thread_entry(arg: *mut c_void) -> VALUE {
    // SAFETY: `arg` is the `ThreadBody` that create_thread cast to a
    // pointer; function pointers round-trip through `*mut c_void`.
    let body: ThreadBody = unsafe { std::mem::transmute::<*mut c_void, ThreadBody>(arg) };
    // SAFETY: Ruby runs a thread's function on that new Ruby thread, with
    // the GVL.
    let ruby = unsafe { Ruby::get_unchecked() };
    // A panic must not unwind into Ruby's C frames: end the thread instead
    // (the body's drop guards have run by then).
    let tag = std::panic::catch_unwind(|| body(&ruby)).unwrap_or(None);
    // SAFETY: this is a thread's entry frame, which owns nothing.
    unsafe { finish_thread(tag) }
}

unsafe extern "C" fn unmasked_thread_entry(arg: *mut c_void) -> VALUE {
    // SAFETY: as in thread_entry.
    let body: ThreadBody = unsafe { std::mem::transmute::<*mut c_void, ThreadBody>(arg) };
    // SAFETY: as in thread_entry.
    let ruby = unsafe { Ruby::get_unchecked() };
    let tag = run_unmasked(&ruby, body);
    // SAFETY: as in thread_entry.
    unsafe { finish_thread(tag) }
}

/// Ends a thread's entry function: resumes the kill/exit `tag` (caught by
/// `protect` deeper down) or returns nil.
///
/// # Safety
/// Called from a thread's entry frame only, which owns nothing to drop:
/// the jump skips it, and Ruby's own thread start-up code catches it and
/// ends the thread as killed.
unsafe fn finish_thread(tag: Option<i32>) -> VALUE {
    if let Some(tag) = tag {
        // SAFETY: the caller's promise (see above).
        unsafe { rb_sys::rb_jump_tag(tag) };
    }
    QNIL
}

unsafe extern "C" fn unmasked_block(
    _yielded: VALUE,
    data: VALUE,
    _argc: std::os::raw::c_int,
    _argv: *const VALUE,
    _blockarg: VALUE,
) -> VALUE {
    // SAFETY: `data` points at the (body, result) pair on run_unmasked's
    // stack, alive for the whole call.
    let slot = unsafe { &mut *(data as *mut (ThreadBody, Option<i32>)) };
    // SAFETY: Ruby calls a block on its own thread, with the GVL.
    let ruby = unsafe { Ruby::get_unchecked() };
    let body = slot.0;
    // A panic must not unwind into Ruby's C frames (see thread_entry).
    slot.1 = std::panic::catch_unwind(|| body(&ruby)).unwrap_or(None);
    QNIL
}

/// Runs `body` inside `Thread.handle_interrupt(Object => :immediate)`.
/// A Ruby thread inherits its creator's handle_interrupt masks; a thread
/// created inside `handle_interrupt(Object => :never)` would otherwise
/// never see a kill (Task#kill, or the one Ruby sends at exit), and the
/// threads it creates would inherit the mask too.
///
/// Leaving handle_interrupt runs interrupts that arrived as the body
/// ended: a kill is resumed; an exception (Thread#raise at the monitor,
/// the one user of this) is dropped, as the monitor's body drops it.
fn run_unmasked(ruby: &Ruby, body: ThreadBody) -> Option<i32> {
    let mut slot: (ThreadBody, Option<i32>) = (body, None);
    let data = &mut slot as *mut (ThreadBody, Option<i32>) as VALUE;
    // `slot` outlives the call.
    // handle_interrupt runs pending interrupts when it returns, which may
    // raise or jump: the Err below.
    let r = handle_interrupt(ruby, c"immediate", unmasked_block, data);
    match r {
        Ok(_) => slot.1,
        Err(e) => match e.error_type() {
            magnus::error::ErrorType::Jump(tag) => slot.1.or(Some(tag_number(tag))),
            _ => slot.1,
        },
    }
}

/// Starts a Ruby thread (`rb_thread_create`) running `body` natively, with
/// no Ruby frame beneath it: backtraces raised in it contain only what the
/// body calls. With `unmasked`, the body runs inside
/// `Thread.handle_interrupt(Object => :immediate)` (see [`run_unmasked`];
/// that adds a frame, so it is for threads that run no user code). Raises
/// ThreadError when the thread cannot be created, and, as Thread.new
/// does, once the main thread is killed (the process is ending: at_exit
/// blocks have run and Ruby has told every thread to end, so a thread
/// made now, by an `ensure` say, would never be told, and the exit would
/// wait for it forever; `rb_thread_create` itself does not check).
pub fn create_thread(ruby: &Ruby, body: ThreadBody, unmasked: bool) -> Result<Value, Error> {
    if process_ending(ruby)? {
        return Err(crate::errors::thread_error("can't alloc thread"));
    }
    let entry = if unmasked {
        unmasked_thread_entry
    } else {
        thread_entry
    };
    // SAFETY: both entries match the expected signature and the argument
    // is a plain function pointer with no captured state; may raise
    // ThreadError, caught by protect.
    let t = protect(|| unsafe { rb_sys::rb_thread_create(Some(entry), body as *mut c_void) })?;
    // SAFETY: a new, live Thread.
    Ok(unsafe { value(t) })
}

/// Whether the main thread is killed: the process is ending, and every
/// thread alive was told to end once, when this became true.
pub fn process_ending(ruby: &Ruby) -> Result<bool, Error> {
    let alive = funcall(main_thread(ruby), name!(c"alive?"), &[])?;
    Ok(!alive.to_bool())
}

/// The tag number of a non-local exit (`Error::Jump`).
pub fn tag_number(tag: &magnus::error::Tag) -> i32 {
    use magnus::error::Tag;
    match tag {
        Tag::Return => 1,
        Tag::Break => 2,
        Tag::Next => 3,
        Tag::Retry => 4,
        Tag::Redo => 5,
        Tag::Raise => 6,
        Tag::Throw => 7,
        Tag::Fatal => 8,
    }
}

pub fn current_thread(_: &Ruby) -> Value {
    // SAFETY: a plain query, GVL held (the handle proves it); the current
    // thread is alive.
    unsafe { value(rb_sys::rb_thread_current()) }
}

pub fn main_thread(_: &Ruby) -> Value {
    // SAFETY: as current_thread.
    unsafe { value(rb_sys::rb_thread_main()) }
}

/// The current Fiber (a thread's root Fiber object is made the first time
/// it is asked for, which may raise NoMemoryError).
pub fn current_fiber(_: &Ruby) -> Result<Value, Error> {
    // SAFETY: GVL held (the handle); may allocate and raise, caught by
    // protect.
    let f = protect(|| unsafe { rb_sys::rb_fiber_current() })?;
    // SAFETY: the current fiber, alive while it runs.
    Ok(unsafe { value(f) })
}

// Fiber storage (`Fiber[]`; carried from Ruby 3.3 on, build.rs: before,
// these do nothing): a new thread starts with a copy of its creator's
// (`Fiber.current.storage`, a Hash or nil). These set and clear the
// current fiber's one key at a time (`Fiber[key] =`): the one way to
// replace it whole, `Fiber#storage=`, warns that it is experimental. So a
// storage cleared here is an empty Hash, not nil.

/// `Fiber.current.storage`: a copy of the current fiber's storage (a
/// Hash), or nil for none, under one protect.
#[cfg(ruby_fiber_storage)]
pub fn current_fiber_storage(ruby: &Ruby) -> Result<Value, Error> {
    let id = name!(c"storage").id(ruby)?;
    // SAFETY: GVL held (the handle); the fiber (made if need be) and the
    // call may raise, caught by protect.
    let r = protect(|| unsafe {
        rb_sys::rb_funcallv(rb_sys::rb_fiber_current(), id, 0, std::ptr::null())
    })?;
    // SAFETY: the call's result, alive on this stack.
    Ok(unsafe { value(r) })
}

#[cfg(not(ruby_fiber_storage))]
pub fn current_fiber_storage(ruby: &Ruby) -> Result<Value, Error> {
    Ok(nil(ruby))
}

/// `Fiber[k] = v` in the current fiber for each pair of `storage` (a
/// Hash; nil: nothing), or `Fiber[k] = nil`, which deletes, with `clear`.
#[cfg(ruby_fiber_storage)]
fn store_each(ruby: &Ruby, storage: Value, clear: bool) -> Result<(), Error> {
    let Some(hash) = magnus::RHash::from_value(storage) else {
        return Ok(());
    };
    let fiber_class = ruby.class_object().const_get::<_, Value>("Fiber")?;
    let nil = nil(ruby);
    hash.foreach(|k: Value, v: Value| {
        funcall(
            fiber_class,
            name!(c"[]="),
            &[k, if clear { nil } else { v }],
        )?;
        Ok(magnus::r_hash::ForEach::Continue)
    })
}

/// Sets each key of `storage` (a copy, or nil) in the current fiber's.
#[cfg(ruby_fiber_storage)]
pub fn set_fiber_storage(ruby: &Ruby, storage: Value) -> Result<(), Error> {
    store_each(ruby, storage, false)
}

#[cfg(not(ruby_fiber_storage))]
pub fn set_fiber_storage(_: &Ruby, _: Value) -> Result<(), Error> {
    Ok(())
}

/// Empties the storage of `fiber`, the current fiber.
#[cfg(ruby_fiber_storage)]
pub fn clear_fiber_storage(ruby: &Ruby, fiber: Value) -> Result<(), Error> {
    store_each(ruby, funcall(fiber, name!(c"storage"), &[])?, true)
}

#[cfg(not(ruby_fiber_storage))]
pub fn clear_fiber_storage(_: &Ruby, _: Value) -> Result<(), Error> {
    Ok(())
}

/// The calling thread, for the one question it may ask without the GVL
/// ([`CurrentThread::interrupted`]). Not Send: it stays on its thread,
/// whose Thread object is alive while it runs.
#[derive(Clone, Copy)]
pub struct CurrentThread {
    thread: VALUE,
    _here: PhantomData<*mut ()>,
}

impl CurrentThread {
    pub fn get(ruby: &Ruby) -> CurrentThread {
        CurrentThread {
            thread: current_thread(ruby).as_raw(),
            _here: PhantomData,
        }
    }

    /// `rb_thread_interrupted`: whether this thread has a pending
    /// interrupt (Thread#raise, kill, a signal for the main thread). Only
    /// reads a flag of its own, so it may ask with the GVL released.
    pub fn interrupted(self) -> bool {
        // SAFETY: `thread` is the calling thread's own Thread (the type
        // stays on it); rb_thread_interrupted reads its execution
        // context's flags, and cannot raise for a Thread.
        unsafe { rb_sys::rb_thread_interrupted(self.thread) != 0 }
    }
}

/// The block passed to the current method as a Proc, if any.
pub fn block_proc(_: &Ruby) -> Option<Value> {
    // SAFETY: GVL held (the handle); rb_block_proc only allocates, and
    // without a method frame of ours Ruby's block check reads the caller's
    // frame, which is what a method body asks for.
    unsafe { (rb_sys::rb_block_given_p() != 0).then(|| value(rb_sys::rb_block_proc())) }
}

/// Whether the current method was called with keywords (`**kw`).
pub fn keyword_given(_: &Ruby) -> bool {
    // SAFETY: a plain query of the current frame, GVL held (the handle).
    unsafe { rb_sys::rb_keyword_given_p() != 0 }
}

/// `proc.call(*args)` (with `**` of the last element when `kw_splat`),
/// as Thread.new invokes its block; no `args`: no arguments.
pub fn call_proc(proc: Value, args: Option<RArray>, kw_splat: bool) -> Result<Value, Error> {
    let proc = proc.as_raw();
    let r = match args {
        // SAFETY: no arguments, no block; the call checks the receiver's
        // type and may raise or throw, caught by protect.
        None => protect(|| unsafe {
            rb_sys::rb_proc_call_with_block_kw(proc, 0, std::ptr::null(), QNIL, 0)
        }),
        Some(args) => {
            let args = args.as_raw();
            // SAFETY: `args` is an Array (its type); the call checks the
            // receiver's type and may raise or throw, caught by protect.
            protect(|| unsafe { rb_sys::rb_proc_call_kw(proc, args, kw_splat as _) })
        }
    }?;
    // SAFETY: the block's result, alive on this stack.
    Ok(unsafe { value(r) })
}

/// What Ruby does when a thread's block returns: a fiber scheduler set by
/// the block is closed (`rb_fiber_scheduler_set(Qnil)`, which runs it).
pub fn close_fiber_scheduler(_: &Ruby) -> Result<(), Error> {
    // SAFETY: reads the current thread's scheduler field; cannot raise.
    // Checked outside protect: a block rarely sets one, and a protect per
    // block is a setjmp.
    if unsafe { rb_sys::rb_fiber_scheduler_get() } == QNIL {
        return Ok(());
    }
    // SAFETY: may run the scheduler's Ruby code and raise; caught by
    // protect.
    protect(|| unsafe {
        rb_sys::rb_fiber_scheduler_set(QNIL);
        QNIL
    })?;
    Ok(())
}

/// A method (or ivar) name and its ID, interned on first use: `rb_intern`
/// hashes the name and looks it up in the symbol table, about 700
/// instructions on 3.1, and a cached worker made eight such calls per task
/// (a quarter of its work). Made by [`name!`], one static per call site.
pub struct Name {
    name: &'static CStr,
    /// The ID once interned, 0 before (no name interns to 0). Racing
    /// first uses store the same ID.
    id: AtomicUsize,
}

impl Name {
    pub const fn new(name: &'static CStr) -> Name {
        Name {
            name,
            id: AtomicUsize::new(0),
        }
    }

    /// The ID; interning the name the first time allocates (and can raise
    /// NoMemoryError: the Err). The handle proves the GVL.
    #[inline]
    pub fn id(&self, _: &Ruby) -> Result<rb_sys::ID, Error> {
        match self.id.load(Ordering::Relaxed) {
            0 => self.intern(),
            id => Ok(id as rb_sys::ID),
        }
    }

    #[cold]
    fn intern(&self) -> Result<rb_sys::ID, Error> {
        let mut id: rb_sys::ID = 0;
        let slot = &mut id as *mut rb_sys::ID;
        let name = self.name.as_ptr();
        // SAFETY: interning a NUL-terminated static name (GVL held: the
        // caller's handle) allocates and may raise, caught by protect;
        // `id` outlives the closure. The ID of a name interned this way is
        // never freed.
        protect(|| unsafe {
            *slot = rb_sys::rb_intern(name);
            QNIL
        })?;
        self.id.store(id as usize, Ordering::Relaxed);
        Ok(id)
    }
}

/// `name!(c"keys")`: a `&'static Name` interned once for this call site.
macro_rules! name {
    ($name:literal) => {{
        static NAME: $crate::sys::Name = $crate::sys::Name::new($name);
        &NAME
    }};
}
pub(crate) use name;

/// `recv.name(*args)`, protected.
pub fn funcall(recv: Value, name: &Name, args: &[Value]) -> Result<Value, Error> {
    let id = name.id(&Ruby::get_with(recv))?;
    // SAFETY: a method call that may raise; caught by protect. `args`
    // outlives the call (Value is a transparent VALUE).
    let r = protect(|| unsafe {
        rb_sys::rb_funcallv(recv.as_raw(), id, args.len() as _, args.as_ptr().cast())
    })?;
    // SAFETY: the call's result, alive on this stack.
    Ok(unsafe { value(r) })
}

/// `recv.name(*args)` for each `(recv, name, args)`, in order, under one
/// protect: a call to a small C method such as Thread#priority costs
/// about 280 instructions on 3.1, and a protect around it about 90 more.
/// Stops at the first error.
pub fn funcalls<const N: usize>(
    ruby: &Ruby,
    calls: [(Value, &Name, &[Value]); N],
) -> Result<[Value; N], Error> {
    let mut ids: [rb_sys::ID; N] = [0; N];
    for (id, (_, name, _)) in ids.iter_mut().zip(calls.iter()) {
        *id = name.id(ruby)?;
    }
    let mut out = [QNIL; N];
    let slots = out.as_mut_ptr();
    // SAFETY: method calls that may raise; caught by protect. `slots` points at `out`, on this
    // stack for the whole call (and scanned by the GC there), with room
    // for N values; the argument slices outlive the call.
    protect(|| unsafe {
        for (i, (recv, _, args)) in calls.iter().enumerate() {
            *slots.add(i) =
                rb_sys::rb_funcallv(recv.as_raw(), ids[i], args.len() as _, args.as_ptr().cast());
        }
        QNIL
    })?;
    // SAFETY: the calls' results, alive on this stack.
    Ok(out.map(|v| unsafe { value(v) }))
}

/// The value of a global variable such as `$DEBUG` (`rb_gv_get`; reading
/// a plain global runs no Ruby code).
pub fn global_variable(_: &Ruby, name: &std::ffi::CStr) -> Value {
    // SAFETY: a plain read, GVL held (the handle); `name` is
    // NUL-terminated; the global holds the value.
    unsafe { value(rb_sys::rb_gv_get(name.as_ptr())) }
}

/// Empties a thread's `thread_variable_set` storage (the hash Ruby keeps in
/// the thread's hidden `locals` ivar), if it has any.
pub fn clear_thread_variables(thread: Value) -> Result<(), Error> {
    let id = name!(c"locals").id(&Ruby::get_with(thread))?;
    // SAFETY: reading an ivar of a live object; rb_ivar_get returns nil for
    // an unset one. rb_hash_clear on an unfrozen Hash does not raise, and
    // a frozen one is left alone.
    unsafe {
        let locals = rb_sys::rb_ivar_get(thread.as_raw(), id);
        if !special_const(locals)
            && rb_sys::RB_BUILTIN_TYPE(locals) == ruby_value_type::RUBY_T_HASH
            && rb_sys::rb_obj_frozen_p(locals) == rb_sys::special_consts::Qfalse as VALUE
            && rb_sys::RHASH_SIZE(locals) > 0
        {
            rb_sys::rb_hash_clear(locals);
        }
    }
    Ok(())
}

/// Whether Ruby code set instance variables (`@name`s) on the thread;
/// the hidden `locals` (thread_variable_set's hash) does not count. No
/// allocation and no method call, so a worker pays next to nothing for it
/// when a block set none. (`rb_ivar_count` also counts `locals`, and on
/// 3.3 keeps counting a removed ivar.)
pub fn has_user_ivars(thread: Value) -> bool {
    unsafe extern "C" fn find(id: rb_sys::ID, _val: VALUE, arg: rb_sys::st_data_t) -> c_int {
        // SAFETY: `arg` is the `bool` below, alive for the whole foreach;
        // rb_id2name returns a NUL-terminated name or NULL.
        unsafe {
            let name = rb_sys::rb_id2name(id);
            if !name.is_null() && *name == b'@' as c_char {
                *(arg as *mut bool) = true;
                return rb_sys::st_retval::ST_STOP as c_int;
            }
        }
        rb_sys::st_retval::ST_CONTINUE as c_int
    }
    let mut found = false;
    // SAFETY: iterates a live object's ivars; the callback neither
    // allocates nor calls Ruby.
    unsafe {
        rb_sys::rb_ivar_foreach(
            thread.as_raw(),
            Some(find),
            &mut found as *mut bool as rb_sys::st_data_t,
        )
    };
    found
}

/// Removes the thread's instance variables (`@name`s) through the C API,
/// so that no method a block overrode on it runs.
pub fn remove_ivars(thread: Value) -> Result<(), Error> {
    let thread = thread.as_raw();
    // SAFETY: both calls take a live object; they raise FrozenError on a
    // frozen one (caught by protect). The Array stays on this stack.
    protect(|| unsafe {
        let names = rb_sys::rb_obj_instance_variables(thread);
        for i in 0..rb_sys::RARRAY_LEN(names) {
            rb_sys::rb_obj_remove_instance_variable(thread, rb_sys::rb_ary_entry(names, i));
        }
        names
    })?;
    Ok(())
}

/// An object's class word, to compare only (never read through).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ClassWord(VALUE);

/// `v`'s class word: its class, or its singleton class once it has one
/// (singleton methods, `extend`); nil's for a special constant.
pub fn class_word(v: Value) -> ClassWord {
    let obj = v.as_raw();
    if special_const(obj) {
        return ClassWord(QNIL);
    }
    // SAFETY: a live heap object (a Value, not a special constant): its
    // header can be read.
    ClassWord(unsafe { (*(obj as *const rb_sys::RBasic)).klass })
}

/// Keeps `v` (and what its mark function marks) alive for the life of the
/// process.
pub fn register_mark_object(v: Value) {
    // SAFETY: a live object (a Value), GVL held.
    unsafe { rb_sys::rb_gc_register_mark_object(v.as_raw()) }
}

/// `rb_thread_wakeup_alive`: makes a sleeping thread runnable; false if
/// the thread is dead, or `thread` is not a Thread.
pub fn wakeup_thread(thread: Value) -> bool {
    let t = thread.as_raw();
    // SAFETY: GVL held (a Value); rb_obj_is_kind_of neither raises nor
    // calls Ruby, and rb_thread_wakeup_alive, given a Thread (a T_DATA of
    // Thread's type, as every instance of Thread and its subclasses is),
    // does not raise: it returns nil for a dead one.
    unsafe {
        rb_sys::rb_obj_is_kind_of(t, rb_sys::rb_cThread) != rb_sys::special_consts::Qfalse as VALUE
            && rb_sys::rb_thread_wakeup_alive(t) != QNIL
    }
}

/// `rb_make_exception`: what Kernel#raise / Thread#raise build from their
/// arguments, with the same errors.
pub fn make_exception(_: &Ruby, args: &[Value]) -> Result<Value, Error> {
    // SAFETY: may raise (TypeError, ArgumentError); caught by protect.
    // `args` outlives the call (Value is a transparent VALUE).
    let e =
        protect(|| unsafe { rb_sys::rb_make_exception(args.len() as _, args.as_ptr().cast()) })?;
    // SAFETY: the new exception (or nil), alive on this stack.
    Ok(unsafe { value(e) })
}

/// A C block for [`handle_interrupt`]: `rb_block_call_func`.
pub(super) type BlockFn =
    unsafe extern "C" fn(VALUE, VALUE, std::os::raw::c_int, *const VALUE, VALUE) -> VALUE;

/// `Thread.handle_interrupt(Object => mask) { block(data) }`, protected:
/// leaving it runs the interrupts it deferred, which may raise or jump.
pub(super) fn handle_interrupt(
    ruby: &Ruby,
    mask: &CStr,
    block: BlockFn,
    data: VALUE,
) -> Result<VALUE, Error> {
    let id = name!(c"handle_interrupt").id(ruby)?;
    // SAFETY: builds `{Object => :mask}` and calls Thread.handle_interrupt
    // with a C block; the caller keeps whatever `data` points to alive for
    // the call. Everything may raise or jump: caught by protect.
    protect(|| unsafe {
        let h = rb_sys::rb_hash_new();
        let sym = rb_sys::rb_id2sym(rb_sys::rb_intern(mask.as_ptr()));
        rb_sys::rb_hash_aset(h, rb_sys::rb_cObject, sym);
        rb_sys::rb_block_call(rb_sys::rb_cThread, id, 1, &h, Some(block), data)
    })
}
