//! The last steps of the instance process (`crate::instance`): maps guest
//! memory, fills it, locks itself down and jumps into the guest. Nothing
//! here allocates (the seccomp filter forbids `mmap` once installed, and
//! nothing after the point of no return should depend on the allocator);
//! failures are printed as `shoal: …` on stderr and end the process with
//! [`crate::EXIT_TENDER_FAILED`].

use crate::hypercall::{self, say, MAX_RO};
use crate::net::FIRST_SOCKET_FD;
use crate::signals::{self, Report};
use crate::{sys, MemoryMode, EXIT_TENDER_FAILED};
use seccompiler::BpfProgram;
use shoal_abi::{BOOT_INFO_ADDR, PAGE_SIZE};
use shoal_loader::{load_segments_except, write_boot_state, BootError, BootParams, Clock, EntryState, GuestMemory, Image, Layout};
use std::ffi::OsString;

/// Size of the hypercall handlers' stack.
const HANDLER_STACK: usize = 256 << 10;
/// Size of the alternate signal stack.
const SIGNAL_STACK: usize = 64 << 10;

/// Everything the last steps need, prepared by `crate::instance`.
///
/// It owns what lives on the heap, so that `setup` can free each piece
/// once used: the instance never returns from entering the guest, so
/// nothing it still held there would ever be freed, and once the filter is
/// in `munmap` is refused (a freed allocation's pages could not go back).
pub(crate) struct Prepared<'a> {
    pub image: Image,
    pub layout: Layout,
    /// The file-system archive: a sealed memfd of `layout.archive_size`
    /// bytes (checked by `crate::instance`), mapped, not copied.
    pub archive: Option<&'a std::os::fd::OwnedFd>,
    pub argv: Vec<OsString>,
    pub env: Vec<OsString>,
    pub params: BootParams,
    /// The seccomp program: owned, so that its heap copy can be freed
    /// before the filter forbids `munmap` ([`stage_filter`]).
    pub filter: BpfProgram,
    /// The page shared with the waiting parent; `None`: no parent, the
    /// instance runs in place.
    pub report: Option<*mut Report>,
    pub mode: MemoryMode,
    pub pool: Option<shoal_loader::pool::PoolPlan>,
    pub pool_ranges: Vec<(u64, u64)>,
    /// The image's read-only pages that may be mapped from its file
    /// ([`file_maps`]; empty with the pool, which maps them).
    pub file_maps: Vec<shoal_loader::FileRange>,
    /// Listening sockets, and after them the bind channel if any: (first
    /// descriptor, count); moved down to `FIRST_SOCKET_FD..` before the
    /// guest runs.
    pub listeners: (i32, i32),
    /// The mounts' `O_PATH` descriptors (`--mount`): (first descriptor,
    /// count); moved to `crate::MOUNT_FD0..` before the guest runs.
    pub mounts: (i32, i32),
    /// A template's control channel (`crate::template`): moved to
    /// `template::CONTROL_FD` before the guest runs.
    pub control: Option<i32>,
    /// What the instance may do on the network (with networking at all,
    /// it gets a watch set: crate::net::open_watch).
    pub net: crate::net::NetPolicy,
}

/// An errno, printed without allocating (std's `io::Error` display
/// allocates its description).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Errno(pub i32);

impl Errno {
    fn last(e: std::io::Error) -> Errno {
        Errno(e.raw_os_error().unwrap_or(0))
    }
}

impl core::fmt::Display for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let name = match self.0 {
            libc::EPERM => "operation not permitted",
            libc::ENOMEM => "out of memory",
            libc::EEXIST => "address range in use",
            libc::EINVAL => "invalid argument",
            libc::EBADF => "bad file descriptor",
            libc::EACCES => "permission denied",
            libc::EFAULT => "bad address",
            _ => "error",
        };
        write!(f, "{name} (errno {})", self.0)
    }
}

/// Why the child could not start the guest.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChildError {
    #[error("cannot close the descriptors the instance booted from, or place its listening sockets: {0}")]
    Close(Errno),
    #[error("cannot make the watch set of the instance's sockets (epoll): {0}")]
    Watch(Errno),
    #[error("guest memory [{start:#x}, {end:#x}) collides with the tender's own mappings; try a smaller --mem")]
    Collision { start: u64, end: u64 },
    #[error("cannot map {size} of guest memory at {start:#x}: {err}")]
    Map { start: u64, size: &'static str, err: Errno },
    #[error("{0}")]
    Boot(BootError),
    #[error("cannot map the file-system archive at {addr:#x}: {err}")]
    Archive { addr: u64, err: Errno },
    #[error("cannot map the library pool at {addr:#x}: {err}")]
    Pool { addr: u64, err: Errno },
    #[error("cannot protect guest memory [{start:#x}, {end:#x}): {err}")]
    Protect { start: u64, end: u64, err: Errno },
    #[error("cannot set up the tender's stacks or signal handlers: {0}")]
    Setup(Errno),
    #[error("cannot install the seccomp filter: {0}")]
    Filter(Errno),
}

/// Runs the child; never returns.
pub(crate) fn start(p: Prepared<'_>) -> ! {
    match setup(p) {
        Ok(last) => leave_initial_stack(last),
        Err(e) => fail(e),
    }
}

/// Prints why the guest could not start and ends the instance.
fn fail(e: ChildError) -> ! {
    say(format_args!("{e}"));
    sys::exit(EXIT_TENDER_FAILED)
}

/// The seccomp program, ready to be installed ([`stage_filter`]).
enum StagedFilter {
    /// Copied into guest stack pages `[start, start + len)`: `n` records.
    Scratch { start: u64, n: usize, len: u64 },
    /// Still on the heap (no room in the guest stack).
    Heap(BpfProgram),
}

/// What the last steps need once the guest is ready: they run on the
/// handlers' stack ([`leave_initial_stack`]).
struct Last {
    entry: EntryState,
    filter: StagedFilter,
    mem_size: u64,
    /// Top of the hypercall handlers' stack.
    handler_stack_top: u64,
}

/// What [`finish_off_stack`] gets: the last steps and the initial stack
/// to give back.
struct OffStack {
    last: Last,
    initial_stack: (u64, u64),
}

/// Leaves the process's initial stack for good: the rest runs on the
/// hypercall handlers' stack (whose frames the first hypercall reuses:
/// these never return), which gives the initial stack's mapping back —
/// its pages (12–16 KiB touched while booting) and the page tables that
/// map it (a middle and a bottom table of its own, 8 KiB: nothing else
/// lies within 1 GiB of the top of the address space) — while `munmap` is
/// still allowed, then installs the filter and enters the guest. Once the
/// guest runs, nothing returns to the initial stack: hypercalls run on the
/// handlers' stack, signal handlers on the alternate one, and the exit is
/// `_exit` from there. If the stack's mapping cannot be told exactly
/// ([`sys::initial_stack`]), it is kept and the steps run here.
fn leave_initial_stack(last: Last) -> ! {
    // musl resolves the vDSO's clock_gettime on first use through the
    // auxiliary vector, which lies on the initial stack: resolved now
    // (the hypercalls and the time handlers call it later).
    let _ = sys::monotonic_ns();
    let Some(initial_stack) = sys::initial_stack(sys::stack_pointer()) else { finish(last) };
    let top = last.handler_stack_top;
    let mut off = core::mem::ManuallyDrop::new(OffStack { last, initial_stack });
    // SAFETY: the handlers' stack is mapped, read-write and unused until
    // the guest's first hypercall, which comes after `finish` has entered
    // the guest; `off` stays valid until `finish_off_stack` has moved it
    // out (first thing, before the initial stack goes).
    unsafe { sys::run_on_stack(top, finish_off_stack, (&raw mut *off).cast()) }
}

/// [`leave_initial_stack`]'s second half, on the handlers' stack.
extern "C" fn finish_off_stack(arg: *mut u8) -> ! {
    // SAFETY: `arg` is the `OffStack` on the initial stack, still mapped,
    // moved out exactly once (the caller never drops its copy).
    let off = unsafe { core::ptr::read(arg.cast::<OffStack>()) };
    let (lo, hi) = off.initial_stack;
    // SAFETY: no pointer into the initial stack is used from here on: the
    // environment (`environ`, on that stack) is emptied first, so a
    // `getenv` finds nothing instead of reading unmapped memory; argv and
    // the auxiliary vector are never read again (the vDSO was resolved in
    // leave_initial_stack). If munmap fails, the stack simply stays.
    unsafe {
        environ = core::ptr::null_mut();
        sys::munmap(lo as usize as *mut u8, hi.saturating_sub(lo) as usize);
    }
    finish(off.last)
}

unsafe extern "C" {
    /// The C library's environment (musl and glibc): a pointer into the
    /// initial stack.
    static mut environ: *mut *mut libc::c_char;
}

/// Installs the filter and enters the guest.
fn finish(last: Last) -> ! {
    if let Err(e) = install_filter(last.filter, last.mem_size) {
        fail(e)
    }
    enter(last.entry)
}

fn setup(mut p: Prepared<'_>) -> Result<Last, ChildError> {
    sys::reset_signals();
    sys::no_core_dumps().map_err(|e| ChildError::Setup(Errno::last(e)))?;

    // Guest memory at its own address, lazily backed.
    let mem_size = p.layout.mem_size;
    let len = mem_size - BOOT_INFO_ADDR;
    // SAFETY: MAP_FIXED_NOREPLACE cannot replace anything the tender uses.
    unsafe { sys::mmap_fixed_noreplace(BOOT_INFO_ADDR, len, libc::PROT_READ | libc::PROT_WRITE) }.map_err(|e| match e.raw_os_error() {
        Some(libc::EEXIST) => ChildError::Collision { start: BOOT_INFO_ADDR, end: mem_size },
        _ => ChildError::Map { start: BOOT_INFO_ADDR, size: "the requested size", err: Errno::last(e) },
    })?;
    if p.mode == MemoryMode::Ksm {
        // Best effort: without KSM the instance still runs, unshared.
        // SAFETY: advice only; the range is the guest mapping.
        let _ = unsafe { sys::madvise_mergeable(BOOT_INFO_ADDR, len) };
    }
    let base = core::ptr::with_exposed_provenance_mut::<u8>(BOOT_INFO_ADDR as usize);
    // SAFETY: just mapped read-write; nothing in the tender refers to it.
    let mem = unsafe { GuestMemory::new(base, mem_size) };
    if let Some(plan) = &p.pool {
        // SAFETY: every pool range lies in the guest mapping made above
        // (the parent checked them against the image's read-only segments,
        // which `plan` placed inside guest memory); guest addresses are host
        // addresses on spt.
        unsafe { plan.map_into(0, |exec| if exec { libc::PROT_READ | libc::PROT_EXEC } else { libc::PROT_READ }) }
            .map_err(|(addr, e)| ChildError::Pool { addr, err: Errno(e) })?;
    }
    // Without the pool, the image's read-only pages are mapped from its
    // file instead of copied ([`file_maps`]).
    let mapped = match (p.pool.is_none(), p.image.file()) {
        (true, Some(f)) => map_from_file(&p.file_maps, std::os::fd::AsRawFd::as_raw_fd(f))?,
        _ => Vec::new(),
    };
    // The segments straight from the image's descriptor into guest memory
    // (before the descriptors are closed below).
    sys::start_step("instance: guest memory reserved, pool or read-only pages mapped");
    let skip = if mapped.is_empty() { &p.pool_ranges } else { &mapped };
    load_segments_except(&mem, &p.image, skip).map_err(ChildError::Boot)?;
    drop(mapped);
    drop(core::mem::take(&mut p.file_maps));
    // The image file and the pool files are mapped or copied: closed here
    // (their numbers are taken by the sockets and the alias file next),
    // their heap freed.
    p.image.release_data();
    drop(p.pool.take());
    drop(core::mem::take(&mut p.pool_ranges));
    sys::start_step("instance: segments loaded");
    // The archive: its sealed memfd mapped read-only and private at its
    // place (the guest only reads it; the file can never change), so it
    // costs neither a copy in this process nor one in guest memory, and
    // its pages are touched only when the guest reads them. The bytes of
    // the last page past the file's end read as zero.
    if let Some(fd) = p.archive {
        let (addr, len) = (p.layout.archive_addr, p.layout.archive_size.next_multiple_of(PAGE_SIZE));
        // SAFETY: the layout placed [addr, addr + len) inside the guest
        // mapping made above, which no Rust reference points into.
        unsafe { sys::mmap_file_fixed(addr, len, std::os::fd::AsRawFd::as_raw_fd(fd)) }.map_err(|e| ChildError::Archive { addr, err: Errno(e) })?;
    }
    // Everything the instance booted from is read or mapped now: from here
    // on it holds no descriptor but the console (fds 0-2) and its listening
    // sockets (3.., every one a guest socket). The `OwnedFd`s of the pool
    // plan and the image's file are never dropped (this function's caller
    // never returns), so nothing closes these numbers twice.
    let (from, n) = p.listeners;
    for i in 0..n {
        // Sources sit above their targets (from >= 7 > 3), and each move
        // only overwrites a source already moved.
        sys::dup3(from + i, FIRST_SOCKET_FD + i, libc::O_CLOEXEC).map_err(|e| ChildError::Close(Errno(e)))?;
    }
    // The mounts' descriptors go up to the range the filter names (their
    // sources lie below it, above the sockets' targets), and a template's
    // control channel to its number; everything else above the sockets
    // is closed: the gaps between what is kept.
    let (mfrom, mn) = p.mounts;
    for i in 0..mn {
        sys::dup3(mfrom + i, crate::MOUNT_FD0 + i, libc::O_CLOEXEC).map_err(|e| ChildError::Close(Errno(e)))?;
    }
    if let Some(c) = p.control {
        // Far above the numbers the guest's sockets, the alias file and
        // the watch set take, below 64 (the process's first descriptor
        // table: its copies inherit its size).
        sys::dup3(c, crate::template::CONTROL_FD, libc::O_CLOEXEC).map_err(|e| ChildError::Close(Errno(e)))?;
    }
    let control = p.control.map(|_| (crate::template::CONTROL_FD, crate::template::CONTROL_FD + 1));
    let mounts = (mn > 0).then_some((crate::MOUNT_FD0, crate::MOUNT_FD0 + mn));
    let mut next = FIRST_SOCKET_FD + n;
    for (lo, hi) in [control, mounts].into_iter().flatten() {
        if lo > next {
            sys::close_range(next as u32, (lo - 1) as u32).map_err(|e| ChildError::Close(Errno(e)))?;
        }
        next = hi;
    }
    sys::close_from(next as u32).map_err(|e| ChildError::Close(Errno(e)))?;
    // The alias file (crate::protect): guest memory that shared file
    // mappings alias, offset = guest address; sparse until used. It takes
    // the lowest free descriptor, right after the sockets, which the
    // filter was built for.
    let alias_fd = sys::memfd(c"shoal-alias").map_err(|e| ChildError::Setup(Errno::last(e)))?;
    let alias_fd = std::os::fd::IntoRawFd::into_raw_fd(alias_fd);
    if alias_fd != p.net.alias_fd() {
        return Err(ChildError::Setup(Errno(libc::EBADF)));
    }
    // Sized to cover guest memory. Under an RLIMIT_FSIZE below that (a
    // caller's `ulimit -f`), ftruncate would fail and raise SIGXFSZ: then
    // the file stays empty and the Alias hypercall answers ENODEV (shared
    // file mappings fail to map), nothing else changes.
    let alias_ok = sys::file_size_limit().is_none_or(|l| l >= mem_size)
        // SAFETY: a descriptor this process owns.
        && unsafe { libc::ftruncate(alias_fd, mem_size as libc::off_t) } == 0;
    let mut params = p.params;
    // The watch set of the instance's host sockets, right after the alias
    // file, at the descriptor the seccomp filter pins its epoll calls to
    // (crate::net::watch_fd).
    if p.net.any() && crate::net::open_watch(&p.net).map_err(|e| ChildError::Watch(Errno(e)))? {
        params.net_flags |= shoal_abi::NET_WATCH;
    }
    params.clock = Clock::now(params.clock.tsc_hz);
    let entry = write_boot_state(&mem, &p.image, &p.layout, &p.argv, &p.env, &params).map_err(ChildError::Boot)?;
    drop(core::mem::take(&mut p.argv));
    drop(core::mem::take(&mut p.env));
    sys::start_step("instance: boot state written");
    // What parsing the image's headers and the boot spec freed would
    // otherwise stay resident in the instance's heap for its whole life.
    sys::trim_heap();

    // Protections: code R+X, read-only data R, archive R, boot-info page R.
    let mut ro = [(0u64, 0u64); MAX_RO];
    let mut n = 0;
    let mut protect = |start: u64, end: u64, prot: libc::c_int| -> Result<(), ChildError> {
        if start >= end {
            return Ok(());
        }
        // SAFETY: the range is guest memory, which no Rust code references.
        unsafe { sys::mprotect(start, end - start, prot) }.map_err(|e| ChildError::Protect { start, end, err: Errno::last(e) })?;
        if n < MAX_RO {
            ro[n] = (start, end);
            n += 1;
        }
        Ok(())
    };
    for s in p.image.segments() {
        if s.perms.exec {
            protect(s.page_start(), s.page_end(), libc::PROT_READ | libc::PROT_EXEC)?;
        } else if !s.perms.write {
            protect(s.page_start(), s.page_end(), libc::PROT_READ)?;
        } else {
            crate::template::note_writable(s.page_start(), s.page_end());
        }
    }
    if p.archive.is_some() {
        let end = (p.layout.archive_addr + p.layout.archive_size).div_ceil(PAGE_SIZE) * PAGE_SIZE;
        protect(p.layout.archive_addr, end, libc::PROT_READ)?;
    }
    protect(BOOT_INFO_ADDR, BOOT_INFO_ADDR + PAGE_SIZE, libc::PROT_READ)?;
    let exec_entry = p.image.exec_entry();
    // The last use of the image (its file was closed above).
    drop(p.image);

    // The handlers' stack (with a guard page below) and the signal stack.
    let setup_err = |e: std::io::Error| ChildError::Setup(Errno::last(e));
    let stack = sys::mmap_anon(HANDLER_STACK + PAGE_SIZE as usize, libc::PROT_READ | libc::PROT_WRITE, false).map_err(setup_err)?;
    // SAFETY: the guard page is the lowest page of the fresh stack mapping.
    unsafe { sys::mprotect(stack as u64, PAGE_SIZE, libc::PROT_NONE) }.map_err(setup_err)?;
    let stack_top = stack as u64 + PAGE_SIZE + HANDLER_STACK as u64;
    let sigstack = sys::mmap_anon(SIGNAL_STACK, libc::PROT_READ | libc::PROT_WRITE, false).map_err(setup_err)?;
    // SAFETY: a fresh mapping used for nothing else.
    unsafe { sys::sigaltstack(sigstack, SIGNAL_STACK) }.map_err(setup_err)?;
    signals::set_report(p.report);
    // SAFETY: the handlers use no thread pointer and do not allocate.
    unsafe {
        sys::set_handler(libc::SIGSYS, signals::on_sigsys).map_err(setup_err)?;
        for sig in signals::CRASH_SIGNALS {
            sys::set_handler(sig, signals::on_crash).map_err(setup_err)?;
        }
        // SIGTERM and SIGHUP go to the guest (its kernel raises them in
        // the program), not to this process's default action.
        for sig in shoal_abi::FORWARDED_SIGNALS {
            sys::set_handler(sig, signals::on_forwarded).map_err(setup_err)?;
        }
        // The waiting parent's question whether the guest took them
        // (crate::supervise).
        sys::set_handler(signals::QUERY_SIGNAL, signals::on_query).map_err(setup_err)?;
        // The preemption tick (armed only while the guest has more than
        // one runnable thread).
        crate::preempt::install_handler().map_err(setup_err)?;
    }
    if let Some(entry) = exec_entry {
        // A Linux executable: a `syscall` instruction its rewriting left
        // (or code it made at run time) raises SIGSYS instead of reaching
        // the host, and the handler sends it to the kernel's entry. Every
        // address above guest memory (this program, its libc, the vDSO)
        // keeps making its calls; they still pass the filter installed
        // next. Set before the filter, which does not allow prctl.
        signals::set_exec_entry(entry);
        crate::protect::allow_run_time_code();
        let (from, len) = dispatch_range(mem_size);
        sys::syscall_user_dispatch(from, len).map_err(setup_err)?;
    }
    crate::preempt::install(BOOT_INFO_ADDR, mem_size, params.watchdog_ns, signals::ticks_counter());
    hypercall::install(sys::rdfsbase(), stack_top, mem_size, &ro[..n]);
    crate::protect::install(p.layout.heap_start, mem_size, if alias_ok { alias_fd } else { -1 });

    // Before the filter: the vDSO's clock may fall back to a system call.
    sys::start_step("instance: handlers installed (the filter and the guest next)");
    // Last: no_new_privs and the filter (staged here, installed by
    // `finish`). From there on only the allow-list.
    let filter = stage_filter(core::mem::take(&mut p.filter), &p.layout, entry.rsp);
    Ok(Last { entry, filter, mem_size, handler_stack_top: stack_top })
}

/// The read-only pages of `image` that this instance may map from the
/// image's file rather than copy into anonymous memory: the frames are then
/// the page cache's, shared by every instance of the same file (and by
/// the host's own readers of it), and a start neither zeroes nor copies
/// them (the Go hello server's 5.4 MiB of code and rodata: most of the
/// instance's start).
///
/// Only when the file is a regular file owned by this process's effective
/// user and writable by nobody else, checked before the instance drops
/// root: mapped pages follow the file for as long as the instance lives
/// (a copy is taken once), so a file that someone else could change or
/// truncate under a running instance is copied as before. The owner
/// could change it, as it could ptrace the tender (the pool's threat
/// model, `shoal_loader::pool`). Code pages are not mapped from a file
/// system mounted `noexec` (the mapping could not be made executable).
/// The guest cannot change these pages: they lie below the range its
/// `Protect`, `Alias` and `Release` hypercalls (and the filter's bounds
/// on its own `mprotect`, `mmap` and `madvise`) reach
/// ([`crate::protect`]), and a private mapping never writes the file.
pub(crate) fn file_maps(image: &Image) -> Vec<shoal_loader::FileRange> {
    use std::os::unix::fs::MetadataExt;
    let Some(f) = image.file() else { return Vec::new() };
    let Ok(m) = f.metadata() else { return Vec::new() };
    if !m.file_type().is_file() || m.uid() != sys::geteuid() || m.mode() & 0o022 != 0 {
        return Vec::new();
    }
    let noexec = sys::on_noexec_mount(std::os::fd::AsRawFd::as_raw_fd(f)).unwrap_or(true);
    image.file_ranges().into_iter().filter(|r| !(r.exec && noexec)).collect()
}

/// Maps each of `ranges` from the image file `fd` over guest memory;
/// returns the ranges mapped, `(start, end)`, for the copy to skip. A
/// range the host refuses to map stays anonymous memory and is copied.
fn map_from_file(ranges: &[shoal_loader::FileRange], fd: std::os::fd::RawFd) -> Result<Vec<(u64, u64)>, ChildError> {
    let mut done = Vec::with_capacity(ranges.len());
    for r in ranges {
        let prot = if r.exec { libc::PROT_READ | libc::PROT_EXEC } else { libc::PROT_READ };
        // SAFETY: the range lies in the guest mapping (the image's
        // segments were placed inside guest memory by the layout), which
        // no Rust reference points into.
        match unsafe { sys::mmap_file_at(r.addr, r.len, prot, fd, r.offset) } {
            Ok(()) => done.push((r.addr, r.addr + r.len)),
            Err(_) => {
                // A failed MAP_FIXED may have taken the old mapping away:
                // fresh anonymous memory again, which the copy fills.
                // SAFETY: as above.
                unsafe { sys::mmap_own(r.addr, r.len, libc::PROT_READ | libc::PROT_WRITE) }.map_err(|e| ChildError::Map {
                    start: r.addr,
                    size: "an image segment",
                    err: Errno::last(e),
                })?;
            }
        }
    }
    Ok(done)
}

/// End of the x86-64 user address space (47 bits, one page short).
const USER_SPACE_END: u64 = 0x7fff_ffff_f000;

/// The range whose `syscall` instructions syscall user dispatch lets
/// through in an executable's instance (every address above guest
/// memory): (start, length). A template's copies turn it on again with
/// the same (`crate::template`).
pub(crate) fn dispatch_range(mem_size: u64) -> (u64, u64) {
    (mem_size, USER_SPACE_END - mem_size)
}

/// Where the seccomp program is copied before it is installed: the guest
/// stack's unused pages right below the initial stack pointer (zero
/// memory to the guest, in the 2 MiB range whose page table the stack
/// needs anyway). `None` if the program does not fit above `stack_base`.
fn filter_scratch(layout: &Layout, rsp: u64, bytes: u64) -> Option<u64> {
    let start = (rsp & !(PAGE_SIZE - 1)).checked_sub(bytes.next_multiple_of(PAGE_SIZE))?;
    (start >= layout.stack_base && start >= layout.heap_start).then_some(start)
}

/// Stages the seccomp program for [`install_filter`]. The program's heap
/// copy (about 14 KiB) would otherwise stay resident for the instance's
/// whole life: once the filter is in, `munmap` is refused, so the
/// allocator can never give its pages back. So it is copied into unused
/// guest stack ([`filter_scratch`]) and freed while `munmap` is still
/// allowed; [`install_filter`] installs it from there and then discards
/// those guest pages with `madvise(MADV_DONTNEED)` (which the filter
/// allows on guest memory above `heap_start`): the guest finds them zero,
/// as a fresh stack is. Saves 16 KiB per idle instance (smaps). Without
/// room in the stack the program is installed from the heap, as before.
fn stage_filter(prog: BpfProgram, layout: &Layout, rsp: u64) -> StagedFilter {
    let bytes = core::mem::size_of_val(prog.as_slice()) as u64;
    let Some(start) = filter_scratch(layout, rsp, bytes) else {
        return StagedFilter::Heap(prog);
    };
    let n = prog.len();
    let at = core::ptr::with_exposed_provenance_mut::<seccompiler::sock_filter>(start as usize);
    // SAFETY: [start, start + bytes) is guest stack below the initial
    // stack pointer (filter_scratch), inside the guest mapping, page
    // aligned (sock_filter needs 4), and no Rust reference points into it.
    unsafe { core::ptr::copy_nonoverlapping(prog.as_ptr(), at, n) };
    drop(prog);
    StagedFilter::Scratch { start, n, len: bytes.next_multiple_of(PAGE_SIZE) }
}

/// Installs the staged seccomp filter (and `no_new_privs`) and clears
/// its guest scratch pages ([`stage_filter`]).
fn install_filter(filter: StagedFilter, mem_size: u64) -> Result<(), ChildError> {
    let filter_err = |e: seccompiler::Error| {
        ChildError::Filter(match e {
            seccompiler::Error::Prctl(e) | seccompiler::Error::Seccomp(e) => Errno::last(e),
            _ => Errno(0),
        })
    };
    let (start, n, len) = match filter {
        StagedFilter::Heap(prog) => return seccompiler::apply_filter(&prog).map_err(filter_err),
        StagedFilter::Scratch { start, n, len } => (start, n, len),
    };
    let at = core::ptr::with_exposed_provenance::<seccompiler::sock_filter>(start as usize);
    // SAFETY: the `n` records stage_filter wrote there; read only until
    // the guest runs.
    let copy = unsafe { core::slice::from_raw_parts(at, n) };
    let installed = seccompiler::apply_filter(copy).map_err(filter_err);
    // (In the pieces the filter's ladder allows: crate::protect::pieces.)
    let cleared = crate::protect::pieces(start, len, mem_size, |addr, len| {
        // SAFETY: part of [start, start + len): guest pages below the stack
        // pointer the guest has not run on yet; they read as zero
        // afterwards, as untouched stack does.
        unsafe { sys::madvise_dontneed(addr, len) }.map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))
    })
    .map_err(|e| ChildError::Setup(Errno(e)));
    installed.and(cleared)
}

/// Jumps to the guest: `rsp` at argc, `rdi` = boot info, every other
/// general-purpose register and the FS base zero, direction flag clear.
fn enter(e: EntryState) -> ! {
    // SAFETY: the guest image is loaded and protected, its stack and boot
    // info written; the guest never returns here (it leaves through the
    // halt hypercall, a fault, or the filter).
    unsafe {
        core::arch::asm!(
            "mov rsp, r13",
            "xor eax, eax",
            "wrfsbase rax",
            "xor ebx, ebx",
            "xor ecx, ecx",
            "xor edx, edx",
            "xor esi, esi",
            "xor ebp, ebp",
            "xor r8d, r8d",
            "xor r9d, r9d",
            "xor r10d, r10d",
            "xor r11d, r11d",
            "xor r13d, r13d",
            "xor r14d, r14d",
            "xor r15d, r15d",
            "cld",
            "jmp r12",
            in("r12") e.rip,
            in("r13") e.rsp,
            in("rdi") e.rdi,
            options(noreturn)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(stack_base: u64, mem_size: u64) -> Layout {
        Layout {
            mem_size,
            image_start: 0x10_0000,
            image_end: 0x20_0000,
            archive_addr: 0,
            archive_size: 0,
            heap_start: 0x20_0000,
            heap_end: stack_base,
            stack_base,
            stack_top: mem_size,
            args_len: 0,
        }
    }

    #[test]
    fn the_filter_scratch_lies_in_the_stack_below_the_stack_pointer() {
        let l = layout(28 << 20, 32 << 20);
        let rsp = (32 << 20) - 0x1e8;
        // 14 KiB of program: four pages right below the stack pointer's page.
        assert_eq!(filter_scratch(&l, rsp, 14 << 10), Some((32 << 20) - PAGE_SIZE - (16 << 10)));
        let start = filter_scratch(&l, rsp, 14 << 10).unwrap_or(0);
        assert!(start >= l.stack_base && start + (16 << 10) <= rsp);
    }

    #[test]
    fn no_filter_scratch_when_the_program_does_not_fit_the_stack() {
        let l = layout((32 << 20) - (64 << 10), 32 << 20);
        let rsp = (32 << 20) - 0x100;
        assert_eq!(filter_scratch(&l, rsp, 64 << 10), None);
        assert!(filter_scratch(&l, rsp, 32 << 10).is_some());
    }
}
