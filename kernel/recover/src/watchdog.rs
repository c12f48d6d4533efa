//! The hang watchdog's kernel side: a gated call into a
//! rebootable component that runs longer than the limit
//! (`shoal run --watchdog MS`, default 1 s: [`shoal_abi::BootInfo::watchdog_ns`])
//! is stopped and the component rebooted, as after a panic (retry once,
//! then `EIO`).
//!
//! The kernel cannot watch itself (a component that spins never gives it
//! the vCPU back), so the tender does, with the preemption tick
//! (`shoal_sched::preempt`): the gate publishes which component it entered
//! and numbers the call ([`begin`], [`end`]: the `watch` and `watch_seq`
//! words of [`shoal_abi::PreemptArea`]); the tick ages the call in
//! progress, and once it is older than the limit the tender sends the
//! vCPU to the kernel's fault entry (`shoal_recover_fault`) with
//! [`shoal_abi::FAULT_HANG`] instead of a signal number. [`on_hang`] then
//! abandons the call like a fault.
//!
//! Only calls into rebootable components are watched: a long computation
//! in the application, or a call into a component that cannot be rebooted
//! yet, is never interrupted (the instance runs on, as before). A
//! rebootable component reached from one that is not (vfs from `mm`) is
//! watched from the moment it is entered ([`begin_nested`], through
//! `shoal_recover::enter`) until it returns, so a hang there is caught
//! while a long wait in the other component is not. (vfs reached from
//! net's `read` and `write`, which serve sockets and hand every other
//! descriptor to vfs, is inside net's own watched call since net is
//! rebootable too; a hang there is still vfs's: the component the call
//! is in when the watchdog stops it.) A call that blocks —
//! vfs waiting on a pipe, process in `sigsuspend` or `semop` — is taken
//! out of the watchdog's sight while it waits (the scheduler's
//! `reschedule` and `idle_wait`: `shoal_sched::preempt::watch_pause`), and
//! watched again, with a fresh age, once it runs: a call's watched age is
//! its running time.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// Whether calls are watched (the tender runs a watchdog).
static ON: AtomicBool = AtomicBool::new(false);
/// The limit, for the message (ns).
static LIMIT_NS: AtomicU64 = AtomicU64::new(0);

/// Turns the watchdog on with the tender's limit (ns; 0: off). At boot.
pub fn init(limit_ns: u64) {
    LIMIT_NS.store(limit_ns, Relaxed);
    ON.store(limit_ns != 0, Relaxed);
}

/// A gated call into rebootable component `c` begins.
#[inline]
pub fn begin(c: u8) {
    if ON.load(Relaxed) {
        shoal_sched::preempt::watch_begin(u64::from(c));
    }
}

/// Component `c` (rebootable) is entered without passing the system-call
/// table (vfs from net's `read` and `write` gate, or from `mm`): watched
/// from here if no call is watched yet — the gate of a component that
/// cannot be rebooted watches nothing, yet a hang in the rebootable one
/// it reaches is recoverable. `true` if this started the watch (the
/// caller ends it with [`end`] when it leaves `c`).
#[inline]
pub fn begin_nested(c: u8) -> bool {
    if ON.load(Relaxed) && shoal_sched::preempt::watching() == 0 {
        shoal_sched::preempt::watch_begin(u64::from(c));
        return true;
    }
    false
}

/// The gated call has ended, or was abandoned after a failure.
#[inline]
pub fn end() {
    if ON.load(Relaxed) {
        shoal_sched::preempt::watch_end();
    }
}

/// The message for a call into `name` stopped by the watchdog at `rip`.
pub fn describe(w: &mut impl core::fmt::Write, name: &str, rip: u64) {
    let ms = LIMIT_NS.load(Relaxed) / 1_000_000;
    let _ = writeln!(w, "shoal: hang in {name}: a call ran longer than the watchdog's {ms} ms (stopped at rip {rip:#x})");
}
