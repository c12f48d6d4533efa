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
//! The same tick is the hang watchdog's (issue 19; see spt's
//! `preempt` module for the protocol): while a gated call into a rebootable
//! kernel component is in progress the tick runs even with one thread, at
//! the watchdog's period when nobody needs preempting, and a call that
//! stays in progress for the limit is stopped: the vCPU (at CPL 3, at an
//! instruction in guest memory, with the kernel's fault entry armed)
//! continues at the kernel's fault entry with `shoal_abi::FAULT_HANG`,
//! which reboots the component.
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
/// Ticks handled (the statistic `SHOAL_PREEMPT_STATS` prints): preemption
/// ticks, and watchdog-only ticks apart.
static TICKS: AtomicU64 = AtomicU64::new(0);
static WATCH_TICKS: AtomicU64 = AtomicU64::new(0);
/// The watchdog's limit (ns; 0: off), the timer's period now, the
/// preemption period asked for, and the watchdog's state between ticks.
static LIMIT: AtomicU64 = AtomicU64::new(0);
static PERIOD: AtomicU64 = AtomicU64::new(0);
static TICK_NS: AtomicU64 = AtomicU64::new(shoal_abi::PREEMPT_TICK_NS);
static WATCH: std::sync::Mutex<shoal_loader::watchdog::Watch> = std::sync::Mutex::new(shoal_loader::watchdog::Watch { seq: 0, age_ns: 0 });
/// The timer (`timer_t`), 0 before the first arm.
static TIMER: AtomicU64 = AtomicU64::new(0);
static TIMER_MADE: AtomicBool = AtomicBool::new(false);
/// The thread that runs the vCPU.
static RUN_TID: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);

use shoal_abi::preempt_word::{ARMED, IN_KERNEL, PENDING, RESUME_RIP, RUNNABLE, TICKS as AREA_TICKS, WATCH as AREA_WATCH, WATCH_SEQ};
use shoal_abi::{PREEMPT_ARMED_TICK, PREEMPT_ARMED_WATCHDOG};
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
    kick();
}

/// The vCPU's `kvm_run.immediate_exit` byte, while the run loop runs.
static IMMEDIATE_EXIT: AtomicPtr<core::sync::atomic::AtomicU8> = AtomicPtr::new(core::ptr::null_mut());

/// From a signal handler on the run thread: makes the next `KVM_RUN`
/// return at once (`EINTR`). A signal that lands between the run loop's
/// look at its flags and the `KVM_RUN` ioctl would otherwise wait for the
/// guest's next exit — forever for a program busy in a loop.
pub fn kick() {
    let p = IMMEDIATE_EXIT.load(Ordering::SeqCst);
    if !p.is_null() {
        // SAFETY: `set_immediate_exit` took the byte of the vCPU's mapped
        // `kvm_run`, which stays mapped until `clear` forgets it.
        unsafe { (*p).store(1, Ordering::SeqCst) };
    }
}

/// Where [`kick`] writes: the vCPU's `kvm_run.immediate_exit`, mapped for
/// as long as the vCPU lives (the run loop calls [`clear`] before it goes).
pub fn set_immediate_exit(byte: *mut u8) {
    IMMEDIATE_EXIT.store(byte.cast(), Ordering::SeqCst);
}

/// The run loop, before it looks at its flags: the kicks it is about to
/// serve are served.
pub fn unkick() {
    let p = IMMEDIATE_EXIT.load(Ordering::SeqCst);
    if !p.is_null() {
        // SAFETY: as in `kick`.
        unsafe { (*p).store(0, Ordering::SeqCst) };
    }
}

/// Installs the tick's handler (no `SA_RESTART`: `KVM_RUN` must return);
/// the calling thread is the one that runs the vCPU. `watchdog_ns` is the
/// hang watchdog's limit (0: off).
pub fn install(watchdog_ns: u64) -> std::io::Result<()> {
    LIMIT.store(watchdog_ns, Ordering::SeqCst);
    WATCH_TICKS.store(0, Ordering::SeqCst);
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
    PERIOD.store(period_ns, Ordering::SeqCst);
    let ts = libc::timespec { tv_sec: (period_ns / 1_000_000_000) as libc::time_t, tv_nsec: (period_ns % 1_000_000_000) as libc::c_long };
    let it = libc::itimerspec { it_interval: ts, it_value: ts };
    let t = TIMER.load(Ordering::SeqCst) as usize as libc::timer_t;
    // SAFETY: `t` was made by timer_create and not deleted; `it` is valid.
    if unsafe { libc::timer_settime(t, 0, &it, core::ptr::null_mut()) } != 0 {
        return -i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
    }
    0
}

/// Makes the timer, the first time.
fn make_timer() -> Result<(), i64> {
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
            return Err(-i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL)));
        }
        TIMER.store(id as usize as u64, Ordering::SeqCst);
        TIMER_MADE.store(true, Ordering::SeqCst);
    }
    Ok(())
}

/// `Preempt`/`PREEMPT_ARM`: makes the timer the first time, then starts it
/// (every `tick_ns`, at least `shoal_abi::PREEMPT_MIN_TICK_NS`).
pub fn arm(tick_ns: u64) -> i64 {
    let Some(armed) = word(ARMED) else {
        return -i64::from(libc::EINVAL);
    };
    if let Err(e) = make_timer() {
        return e;
    }
    let tick = tick_ns.clamp(shoal_abi::PREEMPT_MIN_TICK_NS, 1_000_000_000);
    TICK_NS.store(tick, Ordering::SeqCst);
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
    let (Some(armed), Some(seq)) = (word(ARMED), word(WATCH_SEQ)) else {
        return -i64::from(libc::EINVAL);
    };
    let limit = LIMIT.load(Ordering::SeqCst);
    if limit == 0 || armed.load(Ordering::SeqCst) != 0 {
        return 0;
    }
    if let Ok(mut w) = WATCH.lock() {
        *w = shoal_loader::watchdog::Watch { seq: seq.load(Ordering::SeqCst), age_ns: 0 };
    }
    if let Err(e) = make_timer() {
        return e;
    }
    let rc = set_timer(limit);
    if rc == 0 {
        armed.store(PREEMPT_ARMED_WATCHDOG, Ordering::SeqCst);
    }
    rc
}

/// Whether a tick arrived since the last call (taking it).
pub fn take_tick() -> bool {
    TICK.load(Ordering::Relaxed) && TICK.swap(false, Ordering::SeqCst)
}

/// Preemption ticks handled in this run.
pub fn ticks() -> u64 {
    TICKS.load(Ordering::SeqCst)
}

/// Watchdog-only ticks handled in this run.
pub fn watchdog_ticks() -> u64 {
    WATCH_TICKS.load(Ordering::SeqCst)
}

/// Where the kernel takes a hang back: its fault entry and armed word
/// (`Hypercall::FaultHandler`), and guest memory to check them against.
pub struct HangExit<'a> {
    /// The registered fault entry and armed word, if any.
    pub handler: Option<(u64, u64)>,
    /// Guest memory.
    pub mem: &'a shoal_loader::GuestMemory,
}

/// One tick, with the vCPU stopped (see the module documentation).
/// `mem_size` bounds the instruction pointers that may be redirected.
pub fn tick(vcpu: &kvm_ioctls::VcpuFd, low: u64, mem_size: u64, hang: &HangExit) -> Result<(), String> {
    let (Some(runnable), Some(in_kernel), Some(pending), Some(resume), Some(armed), Some(ticks), Some(watch), Some(seq)) =
        (word(RUNNABLE), word(IN_KERNEL), word(PENDING), word(RESUME_RIP), word(ARMED), word(AREA_TICKS), word(AREA_WATCH), word(WATCH_SEQ))
    else {
        TICKS.fetch_add(1, Ordering::SeqCst);
        return Ok(());
    };
    let mode = armed.load(Ordering::SeqCst);
    if mode == PREEMPT_ARMED_WATCHDOG { &WATCH_TICKS } else { &TICKS }.fetch_add(1, Ordering::SeqCst);
    ticks.fetch_add(1, Ordering::Relaxed);
    let limit = LIMIT.load(Ordering::SeqCst);
    let verdict = match WATCH.lock() {
        Ok(mut w) => {
            let (next, v) = shoal_loader::watchdog::step(*w, watch.load(Ordering::SeqCst), seq.load(Ordering::SeqCst), PERIOD.load(Ordering::SeqCst), limit);
            *w = next;
            v
        }
        Err(_) => shoal_loader::watchdog::Verdict::Idle,
    };
    let mut regs = vcpu.get_regs().map_err(|e| format!("KVM refused to read the registers: {e}"))?;
    let sregs = vcpu.get_sregs().map_err(|e| format!("KVM refused to read the special registers: {e}"))?;
    let user = sregs.cs.selector & 3 == 3;
    if verdict == shoal_loader::watchdog::Verdict::Hang && user && redirect_hang(vcpu, &mut regs, hang)? {
        if let Ok(mut w) = WATCH.lock() {
            w.age_ns = 0;
        }
        return Ok(());
    }
    if runnable.load(Ordering::SeqCst) <= 1 {
        if verdict == shoal_loader::watchdog::Verdict::Idle {
            set_timer(0);
            armed.store(0, Ordering::SeqCst);
        } else if mode != PREEMPT_ARMED_WATCHDOG {
            set_timer(limit);
            armed.store(PREEMPT_ARMED_WATCHDOG, Ordering::SeqCst);
        }
        return Ok(());
    }
    if mode != PREEMPT_ARMED_TICK {
        set_timer(TICK_NS.load(Ordering::SeqCst));
        armed.store(PREEMPT_ARMED_TICK, Ordering::SeqCst);
    }
    redirect(vcpu, &mut regs, user, low, mem_size, (in_kernel, pending, resume))
}

/// With the vCPU stopped after a forwarded signal arrived: makes the
/// guest's kernel look at it now — the vCPU sent to the preemption entry
/// if it was in the program's code (the entry raises forwarded signals and
/// delivers them, so a program busy in a loop gets its SIGTERM as on
/// Linux), `pending` set if it was in the kernel (taken on the way out of
/// the system call). Nothing before the guest registered its area.
pub fn interrupt(vcpu: &kvm_ioctls::VcpuFd, low: u64, mem_size: u64) -> Result<(), String> {
    let (Some(in_kernel), Some(pending), Some(resume)) = (word(IN_KERNEL), word(PENDING), word(RESUME_RIP)) else {
        return Ok(());
    };
    let mut regs = vcpu.get_regs().map_err(|e| format!("KVM refused to read the registers: {e}"))?;
    let sregs = vcpu.get_sregs().map_err(|e| format!("KVM refused to read the special registers: {e}"))?;
    redirect(vcpu, &mut regs, sregs.cs.selector & 3 == 3, low, mem_size, (in_kernel, pending, resume))
}

/// The common end of [`tick`] and [`interrupt`]: the vCPU to the
/// preemption entry if it is at CPL 3 in guest memory outside the kernel,
/// else `pending` for the kernel to take on its way out.
fn redirect(
    vcpu: &kvm_ioctls::VcpuFd,
    regs: &mut kvm_bindings::kvm_regs,
    user: bool,
    low: u64,
    mem_size: u64,
    words: (&AtomicU64, &AtomicU64, &AtomicU64),
) -> Result<(), String> {
    let (in_kernel, pending, resume) = words;
    if in_kernel.load(Ordering::SeqCst) != 0 || !user || !(low..mem_size).contains(&regs.rip) {
        pending.store(1, Ordering::SeqCst);
        return Ok(());
    }
    resume.store(regs.rip, Ordering::SeqCst);
    in_kernel.store(1, Ordering::SeqCst);
    regs.rip = ENTRY.load(Ordering::SeqCst);
    vcpu.set_regs(regs).map_err(|e| format!("KVM refused to set the registers: {e}"))
}

/// Sends the vCPU (stopped at CPL 3) to the kernel's fault entry with
/// `FAULT_HANG`, as a fault's hand-back does (`crate::hand_back`): only
/// with the entry registered and its armed word set, the interrupted
/// instruction and the new stack (below the red zone) in guest memory.
/// Returns whether it did; otherwise the next tick tries again.
fn redirect_hang(vcpu: &kvm_ioctls::VcpuFd, regs: &mut kvm_bindings::kvm_regs, hang: &HangExit) -> Result<bool, String> {
    let Some((entry, armed)) = hang.handler else { return Ok(false) };
    if !matches!(hang.mem.read_obj::<u64>(shoal_loader::GuestAddr(armed)), Ok(w) if w != 0) {
        return Ok(false);
    }
    let new_sp = (regs.rsp.wrapping_sub(128) & !15).wrapping_sub(8);
    if !hang.mem.contains(shoal_loader::GuestAddr(regs.rip), 1) || !hang.mem.contains(shoal_loader::GuestAddr(new_sp), 8) {
        return Ok(false);
    }
    let rip = regs.rip;
    regs.rip = entry;
    regs.rsp = new_sp;
    regs.rdi = shoal_abi::FAULT_HANG;
    regs.rsi = 0;
    regs.rdx = rip;
    vcpu.set_regs(regs).map_err(|e| format!("KVM refused to set the registers: {e}"))?;
    Ok(true)
}

/// Stops the timer and forgets the area (before guest memory is unmapped).
pub fn clear() {
    AREA.store(core::ptr::null_mut(), Ordering::SeqCst);
    IMMEDIATE_EXIT.store(core::ptr::null_mut(), Ordering::SeqCst);
    if TIMER_MADE.swap(false, Ordering::SeqCst) {
        let t = TIMER.swap(0, Ordering::SeqCst) as usize as libc::timer_t;
        // SAFETY: made by timer_create in this run and deleted once.
        unsafe { libc::timer_delete(t) };
    }
    TICK.store(false, Ordering::SeqCst);
}
