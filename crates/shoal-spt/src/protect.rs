//! The `Protect` hypercall on spt: the kernel's `mprotect` made real with
//! the host's `mprotect` on the guest's own pages (guest addresses are host
//! addresses here).
//!
//! Only the guest's free memory and main stack, `[heap_start, mem_size)`,
//! can change, between read-write, read-only and no access, with or
//! without execute: the image's code and read-only data, the archive and
//! the boot-info page lie below `heap_start` and keep the protection the
//! tender gave them. Execute is for a Linux executable's libraries that
//! `ld.so` maps and for JIT code; it grants a hostile guest nothing (its
//! image is arbitrary code already, every `syscall` instruction in guest
//! memory traps to the guest kernel through syscall user dispatch, and
//! every host call still passes the filter; docs/architecture.md).
//!
//! The guest shares this process, so it could call `mprotect` itself; the
//! seccomp filter (`crate::filter`) bounds that call with the same rules,
//! and because seccomp cannot add two arguments, it checks `addr + len <=
//! mem_size` with a ladder of ranges ([`max_len`]): a call starting at
//! distance `d` below `mem_size` may cover at most the largest power of two
//! below `d`. The handler splits a request into pieces that the filter
//! allows ([`pieces`]), so both see the same rule.
//!
//! The `Alias` hypercall lives here too: guest pages that the kernel
//! aliases (the pages of files with shared mappings, and the mappings'
//! pages) are backed by one memory file, the *alias file*, at offset =
//! guest address; [`alias`] maps the file's `src` offset at `dst`
//! (`mmap(MAP_SHARED | MAP_FIXED)`), so both addresses are the same
//! memory; a page given its own memory back becomes fresh private
//! anonymous memory again (`mmap(MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED)`),
//! so no page of the alias file stays in use for it. The same range rules
//! apply to both addresses, and the filter bounds the guest's own `mmap`
//! calls the same way.
//!
//! The `Release` hypercall ([`release`]) lives here too: the kernel gives
//! back pages it freed (`munmap`, a shrinking break) or that the program
//! discarded (`madvise(MADV_DONTNEED)`), and the handler frees the host
//! memory behind them with `madvise(MADV_DONTNEED)` (the pages read as
//! zero afterwards, as Linux gives them). The same range rules and the
//! same ladder of pieces as `mprotect` apply, and the filter allows the
//! guest's own `madvise` with that advice only, over that range only.
//!
//! Like every hypercall handler, nothing here allocates.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use shoal_abi::{
    AliasArgs, AliasListArgs, AliasPair, ProtectArgs, ReleaseArgs, ReleaseRange, ALIAS_LIST_MAX, ALIAS_SHAREABLE, PAGE_SIZE, PROT_EXEC, PROT_READ, PROT_WRITE,
    RELEASE_LIST_MAX,
};

static HEAP_START: AtomicU64 = AtomicU64::new(u64::MAX);
static MEM_SIZE: AtomicU64 = AtomicU64::new(0);
static ALIAS_FD: AtomicI32 = AtomicI32::new(-1);
/// Whether the guest may make pages executable (`shoal_abi::PROT_EXEC`):
/// an unmodified executable's libraries and run-time code.
static RUN_TIME_CODE: AtomicBool = AtomicBool::new(false);

/// Lets the guest make its pages executable and not writable (an
/// unmodified executable, whose `syscall`s from them take the trap path
/// of syscall user dispatch).
pub fn allow_run_time_code() {
    RUN_TIME_CODE.store(true, Ordering::Relaxed);
}

/// Records the range the guest may protect and alias, and the alias
/// file's descriptor (in the child, before the guest runs).
pub fn install(heap_start: u64, mem_size: u64, alias_fd: i32) {
    HEAP_START.store(heap_start, Ordering::Relaxed);
    MEM_SIZE.store(mem_size, Ordering::Relaxed);
    ALIAS_FD.store(alias_fd, Ordering::Relaxed);
}

/// The next piece of an alias of `len` bytes at `dst` from `src` (page
/// aligned, inside `[.., mem_size)`): the largest power of two that is at
/// most `len` and at most `mem_size - max(dst, src)`, which the filter's
/// rule for that power allows.
pub fn alias_piece(dst: u64, src: u64, len: u64, mem_size: u64) -> u64 {
    let room = mem_size - dst.max(src);
    let cap = 1u64 << (63 - room.leading_zeros());
    let want = 1u64 << (63 - len.leading_zeros());
    cap.min(want)
}

/// The `AliasList` handler: each pair as a one-page `Alias`, in order,
/// stopping at the first refused.
pub fn alias_list(a: &AliasListArgs) -> i64 {
    let size = core::mem::size_of::<AliasPair>() as u64;
    if a.count > ALIAS_LIST_MAX {
        return -i64::from(libc::EINVAL);
    }
    let mem = crate::hypercall::guest_mem();
    for i in 0..a.count {
        let Ok(p) = mem.read_obj::<AliasPair>(shoal_loader::GuestAddr(a.pairs.wrapping_add(i * size))) else {
            return -i64::from(libc::EFAULT);
        };
        let r = alias(&AliasArgs { dst: p.dst, src: p.src, len: PAGE_SIZE, prot: a.prot & !ALIAS_SHAREABLE, ret: 0 });
        if r != 0 {
            return r;
        }
    }
    0
}

/// The `Alias` handler: checks the request and maps the alias file.
pub fn alias(a: &AliasArgs) -> i64 {
    let (lo, mem_size, fd) = (HEAP_START.load(Ordering::Relaxed), MEM_SIZE.load(Ordering::Relaxed), ALIAS_FD.load(Ordering::Relaxed));
    let einval = -i64::from(libc::EINVAL);
    if fd < 0 {
        // No alias file (see crate::child): shared file mappings fail.
        return -i64::from(libc::ENODEV);
    }
    let aligned = |x: u64| x.is_multiple_of(PAGE_SIZE);
    let shareable = a.prot & ALIAS_SHAREABLE != 0;
    let own = a.src == a.dst && !shareable;
    let prot = a.prot & !ALIAS_SHAREABLE;
    if prot & !(PROT_READ | PROT_WRITE) != 0 || (shareable && a.src != a.dst) || a.len == 0 || !aligned(a.dst) || !aligned(a.src) || !aligned(a.len) {
        return einval;
    }
    let inside = |x: u64| x >= lo && x.checked_add(a.len).is_some_and(|e| e <= mem_size);
    if !inside(a.dst) || !inside(a.src) {
        return einval;
    }
    let (mut dst, mut src, mut left) = (a.dst, a.src, a.len);
    while left > 0 {
        let n = alias_piece(dst, src, left, mem_size);
        let r = if own {
            // SAFETY: [dst, dst + n) is guest memory above everything the
            // tender protects (checked above), which no Rust code
            // references; fresh private memory replaces it; no PROT_EXEC.
            unsafe { crate::sys::mmap_own(dst, n, prot as libc::c_int) }
        } else {
            crate::template::note_shared_alias();
            // SAFETY: as above; the alias file holds only guest pages.
            unsafe { crate::sys::mmap_alias(dst, n, prot as libc::c_int, fd, src) }
        };
        if let Err(e) = r {
            return -i64::from(e.raw_os_error().unwrap_or(libc::EINVAL));
        }
        dst += n;
        src += n;
        left -= n;
    }
    0
}

/// The `HostFs` hypercall's mappings (`shoal_hostcall::hostfs::serve_map`):
/// a mounted file's pages mapped privately over the guest's free memory
/// (the host's page cache, shared by every instance that maps the file),
/// and fresh zero memory back over them. The same range as [`protect`],
/// split into the pieces the filter's `mmap` ladders allow.
pub struct FileMapper;

impl shoal_hostcall::hostfs::Mapper for FileMapper {
    fn free_memory(&self, addr: u64, len: u64) -> bool {
        range_ok(addr, len, HEAP_START.load(Ordering::Relaxed), MEM_SIZE.load(Ordering::Relaxed))
    }

    fn exec_allowed(&self) -> bool {
        RUN_TIME_CODE.load(Ordering::Relaxed)
    }

    fn map_file(&self, fd: i32, off: u64, addr: u64, len: u64, prot: u64) -> Result<(), i32> {
        let mem_size = MEM_SIZE.load(Ordering::Relaxed);
        let (mut at, mut left, mut off) = (addr, len, off);
        while left > 0 {
            let n = alias_piece(at, at, left, mem_size);
            // SAFETY: [at, at + n) is guest memory above everything the
            // tender protects (checked by `free_memory`), which no Rust
            // code references; the file is opened read-only and mapped
            // privately, so nothing reaches the host's file.
            unsafe { crate::sys::mmap_file(at, n, prot as libc::c_int, fd, off) }.map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))?;
            at += n;
            off += n;
            left -= n;
        }
        Ok(())
    }

    fn map_zero(&self, addr: u64, len: u64, prot: u64) -> Result<(), i32> {
        let mem_size = MEM_SIZE.load(Ordering::Relaxed);
        let (mut at, mut left) = (addr, len);
        let rw = (prot & (PROT_READ | PROT_WRITE)) as libc::c_int;
        while left > 0 {
            let n = alias_piece(at, at, left, mem_size);
            // SAFETY: as in `map_file`; fresh private memory, never
            // executable here.
            unsafe { crate::sys::mmap_own(at, n, rw) }.map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))?;
            at += n;
            left -= n;
        }
        if prot & PROT_EXEC != 0 {
            pieces(addr, len, mem_size, |a, n| {
                // SAFETY: as above; PROT_EXEC only in an executable's
                // instance (checked by the caller through `exec_allowed`).
                unsafe { crate::sys::mprotect(a, n, prot as libc::c_int) }.map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))
            })?;
        }
        Ok(())
    }
}

/// The longest `mprotect` the filter allows at `addr`, `mem_size - addr`
/// being `d > 0`: the largest power of two strictly below `d` (a page for
/// the last page), so that `addr + len <= mem_size` always.
pub fn max_len(addr: u64, mem_size: u64) -> u64 {
    let d = mem_size - addr;
    if d <= PAGE_SIZE {
        PAGE_SIZE
    } else {
        1u64 << (63 - (d - 1).leading_zeros())
    }
}

/// Splits `[addr, addr + len)` (page aligned, inside `[.., mem_size)`)
/// into the pieces [`max_len`] allows, calling `f(addr, len)` on each;
/// stops at the first error.
pub fn pieces(mut addr: u64, len: u64, mem_size: u64, mut f: impl FnMut(u64, u64) -> Result<(), i32>) -> Result<(), i32> {
    let end = addr + len;
    while addr < end {
        let n = (end - addr).min(max_len(addr, mem_size));
        f(addr, n)?;
        addr += n;
    }
    Ok(())
}

/// Whether `[addr, addr + len)` is a non-empty page-aligned range inside
/// `[lo, mem_size)`.
fn range_ok(addr: u64, len: u64, lo: u64, mem_size: u64) -> bool {
    len != 0 && addr.is_multiple_of(PAGE_SIZE) && len.is_multiple_of(PAGE_SIZE) && addr >= lo && addr.checked_add(len).is_some_and(|e| e <= mem_size)
}

/// The `Release` handler: each range checked (the same rules as
/// [`protect`]) and given back with `madvise(MADV_DONTNEED)` in the pieces
/// the filter allows, in order, stopping at the first refused.
pub fn release(a: &ReleaseArgs) -> i64 {
    let (lo, mem_size) = (HEAP_START.load(Ordering::Relaxed), MEM_SIZE.load(Ordering::Relaxed));
    if a.count > RELEASE_LIST_MAX {
        return -i64::from(libc::EINVAL);
    }
    let size = core::mem::size_of::<ReleaseRange>() as u64;
    let mem = crate::hypercall::guest_mem();
    for i in 0..a.count {
        let Ok(r) = mem.read_obj::<ReleaseRange>(shoal_loader::GuestAddr(a.ranges.wrapping_add(i * size))) else {
            return -i64::from(libc::EFAULT);
        };
        if !range_ok(r.addr, r.len, lo, mem_size) {
            return -i64::from(libc::EINVAL);
        }
        let done = pieces(r.addr, r.len, mem_size, |addr, len| {
            // SAFETY: [addr, addr + len) lies in the guest's own memory above
            // everything the tender keeps (checked above), which no Rust code
            // references; the guest asked for its contents to go.
            unsafe { crate::sys::madvise_dontneed(addr, len) }.map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))
        });
        if let Err(e) = done {
            return -i64::from(e);
        }
    }
    0
}

/// The handler: checks the request and applies it.
pub fn protect(a: &ProtectArgs) -> i64 {
    let (lo, mem_size) = (HEAP_START.load(Ordering::Relaxed), MEM_SIZE.load(Ordering::Relaxed));
    let einval = -i64::from(libc::EINVAL);
    // PROTECT_UNTOUCHED is a hint about TLBs, which mprotect keeps right
    // by itself.
    let prot = a.prot & !shoal_abi::PROTECT_UNTOUCHED;
    let exec_refused = prot & PROT_EXEC != 0 && !RUN_TIME_CODE.load(Ordering::Relaxed);
    if prot & !(PROT_READ | PROT_WRITE | PROT_EXEC) != 0 || exec_refused || !range_ok(a.addr, a.len, lo, mem_size) {
        return einval;
    }
    let prot = prot as libc::c_int;
    let r = pieces(a.addr, a.len, mem_size, |addr, len| {
        // SAFETY: [addr, addr + len) lies in the guest's own memory above
        // everything the tender protects (checked above), which no Rust
        // code references; PROT_EXEC only in an executable's instance.
        unsafe { crate::sys::mprotect(addr, len, prot) }.map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))
    });
    match r {
        Ok(()) => 0,
        Err(e) => -i64::from(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_and_protect_ranges_stay_in_free_memory_and_stack() {
        let (lo, mem) = (0x40_0000u64, 64u64 << 20);
        assert!(range_ok(lo, PAGE_SIZE, lo, mem));
        assert!(range_ok(mem - PAGE_SIZE, PAGE_SIZE, lo, mem));
        for (addr, len) in
            [(lo - PAGE_SIZE, PAGE_SIZE), (mem - PAGE_SIZE, 2 * PAGE_SIZE), (lo, 0), (lo + 1, PAGE_SIZE), (lo, 100), (u64::MAX - 4095, PAGE_SIZE)]
        {
            assert!(!range_ok(addr, len, lo, mem), "{addr:#x}+{len:#x}");
        }
        // Too many ranges: refused before guest memory is read.
        let a = ReleaseArgs { ranges: 0, count: RELEASE_LIST_MAX + 1, ret: 0 };
        assert_eq!(release(&a), -i64::from(libc::EINVAL));
    }

    #[test]
    fn pieces_never_reach_past_guest_memory_and_cover_the_request() {
        let mem = 64 << 20;
        for &(addr, len) in &[(0x20_0000u64, mem - 0x20_0000), (mem - 4096, 4096), (mem - 3 * 4096, 3 * 4096), (0x123000, 0x5000)] {
            let mut next = addr;
            pieces(addr, len, mem, |a, n| {
                assert_eq!(a, next);
                assert!(n <= max_len(a, mem) && a + n <= mem);
                next = a + n;
                Ok(())
            })
            .unwrap();
            assert_eq!(next, addr + len);
        }
        assert_eq!(max_len(mem - 4096, mem), 4096);
        assert_eq!(max_len(mem - 8192, mem), 4096);
        assert_eq!(max_len(mem - 12288, mem), 8192);
    }
}
