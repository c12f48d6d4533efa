//! The shoal kernel as one staticlib (docs/design.md "The image", "Components and recovery").
//!
//! This crate only assembles the components: it links every component
//! crate (each stays its own object file in the archive, so `shoal build`
//! can place and version it), defines `shoal_kernel_init` (which plat's
//! entry point `_shoal_start` calls before entering libc), the kernel's
//! `#[global_allocator]` (mm's talc heap) and the panic handler, and stamps
//! the image with the ABI note tenders check.
//!
//! No unwinding: the profiles build with `panic = "abort"`, so no crate of
//! the workspace emits landing pads, and the panic handler halts. The
//! precompiled `core`/`alloc` of the `x86_64-unknown-linux-gnu` target were
//! built with `panic=unwind`, though: their `.eh_frame` names the
//! personality routine `rust_eh_personality` (through
//! `DW.ref.rust_eh_personality`), and that reference survives
//! `--gc-sections` for the core functions the kernel uses. Rebuilding core
//! with `panic=abort` needs a nightly `-Zbuild-std`; instead this crate
//! defines [`rust_eh_personality`]. It is never called: only an unwinder
//! calls a personality routine, and nothing in the image starts unwinding
//! (no `_Unwind_RaiseException` is linked). For the same reason the landing
//! pads of precompiled `alloc`/`core` functions call `_Unwind_Resume`; images
//! are linked without `--gc-sections` by default, so whole objects of
//! `alloc` come in and this crate defines [`_Unwind_Resume`] too, equally
//! unreachable.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

// Every component, so that all are linked into the staticlib.
use shoal_mm as _;
use shoal_net as _;
use shoal_plat as _;
use shoal_process as _;
use shoal_ramfs as _;
use shoal_recover as _;
use shoal_sched as _;
use shoal_syscall as _;
use shoal_sysinfo as _;
use shoal_time as _;
use shoal_user as _;
use shoal_vfs as _;

use shoal_abi::{AbiNote, BootInfo};

/// The kernel heap: mm's [`shoal_mm::KERNEL_HEAP`], reached through a
/// zero-sized forwarder, so that this crate has no writable data of its own
/// (a data region costs every instance a page; mm's heap lies in mm's bss).
#[cfg(not(test))]
struct Heap;

// SAFETY: every call goes to `KERNEL_HEAP`, which upholds the contract.
#[cfg(not(test))]
unsafe impl core::alloc::GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: core::alloc::Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { shoal_mm::KERNEL_HEAP.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: core::alloc::Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { shoal_mm::KERNEL_HEAP.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: core::alloc::Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { shoal_mm::KERNEL_HEAP.realloc(ptr, layout, new_size) }
    }
}

#[cfg(not(test))]
#[global_allocator]
static HEAP: Heap = Heap;

/// The image's ABI note (docs/design.md "Tenders and hypercalls"): tenders read this section before
/// running anything and refuse an image built for another ABI version.
/// `#[used]` keeps it in the object and shoal's linker script keeps it
/// under `--gc-sections` (`KEEP(*(.note.shoal))`); no code reads it, so the
/// kernel's code does not depend on where the note lands (`aslr`).
#[used]
#[link_section = ".note.shoal"]
static ABI_NOTE: AbiNote = AbiNote::CURRENT;

/// Keeps the syscall entry point referenced, so no linker drops it.
#[used]
static SYSCALL_ENTRY: unsafe extern "C" fn(i64, i64, i64, i64, i64, i64, i64) -> i64 = shoal_syscall::__shoal_syscall;

/// Initialises the kernel. Called once by `_shoal_start` (plat), with the
/// boot-info address the tender passed, before libc's `_start`.
///
/// # Safety
/// `bi` must point at the tender's boot-info page.
#[no_mangle]
pub unsafe extern "C" fn shoal_kernel_init(bi: *const BootInfo) {
    // SAFETY: the tender passes the boot-info page (our caller's contract).
    if let Err(e) = unsafe { shoal_plat::boot::init(bi) } {
        // Not a tender we can talk to: with a bad magic or another ABI
        // version, the hypercall entry (and so the console) may not be
        // usable. Halt with the status for a refused boot; tenders check
        // the ABI note before running, so this is a last line of defence.
        let _ = e;
        shoal_plat::halt(255);
    }
    shoal_mm::init();
    // hvt: console writes are exits, so stdout is buffered (pages of its own).
    shoal_plat::console::init_buffer(shoal_mm::alloc_kernel_pages);
    shoal_time::init();
    shoal_sysinfo::init();
    shoal_vfs::init();
    shoal_net::init();
    shoal_net::host::init();
    shoal_syscall::preempt::init();
    shoal_syscall::fault::init();
    // Last: the snapshots are the components' state right after
    // initialisation. Rebootable are the components whose state the
    // snapshot restores whole (see shoal_recover), and vfs, ramfs,
    // process and net, whose hooks rebuild their state from their log
    // (shoal_vfs::heal, shoal_process::heal, shoal_net::heal); sysinfo's
    // hook moves its random generator to a fresh stream, so a reboot never
    // repeats bytes.
    // vfs, ramfs, process and net only with `--recover-stateful` (their logs
    // cost CPU on every call into them; shoal_abi::RECOVER_STATEFUL).
    use shoal_recover::id;
    // A failure inside the kernel heap (mm's, shared) ends the instance:
    // no component's reboot can repair it.
    shoal_recover::set_heap_check(shoal_mm::heap_in_use);
    if shoal_recover::stateful() {
        shoal_process::heal::start();
        shoal_net::heal::start();
        // Their logs are brought up to date as each call leaves them:
        // the hooks run before a rejuvenation only.
        shoal_recover::set_rejuvenator(id::VFS, shoal_vfs::heal::before_reboot);
        shoal_recover::set_rejuvenator(id::RAMFS, shoal_vfs::heal::before_reboot);
        shoal_recover::set_rejuvenator(id::NET, shoal_net::heal::before_reboot);
        shoal_recover::init(&[
            (id::VFS, Some(shoal_vfs::heal::after_reboot)),
            (id::RAMFS, Some(shoal_vfs::heal::after_ramfs_reboot)),
            (id::TIME, None),
            (id::PROCESS, Some(shoal_process::heal::after_reboot)),
            (id::SYSINFO, Some(shoal_sysinfo::after_reboot)),
            (id::USER, None),
            (id::NET, Some(shoal_net::heal::after_reboot)),
        ]);
    } else {
        shoal_recover::init(&[(id::TIME, None), (id::SYSINFO, Some(shoal_sysinfo::after_reboot)), (id::USER, None)]);
    }
}

/// The personality routine the `.eh_frame` of the precompiled `core`
/// names (see the crate documentation). Unreachable: nothing unwinds; if an
/// unwinder ever called it, the kernel stops as for a panic.
#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn rust_eh_personality() -> ! {
    use core::fmt::Write;
    let _ = writeln!(shoal_plat::console::Stderr, "shoal: kernel panic: unwinding is not supported");
    shoal_plat::halt(134)
}

/// Called only from landing pads of precompiled `core`/`alloc` code while
/// unwinding, which never happens (see the crate documentation).
#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn _Unwind_Resume() -> ! {
    use core::fmt::Write;
    let _ = writeln!(shoal_plat::console::Stderr, "shoal: kernel panic: unwinding is not supported");
    shoal_plat::halt(134)
}

#[cfg(not(test))]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    use core::fmt::Write;
    // Inside a call into a rebootable component: recover reboots it and
    // retries the call (does not return here).
    shoal_recover::on_panic(info);
    match shoal_recover::current() {
        0 => {
            let _ = writeln!(shoal_plat::console::Stderr, "shoal: kernel panic: {info}");
        }
        c => {
            let _ = writeln!(shoal_plat::console::Stderr, "shoal: kernel panic in {}: {info}", shoal_recover::name(c));
        }
    }
    shoal_plat::halt(134)
}
