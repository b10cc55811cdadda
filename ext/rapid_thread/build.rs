//! Link flags for the cdylib beyond Linux, and which Ruby it is built for.
//! A Ruby extension leaves Ruby's symbols undefined, to be found in the
//! running ruby. GNU ld allows that for a shared library; Apple's linker
//! needs it said. (rb-sys prints the flag from its own build script, where
//! it reaches only rb-sys' targets.) Not checked on macOS: no such machine
//! is at hand (README, "Install").
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // Ruby reports every suspension of a thread to a hook (sys::park's
    // deferred wake-ups) from 3.3 on: 3.2 has the hook, but its timer's
    // switch of threads was not read to fire it, nor tested. rb-sys says
    // which Ruby this builds for.
    println!("cargo:rustc-check-cfg=cfg(ruby_thread_event_hooks)");
    // Fiber storage (`Fiber[]`), which a new thread copies from its
    // creator: thread_cache's workers carry it from 3.3 on, where
    // `Fiber[k] = nil` deletes the key (3.2 stores nil, so a worker would
    // gather every key any block used; it keeps its creator's storage).
    println!("cargo:rustc-check-cfg=cfg(ruby_fiber_storage)");
    if std::env::var("DEP_RB_VERSION_GTE_3_3").as_deref() == Ok("true") {
        println!("cargo:rustc-cfg=ruby_thread_event_hooks");
        println!("cargo:rustc-cfg=ruby_fiber_storage");
    }
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-undefined,dynamic_lookup");
    }
}
