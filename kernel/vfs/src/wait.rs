//! Blocking: the one place where the file-system calls wait.
//!
//! A call that cannot proceed (reading an empty pipe, writing a full one,
//! opening a FIFO whose other end is not open, `poll` with nothing ready)
//! returns `EAGAIN` from the state-changing code, and its entry point in
//! [`crate::sys`] waits here *without* holding the file-system state, then
//! tries again.
//!
//! Waiting goes through the scheduler's kernel wait queue (`shoal_sched`),
//! one queue for everything the file system waits on: every state change
//! of a pipe wakes all waiters, which re-check (a spurious wake-up only
//! costs a retry). Other threads run meanwhile. When the process has a
//! single thread, nothing but time can change the state:
//!
//! - with a deadline, the thread sleeps until it (the tender's `poll`, no
//!   CPU used);
//! - without one, nobody could ever wake it — Linux would hang forever.
//!   Instead the call fails with `EDEADLK` ("resource deadlock would
//!   occur"), which no program retries in a loop (unlike `EINTR` or
//!   `EAGAIN`), and a one-line `shoal:` warning goes to stderr once. With
//!   several threads, a wait that nothing can end is reported by the
//!   scheduler's deadlock detection (every thread blocked, no deadline).
//!
//! With several threads of which none other can run, the wait is the idle
//! wait too (`shoal_sched::idle_for`): only the tender (a host socket,
//! standard input, a signal) or time can change anything, so blocking in
//! the run queue first would only cost a block, a pick and a wake-up.

use core::sync::atomic::{AtomicBool, Ordering};
use shoal_plat::Errno;

static WARNED: AtomicBool = AtomicBool::new(false);

/// The kernel wait queue of the file system.
const WAIT_KEY: u64 = shoal_sched::KERNEL_KEY | 0x7666_7300; // "vfs"

/// Waits until `deadline` (monotonic nanoseconds) or, with `None`, until
/// woken. `what` names the wait for the deadlock warning. `Ok`: try again.
pub fn block(what: &str, deadline: Option<u64>) -> Result<(), Errno> {
    block_on(WAIT_KEY, what, deadline)
}

/// [`block`] on the kernel wait queue `key` (`shoal_sched::KERNEL_KEY`
/// set) instead of this module's: for a waiter whose own object says when
/// it may go on (one host socket, `net`), which [`wake`] need not wake.
pub fn block_on(key: u64, what: &str, deadline: Option<u64>) -> Result<(), Errno> {
    if shoal_sched::thread_count() > 1 {
        // No other thread can run: straight to the idle wait, as below
        // (the others' deadlines included; see shoal_sched::idle_for).
        if let Some(interrupted) = shoal_sched::idle_for(deadline) {
            return if interrupted { Err(Errno::EINTR) } else { Ok(()) };
        }
        return match shoal_sched::wait_key(key, deadline) {
            Ok(()) | Err(Errno::ETIMEDOUT) => Ok(()),
            Err(e) => Err(e),
        };
    }
    // An armed interval timer ends the wait by its expiry (SIGALRM).
    let deadline = match (deadline, shoal_sched::itimer::deadline()) {
        (Some(d), Some(a)) => Some(d.min(a)),
        (d, a) => d.or(a),
    };
    // Something outside the guest (a host socket) may end the wait: block
    // for it in the tender (see shoal_sched::IdleWait). A signal the
    // tender forwarded meanwhile (SIGTERM) ends it with EINTR, as a
    // signal ends a blocking call on Linux.
    if shoal_sched::idle_wait(deadline) {
        return if shoal_sched::has_deliverable() { Err(Errno::EINTR) } else { Ok(()) };
    }
    match deadline {
        Some(d) => {
            shoal_time::sleep_until(d);
            shoal_sched::raise_host_signals();
            if shoal_sched::has_deliverable() {
                return Err(Errno::EINTR);
            }
            Ok(())
        }
        None => {
            if !WARNED.swap(true, Ordering::Relaxed) {
                use core::fmt::Write;
                let _ = writeln!(shoal_plat::console::Stderr, "shoal: deadlock: the only thread would wait forever on {what}; failing with EDEADLK");
            }
            Err(Errno::EDEADLK)
        }
    }
}

/// Tells waiters that pipe `ino` changed state (data, space, an end opened
/// or closed): every thread blocked in [`block`] re-checks.
pub fn wake(_ino: u64) {
    shoal_sched::wake_key(WAIT_KEY);
}
