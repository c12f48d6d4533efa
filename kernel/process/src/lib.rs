//! Kernel component `process` (docs/design.md "Components and recovery"): the process as the program
//! sees it.
//!
//! One process (pid 1, parent 0) whose threads live in `sched` (the
//! initial thread is tid 1). This component holds its identity, its exit,
//! the thread pointer (`arch_prctl`), resource limits and usage, and the
//! signal state ([`signal`]): actions and alternate stack per process, mask
//! and pending set per thread (stored in sched's thread control blocks),
//! with real-time signals queued and handlers entered on Linux's signal
//! frames (no faults reported as signals yet).
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod heal;
pub mod ipc;
pub mod limits;
pub mod signal;
pub mod sys;

/// Serializes the unit tests: the kernel's state (signals, sched's
/// thread table) is one flow of control's, and the test harness runs
/// tests on several threads.
#[cfg(test)]
pub(crate) static TEST_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The process id.
pub const PID: u64 = 1;
/// The parent's process id (none: 0, like a container's init).
pub const PPID: u64 = 0;
/// The id of the initial thread.
pub const TID: u64 = 1;

/// Ends the instance with exit status `status & 0xff`, as Linux reports
/// `exit_group(status)` to the parent.
pub fn exit(status: i64) -> ! {
    shoal_plat::halt(status & 0xff)
}
