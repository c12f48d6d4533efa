//! The preemption entry (protocol in
//! `shoal_sched::preempt`): where the tender sends the vCPU when a tick
//! lands in the program's code, and the yield a tick that landed in the
//! kernel causes on the way out of the system call.
//!
//! The tender stores the interrupted instruction pointer in the area's
//! `resume_rip`, sets `in_kernel` and resumes the vCPU at
//! [`shoal_preempt_entry`] with every other register as it was. The entry
//! works like a signal frame the kernel builds itself: it steps below the
//! interrupted code's 128-byte red zone (with `lea`, which keeps the
//! flags), pushes `resume_rip`, the flags and the 15 general-purpose
//! registers, saves the FPU/SSE/AVX state with `xsave` (every component
//! XCR0 enables; `fxsave` where the OS did not enable XSAVE) in a 64-byte
//! aligned area below, sized at boot for the XCR0 the CPU really runs with
//! (`shoal_plat::xsave`: on some nested hosts that is not the XCR0 the VMM
//! set, and AVX-512's state makes it three times larger), and calls [`shoal_preempted`], which yields the vCPU
//! and, when this thread runs again, delivers the signals that came for it
//! meanwhile (an asynchronous `pthread_cancel`). Then it restores
//! everything and returns to `resume_rip` with `ret 128`, which also
//! drops the red-zone gap. The FS base, MXCSR and x87 control word are
//! saved again by the switch itself (`shoal_sched_switch`).

#[cfg(not(test))]
use core::sync::atomic::Ordering;

/// Bytes of the FPU/SSE/AVX save area (`xsave` for XCR0's components, or
/// 512 for `fxsave`), set at boot by [`init`] before the entry is
/// registered; the entry reserves this plus 64. It starts at 0 so that
/// syscall's `.data` is empty and costs no page of its own.
#[no_mangle]
pub static SHOAL_PREEMPT_SAVE_SIZE: AtomicU64Cell = AtomicU64Cell::new(0);
/// Nonzero: the entry uses `xsave`/`xrstor` (the OS enabled XSAVE).
#[no_mangle]
pub static SHOAL_PREEMPT_XSAVE: AtomicU64Cell = AtomicU64Cell::new(0);

/// A `u64` the entry's assembly reads (a transparent atomic).
#[repr(transparent)]
pub struct AtomicU64Cell(core::sync::atomic::AtomicU64);

impl AtomicU64Cell {
    const fn new(v: u64) -> Self {
        AtomicU64Cell(core::sync::atomic::AtomicU64::new(v))
    }
}

#[cfg(all(target_arch = "x86_64", not(test)))]
core::arch::global_asm!(
    ".section .text.shoal_preempt_entry,\"ax\",@progbits",
    ".globl shoal_preempt_entry",
    ".type shoal_preempt_entry,@function",
    "shoal_preempt_entry:",
    "    lea rsp, [rsp - 128]",
    "    push qword ptr [rip + {area} + {resume}]",
    "    pushfq",
    "    push rax",
    "    push rcx",
    "    push rdx",
    "    push rbx",
    "    push rbp",
    "    push rsi",
    "    push rdi",
    "    push r8",
    "    push r9",
    "    push r10",
    "    push r11",
    "    push r12",
    "    push r13",
    "    push r14",
    "    push r15",
    "    mov rbp, rsp",
    // An unmodified executable's thread continues on its kernel stack:
    // its own may be a goroutine's, a few KiB with no room for the FPU
    // state and the kernel's calls below it.
    // (A tick in the system-call entry before it marked the thread in the
    // kernel finds it on that stack already: it stays, below it.)
    "    cmp qword ptr [rip + {kstack}], 0",
    "    je 8f",
    "    mov rax, qword ptr gs:[0]",
    "    sub rax, rsp",
    "    cmp rax, {kstack_size}",
    "    jb 8f",
    "    mov rsp, qword ptr gs:[0]",
    "8:",
    "    sub rsp, qword ptr [rip + {size}]",
    "    and rsp, -64",
    "    cmp qword ptr [rip + {xsave}], 0",
    "    je 1f",
    // The xsave header (bytes 512..576) must be zero for xrstor.
    "    xor eax, eax",
    "    mov qword ptr [rsp + 512], rax",
    "    mov qword ptr [rsp + 520], rax",
    "    mov qword ptr [rsp + 528], rax",
    "    mov qword ptr [rsp + 536], rax",
    "    mov qword ptr [rsp + 544], rax",
    "    mov qword ptr [rsp + 552], rax",
    "    mov qword ptr [rsp + 560], rax",
    "    mov qword ptr [rsp + 568], rax",
    "    mov eax, -1",
    "    mov edx, -1",
    "    xsave64 [rsp]",
    "    jmp 2f",
    "1:",
    "    fxsave64 [rsp]",
    "2:",
    "    cld",
    "    mov rdi, rbp",
    "    mov rsi, rsp",
    "    call shoal_preempted",
    "    mov rbx, rax",
    "    cmp qword ptr [rip + {xsave}], 0",
    "    je 3f",
    "    mov eax, -1",
    "    mov edx, -1",
    "    xrstor64 [rsp]",
    "    jmp 4f",
    "3:",
    "    fxrstor64 [rsp]",
    "4:",
    // A handler that moved the stack pointer: the saved registers move
    // with it (every register is free until they are popped; an upward
    // move copies from the top down, as the two may overlap).
    "    cmp rbx, rbp",
    "    je 7f",
    "    mov rsi, rbp",
    "    mov rdi, rbx",
    "    mov ecx, 17",
    "    jb 5f",
    "    lea rsi, [rsi + 16 * 8]",
    "    lea rdi, [rdi + 16 * 8]",
    "    std",
    "    rep movsq",
    "    cld",
    "    jmp 6f",
    "5:",
    "    rep movsq",
    "6:",
    "    mov rbp, rbx",
    "7:",
    "    mov rsp, rbp",
    "    pop r15",
    "    pop r14",
    "    pop r13",
    "    pop r12",
    "    pop r11",
    "    pop r10",
    "    pop r9",
    "    pop r8",
    "    pop rdi",
    "    pop rsi",
    "    pop rbp",
    "    pop rbx",
    "    pop rdx",
    "    pop rcx",
    "    pop rax",
    "    popfq",
    "    ret 128",
    ".size shoal_preempt_entry, . - shoal_preempt_entry",
    area = sym shoal_sched::preempt::SHOAL_PREEMPT_AREA,
    resume = const shoal_abi::PREEMPT_RESUME_RIP_OFFSET,
    size = sym SHOAL_PREEMPT_SAVE_SIZE,
    xsave = sym SHOAL_PREEMPT_XSAVE,
    kstack = sym SHOAL_PREEMPT_KSTACK,
    kstack_size = const crate::exec::KSTACK,
);

/// Nonzero: the program is an unmodified executable, whose threads each
/// have a kernel stack that the GS base's control word points into
/// (`crate::exec`); the entry runs there instead of on the interrupted
/// stack.
#[no_mangle]
pub static SHOAL_PREEMPT_KSTACK: AtomicU64Cell = AtomicU64Cell::new(0);

/// Marks the program as an unmodified executable (its threads have
/// kernel stacks): set once at start, before its first instruction.
pub fn use_kernel_stacks() {
    SHOAL_PREEMPT_KSTACK.0.store(1, core::sync::atomic::Ordering::SeqCst);
}

#[cfg(not(test))]
extern "C" {
    fn shoal_preempt_entry();
}

/// Sizes the FPU state save of the entry for the XCR0 the CPU really runs
/// with (`shoal_plat::xsave`), checks the size with a canary, and
/// registers the area and the entry with the tender (at boot). A CPU whose
/// save cannot be sized or overruns the area stops the boot with a
/// `shoal:` line: a preempted thread would otherwise overwrite its own
/// saved registers.
#[cfg(not(test))]
pub fn init() {
    use shoal_plat::xsave::SaveArea;
    match shoal_plat::xsave::probe() {
        Err(e) => refuse(format_args!("{e}")),
        Ok(SaveArea::Fxsave) => SHOAL_PREEMPT_SAVE_SIZE.0.store(u64::from(shoal_plat::xsave::FXSAVE_SIZE), Ordering::Relaxed),
        Ok(SaveArea::Xsave { size, xcr0 }) => {
            if !xsave_stays_inside(size) {
                refuse(format_args!("an xsave of every component of XCR0 {xcr0:#x} wrote past the {size} bytes that CPUID leaf 0xd describes, so the FPU save area cannot be sized"));
            }
            SHOAL_PREEMPT_SAVE_SIZE.0.store(u64::from(size), Ordering::Relaxed);
            SHOAL_PREEMPT_XSAVE.0.store(1, Ordering::Relaxed);
        }
    }
    shoal_sched::preempt::init(shoal_preempt_entry as *const () as u64);
}

/// Stops a boot whose FPU state save cannot be made safe.
#[cfg(not(test))]
fn refuse(why: core::fmt::Arguments<'_>) -> ! {
    use core::fmt::Write;
    let _ = writeln!(shoal_plat::console::Stderr, "shoal: this CPU cannot run threads safely: {why}");
    shoal_plat::halt(255)
}

/// Bytes of the canary after the area in the boot check.
#[cfg(not(test))]
const CANARY: usize = 256;

/// Does `xsave` of every enabled component into a `size`-byte area leave
/// the bytes after it alone? Run once at boot, on the heap (pages the
/// kernel heap uses anyway). `xsave` (unlike `xsaveopt`) writes every
/// requested component whether in use or not, so one run shows the extent.
#[cfg(not(test))]
fn xsave_stays_inside(size: u32) -> bool {
    let size = size as usize;
    let Ok(layout) = core::alloc::Layout::from_size_align(size + CANARY, 64) else {
        return false;
    };
    // SAFETY: the layout's size is non-zero.
    let p = unsafe { alloc::alloc::alloc(layout) };
    if p.is_null() {
        return false;
    }
    // SAFETY: `p` is valid for `size + CANARY` bytes (just allocated) and
    // 64-byte aligned; the header (512..576, within `size`) is zeroed as
    // xsave's caller must, the canary follows the area. xsave writes the
    // area only, and the slice is dropped before the block is freed.
    let intact = unsafe {
        core::ptr::write_bytes(p.add(512), 0, 64);
        core::ptr::write_bytes(p.add(size), 0xa5, CANARY);
        core::arch::asm!("xsave64 [{}]", in(reg) p, in("eax") u32::MAX, in("edx") u32::MAX, options(nostack));
        core::slice::from_raw_parts(p.add(size), CANARY).iter().all(|&b| b == 0xa5)
    };
    // SAFETY: allocated above with this layout.
    unsafe { alloc::alloc::dealloc(p, layout) };
    intact
}

/// Where the preemption entry calls in, with `frame` the interrupted
/// registers it saved (`shoal_process::signal::Interrupted`) and `fp`
/// their FPU/SSE/AVX state (the handlers' `fpstate`): the vCPU is
/// marked in the kernel (the tender did it); yield to the other runnable
/// threads, then, running again, deliver what came for this thread (its
/// handlers see and may change `frame`, as after `rt_sigreturn`), and
/// leave the kernel. Returns where the frame is to be restored from: its
/// own address, or, when a handler moved the stack pointer (Go's
/// asynchronous preemption pushes a return address), the same distance
/// below the new one, where the entry copies it.
///
/// # Safety
/// `frame` must be the entry's frame on this thread's stack.
#[cfg(not(test))]
#[no_mangle]
pub unsafe extern "C" fn shoal_preempted(frame: *mut shoal_process::signal::Interrupted, fp: u64) -> u64 {
    shoal_sched::preempt::enter();
    // On a kernel stack (see the entry): a system call that a handler
    // delivered here makes starts below this call, not over it.
    let on_kstack = SHOAL_PREEMPT_KSTACK.0.load(Ordering::Relaxed) != 0;
    let ctl = shoal_plat::cpu::rdgsbase() as *mut u64;
    let here = 0u8;
    let below = ((&raw const here) as u64 & !15).saturating_sub(crate::exec::NEST_GAP);
    // SAFETY: with kernel stacks the GS base points at this thread's
    // control word (crate::exec), which only this thread's entries use.
    let start = on_kstack.then(|| unsafe { core::ptr::replace(ctl, below) });
    let restore = || {
        if let Some(start) = start {
            // SAFETY: as above; the next entry starts where it did.
            unsafe { ctl.write(start) };
        }
    };
    // A tick that landed meanwhile is served by this yield too.
    shoal_sched::preempt::take_pending();
    if shoal_sched::preempt::take_wake() {
        shoal_plat::console::flush_held();
    }
    shoal_sched::yield_now();
    shoal_sched::raise_host_signals();
    if shoal_sched::has_deliverable() {
        // SAFETY: the caller's contract: the entry's saved registers, on
        // this stack, not referenced elsewhere until the entry restores
        // them after this returns.
        let frame = unsafe { &mut *frame };
        let at = core::ptr::from_ref(frame) as u64;
        let fp = shoal_process::signal::Fp { at: fp, xsave: SHOAL_PREEMPT_XSAVE.0.load(Ordering::Relaxed) != 0 };
        let rsp = shoal_process::signal::deliver_pending_interrupted(frame, Some(fp));
        let size = core::mem::size_of::<shoal_process::signal::Interrupted>() as u64;
        let moved = rsp.wrapping_sub(shoal_process::signal::interrupted_rsp(at) - at);
        if moved != at {
            // A stack pointer the program cannot write below: Linux's
            // return to it would fault there and kill with SIGSEGV.
            if shoal_plat::umem::check_write(moved, size).is_err() {
                shoal_process::signal::terminate(11);
            }
            restore();
            shoal_sched::preempt::leave();
            return moved;
        }
    }
    restore();
    shoal_sched::preempt::leave();
    frame as u64
}

/// On the way out of a system call: yields if a tick landed while the
/// kernel ran, then leaves the kernel. A tick that lands after the check
/// but before the leave is seen by the second look. Inline: a call with
/// no tick pending (nearly every one) only looks twice.
#[inline]
pub fn leave_syscall() {
    if !shoal_sched::preempt::pending() {
        shoal_sched::preempt::leave();
        if !shoal_sched::preempt::pending() {
            return;
        }
        shoal_sched::preempt::enter();
    }
    take_ticks_and_leave();
}

/// [`leave_syscall`] with a tick to take.
#[inline(never)]
fn take_ticks_and_leave() {
    loop {
        if shoal_sched::preempt::take_pending() {
            if shoal_sched::preempt::take_wake() {
                shoal_plat::console::flush_held();
            }
            shoal_sched::yield_now();
            shoal_sched::raise_host_signals();
            if shoal_sched::has_deliverable() {
                shoal_process::signal::deliver_pending();
            }
        }
        shoal_sched::preempt::leave();
        if !shoal_sched::preempt::pending() {
            return;
        }
        shoal_sched::preempt::enter();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pending_tick_is_taken_on_the_way_out() {
        use shoal_sched::preempt as p;
        p::enter();
        p::SHOAL_PREEMPT_AREA.pending.store(1, core::sync::atomic::Ordering::SeqCst);
        super::leave_syscall();
        assert!(!p::pending(), "taken");
        assert!(!p::in_kernel(), "left");
    }
}
