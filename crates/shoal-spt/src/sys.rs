//! Every system call spt makes, each wrapped once. Functions that can break
//! memory safety (mapping, protecting, forking) are `unsafe fn` with their
//! contract written down; the rest are safe.
//!
//! Functions marked *filtered* are also used after the seccomp filter is
//! installed and must only make the system calls it allows.

use std::io;
use std::os::fd::RawFd;

/// `MAP_FIXED_NOREPLACE` (Linux 4.17; not in every `libc` crate target).
pub const MAP_FIXED_NOREPLACE: libc::c_int = 0x10_0000;
/// `AT_HWCAP2` auxiliary vector key.
const AT_HWCAP2: libc::c_ulong = 26;
/// `HWCAP2_FSGSBASE`: the kernel allows `rdfsbase`/`wrfsbase` in user mode.
const HWCAP2_FSGSBASE: libc::c_ulong = 1 << 1;

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Whether user-mode `rdfsbase`/`wrfsbase` are enabled.
pub fn has_fsgsbase() -> bool {
    // SAFETY: getauxval only reads the process's auxiliary vector.
    unsafe { libc::getauxval(AT_HWCAP2) & HWCAP2_FSGSBASE != 0 }
}

/// `kill(pid, sig)`. Callers name `pid` only while it is a child of this
/// process not yet reaped (so the number cannot have been reused).
pub fn kill(pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill(2) takes no pointers; which process it reaches is the
    // caller's contract above.
    check(unsafe { libc::kill(pid, sig) })
}

/// `waitpid(pid, 0)`, retried on `EINTR`; returns the raw wait status.
pub fn waitpid(pid: libc::pid_t) -> io::Result<libc::c_int> {
    loop {
        if let Some(status) = waitpid_flags(pid, 0)? {
            return Ok(status);
        }
    }
}

/// `waitpid(pid, WNOHANG)`, retried on `EINTR`: the raw wait status, or
/// `None` while `pid` still runs.
pub fn try_waitpid(pid: libc::pid_t) -> io::Result<Option<libc::c_int>> {
    waitpid_flags(pid, libc::WNOHANG)
}

/// `waitpid(pid, flags)`, retried on `EINTR`: the raw status, or `None`
/// when the call returned 0 (`WNOHANG` and `pid` still runs).
fn waitpid_flags(pid: libc::pid_t, flags: libc::c_int) -> io::Result<Option<libc::c_int>> {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, flags) };
        if rc == pid {
            return Ok(Some(status));
        }
        if rc == 0 {
            return Ok(None);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Maps `len` bytes of private anonymous, lazily backed (`MAP_NORESERVE`)
/// memory at exactly `addr`, failing with `EEXIST` if anything is there.
///
/// # Safety
/// None beyond what `MAP_FIXED_NOREPLACE` guarantees (it never replaces a
/// mapping); unsafe because it creates memory Rust does not track.
pub unsafe fn mmap_fixed_noreplace(addr: u64, len: u64, prot: libc::c_int) -> io::Result<()> {
    // SAFETY: MAP_FIXED_NOREPLACE never clobbers an existing mapping.
    let p = unsafe {
        libc::mmap(
            addr as usize as *mut libc::c_void,
            len as usize,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    if p as usize as u64 != addr {
        // Kernels before 4.17 ignore the flag and pick another address.
        // SAFETY: `p` is the mapping just created, used by nobody.
        unsafe { libc::munmap(p, len as usize) };
        return Err(io::Error::from_raw_os_error(libc::EEXIST));
    }
    Ok(())
}

/// Maps `len` bytes of anonymous memory anywhere; `shared` makes it shared
/// with children forked later.
pub fn mmap_anon(len: usize, prot: libc::c_int, shared: bool) -> io::Result<*mut u8> {
    let kind = if shared { libc::MAP_SHARED } else { libc::MAP_PRIVATE };
    // SAFETY: a fresh mapping at an address the kernel chooses affects no
    // existing memory.
    let p = unsafe { libc::mmap(core::ptr::null_mut(), len, prot, kind | libc::MAP_ANONYMOUS, -1, 0) };
    if p == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(p.cast())
    }
}

/// `munmap(2)`.
///
/// # Safety
/// Nothing may use `[addr, addr + len)` afterwards.
pub unsafe fn munmap(addr: *mut u8, len: usize) {
    // SAFETY: the caller guarantees the range is no longer used.
    unsafe { libc::munmap(addr.cast(), len) };
}

/// Whether the page at `addr` is mapped (`mincore(2)` answers `ENOMEM`
/// for an unmapped page; it reads no memory).
fn page_mapped(addr: u64) -> bool {
    let mut vec = [0u8; 1];
    // SAFETY: mincore writes one byte per page of the range: one page
    // here, and `vec` holds one byte.
    unsafe { libc::mincore(addr as usize as *mut libc::c_void, PAGE as usize, vec.as_mut_ptr()) == 0 }
}

const PAGE: u64 = shoal_abi::PAGE_SIZE;

/// Most pages [`initial_stack`] looks down from the stack pointer for the
/// stack mapping's low end (8 MiB, the usual `RLIMIT_STACK`).
const INITIAL_STACK_MAX_PAGES: u64 = 2048;

/// `[lo, hi)`: the mapping the kernel made at `exec` for this process's
/// initial stack (`[stack]` in its maps), found from the stack pointer
/// `sp` (which must lie in it). Its top is the page end of the file name
/// the kernel copied last (`AT_EXECFN`: the name and one null pointer end
/// the mapping), checked mapped page by page from `sp` up; its bottom is
/// the first unmapped page below `sp` (the kernel keeps a guard gap below
/// a stack, so nothing lies right under it). `None` if the shape is not
/// that (no `AT_EXECFN` above `sp`, a hole between, more than 8 MiB below
/// `sp`): then nothing is released.
pub fn initial_stack(sp: u64) -> Option<(u64, u64)> {
    // SAFETY: getauxval only reads the auxiliary vector.
    let name = unsafe { libc::getauxval(libc::AT_EXECFN) } as u64;
    if name <= sp {
        return None;
    }
    // SAFETY: AT_EXECFN points at the NUL-terminated name on the stack.
    let len = unsafe { libc::strlen(name as usize as *const libc::c_char) } as u64;
    let hi = name.checked_add(len + 1)?.checked_next_multiple_of(PAGE)?;
    let sp_page = sp & !(PAGE - 1);
    let mut p = sp_page;
    while p < hi {
        if !page_mapped(p) {
            return None;
        }
        p += PAGE;
    }
    let mut lo = sp_page;
    for _ in 0..INITIAL_STACK_MAX_PAGES {
        let below = lo.checked_sub(PAGE)?;
        if !page_mapped(below) {
            return Some((lo, hi));
        }
        lo = below;
    }
    None
}

/// The current stack pointer.
#[inline(always)]
pub fn stack_pointer() -> u64 {
    let sp: u64;
    // SAFETY: reads rsp only.
    unsafe { core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags)) };
    sp
}

/// Calls `f(arg)` on a stack whose top is `top` (rounded down to 16
/// bytes); `f` never returns. The caller's frames stay where they are, so
/// `f` must copy what it needs from `arg` before that memory goes.
///
/// # Safety
/// The memory below `top` that `f` runs on must be writable and used by
/// nothing else while `f` runs.
pub unsafe fn run_on_stack(top: u64, f: extern "C" fn(*mut u8) -> !, arg: *mut u8) -> ! {
    // SAFETY: the caller vouches for the new stack; `f` does not return,
    // so the old frames are never resumed.
    unsafe {
        core::arch::asm!(
            "mov rsp, {top}",
            "xor ebp, ebp",
            "call {f}",
            "ud2",
            top = in(reg) top & !15,
            f = in(reg) f,
            in("rdi") arg,
            options(noreturn)
        )
    }
}

/// `mprotect(2)`.
///
/// # Safety
/// Rust code must not rely on accesses to the range that `prot` forbids.
pub unsafe fn mprotect(addr: u64, len: u64, prot: libc::c_int) -> io::Result<()> {
    // SAFETY: the caller vouches for the range.
    check(unsafe { libc::mprotect(addr as usize as *mut libc::c_void, len as usize, prot) })
}

/// `CLOCK_MONOTONIC` in nanoseconds (one clock for every process of the
/// host, so the front end's and the instance's start steps line up).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only the timespec given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// Start of the steps [`start_step`] times (`CLOCK_MONOTONIC` ns; 0: off).
static START_T0: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Turns the start-step timing on, counting from `t0_ns` (see
/// [`crate::START_TIMING_ENV`]); 0 leaves it off.
pub fn start_timing(t0_ns: u64) {
    START_T0.store(t0_ns, std::sync::atomic::Ordering::Relaxed);
}

/// With start-step timing on, prints `shoal: start: MS ms WHAT` on
/// stderr (milliseconds since the front end began). Allocates nothing;
/// not for use under the filter (`clock_gettime` may be a system call
/// when the host's clock source has no vDSO path).
pub fn start_step(what: &str) {
    let t0 = START_T0.load(std::sync::atomic::Ordering::Relaxed);
    if t0 != 0 {
        let us = monotonic_ns().saturating_sub(t0) / 1000;
        crate::hypercall::say(format_args!("start: {}.{:03} ms {what}", us / 1000, us % 1000));
    }
}

/// Tunes glibc's malloc for an instance process, which allocates a little
/// while it boots and then, once the guest runs, never again: every
/// allocation of a page or more gets its own mapping (`M_MMAP_THRESHOLD`),
/// given back whole when freed, so the short-lived buffers of booting (the
/// image's headers, the filter's rule tables, `/proc/self/maps` read by the
/// runtime) leave no partly used pages behind the small objects that stay
/// alive; the heap grows by what is asked only (`M_TOP_PAD` 0) and
/// [`trim_heap`] returns every free page at its top.
/// A no-op with musl (the instance program built for
/// `x86_64-unknown-linux-musl`), whose allocator gives freed pages back by
/// itself and has no such parameters.
pub fn lean_malloc() {
    // SAFETY: mallopt only changes allocator parameters; called first
    // thing, single-threaded.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4096);
        libc::mallopt(libc::M_TOP_PAD, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 4096);
    }
}

/// Returns the free memory of the heap to the kernel (`malloc_trim`): the
/// waiting parent keeps little, and what it (or an instance before it
/// enters the guest) freed should not stay resident.
pub fn trim_heap() {
    // SAFETY: malloc_trim only releases free heap memory; both callers are
    // single-threaded.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Writes all of `bytes` to `fd`, retrying short writes and `EINTR`.
/// *Filtered* (for fds 1 and 2): uses only `write`.
pub fn write_all(fd: RawFd, mut bytes: &[u8]) -> Result<(), i32> {
    while !bytes.is_empty() {
        match write(fd, bytes) {
            Ok(0) => return Err(libc::EIO),
            Ok(n) => bytes = bytes.get(n..).unwrap_or_default(),
            Err(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One `write(2)`; returns bytes written or the errno. *Filtered*.
pub fn write(fd: RawFd, bytes: &[u8]) -> Result<usize, i32> {
    // SAFETY: `bytes` is readable for its length.
    unsafe { write_raw(fd, bytes.as_ptr(), bytes.len()) }
}

/// Writes bytes from a raw host range to `fd` (the console hypercall's
/// buffer after its range was checked); returns bytes written or the
/// errno. *Filtered*.
///
/// # Safety
/// `[ptr, ptr + len)` must be mapped readable.
pub unsafe fn write_raw(fd: RawFd, ptr: *const u8, len: usize) -> Result<usize, i32> {
    // SAFETY: the caller guarantees the range is readable; the kernel
    // checks it again anyway.
    let rc = unsafe { libc::syscall(libc::SYS_write, fd, ptr, len) };
    if rc < 0 {
        Err(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
    } else {
        Ok(rc as usize)
    }
}

/// `exit_group(status)`. *Filtered*.
pub fn exit(status: i32) -> ! {
    // SAFETY: _exit runs no handlers and only makes exit_group.
    unsafe { libc::_exit(status) }
}

/// Sleeps `ns` nanoseconds on CLOCK_MONOTONIC, relative, flags 0, no
/// remainder. Returns early on a signal. *Filtered*: exactly the
/// `clock_nanosleep` call the filter allows.
pub fn sleep_ns(ns: u64) {
    let ts = libc::timespec { tv_sec: (ns / 1_000_000_000).min(i64::MAX as u64) as _, tv_nsec: (ns % 1_000_000_000) as libc::c_long };
    // SAFETY: `ts` is a valid timespec; no remainder pointer.
    unsafe { libc::syscall(libc::SYS_clock_nanosleep, libc::CLOCK_MONOTONIC, 0, &ts, core::ptr::null_mut::<libc::timespec>()) };
}

/// Sets every catchable signal's disposition to the default and unblocks
/// all signals (the child must not run handlers inherited from its parent).
pub fn reset_signals() {
    for sig in 1..32 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: SIG_DFL installs no code.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    // SAFETY: an empty, initialised set.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, core::ptr::null_mut());
    }
}

/// Installs `handler` for `sig` with `SA_SIGINFO | SA_ONSTACK`; every
/// signal is blocked while it runs.
///
/// # Safety
/// `handler` must be async-signal-safe and must not rely on the thread
/// pointer (FS base): it may run while the guest's is loaded.
pub unsafe fn set_handler(sig: libc::c_int, handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)) -> io::Result<()> {
    // SAFETY: a zeroed sigaction is valid; the handler contract is the
    // caller's.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigfillset(&mut sa.sa_mask);
        check(libc::sigaction(sig, &sa, core::ptr::null_mut()))
    }
}

/// Turns on syscall user dispatch for this thread: a `syscall`
/// instruction outside `[allowed, allowed + len)` raises SIGSYS
/// (`si_code` [`SYS_USER_DISPATCH`]) instead of running. No selector
/// byte: always on.
pub fn syscall_user_dispatch(allowed: u64, len: u64) -> io::Result<()> {
    // SAFETY: no pointer is passed (the selector is NULL); the call only
    // changes how this thread's later system calls are dispatched.
    check(unsafe { libc::prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, allowed as libc::c_ulong, len as libc::c_ulong, 0 as libc::c_ulong) })
}

/// `prctl`'s option for syscall user dispatch and its mode "on".
pub const PR_SET_SYSCALL_USER_DISPATCH: libc::c_int = 59;
/// See [`PR_SET_SYSCALL_USER_DISPATCH`].
pub const PR_SYS_DISPATCH_ON: libc::c_ulong = 1;

/// `si_code` of a SIGSYS raised by syscall user dispatch.
pub const SYS_USER_DISPATCH: i32 = 2;

/// Makes `[base, base + len)` the alternate signal stack.
///
/// # Safety
/// The range must be mapped writable for as long as signals may arrive and
/// be used by nothing else.
pub unsafe fn sigaltstack(base: *mut u8, len: usize) -> io::Result<()> {
    let ss = libc::stack_t { ss_sp: base.cast(), ss_flags: 0, ss_size: len };
    // SAFETY: the caller vouches for the range.
    check(unsafe { libc::sigaltstack(&ss, core::ptr::null_mut()) })
}

/// Forbids core dumps (a crashing guest must not leave a core file of the
/// whole guest memory behind).
pub fn no_core_dumps() -> io::Result<()> {
    let r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `r` is a valid rlimit.
    check(unsafe { libc::setrlimit(libc::RLIMIT_CORE, &r) })
}

/// Asks for SIGKILL when the parent dies, so an orphaned guest never runs
/// on alone.
pub fn die_with_parent() -> io::Result<()> {
    // SAFETY: plain prctl.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })
}

/// `getppid(2)`.
pub fn getppid() -> libc::pid_t {
    // SAFETY: cannot fail.
    unsafe { libc::getppid() }
}

/// `getpid(2)`.
pub fn getpid() -> libc::pid_t {
    // SAFETY: cannot fail.
    unsafe { libc::getpid() }
}

/// A system call made with the `syscall` instruction itself, not through
/// libc: returns the result or the negative errno, and touches no
/// thread-local storage (glibc's wrappers store `errno` through the thread
/// pointer). For code that runs with the guest's FS base loaded: the
/// `Net` and `NetPoll` handlers (`crate::hypercall::fast`), which the
/// guest calls without the FS base switch. *Filtered* like any other call.
///
/// # Safety
/// As for the system call `nr` with these arguments: pointers among them
/// must be valid for what that call reads and writes.
#[inline(always)]
pub unsafe fn raw_syscall(nr: libc::c_long, a: [u64; 6]) -> i64 {
    let rc: i64;
    // SAFETY: the caller vouches for the arguments; the instruction
    // clobbers rcx and r11 and the kernel preserves the other registers.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr => rc,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack)
        )
    };
    rc
}

/// Reads the FS base (the thread pointer).
pub fn rdfsbase() -> u64 {
    let v: u64;
    // SAFETY: allowed in user mode when `has_fsgsbase()`, which `run`
    // checks before forking; reads a register only.
    unsafe { core::arch::asm!("rdfsbase {}", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// `madvise(MADV_MERGEABLE)`: lets KSM merge identical pages of the range.
///
/// # Safety
/// The range must be a private anonymous mapping (advice only; contents
/// are unchanged).
pub unsafe fn madvise_mergeable(addr: u64, len: u64) -> io::Result<()> {
    // SAFETY: the caller vouches for the range; MADV_MERGEABLE never changes
    // what the memory holds.
    check(unsafe { libc::madvise(addr as usize as *mut libc::c_void, len as usize, libc::MADV_MERGEABLE) })
}

/// `madvise(MADV_DONTNEED)`: the `Release` hypercall (`crate::protect::
/// release`). The host frees the private anonymous pages of the range;
/// they read as zero when touched again.
///
/// # Safety
/// The range must be guest memory whose contents nobody needs (the guest
/// kernel freed it or the program discarded it); no Rust code may hold a
/// reference into it.
pub unsafe fn madvise_dontneed(addr: u64, len: u64) -> io::Result<()> {
    // SAFETY: the caller vouches that the contents may be dropped.
    check(unsafe { libc::madvise(addr as usize as *mut libc::c_void, len as usize, libc::MADV_DONTNEED) })
}

/// `mmap(dst, len, prot, MAP_SHARED | MAP_FIXED, fd, off)`: guest pages
/// `[dst, dst + len)` show the alias file from `off` (`crate::protect`).
///
/// # Safety
/// `[dst, dst + len)` must be guest memory no Rust code references.
pub unsafe fn mmap_alias(dst: u64, len: u64, prot: libc::c_int, fd: i32, off: u64) -> io::Result<()> {
    // SAFETY: the caller's promise, passed on.
    unsafe { mmap_fixed_fd(dst, len, prot, libc::MAP_SHARED, fd, off) }
}

/// `mmap(dst, len, prot, MAP_PRIVATE | MAP_FIXED, fd, off)`: guest pages
/// `[dst, dst + len)` show file `fd` from `off`, copied on a write
/// (`crate::protect::FileMapper`).
///
/// # Safety
/// `[dst, dst + len)` must be guest memory that no Rust code references.
pub unsafe fn mmap_file(dst: u64, len: u64, prot: libc::c_int, fd: i32, off: u64) -> io::Result<()> {
    // SAFETY: the caller's promise, passed on.
    unsafe { mmap_fixed_fd(dst, len, prot, libc::MAP_PRIVATE, fd, off) }
}

/// `mmap(dst, len, prot, sharing | MAP_FIXED, fd, off)`, the one wrapper
/// of the file mappings above.
///
/// # Safety
/// `[dst, dst + len)` must be guest memory that no Rust code references.
unsafe fn mmap_fixed_fd(dst: u64, len: u64, prot: libc::c_int, sharing: libc::c_int, fd: i32, off: u64) -> io::Result<()> {
    // SAFETY: MAP_FIXED replaces only [dst, dst + len), which the caller
    // vouches for.
    let p = unsafe {
        libc::mmap(core::ptr::with_exposed_provenance_mut::<libc::c_void>(dst as usize), len as usize, prot, sharing | libc::MAP_FIXED, fd, off as libc::off_t)
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `mmap(dst, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED |
/// MAP_NORESERVE, -1, 0)`: guest pages `[dst, dst + len)` become fresh
/// private memory again (`crate::protect`).
///
/// # Safety
/// `[dst, dst + len)` must be guest memory no Rust code references.
pub unsafe fn mmap_own(dst: u64, len: u64, prot: libc::c_int) -> io::Result<()> {
    // SAFETY: MAP_FIXED replaces only [dst, dst + len), which the caller
    // vouches for.
    let p = unsafe {
        libc::mmap(
            core::ptr::with_exposed_provenance_mut::<libc::c_void>(dst as usize),
            len as usize,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `memfd_create(name, MFD_CLOEXEC)`: an anonymous file, for what the
/// front hands to the instance process across `exec` (the boot spec, the
/// packed archive, the report page).
pub fn memfd(name: &core::ffi::CStr) -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: `name` is a valid C string; the result is a new descriptor.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// `socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC)`: the bind channel
/// of `--net-bind-any` (`crate::net`), message boundaries kept.
pub fn seqpacket_pair() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and are owned by nobody else.
    Ok(unsafe {
        (<std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[0]), <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[1]))
    })
}

/// The seals of the archive's memfd: no write, no resize, no further
/// change of seals. A file with all of them never changes again, so a
/// private mapping of it cannot change under the guest.
pub const ARCHIVE_SEALS: libc::c_int = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;

/// `memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING)`: a memory file
/// that may be sealed ([`add_seals`]).
pub fn memfd_sealable(name: &core::ffi::CStr) -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: `name` is a valid C string; the result is a new descriptor.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// `fcntl(fd, F_ADD_SEALS, seals)`.
pub fn add_seals(fd: RawFd, seals: libc::c_int) -> io::Result<()> {
    // SAFETY: F_ADD_SEALS only restricts what may be done with the file.
    if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `fcntl(fd, F_GET_SEALS)`.
pub fn seals(fd: RawFd) -> io::Result<libc::c_int> {
    // SAFETY: F_GET_SEALS only reads the file's seals.
    let s = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    if s < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(s)
}

/// `mmap(addr, len, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0)`: the file
/// read-only and copy-on-write at `addr`, replacing what was there.
///
/// # Safety
/// `[addr, addr + len)` must be memory of this process that no Rust
/// reference points into (guest memory).
pub unsafe fn mmap_file_fixed(addr: u64, len: u64, fd: RawFd) -> Result<(), i32> {
    // SAFETY: the caller vouches for the range; MAP_FIXED replaces exactly it.
    let p = unsafe { libc::mmap(addr as usize as *mut libc::c_void, len as usize, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_FIXED, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    Ok(())
}

/// `mmap(addr, len, prot, MAP_PRIVATE | MAP_FIXED, fd, offset)`: `len`
/// bytes of the file from `offset`, copy-on-write at `addr`, replacing
/// what was there.
///
/// # Safety
/// `[addr, addr + len)` must be memory of this process that no Rust
/// reference points into (guest memory).
pub unsafe fn mmap_file_at(addr: u64, len: u64, prot: libc::c_int, fd: RawFd, offset: u64) -> Result<(), i32> {
    let off = libc::off_t::try_from(offset).map_err(|_| libc::EINVAL)?;
    // SAFETY: the caller vouches for the range; MAP_FIXED replaces exactly it.
    let p = unsafe { libc::mmap(addr as usize as *mut libc::c_void, len as usize, prot, libc::MAP_PRIVATE | libc::MAP_FIXED, fd, off) };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    Ok(())
}

/// Whether the file system of `fd` is mounted `noexec` (`fstatvfs`): its
/// files cannot be mapped executable.
pub fn on_noexec_mount(fd: RawFd) -> io::Result<bool> {
    // SAFETY: an all-zero statvfs is a valid value to be overwritten.
    let mut st: libc::statvfs = unsafe { core::mem::zeroed() };
    // SAFETY: fstatvfs writes only `st`.
    check(unsafe { libc::fstatvfs(fd, &mut st) })?;
    Ok(st.f_flag & libc::ST_NOEXEC != 0)
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, min)`: a close-on-exec copy of `fd` at the
/// lowest number at or above `min`.
pub fn dup_at_least(fd: RawFd, min: RawFd) -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC only adds a descriptor.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` was just created and is owned by nobody else.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(new) })
}

/// `dup3(from, to, flags)`; async-signal-safe.
pub fn dup3(from: RawFd, to: RawFd, flags: libc::c_int) -> Result<(), i32> {
    // SAFETY: dup3 only changes the descriptor table.
    let rc = unsafe { libc::dup3(from, to, flags) };
    if rc < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// `MOUNT_ATTR_RDONLY` (`mount_setattr(2)`).
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// `MOUNT_ATTR_NOSUID`.
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
/// `MOUNT_ATTR_NODEV`.
pub const MOUNT_ATTR_NODEV: u64 = 0x4;

/// `open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)`:
/// a detached copy of the mount of the directory `fd` names, rooted there.
pub fn open_tree_clone(fd: RawFd) -> Result<RawFd, i32> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_EMPTY_PATH as libc::c_uint;
    // SAFETY: an empty NUL-terminated path; the result is a new descriptor.
    let rc = unsafe { libc::syscall(libc::SYS_open_tree, fd, c"".as_ptr(), flags) };
    if rc < 0 {
        Err(errno())
    } else {
        Ok(rc as RawFd)
    }
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH, {attr_set: set})`.
pub fn mount_setattr(fd: RawFd, set: u64) -> Result<(), i32> {
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    let attr = MountAttr { attr_set: set, attr_clr: 0, propagation: 0, userns_fd: 0 };
    // SAFETY: an empty NUL-terminated path and a valid mount_attr of the
    // size passed, which the kernel only reads.
    let rc =
        unsafe { libc::syscall(libc::SYS_mount_setattr, fd, c"".as_ptr(), libc::AT_EMPTY_PATH, &attr as *const MountAttr, core::mem::size_of::<MountAttr>()) };
    if rc < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Closes `fd` (errors ignored: nothing to do about them).
pub fn close(fd: RawFd) {
    // SAFETY: closes a descriptor the caller owns and no longer uses.
    unsafe { libc::close(fd) };
}

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// `close_range(first, last, 0)`: closes every descriptor from `first`
/// to `last`; async-signal-safe.
pub fn close_range(first: u32, last: u32) -> Result<(), i32> {
    // SAFETY: closes descriptors only; the caller no longer uses them.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) };
    if rc < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// `close_range(first, u32::MAX, 0)`: closes every descriptor from
/// `first` up; async-signal-safe.
pub fn close_from(first: u32) -> Result<(), i32> {
    close_range(first, u32::MAX)
}

/// Stack of the child of [`spawn_with`] until its `exec`: what
/// `Handover::exec_child` needs (a message buffer and formatting), with
/// room to spare.
const SPAWN_STACK: usize = 64 << 10;

/// Starts a child process that runs `child` (which must `exec` or `_exit`;
/// if it returns, the child exits with [`crate::EXIT_TENDER_FAILED`])
/// in this process's memory, as `posix_spawn` does:
/// `clone(CLONE_VM | CLONE_VFORK | flags | SIGCHLD)` on a stack of its own,
/// with this thread suspended until the child has called `exec` or
/// exited. Unlike `fork`, nothing of this process's address space is
/// copied, and neither process takes copy-on-write faults afterwards
/// (about a dozen here, at 3-5 µs each on a nested host). `flags` may add
/// namespaces (`CLONE_NEWPID` makes the child the first process of a new
/// PID namespace). Every signal is blocked in this thread around the
/// `clone`, so no handler of this process can run in the child before the
/// child resets them (`reset_signals`).
///
/// # Safety
/// `child` runs in this process's memory while this thread is suspended:
/// it may only make async-signal-safe system calls on its own stack and
/// locals (no allocation, no locks, no change to memory this process uses
/// afterwards), must reset signal dispositions before unblocking signals,
/// and must end in `exec` or `_exit`.
pub unsafe fn spawn_with(flags: libc::c_int, child: &dyn Fn()) -> io::Result<libc::pid_t> {
    extern "C" fn trampoline(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `&&dyn Fn` below, alive while this thread
        // is suspended by CLONE_VFORK, which is the child's whole life
        // before exec.
        let child = unsafe { &*arg.cast::<&dyn Fn()>() };
        child();
        // Not reached: `child` execs or exits; should it return, the
        // child must still never run on into the parent's code.
        exit(crate::EXIT_TENDER_FAILED)
    }
    let mut stack: Vec<u8> = Vec::with_capacity(SPAWN_STACK);
    // The stack grows down from its 16-byte aligned top.
    let top = (stack.as_mut_ptr().wrapping_add(SPAWN_STACK) as usize & !15) as *mut libc::c_void;
    let mut arg: &dyn Fn() = child;
    // SAFETY: a sigset_t is plain data; all zero is a valid (empty) set.
    let mut all: libc::sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: sigset operations on initialised sets; the old mask is
    // restored below whatever clone returns.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // SAFETY: `top` is the top of `stack`, a live allocation of
    // SPAWN_STACK bytes that outlives the child's use of it (CLONE_VFORK
    // keeps this thread, and so `stack` and `arg`, waiting until the child
    // has exec'd or exited); the caller upholds the contract on `child`.
    let pid = unsafe { libc::clone(trampoline, top, libc::CLONE_VM | libc::CLONE_VFORK | flags | libc::SIGCHLD, (&mut arg as *mut &dyn Fn()).cast()) };
    let err = io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut()) };
    drop(stack);
    if pid < 0 {
        Err(err)
    } else {
        Ok(pid)
    }
}

/// `execveat(fd, "", argv, envp, AT_EMPTY_PATH)`: runs the program open
/// at `fd`. Returns only on failure, with the errno; async-signal-safe.
///
/// # Safety
/// `argv` and `envp` must be null-terminated arrays of pointers to valid C
/// strings.
pub unsafe fn execveat(fd: RawFd, argv: *const *const libc::c_char, envp: *const *const libc::c_char) -> i32 {
    // SAFETY: the caller vouches for the arrays; an empty path with
    // AT_EMPTY_PATH executes `fd` itself.
    unsafe {
        libc::syscall(libc::SYS_execveat, fd, c"".as_ptr(), argv, envp, libc::AT_EMPTY_PATH);
    }
    errno()
}

/// `unshare(2)`.
pub fn unshare(flags: libc::c_int) -> Result<(), i32> {
    // SAFETY: unshare changes only this process's namespaces.
    if unsafe { libc::unshare(flags) } < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// `geteuid(2)`.
pub fn geteuid() -> libc::uid_t {
    // SAFETY: cannot fail.
    unsafe { libc::geteuid() }
}

/// Maps the first `len` bytes of file `fd` read-write and shared (the
/// report page, a memfd shared by the instance and its waiting parent).
pub fn mmap_shared_fd(fd: &std::os::fd::OwnedFd, len: usize) -> io::Result<*mut u8> {
    use std::os::fd::AsRawFd;
    // SAFETY: a fresh mapping at an address the kernel chooses affects no
    // existing memory.
    let p = unsafe { libc::mmap(core::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
    if p == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(p.cast())
    }
}

/// `setns(fd, nstype)`; async-signal-safe.
pub fn setns(fd: RawFd, nstype: libc::c_int) -> Result<(), i32> {
    // SAFETY: setns changes only this process's namespaces.
    if unsafe { libc::setns(fd, nstype) } < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// The soft `RLIMIT_FSIZE`, `None` when unlimited (or unknown).
pub fn file_size_limit() -> Option<u64> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct we pass.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// Raises the soft limit on open descriptors to the hard limit.
pub fn raise_nofile() {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `r` is a valid rlimit for both calls.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// `pidfd_open(getpid(), 0)`: a descriptor that becomes readable when this
/// process ends, valid in any PID namespace.
pub fn pidfd_self() -> io::Result<std::os::fd::OwnedFd> {
    pidfd_open(getpid())
}

/// `pidfd_open(pid, 0)` (Linux 5.3): a descriptor that becomes readable
/// when process `pid` ends.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: pidfd_open takes no pointers; the result is a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as RawFd) })
}

/// Whether the process of pidfd `fd` has ended (the pidfd is readable).
pub fn pidfd_ended(fd: RawFd) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, no waiting.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawned_child_runs_in_its_own_process_and_its_status_comes_back() {
        // The child reads the parent's memory (it shares it until exec)
        // and leaves it through _exit with a status taken from it.
        let status_for_child = 7;
        // SAFETY: the child only reads a local and calls _exit.
        let pid = unsafe { spawn_with(0, &|| exit(status_for_child)) }.unwrap();
        assert!(pid > 0 && pid != getpid());
        let status = waitpid(pid).unwrap();
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7);
        // Signals are unblocked again in the parent after the spawn.
        // SAFETY: a valid out-pointer for the current mask.
        let mut mask: libc::sigset_t = unsafe { core::mem::zeroed() };
        // SAFETY: as above; no change to the mask (how = SIG_BLOCK, set = null).
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, core::ptr::null(), &mut mask) };
        // SAFETY: an initialised set.
        assert_eq!(unsafe { libc::sigismember(&mask, libc::SIGTERM) }, 0);
    }

    #[test]
    fn a_spawned_child_that_returns_exits_with_the_tender_failure_status() {
        // SAFETY: the child does nothing; spawn_with's trampoline exits.
        let pid = unsafe { spawn_with(0, &|| {}) }.unwrap();
        let status = waitpid(pid).unwrap();
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == crate::EXIT_TENDER_FAILED);
    }
}
