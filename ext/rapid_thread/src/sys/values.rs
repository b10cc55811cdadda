//! Values, typed data, the GVL-guarded cell, the GC and fork generation.

use std::cell::{Cell, UnsafeCell};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use magnus::gc::{Compactor, Marker};
use magnus::prelude::*;
use magnus::rb_sys::{protect, AsRawValue, FromRawValue};
use magnus::{Error, RArray, RClass, Ruby, TypedData, Value};
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
/// `with` checks that the caller holds the main Ractor's GVL
/// (`ruby_thread_has_gvl_p`, false on a thread Ruby does not know and
/// inside a blocking region; then [`in_main_ractor`]) and aborts
/// otherwise. (The methods that reach one are not Ractor-safe, so other
/// Ractors cannot call them: the check is for the code, not for users.)
pub struct GvlStatic<T>(GvlCell<T>);

// SAFETY: every access goes through `GvlStatic::with`, which aborts unless
// the caller holds the main Ractor's GVL; its holders run one at a time,
// and the `GvlCell` inside refuses re-entry by the holder itself.
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
        check_main_gvl();
        &self.0
    }
}

/// Aborts unless the caller holds the main Ractor's GVL.
#[inline]
pub(super) fn check_main_gvl() {
    // SAFETY: a plain query of the current native thread's state.
    if unsafe { ruby_thread_has_gvl_p() } == 0 || !in_main_ractor() {
        without_the_gvl();
    }
}

/// A handle to Ruby's API for the main Ractor's state (the thread cache,
/// wait lists), checked: aborts unless the caller holds the main Ractor's
/// GVL.
pub fn main_ruby() -> Ruby {
    check_main_gvl();
    // SAFETY: checked just now: a Ruby thread holding the GVL.
    unsafe { Ruby::get_unchecked() }
}

#[cold]
#[inline(never)]
fn without_the_gvl() -> ! {
    abort_with("process-wide state touched without the main Ractor's GVL")
}

/// A Ractor-local slot (`rb_ractor_local_storage_ptr`) that only the main
/// Ractor fills, with the address of `MAIN_MARK`, at load time
/// ([`mark_main_ractor`]): reading it back proves the main Ractor. In the
/// main Ractor the read is a cached load (ractor.c's `main_cache`).
static MAIN_RACTOR_KEY: AtomicPtr<rb_sys::rb_ractor_local_key_struct> =
    AtomicPtr::new(std::ptr::null_mut());
static MAIN_MARK: u8 = 0;

/// Fills the main Ractor's slot (see `MAIN_RACTOR_KEY`), once: the first
/// call decides, and it is the extension's init's (the crate's first
/// code to run, in the main Ractor: `require` runs there only).
pub fn mark_main_ractor(_: &Ruby) -> Result<(), Error> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let mut r = Ok(());
    ONCE.call_once(|| {
        let mark = &MAIN_MARK as *const u8 as *mut std::ffi::c_void;
        // SAFETY: GVL held (the handle), in the main Ractor (see above); a
        // key with no type (nothing to mark or free), made once for the
        // process; both calls allocate and may raise NoMemoryError, caught
        // by protect.
        r = protect(|| unsafe {
            let key = rb_sys::rb_ractor_local_storage_ptr_newkey(std::ptr::null());
            rb_sys::rb_ractor_local_storage_ptr_set(key, mark);
            MAIN_RACTOR_KEY.store(key, Ordering::Release);
            QNIL
        })
        .map(drop);
    });
    r
}

/// Whether the calling Ruby thread belongs to the main Ractor (the handle
/// proves it holds its Ractor's GVL).
pub fn on_main_ractor(_: &Ruby) -> bool {
    in_main_ractor()
}

/// Whether the calling Ruby thread, which holds its Ractor's GVL, belongs
/// to the main Ractor.
fn in_main_ractor() -> bool {
    let key = MAIN_RACTOR_KEY.load(Ordering::Acquire);
    // SAFETY: a key made by mark_main_ractor; reading a Ractor-local slot
    // on a Ruby thread holding the GVL (the caller checked) does not raise.
    !key.is_null()
        && unsafe { rb_sys::rb_ractor_local_storage_ptr(key) }.cast_const()
            == (&MAIN_MARK as *const u8).cast()
}

// ---------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------

#[inline(always)]
pub fn raw(v: Value) -> VALUE {
    v.as_raw()
}

/// A `Value` from a VALUE that Ruby handed this module.
///
/// # Safety
/// `v` is a special constant or a live object (on the stack, marked, or
/// held by Ruby), and the caller is a Ruby thread holding the GVL (a
/// `Value` proves both to the code it reaches: magnus's model).
#[inline(always)]
pub(super) unsafe fn value(v: VALUE) -> Value {
    // SAFETY: the caller's promise.
    unsafe { Value::from_raw(v) }
}

/// A VALUE kept in Rust memory (a queue's items, a task's block): a plain
/// word, `Send` as the objects that own it must be, that gives its `Value`
/// back only for a [`Ruby`] handle, the proof of a Ruby thread with the
/// GVL (magnus's `Opaque`). Keeping it alive is the owner's part: its
/// `mark` marks it (`mark_movable`) and its `compact` updates it
/// (`gc_location`), as for every VALUE held by Rust.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(transparent)]
pub struct Held(VALUE);

impl Held {
    pub const NIL: Held = Held(QNIL);

    #[inline(always)]
    pub fn new(v: Value) -> Held {
        Held(v.as_raw())
    }

    #[inline(always)]
    pub fn get(self, _: &Ruby) -> Value {
        // SAFETY: a Held is made only from a Value, and its owner keeps it
        // alive (marked) while it holds it; the handle proves the GVL.
        unsafe { value(self.0) }
    }

    pub fn is_nil(self) -> bool {
        self.0 == QNIL
    }

    /// The word itself, for comparisons and the GC (sys only).
    #[inline(always)]
    pub(super) fn raw(self) -> VALUE {
        self.0
    }
}

/// `nil` as a Value.
#[inline(always)]
pub fn nil(ruby: &Ruby) -> Value {
    ruby.qnil().as_value()
}

/// Defines `closed?` on `class`, `T`'s class or one inheriting from it
/// (checked), as a method that reads the header flag `close` sets
/// ([`set_closed_flag`]), as stock's reads QUEUE_CLOSED: no type check and
/// no special-constant check, since the receiver is an instance of `class`
/// and so a heap object. It reads only the header, so it may run in any
/// Ractor, as stock's may; that also spares each call Ruby's main-Ractor
/// check (docs/design-details.md, "Per call").
pub fn define_closed_p<T: TypedData>(ruby: &Ruby, class: RClass) -> Result<(), Error> {
    if !class.is_inherited(T::class(ruby)) {
        return Err(Error::new(
            ruby.exception_type_error(),
            "closed? is defined only on the class of its type",
        ));
    }
    // Ruby's flag starts false in an extension's Init, and this sets it
    // back to false: not for a caller that set it true itself.
    super::ext_ractor_safe(ruby, true);
    let defined = class.define_method("closed?", closed_p as RawMethod0);
    super::ext_ractor_safe(ruby, false);
    defined
}

/// # Safety
/// Called by Ruby as the method body [`define_closed_p`] registers: the
/// receiver is an instance of a class that is not Integer, Float, Symbol,
/// nil's, true's or false's, so a heap object.
unsafe extern "C" fn closed_p(rb_self: Value) -> Value {
    // SAFETY: the receiver is a live heap object (the caller's promise),
    // whose RBasic header is readable from the Ractor that calls it.
    let flags = unsafe { (*(rb_self.as_raw() as *const rb_sys::RBasic)).flags };
    bool_value(&Ruby::get_with(rb_self), flags & CLOSED_FLAG != 0)
}

/// Sets the flag `closed?` reads ([`define_closed_p`]) on `v` if it is one of the extension's own `T`
/// objects, whose header's user flags are the extension's; on any other
/// object the bit may mean something to Ruby, so it is left alone. Not on
/// a shareable object (a RactorQueue): another Ractor may write its
/// header meanwhile, and only a Ractor's own objects are behind its GVL.
pub fn set_closed_flag<T: TypedData>(v: Value) {
    if typed_ref::<T>(&v).is_some() {
        let obj = v.as_raw() as *mut rb_sys::RBasic;
        // SAFETY: `v` is a live heap object (a T_DATA of type `T`), so its
        // header can be read.
        if unsafe { (*obj).flags } & (rb_sys::ruby_fl_type::RUBY_FL_SHAREABLE as VALUE) != 0 {
            return;
        }
        // SAFETY: as above; not shareable, so only this Ractor reaches it,
        // and the GVL (a Value proves it) keeps its other threads out. A
        // flag is not a reference: no write barrier.
        unsafe { (*obj).flags |= CLOSED_FLAG }
    }
}

const CLOSED_FLAG: VALUE = rb_sys::ruby_fl_type::RUBY_FL_USER5 as VALUE;

/// `true` / `false` as a Value (special constants: nothing to keep alive).
#[inline(always)]
pub fn bool_value(_: &Ruby, b: bool) -> Value {
    let v = if b {
        rb_sys::special_consts::Qtrue
    } else {
        rb_sys::special_consts::Qfalse
    };
    // SAFETY: a special constant; the handle proves the GVL.
    unsafe { value(v as VALUE) }
}

/// `n` as a Fixnum Value, or None when it does not fit one (Ruby's
/// `LONG2FIX` range).
#[inline(always)]
pub fn fixnum_value(_: &Ruby, n: usize) -> Option<Value> {
    // FIXNUM_MAX is a positive c_long: it fits a u64 on every platform.
    if n as u64 > rb_sys::FIXNUM_MAX as u64 {
        return None;
    }
    // SAFETY: a Fixnum, a special constant; the handle proves the GVL.
    Some(unsafe { value(((n as VALUE) << 1) | rb_sys::special_consts::FIXNUM_FLAG as VALUE) })
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
/// The reference lives as long as the borrow of `v`, a Value on the
/// caller's stack (where the GC sees it) or one Ruby holds.
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

/// [`typed_ref`] for an object kept in Rust memory (its owner marks it),
/// for as long as the [`Held`] is borrowed; the handle proves the GVL.
#[inline(always)]
pub fn typed_ref_held<'a, T: TypedData>(ruby: &Ruby, h: &'a Held) -> Option<&'a T> {
    let v = h.get(ruby);
    // SAFETY: the object is alive while its owner holds `h` (and marks
    // it), which the borrow of `h` outlasts; the Rust struct behind a
    // T_DATA does not move with its object: the borrow may outlive the
    // local `v` and last as long as that of `h`.
    typed_ref::<T>(&v).map(|r| unsafe { &*(r as *const T) })
}

/// The write barrier for storing `child` into the object `parent`.
#[inline(always)]
pub fn write_barrier(parent: Value, child: Held) {
    let (parent, child) = (parent.as_raw(), child.raw());
    if !special_const(child) && !special_const(parent) {
        // SAFETY: both are live heap objects (a Value and a Held made from
        // one), and the GVL is held (the Value proves it).
        unsafe { rb_sys::rb_gc_writebarrier(parent, child) }
    }
}

/// Marks `v` for the GC, allowing compaction to move it. The `Marker`
/// (which only a dmark callback is given) proves where it is called from.
#[inline(always)]
pub fn mark_movable(_: &Marker, v: Held) {
    // SAFETY: inside a dmark callback (the Marker), with a VALUE the
    // object holds.
    unsafe { rb_sys::rb_gc_mark_movable(v.raw()) }
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
    values: impl FnOnce(&mut T, &mut dyn FnMut(Held)),
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
pub fn gc_location(_: &Compactor, v: Held) -> Held {
    // SAFETY: inside a dcompact callback (the Compactor), with a VALUE the
    // object marked.
    Held(unsafe { rb_sys::rb_gc_location(v.raw()) })
}

/// `rb_convert_type(v, T_ARRAY, "Array", "to_a")`, exactly what stock's
/// `rb_to_array` does in `Queue#initialize`, so errors match.
pub fn to_array(v: Value) -> Result<RArray, Error> {
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
    // SAFETY: rb_convert_type returned a live T_ARRAY.
    Ok(unsafe { array(r) })
}

/// An Array Ruby handed this module, as magnus's type.
///
/// # Safety
/// As [`value`], and `a` is an Array.
unsafe fn array(a: VALUE) -> RArray {
    // SAFETY: the caller's promise.
    let v = unsafe { value(a) };
    RArray::from_value(v).expect("an Array")
}

/// Copies the elements of a Ruby Array into `out`.
pub fn array_values(ary: RArray, out: &mut Vec<Held>) {
    let a = ary.as_raw();
    // SAFETY: `ary` is a T_ARRAY (its type says so); we read its elements
    // with rb_ary_entry, which neither allocates nor raises.
    unsafe {
        let len = rb_sys::RARRAY_LEN(a);
        out.reserve(len as usize);
        for i in 0..len {
            out.push(Held(rb_sys::rb_ary_entry(a, i)));
        }
    }
}

/// A new, empty Array that Ruby code has not seen yet, with room for
/// `room` more elements: appending up to that many allocates nothing and
/// cannot raise (`ary_take_front`), so items can move into it inside a
/// `GvlCell::with`, where no GC may run.
pub struct FreshArray {
    ary: RArray,
    room: usize,
}

impl FreshArray {
    pub fn new(_: &Ruby, capa: usize) -> Result<FreshArray, Error> {
        // SAFETY: GVL held (the handle); allocates; may raise NoMemoryError, caught by protect.
        let a = protect(|| unsafe { rb_sys::rb_ary_new_capa(capa as _) })?;
        Ok(FreshArray {
            // SAFETY: rb_ary_new_capa returned a live T_ARRAY.
            ary: unsafe { array(a) },
            room: capa,
        })
    }

    /// The Array, for Ruby code.
    pub fn into_array(self) -> RArray {
        self.ary
    }
}

/// Moves the first `k` items of `items` (at most all of them, and at most
/// the room `ary` has left) to the end of `ary`. Returns how many moved.
///
/// With the room already there, appending allocates nothing, so no GC can
/// run between an item leaving `items` (where the owner's mark function
/// sees it) and its arrival in `ary`.
pub fn ary_take_front(ary: &mut FreshArray, items: &mut VecDeque<Held>, k: usize) -> usize {
    let k = k.min(items.len()).min(ary.room);
    let (front, back) = items.as_slices();
    let from_front = k.min(front.len());
    let a = ary.ary.as_raw();
    // SAFETY: `ary` is a fresh, unfrozen, unshared Array with room for `k`
    // more elements (FreshArray), so rb_ary_cat neither allocates nor
    // raises; the slices are live VALUEs held by the caller's object (Held
    // is a transparent VALUE).
    unsafe {
        rb_sys::rb_ary_cat(a, front.as_ptr().cast(), from_front as _);
        if k > from_front {
            rb_sys::rb_ary_cat(a, back.as_ptr().cast(), (k - from_front) as _);
        }
    }
    ary.room -= k;
    items.drain(..k);
    k
}

/// The items a batch appends (`push_all`): the caller's Array, or a
/// private copy of it hidden from Ruby code ([`Items::private_copy`]),
/// which this type never hands back to Ruby (a hidden object has no
/// class: a method call on it would crash).
#[derive(Clone, Copy)]
pub struct Items(RArray);

impl Items {
    /// The caller's Array as it is.
    pub fn of(ary: RArray) -> Items {
        Items(ary)
    }

    /// A private copy of `ary`: a caller that reads the elements across a
    /// wait (SizedQueue#push_all) sees neither the user's changes to
    /// `ary` nor objects the GC freed or moved (the copy marks its
    /// elements and compaction updates its slots). The caller keeps the
    /// copy on its stack (`guard`) while it uses it.
    pub fn private_copy(ary: RArray) -> Result<Items, Error> {
        let a = ary.as_raw();
        // SAFETY: `ary` is a T_ARRAY; rb_ary_dup allocates (may raise
        // NoMemoryError, caught by protect); rb_obj_hide only clears the
        // class.
        let copy = protect(|| unsafe {
            let copy = rb_sys::rb_ary_dup(a);
            rb_sys::rb_obj_hide(copy);
            copy
        })?;
        // SAFETY: rb_ary_dup returned a live T_ARRAY.
        Ok(Items(unsafe { array(copy) }))
    }

    pub fn len(self) -> usize {
        ary_len(self.0)
    }

    /// Keeps the Array on the caller's stack up to here (`gc_guard`).
    pub fn guard(self) {
        super::gc_guard(self.0.as_raw());
    }
}

/// The length of an Array.
pub fn ary_len(ary: RArray) -> usize {
    // SAFETY: `ary` is a live T_ARRAY (its type says so).
    unsafe { rb_sys::RARRAY_LEN(ary.as_raw()) as usize }
}

/// `ary[i]`; neither allocates nor raises.
pub fn ary_entry(ary: RArray, i: usize) -> Value {
    // SAFETY: `ary` is a live T_ARRAY; rb_ary_entry bounds-checks, and the
    // element is alive while the Array holds it.
    unsafe { value(rb_sys::rb_ary_entry(ary.as_raw(), i as _)) }
}

/// Appends `ary[from, k]` to `items` in one copy. Neither allocates in
/// Ruby nor calls Ruby code, so the elements cannot change or move
/// meanwhile; panics past the end of `ary`.
pub fn ary_extend_from(ary: Items, from: usize, k: usize, items: &mut VecDeque<Held>) {
    // SAFETY: extending a VecDeque calls no Ruby.
    unsafe { with_ary_slice(ary.0, from, k, |s| items.extend(s.iter().map(|&v| Held(v)))) };
}

/// Runs `f` on `ary[from, k]` as a slice (panics, not reads out of
/// bounds, past the end).
///
/// # Safety
/// `f` calls no Ruby and does not allocate in Ruby: either could change
/// or move the elements under the slice.
unsafe fn with_ary_slice<R>(
    ary: RArray,
    from: usize,
    k: usize,
    f: impl FnOnce(&[VALUE]) -> R,
) -> R {
    let a = ary.as_raw();
    // SAFETY: `ary` is a live T_ARRAY; the slice covers its current
    // elements and lives only for `f`, which calls no Ruby (the caller's
    // promise).
    let all = unsafe { std::slice::from_raw_parts(rb_sys::RARRAY_CONST_PTR(a), ary_len(ary)) };
    f(&all[from..from + k])
}

/// The write barrier for storing `ary[from, k]` into `parent` (after
/// `ary_extend_from`).
pub fn write_barrier_from(parent: Value, ary: Items, from: usize, k: usize) {
    // SAFETY: a write barrier neither calls Ruby code nor allocates.
    unsafe {
        with_ary_slice(ary.0, from, k, |s| {
            s.iter().for_each(|&v| write_barrier(parent, Held(v)))
        })
    };
}

/// Puts the elements of `ary` back at the front of `items`, in order (a
/// batch taken by `ary_take_front` that could not be handed out).
pub fn ary_put_back_front(ary: RArray, items: &mut VecDeque<Held>) {
    for i in (0..ary_len(ary)).rev() {
        items.push_front(Held::new(ary_entry(ary, i)));
    }
}

/// `[a, b]`, a new two-element Array. `b` may live only in this frame
/// (an item just taken off a queue): it is kept here while Ruby allocates.
pub fn pair(a: Value, b: Value) -> Result<Value, Error> {
    let (ra, rb) = (a.as_raw(), b.as_raw());
    // SAFETY: allocates; may raise NoMemoryError, caught by protect.
    let r = protect(|| unsafe { rb_sys::rb_assoc_new(ra, rb) });
    super::gc_guard(ra);
    super::gc_guard(rb);
    // SAFETY: rb_assoc_new returned a live Array.
    r.map(|r| unsafe { value(r) })
}

// ---------------------------------------------------------------------------
// Fork generation
// ---------------------------------------------------------------------------

static FORK_GEN: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_child() {
    FORK_GEN.fetch_add(1, Ordering::Relaxed);
    super::forget_deferred();
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
pub fn num2dbl(v: Value) -> Result<f64, Error> {
    let v = v.as_raw();
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
pub fn undef_method(class: RClass, name: &std::ffi::CStr) {
    // SAFETY: a live class (its type says so), GVL held (a Value proves
    // it); undefining a name on a class does not raise.
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

/// A method with a hot path, registered as [`entry0`]`::<M>`: `fast`
/// answers a call in place, or None for anything else (a wrong receiver,
/// an error to raise, a wait), which the full method `SLOW`, a
/// `magnus::method!` wrapper, then answers. The hot path skips magnus's
/// receiver conversion and argument parsing (docs/design-details.md,
/// "Per call"); `fast` runs inside `catch_unwind`, and a panic takes the
/// full method too. A `fast` that did part of the call before its None
/// (ConditionVariable#broadcast, which wakes threads first) leaves the
/// rest in a state the full method completes.
pub trait FastMethod0 {
    const SLOW: RawMethod0;
    fn fast(ruby: &Ruby, rb_self: Value) -> Option<Value>;
}

/// [`FastMethod0`] for arity 1, registered as [`entry1`]`::<M>`.
pub trait FastMethod1 {
    const SLOW: RawMethod1;
    fn fast(ruby: &Ruby, rb_self: Value, arg: Value) -> Option<Value>;
}

/// [`FastMethod0`] for arity -1, registered as [`entry_v`]`::<M>`.
pub trait FastMethodV {
    const SLOW: RawMethodV;
    fn fast(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Option<Value>;
}

/// The method body Ruby calls for a [`FastMethod0`].
///
/// # Safety
/// Called by Ruby as a method body of arity 0 (on a Ruby thread holding
/// the GVL), as `rb_define_method` registers it.
pub unsafe extern "C" fn entry0<M: FastMethod0>(rb_self: Value) -> Value {
    let ruby = Ruby::get_with(rb_self);
    let fast = std::panic::catch_unwind(|| M::fast(&ruby, rb_self));
    match fast.ok().flatten() {
        Some(v) => v,
        // SAFETY: `SLOW` is called as Ruby would call it had it been
        // registered itself (which magnus's safe `define_method` allows for
        // any such function): the same receiver, on this Ruby thread with
        // the GVL, from a frame that owns nothing a raise would skip (the
        // panic's payload, if any, is dropped already).
        None => unsafe { slow0(M::SLOW, rb_self) },
    }
}

/// The method body Ruby calls for a [`FastMethod1`].
///
/// # Safety
/// As [`entry0`], for arity 1.
pub unsafe extern "C" fn entry1<M: FastMethod1>(rb_self: Value, arg: Value) -> Value {
    let ruby = Ruby::get_with(rb_self);
    let fast = std::panic::catch_unwind(|| M::fast(&ruby, rb_self, arg));
    match fast.ok().flatten() {
        Some(v) => v,
        // SAFETY: as in entry0, with the same argument.
        None => unsafe { slow1(M::SLOW, rb_self, arg) },
    }
}

/// The method body Ruby calls for a [`FastMethodV`].
///
/// # Safety
/// As [`entry0`], for arity -1: `argv` points at `argc` live VALUEs.
pub unsafe extern "C" fn entry_v<M: FastMethodV>(
    argc: std::os::raw::c_int,
    argv: *const Value,
    rb_self: Value,
) -> Value {
    let ruby = Ruby::get_with(rb_self);
    let args: &[Value] = match argc {
        0 => &[],
        // SAFETY: Ruby passes `argc` live VALUEs at `argv` for the call.
        n => unsafe { std::slice::from_raw_parts(argv, n as usize) },
    };
    let fast = std::panic::catch_unwind(|| M::fast(&ruby, rb_self, args));
    match fast.ok().flatten() {
        Some(v) => v,
        // SAFETY: as in entry0, with Ruby's own `argc` and `argv`.
        None => unsafe { slow_v(M::SLOW, argc, argv, rb_self) },
    }
}

// The full methods, called out of line: the hot paths stay small.

/// # Safety
/// As `f`'s own: called as Ruby would call a method body (see `entry0`).
#[cold]
#[inline(never)]
unsafe fn slow0(f: RawMethod0, rb_self: Value) -> Value {
    // SAFETY: the caller's promise.
    unsafe { f(rb_self) }
}

/// # Safety
/// As [`slow0`].
#[cold]
#[inline(never)]
unsafe fn slow1(f: RawMethod1, rb_self: Value, arg: Value) -> Value {
    // SAFETY: the caller's promise.
    unsafe { f(rb_self, arg) }
}

/// # Safety
/// As [`slow0`]; `argv` points at `argc` live VALUEs.
#[cold]
#[inline(never)]
unsafe fn slow_v(
    f: RawMethodV,
    argc: std::os::raw::c_int,
    argv: *const Value,
    rb_self: Value,
) -> Value {
    // SAFETY: the caller's promise.
    unsafe { f(argc, argv, rb_self) }
}

/// `NUM2LONG`, with Ruby's own TypeError / RangeError. A Fixnum is read
/// in place (no `rb_protect`: `SizedQueue.new(n)` is a per-call row).
pub fn num2long(v: Value) -> Result<i64, Error> {
    let v = v.as_raw();
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

/// The value of `key` when `hash` is a keyword Hash holding that key
/// alone (`pop(timeout: t)`, the usual call): read directly, where
/// magnus's keyword parsing builds its argument spec and allocates on
/// every call. None otherwise, and the caller parses in full (for the
/// errors).
pub fn only_keyword(hash_value: Value, key: &super::Name) -> Option<Value> {
    let hash = hash_value.as_raw();
    if special_const(hash) {
        return None;
    }
    let id = key.id(&Ruby::get_with(hash_value)).ok()?;
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
        // The value is alive: the Hash, a Value of the caller's, holds it.
        (entry[0] == rb_sys::rb_id2sym(id)).then(|| value(entry[1]))
    }
}
