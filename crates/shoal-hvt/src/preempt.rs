//! Preemption ticks on hvt (issue 17, item 7; the protocol is
//! `shoal_abi::PreemptArea`'s).
//!
//! The tick is a POSIX timer of the VMM (`timer_create`, `CLOCK_MONOTONIC`)
//! that sends `SIGALRM` to the thread running the vCPU
//! (`SIGEV_THREAD_ID`), armed by the `Preempt` hypercall only when the
//! guest has more than one runnable thread. The signal makes `KVM_RUN`
//! return `EINTR` (its handler only sets a flag); the run loop then calls
//! [`tick`] with the vCPU stopped between two guest instructions. At most
//! one runnable thread: the timer is disarmed. The vCPU in the kernel
//! (`in_kernel`), at CPL 0 (the exception stub) or outside guest memory:
//! `pending` is set for the kernel to yield on its way out. Otherwise the
//! VMM stores RIP in `resume_rip`, sets `in_kernel` and sets RIP to the
//! kernel's preemption entry (`KVM_GET_REGS`/`KVM_SET_REGS`); every other
//! register, the flags and the FPU state stay as they were for the entry
//! to save. A signal that lands just before `KVM_RUN` starts is seen at the
//! next exit (at worst one tick later).
//!
//! The area is guest memory, written through the VMM's mapping with
//! atomics; the guest can lie in it only to itself. Like `crate::forward`,
//! one instance per process at a time (the state is static).

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// The guest's area through the VMM's mapping, once registered.
static AREA: AtomicPtr<AtomicU64> = AtomicPtr::new(core::ptr::null_mut());
static ENTRY: AtomicU64 = AtomicU64::new(0);
/// A tick arrived and is not yet handled by the run loop.
static TICK: AtomicBool = AtomicBool::new(false);
/// Ticks handled (the statistic `SHOAL_PREEMPT_STATS` prints).
static TICKS: AtomicU64 = AtomicU64::new(0);
/// The timer (`timer_t`), 0 before the first arm.
static TIMER: AtomicU64 = AtomicU64::new(0);
static TIMER_MADE: AtomicBool = AtomicBool::new(false);
/// The thread that runs the vCPU.
static RUN_TID: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);

use shoal_abi::preempt_word::{ARMED, IN_KERNEL, PENDING, RESUME_RIP, RUNNABLE, TICKS as AREA_TICKS};
/// Size of the area in bytes.
pub const AREA_BYTES: u64 = core::mem::size_of::<shoal_abi::PreemptArea>() as u64;

fn word(i: usize) -> Option<&'static AtomicU64> {
    let a = AREA.load(Ordering::SeqCst);
    // SAFETY: `register` took a host pointer to AREA_BYTES of writable,
    // 8-aligned guest memory; `clear` forgets it before that memory goes.
    (!a.is_null()).then(|| unsafe { &*a.add(i) })
}

extern "C" fn on_tick(_sig: libc::c_int) {
    TICK.store(true, Ordering::SeqCst);
}

/// Installs the tick's handler (no `SA_RESTART`: `KVM_RUN` must return);
/// the calling thread is the one that runs the vCPU.
pub fn install() -> std::io::Result<()> {
    // SAFETY: gettid has no arguments and cannot fail.
    RUN_TID.store(unsafe { libc::syscall(libc::SYS_gettid) } as i32, Ordering::SeqCst);
    TICK.store(false, Ordering::SeqCst);
    TICKS.store(0, Ordering::SeqCst);
    // SAFETY: a zeroed sigaction is valid; the handler stores an atomic.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_tick as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGALRM, &sa, core::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `Preempt`/`PREEMPT_REGISTER`: `host` is the area's host address (the
/// caller checked `AREA_BYTES` of 8-aligned writable guest memory) and
/// `entry` a guest address the caller checked to be inside guest memory.
pub fn register(host: *mut u8, entry: u64) {
    ENTRY.store(entry, Ordering::SeqCst);
    AREA.store(host.cast(), Ordering::SeqCst);
}

fn set_timer(period_ns: u64) -> i64 {
    let ts = libc::timespec { tv_sec: (period_ns / 1_000_000_000) as libc::time_t, tv_nsec: (period_ns % 1_000_000_000) as libc::c_long };
    let it = libc::itimerspec { it_interval: ts, it_value: ts };
    let t = TIMER.load(Ordering::SeqCst) as usize as libc::timer_t;
    // SAFETY: `t` was made by timer_create and not deleted; `it` is valid.
    if unsafe { libc::timer_settime(t, 0, &it, core::ptr::null_mut()) } != 0 {
        return -i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
    }
    0
}

/// `Preempt`/`PREEMPT_ARM`: makes the timer the first time, then starts it
/// (every `tick_ns`, at least `shoal_abi::PREEMPT_MIN_TICK_NS`).
pub fn arm(tick_ns: u64) -> i64 {
    let Some(armed) = word(ARMED) else {
        return -i64::from(libc::EINVAL);
    };
    if !TIMER_MADE.load(Ordering::SeqCst) {
        // SAFETY: a zeroed sigevent is valid; the fields set make it a
        // thread-directed signal to the vCPU thread; `id` receives the
        // timer.
        let (rc, id) = unsafe {
            let mut ev: libc::sigevent = core::mem::zeroed();
            ev.sigev_notify = libc::SIGEV_THREAD_ID;
            ev.sigev_signo = libc::SIGALRM;
            ev.sigev_notify_thread_id = RUN_TID.load(Ordering::SeqCst);
            let mut id: libc::timer_t = core::ptr::null_mut();
            (libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut id), id)
        };
        if rc != 0 {
            return -i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
        }
        TIMER.store(id as usize as u64, Ordering::SeqCst);
        TIMER_MADE.store(true, Ordering::SeqCst);
    }
    let rc = set_timer(tick_ns.clamp(shoal_abi::PREEMPT_MIN_TICK_NS, 1_000_000_000));
    if rc == 0 {
        armed.store(1, Ordering::SeqCst);
    }
    rc
}

/// Whether a tick arrived since the last call (taking it).
pub fn take_tick() -> bool {
    TICK.load(Ordering::Relaxed) && TICK.swap(false, Ordering::SeqCst)
}

/// Ticks handled in this run.
pub fn ticks() -> u64 {
    TICKS.load(Ordering::SeqCst)
}

/// One tick, with the vCPU stopped (see the module documentation).
/// `mem_size` bounds the instruction pointers that may be redirected.
pub fn tick(vcpu: &kvm_ioctls::VcpuFd, low: u64, mem_size: u64) -> Result<(), String> {
    TICKS.fetch_add(1, Ordering::SeqCst);
    let (Some(runnable), Some(in_kernel), Some(pending), Some(resume), Some(armed), Some(ticks)) =
        (word(RUNNABLE), word(IN_KERNEL), word(PENDING), word(RESUME_RIP), word(ARMED), word(AREA_TICKS))
    else {
        return Ok(());
    };
    ticks.fetch_add(1, Ordering::Relaxed);
    if runnable.load(Ordering::SeqCst) <= 1 {
        set_timer(0);
        armed.store(0, Ordering::SeqCst);
        return Ok(());
    }
    let mut regs = vcpu.get_regs().map_err(|e| format!("KVM refused to read the registers: {e}"))?;
    let sregs = vcpu.get_sregs().map_err(|e| format!("KVM refused to read the special registers: {e}"))?;
    let user = sregs.cs.selector & 3 == 3;
    if in_kernel.load(Ordering::SeqCst) != 0 || !user || !(low..mem_size).contains(&regs.rip) {
        pending.store(1, Ordering::SeqCst);
        return Ok(());
    }
    resume.store(regs.rip, Ordering::SeqCst);
    in_kernel.store(1, Ordering::SeqCst);
    regs.rip = ENTRY.load(Ordering::SeqCst);
    vcpu.set_regs(&regs).map_err(|e| format!("KVM refused to set the registers: {e}"))
}

/// Stops the timer and forgets the area (before guest memory is unmapped).
pub fn clear() {
    AREA.store(core::ptr::null_mut(), Ordering::SeqCst);
    if TIMER_MADE.swap(false, Ordering::SeqCst) {
        let t = TIMER.swap(0, Ordering::SeqCst) as usize as libc::timer_t;
        // SAFETY: made by timer_create in this run and deleted once.
        unsafe { libc::timer_delete(t) };
    }
    TICK.store(false, Ordering::SeqCst);
}
