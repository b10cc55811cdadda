//! Native core of the rapid_thread gem. One module per Ruby class, the
//! shared waiting/wake-up machinery in `wait`, and every `unsafe` block in
//! `sys` but one: RactorQueue's promise that its wait without the GVL calls
//! no Ruby (`sys::without_gvl`), which only that module can make.

mod cgroup;
mod condition_variable;
mod errors;
mod queue;
mod ractor_queue;
mod select;
mod sized_queue;
mod spin;
mod sys;
mod task;
mod thread_cache;
mod wait;

use magnus::{function, prelude::*, Error, RHash, Ruby};

/// `RapidThread.spin_stats`: what the spin policy (crate::spin) decided.
fn spin_stats(ruby: &Ruby) -> Result<RHash, Error> {
    let s = spin::stats();
    let h = ruby.hash_new();
    h.aset(ruby.to_symbol("spins"), s.spins)?;
    h.aset(ruby.to_symbol("late_spins"), s.late_spins)?;
    h.aset(ruby.to_symbol("parks"), s.parks)?;
    h.aset(ruby.to_symbol("spin_parks"), s.spin_parks)?;
    h.aset(ruby.to_symbol("quiet"), s.quiet)?;
    h.aset(ruby.to_symbol("relayed"), s.relayed)?;
    h.aset(ruby.to_symbol("park_timeouts"), s.park_timeouts)?;
    Ok(h)
}

/// `RapidThread.cpu_budget`: the CPUs the spin policy counts, and why.
fn cpu_budget(ruby: &Ruby) -> Result<RHash, Error> {
    let b = spin::cpu_budget();
    let h = ruby.hash_new();
    h.aset(ruby.to_symbol("cpus"), b.cpus)?;
    h.aset(ruby.to_symbol("affinity_cpus"), b.affinity)?;
    let q = b.quota.as_ref();
    h.aset(
        ruby.to_symbol("quota_cpus"),
        q.map(|q| q.quota_us as f64 / q.period_us as f64),
    )?;
    h.aset(
        ruby.to_symbol("cgroup"),
        q.map(|q| q.dir.display().to_string()),
    )?;
    h.aset(ruby.to_symbol("cgroup_version"), q.map(|q| q.version))?;
    h.aset(
        ruby.to_symbol("free_cpus"),
        b.free_millicpus.map(|m| m as f64 / 1000.0),
    )?;
    h.aset(
        ruby.to_symbol("park_limit_ms"),
        b.park_limit.as_secs_f64() * 1000.0,
    )?;
    h.aset(ruby.to_symbol("reason"), b.reason)?;
    h.aset(ruby.to_symbol("portable"), !sys::LINUX)?;
    Ok(h)
}

/// The cgroup quota a /proc/<pid>/cgroup and mountinfo describe (crate::
/// cgroup), for the test that writes such files: nil, or the quota with
/// its group's usage and throttling read now.
fn cgroup_quota_for_tests(
    ruby: &Ruby,
    proc_cgroup: String,
    mountinfo: String,
) -> Result<Option<RHash>, Error> {
    let Some(q) = cgroup::find(proc_cgroup.as_ref(), mountinfo.as_ref()) else {
        return Ok(None);
    };
    let h = ruby.hash_new();
    h.aset(ruby.to_symbol("version"), q.version)?;
    h.aset(ruby.to_symbol("dir"), q.dir.display().to_string())?;
    h.aset(ruby.to_symbol("quota_us"), q.quota_us)?;
    h.aset(ruby.to_symbol("period_us"), q.period_us)?;
    h.aset(ruby.to_symbol("cpus"), q.cpus())?;
    let sample = q.sample();
    h.aset(ruby.to_symbol("usage_ns"), sample.usage_ns)?;
    h.aset(
        ruby.to_symbol("throttled_periods"),
        sample.throttled_periods,
    )?;
    Ok(Some(h))
}

/// A deliberate panic, for the test that proves panics never cross into
/// Ruby (test/bad_input_test.rb): the magnus wrapper turns it into a Ruby
/// exception. No other code path of the extension is known to panic.
fn internal_panic_for_tests() -> Result<(), Error> {
    panic!("rapid_thread: deliberate panic for the FFI-boundary test");
}

#[magnus::init]
fn init(ruby: &Ruby) -> Result<(), Error> {
    sys::install_fork_hook();
    sys::init_statics();
    sys::mark_main_ractor(ruby)?;
    spin::init();
    let module = ruby.define_module("RapidThread")?;
    module.define_singleton_method("spin_us", function!(spin::spin_us, 0))?;
    module.define_singleton_method("spin_us=", function!(spin::set_spin_us, 1))?;
    module.define_singleton_method("gvl_spin_us", function!(spin::gvl_spin_us, 0))?;
    module.define_singleton_method("gvl_spin_us=", function!(spin::set_gvl_spin_us, 1))?;
    module.define_singleton_method("spin_stats", function!(spin_stats, 0))?;
    module.define_singleton_method("cpu_budget", function!(cpu_budget, 0))?;
    module.define_singleton_method(
        "__cgroup_quota_for_tests",
        function!(cgroup_quota_for_tests, 2),
    )?;
    module.define_singleton_method("__panic_for_tests", function!(internal_panic_for_tests, 0))?;
    // How many forks deep this process is (0 in the process that loaded
    // the gem): RapidThread::Executor's fork check, without getpid(2).
    module.define_singleton_method("__fork_generation", function!(sys::fork_generation, 0))?;
    let queue = queue::init(ruby, module)?;
    sized_queue::init(module, queue)?;
    ractor_queue::init(ruby, module)?;
    select::init(module)?;
    condition_variable::init(ruby, module)?;
    task::init(ruby, module)?;
    thread_cache::init(ruby, module)?;
    Ok(())
}
