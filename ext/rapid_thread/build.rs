//! Link flags for the cdylib beyond Linux. A Ruby extension leaves Ruby's
//! symbols undefined, to be found in the running ruby. GNU ld allows that
//! for a shared library; Apple's linker needs it said. (rb-sys prints the
//! flag from its own build script, where it reaches only rb-sys' targets.)
//! Not checked on macOS: no such machine is at hand (README, "Install").
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-undefined,dynamic_lookup");
    }
}
