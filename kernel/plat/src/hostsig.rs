//! Signals from the host: what the tender received for the instance
//! (`shoal_abi::FORWARDED_SIGNALS`, SIGTERM and SIGHUP; issue "Nginx and
//! Redis on shoal", clean stop).
//!
//! At boot the kernel registers [`WORD`], a word of its own data, with the
//! `SignalWord` hypercall; the tender's signal handler sets bit
//! `signal - 1` in it (atomically, from outside the guest's flow of
//! control) and thereby also ends the tender's wait in `NetPoll`. The
//! scheduler takes the word (`shoal_sched::raise_host_signals`) after every
//! idle wait and the syscall table after every system call, and raises
//! the signals in the program as Linux does for a signal sent to the
//! process.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The word the tender writes (8-aligned, in the kernel's writable data).
static WORD: AtomicU64 = AtomicU64::new(0);
/// Whether the tender took [`WORD`] (and so forwards signals).
static REGISTERED: AtomicBool = AtomicBool::new(false);

/// Registers [`WORD`] with the tender (at boot). A tender that refuses it
/// never forwards signals: the instance then ends of them as before.
#[cfg(not(test))]
pub fn init() {
    let r = crate::hypercall::signal_word(core::ptr::addr_of!(WORD) as u64);
    REGISTERED.store(r == 0, Ordering::Relaxed);
}

/// Whether signals from outside can arrive: a thread waiting only for a
/// signal (`pause`) is then not deadlocked.
pub fn registered() -> bool {
    REGISTERED.load(Ordering::Relaxed)
}

/// Takes the signals that arrived since the last call (bit `signal - 1`);
/// 0 if none. A plain load first: this runs after every system call
/// (inline: in the caller's crate, without cross-crate LTO).
#[inline]
pub fn take() -> u64 {
    if WORD.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    WORD.swap(0, Ordering::SeqCst)
}

/// Whether a forwarded signal is waiting to be taken (without taking it):
/// a sleep in the tender that a signal cut short ends here instead of
/// sleeping on to its deadline.
pub fn pending() -> bool {
    WORD.load(Ordering::Relaxed) != 0
}

/// [`pending`], inline: for the system-call table's way out, which asks at
/// every call. Components call the out-of-line one: inlined, their code
/// would address this crate's word PC-relatively and no longer be the
/// same bytes in images of other layouts (docs/versioning.md).
#[inline]
pub fn pending_inline() -> bool {
    WORD.load(Ordering::Relaxed) != 0
}

/// What the tender's handler does to the word: unit tests of the
/// components that take it stand in for the tender with this.
#[doc(hidden)]
pub fn arrive(sig: i32) {
    WORD.fetch_or(1 << (sig - 1), Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    #[test]
    fn signals_are_taken_once() {
        assert_eq!(super::take(), 0);
        assert!(!super::pending());
        super::arrive(15);
        assert!(super::pending(), "pending does not take");
        super::arrive(1);
        super::arrive(15);
        assert_eq!(super::take(), (1 << 14) | 1);
        assert_eq!(super::take(), 0);
    }
}
