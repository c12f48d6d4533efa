//! Kernel component `mm` (docs/design.md "Components and recovery"): memory.
//!
//! mm owns the free memory the tender gives the kernel,
//! `[BootInfo::heap_start, heap_end)`, and hands it out three ways:
//!
//! - the program break (`brk`), growing up from `heap_start` (from 320
//!   KiB above it in 4 MiB or more: [`space::KERNEL_LOW`]);
//! - anonymous mappings (`mmap`, `munmap`, `mremap`, `mprotect`,
//!   `madvise`), placed top-down;
//! - the kernel's own heap ([`heap::KernelHeap`], the `talc` allocator),
//!   which grows by chunks of pages: the first near `heap_start`, below
//!   the break, the next ones taken top-down like mappings.
//!
//! All three come from one page-range allocator ([`space::Space`]): a
//! sorted, coalescing table of segments, so the break and the mappings never
//! overlap and exhaustion is `ENOMEM`, never a crash. Memory reaches the
//! program zero-filled, as on Linux. Page protections are bookkeeping only
//! (see [`sys::mprotect`]). Private file mappings are copies of the file;
//! shared ones show the file's own pages ([`file`]).
//!
//! **Limits.** `RLIMIT_AS` and `RLIMIT_DATA` (set by `process` through
//! [`set_limits`]) are enforced as Linux enforces them: a mapping or a
//! growth that would take the address space (the image and the main stack,
//! which are always there, plus the program's mappings and break) above
//! `RLIMIT_AS`, or the writable private memory (writable mappings and the
//! break) above `RLIMIT_DATA`, fails with `ENOMEM` (`brk` leaves the break
//! where it was). mm does not know whether a writable mapping is shared, so
//! shared writable file mappings count as data too.
#![cfg_attr(not(test), no_std)]

pub mod file;
pub mod heap;
pub mod space;
pub mod sys;

use shoal_plat::{Errno, Global};
use space::Space;

pub use heap::{KernelHeap, KERNEL_HEAP};

static SPACE: Global<Space> = Global::new(Space::new());

/// The enforced `(RLIMIT_AS, RLIMIT_DATA)` soft limits, in bytes, each
/// stored inverted (`!limit`): unlimited (`u64::MAX`) is then all zero, so
/// the cell lies in `.bss` instead of putting mm's `.data` on a page of its
/// own in every instance.
static LIMITS: Global<(u64, u64)> = Global::new((0, 0));

/// Sets the `RLIMIT_AS` and `RLIMIT_DATA` soft limits mm enforces
/// (`u64::MAX`: unlimited). Existing memory is kept, as on Linux.
pub fn set_limits(as_limit: u64, data_limit: u64) {
    LIMITS.with(|l| *l = (!as_limit, !data_limit));
}

/// Address space that is always mapped outside mm's range: the image and
/// the main thread's stack.
fn fixed_bytes() -> u64 {
    let bi = shoal_plat::boot::info();
    bi.image_end.saturating_sub(bi.image_start) + bi.stack_top.saturating_sub(bi.stack_base)
}

/// Whether `more` bytes of new address space, `data` of them writable
/// private memory, fit the limits (`ENOMEM` if not).
pub(crate) fn check_limits(s: &Space, more: u64, data: u64) -> Result<(), Errno> {
    let (as_limit, data_limit) = LIMITS.with(|l| (!l.0, !l.1));
    if as_limit == u64::MAX && data_limit == u64::MAX {
        return Ok(());
    }
    let (mapped, writable, brk) = s.usage();
    let total = fixed_bytes().saturating_add(mapped).saturating_add(brk).saturating_add(more);
    if more > 0 && total > as_limit {
        return Err(Errno::ENOMEM);
    }
    if data > 0 && writable.saturating_add(brk).saturating_add(data) > data_limit {
        return Err(Errno::ENOMEM);
    }
    Ok(())
}

/// Takes over `[heap_start, heap_end)` from the boot information. Call
/// once, after `shoal_plat::boot::init` and before the first allocation.
pub fn init() {
    let bi = shoal_plat::boot::info();
    SPACE.with(|s| s.init(shoal_abi::BOOT_INFO_ADDR, bi.mem_size, bi.heap_start, bi.heap_end));
    shoal_plat::umem::set_mapping_check(user_writable);
    shoal_plat::hypercall::set_alias_check(file::shows_file);
}

/// umem's check of the program's mappings (see [`Space::user_writable`]).
/// While mm itself holds the table (a write of its own, such as
/// `mincore`'s result, made inside it), the range is taken as writable:
/// mm checked that caller's arguments already.
fn user_writable(addr: u64, len: u64) -> bool {
    SPACE.try_with(|s| s.user_writable(addr, len)).unwrap_or(true)
}

/// `(total_bytes, free_bytes)` of the memory mm manages (for `sysinfo`).
pub fn stats() -> (u64, u64) {
    SPACE.with(|s| s.stats())
}

/// Calls `f(start, end, prot, brk)` for each of the program's mappings in
/// the managed range, lowest first, adjacent pages of the same kind
/// merged (what `/proc/self/maps` lists): anonymous mappings with their
/// `PROT_*` bits, and the program break (`brk` true, read-write).
pub fn for_each_mapping(mut f: impl FnMut(u64, u64, u32, bool)) {
    SPACE.with(|s| s.for_each_mapping(&mut f))
}

/// Releases the program's mapping `[addr, addr + len)` (as `munmap`).
pub fn unmap(addr: u64, len: u64) -> Result<(), Errno> {
    SPACE.with(|s| s.unmap(addr, len))
}

/// Maps `len` bytes of zeroed, readable and writable anonymous memory for
/// the program (System V shared memory segments, which `process` keeps).
pub fn map_anon(len: u64) -> Result<u64, Errno> {
    SPACE.with(|s| s.map_anywhere(len, space::PROT_READ | space::PROT_WRITE))
}

/// Bytes of freed memory the host still backs that [`release_free`] can
/// give back: dirty free pages, kept for reuse ([`space`]'s module docs;
/// none once the tender refused a release, so an idle wait is not cut
/// short again and again for them), and the free top of the kernel heap
/// ([`KernelHeap::trim`]). 0 while mm is in use further up the stack.
#[inline(never)]
pub fn dirty_bytes() -> u64 {
    let top = KERNEL_HEAP.free_top();
    SPACE.try_with(|s| s.releasable_bytes()).unwrap_or(0) + if top >= space::PAGE { top } else { 0 }
}

/// Gives all freed memory back to the host (`sched`, when the instance
/// has gone idle): the dirty free pages, and the whole pages at the
/// kernel heap's free top ([`KernelHeap::trim`]); returns the bytes
/// released (0 while mm is in use further up the stack).
#[inline(never)]
pub fn release_free() -> u64 {
    let mut n = SPACE.try_with(|s| s.release_free()).unwrap_or(0);
    if let Some((from, to)) = KERNEL_HEAP.trim() {
        if space::give_back(&[shoal_abi::ReleaseRange { addr: from, len: to - from }]) {
            n += to - from;
        }
    }
    n
}

/// Whether the kernel heap is in use further up the stack
/// ([`KernelHeap::in_use`]; `shoal_recover`'s heap check).
#[inline(never)]
pub fn heap_in_use() -> bool {
    KERNEL_HEAP.in_use()
}

/// Maps `len` bytes of zeroed anonymous memory, readable and executable,
/// for code the kernel writes (the trampolines of system-call sites it
/// rewrites, `shoal-syscall`'s `patch`); [`write_code`] fills it.
pub fn map_code(len: u64) -> Result<u64, Errno> {
    SPACE.with(|s| s.map_anywhere(len, space::PROT_READ | space::PROT_EXEC))
}

/// Whether `[addr, addr + len)` lies in one private file mapping that is
/// executable and not writable: code a library's file holds (what `ld.so`
/// maps), which the kernel may rewrite in its copy.
pub fn is_file_code(addr: u64, len: u64) -> bool {
    let Some(end) = addr.checked_add(len) else { return false };
    let in_one = file::find(addr).is_some_and(|m| !m.shared && end <= m.end);
    in_one
        && SPACE.with(|s| {
            let code =
                |a: u64| matches!(s.use_at(a), Some(space::Use::Anon { prot }) if u32::from(prot) & (space::PROT_EXEC | space::PROT_WRITE) == space::PROT_EXEC);
            code(addr) && code(end - 1)
        })
}

/// Writes `bytes` at `addr`, inside the program's executable mappings
/// (checked: `EFAULT` otherwise), lending the pages write access for the
/// copy and giving them back their protection (execute kept throughout,
/// so nothing running there faults).
pub fn write_code(addr: u64, bytes: &[u8]) -> Result<(), Errno> {
    let end = addr.checked_add(bytes.len() as u64).ok_or(Errno::EFAULT)?;
    if bytes.is_empty() {
        return Ok(());
    }
    let (a, b) = (space::page_down(addr), space::page_up(end).ok_or(Errno::EFAULT)?);
    SPACE.with(|s| {
        let exec = |x: u64| matches!(s.use_at(x), Some(space::Use::Anon { prot }) if u32::from(prot) & space::PROT_EXEC != 0);
        if !exec(addr) || !exec(end - 1) {
            return Err(Errno::EFAULT);
        }
        let lent = s.lend_write(a, b);
        // SAFETY: [addr, end) lies in the program's executable mappings
        // (checked above), writable for now; no Rust reference points
        // into program memory.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
        if lent {
            s.restore(a, b);
        }
        Ok(())
    })
}

/// Gives the kernel `bytes` (a multiple of the page size) of pages: in
/// the range kept at the bottom of free memory while they fit there
/// ([`space::KERNEL_LOW`]), else top-down.
pub fn alloc_kernel_pages(bytes: u64) -> Option<u64> {
    SPACE.with(|s| s.alloc_kernel(bytes))
}

/// Frees pages [`alloc_kernel_pages`] gave (an exited thread's kernel
/// stack); pages in the range that are not the kernel's stay as they are.
pub fn free_kernel_pages(addr: u64, bytes: u64) {
    SPACE.with(|s| s.free_kernel(addr, bytes));
}

pub(crate) fn with_space<R>(f: impl FnOnce(&mut Space) -> R) -> R {
    SPACE.with(f)
}

#[cfg(test)]
mod tests;
