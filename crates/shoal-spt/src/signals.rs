//! What the child tells the parent about how the guest died.
//!
//! The parent maps one shared page (the *report*) before forking. In the
//! child, SIGSYS (a system call the filter traps) and the crash signals
//! (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP) run a handler on an alternate
//! signal stack that writes what happened (system call number, or signal,
//! code, faulting address and rip) into the report and then makes a
//! forbidden system call while every signal is blocked: the kernel then
//! resets SIGSYS to its default action and kills the process with it. The
//! parent sees "killed by SIGSYS" and reads the report to tell which.
//!
//! The handlers run with the guest's FS base loaded, so they use no thread
//! pointer: no libc, raw `syscall` instructions only, no allocation.
//!
//! A guest shares the tender's address space and so can scribble on the
//! report: the worst it can achieve is a wrong message about its own death,
//! with the same exit status range it could produce with a halt anyway.

use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// The shared report page's contents.
#[repr(C)]
#[derive(Debug, Default)]
pub struct Report {
    /// 0 (nothing happened), [`SYSCALL`] or [`CRASH`].
    pub kind: AtomicU64,
    /// SYSCALL: the system call number; CRASH: the signal number.
    pub number: AtomicU64,
    /// CRASH: `si_code`; SYSCALL: the audit architecture.
    pub code: AtomicU64,
    /// CRASH: `si_addr`; SYSCALL: 0.
    pub addr: AtomicU64,
    /// The guest's (or the tender's) instruction pointer at the event.
    pub rip: AtomicU64,
}

/// A forbidden system call.
pub const SYSCALL: u64 = 1;
/// A crash signal.
pub const CRASH: u64 = 2;

/// The signals reported as crashes.
pub const CRASH_SIGNALS: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGTRAP,
];

static REPORT: AtomicPtr<Report> = AtomicPtr::new(core::ptr::null_mut());

/// Sets where the handlers write (in the child).
pub fn set_report(r: *mut Report) {
    REPORT.store(r, Ordering::Relaxed);
}

/// The parts of Linux's x86-64 `siginfo_t` the handlers read.
#[repr(C)]
struct SigInfo {
    signo: i32,
    errno: i32,
    code: i32,
    _pad: i32,
    /// SIGSEGV etc.: faulting address; SIGSYS: the calling instruction.
    addr: u64,
    /// SIGSYS only.
    syscall: i32,
    /// SIGSYS only.
    arch: u32,
}

fn rip_of(ctx: *mut libc::c_void) -> u64 {
    if ctx.is_null() {
        return 0;
    }
    // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
    let uc = unsafe { &*ctx.cast::<libc::ucontext_t>() };
    uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64
}

fn record(kind: u64, number: u64, code: u64, addr: u64, rip: u64) {
    let r = REPORT.load(Ordering::Relaxed);
    if r.is_null() {
        return;
    }
    // SAFETY: set by the child to the shared report page, which stays
    // mapped until the process dies.
    let r = unsafe { &*r };
    r.number.store(number, Ordering::Relaxed);
    r.code.store(code, Ordering::Relaxed);
    r.addr.store(addr, Ordering::Relaxed);
    r.rip.store(rip, Ordering::Relaxed);
    r.kind.store(kind, Ordering::Release);
}

/// Dies by SIGSYS: a system call the filter forbids, made while SIGSYS is
/// blocked, makes the kernel reset SIGSYS to its default and kill us. If no
/// filter is installed yet (a crash during set-up) the call succeeds and we
/// exit with 128 + `sig` instead.
fn die(sig: libc::c_int) -> ! {
    // SAFETY: getpid (39) has no effect; exit_group (231) does not return.
    unsafe {
        core::arch::asm!("syscall", inlateout("rax") libc::SYS_getpid => _, lateout("rcx") _, lateout("r11") _,
            options(nostack));
        core::arch::asm!("syscall", in("rax") libc::SYS_exit_group, in("rdi") 128 + sig, options(noreturn, nostack));
    }
}

/// The SIGSYS handler.
pub extern "C" fn on_sigsys(_sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    if !info.is_null() {
        // SAFETY: the kernel passes a valid siginfo; SigInfo is a prefix of it.
        let i = unsafe { &*info.cast::<SigInfo>() };
        record(
            SYSCALL,
            i.syscall as u32 as u64,
            u64::from(i.arch),
            0,
            rip_of(ctx),
        );
    }
    die(libc::SIGSYS)
}

/// The crash signals' handler.
pub extern "C" fn on_crash(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let (code, addr) = if info.is_null() {
        (0, 0)
    } else {
        // SAFETY: as in `on_sigsys`.
        let i = unsafe { &*info.cast::<SigInfo>() };
        (i.code as u32 as u64, i.addr)
    };
    record(CRASH, sig as u64, code, addr, rip_of(ctx));
    die(sig)
}

/// Name of a signal.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => "a signal",
    }
}

/// What a crash signal means, for the message.
pub fn signal_meaning(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "invalid memory access",
        libc::SIGBUS => "bus error",
        libc::SIGILL => "illegal instruction",
        libc::SIGFPE => "arithmetic exception",
        libc::SIGTRAP => "breakpoint or trap",
        libc::SIGABRT => "abort",
        _ => "killed",
    }
}

/// Name of a Linux x86-64 system call, for the message about a guest the
/// sandbox killed.
pub fn syscall_name(nr: u64) -> Option<&'static str> {
    shoal_abi::linux::name(nr)
}
