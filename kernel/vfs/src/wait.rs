//! Blocking: the one place where the file-system calls wait.
//!
//! A call that cannot proceed (reading an empty pipe, writing a full one,
//! opening a FIFO whose other end is not open, `poll` with nothing ready)
//! returns `EAGAIN` from the state-changing code, and its entry point in
//! [`crate::sys`] waits here *without* holding the file-system state, then
//! tries again. Until `sched` offers a way to wait for a wake-up (threads
//! are being added there), the only thread of the process owns the CPU:
//!
//! - with a deadline, nothing in the process can change while it sleeps,
//!   so sleeping until the deadline (`shoal_time::sleep_until`, which blocks
//!   in the tender's `poll` and uses no CPU) is exact;
//! - without one, nobody could ever wake it: Linux would hang forever.
//!   Instead the call fails with `EDEADLK` ("resource deadlock would
//!   occur"), which no program retries in a loop (unlike `EINTR` or
//!   `EAGAIN`), and a one-line `shoal:` warning goes to stderr once.
//!
//! When `sched` gets a wait queue, [`block`] (which then needs the key
//! of what it waits on) and [`wake`] are the functions to switch.

use core::sync::atomic::{AtomicBool, Ordering};
use shoal_plat::Errno;

static WARNED: AtomicBool = AtomicBool::new(false);

/// Waits until `deadline` (monotonic nanoseconds) or, with `None`, until
/// woken. `what` names the wait for the deadlock warning. `Ok`: try again.
pub fn block(what: &str, deadline: Option<u64>) -> Result<(), Errno> {
    match deadline {
        Some(d) => {
            shoal_time::sleep_until(d);
            Ok(())
        }
        None => {
            if !WARNED.swap(true, Ordering::Relaxed) {
                use core::fmt::Write;
                let _ = writeln!(
                    shoal_plat::console::Stderr,
                    "shoal: deadlock: the only thread would wait forever on {what}; failing with EDEADLK"
                );
            }
            Err(Errno::EDEADLK)
        }
    }
}

/// Tells waiters on pipe `ino` that its state changed (data, space, an end
/// opened or closed). Nothing waits while there is one thread; with a wait
/// queue in `sched`, this wakes the threads [`block`] parked on `ino`.
pub fn wake(_ino: u64) {}
