//! System calls of an unmodified Linux executable (see the `shoal-exec`
//! crate on the host, which combines one with this kernel).
//!
//! The executable's `mov eax, NR; syscall` pairs were rewritten into jumps
//! to trampolines that enter [`shoal_exec_entry`] as the CPU's `syscall`
//! would: `rax` = the number, `rcx` = the address to return to, every
//! other register the program's. Sites that were not rewritten reach the
//! same entry through the tender's trap path (spt: syscall user dispatch
//! for every `syscall` instruction in guest memory, whose SIGSYS the
//! tender turns into a jump here). Nothing is pushed on the
//! program's stack (its red zone and Go's small goroutine stacks are the
//! program's; the entry writes only its flags, below the red zone): the
//! entry switches at once to the thread's own kernel stack,
//! found through the thread's GS base, which points at the control word
//! at its top: where the next entry starts (the program owns FS; the scheduler's
//! switch keeps GS per thread), and saves a full [`Frame`] there. It
//! returns with every register restored but `rax` (the result), `rcx`
//! (the return address) and `r11` (the flags), as Linux does.
//!
//! Raw `clone` for a thread copies the frame onto the child's new kernel
//! stack with `rax = 0` and the child's stack pointer, so the child
//! resumes after the call site on its own stack, as on Linux.

#[cfg(not(test))]
use shoal_plat::Args;
use shoal_plat::{umem, Errno};

/// Bytes of each thread's kernel stack (touched only as deep as used).
pub(crate) const KSTACK: u64 = 256 << 10;

/// Room the kernel code of one system call may use below its frame: a
/// system call a signal handler makes (the kernel called the handler, on
/// the alternate stack or its own) starts this far below the frame of the
/// call that is delivering, so it never overwrites what that call still
/// needs.
#[cfg(not(test))]
pub(crate) const NEST_GAP: u64 = 48 << 10;

/// The registers of a thread in the executable at a system call, as the
/// entry pushes them (lowest address first).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Frame {
    #[allow(missing_docs)]
    pub r15: u64,
    #[allow(missing_docs)]
    pub r14: u64,
    #[allow(missing_docs)]
    pub r13: u64,
    #[allow(missing_docs)]
    pub r12: u64,
    #[allow(missing_docs)]
    pub r10: u64,
    #[allow(missing_docs)]
    pub r9: u64,
    #[allow(missing_docs)]
    pub r8: u64,
    #[allow(missing_docs)]
    pub rbp: u64,
    #[allow(missing_docs)]
    pub rdi: u64,
    #[allow(missing_docs)]
    pub rsi: u64,
    #[allow(missing_docs)]
    pub rdx: u64,
    #[allow(missing_docs)]
    pub rbx: u64,
    #[allow(missing_docs)]
    pub rax: u64,
    #[allow(missing_docs)]
    pub rflags: u64,
    #[allow(missing_docs)]
    pub rip: u64,
    #[allow(missing_docs)]
    pub rsp: u64,
}

const FRAME_SIZE: u64 = core::mem::size_of::<Frame>() as u64;
const _: () = assert!(FRAME_SIZE == 128);

#[cfg(all(target_arch = "x86_64", not(test)))]
core::arch::global_asm!(
    ".section .text.shoal_exec_entry,\"ax\",@progbits",
    ".globl shoal_exec_entry",
    ".type shoal_exec_entry,@function",
    // The trap path's entry (spt: the SIGSYS of syscall user dispatch;
    // hvt: LSTAR): as the rewritten sites' below, with TRAPPED set in the
    // saved flags (a reserved bit, always clear in RFLAGS) so that only
    // a trapped call looks for a site to patch (module `patch`).
    "shoal_exec_entry:",
    // The flags first (what follows changes them), below the caller's red
    // zone: the only 8 bytes the entry writes on the caller's stack.
    "    lea rsp, [rsp - 136]",
    "    pushfq",
    "    or qword ptr [rsp], {trapped}",
    "    jmp 3f",
    // The entry of rewritten sites' trampolines, patched sites' and the
    // vDSO's system calls.
    ".globl shoal_exec_call_entry",
    "shoal_exec_call_entry:",
    "    lea rsp, [rsp - 136]",
    "    pushfq",
    "3:",
    "    lea r11, [rsp + 144]",
    // A caller already on this thread's kernel stack (a signal handler
    // the kernel called from a system call) continues below its red zone;
    // any other starts at the top.
    "    mov rsp, qword ptr gs:[0]",
    "    sub rsp, r11",
    "    cmp rsp, {kstack}",
    "    ja 1f",
    "    lea rsp, [r11 - 144]",
    "    and rsp, -16",
    "    jmp 2f",
    "1:",
    "    mov rsp, qword ptr gs:[0]",
    "2:",
    "    push r11",
    "    push rcx",
    "    push qword ptr [r11 - 144]",
    "    push rax",
    "    push rbx",
    "    push rdx",
    "    push rsi",
    "    push rdi",
    "    push rbp",
    "    push r8",
    "    push r9",
    "    push r10",
    "    push r12",
    "    push r13",
    "    push r14",
    "    push r15",
    "    cld",
    "    mov rdi, rsp",
    // A light call (see `shoal_exec_light`) is answered without saving the
    // vector registers, whose 32 moves cost more than the call itself.
    "    call {light}",
    "    test al, al",
    "    jnz 4f",
    "    mov rdi, rsp",
    // The program's xmm0-15 below the frame: Linux keeps them across a
    // system call and compiled code may hold values in them across an
    // inline `syscall`, while the kernel's own code uses SSE (its upper
    // ymm halves are safe: the kernel is built for baseline x86-64, whose
    // legacy SSE encoding leaves them alone). rsp is 16-aligned here.
    "    sub rsp, 256",
    "    movdqa [rsp + 0], xmm0",
    "    movdqa [rsp + 16], xmm1",
    "    movdqa [rsp + 32], xmm2",
    "    movdqa [rsp + 48], xmm3",
    "    movdqa [rsp + 64], xmm4",
    "    movdqa [rsp + 80], xmm5",
    "    movdqa [rsp + 96], xmm6",
    "    movdqa [rsp + 112], xmm7",
    "    movdqa [rsp + 128], xmm8",
    "    movdqa [rsp + 144], xmm9",
    "    movdqa [rsp + 160], xmm10",
    "    movdqa [rsp + 176], xmm11",
    "    movdqa [rsp + 192], xmm12",
    "    movdqa [rsp + 208], xmm13",
    "    movdqa [rsp + 224], xmm14",
    "    movdqa [rsp + 240], xmm15",
    "    call {syscall}",
    "    movdqa xmm0, [rsp + 0]",
    "    movdqa xmm1, [rsp + 16]",
    "    movdqa xmm2, [rsp + 32]",
    "    movdqa xmm3, [rsp + 48]",
    "    movdqa xmm4, [rsp + 64]",
    "    movdqa xmm5, [rsp + 80]",
    "    movdqa xmm6, [rsp + 96]",
    "    movdqa xmm7, [rsp + 112]",
    "    movdqa xmm8, [rsp + 128]",
    "    movdqa xmm9, [rsp + 144]",
    "    movdqa xmm10, [rsp + 160]",
    "    movdqa xmm11, [rsp + 176]",
    "    movdqa xmm12, [rsp + 192]",
    "    movdqa xmm13, [rsp + 208]",
    "    movdqa xmm14, [rsp + 224]",
    "    movdqa xmm15, [rsp + 240]",
    "    add rsp, 256",
    // Where a path that restores no vector state (a raw clone's child,
    // a resumed context) enters the return.
    ".globl shoal_exec_return",
    "shoal_exec_return:",
    "4:",
    "    pop r15",
    "    pop r14",
    "    pop r13",
    "    pop r12",
    "    pop r10",
    "    pop r9",
    "    pop r8",
    "    pop rbp",
    "    pop rdi",
    "    pop rsi",
    "    pop rdx",
    "    pop rbx",
    "    pop rax",
    "    mov r11, [rsp]",
    "    popfq",
    "    pop rcx",
    "    mov rsp, [rsp]",
    "    jmp rcx",
    ".size shoal_exec_entry, . - shoal_exec_entry",
    // A thread made by raw clone: its first switch returns here with rsp
    // at its copy of the parent's frame.
    ".globl shoal_exec_thread_start",
    ".type shoal_exec_thread_start,@function",
    "shoal_exec_thread_start:",
    "    call shoal_sched_enter_thread",
    "    jmp shoal_exec_return",
    ".size shoal_exec_thread_start, . - shoal_exec_thread_start",
    syscall = sym shoal_exec_syscall,
    light = sym shoal_exec_light,
    kstack = const KSTACK,
    trapped = const TRAPPED,
);

/// The mark `shoal_exec_entry` leaves in the saved flags of a call that
/// came by the trap path: RFLAGS bit 3, reserved and always clear, taken
/// out again before anything reads the frame's flags.
#[cfg(not(test))]
const TRAPPED: u64 = 1 << 3;

#[cfg(not(test))]
extern "C" {
    fn shoal_exec_thread_start();
}

/// A fresh kernel stack; returns its top (16-byte aligned).
fn kernel_stack() -> Option<u64> {
    shoal_mm::alloc_kernel_pages(KSTACK).map(|base| base + KSTACK)
}

/// Bytes at the top of a kernel stack that hold its control word: where
/// the next entry starts (the entry reads it as `gs:[0]`, a plain load:
/// writing the GS base itself costs 14 ns here, a load nothing).
const CONTROL: u64 = 16;

/// Makes the kernel stack ending at `top` the running thread's: its GS
/// base points at the control word, which says "start at the word".
fn set_control(top: u64) -> Result<(), Errno> {
    let ctl = top - CONTROL;
    umem::write(ctl, ctl)?;
    // SAFETY: the GS base is the kernel's per-thread state in this mode.
    unsafe { shoal_plat::cpu::wrgsbase(ctl) };
    Ok(())
}

/// Called by `_shoal_start` with the initial process stack once the
/// kernel is up: for an image combined with a Linux executable, points
/// the auxiliary vector at the executable (`AT_PHDR`, `AT_PHNUM`,
/// `AT_ENTRY`; `AT_BASE` at its interpreter, which a dynamically linked
/// one starts in: [`super::interp`]), gives the main thread its kernel
/// stack and returns the entry point (the executable's or its
/// interpreter's); 0 for an ordinary shoal image.
#[no_mangle]
pub extern "C" fn shoal_exec_start(sp: u64) -> u64 {
    let Some([entry, phdr, phnum, _end, _tramp_start, _tramp_end, bias]) = shoal_plat::boot::exec_info() else {
        return 0;
    };
    let Some(top) = kernel_stack() else {
        use core::fmt::Write;
        let _ = writeln!(shoal_plat::console::Stderr, "shoal: no memory for the executable's kernel stack");
        shoal_plat::halt(125);
    };
    if set_control(top).is_err() {
        shoal_plat::halt(125);
    }
    super::fault::SHOAL_FAULT_EXEC.store(1, core::sync::atomic::Ordering::Relaxed);
    // The tender added address space for reservations (never-touched
    // PROT_NONE mappings, which cost nothing); --mem limits what the
    // program makes writable.
    let mem = shoal_plat::boot::info().mem_size.saturating_sub(shoal_abi::EXEC_ADDRESS_RESERVE);
    shoal_mm::set_limits(u64::MAX, mem);
    // Code the program makes at run time may run (its `syscall`s trap).
    shoal_mm::space::allow_run_time_code();
    // A dynamically linked executable starts in its interpreter (module
    // `interp`), with AT_BASE its base and AT_ENTRY the program's entry.
    let (start, interp_base) = match super::interp::find(phdr, phnum, bias) {
        Ok(None) => (entry, 0),
        Ok(Some(name)) => match super::interp::load(name) {
            Ok((base, interp_entry)) => (interp_entry, base),
            Err(e) => {
                use core::fmt::Write;
                let path = umem::slice(name, 4096).ok().map(|b| b.split(|&c| c == 0).next().unwrap_or(&[])).unwrap_or(&[]);
                let path = core::str::from_utf8(path).unwrap_or("?");
                let out = &mut shoal_plat::console::Stderr;
                let _ = match super::interp::reason(e) {
                    Some(why) => writeln!(out, "shoal: cannot load the interpreter {path} from the instance's file system ({why})"),
                    None => writeln!(out, "shoal: cannot load the interpreter {path} from the instance's file system (errno {})", e.0),
                };
                shoal_plat::halt(127);
            }
        },
        Err(_) => shoal_plat::halt(125),
    };
    // argc, argv[], NULL, envp[], NULL, then the auxv pairs.
    let fix = || -> Result<(), Errno> {
        let argc: u64 = umem::read(sp)?;
        let mut at = sp + 8 * (argc + 2);
        while umem::read::<u64>(at)? != 0 {
            at += 8;
        }
        at += 8;
        loop {
            let key: u64 = umem::read(at)?;
            match key {
                0 => return Ok(()),
                3 => umem::write(at + 8, phdr)?,
                5 => umem::write(at + 8, phnum)?,
                7 => umem::write(at + 8, interp_base)?,
                9 => umem::write(at + 8, entry)?,
                // The tender's placeholder for the vDSO (module `vdso`),
                // offered to executables only.
                AT_IGNORE => umem::write(at, [AT_SYSINFO_EHDR, super::vdso::address()])?,
                _ => {}
            }
            at += 16;
        }
    };
    if fix().is_err() {
        shoal_plat::halt(125);
    }
    super::preempt::use_kernel_stacks();
    shoal_sched::set_kernel_stack_of(own_kernel_stack);
    shoal_sched::preempt::leave();
    start
}

/// The running thread's kernel stack `(base, size)`, found through its GS
/// base as the entry finds it: freed once the thread has exited.
fn own_kernel_stack() -> Option<(u64, u64)> {
    let top = shoal_plat::cpu::rdgsbase().checked_add(CONTROL)?;
    Some((top.checked_sub(KSTACK)?, KSTACK))
}

/// The auxiliary-vector entry the tender leaves for the vDSO's address.
const AT_IGNORE: u64 = 1;
/// Where the vDSO's ELF header is.
const AT_SYSINFO_EHDR: u64 = 33;

#[cfg(not(test))]
const CLONE: u64 = 56;
#[cfg(not(test))]
const RSEQ: u64 = 334;
#[cfg(not(test))]
const CLONE3: u64 = 435;
#[cfg(not(test))]
const RT_SIGRETURN: u64 = 15;
#[cfg(not(test))]
const PKEY_ALLOC: u64 = 330;

/// The system call of the frame at `f` (from the entry above), on the
/// thread's kernel stack.
#[cfg(not(test))]
extern "C" fn shoal_exec_syscall(f: &mut Frame) {
    shoal_sched::preempt::enter();
    let trapped = f.rflags & TRAPPED != 0;
    f.rflags &= !TRAPPED;
    let n = f.rax;
    let args = Args([f.rdi, f.rsi, f.rdx, f.r10, f.r8, f.r9]);
    // Nested entries (from a handler this call runs) go below this call.
    let ctl = shoal_plat::cpu::rdgsbase() as *mut u64;
    let nested = ((f as *const Frame as u64) & !15).saturating_sub(NEST_GAP);
    // SAFETY: the GS base points at this thread's control word (set_control),
    // in its kernel stack, which only this thread's entries use.
    let start = unsafe { core::ptr::replace(ctl, nested) };
    // A library's `mov eax, NR; syscall` that trapped is rewritten now
    // (module `patch`), before the call can change the frame. A call
    // from a rewritten site (most calls) skips the look.
    if trapped {
        super::patch::after_trap(f.rip, n);
        f.rip = super::patch::resume_at(f.rip);
    }
    if n == RT_SIGRETURN && !shoal_process::signal::is_nested_frame(f.rsp) {
        sigreturn_direct(f, ctl, start);
    }
    let r = if let Some(r) = super::refused(n) {
        r
    } else if n == RSEQ || n == CLONE3 {
        // Asked by glibc and Go at start; ENOSYS is their fallback
        // (restartable sequences off, clone instead of clone3), so it is
        // not reported as a missing call.
        Errno::ENOSYS.to_ret()
    } else if n == PKEY_ALLOC {
        // Node asks for a protection key; on a CPU without them (these
        // hosts: no `pku`) Linux answers EINVAL, and V8 goes on without.
        Errno::EINVAL.to_ret()
    } else if n == CLONE {
        match clone(f) {
            Ok(tid) => i64::from(tid),
            Err(e) => e.to_ret(),
        }
    } else if let Some(r) = super::clock_read(n, &args) {
        r
    } else {
        shoal_plat::next_syscall_epoch();
        super::dispatch(n, &args)
    };
    f.rax = r as u64;
    super::preempt::leave_syscall();
    // The site may have been rewritten forward while this call waited.
    if trapped {
        f.rip = super::patch::resume_at(f.rip);
    }
    // SAFETY: as above; the next entry starts where this one did.
    unsafe { ctl.write(start) };
}

/// The light system calls: pure reads of the kernel's state that change
/// nothing, answered by [`shoal_exec_light`]. Go asks `getpid` and
/// `gettid` at every preemption signal it sends (`tgkill`).
#[cfg(not(test))]
const GETPID: u64 = 39;
#[cfg(not(test))]
const GETPPID: u64 = 110;
#[cfg(not(test))]
const GETTID: u64 = 186;

/// Answers a light system call (`rax` in the frame at `f`) straight from
/// the entry, which then saves no vector register: true if it did (the
/// result in `f.rax`), false for the full path ([`shoal_exec_syscall`]).
/// So that the program's xmm registers survive without their save, this
/// function calls nothing and touches no vector register: `shoal-exec`
/// decodes it in the kernel image before it builds any instance on it
/// and refuses a kernel whose compiler made it otherwise (a panic would
/// be a call: every look here is one that cannot fail). It answers only
/// when the full path would do nothing else: a call from a rewritten
/// site (a trapped one may be patched), no seccomp profile, no gate to pass (recover's
/// `PLAIN`), no forwarded host signal, no interval timer, no deliverable
/// signal, no preemption tick waiting. Since the calls change nothing,
/// declining at any point is always right: the full path answers afresh.
#[cfg(not(test))]
#[no_mangle]
extern "C" fn shoal_exec_light(f: &mut Frame) -> bool {
    let n = f.rax;
    // A seccomp profile is the full path's to apply (`super::refused`).
    if !(n == GETPID || n == GETTID || n == GETPPID) || f.rflags & TRAPPED != 0 || shoal_plat::boot::seccomp_on() {
        return false;
    }
    shoal_sched::preempt::enter();
    if !shoal_recover::plain(shoal_recover::id::PROCESS) || shoal_plat::hostsig::pending_inline() {
        return false;
    }
    let Some((tid, false)) = shoal_sched::light_state() else { return false };
    f.rax = match n {
        GETPID => shoal_process::PID,
        GETPPID => shoal_process::PPID,
        _ => u64::from(tid),
    };
    shoal_plat::next_syscall_epoch_inline();
    // As `preempt::leave_syscall`, but a tick is the full path's to take
    // (its yield runs other threads' code, which may use the vector
    // registers: they must be saved first).
    if shoal_sched::preempt::pending() {
        return false;
    }
    shoal_sched::preempt::leave();
    if shoal_sched::preempt::pending() {
        shoal_sched::preempt::enter();
        return false;
    }
    true
}

/// `rt_sigreturn` from a handler entered directly (a fault's:
/// `crate::fault`): resumes at the registers and FPU/SSE state of the
/// frame at the caller's stack pointer, every register restored (rcx and
/// r11 too, as Linux's return from a signal); `ctl` gets `start` back.
#[cfg(not(test))]
fn sigreturn_direct(f: &Frame, ctl: *mut u64, start: u64) -> ! {
    let mut fx = shoal_process::signal::Fxsave::default();
    shoal_process::signal::save_fp(&mut fx);
    let Ok(mut regs) = shoal_process::signal::sigreturn_direct(f.rsp, f.rflags, &mut fx) else { shoal_process::signal::terminate(11) };
    let rip = &mut regs[shoal_process::signal::reg::RIP];
    *rip = super::patch::resume_at(*rip);
    super::preempt::leave_syscall();
    // SAFETY: as in shoal_exec_syscall; nothing of this call stays on the
    // kernel stack once the program resumes.
    unsafe { ctl.write(start) };
    // SAFETY: resumes the program as its handler's context says; `regs`
    // and `fx` live on this stack, which the resume reads before leaving.
    unsafe { super::fault::shoal_fault_resume(&regs, &fx) }
}

/// Raw `clone(flags, stack, ptid, ctid, tls)` of a thread: the child
/// resumes after the call site with `rax = 0` on `stack` (the parent's
/// stack when 0).
#[cfg_attr(test, allow(dead_code))]
fn clone(f: &Frame) -> Result<u32, Errno> {
    use shoal_sched::{CLONE_SETTLS, CLONE_SIGHAND, CLONE_THREAD, CLONE_VFORK, CLONE_VM};
    let (flags, stack, ptid, ctid, tls) = (f.rdi as i32, f.rsi, f.rdx, f.r10, f.r8);
    let need = CLONE_VM | CLONE_THREAD | CLONE_SIGHAND;
    if flags & need != need || flags & CLONE_VFORK != 0 {
        // A new process: fork, vfork, posix_spawn. An instance is one.
        return Err(Errno::ENOSYS);
    }
    let top = kernel_stack().ok_or(Errno::EAGAIN)?;
    let mut child = *f;
    child.rax = 0;
    if stack != 0 {
        child.rsp = stack;
    }
    let ctl = top - CONTROL;
    umem::write(ctl, ctl)?;
    let frame_at = ctl - FRAME_SIZE;
    umem::write(frame_at, child)?;
    let fs = if flags & CLONE_SETTLS != 0 { tls } else { shoal_plat::cpu::rdfsbase() };
    #[cfg(not(test))]
    let start = shoal_exec_thread_start as *const () as u64;
    #[cfg(test)]
    let start = 0u64;
    // The scheduler's first frame: MXCSR and x87 CW (defaults), FS, GS
    // (the child's control word), r15…rbp, return address.
    let first: [u64; 11] = [0x037f_0000_1f80, fs, ctl, 0, 0, 0, 0, 0, 0, 0, start];
    let rsp = frame_at - shoal_sched::FIRST_FRAME;
    umem::write(rsp, first)?;
    shoal_sched::spawn_first_frame(rsp, flags, ptid, ctid)
}
