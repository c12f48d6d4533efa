//! Kernel component `process` (DESIGN §6): the process as the program
//! sees it.
//!
//! One process (pid 1, parent 0) with one thread (tid 1). This component
//! holds its identity, its exit, its thread pointer (`arch_prctl`), its
//! resource limits and usage, and its signal state ([`signal`]): actions,
//! mask, pending set and alternate stack, with signals the process sends
//! itself delivered synchronously (there are no asynchronous signals: no
//! other process, no timers, no faults reported as signals yet).
#![cfg_attr(not(test), no_std)]

pub mod limits;
pub mod signal;
pub mod sys;

use shoal_plat::Global;

/// The process id.
pub const PID: u64 = 1;
/// The parent's process id (none: 0, like a container's init).
pub const PPID: u64 = 0;
/// The id of the one thread.
pub const TID: u64 = 1;

/// Thread bookkeeping that libc hands the kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadState {
    /// `set_tid_address`: where to clear the tid when the thread exits.
    pub clear_child_tid: u64,
    /// `set_robust_list`: head of the robust futex list.
    pub robust_list: u64,
}

static THREAD: Global<ThreadState> = Global::new(ThreadState { clear_child_tid: 0, robust_list: 0 });

/// The thread's bookkeeping.
pub fn thread_state() -> ThreadState {
    THREAD.with(|t| *t)
}

/// Ends the instance with exit status `status & 0xff`, as Linux reports
/// `exit_group(status)` to the parent.
pub fn exit(status: i64) -> ! {
    shoal_plat::halt(status & 0xff)
}
