//! Checked access to application memory named in syscall arguments.
//!
//! The application and the kernel share one address space (that is the
//! point of a unikernel), so the application is not an adversary here; but
//! a wrong pointer must still come back as `EFAULT`, as on Linux, rather
//! than crash the kernel. Every access goes through these functions, which
//! check that the range lies inside guest memory without overflow.
//!
//! Writes ([`write`], [`slice_mut`], [`check_write`]) also need memory the
//! program may write, as on Linux: not the image's code or read-only data,
//! the file-system archive or the boot-info page (the ranges spt maps
//! read-only and the hvt VMM never writes results into; see
//! [`set_read_only`]), nor the pages mm says are unmapped or mapped without
//! `PROT_WRITE` ([`set_mapping_check`]). A system call asked to write there
//! fails with `EFAULT` instead of killing the instance (spt: the host
//! kernel's SIGSEGV) or silently overwriting code and constants (hvt, whose
//! kernel runs at CPL 3 under the same page tables, but where the checks
//! keep both tenders alike).

use crate::Errno;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use shoal_abi::{BootInfo, BOOT_INFO_ADDR, PAGE_SIZE};

// Before `set_bounds` every non-empty range fails on `HIGH` = 0; `LOW`
// starts at 0 rather than `u64::MAX` so that it lies in `.bss` (a non-zero
// start put plat's `.data` on a page of its own in every instance).
#[cfg(not(test))]
static LOW: AtomicU64 = AtomicU64::new(0);
#[cfg(not(test))]
static HIGH: AtomicU64 = AtomicU64::new(0);
// Unit tests run on the host and pass host pointers.
#[cfg(test)]
static LOW: AtomicU64 = AtomicU64::new(1);
#[cfg(test)]
static HIGH: AtomicU64 = AtomicU64::new(u64::MAX);

/// Sets guest memory to `[low, high)`. `boot::init` calls it; host unit
/// tests of other crates call `set_bounds(1, u64::MAX)` so that host
/// pointers pass the checks (in plat's own tests that is the default).
pub fn set_bounds(low: u64, high: u64) {
    LOW.store(low, Ordering::Relaxed);
    HIGH.store(high, Ordering::Relaxed);
}

/// Checks that `[addr, addr + len)` lies inside guest memory.
pub fn check(addr: u64, len: u64) -> Result<(), Errno> {
    if len == 0 {
        return Ok(());
    }
    let end = addr.checked_add(len).ok_or(Errno::EFAULT)?;
    if addr < LOW.load(Ordering::Relaxed) || end > HIGH.load(Ordering::Relaxed) {
        return Err(Errno::EFAULT);
    }
    Ok(())
}

/// The application's bytes `[addr, addr + len)`.
pub fn slice(addr: u64, len: usize) -> Result<&'static [u8], Errno> {
    if len == 0 {
        return Ok(&[]);
    }
    check(addr, len as u64)?;
    // SAFETY: the range is inside guest memory (checked above), which is
    // mapped for the whole life of the instance; the kernel runs one flow of
    // control at a time, so nothing writes it while the syscall uses it.
    Ok(unsafe { core::slice::from_raw_parts(addr as *const u8, len) })
}

/// Most read-only ranges umem keeps: every program header of an image
/// (at most 36 fit in the boot-info page) plus the archive and the
/// boot-info page.
pub const MAX_READ_ONLY: usize = 40;

// Atomics rather than a `Global`: host unit tests of several components run
// in parallel threads and all pass through these checks.
static RO: [[AtomicU64; 2]; MAX_READ_ONLY] = [const { [AtomicU64::new(0), AtomicU64::new(0)] }; MAX_READ_ONLY];
static RO_LEN: AtomicUsize = AtomicUsize::new(0);
/// A `fn(u64, u64) -> bool` (mm's check of its mappings), or null.
static MAPPING_CHECK: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Sets the guest ranges `[start, end)` the program may not have the kernel
/// write into (at most [`MAX_READ_ONLY`]; more are ignored). `boot::init`
/// sets them from the boot information ([`read_only_ranges`]); host unit
/// tests may set their own.
pub fn set_read_only(ranges: &[(u64, u64)]) {
    let n = ranges.len().min(MAX_READ_ONLY);
    // Shrink first, so that a concurrent check never sees half-written slots.
    RO_LEN.store(0, Ordering::SeqCst);
    for (slot, &(start, end)) in RO.iter().zip(ranges) {
        slot[0].store(start, Ordering::SeqCst);
        slot[1].store(end, Ordering::SeqCst);
    }
    RO_LEN.store(n, Ordering::SeqCst);
}

/// Registers the check of later mappings: `f(addr, len)` says whether the
/// program may write `[addr, addr + len)` as far as its mappings go (mm:
/// mapped, and with `PROT_WRITE`). `f` must not write user memory itself.
pub fn set_mapping_check(f: fn(u64, u64) -> bool) {
    MAPPING_CHECK.store(f as *mut (), Ordering::SeqCst);
}

/// The ranges spt maps read-only, from the boot information: each
/// `PT_LOAD` segment without `PF_W` in the program headers copy at
/// `phdr_addr` (in whole pages, as the tenders protect them), the archive
/// and the boot-info page. Returns how many of `out` it filled.
///
/// The program headers are read through [`read`], so bounds must be set.
pub fn read_only_ranges(info: &BootInfo, out: &mut [(u64, u64); MAX_READ_ONLY]) -> usize {
    const PT_LOAD: u32 = 1;
    const PF_W: u32 = 2;
    const PHDR_SIZE: u64 = 56;
    // Past the last page boundary: the highest one (the range is then
    // refused by the bounds anyway).
    let page_up = |a: u64| a.checked_next_multiple_of(PAGE_SIZE).unwrap_or(!(PAGE_SIZE - 1));
    let mut n = 0;
    let mut push = |r: (u64, u64)| {
        if n < MAX_READ_ONLY && r.0 < r.1 {
            out[n] = r;
            n += 1;
        }
    };
    // The boot-info page and the archive first: they must never be missed.
    push((BOOT_INFO_ADDR, BOOT_INFO_ADDR + PAGE_SIZE));
    if info.fs_archive_size > 0 {
        push((info.fs_archive_addr, page_up(info.fs_archive_addr.saturating_add(info.fs_archive_size))));
    }
    for i in 0..info.phnum.min(MAX_READ_ONLY as u64) {
        let Some(at) = info.phdr_addr.checked_add(i * PHDR_SIZE) else { break };
        let Ok(ph) = read::<[u8; PHDR_SIZE as usize]>(at) else { break };
        let u32_at = |o: usize| u32::from_le_bytes([ph[o], ph[o + 1], ph[o + 2], ph[o + 3]]);
        let u64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&ph[o..o + 8]);
            u64::from_le_bytes(b)
        };
        let (ptype, flags, vaddr, memsz) = (u32_at(0), u32_at(4), u64_at(16), u64_at(40));
        if ptype == PT_LOAD && flags & PF_W == 0 && memsz > 0 {
            push((vaddr & !(PAGE_SIZE - 1), page_up(vaddr.saturating_add(memsz))));
        }
    }
    n
}

/// Checks that `[addr, addr + len)` is guest memory the program may write:
/// inside guest memory, outside every read-only range, and mapped writable
/// as far as mm knows.
pub fn check_write(addr: u64, len: u64) -> Result<(), Errno> {
    if len == 0 {
        return Ok(());
    }
    check(addr, len)?;
    let end = addr + len; // no overflow: checked by `check`
    let n = RO_LEN.load(Ordering::SeqCst);
    if RO.iter().take(n).any(|r| addr < r[1].load(Ordering::SeqCst) && r[0].load(Ordering::SeqCst) < end) {
        return Err(Errno::EFAULT);
    }
    let f = MAPPING_CHECK.load(Ordering::SeqCst);
    if !f.is_null() {
        // SAFETY: the only non-null value ever stored is a
        // `fn(u64, u64) -> bool` cast to a pointer (`set_mapping_check`).
        let f: fn(u64, u64) -> bool = unsafe { core::mem::transmute::<*mut (), fn(u64, u64) -> bool>(f) };
        if !f(addr, len) {
            return Err(Errno::EFAULT);
        }
    }
    Ok(())
}

/// The application's bytes `[addr, addr + len)`, writable (`EFAULT` unless
/// [`check_write`] allows it).
pub fn slice_mut(addr: u64, len: usize) -> Result<&'static mut [u8], Errno> {
    if len == 0 {
        return Ok(&mut []);
    }
    check_write(addr, len as u64)?;
    // SAFETY: as in `slice`; the syscall that asked for this buffer is its
    // only user until it returns.
    Ok(unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, len) })
}

/// Reads a `T` (a plain-old-data syscall structure) from `addr`.
pub fn read<T: Copy>(addr: u64) -> Result<T, Errno> {
    check(addr, core::mem::size_of::<T>() as u64)?;
    // SAFETY: the range is inside guest memory (checked); `T: Copy` is a
    // plain-data syscall structure for which any bit pattern the
    // application wrote is acceptable; the read is unaligned-safe.
    Ok(unsafe { core::ptr::read_unaligned(addr as *const T) })
}

/// Writes `v` to `addr` (`EFAULT` unless [`check_write`] allows it).
pub fn write<T: Copy>(addr: u64, v: T) -> Result<(), Errno> {
    check_write(addr, core::mem::size_of::<T>() as u64)?;
    // SAFETY: the range is writable guest memory (checked); the write is
    // unaligned-safe.
    unsafe { core::ptr::write_unaligned(addr as *mut T, v) };
    Ok(())
}

/// The NUL-terminated string at `addr`, without its NUL. Longer than `max`
/// bytes: `ENAMETOOLONG`.
pub fn cstr(addr: u64, max: usize) -> Result<&'static [u8], Errno> {
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let mut n = 0usize;
    loop {
        let p = addr.checked_add(n as u64).ok_or(Errno::EFAULT)?;
        let b: u8 = read(p)?;
        if b == 0 {
            return slice(addr, n);
        }
        n += 1;
        if n > max {
            return Err(Errno::ENAMETOOLONG);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Host memory standing in for guest memory: the tests below make parts
    // of it read-only. Other tests of this crate never touch it, so setting
    // the (process-wide) read-only ranges does not disturb them.
    static mut GUEST: [u8; 0x4000] = [0; 0x4000];

    fn guest_base() -> u64 {
        core::ptr::addr_of_mut!(GUEST) as u64
    }

    fn refuse_last_page(addr: u64, len: u64) -> bool {
        let last = guest_base() + 0x3000;
        !(addr < last + 0x1000 && last < addr + len)
    }

    #[test]
    fn writes_into_read_only_ranges_are_efault() {
        let g = guest_base();
        set_read_only(&[(g, g + 0x1000), (g + 0x2000, g + 0x2800)]);
        set_mapping_check(refuse_last_page);
        assert_eq!(write(g + 8, 1u64), Err(Errno::EFAULT));
        assert_eq!(write(g + 0xffc, 1u64), Err(Errno::EFAULT), "straddles the end");
        assert_eq!(write(g + 0x1000, 7u64), Ok(()));
        assert_eq!(read::<u64>(g + 0x1000), Ok(7));
        assert_eq!(read::<u64>(g + 8), Ok(0), "reading read-only memory is fine");
        assert_eq!(slice_mut(g + 0x1ff0, 0x20).map(|s| s.len()), Err(Errno::EFAULT), "straddles the start");
        assert_eq!(slice_mut(g + 0x2800, 0x20).map(|s| s.len()), Ok(0x20));
        assert_eq!(check_write(g + 0x2fff, 2), Err(Errno::EFAULT), "mm says the last page is not writable");
        assert_eq!(slice_mut(g, 0).map(|s| s.len()), Ok(0), "empty ranges are fine anywhere");
        assert_eq!(check_write(u64::MAX - 2, 8), Err(Errno::EFAULT));
        assert_eq!(slice(g, 0x10).map(|s| s.len()), Ok(0x10));
        // SAFETY: only this test reads GUEST; the bytes were never written.
        assert_eq!(unsafe { (*core::ptr::addr_of!(GUEST))[8] }, 0, "the refused write wrote nothing");
    }

    #[test]
    fn read_only_ranges_come_from_the_boot_information() {
        // Program headers: code R+X, rodata R, data R+W, a TLS header, and
        // an empty R segment.
        let ph = |ptype: u32, flags: u32, vaddr: u64, memsz: u64| {
            let mut b = [0u8; 56];
            b[0..4].copy_from_slice(&ptype.to_le_bytes());
            b[4..8].copy_from_slice(&flags.to_le_bytes());
            b[16..24].copy_from_slice(&vaddr.to_le_bytes());
            b[40..48].copy_from_slice(&memsz.to_le_bytes());
            b
        };
        let phdrs = [ph(1, 5, 0x100000, 0x1234), ph(1, 4, 0x102000, 0x10), ph(1, 6, 0x103000, 0x5000), ph(7, 4, 0x103000, 0x40), ph(1, 4, 0x109000, 0)];
        let mut info = crate::boot::info();
        info.phdr_addr = phdrs.as_ptr() as u64;
        info.phnum = phdrs.len() as u64;
        info.fs_archive_addr = 0x200000;
        info.fs_archive_size = 0x1001;
        let mut out = [(0, 0); MAX_READ_ONLY];
        let n = read_only_ranges(&info, &mut out);
        assert_eq!(&out[..n], &[(BOOT_INFO_ADDR, BOOT_INFO_ADDR + 0x1000), (0x200000, 0x202000), (0x100000, 0x102000), (0x102000, 0x103000)]);
        info.fs_archive_size = 0;
        info.phnum = 0;
        assert_eq!(read_only_ranges(&info, &mut out), 1);
    }
}
