//! System-call sites of libraries, rewritten by the kernel on first use.
//!
//! `shoal-exec` rewrites the executable's own sites on the host, once per
//! file. The libraries a dynamically linked executable loads are files of
//! the instance's own file system that `ld.so` maps at run time (and
//! `dlopen` later), so the host never sees them; their `syscall`
//! instructions first take the trap path (spt: syscall user dispatch;
//! hvt: the CPU's own entry). The kernel then rewrites a site the first
//! time it traps, as gVisor's systrap does: if the 7 bytes ending at the
//! trapped `syscall` are `mov eax, imm32; syscall`, the immediate is the
//! number the call was made with, the site lies in a private, executable,
//! unwritable file mapping (a library's code, never JIT memory that its
//! runtime may rewrite) and within one page, the `mov` becomes a `jmp` to
//! a trampoline in the kernel's own code area ([`shoal_mm::map_code`])
//! that does what the executable's trampolines do (`mov eax, imm32; lea
//! rcx, [rip + back]; jmp [rip + 0]` with `shoal_exec_entry`'s address
//! after it). The `syscall` itself stays,
//! so a branch to it still traps. Only hot sites pay the rewrite, and the
//! trap is paid once per site per instance.
//!
//! Why the kernel and not the host: the bytes rewritten are the instance's
//! private copy of the file (shoal's `mmap` of a file copies it; a mounted
//! library's pages are the host's, mapped privately, so the write copies
//! just the page it lands on), which the kernel holds and the host does not (files come from the archive, a
//! mount, or were written by the program). The instance has one vCPU and
//! the kernel runs with preemption held off, so no program thread runs
//! while the five bytes change; a thread preempted between the `mov` and
//! the `syscall` resumes at the `syscall`, which traps as before.

use shoal_plat::{umem, Global};

/// Bytes of one trampoline.
const TRAMPOLINE: u64 = 32;
/// Bytes of code area mapped at a time.
const AREA: u64 = 64 << 10;

/// The free part `[next, end)` of the current code area.
static AREA_LEFT: Global<(u64, u64)> = Global::new((0, 0));

/// `to - from_next` as a 32-bit displacement (checked by the caller).
fn rel32(from_next: u64, to: u64) -> [u8; 4] {
    (to.wrapping_sub(from_next) as i64 as i32).to_le_bytes()
}

/// Rewrites the site whose `syscall` ends at `ret` (the return address)
/// if it is a `mov eax, nr; syscall` pair in a library's code (module
/// docs); any failure leaves it to the trap path.
pub fn after_trap(ret: u64, nr: u64) {
    let Some(site) = ret.checked_sub(7) else { return };
    if site & !0xfff != (ret - 1) & !0xfff || nr > u64::from(u32::MAX) {
        return;
    }
    // The bytes are on the page of the instruction that just ran, so
    // mapped and readable.
    let Ok(bytes) = umem::read::<[u8; 7]>(site) else { return };
    if bytes[0] != 0xb8 || bytes[5..] != [0x0f, 0x05] || u64::from(u32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]])) != nr {
        return;
    }
    if !shoal_mm::is_file_code(site, 7) {
        return;
    }
    let Some(at) = trampoline_room() else { return };
    let near = |from: u64, to: u64| i32::try_from(to as i64 - from as i64).is_ok();
    if !near(at + 12, ret) || !near(site + 5, at) {
        return;
    }
    // The entry is reached through an absolute address: libraries sit at
    // the top of guest memory, which may be further than 2 GiB from the
    // kernel's code.
    let mut t = [0xccu8; TRAMPOLINE as usize];
    t[..5].copy_from_slice(&bytes[..5]);
    t[5..8].copy_from_slice(&[0x48, 0x8d, 0x0d]);
    t[8..12].copy_from_slice(&rel32(at + 12, ret));
    t[12..18].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
    t[18..26].copy_from_slice(&entry().to_le_bytes());
    if shoal_mm::write_code(at, &t).is_err() {
        return;
    }
    let mut jmp = [0xe9u8; 5];
    jmp[1..].copy_from_slice(&rel32(site + 5, at));
    let _ = shoal_mm::write_code(site, &jmp);
}

/// The address of the next free trampoline (a new code area when the
/// current one is used up).
fn trampoline_room() -> Option<u64> {
    let (next, end) = AREA_LEFT.with(|a| *a);
    let next = if next + TRAMPOLINE <= end && next != 0 {
        next
    } else {
        let a = shoal_mm::map_code(AREA).ok()?;
        AREA_LEFT.with(|x| *x = (a, a + AREA));
        a
    };
    AREA_LEFT.with(|x| x.0 = next + TRAMPOLINE);
    Some(next)
}

#[cfg(not(test))]
fn entry() -> u64 {
    extern "C" {
        fn shoal_exec_entry();
    }
    shoal_exec_entry as *const () as u64
}

#[cfg(test)]
fn entry() -> u64 {
    0
}
