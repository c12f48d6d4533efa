//! How the guest died, and the one-line message that says it.
//!
//! SIGSYS (a system call the filter traps) and the crash signals (SIGSEGV,
//! SIGBUS, SIGILL, SIGFPE, SIGTRAP) run a handler on an alternate signal
//! stack that writes what happened (system call number, or signal, code,
//! faulting address and rip) into the *report*. Then:
//!
//! - **supervised** (`crate::run`): the report is a page shared with the
//!   waiting parent, mapped before forking. The handler makes a forbidden
//!   system call while every signal is blocked: the kernel then resets
//!   SIGSYS to its default action and kills the process with it. The
//!   parent sees "killed by SIGSYS" and reads the report to tell which.
//! - **in place** (`crate::run_in_place`, no parent): the report is this
//!   process's own; the handler writes the message itself to fd 2 and ends
//!   the process with the exit status the parent would have returned
//!   ([`describe`] writes both forms of the message).
//!
//! The handlers run with the guest's FS base loaded, so they use no thread
//! pointer: no libc, raw `syscall` instructions only, no allocation.
//!
//! A guest shares the tender's address space and so can scribble on the
//! report: the worst it can achieve is a wrong message about its own death,
//! with the same exit status range it could produce with a halt anyway.

use core::fmt::Write;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

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
    /// Preemption ticks that reached the instance (`crate::preempt`).
    pub ticks: AtomicU64,
    /// Ticks of the hang watchdog alone (`crate::preempt`).
    pub watchdog_ticks: AtomicU64,
    /// The waiting parent's question "is a forwarded signal untaken?":
    /// its number, written before it sends [`QUERY_SIGNAL`].
    pub query: AtomicU64,
    /// The forwarded signals the guest had not taken (bit `signal - 1`)
    /// when the instance answered the query …
    pub untaken: AtomicU64,
    /// … whose number the instance writes here after [`Report::untaken`].
    pub answered: AtomicU64,
}

/// A forbidden system call.
pub const SYSCALL: u64 = 1;
/// A crash signal.
pub const CRASH: u64 = 2;

/// The signals reported as crashes.
pub const CRASH_SIGNALS: [libc::c_int; 5] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP];

static REPORT: AtomicPtr<Report> = AtomicPtr::new(core::ptr::null_mut());

/// The report of an instance that runs in place (no parent to share a
/// page with).
static OWN_REPORT: Report = Report {
    kind: AtomicU64::new(0),
    number: AtomicU64::new(0),
    code: AtomicU64::new(0),
    addr: AtomicU64::new(0),
    rip: AtomicU64::new(0),
    ticks: AtomicU64::new(0),
    watchdog_ticks: AtomicU64::new(0),
    query: AtomicU64::new(0),
    untaken: AtomicU64::new(0),
    answered: AtomicU64::new(0),
};

/// Where the preemption ticks are counted: the report's `ticks` (set by
/// [`set_report`]).
pub fn ticks_counter() -> Option<(&'static AtomicU64, &'static AtomicU64)> {
    let r = REPORT.load(Ordering::Relaxed);
    // SAFETY: the report page (or OWN_REPORT) stays mapped for the
    // process's life.
    (!r.is_null()).then(|| unsafe { (&(*r).ticks, &(*r).watchdog_ticks) })
}

/// Whether the handlers end the process themselves, with the message.
static IN_PLACE: AtomicBool = AtomicBool::new(false);

/// Sets where the handlers write (in the child): the page shared with the
/// parent, or `None` when the instance runs in place and the handlers
/// print the message themselves.
pub fn set_report(shared: Option<*mut Report>) {
    match shared {
        Some(r) => REPORT.store(r, Ordering::Relaxed),
        None => {
            REPORT.store(core::ptr::from_ref(&OWN_REPORT).cast_mut(), Ordering::Relaxed);
            IN_PLACE.store(true, Ordering::Relaxed);
        }
    }
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

/// Ends an instance that runs in place: the message the parent would have
/// printed, on fd 2, and the exit status it would have returned.
fn end_in_place(sig: libc::c_int) -> ! {
    let mut m = crate::hypercall::Msg::new();
    let status = describe(&mut m, sig, &OWN_REPORT);
    write_stderr(m.as_bytes());
    // SAFETY: exit_group does not return; the filter allows it.
    unsafe {
        core::arch::asm!("syscall", in("rax") libc::SYS_exit_group, in("rdi") status, options(noreturn, nostack));
    }
}

/// Writes `bytes` to fd 2 with raw system calls (from a handler).
fn write_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let rc: i64;
        // SAFETY: write(2, bytes): the buffer is on this stack and readable
        // for its length; the filter allows writes to fd 2.
        unsafe {
            core::arch::asm!("syscall", inlateout("rax") libc::SYS_write => rc, in("rdi") 2, in("rsi") bytes.as_ptr(),
                in("rdx") bytes.len(), lateout("rcx") _, lateout("r11") _, options(nostack));
        }
        match usize::try_from(rc) {
            Ok(n) if n > 0 => bytes = bytes.get(n..).unwrap_or_default(),
            _ if rc == -i64::from(libc::EINTR) => {}
            _ => break,
        }
    }
}

/// After recording: the parent's message and status, one way or the other.
fn finish(sig: libc::c_int) -> ! {
    if IN_PLACE.load(Ordering::Relaxed) {
        end_in_place(sig)
    }
    die(sig)
}

/// The kernel's system-call entry of an image built around a Linux
/// executable (0: an ordinary image).
static EXEC_ENTRY: AtomicU64 = AtomicU64::new(0);

/// Registers the kernel's system-call entry: a SIGSYS from syscall user
/// dispatch is then a system call of the executable for the kernel.
pub fn set_exec_entry(entry: u64) {
    EXEC_ENTRY.store(entry, Ordering::Relaxed);
}

/// The SIGSYS handler.
pub extern "C" fn on_sigsys(_sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let entry = EXEC_ENTRY.load(Ordering::Relaxed);
    if entry != 0 && !info.is_null() && !ctx.is_null() {
        // SAFETY: the kernel passes a valid siginfo; SigInfo is a prefix of it.
        let i = unsafe { &*info.cast::<SigInfo>() };
        if i.code == crate::sys::SYS_USER_DISPATCH {
            // The trapped `syscall` becomes what a rewritten site does:
            // the kernel's entry with the number in rax, the address after
            // the instruction in rcx and the flags in r11, as the CPU's
            // `syscall` leaves them (Linux already put -ENOSYS in rax).
            // SAFETY: the kernel passes a valid ucontext_t to an
            // SA_SIGINFO handler; it is this handler's to change.
            let uc = unsafe { &mut *ctx.cast::<libc::ucontext_t>() };
            let g = &mut uc.uc_mcontext.gregs;
            g[libc::REG_RCX as usize] = g[libc::REG_RIP as usize];
            g[libc::REG_R11 as usize] = g[libc::REG_EFL as usize];
            g[libc::REG_RAX as usize] = i64::from(i.syscall);
            g[libc::REG_RIP as usize] = entry as i64;
            return;
        }
    }
    if !info.is_null() {
        // SAFETY: the kernel passes a valid siginfo; SigInfo is a prefix of it.
        let i = unsafe { &*info.cast::<SigInfo>() };
        record(SYSCALL, i.syscall as u32 as u64, u64::from(i.arch), 0, rip_of(ctx));
    }
    finish(libc::SIGSYS)
}

/// The kernel's fault entry (`Hypercall::FaultHandler`; 0: none).
static FAULT_ENTRY: AtomicU64 = AtomicU64::new(0);
/// The kernel's armed word, once registered.
static FAULT_ARMED: AtomicPtr<AtomicU64> = AtomicPtr::new(core::ptr::null_mut());
/// Guest memory `[lo, hi)`: only a fault of an instruction there is the
/// guest's own (a fault in the tender's code is never handed back).
static GUEST_LO: AtomicU64 = AtomicU64::new(0);
static GUEST_HI: AtomicU64 = AtomicU64::new(0);

/// Registers the kernel's fault entry and armed word (checked by the
/// caller: `entry` in guest memory, `armed` an 8-aligned writable guest
/// word) and guest memory's bounds.
pub fn register_fault_handler(entry: u64, armed: u64, lo: u64, hi: u64) {
    GUEST_LO.store(lo, Ordering::SeqCst);
    GUEST_HI.store(hi, Ordering::SeqCst);
    FAULT_ARMED.store(armed as *mut AtomicU64, Ordering::SeqCst);
    FAULT_ENTRY.store(entry, Ordering::SeqCst);
}

/// Hands a SIGSEGV or SIGBUS of guest code back to the guest's kernel when
/// it asked for it (`Hypercall::FaultHandler`) and its armed word is set:
/// the guest resumes at the kernel's entry, on its own stack below the
/// faulting frame's red zone, with the signal, the faulting address and
/// the faulting instruction as arguments. Returns whether it did. This
/// gives a hostile guest nothing: it could jump to any of its own code
/// anyway, and everything it runs stays under the same filter.
fn hand_back(sig: libc::c_int, addr: u64, ctx: *mut libc::c_void) -> bool {
    (sig == libc::SIGSEGV || sig == libc::SIGBUS) && redirect(sig as u64, addr, ctx)
}

/// Sends the guest thread interrupted by the preemption tick (`ctx`) to
/// the kernel's fault entry with `shoal_abi::FAULT_HANG`: the hang
/// watchdog found a gated call older than its limit (`crate::preempt`).
/// Same conditions as a fault's hand-back (the entry registered, its armed
/// word set, the interrupted instruction and the new stack in guest
/// memory): a thread inside the tender's own code (a hypercall) is left
/// alone, and the next tick tries again. Returns whether it did.
pub fn redirect_hang(ctx: *mut libc::c_void) -> bool {
    redirect(shoal_abi::FAULT_HANG, 0, ctx)
}

/// The hand-back itself: `what` is the signal, or `FAULT_HANG`.
fn redirect(what: u64, addr: u64, ctx: *mut libc::c_void) -> bool {
    let entry = FAULT_ENTRY.load(Ordering::SeqCst);
    let armed = FAULT_ARMED.load(Ordering::SeqCst);
    if entry == 0 || armed.is_null() || ctx.is_null() {
        return false;
    }
    // SAFETY: `armed` was checked as an 8-aligned, writable guest word
    // when registered; guest memory stays mapped for the process's life.
    if unsafe { (*armed).load(Ordering::SeqCst) } == 0 {
        return false;
    }
    // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO
    // handler; returning from the handler loads the registers changed here.
    let uc = unsafe { &mut *ctx.cast::<libc::ucontext_t>() };
    let g = &mut uc.uc_mcontext.gregs;
    let (rip, rsp) = (g[libc::REG_RIP as usize] as u64, g[libc::REG_RSP as usize] as u64);
    let (lo, hi) = (GUEST_LO.load(Ordering::SeqCst), GUEST_HI.load(Ordering::SeqCst));
    // The faulting code and the new stack must both be the guest's.
    let new_sp = (rsp.wrapping_sub(128) & !15).wrapping_sub(8);
    if !(lo..hi).contains(&rip) || !(lo + 4096..hi).contains(&new_sp) {
        return false;
    }
    g[libc::REG_RIP as usize] = entry as i64;
    g[libc::REG_RSP as usize] = new_sp as i64;
    g[libc::REG_RDI as usize] = what as i64;
    g[libc::REG_RSI as usize] = addr as i64;
    g[libc::REG_RDX as usize] = rip as i64;
    true
}

/// The kernel's program-fault entry (`Hypercall::ProgramFault`; 0: none).
static PROGRAM_ENTRY: AtomicU64 = AtomicU64::new(0);
/// Where the kernel reads the fault (`shoal_abi::ProgramFaultArea`).
static PROGRAM_AREA: AtomicU64 = AtomicU64::new(0);

/// Registers (or, with `entry` 0, withdraws) the kernel's program-fault
/// entry and area (checked by the caller: `entry` in guest memory, `area`
/// 8-aligned and writable).
pub fn register_program_fault(entry: u64, area: u64) {
    PROGRAM_AREA.store(area, Ordering::SeqCst);
    PROGRAM_ENTRY.store(entry, Ordering::SeqCst);
}

/// Hands a CPU fault of the program (any crash signal whose instruction
/// lies in guest memory, after recovery declined it) to the kernel, which
/// delivers it as a Linux signal to the program's handler: the faulting
/// registers and what the host kernel said of the fault go into the
/// registered area, and the guest resumes at the registered entry below
/// the faulting frame's red zone. Only values this handler read from the
/// host's `ucontext_t` and `siginfo_t` are written, only to the area the
/// kernel registered (checked writable again now: the kernel may have
/// changed its protections), and only the guest's own registered entry is
/// resumed: a hostile guest gets nothing it could not do by jumping.
fn program_fault(sig: libc::c_int, code: u64, addr: u64, ctx: *mut libc::c_void) -> bool {
    let (entry, area) = (PROGRAM_ENTRY.load(Ordering::SeqCst), PROGRAM_AREA.load(Ordering::SeqCst));
    if entry == 0 || ctx.is_null() {
        return false;
    }
    // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO
    // handler; returning from the handler loads the registers changed here.
    let uc = unsafe { &mut *ctx.cast::<libc::ucontext_t>() };
    let g = &mut uc.uc_mcontext.gregs;
    let (rip, rsp) = (g[libc::REG_RIP as usize] as u64, g[libc::REG_RSP as usize] as u64);
    let (lo, hi) = (GUEST_LO.load(Ordering::SeqCst), GUEST_HI.load(Ordering::SeqCst));
    let mem = crate::hypercall::guest_mem();
    let (lo, hi) = if hi == 0 { (shoal_loader::GuestMemory::LOW, mem.size()) } else { (lo, hi) };
    let new_sp = (rsp.wrapping_sub(128) & !15).wrapping_sub(8);
    let size = core::mem::size_of::<shoal_abi::ProgramFaultArea>() as u64;
    if !(lo..hi).contains(&rip) || !(lo + 4096..hi).contains(&new_sp) || !crate::hypercall::writable(area, size) {
        return false;
    }
    let mut a = shoal_abi::ProgramFaultArea { signo: sig as u64, code, addr, ..Default::default() };
    for (r, v) in a.regs.iter_mut().zip(g.iter()) {
        *r = *v as u64;
    }
    a.err = g[libc::REG_ERR as usize] as u64;
    a.trapno = g[libc::REG_TRAPNO as usize] as u64;
    a.cr2 = g[libc::REG_CR2 as usize] as u64;
    // SAFETY: `area` was checked just now: 8-aligned (at registration)
    // and writable guest memory, which stays mapped for the process's life.
    unsafe { core::ptr::write_volatile(area as *mut shoal_abi::ProgramFaultArea, a) };
    g[libc::REG_RIP as usize] = entry as i64;
    g[libc::REG_RSP as usize] = new_sp as i64;
    true
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
    // Recovery's own faults first: a fault inside a rebootable component.
    if hand_back(sig, addr, ctx) || program_fault(sig, code, addr, ctx) {
        return;
    }
    record(CRASH, sig as u64, code, addr, rip_of(ctx));
    finish(sig)
}

/// Writes the message for an instance that died by signal `sig` with
/// `report` (`shoal: …` and a newline) and returns the instance's exit
/// status (see the table in the crate docs). Allocates nothing, so the
/// handlers can use it too.
pub fn describe(w: &mut impl Write, sig: libc::c_int, report: &Report) -> i32 {
    let kind = report.kind.load(Ordering::Acquire);
    let number = report.number.load(Ordering::Relaxed);
    if sig == libc::SIGSYS && kind == CRASH && (1..64).contains(&number) {
        // A crash handler recorded the signal, then died by SIGSYS.
        return describe_crash(w, number as libc::c_int, report);
    }
    if sig == libc::SIGSYS {
        let _ = w.write_str("shoal: the guest made a system call that the spt sandbox forbids and was killed");
        let _ = if kind == SYSCALL {
            match syscall_name(number) {
                Some(name) => writeln!(w, " (system call {number}, {name})"),
                None => writeln!(w, " (system call {number})"),
            }
        } else {
            writeln!(w, " (a system call of another architecture)")
        };
        return crate::EXIT_SIGSYS;
    }
    if CRASH_SIGNALS.contains(&sig) || sig == libc::SIGABRT {
        return describe_crash(w, sig, report);
    }
    let _ = writeln!(w, "shoal: the guest was killed by {}", signal_name(sig));
    128 + sig
}

fn describe_crash(w: &mut impl Write, sig: libc::c_int, report: &Report) -> i32 {
    let _ = write!(w, "shoal: the guest crashed: {} ({}", signal_name(sig), signal_meaning(sig));
    if report.kind.load(Ordering::Acquire) == CRASH {
        let addr = report.addr.load(Ordering::Relaxed);
        let rip = report.rip.load(Ordering::Relaxed);
        if sig == libc::SIGSEGV || sig == libc::SIGBUS {
            let _ = write!(w, " at {addr:#x}");
        }
        let _ = write!(w, ", rip {rip:#x}");
    }
    let _ = writeln!(w, ")");
    128 + sig
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

/// Signals the tender hands to the guest ([`shoal_abi::FORWARDED_SIGNALS`]):
/// received but not yet in the guest's word (bit `signal - 1`).
static FORWARD_PENDING: AtomicU64 = AtomicU64::new(0);
/// The guest's host-signal word (`Hypercall::SignalWord`), once registered.
static FORWARD_WORD: AtomicPtr<AtomicU64> = AtomicPtr::new(core::ptr::null_mut());

/// The forwarded signals the guest has not taken (bit `signal - 1`): its
/// word once registered (the kernel swaps it to 0 when it takes them),
/// before that all that came.
fn untaken() -> u64 {
    let w = FORWARD_WORD.load(Ordering::SeqCst);
    if w.is_null() {
        return FORWARD_PENDING.load(Ordering::SeqCst);
    }
    // SAFETY: `w` was checked as an 8-aligned, writable guest word when
    // registered; guest memory stays mapped for the process's life.
    unsafe { (*w).load(Ordering::SeqCst) }
}

/// The handler of the forwarded signals in the instance process: sets the
/// signal's bit in the guest's word (or keeps it until the guest registers
/// one). Arriving, it interrupts the tender's `ppoll`/`clock_nanosleep`,
/// so an idle guest looks at the word now; landing in the program's code,
/// it sends the vCPU to the kernel's preemption entry
/// ([`crate::preempt::interrupt`]), so a program busy in a loop gets it
/// too. Atomics only: it may run with the guest's FS base and stack state.
///
/// An instance that runs in place has no parent to stop it when its
/// kernel does not take the signal (`shoal_loader::stop`): a second
/// signal that finds an earlier one untaken ends it here, with the line
/// and the status of death by the first.
pub extern "C" fn on_forwarded(sig: libc::c_int, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    if !(1..=64).contains(&sig) {
        return;
    }
    let bit = 1u64 << (sig - 1);
    let before = FORWARD_PENDING.fetch_or(bit, Ordering::SeqCst);
    let w = FORWARD_WORD.load(Ordering::SeqCst);
    let earlier = if w.is_null() {
        before
    } else {
        // SAFETY: `w` was checked as an 8-aligned, writable guest word when
        // registered; guest memory stays mapped for the process's life.
        unsafe { (*w).fetch_or(bit, Ordering::SeqCst) }
    };
    if earlier != 0 && IN_PLACE.load(Ordering::Relaxed) {
        stop_in_place(shoal_loader::stop::first_signal(earlier));
    }
    // A program that only computes makes no system call that would look
    // at the word: stop it where it is, as a preemption tick does.
    crate::preempt::interrupt(ctx);
}

/// Ends an instance that runs in place whose kernel did not take `sig`
/// before a second signal came: the line on fd 2 and status 128 + `sig`.
fn stop_in_place(sig: i32) -> ! {
    let mut m = crate::hypercall::Msg::new();
    let _ = m.write_str("shoal: ");
    let _ = shoal_loader::stop::write_message(&mut m, sig, shoal_loader::stop::NotTaken::Second);
    let _ = m.write_str("\n");
    write_stderr(m.as_bytes());
    // SAFETY: exit_group does not return; the filter allows it.
    unsafe {
        core::arch::asm!("syscall", in("rax") libc::SYS_exit_group, in("rdi") shoal_loader::stop::status(sig), options(noreturn, nostack));
    }
}

/// The signal the waiting parent asks with whether a forwarded signal is
/// still untaken ([`on_query`]). Ignored by default, so one that came
/// before the handler was installed harms nothing (the parent then hears
/// no answer and takes the signal as untaken).
pub const QUERY_SIGNAL: libc::c_int = libc::SIGURG;

/// The handler of [`QUERY_SIGNAL`] in the instance process: answers in
/// the report page which forwarded signals the guest has not taken. It
/// runs even while the guest's kernel spins (a host signal handler, not
/// guest code). Atomics only, as [`on_forwarded`]. The parent sends the
/// query after the forwarded signal; pending together, the lower number
/// (SIGHUP 1, SIGTERM 15 < SIGURG 23) is delivered first, and each
/// handler blocks every signal, so the answer sees the signal in the word.
/// A guest may write the page itself and claim it took the signal: then
/// it is like a program whose handler ignores SIGTERM (its own loss; the
/// user still has a second signal and SIGKILL).
pub extern "C" fn on_query(_sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let r = REPORT.load(Ordering::Relaxed);
    if r.is_null() {
        return;
    }
    // SAFETY: the report page (or OWN_REPORT), mapped for the process's life.
    let r = unsafe { &*r };
    r.untaken.store(untaken(), Ordering::SeqCst);
    r.answered.store(r.query.load(Ordering::SeqCst), Ordering::SeqCst);
}

/// Whether the guest's host-signal word holds a signal the guest has not
/// taken yet: a `NetPoll` that would block then returns at once, since
/// that signal arrived before the wait and would not end it (atomics
/// only: `NetPoll` may run without the tender's FS base).
pub fn forward_waiting() -> bool {
    let w = FORWARD_WORD.load(Ordering::SeqCst);
    // SAFETY: as in `on_forwarded`.
    !w.is_null() && unsafe { (*w).load(Ordering::SeqCst) } != 0
}

/// Registers the guest's host-signal word at `addr` (checked by the
/// caller: 8-aligned, writable guest memory) and hands it what arrived
/// before.
pub fn register_signal_word(addr: u64) {
    let w = addr as *mut AtomicU64;
    FORWARD_WORD.store(w, Ordering::SeqCst);
    // SAFETY: as in `on_forwarded`.
    unsafe { (*w).fetch_or(FORWARD_PENDING.load(Ordering::SeqCst), Ordering::SeqCst) };
}

/// Forwarded signals that reached the waiting parent and that its loop
/// ([`crate::supervise`]) has not handled yet (bit `signal - 1`).
static ARRIVED: AtomicU64 = AtomicU64::new(0);
/// The write end of the parent's self-pipe: a byte per arrival wakes its
/// loop (-1 before [`catch_for_child`]).
static WAKE_FD: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(-1);

/// The parent's handler of the forwarded signals: notes the signal and
/// wakes the parent's loop, which forwards it to the instance (`kill`) —
/// or, when the instance has not taken the previous one, stops it.
/// Async-signal-safe: atomics and `write`.
extern "C" fn note_for_child(sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    if (1..=64).contains(&sig) {
        ARRIVED.fetch_or(1 << (sig - 1), Ordering::SeqCst);
    }
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: write of one byte from a local to our own pipe
        // (non-blocking: a full pipe already holds a wake-up).
        unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
    }
}

/// In the parent, before it starts the instance: catch
/// [`shoal_abi::FORWARDED_SIGNALS`] instead of dying of them, keeping what
/// arrives for the loop that waits for the instance. (Installed after
/// the start, a SIGTERM sent as soon as the guest had printed something
/// could still find this process unprepared on a loaded machine: the
/// instance runs on while the parent waits for a CPU.) Returns the read
/// end of the self-pipe the handler wakes the loop with.
pub fn catch_for_child() -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors owned by nothing else. The write end lives
    // as long as the process (the handler may write it at any time).
    let read = unsafe { std::os::fd::OwnedFd::from_raw_fd(fds[0]) };
    WAKE_FD.store(fds[1], Ordering::SeqCst);
    for sig in shoal_abi::FORWARDED_SIGNALS {
        // SAFETY: the handler only uses atomics and calls write.
        unsafe { crate::sys::set_handler(sig, note_for_child)? };
    }
    Ok(read)
}

/// The forwarded signals that arrived since the last call (taking them).
pub fn take_arrived() -> u64 {
    ARRIVED.swap(0, Ordering::SeqCst)
}
