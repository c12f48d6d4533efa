//! CPU faults of the program as Linux signals: a nil dereference, `ud2`,
//! `int3` or a division by zero reaches the program's own handler with
//! Linux's `rt_sigframe`, as on Linux (Go turns SIGSEGV into a panic).
//!
//! While the program has a handler for a fault signal
//! (`shoal_process::signal::update_fault_entry`), the tender knows
//! [`shoal_fault_entry`] and [`AREA`]: at a fault it did not give to
//! recovery (a fault inside a rebootable component comes first), it writes
//! the faulting registers and what the CPU said of the fault into the
//! area and resumes the thread at the entry, 128 bytes below the faulting
//! stack. The entry moves to a kernel stack (an executable's: the
//! thread's own, found through GS as the system-call entry does; an image
//! linked with the kernel: right there, below the red zone) and saves the
//! FPU/SSE state there (the frame's `fpstate`). In an executable it then
//! builds the signal frame and resumes the thread at its handler, as
//! Linux does, keeping nothing on the kernel stack: the handler's
//! `rt_sigreturn` is a system call of its own (`crate::exec`), and a
//! handler that leaves by `siglongjmp` costs nothing. In an image linked
//! with the kernel, it calls the handler and resumes with every register
//! (and the FPU/SSE state) the handler's `rt_sigreturn` left in its
//! context, rsp and rip included. A fault with no handler to
//! take it (blocked, ignored, default) or in the kernel's own code ends
//! the instance with the line and status the tender gives a crash.

use core::cell::UnsafeCell;
use shoal_abi::ProgramFaultArea;

/// Where the tender writes a program fault (one vCPU: one area; the entry
/// copies it out before anything could fault again).
#[repr(C, align(8))]
pub struct Area(UnsafeCell<ProgramFaultArea>);

// SAFETY: written only by the tender while the vCPU is stopped at a fault,
// read only by the entry after that (one vCPU).
unsafe impl Sync for Area {}

/// The program-fault area.
pub static AREA: Area = Area(UnsafeCell::new(ProgramFaultArea { regs: [0; 18], signo: 0, code: 0, addr: 0, trapno: 0, err: 0, cr2: 0 }));

/// Nonzero: the image runs a Linux executable, whose faulting thread's
/// kernel stack is found through GS (`crate::exec`).
#[no_mangle]
pub static SHOAL_FAULT_EXEC: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Bytes of an executable thread's kernel stack (as `crate::exec`).
#[cfg(not(test))]
const KSTACK: u64 = 256 << 10;

#[cfg(all(target_arch = "x86_64", not(test)))]
core::arch::global_asm!(
    ".section .text.shoal_fault_entry,\"ax\",@progbits",
    ".globl shoal_fault_entry",
    ".type shoal_fault_entry,@function",
    "shoal_fault_entry:",
    // Every register is in the area: any may be used.
    "    cmp qword ptr [rip + {exec}], 0",
    "    je 2f",
    // As the system-call entry: a thread already on its kernel stack (a
    // handler the kernel called from a system call) continues below;
    // any other starts at the top of it.
    "    mov rax, qword ptr gs:[0]",
    "    mov rcx, rax",
    "    sub rcx, rsp",
    "    cmp rcx, {kstack}",
    "    jb 2f",
    "    mov rsp, rax",
    "2:",
    // The FPU/SSE state, before any kernel code changes it.
    "    and rsp, -64",
    "    sub rsp, 512",
    "    fxsave64 [rsp]",
    "    mov rdi, rsp",
    "    cld",
    "    call {deliver}",
    "    ud2",
    ".size shoal_fault_entry, . - shoal_fault_entry",
    // shoal_fault_resume(regs: rdi, fp: rsi): the FPU/SSE state from
    // `fp` (an fxsave area), every general register, rsp, rip and
    // the flags from `regs` (gregs order), as the preemption exit returns:
    // rip and the flags go just below the target's red zone.
    ".section .text.shoal_fault_resume,\"ax\",@progbits",
    ".globl shoal_fault_resume",
    ".type shoal_fault_resume,@function",
    "shoal_fault_resume:",
    "    fxrstor64 [rsi]",
    "    mov rax, [rdi + 120]",
    "    lea rax, [rax - 144]",
    "    mov rcx, [rdi + 128]",
    "    mov [rax + 8], rcx",
    "    mov rcx, [rdi + 136]",
    "    mov [rax], rcx",
    "    mov rsp, rax",
    "    mov r8, [rdi]",
    "    mov r9, [rdi + 8]",
    "    mov r10, [rdi + 16]",
    "    mov r11, [rdi + 24]",
    "    mov r12, [rdi + 32]",
    "    mov r13, [rdi + 40]",
    "    mov r14, [rdi + 48]",
    "    mov r15, [rdi + 56]",
    "    mov rsi, [rdi + 72]",
    "    mov rbp, [rdi + 80]",
    "    mov rbx, [rdi + 88]",
    "    mov rdx, [rdi + 96]",
    "    mov rax, [rdi + 104]",
    "    mov rcx, [rdi + 112]",
    "    mov rdi, [rdi + 64]",
    "    popfq",
    "    ret 128",
    ".size shoal_fault_resume, . - shoal_fault_resume",
    exec = sym SHOAL_FAULT_EXEC,
    kstack = const KSTACK,
    deliver = sym shoal_fault_deliver,
);

#[cfg(not(test))]
extern "C" {
    fn shoal_fault_entry();
    /// Resumes the program with the registers `regs` and the FPU/SSE state
    /// `fp`.
    pub(crate) fn shoal_fault_resume(regs: *const [u64; 18], fp: *const shoal_process::signal::Fxsave) -> !;
}

/// Gives process the entry and area to offer the tender (at boot).
#[cfg(not(test))]
pub fn init() {
    shoal_process::signal::set_fault_entry(shoal_fault_entry as *const () as u64, AREA.0.get() as u64);
}

/// The entry's Rust half, on a kernel stack, with the program's FPU/SSE
/// state saved at `fp`.
#[cfg(not(test))]
extern "C" fn shoal_fault_deliver(fp: *mut shoal_process::signal::Fxsave) -> ! {
    use shoal_process::signal::Fp;
    // SAFETY: the tender wrote the area before resuming here; nothing
    // writes it until the next fault, which cannot come before this copy.
    let a = unsafe { core::ptr::read_volatile(AREA.0.get()) };
    if shoal_sched::preempt::in_kernel() {
        crash(&a);
    }
    shoal_sched::preempt::enter();
    let area = Fp { at: fp as u64, xsave: false };
    let exec = SHOAL_FAULT_EXEC.load(core::sync::atomic::Ordering::Relaxed) != 0;
    let back = if exec { shoal_process::signal::deliver_fault_direct(&a, area) } else { shoal_process::signal::deliver_fault(&a, area) };
    let Some(regs) = back else { crash(&a) };
    shoal_sched::preempt::leave();
    // SAFETY: resumes the program with the registers and FPU/SSE state
    // its handler is entered with or its `rt_sigreturn` left, as Linux
    // does; `regs` and `fp` live on this stack, which the resume reads
    // before leaving it.
    unsafe { shoal_fault_resume(&regs, fp) }
}

/// Ends the instance for a fault nobody takes, with the tender's line.
#[cfg(not(test))]
fn crash(a: &ProgramFaultArea) -> ! {
    use core::fmt::Write;
    let (name, meaning) = match a.signo {
        4 => ("SIGILL", "illegal instruction"),
        5 => ("SIGTRAP", "breakpoint or trap"),
        7 => ("SIGBUS", "bus error"),
        8 => ("SIGFPE", "arithmetic exception"),
        _ => ("SIGSEGV", "invalid memory access"),
    };
    let rip = a.regs[16];
    let mut e = shoal_plat::console::Stderr;
    let _ = if matches!(a.signo, 7 | 11) {
        writeln!(e, "shoal: the guest crashed: {name} ({meaning} at {:#x}, rip {rip:#x})", a.addr)
    } else {
        writeln!(e, "shoal: the guest crashed: {name} ({meaning}, rip {rip:#x})")
    };
    shoal_plat::hypercall::halt(128 + (a.signo & 0x7f) as i64)
}
