//! Preemption ticks on hvt: the VMM's half of the preemption model
//! (`shoal_hostcall::preempt`, shared with spt; the protocol is
//! `shoal_abi::PreemptArea`'s).
//!
//! The tick is a POSIX timer of the VMM (`timer_create`, `CLOCK_MONOTONIC`)
//! that sends `SIGALRM` to the thread running the vCPU
//! (`SIGEV_THREAD_ID`). The signal makes `KVM_RUN` return `EINTR` (its
//! handler only sets a flag); the run loop then calls [`tick`] with the
//! vCPU stopped between two guest instructions. What hvt supplies to the
//! model is how the stopped vCPU is reached (`KVM_GET_REGS`/`KVM_SET_REGS`:
//! RIP may be redirected only at CPL 3 inside guest memory; every other
//! register, the flags and the FPU state stay as they were for the entry
//! to save) and how the timer is set. A signal that lands just before
//! `KVM_RUN` starts is seen at the next exit (at worst one tick later).
//! A hang at CPL 3 continues at the kernel's fault entry with
//! `shoal_abi::FAULT_HANG`, which reboots the component.
//!
//! The area is guest memory, written through the VMM's mapping with
//! atomics; the guest can lie in it only to itself. Like `crate::forward`,
//! one instance per process at a time (the state is static).

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// The model's state (one instance per process at a time).
static MODEL: Model = Model::new();
/// A tick arrived and is not yet handled by the run loop.
static TICK: AtomicBool = AtomicBool::new(false);
/// Ticks handled (the statistic `SHOAL_PREEMPT_STATS` prints): preemption
/// ticks, and watchdog-only ticks apart.
static TICKS: AtomicU64 = AtomicU64::new(0);
static WATCH_TICKS: AtomicU64 = AtomicU64::new(0);
/// The timer (`timer_t`), 0 before the first arm.
static TIMER: AtomicU64 = AtomicU64::new(0);
static TIMER_MADE: AtomicBool = AtomicBool::new(false);
/// The thread that runs the vCPU.
static RUN_TID: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);

pub use shoal_hostcall::preempt::AREA_BYTES;
use shoal_hostcall::preempt::{Cpu, Model, Timer};

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
    MODEL.set_limit(watchdog_ns);
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
    MODEL.register(host, entry);
}

/// hvt's tick timer: a POSIX timer directed at the vCPU thread, made at
/// the first arm.
struct PosixTimer;

impl Timer for PosixTimer {
    /// Makes the timer, the first time.
    fn make(&self) -> Result<(), i64> {
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

    fn set(&self, period_ns: u64) -> i64 {
        // No timer (the area forgotten by `clear`): nothing runs to stop.
        if !TIMER_MADE.load(Ordering::SeqCst) {
            return 0;
        }
        let ts = libc::timespec { tv_sec: (period_ns / 1_000_000_000) as libc::time_t, tv_nsec: (period_ns % 1_000_000_000) as libc::c_long };
        let it = libc::itimerspec { it_interval: ts, it_value: ts };
        let t = TIMER.load(Ordering::SeqCst) as usize as libc::timer_t;
        // SAFETY: `t` was made by timer_create and not deleted; `it` is valid.
        if unsafe { libc::timer_settime(t, 0, &it, core::ptr::null_mut()) } != 0 {
            return -i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
        }
        0
    }

    fn count(&self, watchdog_only: bool) {
        if watchdog_only { &WATCH_TICKS } else { &TICKS }.fetch_add(1, Ordering::SeqCst);
    }
}

/// `Preempt`/`PREEMPT_ARM`: makes the timer the first time, then starts it
/// (every `tick_ns`, at least `shoal_abi::PREEMPT_MIN_TICK_NS`).
pub fn arm(tick_ns: u64) -> i64 {
    MODEL.arm(&PosixTimer, tick_ns)
}

/// `Preempt`/`PREEMPT_WATCH`: a gated call began with the tick off: run
/// the tick at the watchdog's period (see `shoal_hostcall::preempt`).
pub fn watch() -> i64 {
    MODEL.watch(&PosixTimer)
}

/// `Preempt`/`PREEMPT_WAKE`: one tick after `delay_ns` for a kernel that
/// holds output back (see `shoal_hostcall::preempt`).
pub fn wake(delay_ns: u64) -> i64 {
    MODEL.wake(&PosixTimer, delay_ns)
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

/// The stopped vCPU: its registers as read when it stopped.
struct Stopped<'a> {
    vcpu: &'a kvm_ioctls::VcpuFd,
    regs: kvm_bindings::kvm_regs,
    /// At CPL 3 (the program or the kernel's unprivileged code; never the
    /// exception stub).
    user: bool,
    /// Guest memory's bounds `[low, mem_size)`.
    low: u64,
    mem_size: u64,
    hang: Option<&'a HangExit<'a>>,
}

impl<'a> Stopped<'a> {
    fn read(vcpu: &'a kvm_ioctls::VcpuFd, low: u64, mem_size: u64, hang: Option<&'a HangExit<'a>>) -> Result<Stopped<'a>, String> {
        let regs = vcpu.get_regs().map_err(|e| format!("KVM refused to read the registers: {e}"))?;
        let sregs = vcpu.get_sregs().map_err(|e| format!("KVM refused to read the special registers: {e}"))?;
        Ok(Stopped { vcpu, regs, user: sregs.cs.selector & 3 == 3, low, mem_size, hang })
    }
}

impl Cpu for Stopped<'_> {
    type Error = String;

    fn rip(&self) -> u64 {
        self.regs.rip
    }

    fn in_program(&self) -> bool {
        self.user && (self.low..self.mem_size).contains(&self.regs.rip)
    }

    fn set_rip(&mut self, rip: u64) -> Result<(), String> {
        self.regs.rip = rip;
        self.vcpu.set_regs(&self.regs).map_err(|e| format!("KVM refused to set the registers: {e}"))
    }

    fn stop_hang(&mut self) -> Result<bool, String> {
        match self.hang {
            Some(hang) if self.user => redirect_hang(self.vcpu, &mut self.regs, hang),
            _ => Ok(false),
        }
    }
}

/// One tick, with the vCPU stopped (see the module documentation).
/// `mem_size` bounds the instruction pointers that may be redirected.
pub fn tick(vcpu: &kvm_ioctls::VcpuFd, low: u64, mem_size: u64, hang: &HangExit) -> Result<(), String> {
    MODEL.tick(&PosixTimer, &mut Stopped::read(vcpu, low, mem_size, Some(hang))?)
}

/// With the vCPU stopped after a forwarded signal arrived: makes the
/// guest's kernel look at it now — the vCPU sent to the preemption entry
/// if it was in the program's code (the entry raises forwarded signals and
/// delivers them, so a program busy in a loop gets its SIGTERM as on
/// Linux), `pending` set if it was in the kernel (taken on the way out of
/// the system call). Nothing before the guest registered its area.
pub fn interrupt(vcpu: &kvm_ioctls::VcpuFd, low: u64, mem_size: u64) -> Result<(), String> {
    if !MODEL.registered() {
        return Ok(());
    }
    MODEL.interrupt(&mut Stopped::read(vcpu, low, mem_size, None)?)
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

/// A template at its ready point: its timer stops (its guest never runs
/// again); the model keeps the period for the copies (`after_fork`).
pub fn pause_timer() {
    if TIMER_MADE.load(Ordering::SeqCst) {
        PosixTimer.set(0);
    }
}

/// In a copy of a template (`crate::template`): the run thread is this
/// process's, and the template's timer is not inherited by a fork, so the
/// copy makes its own at the period the template's ran at.
pub fn after_fork() -> Result<(), i64> {
    // SAFETY: gettid has no arguments and cannot fail.
    RUN_TID.store(unsafe { libc::syscall(libc::SYS_gettid) } as i32, Ordering::SeqCst);
    if TIMER_MADE.swap(false, Ordering::SeqCst) {
        TIMER.store(0, Ordering::SeqCst);
        let period = MODEL.period();
        if period > 0 {
            PosixTimer.make()?;
            let rc = PosixTimer.set(period);
            if rc < 0 {
                return Err(rc);
            }
        }
    }
    Ok(())
}

/// Stops the timer and forgets the area (before guest memory is unmapped).
pub fn clear() {
    MODEL.clear();
    IMMEDIATE_EXIT.store(core::ptr::null_mut(), Ordering::SeqCst);
    if TIMER_MADE.swap(false, Ordering::SeqCst) {
        let t = TIMER.swap(0, Ordering::SeqCst) as usize as libc::timer_t;
        // SAFETY: made by timer_create in this run and deleted once.
        unsafe { libc::timer_delete(t) };
    }
    TICK.store(false, Ordering::SeqCst);
}
