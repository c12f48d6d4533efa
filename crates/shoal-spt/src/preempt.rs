//! Preemption ticks on spt: the tender's half of the preemption model
//! (`shoal_hostcall::preempt`, shared with hvt; the protocol is
//! `shoal_abi::PreemptArea`'s).
//!
//! The tick is the process's `ITIMER_REAL` timer: `SIGALRM` every 10 ms
//! (the period the kernel asks for). The guest's own `SIGALRM`
//! (`setitimer`, `alarm`) is its kernel's business and never a host signal,
//! so the host signal is free for this.
//!
//! [`on_tick`] runs on the alternate signal stack with every signal
//! blocked and the guest's FS base loaded: atomics and raw system calls
//! only. What spt supplies to the model is how the interrupted guest is
//! reached — the signal's `ucontext_t`, whose `rip` may be redirected only
//! when it is guest code (inside guest memory: never the tender's own
//! hypercall code); `sigreturn` restores the rest of the interrupted state
//! (registers, FPU/SSE/AVX, signal mask) — and how the timer is set (a raw
//! `setitimer`). A hang goes to the kernel's fault entry through
//! `crate::signals::redirect_hang`.

use core::sync::atomic::{AtomicU64, Ordering};
use shoal_hostcall::preempt::{Cpu, Model, Timer, AREA_BYTES};

/// The model's state (one instance per process).
static MODEL: Model = Model::new();
/// Guest memory `[LOW, HIGH)`: the instruction pointers a tick may redirect.
static LOW: AtomicU64 = AtomicU64::new(0);
static HIGH: AtomicU64 = AtomicU64::new(0);
/// Preemption ticks that reached the instance (reported to the waiting
/// parent).
static TICKS: core::sync::atomic::AtomicPtr<AtomicU64> = core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());
/// Watchdog-only ticks (the timer at the watchdog's period), reported apart.
static WATCH_TICKS: core::sync::atomic::AtomicPtr<AtomicU64> = core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());

/// Sets guest memory's bounds, the watchdog's limit (ns, 0: off) and
/// where ticks are counted for the parent (in the child, before the guest
/// runs): preemption ticks and watchdog-only ticks.
pub fn install(low: u64, high: u64, watchdog_ns: u64, ticks: Option<(&'static AtomicU64, &'static AtomicU64)>) {
    LOW.store(low, Ordering::Relaxed);
    HIGH.store(high, Ordering::Relaxed);
    MODEL.set_limit(watchdog_ns);
    if let Some((t, w)) = ticks {
        TICKS.store(core::ptr::from_ref(t).cast_mut(), Ordering::Relaxed);
        WATCH_TICKS.store(core::ptr::from_ref(w).cast_mut(), Ordering::Relaxed);
    }
}

/// `Preempt`/`PREEMPT_REGISTER`: `area` must be 8-aligned writable guest
/// memory (checked by `writable`), `entry` inside guest memory.
pub fn register(area: u64, entry: u64, writable: impl Fn(u64, u64) -> bool) -> i64 {
    let (low, high) = (LOW.load(Ordering::Relaxed), HIGH.load(Ordering::Relaxed));
    if !area.is_multiple_of(8) || !(low..high).contains(&entry) {
        return -i64::from(libc::EINVAL);
    }
    if !writable(area, AREA_BYTES) {
        return -i64::from(libc::EFAULT);
    }
    // Guest memory is mapped at its guest addresses in this process, for
    // the process's life.
    MODEL.register(area as *mut u8, entry);
    0
}

/// spt's tick timer: `ITIMER_REAL`, counted in the report page.
struct ItimerReal;

impl Timer for ItimerReal {
    /// `setitimer(ITIMER_REAL, period)` as a raw system call (the filter
    /// allows exactly this; no errno, no thread pointer). 0 stops the timer.
    fn set(&self, period_ns: u64) -> i64 {
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

    fn count(&self, watchdog_only: bool) {
        let t = if watchdog_only { &WATCH_TICKS } else { &TICKS }.load(Ordering::Relaxed);
        if !t.is_null() {
            // SAFETY: the report page, mapped for the process's life.
            unsafe { (*t).fetch_add(1, Ordering::Relaxed) };
        }
    }
}

/// `Preempt`/`PREEMPT_ARM`: starts the tick (every `tick_ns`, at least
/// `shoal_abi::PREEMPT_MIN_TICK_NS`).
pub fn arm(tick_ns: u64) -> i64 {
    MODEL.arm(&ItimerReal, tick_ns)
}

/// A template at its ready point: stops the tick (its guest never runs
/// there again); the model keeps its period for the copies.
pub fn pause() {
    ItimerReal.set(0);
}

/// In a copy of a template: a fork does not inherit `ITIMER_REAL`, so the
/// tick the template ran (at an explicit ready point other threads may be
/// runnable) is set again at its period. A negative errno on failure.
pub fn after_fork() -> Result<(), i32> {
    let period = MODEL.period();
    if period == 0 {
        return Ok(());
    }
    let rc = ItimerReal.set(period);
    if rc < 0 {
        return Err(-rc as i32);
    }
    Ok(())
}

/// `Preempt`/`PREEMPT_WATCH`: a gated call began with the tick off: run
/// the tick at the watchdog's period (see `shoal_hostcall::preempt`).
pub fn watch() -> i64 {
    MODEL.watch(&ItimerReal)
}

/// `Preempt`/`PREEMPT_WAKE`: one tick after `delay_ns` for a kernel that
/// holds output back (see `shoal_hostcall::preempt`).
pub fn wake(delay_ns: u64) -> i64 {
    MODEL.wake(&ItimerReal, delay_ns)
}

/// The guest interrupted by a signal: its saved context, which
/// `sigreturn` loads (`None` if the handler was given none).
struct Interrupted {
    ctx: *mut libc::c_void,
}

impl Interrupted {
    fn context(&self) -> Option<&libc::ucontext_t> {
        // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO
        // handler, live until sigreturn.
        (!self.ctx.is_null()).then(|| unsafe { &*self.ctx.cast::<libc::ucontext_t>() })
    }

    fn context_mut(&mut self) -> Option<&mut libc::ucontext_t> {
        // SAFETY: as in `context`; it is ours to change until sigreturn.
        (!self.ctx.is_null()).then(|| unsafe { &mut *self.ctx.cast::<libc::ucontext_t>() })
    }
}

impl Cpu for Interrupted {
    type Error = core::convert::Infallible;

    fn rip(&self) -> u64 {
        self.context().map_or(0, |uc| uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64)
    }

    fn in_program(&self) -> bool {
        self.context().is_some() && (LOW.load(Ordering::Relaxed)..HIGH.load(Ordering::Relaxed)).contains(&self.rip())
    }

    fn set_rip(&mut self, rip: u64) -> Result<(), Self::Error> {
        if let Some(uc) = self.context_mut() {
            uc.uc_mcontext.gregs[libc::REG_RIP as usize] = rip as i64;
        }
        Ok(())
    }

    fn stop_hang(&mut self) -> Result<bool, Self::Error> {
        Ok(crate::signals::redirect_hang(self.ctx))
    }
}

/// The `SIGALRM` handler: one tick (see the module documentation).
pub extern "C" fn on_tick(_sig: libc::c_int, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Ok(()) = MODEL.tick(&ItimerReal, &mut Interrupted { ctx });
}

/// Makes the guest's kernel look at what came for it now, from a signal
/// handler whose `ctx` is the interrupted guest's context
/// (`shoal_hostcall::preempt::Model::interrupt`).
pub fn interrupt(ctx: *mut libc::c_void) {
    if !ctx.is_null() {
        let Ok(()) = MODEL.interrupt(&mut Interrupted { ctx });
    }
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
