//! Preemption ticks on spt (issue 17, item 7; the protocol is
//! `shoal_abi::PreemptArea`'s).
//!
//! The tick is the process's `ITIMER_REAL` timer: `SIGALRM` every 10 ms
//! (the period the kernel asks for), armed by the `Preempt` hypercall only
//! when the guest has more than one runnable thread, and disarmed by the
//! first tick that finds at most one. The guest's own `SIGALRM`
//! (`setitimer`, `alarm`) is its kernel's business and never a host signal,
//! so the host signal is free for this.
//!
//! [`on_tick`] runs on the alternate signal stack with every signal
//! blocked and the guest's FS base loaded: atomics and raw system calls
//! only. It redirects the interrupted context (`uc_mcontext.rip`) to the
//! kernel's preemption entry only when the interrupted instruction is guest
//! code (inside guest memory: never the tender's own hypercall code) and
//! the kernel's `in_kernel` word is clear; otherwise it sets `pending`.
//! The area and the entry are the guest's; a guest that lies in them
//! redirects only itself, inside its own memory. `sigreturn` restores the
//! rest of the interrupted state (registers, FPU/SSE/AVX, signal mask).
//!
//! The same tick is the hang watchdog's (issue 19): while a gated call into
//! a rebootable kernel component is in progress (`watch`), the tick runs
//! even with one thread — at the watchdog's period when nobody needs
//! preempting ([`shoal_abi::PREEMPT_ARMED_WATCHDOG`], armed by the kernel's
//! `PREEMPT_WATCH`) — and [`shoal_loader::watchdog::step`] ages the call;
//! a call older than the limit is stopped: the thread goes to the kernel's
//! fault entry (`crate::signals::redirect_hang`), which reboots the
//! component. A tick that finds neither a thread to preempt nor a call in
//! progress disarms, so a program whose gated calls are short gets at most
//! one watchdog tick per period of its run.

use core::sync::atomic::{AtomicU64, Ordering};

/// The guest's area (`shoal_abi::PreemptArea`) as atomics, once registered.
static AREA: AtomicU64 = AtomicU64::new(0);
/// The kernel's preemption entry.
static ENTRY: AtomicU64 = AtomicU64::new(0);
/// Guest memory `[LOW, HIGH)`: the instruction pointers a tick may redirect.
static LOW: AtomicU64 = AtomicU64::new(0);
static HIGH: AtomicU64 = AtomicU64::new(0);
/// Preemption ticks that reached the instance (reported to the waiting
/// parent).
static TICKS: core::sync::atomic::AtomicPtr<AtomicU64> = core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());
/// Watchdog-only ticks (the timer at the watchdog's period), reported apart.
static WATCH_TICKS: core::sync::atomic::AtomicPtr<AtomicU64> = core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());
/// The watchdog's limit (ns; 0: off), the period the timer runs at now
/// (ns), the preemption period the kernel asked for, and the watchdog's
/// state between ticks (`shoal_loader::watchdog::Watch`).
static LIMIT: AtomicU64 = AtomicU64::new(0);
static PERIOD: AtomicU64 = AtomicU64::new(0);
static TICK_NS: AtomicU64 = AtomicU64::new(shoal_abi::PREEMPT_TICK_NS);
static WATCH_SEQ: AtomicU64 = AtomicU64::new(0);
static WATCH_AGE: AtomicU64 = AtomicU64::new(0);

use shoal_abi::preempt_word::{ARMED, IN_KERNEL, PENDING, RESUME_RIP, RUNNABLE, TICKS as AREA_TICKS, WATCH, WATCH_SEQ as AREA_WATCH_SEQ};
use shoal_abi::{PREEMPT_ARMED_TICK, PREEMPT_ARMED_WATCHDOG};
const AREA_WORDS: u64 = (core::mem::size_of::<shoal_abi::PreemptArea>() / 8) as u64;

/// Sets guest memory's bounds, the watchdog's limit (ns, 0: off) and
/// where ticks are counted for the parent (in the child, before the guest
/// runs): preemption ticks and watchdog-only ticks.
pub fn install(low: u64, high: u64, watchdog_ns: u64, ticks: Option<(&'static AtomicU64, &'static AtomicU64)>) {
    LOW.store(low, Ordering::Relaxed);
    HIGH.store(high, Ordering::Relaxed);
    LIMIT.store(watchdog_ns, Ordering::Relaxed);
    if let Some((t, w)) = ticks {
        TICKS.store(core::ptr::from_ref(t).cast_mut(), Ordering::Relaxed);
        WATCH_TICKS.store(core::ptr::from_ref(w).cast_mut(), Ordering::Relaxed);
    }
}

fn word(i: usize) -> Option<&'static AtomicU64> {
    let a = AREA.load(Ordering::SeqCst);
    if a == 0 {
        return None;
    }
    // SAFETY: `register` checked [a, a + size of the area) as 8-aligned,
    // writable guest memory, which stays mapped for the process's life.
    Some(unsafe { &*(a as *const AtomicU64).add(i) })
}

/// `Preempt`/`PREEMPT_REGISTER`: `area` must be 8-aligned writable guest
/// memory (checked by `writable`), `entry` inside guest memory.
pub fn register(area: u64, entry: u64, writable: impl Fn(u64, u64) -> bool) -> i64 {
    let (low, high) = (LOW.load(Ordering::Relaxed), HIGH.load(Ordering::Relaxed));
    if !area.is_multiple_of(8) || !(low..high).contains(&entry) {
        return -i64::from(libc::EINVAL);
    }
    if !writable(area, AREA_WORDS * 8) {
        return -i64::from(libc::EFAULT);
    }
    ENTRY.store(entry, Ordering::SeqCst);
    AREA.store(area, Ordering::SeqCst);
    0
}

/// `setitimer(ITIMER_REAL, period)` as a raw system call (the filter
/// allows exactly this; no errno, no thread pointer). 0 stops the timer.
fn set_timer(period_ns: u64) -> i64 {
    PERIOD.store(period_ns, Ordering::Relaxed);
    let us = (period_ns / 1000) as i64;
    let tv = libc::timeval { tv_sec: us / 1_000_000, tv_usec: us % 1_000_000 };
    let it = libc::itimerval { it_interval: tv, it_value: tv };
    let rc: i64;
    // SAFETY: setitimer reads `it` (valid for the call) and writes nothing
    // (old value NULL); the syscall instruction clobbers rcx and r11.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") libc::SYS_setitimer => rc,
            in("rdi") libc::ITIMER_REAL,
            in("rsi") &it as *const libc::itimerval,
            in("rdx") 0u64,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack)
        )
    };
    rc
}

/// `Preempt`/`PREEMPT_ARM`: starts the tick (every `tick_ns`, at least
/// `shoal_abi::PREEMPT_MIN_TICK_NS`).
pub fn arm(tick_ns: u64) -> i64 {
    let Some(armed) = word(ARMED) else {
        return -i64::from(libc::EINVAL);
    };
    let tick = tick_ns.clamp(shoal_abi::PREEMPT_MIN_TICK_NS, 1_000_000_000);
    TICK_NS.store(tick, Ordering::Relaxed);
    let rc = set_timer(tick);
    if rc == 0 {
        armed.store(PREEMPT_ARMED_TICK, Ordering::SeqCst);
    }
    rc
}

/// `Preempt`/`PREEMPT_WATCH`: a gated call began with the tick off: run
/// the tick at the watchdog's period, counting the call's age from now.
/// Nothing to do when the tick runs already or there is no watchdog.
pub fn watch() -> i64 {
    let (Some(armed), Some(seq)) = (word(ARMED), word(AREA_WATCH_SEQ)) else {
        return -i64::from(libc::EINVAL);
    };
    let limit = LIMIT.load(Ordering::Relaxed);
    if limit == 0 || armed.load(Ordering::SeqCst) != 0 {
        return 0;
    }
    WATCH_SEQ.store(seq.load(Ordering::SeqCst), Ordering::Relaxed);
    WATCH_AGE.store(0, Ordering::Relaxed);
    let rc = set_timer(limit);
    if rc == 0 {
        armed.store(PREEMPT_ARMED_WATCHDOG, Ordering::SeqCst);
    }
    rc
}

fn count(counter: &core::sync::atomic::AtomicPtr<AtomicU64>) {
    let t = counter.load(Ordering::Relaxed);
    if !t.is_null() {
        // SAFETY: the report page, mapped for the process's life.
        unsafe { (*t).fetch_add(1, Ordering::Relaxed) };
    }
}

/// The `SIGALRM` handler: one tick (see the module documentation).
pub extern "C" fn on_tick(_sig: libc::c_int, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let (Some(runnable), Some(in_kernel), Some(pending), Some(resume), Some(armed), Some(ticks), Some(watch), Some(seq)) =
        (word(RUNNABLE), word(IN_KERNEL), word(PENDING), word(RESUME_RIP), word(ARMED), word(AREA_TICKS), word(WATCH), word(AREA_WATCH_SEQ))
    else {
        count(&TICKS);
        set_timer(0);
        return;
    };
    let mode = armed.load(Ordering::SeqCst);
    count(if mode == PREEMPT_ARMED_WATCHDOG { &WATCH_TICKS } else { &TICKS });
    ticks.fetch_add(1, Ordering::Relaxed);
    // The watchdog first: a hang is stopped whether or not other threads
    // wait.
    let limit = LIMIT.load(Ordering::Relaxed);
    let prev = shoal_loader::watchdog::Watch { seq: WATCH_SEQ.load(Ordering::Relaxed), age_ns: WATCH_AGE.load(Ordering::Relaxed) };
    let (w, verdict) = shoal_loader::watchdog::step(prev, watch.load(Ordering::SeqCst), seq.load(Ordering::SeqCst), PERIOD.load(Ordering::Relaxed), limit);
    WATCH_SEQ.store(w.seq, Ordering::Relaxed);
    WATCH_AGE.store(w.age_ns, Ordering::Relaxed);
    if verdict == shoal_loader::watchdog::Verdict::Hang && crate::signals::redirect_hang(ctx) {
        WATCH_AGE.store(0, Ordering::Relaxed);
        return;
    }
    if runnable.load(Ordering::SeqCst) <= 1 {
        if verdict == shoal_loader::watchdog::Verdict::Idle {
            set_timer(0);
            armed.store(0, Ordering::SeqCst);
        } else if mode != PREEMPT_ARMED_WATCHDOG {
            // Nobody to preempt, a call to watch: the watchdog's period.
            set_timer(limit);
            armed.store(PREEMPT_ARMED_WATCHDOG, Ordering::SeqCst);
        }
        return;
    }
    if mode != PREEMPT_ARMED_TICK {
        set_timer(TICK_NS.load(Ordering::Relaxed));
        armed.store(PREEMPT_ARMED_TICK, Ordering::SeqCst);
    }
    interrupt_with(ctx, in_kernel, pending, resume);
}

/// Makes the guest's kernel look at what came for it now, from a signal
/// handler whose `ctx` is the interrupted guest's context: sent to the
/// preemption entry if the signal landed in the program's code (the entry
/// yields, raises forwarded host signals and delivers what is pending —
/// so a SIGTERM reaches a program that computes in a loop, as on Linux);
/// in the kernel or the tender, `pending` makes the kernel do the same on
/// its way out of the system call. Nothing before the guest registered
/// its area.
pub fn interrupt(ctx: *mut libc::c_void) {
    if let (Some(in_kernel), Some(pending), Some(resume)) = (word(IN_KERNEL), word(PENDING), word(RESUME_RIP)) {
        interrupt_with(ctx, in_kernel, pending, resume);
    }
}

fn interrupt_with(ctx: *mut libc::c_void, in_kernel: &AtomicU64, pending: &AtomicU64, resume: &AtomicU64) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO
    // handler; it is ours to change until sigreturn.
    let uc = unsafe { &mut *ctx.cast::<libc::ucontext_t>() };
    let rip = uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64;
    let guest_code = (LOW.load(Ordering::Relaxed)..HIGH.load(Ordering::Relaxed)).contains(&rip);
    if in_kernel.load(Ordering::SeqCst) != 0 || !guest_code {
        pending.store(1, Ordering::SeqCst);
        return;
    }
    resume.store(rip, Ordering::SeqCst);
    in_kernel.store(1, Ordering::SeqCst);
    uc.uc_mcontext.gregs[libc::REG_RIP as usize] = ENTRY.load(Ordering::SeqCst) as i64;
}

/// Installs [`on_tick`] for `SIGALRM`: `SA_SIGINFO | SA_ONSTACK |
/// SA_RESTART` (a tender system call it interrupts goes on), every signal
/// blocked while it runs.
///
/// # Safety
/// As `crate::sys::set_handler`: the alternate stack must be set.
pub unsafe fn install_handler() -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is valid; on_tick uses atomics and raw
    // system calls only.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_tick as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        libc::sigfillset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGALRM, &sa, core::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
