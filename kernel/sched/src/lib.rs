//! Kernel component `sched` (DESIGN §6): threads, futexes, scheduling.
//!
//! For now there is exactly one thread, which owns the one vCPU: yielding
//! is a no-op, a futex wake finds no waiter, and a futex wait either
//! returns at once (value changed), sleeps until its timeout through the
//! tender's `poll` (`ETIMEDOUT`), or, without a timeout, could never end:
//! no other thread exists and no signal can arrive while blocked, so the
//! kernel reports the deadlock and stops the instance (Linux would hang
//! forever; an instance that can never make progress again is better ended
//! with a diagnostic, like Go's runtime does). Thread creation
//! ([`__shoal_clone`]) comes with cooperative threads in a later issue and
//! returns `-ENOSYS` until then.
#![cfg_attr(not(test), no_std)]

pub mod sys;

/// Called by shoal's musl instead of the `clone` system call, with the
/// arguments of musl's `__clone(func, stack, flags, arg, ptid, tls, ctid)`.
/// Threads are not implemented yet: returns `-ENOSYS` (musl's
/// `pthread_create` then fails with `EAGAIN`).
#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn __shoal_clone(
    _func: usize,
    _stack: usize,
    _flags: i32,
    _arg: usize,
    _ptid: usize,
    _tls: usize,
    _ctid: usize,
) -> i32 {
    -shoal_plat::Errno::ENOSYS.0
}

/// Called by shoal's musl when an exiting detached thread frees its own
/// stack (`__unmapself`). With a single thread only the last thread could
/// get here: the range is released in mm and the process exits with status
/// 0 (musl's `pthread_exit` of the last thread exits with 0 as well). The
/// stack being released is the one this function runs on: mm only records
/// it as free (nothing overwrites it before it is handed out again), and
/// nothing runs after the exit.
#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn __shoal_unmapself(base: usize, size: usize) -> ! {
    let _ = shoal_mm::unmap(base as u64, size as u64);
    shoal_plat::halt(0)
}

/// Reports that the only thread waits for something that can never happen
/// and ends the instance with status 1.
pub fn deadlock(what: &str) -> ! {
    use core::fmt::Write;
    let _ = writeln!(shoal_plat::console::Stderr, "shoal: deadlock: the only thread waits on {what} that nobody can wake");
    shoal_plat::halt(1)
}
