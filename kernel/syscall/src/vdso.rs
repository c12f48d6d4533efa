//! The shoal vDSO: the clock functions an unmodified Linux executable
//! finds through `AT_SYSINFO_EHDR` and calls without a system call, as
//! glibc and the Go runtime do on Linux.
//!
//! It is a small ELF shared object written here in assembly, headers and
//! all (`ET_DYN`, one `PT_LOAD` at 0 and `PT_DYNAMIC`; `DT_HASH`,
//! `DT_SYMTAB`, `DT_STRTAB`, `DT_SONAME` `linux-vdso.so.1`, and the
//! symbol versions `DT_VERSYM`/`DT_VERDEF` with every symbol at
//! `LINUX_2.6`, which is what glibc's and Go's lookups ask for), laid
//! into one page of the kernel's own code: it is part of the kernel image,
//! so every instance maps it read-only and executable with the rest of
//! that code and shares its page like any other (nothing is made per
//! instance). It exports `__vdso_clock_gettime`, `__vdso_gettimeofday`,
//! `__vdso_time`, `__vdso_getcpu` and `__vdso_clock_getres`, each also
//! under its plain name as a weak alias, as Linux's x86-64 vDSO does.
//!
//! The clocks read the TSC and convert it with the calibration the tender
//! wrote into the boot-information page (`tsc_hz`, `tsc_at_boot`,
//! `realtime_ns_at_boot`): a page the program can read but not write, and
//! the very numbers the `time` component converts with, so a time read
//! here and one the system call returns agree to the nanosecond
//! (`floor(ticks * 10^9 / hz)` both). The calibration never changes in
//! an instance's life (no `clock_settime`, no adjustments), so there is
//! no sequence count to retry on. `CLOCK_REALTIME`, `CLOCK_MONOTONIC`,
//! their `_COARSE` forms, `CLOCK_MONOTONIC_RAW` and `CLOCK_BOOTTIME` are
//! answered here (the kernel's clocks make the coarse, raw and boot
//! clocks equal to the fine monotonic one, and `clock_getres` says 1 ns
//! for all); every other clock, and a NULL `timespec` (for its
//! `EFAULT`), goes to the system call — through the kernel's system-call
//! entry, jumped to as a rewritten site does, never through the trap
//! path.
//!
//! The vDSO is offered only to an unmodified executable
//! ([`crate::exec`]): an image linked with the kernel calls the kernel's
//! clock functions directly.

#[cfg(all(target_arch = "x86_64", not(test)))]
core::arch::global_asm!(
    ".section .text.shoal_vdso,\"ax\",@progbits",
    ".p2align 12",
    ".globl shoal_vdso_start",
    ".hidden shoal_vdso_start",
    "shoal_vdso_start:",
    ".Lvdso_start:",
    // The ELF header.
    "    .byte 0x7f, 0x45, 0x4c, 0x46, 2, 1, 1, 0",
    "    .quad 0",
    "    .short 3, 62",
    "    .long 1",
    "    .quad 0",
    "    .quad .Lvdso_phdrs - .Lvdso_start",
    "    .quad .Lvdso_shdrs - .Lvdso_start",
    "    .long 0",
    "    .short 64, 56, 2, 64, 9, 8",
    // Program headers: the whole object, read and execute; the dynamic
    // section.
    ".Lvdso_phdrs:",
    "    .long 1, 5",
    "    .quad 0, 0, 0",
    "    .quad .Lvdso_end - .Lvdso_start, .Lvdso_end - .Lvdso_start",
    "    .quad 4096",
    "    .long 2, 4",
    "    .quad .Lvdso_dynamic - .Lvdso_start, .Lvdso_dynamic - .Lvdso_start, .Lvdso_dynamic - .Lvdso_start",
    "    .quad .Lvdso_dynamic_end - .Lvdso_dynamic, .Lvdso_dynamic_end - .Lvdso_dynamic",
    "    .quad 8",
    // DT_HASH with one bucket: every symbol on one chain (eleven entries,
    // so a hash table would save nothing, and no hash values to keep in
    // step with the names).
    ".p2align 2",
    ".Lvdso_hash:",
    "    .long 1, 11",
    "    .long 1",
    "    .long 0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0",
    ".Lvdso_hash_end:",
    // The symbols: value = offset in the object, section = .text (7).
    ".macro shoal_vdso_sym name, info, fn, fn_end",
    "    .long \\name - .Lvdso_dynstr",
    "    .byte \\info, 0",
    "    .short 7",
    "    .quad \\fn - .Lvdso_start",
    "    .quad \\fn_end - \\fn",
    ".endm",
    ".p2align 3",
    ".Lvdso_dynsym:",
    "    .quad 0, 0, 0",
    "    shoal_vdso_sym .Ls_cgt, 0x12, .Lvdso_cgt, .Lvdso_cgt_end",
    "    shoal_vdso_sym .Ls_cgt + 7, 0x22, .Lvdso_cgt, .Lvdso_cgt_end",
    "    shoal_vdso_sym .Ls_gtod, 0x12, .Lvdso_gtod, .Lvdso_gtod_end",
    "    shoal_vdso_sym .Ls_gtod + 7, 0x22, .Lvdso_gtod, .Lvdso_gtod_end",
    "    shoal_vdso_sym .Ls_time, 0x12, .Lvdso_time, .Lvdso_time_end",
    "    shoal_vdso_sym .Ls_time + 7, 0x22, .Lvdso_time, .Lvdso_time_end",
    "    shoal_vdso_sym .Ls_getcpu, 0x12, .Lvdso_getcpu, .Lvdso_getcpu_end",
    "    shoal_vdso_sym .Ls_getcpu + 7, 0x22, .Lvdso_getcpu, .Lvdso_getcpu_end",
    "    shoal_vdso_sym .Ls_getres, 0x12, .Lvdso_getres, .Lvdso_getres_end",
    "    shoal_vdso_sym .Ls_getres + 7, 0x22, .Lvdso_getres, .Lvdso_getres_end",
    ".Lvdso_dynsym_end:",
    ".purgem shoal_vdso_sym",
    ".Lvdso_dynstr:",
    "    .byte 0",
    ".Ls_soname: .asciz \"linux-vdso.so.1\"",
    ".Ls_version: .asciz \"LINUX_2.6\"",
    ".Ls_cgt: .asciz \"__vdso_clock_gettime\"",
    ".Ls_gtod: .asciz \"__vdso_gettimeofday\"",
    ".Ls_time: .asciz \"__vdso_time\"",
    ".Ls_getcpu: .asciz \"__vdso_getcpu\"",
    ".Ls_getres: .asciz \"__vdso_clock_getres\"",
    ".Lvdso_dynstr_end:",
    // Every symbol's version: 2, LINUX_2.6.
    ".p2align 1",
    ".Lvdso_versym:",
    "    .short 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2",
    ".Lvdso_versym_end:",
    // Version definitions: 1 the object itself (VER_FLG_BASE), 2
    // LINUX_2.6; each with its ELF hash and one auxiliary entry naming it.
    ".p2align 2",
    ".Lvdso_verdef:",
    "    .short 1, 1, 1, 1",
    "    .long 0x0deebfa1, 20, 28",
    "    .long .Ls_soname - .Lvdso_dynstr, 0",
    "    .short 1, 0, 2, 1",
    "    .long 0x03ae75f6, 20, 0",
    "    .long .Ls_version - .Lvdso_dynstr, 0",
    ".Lvdso_verdef_end:",
    ".p2align 3",
    ".Lvdso_dynamic:",
    "    .quad 4, .Lvdso_hash - .Lvdso_start",
    "    .quad 5, .Lvdso_dynstr - .Lvdso_start",
    "    .quad 6, .Lvdso_dynsym - .Lvdso_start",
    "    .quad 10, .Lvdso_dynstr_end - .Lvdso_dynstr",
    "    .quad 11, 24",
    "    .quad 14, .Ls_soname - .Lvdso_dynstr",
    "    .quad 0x6ffffff0, .Lvdso_versym - .Lvdso_start",
    "    .quad 0x6ffffffc, .Lvdso_verdef - .Lvdso_start",
    "    .quad 0x6ffffffd, 2",
    "    .quad 0, 0",
    ".Lvdso_dynamic_end:",
    // The code.
    ".p2align 4",
    ".Lvdso_text:",
    // clock_gettime(clock: edi, ts: rsi).
    ".Lvdso_cgt:",
    "    cmp edi, 7",
    "    ja .Lvdso_cgt_sys",
    "    test rsi, rsi",
    "    jz .Lvdso_cgt_sys",
    "    mov eax, {mono}",
    "    bt eax, edi",
    "    jc .Lvdso_cgt_mono",
    "    mov eax, {real}",
    "    bt eax, edi",
    "    jnc .Lvdso_cgt_sys",
    "    call .Lvdso_real_ns",
    "    jmp .Lvdso_cgt_store",
    ".Lvdso_cgt_mono:",
    "    call .Lvdso_mono_ns",
    ".Lvdso_cgt_store:",
    "    call .Lvdso_split",
    "    mov qword ptr [rsi], rax",
    "    mov qword ptr [rsi + 8], rdx",
    "    xor eax, eax",
    "    ret",
    ".Lvdso_cgt_sys:",
    "    mov eax, 228",
    "    jmp .Lvdso_syscall",
    ".Lvdso_cgt_end:",
    // gettimeofday(tv: rdi, tz: rsi): either may be NULL; UTC.
    ".p2align 4",
    ".Lvdso_gtod:",
    "    test rdi, rdi",
    "    jz .Lvdso_gtod_tz",
    "    call .Lvdso_real_ns",
    "    call .Lvdso_split",
    "    mov qword ptr [rdi], rax",
    "    mov rax, rdx",
    "    xor edx, edx",
    "    mov ecx, 1000",
    "    div rcx",
    "    mov qword ptr [rdi + 8], rax",
    ".Lvdso_gtod_tz:",
    "    test rsi, rsi",
    "    jz .Lvdso_gtod_done",
    "    mov qword ptr [rsi], 0",
    ".Lvdso_gtod_done:",
    "    xor eax, eax",
    "    ret",
    ".Lvdso_gtod_end:",
    // time(t: rdi): seconds, also stored at t if not NULL.
    ".p2align 4",
    ".Lvdso_time:",
    "    call .Lvdso_real_ns",
    "    call .Lvdso_split",
    "    test rdi, rdi",
    "    jz .Lvdso_time_done",
    "    mov qword ptr [rdi], rax",
    ".Lvdso_time_done:",
    "    ret",
    ".Lvdso_time_end:",
    // getcpu(cpu: rdi, node: rsi, cache): one CPU, one node.
    ".p2align 4",
    ".Lvdso_getcpu:",
    "    test rdi, rdi",
    "    jz .Lvdso_getcpu_node",
    "    mov dword ptr [rdi], 0",
    ".Lvdso_getcpu_node:",
    "    test rsi, rsi",
    "    jz .Lvdso_getcpu_done",
    "    mov dword ptr [rsi], 0",
    ".Lvdso_getcpu_done:",
    "    xor eax, eax",
    "    ret",
    ".Lvdso_getcpu_end:",
    // clock_getres(clock: edi, res: rsi): 1 ns for the clocks above.
    ".p2align 4",
    ".Lvdso_getres:",
    "    cmp edi, 7",
    "    ja .Lvdso_getres_sys",
    "    mov eax, {both}",
    "    bt eax, edi",
    "    jnc .Lvdso_getres_sys",
    "    test rsi, rsi",
    "    jz .Lvdso_getres_done",
    "    mov qword ptr [rsi], 0",
    "    mov qword ptr [rsi + 8], 1",
    ".Lvdso_getres_done:",
    "    xor eax, eax",
    "    ret",
    ".Lvdso_getres_sys:",
    "    mov eax, 229",
    "    jmp .Lvdso_syscall",
    ".Lvdso_getres_end:",
    // The system call `eax` with the caller's arguments, entered as a
    // rewritten site enters it (return address in rcx, nothing pushed on
    // the caller's stack by the entry); its result goes back to the
    // caller of the vDSO function.
    ".p2align 4",
    ".Lvdso_syscall:",
    "    lea rcx, [rip + .Lvdso_back]",
    "    jmp shoal_exec_call_entry",
    ".Lvdso_back:",
    "    ret",
    // rax = CLOCK_MONOTONIC in ns: floor((tsc - tsc_at_boot) * 10^9 /
    // tsc_hz), 0 before the boot reading, saturated where the quotient
    // would not fit (the kernel's `Clock::ticks_to_ns`). rcx, rdx change.
    ".Lvdso_mono_ns:",
    "    lfence",
    "    rdtsc",
    "    shl rdx, 32",
    "    or rax, rdx",
    "    sub rax, qword ptr [{tsc0}]",
    "    jb .Lvdso_zero",
    "    mov ecx, 1000000000",
    "    mul rcx",
    "    cmp rdx, qword ptr [{hz}]",
    "    jae .Lvdso_max",
    "    div qword ptr [{hz}]",
    "    ret",
    ".Lvdso_zero:",
    "    xor eax, eax",
    "    ret",
    ".Lvdso_max:",
    "    mov rax, -1",
    "    ret",
    // rax = CLOCK_REALTIME in ns: the boot wall-clock time plus the
    // monotonic time (saturated).
    ".Lvdso_real_ns:",
    "    call .Lvdso_mono_ns",
    "    add rax, qword ptr [{real0}]",
    "    jc .Lvdso_max",
    "    ret",
    // rax (ns) -> rax seconds, rdx ns within the second. rcx changes.
    ".Lvdso_split:",
    "    xor edx, edx",
    "    mov ecx, 1000000000",
    "    div rcx",
    "    ret",
    ".Lvdso_text_end:",
    // Section names and headers (for tools; the loaders read the dynamic
    // section).
    ".Lvdso_shstr:",
    "    .byte 0",
    ".Ln_hash: .asciz \".hash\"",
    ".Ln_dynsym: .asciz \".dynsym\"",
    ".Ln_dynstr: .asciz \".dynstr\"",
    ".Ln_versym: .asciz \".gnu.version\"",
    ".Ln_verdef: .asciz \".gnu.version_d\"",
    ".Ln_dynamic: .asciz \".dynamic\"",
    ".Ln_text: .asciz \".text\"",
    ".Ln_shstrtab: .asciz \".shstrtab\"",
    ".Lvdso_shstr_end:",
    ".macro shoal_vdso_shdr name, type, flags, start, end, link, info, align, entsize",
    "    .long \\name - .Lvdso_shstr, \\type",
    "    .quad \\flags, \\start - .Lvdso_start, \\start - .Lvdso_start, \\end - \\start",
    "    .long \\link, \\info",
    "    .quad \\align, \\entsize",
    ".endm",
    ".p2align 3",
    ".Lvdso_shdrs:",
    "    .quad 0, 0, 0, 0, 0, 0, 0, 0",
    "    shoal_vdso_shdr .Ln_hash, 5, 2, .Lvdso_hash, .Lvdso_hash_end, 2, 0, 4, 4",
    "    shoal_vdso_shdr .Ln_dynsym, 11, 2, .Lvdso_dynsym, .Lvdso_dynsym_end, 3, 1, 8, 24",
    "    shoal_vdso_shdr .Ln_dynstr, 3, 2, .Lvdso_dynstr, .Lvdso_dynstr_end, 0, 0, 1, 0",
    "    shoal_vdso_shdr .Ln_versym, 0x6fffffff, 2, .Lvdso_versym, .Lvdso_versym_end, 2, 0, 2, 2",
    "    shoal_vdso_shdr .Ln_verdef, 0x6ffffffd, 2, .Lvdso_verdef, .Lvdso_verdef_end, 3, 2, 4, 0",
    "    shoal_vdso_shdr .Ln_dynamic, 6, 2, .Lvdso_dynamic, .Lvdso_dynamic_end, 3, 0, 8, 16",
    "    shoal_vdso_shdr .Ln_text, 1, 6, .Lvdso_text, .Lvdso_text_end, 0, 0, 16, 0",
    "    .long .Ln_shstrtab - .Lvdso_shstr, 3",
    "    .quad 0, 0, .Lvdso_shstr - .Lvdso_start, .Lvdso_shstr_end - .Lvdso_shstr",
    "    .long 0, 0",
    "    .quad 1, 0",
    ".purgem shoal_vdso_shdr",
    ".Lvdso_end:",
    // The rest of the page stays the vDSO's (Go takes a signal whose pc
    // is in the page of a vDSO symbol as one that came in the vDSO).
    ".p2align 12",
    mono = const MONO_CLOCKS,
    real = const REAL_CLOCKS,
    both = const MONO_CLOCKS | REAL_CLOCKS,
    hz = const INFO + core::mem::offset_of!(shoal_abi::BootInfo, tsc_hz) as u64,
    tsc0 = const INFO + core::mem::offset_of!(shoal_abi::BootInfo, tsc_at_boot) as u64,
    real0 = const INFO + core::mem::offset_of!(shoal_abi::BootInfo, realtime_ns_at_boot) as u64,
);

/// The boot-information page, where the vDSO reads the calibration.
#[cfg(all(target_arch = "x86_64", not(test)))]
const INFO: u64 = shoal_abi::BOOT_INFO_ADDR;

/// Clock ids the vDSO answers with the monotonic clock, one bit each:
/// `CLOCK_MONOTONIC` (1), `_RAW` (4), `_COARSE` (6), `CLOCK_BOOTTIME` (7).
const MONO_CLOCKS: u32 = 1 << 1 | 1 << 4 | 1 << 6 | 1 << 7;
/// Clock ids the vDSO answers with the realtime clock:
/// `CLOCK_REALTIME` (0), `CLOCK_REALTIME_COARSE` (5).
const REAL_CLOCKS: u32 = 1 << 0 | 1 << 5;

/// The address of the vDSO's ELF header (what `AT_SYSINFO_EHDR` says).
#[cfg(not(test))]
pub fn address() -> u64 {
    extern "C" {
        static shoal_vdso_start: u8;
    }
    // Only the symbol's address is taken (no read): the start of the
    // vDSO's page in the kernel's code.
    core::ptr::addr_of!(shoal_vdso_start) as u64
}

/// No vDSO in unit tests (nothing of the kernel's code is mapped).
#[cfg(test)]
pub fn address() -> u64 {
    0
}

#[cfg(test)]
mod tests {
    use shoal_time::sys as time;

    /// The clocks the vDSO answers itself are those the `time` component
    /// reads as realtime or monotonic (any other clock goes to the call).
    #[test]
    fn clock_sets_match_the_time_component() {
        for id in 0..8 {
            let bit = 1u32 << id;
            let want = match time::kind(id) {
                Ok(time::Kind::Real) => Some(super::REAL_CLOCKS),
                Ok(time::Kind::Mono) => Some(super::MONO_CLOCKS),
                _ => None,
            };
            match want {
                Some(set) => assert_ne!(set & bit, 0, "clock {id}"),
                None => assert_eq!((super::REAL_CLOCKS | super::MONO_CLOCKS) & bit, 0, "clock {id}"),
            }
        }
    }
}
