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
//!
//! A kernel that never returns (a hang with the watchdog off) never takes
//! them: the run loop then stops the guest itself (`shoal_loader::stop`).
//! The handler notes whether the word was empty when the signal came (a
//! fresh signal: the run loop starts the grace period and arms a one-shot
//! POSIX timer, `SIGURG` to the run thread, for its end) or still held an
//! untaken one (a second signal: stop at once). At the timer the run loop
//! looks at the word: still set, the guest is stopped.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, Ordering};

static PENDING: AtomicU64 = AtomicU64::new(0);
/// A forwarded signal arrived and the run loop has not yet sent the vCPU
/// to look at it.
static ARRIVED: AtomicBool = AtomicBool::new(false);
static WORD: AtomicPtr<AtomicU64> = AtomicPtr::new(core::ptr::null_mut());
/// The thread that runs the vCPU and sleeps in the guest's waits.
static RUN_TID: AtomicI32 = AtomicI32::new(0);
/// A signal came with the word empty (bit `signal - 1`): the run loop
/// starts the grace period.
static FRESH: AtomicU64 = AtomicU64::new(0);
/// A signal came while an earlier one was untaken: that earlier one's
/// signal number (the run loop stops the guest with it).
static SECOND: AtomicI32 = AtomicI32::new(0);
/// The grace timer fired (the run loop looks at the word).
static EXPIRED: AtomicBool = AtomicBool::new(false);
/// The signal that marks the end of the grace period (the timer's).
const GRACE_SIGNAL: libc::c_int = libc::SIGURG;

fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

extern "C" fn on_forwarded(sig: libc::c_int) {
    if !(1..=64).contains(&sig) {
        return;
    }
    // A process-directed signal may land on another thread of this process
    // (the caller of `run` may have some): then the run thread, asleep in
    // the guest's `Poll` or `NetPoll`, would sleep on. Pass it there, to
    // be handled once: a second arrival would look like a second signal.
    let run = RUN_TID.load(Ordering::SeqCst);
    if run != 0 && run != gettid() {
        // SAFETY: tgkill to a thread of this process; async-signal-safe.
        unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), run, sig) };
        return;
    }
    let bit = 1u64 << (sig - 1);
    let before = PENDING.fetch_or(bit, Ordering::SeqCst);
    let w = WORD.load(Ordering::SeqCst);
    // What was untaken when this one came: the word once registered (the
    // kernel empties it when it takes), before that what came earlier.
    let untaken = if w.is_null() {
        before
    } else {
        // SAFETY: `w` points at an 8-aligned word of guest memory checked at
        // registration; `clear` removes it before that memory is unmapped.
        unsafe { (*w).fetch_or(bit, Ordering::SeqCst) }
    };
    if untaken == 0 {
        FRESH.fetch_or(bit, Ordering::SeqCst);
    } else {
        let _ = SECOND.compare_exchange(0, shoal_loader::stop::first_signal(untaken), Ordering::SeqCst, Ordering::SeqCst);
    }
    // A program busy in a loop makes no exit that would look at the word:
    // the run loop stops it where it is (`crate::preempt::interrupt`).
    ARRIVED.store(true, Ordering::SeqCst);
    crate::preempt::kick();
}

/// The grace timer's handler: the run loop looks at the word now.
extern "C" fn on_grace(_sig: libc::c_int) {
    EXPIRED.store(true, Ordering::SeqCst);
    crate::preempt::kick();
}

/// Catches the forwarded signals (no `SA_RESTART`: a wait they interrupt
/// returns to the guest) and the grace timer's; the calling thread is the
/// one that runs the vCPU.
pub fn install() -> std::io::Result<()> {
    RUN_TID.store(gettid(), Ordering::SeqCst);
    PENDING.store(0, Ordering::SeqCst);
    FRESH.store(0, Ordering::SeqCst);
    SECOND.store(0, Ordering::SeqCst);
    EXPIRED.store(false, Ordering::SeqCst);
    catch(GRACE_SIGNAL, on_grace)?;
    for sig in shoal_abi::FORWARDED_SIGNALS {
        catch(sig, on_forwarded)?;
    }
    Ok(())
}

/// Installs `handler` for `sig`, without `SA_RESTART` (see [`install`]).
/// Only for handlers that touch nothing but atomics (async-signal-safe).
fn catch(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is valid (no flags, empty mask after
    // sigemptyset); the handlers passed here only touch atomics.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(sig, &sa, core::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
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

/// In a copy of a template (`crate::template`): the run thread is this
/// process's.
pub fn after_fork() {
    RUN_TID.store(gettid(), Ordering::SeqCst);
}

/// Forgets the guest's word (before guest memory is unmapped).
pub fn clear() {
    WORD.store(core::ptr::null_mut(), Ordering::SeqCst);
    RUN_TID.store(0, Ordering::SeqCst);
}

/// The run loop's side of stopping a guest that does not take a
/// forwarded signal (see the module documentation): the grace period and
/// its timer.
pub struct Grace {
    /// The grace period (ns).
    limit_ns: u64,
    /// The untaken signal and when its grace ends.
    waiting: Option<(i32, std::time::Instant)>,
    /// The one-shot timer (made at the first fresh signal).
    timer: Option<libc::timer_t>,
}

impl Grace {
    /// No signal waiting; `limit_ns` is `--stop-timeout`'s.
    pub fn new(limit_ns: u64) -> Grace {
        Grace { limit_ns, waiting: None, timer: None }
    }

    /// After every wake-up of the run loop, with the vCPU stopped: the
    /// signal whose grace is over (or that a second signal overtook) and
    /// why, if the guest must be stopped now. Cheap when nothing came: two
    /// atomic loads.
    pub fn check(&mut self) -> Result<Option<(i32, shoal_loader::stop::NotTaken)>, String> {
        let second = SECOND.load(Ordering::SeqCst);
        if second != 0 {
            return Ok(Some((second, shoal_loader::stop::NotTaken::Second)));
        }
        let fresh = FRESH.load(Ordering::Relaxed);
        if fresh != 0 {
            FRESH.fetch_and(!fresh, Ordering::SeqCst);
            let end = std::time::Instant::now() + std::time::Duration::from_nanos(self.limit_ns);
            self.waiting = Some((shoal_loader::stop::first_signal(fresh), end));
            self.arm(self.limit_ns)?;
        }
        if !(EXPIRED.load(Ordering::Relaxed) && EXPIRED.swap(false, Ordering::SeqCst)) {
            return Ok(None);
        }
        let Some((sig, end)) = self.waiting else { return Ok(None) };
        if !waiting_in_word() && !WORD.load(Ordering::SeqCst).is_null() {
            // Taken: the program's handler may take as long as it likes.
            self.waiting = None;
            return Ok(None);
        }
        let now = std::time::Instant::now();
        if now < end {
            // An early or stray SIGURG: wait for the rest.
            self.arm((end - now).as_nanos().max(1) as u64)?;
            return Ok(None);
        }
        Ok(Some((sig, shoal_loader::stop::NotTaken::Timeout(self.limit_ns))))
    }

    /// Arms the one-shot timer to fire in `ns`, making it the first time.
    fn arm(&mut self, ns: u64) -> Result<(), String> {
        let t = match self.timer {
            Some(t) => t,
            None => {
                // SAFETY: a zeroed sigevent is valid; the fields set make it
                // a signal to the run thread; `id` receives the timer.
                let (rc, id) = unsafe {
                    let mut ev: libc::sigevent = core::mem::zeroed();
                    ev.sigev_notify = libc::SIGEV_THREAD_ID;
                    ev.sigev_signo = GRACE_SIGNAL;
                    ev.sigev_notify_thread_id = gettid();
                    let mut id: libc::timer_t = core::ptr::null_mut();
                    (libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut id), id)
                };
                if rc != 0 {
                    return Err(format!("cannot make the stop timer: {}", std::io::Error::last_os_error()));
                }
                self.timer = Some(id);
                id
            }
        };
        let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        let value = libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long };
        let it = libc::itimerspec { it_interval: zero, it_value: value };
        // SAFETY: `t` was made by timer_create and not deleted; `it` is valid.
        if unsafe { libc::timer_settime(t, 0, &it, core::ptr::null_mut()) } != 0 {
            return Err(format!("cannot arm the stop timer: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

impl Drop for Grace {
    fn drop(&mut self) {
        if let Some(t) = self.timer.take() {
            // SAFETY: made by timer_create in `arm` and deleted once.
            unsafe { libc::timer_delete(t) };
        }
    }
}
