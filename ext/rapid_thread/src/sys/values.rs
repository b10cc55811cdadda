//! Values, typed data, the GVL-guarded cell, the GC and fork generation.

use std::cell::{Cell, UnsafeCell};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use magnus::gc::{Compactor, Marker};
use magnus::rb_sys::{protect, AsRawValue, FromRawValue};
use magnus::{Error, TypedData, Value};
use rb_sys::{ruby_value_type, VALUE};

// ---------------------------------------------------------------------------
// GvlCell
// ---------------------------------------------------------------------------

/// A cell whose contents are only accessed by the thread holding the GVL.
///
/// Ruby runs at most one thread of a ractor at a time, and every method of
/// our classes (and the GC's mark/compact callbacks) run with the GVL held,
/// so accesses are serialised by the GVL itself and need no lock. The cell
/// is not `Sync`: safe code cannot share it with a thread of its own. A
/// `with` inside another `with` of the same cell (directly, or through
/// Ruby code that `f` ran: a GC marking the object, another thread taking
/// the GVL) would alias the `&mut`: it aborts the process instead.
pub struct GvlCell<T> {
    value: UnsafeCell<T>,
    busy: Cell<bool>,
}

impl<T: Default> Default for GvlCell<T> {
    fn default() -> Self {
        GvlCell::new(T::default())
    }
}

impl<T> GvlCell<T> {
    pub const fn new(v: T) -> Self {
        GvlCell {
            value: UnsafeCell::new(v),
            busy: Cell::new(false),
        }
    }

    /// Runs `f` with exclusive access to the contents. `f` should not
    /// call back into Ruby (no allocation, no method calls): Ruby could run
    /// the GC (which reads the cell from `mark`) or switch threads in the
    /// middle, and either would abort here (see the type).
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        struct Release<'a>(&'a Cell<bool>);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        if self.busy.replace(true) {
            reentered();
        }
        // Cleared on every way out, a panic's too (as a RefCell's borrow).
        let _release = Release(&self.busy);
        // SAFETY: `busy` was clear, so no other reference to the contents
        // exists (every access goes through here). Other threads reach the
        // cell only while holding the GVL, which this one holds (every
        // caller is a method of an object only the main Ractor can use, a
        // GC callback or a cached thread's body), so they are not here now.
        f(unsafe { &mut *self.value.get() })
    }
}

/// A `with` inside a `with` of the same cell: a bug; no way to go on.
#[cold]
#[inline(never)]
fn reentered() -> ! {
    abort_with("a GvlCell was entered while in use")
}

/// Ends the process on a bug that would otherwise be undefined behaviour.
#[cold]
fn abort_with(what: &str) -> ! {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "rapid_thread: {what} (a bug); aborting");
    std::process::abort()
}

/// A `static` [`GvlCell`]: shared by every thread of the process, so each
/// `with` checks that the caller holds the GVL (`ruby_thread_has_gvl_p`,
/// false on a thread Ruby does not know and inside a blocking region) and
/// aborts otherwise. Only the main Ractor reaches these: the methods that
/// do are not Ractor-safe.
pub struct GvlStatic<T>(GvlCell<T>);

// SAFETY: every access goes through `GvlStatic::with`, which aborts unless
// the caller holds the GVL; holders of the GVL run one at a time, and the
// `GvlCell` inside refuses re-entry by the holder itself.
unsafe impl<T: Send> Sync for GvlStatic<T> {}

extern "C" {
    /// ruby/thread.h (not in rb-sys's bindings).
    fn ruby_thread_has_gvl_p() -> std::os::raw::c_int;
}

impl<T> GvlStatic<T> {
    pub const fn new(v: T) -> Self {
        GvlStatic(GvlCell::new(v))
    }

    /// As [`GvlCell::with`], after checking for the GVL (`cell`).
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        self.cell().with(f)
    }

    /// The cell for a mark callback: the `Marker` proves a GC is marking
    /// (on a GC's worker thread, under MMTk, which holds no GVL, while every
    /// Ruby thread is stopped), so no check.
    pub fn marking(&self, _: &Marker) -> &GvlCell<T> {
        &self.0
    }

    /// The cell for a compaction callback (as `marking`).
    pub fn compacting(&self, _: &Compactor) -> &GvlCell<T> {
        &self.0
    }

    /// The cell, for the helpers that take one (`wait::enlisted`,
    /// `wait::wake_*`), once the GVL has been checked.
    #[inline]
    pub fn cell(&self) -> &GvlCell<T> {
        // SAFETY: a plain query of the current native thread's state.
        if unsafe { ruby_thread_has_gvl_p() } == 0 {
            without_the_gvl();
        }
        &self.0
    }
}

#[cold]
#[inline(never)]
fn without_the_gvl() -> ! {
    abort_with("process-wide state touched without the GVL")
}

// ---------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------

#[inline(always)]
pub fn raw(v: Value) -> VALUE {
    v.as_raw()
}

#[inline(always)]
pub fn value(v: VALUE) -> Value {
    // SAFETY: callers only pass VALUEs that Ruby handed us and that are kept
    // alive (marked, on the stack, or held by Ruby).
    unsafe { Value::from_raw(v) }
}

/// The header flag a closed queue carries (`FL_USER5`, thread_sync.c's
/// QUEUE_CLOSED): false for a special constant.
#[inline(always)]
pub fn closed_flag(v: Value) -> bool {
    let obj = v.as_raw();
    // SAFETY: a heap object (not a special constant) that Ruby passed us
    // has a readable RBasic header.
    !special_const(obj) && unsafe { (*(obj as *const rb_sys::RBasic)).flags } & CLOSED_FLAG != 0
}

/// Sets [`closed_flag`] on `v` if it is one of the extension's own `T`
/// objects, whose header's user flags are the extension's; on any other
/// object the bit may mean something to Ruby, so it is left alone.
pub fn set_closed_flag<T: TypedData>(v: Value) {
    if typed_ref::<T>(&v).is_some() {
        // SAFETY: `v` is a live heap object (a T_DATA of type `T`); the
        // GVL is held (a method body), so nobody else writes the header
        // now. A flag is not a reference: no write barrier.
        unsafe { (*(v.as_raw() as *mut rb_sys::RBasic)).flags |= CLOSED_FLAG }
    }
}

const CLOSED_FLAG: VALUE = rb_sys::ruby_fl_type::RUBY_FL_USER5 as VALUE;

/// `true` / `false` as a Value (special constants: nothing to keep alive).
#[inline(always)]
pub fn bool_value(b: bool) -> Value {
    let v = if b {
        rb_sys::special_consts::Qtrue
    } else {
        rb_sys::special_consts::Qfalse
    };
    value(v as VALUE)
}

/// `n` as a Fixnum Value, or None when it does not fit one (Ruby's
/// `LONG2FIX` range).
#[inline(always)]
pub fn fixnum_value(n: usize) -> Option<Value> {
    // FIXNUM_MAX is a positive c_long: it fits a u64 on every platform.
    if n as u64 > rb_sys::FIXNUM_MAX as u64 {
        return None;
    }
    Some(value(
        ((n as VALUE) << 1) | rb_sys::special_consts::FIXNUM_FLAG as VALUE,
    ))
}

#[inline(always)]
pub fn special_const(v: VALUE) -> bool {
    rb_sys::SPECIAL_CONST_P(v)
}

pub const QNIL: VALUE = rb_sys::special_consts::Qnil as VALUE;

/// `INT2FIX(i)`: an Integer that is a special constant (no allocation,
/// nothing to mark), for a small `i`.
#[inline(always)]
pub const fn fixnum(i: i32) -> VALUE {
    ((i as i64 as VALUE) << 1) | rb_sys::special_consts::FIXNUM_FLAG as VALUE
}

/// Returns the Rust struct wrapped by `v` when `v` is an RTypedData object of
/// type `T`, without magnus' `rb_protect`-wrapped `rb_check_typeddata`.
///
/// The check is the same as Ruby's `rb_typeddata_is_kind_of` for types
/// without a parent: not a special constant, T_DATA, typed, and the type
/// pointer is `T`'s static `rb_data_type_t`.
#[inline(always)]
pub fn typed_ref<T: TypedData>(v: &Value) -> Option<&T> {
    let obj = v.as_raw();
    if special_const(obj) {
        return None;
    }
    // SAFETY: `obj` is a heap object (not a special constant) that Ruby
    // passed to us, so its RBasic header can be read; RTYPEDDATA_TYPE and
    // the data pointer are only read after T_DATA and the typed flag have
    // been checked. magnus stores a `Box<T>` as the data pointer, and the
    // object (the method receiver) outlives the borrow.
    unsafe {
        if rb_sys::RB_BUILTIN_TYPE(obj) != ruby_value_type::RUBY_T_DATA
            || !rb_sys::RTYPEDDATA_P(obj)
        {
            return None;
        }
        let ty = rb_sys::RTYPEDDATA_TYPE(obj);
        if ty != (T::data_type() as *const magnus::DataType).cast() {
            return None;
        }
        let data = rb_sys::RTYPEDDATA_GET_DATA(obj) as *const T;
        data.as_ref()
    }
}

/// [`typed_ref`] for a VALUE held elsewhere (a task in the thread cache's
/// queue). The caller keeps `obj` alive (marked or on the stack) while it
/// uses the reference.
#[inline(always)]
pub fn typed_ref_raw<'a, T: TypedData>(obj: VALUE) -> Option<&'a T> {
    let v = value(obj);
    // SAFETY: the object outlives `'a` by the caller's contract; typed_ref
    // only ties the borrow to the local `v`.
    typed_ref::<T>(&v).map(|r| unsafe { &*(r as *const T) })
}

/// The write barrier for storing `child` into the object `parent`.
#[inline(always)]
pub fn write_barrier(parent: VALUE, child: VALUE) {
    if !special_const(child) {
        // SAFETY: both are live VALUEs and we hold the GVL.
        unsafe { rb_sys::rb_gc_writebarrier(parent, child) }
    }
}

/// Marks `v` for the GC, allowing compaction to move it. The `Marker`
/// (which only a dmark callback is given) proves where it is called from.
#[inline(always)]
pub fn mark_movable(_: &Marker, v: VALUE) {
    // SAFETY: inside a dmark callback (the Marker), with a VALUE the
    // object holds.
    unsafe { rb_sys::rb_gc_mark_movable(v) }
}

/// Marks the VALUEs `values` hands its visitor from `cell`'s contents. Marking also
/// runs outside a GC (`ObjectSpace.reachable_objects_from`), whose mark
/// function allocates and can start a GC that marks the same object: the
/// values are then copied out and marked after the cell is let go, so
/// that the nested mark's `with` is not inside this one. In a GC nothing
/// runs Ruby code meanwhile: marked in place, no copy.
pub fn mark_from<T>(
    m: &Marker,
    cell: &GvlCell<T>,
    values: impl FnOnce(&mut T, &mut dyn FnMut(VALUE)),
) {
    // SAFETY: reads the GC's own flag; the GVL is held (a mark callback).
    if unsafe { rb_sys::rb_during_gc() } != 0 {
        cell.with(|s| values(s, &mut |v| mark_movable(m, v)));
    } else {
        let mut held = Vec::new();
        cell.with(|s| values(s, &mut |v| held.push(v)));
        held.into_iter().for_each(|v| mark_movable(m, v));
    }
}

/// The new address of `v` after compaction. The `Compactor` (which only a
/// dcompact callback is given) proves where it is called from.
#[inline(always)]
pub fn gc_location(_: &Compactor, v: VALUE) -> VALUE {
    // SAFETY: inside a dcompact callback (the Compactor), with a VALUE the
    // object marked.
    unsafe { rb_sys::rb_gc_location(v) }
}

/// `rb_convert_type(v, T_ARRAY, "Array", "to_a")`, exactly what stock's
/// `rb_to_array` does in `Queue#initialize`, so errors match.
pub fn to_array(v: Value) -> Result<Value, Error> {
    let obj = v.as_raw();
    // SAFETY: rb_convert_type may raise; `protect` catches the longjmp.
    let r = protect(|| unsafe {
        rb_sys::rb_convert_type(
            obj,
            ruby_value_type::RUBY_T_ARRAY as _,
            c"Array".as_ptr(),
            c"to_a".as_ptr(),
        )
    })?;
    Ok(value(r))
}

/// Copies the elements of a Ruby Array into `out`.
pub fn array_values(ary: Value, out: &mut Vec<VALUE>) {
    let a = ary.as_raw();
    // SAFETY: `ary` is a T_ARRAY (checked by rb_convert_type); we read its
    // elements with rb_ary_entry, which neither allocates nor raises.
    unsafe {
        let len = rb_sys::RARRAY_LEN(a);
        out.reserve(len as usize);
        for i in 0..len {
            out.push(rb_sys::rb_ary_entry(a, i));
        }
    }
}

/// A new, empty Array with room for `capa` elements.
pub fn ary_new_capa(capa: usize) -> Result<VALUE, Error> {
    // SAFETY: allocates; may raise NoMemoryError, caught by protect.
    protect(|| unsafe { rb_sys::rb_ary_new_capa(capa as _) })
}

/// Moves the first `k` items of `items` (at most all of them) to the end
/// of `ary`, a new Array made by `ary_new_capa` with room for them. Returns
/// how many moved.
///
/// With the room already there, appending allocates nothing, so no GC can
/// run between an item leaving `items` (where the owner's mark function
/// sees it) and its arrival in `ary`.
pub fn ary_take_front(ary: VALUE, items: &mut VecDeque<VALUE>, k: usize) -> usize {
    let k = k.min(items.len());
    let (front, back) = items.as_slices();
    let from_front = k.min(front.len());
    // SAFETY: `ary` is a fresh, unfrozen, unshared Array with capacity for
    // `k` more elements (contract above), so rb_ary_cat neither allocates
    // nor raises; the slices are live VALUEs held by the caller's object.
    unsafe {
        rb_sys::rb_ary_cat(ary, front.as_ptr(), from_front as _);
        if k > from_front {
            rb_sys::rb_ary_cat(ary, back.as_ptr(), (k - from_front) as _);
        }
    }
    items.drain(..k);
    k
}

/// A private copy of the Array `ary`, hidden from Ruby code: a caller that
/// reads its elements across a wait (SizedQueue#push_all) sees neither the
/// user's changes to `ary` nor objects the GC freed or moved (the copy
/// marks its elements and compaction updates its slots). The caller keeps
/// the copy on its stack (`gc_guard`) while it uses it.
pub fn ary_private_copy(ary: Value) -> Result<VALUE, Error> {
    let a = ary.as_raw();
    // SAFETY: `ary` is a T_ARRAY; rb_ary_dup allocates (may raise
    // NoMemoryError, caught by protect); rb_obj_hide only clears the class.
    protect(|| unsafe {
        let copy = rb_sys::rb_ary_dup(a);
        rb_sys::rb_obj_hide(copy);
        copy
    })
}

/// The length of an Array.
pub fn ary_len(ary: VALUE) -> usize {
    // SAFETY: `ary` is a live T_ARRAY.
    unsafe { rb_sys::RARRAY_LEN(ary) as usize }
}

/// `ary[i]`; neither allocates nor raises.
pub fn ary_entry(ary: VALUE, i: usize) -> VALUE {
    // SAFETY: `ary` is a live T_ARRAY; rb_ary_entry bounds-checks.
    unsafe { rb_sys::rb_ary_entry(ary, i as _) }
}

/// Appends `ary[from, k]` to `items` in one copy. Neither allocates in
/// Ruby nor calls Ruby code, so the elements cannot change or move
/// meanwhile; `ary` must have at least `from + k` elements.
pub fn ary_extend_from(ary: VALUE, from: usize, k: usize, items: &mut VecDeque<VALUE>) {
    items.extend(ary_slice(ary, from, k));
}

/// `ary[from, k]` as a slice, for use before any Ruby call or allocation
/// (see `ary_extend_from`); panics, not reads out of bounds, past the end.
fn ary_slice<'a>(ary: VALUE, from: usize, k: usize) -> &'a [VALUE] {
    // SAFETY: `ary` is a live T_ARRAY; the slice covers its current
    // elements and is used before anything can change or move them.
    let all = unsafe { std::slice::from_raw_parts(rb_sys::RARRAY_CONST_PTR(ary), ary_len(ary)) };
    &all[from..from + k]
}

/// The write barrier for storing `ary[from, k]` into `parent` (after
/// `ary_extend_from`; same contract).
pub fn write_barrier_from(parent: VALUE, ary: VALUE, from: usize, k: usize) {
    ary_slice(ary, from, k)
        .iter()
        .for_each(|&v| write_barrier(parent, v));
}

/// Puts the elements of `ary` back at the front of `items`, in order (a
/// batch taken by `ary_take_front` that could not be handed out).
pub fn ary_put_back_front(ary: VALUE, items: &mut VecDeque<VALUE>) {
    for i in (0..ary_len(ary)).rev() {
        items.push_front(ary_entry(ary, i));
    }
}

/// `[a, b]`, a new two-element Array. `b` may live only in this frame
/// (an item just taken off a queue): it is kept here while Ruby allocates.
pub fn pair(a: VALUE, b: VALUE) -> Result<VALUE, Error> {
    // SAFETY: allocates; may raise NoMemoryError, caught by protect.
    let r = protect(|| unsafe { rb_sys::rb_assoc_new(a, b) });
    super::gc_guard(a);
    super::gc_guard(b);
    r
}

// ---------------------------------------------------------------------------
// Fork generation
// ---------------------------------------------------------------------------

static FORK_GEN: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_child() {
    FORK_GEN.fetch_add(1, Ordering::Relaxed);
}

/// What a fork does to the fork generation, for the unit tests.
#[cfg(test)]
pub(crate) fn simulate_fork() {
    after_fork_child();
}

/// Registers the child-side `pthread_atfork` handler that bumps the fork
/// generation. Ruby's `fork` goes through fork(2), so the handler runs in
/// every child.
pub fn install_fork_hook() {
    // SAFETY: registering a plain function with no captured state.
    unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_child));
    }
}

#[inline(always)]
pub fn fork_generation() -> u64 {
    FORK_GEN.load(Ordering::Relaxed)
}

/// `rb_num2dbl`, with Ruby's own TypeError for non-numeric values.
pub fn num2dbl(v: VALUE) -> Result<f64, Error> {
    let mut out = 0.0f64;
    let out_ptr = &mut out as *mut f64;
    // SAFETY: rb_num2dbl may raise; protect catches it. `out` outlives the
    // closure.
    protect(|| unsafe {
        *out_ptr = rb_sys::rb_num2dbl(v);
        QNIL
    })?;
    Ok(out)
}

/// `rb_undef_method(klass, name)` (stock undefines `initialize_copy`).
pub fn undef_method(class: Value, name: &std::ffi::CStr) {
    // SAFETY: called at load time on a class we just defined.
    unsafe { rb_sys::rb_undef_method(class.as_raw(), name.as_ptr()) }
}

// ---------------------------------------------------------------------------
// Hot-path method entry points
// ---------------------------------------------------------------------------

/// A method body as `rb_define_method` sees it with arity 0.
pub type RawMethod0 = unsafe extern "C" fn(Value) -> Value;
/// A method body as `rb_define_method` sees it with arity 1.
pub type RawMethod1 = unsafe extern "C" fn(Value, Value) -> Value;
/// A method body with arity -1 (`argc, argv, self`).
pub type RawMethodV = unsafe extern "C" fn(std::os::raw::c_int, *const Value, Value) -> Value;

/// Calls a `magnus::method!`-generated wrapper. Those wrappers catch
/// panics and raise errors themselves, so calling them is as safe as Ruby
/// calling them; hot paths use this to fall back to the full method.
#[inline(always)]
pub fn call_method1(f: RawMethod1, rb_self: Value, a: Value) -> Value {
    // SAFETY: `f` is a magnus wrapper expecting exactly these arguments,
    // called on a Ruby thread with the GVL held, as Ruby would call it.
    unsafe { f(rb_self, a) }
}

/// As [`call_method1`] for arity 0 wrappers.
#[inline(always)]
pub fn call_method0(f: RawMethod0, rb_self: Value) -> Value {
    // SAFETY: as for call_method1.
    unsafe { f(rb_self) }
}

/// As [`call_method1`] for arity -1 wrappers.
#[inline(always)]
pub fn call_method_v(
    f: RawMethodV,
    argc: std::os::raw::c_int,
    argv: *const Value,
    rb_self: Value,
) -> Value {
    // SAFETY: as for call_method1; `argc`/`argv` are Ruby's own.
    unsafe { f(argc, argv, rb_self) }
}

/// `NUM2LONG`, with Ruby's own TypeError / RangeError. A Fixnum is read
/// in place (no `rb_protect`: `SizedQueue.new(n)` is a per-call row).
pub fn num2long(v: VALUE) -> Result<i64, Error> {
    if rb_sys::FIXNUM_P(v) {
        // SAFETY: `v` is a Fixnum, which FIX2LONG decodes without a call.
        return Ok(unsafe { rb_sys::FIX2LONG(v) } as i64);
    }
    let mut out = 0i64;
    let out_ptr = &mut out as *mut i64;
    // SAFETY: rb_num2long may raise; protect catches it. `out` outlives the
    // closure.
    protect(|| unsafe {
        *out_ptr = rb_sys::rb_num2long(v) as i64;
        QNIL
    })?;
    Ok(out)
}

/// Argument `i` of an arity -1 call, if there is one.
#[inline(always)]
pub fn arg(argc: std::os::raw::c_int, argv: *const Value, i: usize) -> Option<Value> {
    // SAFETY: Ruby passes `argc` valid VALUEs at `argv`; `i` is checked.
    (i < argc as usize).then(|| unsafe { *argv.add(i) })
}

/// The value of `key` when `hash` is a keyword Hash holding that key
/// alone (`pop(timeout: t)`, the usual call): read directly, where
/// magnus's keyword parsing builds its argument spec and allocates on
/// every call. None otherwise, and the caller parses in full (for the
/// errors).
pub fn only_keyword(hash: VALUE, key: &super::Name) -> Option<VALUE> {
    if special_const(hash) {
        return None;
    }
    unsafe extern "C" fn first_entry(k: VALUE, v: VALUE, out: VALUE) -> std::os::raw::c_int {
        // SAFETY: `out` is the address of the caller's `[VALUE; 2]`, alive
        // for the whole iteration.
        unsafe { *(out as *mut [VALUE; 2]) = [k, v] };
        rb_sys::st_retval::ST_STOP as _
    }
    let mut entry = [QNIL; 2];
    // SAFETY: `hash` is a heap object Ruby passed us (not a special
    // constant), so its header can be read; the Hash calls run only once
    // it is a Hash with one entry, GVL held. None runs Ruby code or
    // raises: the size is a field read, and iterating a Hash nobody
    // changes meanwhile only calls `first_entry`, which stores the entry
    // (a lookup could call `eql?` on a key whose hash hint collides). The
    // key is compared by identity with the Symbol, interned already
    // (callers pass keyword names their methods were defined with).
    unsafe {
        if rb_sys::RB_BUILTIN_TYPE(hash) != ruby_value_type::RUBY_T_HASH
            || rb_sys::rb_hash_size_num(hash) != 1
        {
            return None;
        }
        rb_sys::rb_hash_foreach(hash, Some(first_entry), entry.as_mut_ptr() as VALUE);
        (entry[0] == rb_sys::rb_id2sym(key.id())).then_some(entry[1])
    }
}
