//! The image entry point and the boot information.
//!
//! The tender enters `_shoal_start` with `rdi` = the boot-info address and
//! `rsp` at `argc` of a Linux initial process stack (see `shoal_abi`). The
//! entry keeps that stack pointer in a callee-saved register, runs
//! `shoal_kernel_init` (defined by the `shoal-kernel` crate) and then enters
//! libc's `_start` exactly as Linux would have.

use crate::Global;
use shoal_abi::{BootInfo, ABI_VERSION, BOOT_INFO_MAGIC};

#[cfg(all(target_arch = "x86_64", not(test)))]
core::arch::global_asm!(
    ".section .text._shoal_start,\"ax\",@progbits",
    ".globl _shoal_start",
    ".type _shoal_start,@function",
    "_shoal_start:",
    "    mov r12, rsp",
    "    mov [rip + {initial_sp}], rsp",
    "    and rsp, -16",
    "    call shoal_kernel_init",
    "    mov rdi, r12",
    "    call shoal_exec_start",
    "    mov rsp, r12",
    "    xor ebp, ebp",
    "    test rax, rax",
    "    jnz 2f",
    "    jmp _start",
    // A Linux executable: its entry with Linux's initial register state
    // (everything zero but rsp; rdx = 0: no function for atexit).
    "2:",
    "    mov r11, rax",
    "    xor eax, eax",
    "    xor ebx, ebx",
    "    xor ecx, ecx",
    "    xor edx, edx",
    "    xor esi, esi",
    "    xor edi, edi",
    "    xor r8d, r8d",
    "    xor r9d, r9d",
    "    xor r10d, r10d",
    "    xor r12d, r12d",
    "    xor r13d, r13d",
    "    xor r14d, r14d",
    "    xor r15d, r15d",
    "    jmp r11",
    ".size _shoal_start, . - _shoal_start",
    initial_sp = sym INITIAL_SP,
);

/// `SHOAL_EXEC_INFO[0]` as linked: this image runs its own program
/// (musl's `_start`).
pub const EXEC_MAGIC_NONE: u64 = u64::from_le_bytes(*b"SHOALEX0");
/// `SHOAL_EXEC_INFO[0]` once `shoal-exec` combined a Linux executable
/// with this kernel and wrote the rest of the words.
pub const EXEC_MAGIC: u64 = u64::from_le_bytes(*b"SHOALEX1");

/// What `shoal-exec` writes into the image file when it combines a Linux
/// executable with this kernel: magic, entry point, address and number of
/// its program headers, end of its memory (page aligned, after the
/// trampolines), start and end of its trampolines, its load bias (0, or
/// the PIE base). It is found
/// by its symbol name, so it must stay in `.data` (file bytes).
#[no_mangle]
#[used]
pub static mut SHOAL_EXEC_INFO: [u64; 8] = [EXEC_MAGIC_NONE, 0, 0, 0, 0, 0, 0, 0];

/// The executable combined with this kernel, if any: the words of
/// [`SHOAL_EXEC_INFO`] after the magic.
pub fn exec_info() -> Option<[u64; 7]> {
    // SAFETY: a plain read of a static that only the image file sets;
    // volatile, so the compiler does not fold in the linked value.
    let w = unsafe { core::ptr::read_volatile(core::ptr::addr_of!(SHOAL_EXEC_INFO)) };
    if w[0] != EXEC_MAGIC {
        return None;
    }
    let mut r = [0; 7];
    r.copy_from_slice(&w[1..]);
    Some(r)
}

/// The stack pointer the tender started the image with: it points at
/// `argc`, above which lie argv, envp and the auxiliary vector (what
/// `/proc/self/auxv` and `/proc/self/exe` are made from).
static INITIAL_SP: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// The image's initial stack pointer (0 in unit tests).
pub fn initial_sp() -> u64 {
    INITIAL_SP.load(core::sync::atomic::Ordering::Relaxed)
}

static BOOT: Global<Option<BootInfo>> = Global::new(None);

/// Why the boot information was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootError {
    /// The magic number is wrong: not a shoal tender.
    BadMagic,
    /// The tender speaks another ABI version.
    AbiMismatch(u32),
}

/// Copies and checks the tender's boot information.
///
/// # Safety
/// `bi` must point at readable memory holding a `BootInfo` (the tender's
/// boot-info page).
pub unsafe fn init(bi: *const BootInfo) -> Result<(), BootError> {
    // SAFETY: the caller guarantees `bi` is readable; the page may not be
    // aligned for all fields from the kernel's point of view, so read it
    // unaligned.
    let info = unsafe { core::ptr::read_unaligned(bi) };
    if info.magic != BOOT_INFO_MAGIC {
        return Err(BootError::BadMagic);
    }
    if info.abi_version != ABI_VERSION {
        return Err(BootError::AbiMismatch(info.abi_version));
    }
    crate::umem::set_bounds(shoal_abi::BOOT_INFO_ADDR, info.mem_size);
    // After the bounds: the program headers are read through umem.
    let mut ro = [(0, 0); crate::umem::MAX_READ_ONLY];
    let n = crate::umem::read_only_ranges(&info, &mut ro);
    crate::umem::set_read_only(&ro[..n]);
    crate::hypercall::set_entry(info.hypercall_entry);
    SECCOMP.store(info.syscall_errno.iter().any(|&e| e != 0), core::sync::atomic::Ordering::Relaxed);
    BOOT.with(|b| *b = Some(info));
    // Only the tender's own page is read again later (a unit test passes
    // a copy on its stack, and nothing is mapped at the page's address).
    FROM_PAGE.store(bi as usize == shoal_abi::BOOT_INFO_ADDR as usize, core::sync::atomic::Ordering::Relaxed);
    // hvt's stdout buffer comes once mm is up (console::init_buffer).
    #[cfg(not(test))]
    crate::hostsig::init();
    Ok(())
}

/// The random seed in the tender's boot-info page as it is now (not the
/// copy `init` took): a copy of an spt template finds a fresh one there,
/// written by its tender before its guest runs on
/// (crates/shoal-spt/src/template.rs). Unit tests, whose `init` read a
/// copy, get that copy's seed (zeros before `init`).
pub fn live_random_seed() -> [u8; 32] {
    if !FROM_PAGE.load(core::sync::atomic::Ordering::Relaxed) {
        return BOOT.with(|b| b.map_or([0; 32], |i| i.random_seed));
    }
    let at = shoal_abi::BOOT_INFO_ADDR as usize + core::mem::offset_of!(BootInfo, random_seed);
    // SAFETY: the boot-info page is mapped readable for the instance's
    // whole life (`init` read it); guest addresses are the kernel's own.
    unsafe { core::ptr::read_volatile(core::ptr::with_exposed_provenance::<[u8; 32]>(at)) }
}

/// Whether `init` was given the tender's boot-info page itself.
static FROM_PAGE: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Whether the tender's boot information was taken (false only in unit
/// tests, which have no tender).
pub fn booted() -> bool {
    BOOT.with(|b| b.is_some())
}

/// The boot information (a copy). Before `init` (only in unit tests) a
/// zeroed one.
pub fn info() -> BootInfo {
    BOOT.with(|b| match b {
        Some(i) => *i,
        None => BootInfo {
            magic: 0,
            abi_version: 0,
            tender: 0,
            mem_size: 0,
            image_start: 0,
            image_end: 0,
            heap_start: 0,
            heap_end: 0,
            stack_base: 0,
            stack_top: 0,
            hypercall_entry: 0,
            fs_archive_addr: 0,
            fs_archive_size: 0,
            tsc_hz: 0,
            tsc_at_boot: 0,
            realtime_ns_at_boot: 0,
            phdr_addr: 0,
            phnum: 0,
            random_seed: [0; 32],
            hostname: [0; 64],
            net_flags: 0,
            listener_count: 0,
            listeners: [shoal_abi::Listener::default(); shoal_abi::MAX_LISTENERS],
            console_flags: 0,
            volume_path: [0; shoal_abi::VOLUME_PATH_MAX],
            volume_max: 0,
            inject: shoal_abi::Inject { component: 0, kind: 0, at: 0 },
            rejuvenate_ns: 0,
            watchdog_ns: 0,
            recover_flags: 0,
            cwd: [0; shoal_abi::CWD_MAX],
            uid: 0,
            gid: 0,
            syscall_errno: [0; shoal_abi::SECCOMP_CALLS],
        },
    })
}

/// Whether the program has a seccomp profile (any nonzero
/// `BootInfo::syscall_errno`): one load on every system call's way in.
static SECCOMP: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Whether the program's system calls are filtered (`/proc/self/status`'s
/// `Seccomp: 2`).
#[inline]
pub fn seccomp_on() -> bool {
    SECCOMP.load(core::sync::atomic::Ordering::Relaxed)
}

/// The errno the program's seccomp profile refuses system call `n` with
/// (`BootInfo::syscall_errno`); 0: it runs.
#[inline]
pub fn syscall_errno(n: u64) -> u8 {
    if !seccomp_on() {
        return 0;
    }
    BOOT.with(|b| b.as_ref().and_then(|i| i.syscall_errno.get(usize::try_from(n).ok()?).copied()).unwrap_or(0))
}

/// The uid and gid the program sees (`BootInfo::uid`, `gid`); 0 and 0
/// before `init`.
pub fn ids() -> (u32, u32) {
    BOOT.with(|b| b.as_ref().map_or((0, 0), |i| (i.uid, i.gid)))
}
