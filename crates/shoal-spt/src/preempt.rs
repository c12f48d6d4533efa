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

use core::sync::atomic::{AtomicU64, Ordering};

/// The guest's area (`shoal_abi::PreemptArea`) as atomics, once registered.
static AREA: AtomicU64 = AtomicU64::new(0);
/// The kernel's preemption entry.
static ENTRY: AtomicU64 = AtomicU64::new(0);
/// Guest memory `[LOW, HIGH)`: the instruction pointers a tick may redirect.
static LOW: AtomicU64 = AtomicU64::new(0);
static HIGH: AtomicU64 = AtomicU64::new(0);
/// Ticks that reached the instance (reported to the waiting parent).
static TICKS: core::sync::atomic::AtomicPtr<AtomicU64> = core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());

use shoal_abi::preempt_word::{ARMED, IN_KERNEL, PENDING, RESUME_RIP, RUNNABLE, TICKS as AREA_TICKS};
const AREA_WORDS: u64 = (core::mem::size_of::<shoal_abi::PreemptArea>() / 8) as u64;

/// Sets guest memory's bounds and where ticks are counted for the parent
/// (in the child, before the guest runs).
pub fn install(low: u64, high: u64, ticks: Option<&'static AtomicU64>) {
    LOW.store(low, Ordering::Relaxed);
    HIGH.store(high, Ordering::Relaxed);
    if let Some(t) = ticks {
        TICKS.store(core::ptr::from_ref(t).cast_mut(), Ordering::Relaxed);
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
    let rc = set_timer(tick_ns.clamp(shoal_abi::PREEMPT_MIN_TICK_NS, 1_000_000_000));
    if rc == 0 {
        armed.store(1, Ordering::SeqCst);
    }
    rc
}

/// The `SIGALRM` handler: one tick (see the module documentation).
pub extern "C" fn on_tick(_sig: libc::c_int, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let t = TICKS.load(Ordering::Relaxed);
    if !t.is_null() {
        // SAFETY: the report page, mapped for the process's life.
        unsafe { (*t).fetch_add(1, Ordering::Relaxed) };
    }
    let (Some(runnable), Some(in_kernel), Some(pending), Some(resume), Some(armed), Some(ticks)) =
        (word(RUNNABLE), word(IN_KERNEL), word(PENDING), word(RESUME_RIP), word(ARMED), word(AREA_TICKS))
    else {
        set_timer(0);
        return;
    };
    ticks.fetch_add(1, Ordering::Relaxed);
    if runnable.load(Ordering::SeqCst) <= 1 {
        set_timer(0);
        armed.store(0, Ordering::SeqCst);
        return;
    }
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
