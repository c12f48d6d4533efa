//! The signals the VMM hands to its guest (`shoal_abi::FORWARDED_SIGNALS`:
//! SIGTERM, SIGHUP; issue "Nginx and Redis on shoal", clean stop).
//!
//! While [`run`](crate::run) has a guest, this process catches them: the
//! handler sets the signal's bit in the word the guest registered with the
//! `SignalWord` hypercall (through the VMM's mapping of guest memory,
//! atomically; the guest kernel swaps it out) and, by arriving, ends the
//! VMM's `ppoll` in `NetPoll` (or `KVM_RUN`), so an idle guest looks at
//! the word at once; a guest interrupted in the program's code is sent to
//! the kernel's preemption entry by the run loop, as a tick does, so a
//! program busy in a loop gets the signal too. The kernel then raises the
//! signal in the program, which stops the way it does on Linux. Signals
//! that arrive before the guest registers its word are kept and handed
//! over at registration.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, Ordering};

static PENDING: AtomicU64 = AtomicU64::new(0);
/// A forwarded signal arrived and the run loop has not yet sent the vCPU
/// to look at it.
static ARRIVED: AtomicBool = AtomicBool::new(false);
static WORD: AtomicPtr<AtomicU64> = AtomicPtr::new(core::ptr::null_mut());
/// The thread that runs the vCPU and sleeps in the guest's waits.
static RUN_TID: AtomicI32 = AtomicI32::new(0);

fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

extern "C" fn on_forwarded(sig: libc::c_int) {
    if !(1..=64).contains(&sig) {
        return;
    }
    let bit = 1u64 << (sig - 1);
    PENDING.fetch_or(bit, Ordering::SeqCst);
    let w = WORD.load(Ordering::SeqCst);
    if !w.is_null() {
        // SAFETY: `w` points at an 8-aligned word of guest memory checked at
        // registration; `clear` removes it before that memory is unmapped.
        unsafe { (*w).fetch_or(bit, Ordering::SeqCst) };
    }
    // A program busy in a loop makes no exit that would look at the word:
    // the run loop stops it where it is (`crate::preempt::interrupt`).
    ARRIVED.store(true, Ordering::SeqCst);
    crate::preempt::kick();
    // A process-directed signal may land on another thread of this process
    // (the caller of `run` may have some): then the run thread, asleep in
    // the guest's `Poll` or `NetPoll`, would sleep on. Send it there too;
    // the word's bits make the second arrival harmless.
    let run = RUN_TID.load(Ordering::SeqCst);
    if run != 0 && run != gettid() {
        // SAFETY: tgkill to a thread of this process; async-signal-safe.
        unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), run, sig) };
    }
}

/// Catches the forwarded signals (no `SA_RESTART`: a wait they interrupt
/// returns to the guest); the calling thread is the one that runs the vCPU.
pub fn install() -> std::io::Result<()> {
    RUN_TID.store(gettid(), Ordering::SeqCst);
    for sig in shoal_abi::FORWARDED_SIGNALS {
        // SAFETY: a zeroed sigaction is valid; the handler only touches
        // atomics (async-signal-safe).
        unsafe {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = on_forwarded as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, core::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Registers the guest's word at host address `host` (an 8-aligned,
/// writable word of guest memory, checked by the caller) and hands it the
/// signals that arrived before.
pub fn register(host: *mut u8) {
    let w = host.cast::<AtomicU64>();
    WORD.store(w, Ordering::SeqCst);
    // SAFETY: as in `on_forwarded`.
    unsafe { (*w).fetch_or(PENDING.load(Ordering::SeqCst), Ordering::SeqCst) };
}

/// Whether the guest's word holds a signal it has not taken yet.
pub fn waiting_in_word() -> bool {
    let w = WORD.load(Ordering::SeqCst);
    // SAFETY: as in `on_forwarded`.
    !w.is_null() && unsafe { (*w).load(Ordering::SeqCst) } != 0
}

/// Whether a forwarded signal arrived since the last call (taking it).
pub fn take_arrived() -> bool {
    ARRIVED.load(Ordering::Relaxed) && ARRIVED.swap(false, Ordering::SeqCst)
}

/// Forgets the guest's word (before guest memory is unmapped).
pub fn clear() {
    WORD.store(core::ptr::null_mut(), Ordering::SeqCst);
    RUN_TID.store(0, Ordering::SeqCst);
}
