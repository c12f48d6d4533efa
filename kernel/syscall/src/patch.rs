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
//! rcx, [rip + back]; jmp [rip + 0]` with `shoal_exec_call_entry`'s address
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
//!
//! A site whose `syscall` the number does not come right before (glibc's
//! cancellable wrappers in a threaded program: `mov eax, NR; mov edi,
//! [rsp+4]; syscall` in `epoll_pwait`, `xor eax, eax; syscall` in `read`)
//! is rewritten forward instead, as rr does: decoding starts at the
//! trapped `syscall`, a known instruction boundary, and the instruction
//! after it must be glibc's error check of the result, `cmp rax/eax,
//! -4096` (or -4095). The `syscall` and the check become a `jmp` to a
//! trampoline (the rest `int3`) that enters the kernel with `rax` as the
//! program set it and returns to a copy of the check, which jumps back
//! after it. A thread that was inside the call, or stopped at the check,
//! when the site changed would resume in the middle of the `jmp`: the
//! kernel moves any such resume address (`syscall` + 2) to the copy of
//! the check ([`resume_at`], on the trap path's return, a preempted
//! thread's resume and a direct `rt_sigreturn`), from a table of the
//! sites rewritten this way, each entry checked against the bytes still
//! there (a library unmapped and another mapped in its place is not
//! mistaken for it). Nothing branches to glibc's check other than the
//! fall-through from its own `syscall`; a site whose `syscall` is itself
//! the end of a rewritten `mov eax, NR; syscall` pair (reached by a
//! branch to the `syscall`) is left alone, as its trampoline returns
//! there.

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
        forward(ret);
        return;
    }
    // The bytes are on the page of the instruction that just ran, so
    // mapped and readable.
    let Ok(bytes) = umem::read::<[u8; 7]>(site) else { return };
    if bytes[0] != 0xb8 || bytes[5..] != [0x0f, 0x05] || u64::from(u32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]])) != nr {
        forward(ret);
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

/// The length of the instruction after a `syscall` (`bytes[0..2]`) that
/// a forward rewrite moves (module docs): glibc's check of the result,
/// `cmp rax, imm32` or `cmp eax, imm32` with -4096 or -4095.
fn forward_check(bytes: &[u8; 8]) -> Option<usize> {
    if bytes[..2] != [0x0f, 0x05] {
        return None;
    }
    let (len, imm) = match bytes[2..] {
        [0x48, 0x3d, a, b, c, d] => (6, [a, b, c, d]),
        [0x3d, a, b, c, d, _] => (5, [a, b, c, d]),
        _ => return None,
    };
    matches!(u32::from_le_bytes(imm), 0xffff_f000 | 0xffff_f001).then_some(len)
}

/// The trampoline at `at` of a forward rewrite of the `syscall` at `site`
/// followed by the `check` (its bytes): `lea rcx, [rip + copy]; jmp
/// [entry]`, then the copy of the check and a `jmp` back after it; and the
/// address of the copy (where the call returns).
fn forward_trampoline(at: u64, site: u64, check: &[u8], entry: u64) -> ([u8; TRAMPOLINE as usize], u64) {
    let copy = at + 21;
    let mut t = [0xccu8; TRAMPOLINE as usize];
    t[..3].copy_from_slice(&[0x48, 0x8d, 0x0d]);
    t[3..7].copy_from_slice(&rel32(at + 7, copy));
    t[7..13].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
    t[13..21].copy_from_slice(&entry.to_le_bytes());
    let n = check.len();
    t[21..21 + n].copy_from_slice(check);
    t[21 + n] = 0xe9;
    let back = site + 2 + n as u64;
    t[22 + n..26 + n].copy_from_slice(&rel32(at + 26 + n as u64, back));
    (t, copy)
}

/// Sites rewritten forward at most (the table [`resume_at`] reads; past
/// it, a site stays on the trap path).
const FORWARD_SITES: usize = 128;

/// `(syscall + 2, the copy of its check)` of each site rewritten forward,
/// and how many there are. All zero at first: in `.bss`.
static FORWARD: Global<([(u64, u64); FORWARD_SITES], usize)> = Global::new(([(0, 0); FORWARD_SITES], 0));

/// Rewrites forward (module docs) the `syscall` that ends at `ret` if the
/// check follows it; any failure leaves it to the trap path.
fn forward(ret: u64) {
    let Some(site) = ret.checked_sub(2) else { return };
    if site & !0xfff != (site + 7) & !0xfff {
        return;
    }
    let Ok(bytes) = umem::read::<[u8; 8]>(site) else { return };
    let Some(len) = forward_check(&bytes) else { return };
    // The end of a rewritten `mov eax, NR; syscall` pair: its trampoline
    // returns to `ret`.
    if site.checked_sub(5).and_then(|p| umem::read::<u8>(p).ok()).is_none_or(|b| b == 0xe9) {
        return;
    }
    let end = 2 + len as u64;
    if !shoal_mm::is_file_code(site, end) {
        return;
    }
    let full = FORWARD.with(|t| t.1 == FORWARD_SITES && !t.0.iter().any(|e| e.0 == ret));
    if full {
        return;
    }
    let Some(at) = trampoline_room() else { return };
    let near = |from: u64, to: u64| i32::try_from(to as i64 - from as i64).is_ok();
    if !near(at + TRAMPOLINE, site + end) || !near(site + 5, at) {
        return;
    }
    let (t, copy) = forward_trampoline(at, site, &bytes[2..2 + len], entry());
    if shoal_mm::write_code(at, &t).is_err() {
        return;
    }
    let mut jmp = [0xccu8; 8];
    jmp[0] = 0xe9;
    jmp[1..5].copy_from_slice(&rel32(site + 5, at));
    if shoal_mm::write_code(site, &jmp[..end as usize]).is_err() {
        return;
    }
    FORWARD.with(|t| {
        let (list, n) = t;
        match list[..*n].iter().position(|e| e.0 == ret) {
            Some(i) => list[i].1 = copy,
            None => {
                list[*n] = (ret, copy);
                *n += 1;
            }
        }
    });
}

/// Where a thread whose next instruction is at `rip` resumes: the copy
/// of the check when `rip` is right after a `syscall` rewritten forward
/// (the bytes before it still the `jmp` to that site's trampoline), else
/// `rip` itself.
pub fn resume_at(rip: u64) -> u64 {
    let found = FORWARD.with(|t| t.0[..t.1].iter().find(|e| e.0 == rip).map(|e| e.1));
    let Some(copy) = found else { return rip };
    let site = rip - 2;
    let mut jmp = [0xe9u8; 5];
    jmp[1..].copy_from_slice(&rel32(site + 5, copy - 21));
    if umem::read::<[u8; 5]>(site).is_ok_and(|b| b == jmp) {
        copy
    } else {
        rip
    }
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
        fn shoal_exec_call_entry();
    }
    shoal_exec_call_entry as *const () as u64
}

#[cfg(test)]
fn entry() -> u64 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_glibcs_result_check_after_a_syscall_is_moved() {
        let rax = [0x0f, 0x05, 0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff];
        assert_eq!(forward_check(&rax), Some(6));
        let rax1 = [0x0f, 0x05, 0x48, 0x3d, 0x01, 0xf0, 0xff, 0xff];
        assert_eq!(forward_check(&rax1), Some(6));
        let eax = [0x0f, 0x05, 0x3d, 0x00, 0xf0, 0xff, 0xff, 0x77];
        assert_eq!(forward_check(&eax), Some(5));
        // Another immediate, another instruction, no `syscall`.
        assert_eq!(forward_check(&[0x0f, 0x05, 0x48, 0x3d, 0x00, 0x10, 0x00, 0x00]), None);
        assert_eq!(forward_check(&[0x0f, 0x05, 0x48, 0x85, 0xc0, 0x78, 0x10, 0x90]), None);
        assert_eq!(forward_check(&[0x90, 0x90, 0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff]), None);
    }

    #[test]
    fn a_forward_trampoline_enters_the_kernel_and_returns_to_its_copy_of_the_check() {
        let (at, site, entry) = (0x1000_0000u64, 0x1000_4000u64, 0x7f00_1234_5678u64);
        let check = [0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff];
        let (t, copy) = forward_trampoline(at, site, &check, entry);
        assert_eq!(copy, at + 21);
        // lea rcx, [rip + 14]: the copy.
        assert_eq!(t[..7], [0x48, 0x8d, 0x0d, 14, 0, 0, 0]);
        assert_eq!(t[7..13], [0xff, 0x25, 0, 0, 0, 0]);
        assert_eq!(u64::from_le_bytes(t[13..21].try_into().unwrap()), entry);
        assert_eq!(t[21..27], check);
        // jmp back to the instruction after the check.
        assert_eq!(t[27], 0xe9);
        let to = (at + 32).wrapping_add(i32::from_le_bytes(t[28..32].try_into().unwrap()) as i64 as u64);
        assert_eq!(to, site + 8);
    }
}
