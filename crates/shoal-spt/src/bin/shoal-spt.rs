//! `shoal-spt`: the spt instance program. Not run by hand: `shoal run`
//! and `shoal-tender` (through `shoal_spt::run`) `exec` it with an empty
//! environment and the boot spec on descriptor 3, so that the process a
//! guest shares its address space with starts clean (see
//! `shoal_spt::instance`).

fn main() {
    shoal_spt::instance::main()
}

/// Runs before musl's start-up calls `main`, so before the first
/// allocation: keeps musl's malloc off the program break.
///
/// For a static-pie program the kernel puts the break at
/// `ELF_ET_DYN_BASE` (0x5555…), far from the binary, the other mappings
/// and guest memory, so the one page of malloc metadata musl takes there
/// cost three page-table pages of its own (12 KiB per instance: idle density counts them).
/// An inaccessible page right at the break makes the `brk` that grows it
/// fail (Linux refuses a break that would touch a mapping), and musl's
/// malloc then takes its metadata pages with `mmap`, beside everything
/// else. Only the musl build: glibc's malloc keeps its main arena on the
/// break and is left as it is.
#[cfg(target_env = "musl")]
#[used]
#[link_section = ".init_array"]
static KEEP_MALLOC_OFF_THE_BREAK: extern "C" fn() = keep_malloc_off_the_break;

#[cfg(target_env = "musl")]
extern "C" fn keep_malloc_off_the_break() {
    const PAGE: usize = 4096;
    // SAFETY: `brk(0)` only reads the break; the mapping is placed with
    // MAP_FIXED_NOREPLACE, so it replaces nothing (if anything is there
    // already, the break cannot grow anyway and the call fails harmlessly).
    unsafe {
        let brk = libc::syscall(libc::SYS_brk, 0usize) as usize;
        if brk == 0 || brk as isize == -1 {
            return;
        }
        let at = (brk + PAGE - 1) & !(PAGE - 1);
        libc::mmap(at as *mut libc::c_void, PAGE, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE, -1, 0);
    }
}
