//! Kernel component `mm` (DESIGN §6): memory.
//!
//! mm owns the free memory the tender gives the kernel,
//! `[BootInfo::heap_start, heap_end)`, and hands it out three ways:
//!
//! - the program break (`brk`), growing up from `heap_start`;
//! - anonymous mappings (`mmap`, `munmap`, `mremap`, `mprotect`,
//!   `madvise`), placed top-down;
//! - the kernel's own heap ([`heap::KernelHeap`], the `talc` allocator),
//!   which grows by chunks of pages taken top-down like mappings.
//!
//! All three come from one page-range allocator ([`space::Space`]): a
//! sorted, coalescing table of segments, so the break and the mappings never
//! overlap and exhaustion is `ENOMEM`, never a crash. Memory reaches the
//! program zero-filled, as on Linux. Page protections are bookkeeping only
//! (see [`sys::mprotect`]). File-backed mappings are copies of the file
//! with write-back for writable shared ones ([`file`]).
#![cfg_attr(not(test), no_std)]

pub mod file;
pub mod heap;
pub mod space;
pub mod sys;

use shoal_plat::{Errno, Global};
use space::Space;

pub use heap::KernelHeap;

static SPACE: Global<Space> = Global::new(Space::new());

/// Takes over `[heap_start, heap_end)` from the boot information. Call
/// once, after `shoal_plat::boot::init` and before the first allocation.
pub fn init() {
    let bi = shoal_plat::boot::info();
    SPACE.with(|s| s.init(shoal_abi::BOOT_INFO_ADDR, bi.mem_size, bi.heap_start, bi.heap_end));
    shoal_plat::umem::set_mapping_check(user_writable);
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

/// Releases the program's mapping `[addr, addr + len)` (as `munmap`).
pub fn unmap(addr: u64, len: u64) -> Result<(), Errno> {
    SPACE.with(|s| s.unmap(addr, len))
}

/// Gives the kernel heap `bytes` (a multiple of the page size) of pages.
pub fn alloc_kernel_pages(bytes: u64) -> Option<u64> {
    SPACE.with(|s| s.alloc_kernel(bytes))
}

pub(crate) fn with_space<R>(f: impl FnOnce(&mut Space) -> R) -> R {
    SPACE.with(f)
}

#[cfg(test)]
mod tests;
