//! Templates: an instance booted once, stopped at its ready point, and
//! copied (`fork`, copy-on-write) for every cold start (docs/serve.md
//! "Templates", docs/architecture.md threat model).
//!
//! **The ready point** is the program's first wait for a connection with
//! nothing pending: it tried to `accept` on a handed-over listening socket
//! (the host said `EAGAIN`), or listened on one (an event loop such as
//! Node's waits in epoll and accepts only once a connection is there), and
//! then asks to sleep (`NetPoll` with a deadline). Or, for a function
//! deployed with `"ready": "explicit"` (`shoal_abi::ReadyPoint::Explicit`),
//! the program's first write to `/dev/shoal/ready` (the `Ready`
//! hypercall), wherever it is: its waits for connections are then not
//! ready points, and a copy goes on from that write (other guest threads
//! as they were; the preemption tick paused in the template and set again
//! in each copy at the template's period).
//! There the template tells its parent over the control channel
//! ([`CONTROL_FD`]) that it is ready, and from then on only makes copies:
//! the guest never runs again in the template, so the template never
//! serves a request.
//!
//! **A copy** is `clone(CLONE_PARENT)`: a child of the parent (the
//! gateway), not of the template, which reaps and kills it as any other
//! instance. It inherits the confinement (seccomp filter, Landlock
//! domain, namespaces, credentials, no capabilities) and the guest's
//! memory copy-on-write. What must be its own is made fresh before its
//! guest runs on, from descriptors the parent sends with the request:
//!
//! | what | how |
//! |---|---|
//! | listening sockets | the parent's new sockets put at 3.. (`dup3`): the template's are never used again |
//! | stdout, stderr | the parent's new pipes (`dup3` to 1 and 2): the copy's logs are its own |
//! | the watch set (host epoll) | a new epoll from the parent at the pinned number, the listening sockets registered (an inherited epoll would be the template's and every sibling's) |
//! | the alias file (`MAP_SHARED` memory) | a new empty memory file from the parent at the pinned number; a template whose program made a shared mapping before its ready point is refused (the mapping would be shared with every copy) |
//! | other descriptors | a template holding any guest socket but its listening ones at the ready point is refused |
//! | the kernel's random stream | a fresh seed from the parent written into the boot-info page, which the kernel's `getrandom` checks on every call and reseeds from |
//! | parent-death signal | set again (fork clears it) |
//! | syscall user dispatch (an executable's instance) | turned on again with the template's range (fork clears it: a `syscall` instruction the rewriting left would reach the host's filter and kill the copy instead of going to the guest kernel) |
//! | timers | the preemption tick (`ITIMER_REAL`) is not inherited by a fork: set again at the template's period if it ran (other threads runnable at an explicit ready point); the guest's own timers are guest memory and go on from the template's state (at the listening ready point none is due: every thread waits; at an explicit one, a timer due meanwhile fires at the copy's first wait) |
//! | the report page, the parent's pidfd | none: a gateway's instances have no report page, and the parent's pidfd is closed before the guest's first instruction |
//!
//! Not made fresh: what the program itself drew from `AT_RANDOM` or
//! `getrandom` before its ready point (musl's stack-protector canary and
//! pointer guard; a seed it keeps) is the same in every copy — a leak of
//! one copy's canary is every copy's; programs that must differ per
//! instance draw after their first request. The monotonic and real-time
//! clocks are host time (TSC) and need no change.
//!
//! **The bound on the template's extra rights.** To fork, to place the
//! new descriptors and to stack the second filter, the template's filter
//! allows more than an instance's (`crate::filter::template_program`):
//!
//! | system call | arguments allowed | why |
//! |---|---|---|
//! | `clone` (56) | flags == `CLONE_PARENT` | the copy |
//! | `recvmsg` (47) | fd == [`CONTROL_FD`] | the copy request and its descriptors |
//! | `dup3` (292) | new fd 1, 2, a listening socket's, the alias file's or the watch set's | placing the copy's own descriptors |
//! | `seccomp` (317) | `SECCOMP_SET_MODE_FILTER`, no flags | the copy's second filter |
//! | `prctl` (157) | `PR_SET_PDEATHSIG`, `SIGKILL`; an executable's instance also `PR_SET_SYSCALL_USER_DISPATCH` on, with exactly its range and no selector | the copy dies with the gateway; its `syscall` instructions go to the guest kernel again |
//! | `mprotect` (10) | the boot-info page, `PROT_READ` or `PROT_READ \| PROT_WRITE` | the copy's random seed |
//!
//! Each copy stacks [`crate::filter::copy_program`] before its guest runs
//! on, which traps all of these (and `fork`, `vfork`, `clone3`, `dup2`):
//! a copy that tries to make a process dies with SIGSYS (status 159).
//!
//! The template's own guest shares the process, so whatever the tender may
//! do at the ready point the guest could do before it: no filter can tell
//! the tender's `clone` from the guest's (the guest can jump to the
//! tender's `syscall` instruction with registers of its choosing, so an
//! instruction-pointer check proves nothing, and a filter cannot be
//! loosened at the ready point: filters only stack). What bounds it is a
//! count the kernel keeps outside the process, which only the parent can
//! change: a template (started as root) is made inside a pids cgroup of
//! its own (cgroup v1 `pids` hierarchy, beneath the parent's; the parent's
//! spawning thread enters it for the `clone` and leaves) whose `pids.max`
//! is 1 before its guest's first instruction, so any fork or thread of its
//! program before the ready point fails with `EAGAIN`: such children
//! cannot exist. When the template says it is ready the parent raises
//! `pids.max` ([`Template::allow_copies`]) to what it will make: the
//! template, `max_instances` copies and as many again not yet reaped. A
//! program that forges the ready word on the control channel (the filter
//! cannot stop that: the channel is a socket it may write) gets at most
//! that many processes, all confined as the template, children of the
//! parent in the template's cgroup; the gateway kills those it did not ask
//! for when the template ends or is replaced and when it stops
//! ([`Template::kill_strays`]). It reaches no other
//! function: the gateway treats every answer on the control channel as
//! hostile (a copy's pid must be the gateway's own child in the template's
//! user namespace).

use crate::net::FIRST_SOCKET_FD;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// The template's end of the control channel.
pub const CONTROL_FD: i32 = 63;
/// Most listening sockets a template copies.
pub const MAX_LISTENERS: usize = 4;
/// Descriptors a copy request carries besides the listening sockets:
/// stdout, stderr, the alias file, the watch set.
const FIXED_FDS: usize = 4;
const MAX_FDS: usize = FIXED_FDS + MAX_LISTENERS;
/// `CMSG_SPACE(MAX_FDS * 4)`.
const CONTROL_LEN: usize = 16 + (MAX_FDS * 4).next_multiple_of(8);

/// The template's word that it reached its ready point.
const READY: u64 = 0x5944_4145_5220_4c54; // "TL READY"

/// A copy request (the data part; the descriptors come as `SCM_RIGHTS`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Request {
    /// The copy's seed for the kernel's random stream.
    seed: [u8; 32],
    /// How many listening sockets follow the fixed descriptors.
    listeners: u32,
    _pad: u32,
}

/// The template's answer: the copy's pid, or a negative errno.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Reply {
    pid: i64,
}

static ON: AtomicBool = AtomicBool::new(false);
/// The ready point is the program's write to the ready device, not its
/// first wait for a connection.
static EXPLICIT: AtomicBool = AtomicBool::new(false);
static ACCEPT_WAITED: AtomicBool = AtomicBool::new(false);
static SHARED_ALIAS: AtomicBool = AtomicBool::new(false);
static LISTENERS: AtomicU32 = AtomicU32::new(0);
static ALIAS_FD: AtomicI32 = AtomicI32::new(-1);
static WATCH_FD: AtomicI32 = AtomicI32::new(-1);
/// An executable's instance: the end of guest memory, where the range
/// syscall user dispatch lets through starts (0: no dispatch).
static DISPATCH_FROM: AtomicU64 = AtomicU64::new(0);
/// The image's writable segments (`[start, end)`, page-aligned): the
/// kernel's data and bss, which the template maps in at its ready point
/// (`map_writable`).
static WRITABLE: [(AtomicU64, AtomicU64); 4] = [const { (AtomicU64::new(0), AtomicU64::new(0)) }; 4];
/// The copies' second filter: a leaked program (`install`).
static COPY_FILTER: AtomicUsize = AtomicUsize::new(0);
static COPY_FILTER_LEN: AtomicUsize = AtomicUsize::new(0);

/// Makes this instance a template (in the instance, before the guest):
/// its network descriptors and the copies' second filter, which is
/// compiled here because a copy cannot allocate.
pub(crate) fn install(net: crate::net::NetPolicy, copy_filter: seccompiler::BpfProgram, dispatch_from: Option<u64>, explicit: bool) {
    EXPLICIT.store(explicit, Ordering::Relaxed);
    LISTENERS.store(net.listeners, Ordering::Relaxed);
    DISPATCH_FROM.store(dispatch_from.unwrap_or(0), Ordering::Relaxed);
    ALIAS_FD.store(net.alias_fd(), Ordering::Relaxed);
    WATCH_FD.store(crate::net::watch_fd(&net), Ordering::Relaxed);
    let prog: &'static [seccompiler::sock_filter] = Box::leak(copy_filter.into_boxed_slice());
    COPY_FILTER.store(prog.as_ptr() as usize, Ordering::Relaxed);
    COPY_FILTER_LEN.store(prog.len(), Ordering::Relaxed);
    ON.store(true, Ordering::Relaxed);
}

/// A writable segment of the image, `[start, end)` page-aligned (the
/// tender's loader, before the guest runs); more than four are not noted.
pub(crate) fn note_writable(start: u64, end: u64) {
    if let Some((s, e)) = WRITABLE.iter().find(|(s, _)| s.load(Ordering::Relaxed) == 0) {
        s.store(start, Ordering::Relaxed);
        e.store(end, Ordering::Relaxed);
    }
}

/// Maps in every page of the image's writable segments that the template
/// never touched (a read maps the shared zero page), so that the fork
/// copies those entries and a copy that reads such a page (the kernel's
/// bss: the memory manager's tables, mostly zero) takes no fault for it:
/// 7 of a C no-op copy's 60 faults were such reads.
fn map_writable() {
    for (s, e) in &WRITABLE {
        let (start, end) = (s.load(Ordering::Relaxed), e.load(Ordering::Relaxed));
        for page in (start..end).step_by(shoal_abi::PAGE_SIZE as usize) {
            // SAFETY: the page is guest memory the loader mapped
            // read-write for the image's writable segment, below every
            // range the guest may protect or unmap (`crate::protect`); a
            // read changes nothing.
            unsafe { core::ptr::read_volatile(core::ptr::with_exposed_provenance::<u8>(page as usize)) };
        }
    }
}

/// An `accept` on a handed-over listening socket found nothing, or the
/// program listened on one (the `Net` handler).
pub(crate) fn note_accept_wait() {
    if ON.load(Ordering::Relaxed) {
        ACCEPT_WAITED.store(true, Ordering::Relaxed);
    }
}

/// The guest made a shared mapping of the alias file (`crate::protect`).
pub(crate) fn note_shared_alias() {
    SHARED_ALIAS.store(true, Ordering::Relaxed);
}

/// Whether a `NetPoll` that sleeps up to `timeout_ns` is the ready point.
pub(crate) fn at_ready_point(timeout_ns: u64) -> bool {
    timeout_ns != 0 && ON.load(Ordering::Relaxed) && ACCEPT_WAITED.load(Ordering::Relaxed) && !EXPLICIT.load(Ordering::Relaxed)
}

/// Whether the program's write to the ready device (the `Ready`
/// hypercall) is the ready point: in a template made for it, before its
/// copies (a copy's own write, or a second one, changes nothing).
pub(crate) fn at_explicit_ready_point() -> bool {
    ON.load(Ordering::Relaxed) && EXPLICIT.load(Ordering::Relaxed)
}

/// Why a template cannot serve.
#[derive(Debug, thiserror::Error)]
enum ReadyError {
    #[error("the program made a shared memory mapping before its ready point; a template cannot give each copy its own (deploy with \"template\": false)")]
    SharedMapping,
    #[error(
        "the program holds descriptor {0} (a socket of its own) at its ready point; a template cannot give each copy its own (deploy with \"template\": false)"
    )]
    OpenSocket(i32),
    #[error("cannot tell the parent that the template is ready: {0}")]
    Tell(crate::child::Errno),
}

/// The ready point (`crate::hypercall`, on the handlers' stack with the
/// tender's thread pointer): checks that the template can be copied,
/// tells the parent, then makes copies until the parent closes the
/// channel. Returns only in a copy, made its own, for the guest's wait
/// to go on (on the copy's own sockets).
pub(crate) fn serve() {
    if let Err(e) = check_copyable() {
        crate::hypercall::stop(crate::EXIT_TENDER_FAILED, format_args!("{e}"));
    }
    // The template's guest never runs again: no ticks while it waits for
    // requests (each copy sets its own again).
    crate::preempt::pause();
    map_writable();
    let ready = READY.to_ne_bytes();
    if let Err(e) = send(&ready) {
        crate::hypercall::stop(crate::EXIT_TENDER_FAILED, format_args!("{}", ReadyError::Tell(crate::child::Errno(e))));
    }
    loop {
        let (req, fds, n) = match receive() {
            Ok(Some(r)) => r,
            // The parent closed the channel: the function is gone.
            Ok(None) => crate::sys::exit(0),
            Err(_) => continue,
        };
        let nl = req.listeners as usize;
        if nl != LISTENERS.load(Ordering::Relaxed) as usize || n != FIXED_FDS + nl {
            close_all(&fds[..n]);
            let _ = send(&Reply { pid: -i64::from(libc::EINVAL) }.pid.to_ne_bytes());
            continue;
        }
        // SAFETY: a plain fork (no new stack, no shared memory): the child
        // continues here on a copy of this stack; the process has one
        // thread, so nothing is left half-locked in the copy.
        let pid = unsafe { crate::sys::raw_syscall(libc::SYS_clone, [libc::CLONE_PARENT as u64, 0, 0, 0, 0, 0]) };
        if pid == 0 {
            become_copy(&req, &fds[..n]);
            return;
        }
        close_all(&fds[..n]);
        let _ = send(&pid.to_ne_bytes());
    }
}

/// What the template must not hold at its ready point to be copied.
fn check_copyable() -> Result<(), ReadyError> {
    if SHARED_ALIAS.load(Ordering::Relaxed) {
        return Err(ReadyError::SharedMapping);
    }
    // Every descriptor from the watch set up to the control channel must
    // be closed (ppoll marks a closed one POLLNVAL).
    let first = WATCH_FD.load(Ordering::Relaxed) + 1;
    let mut p = [libc::pollfd { fd: -1, events: 0, revents: 0 }; CONTROL_FD as usize];
    let n = (CONTROL_FD - first).max(0) as usize;
    for (i, e) in p.iter_mut().enumerate().take(n) {
        e.fd = first + i as i32;
    }
    let ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `n` valid pollfds and a valid timespec; no signal mask.
    unsafe { crate::sys::raw_syscall(libc::SYS_ppoll, [p.as_mut_ptr() as u64, n as u64, &ts as *const libc::timespec as u64, 0, 8, 0]) };
    if let Some(e) = p.iter().take(n).find(|e| e.revents & libc::POLLNVAL == 0) {
        return Err(ReadyError::OpenSocket(e.fd));
    }
    Ok(())
}

fn send(bytes: &[u8]) -> Result<(), i32> {
    // SAFETY: `bytes` is valid for its length; no address.
    let rc =
        unsafe { crate::sys::raw_syscall(libc::SYS_sendto, [CONTROL_FD as u64, bytes.as_ptr() as u64, bytes.len() as u64, libc::MSG_NOSIGNAL as u64, 0, 0]) };
    if rc < 0 {
        Err(-rc as i32)
    } else {
        Ok(())
    }
}

fn close_all(fds: &[i32]) {
    for &fd in fds {
        // SAFETY: descriptors just received, used by nothing else.
        unsafe { crate::sys::raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]) };
    }
}

/// Room for the control message, aligned as a `cmsghdr`.
#[repr(C, align(8))]
struct Control([u8; CONTROL_LEN]);

/// One copy request: `None` when the parent closed the channel.
fn receive() -> Result<Option<(Request, [i32; MAX_FDS], usize)>, i32> {
    let mut req = Request::default();
    let mut ctl = Control([0; CONTROL_LEN]);
    let mut iov = libc::iovec { iov_base: (&mut req as *mut Request).cast(), iov_len: core::mem::size_of::<Request>() };
    // SAFETY: an all-zero msghdr is valid; the pointers are set below.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.0.as_mut_ptr().cast();
    msg.msg_controllen = CONTROL_LEN as _;
    // SAFETY: `msg` points at `req` and `ctl`, both live and of the sizes given.
    let got = unsafe {
        crate::sys::raw_syscall(libc::SYS_recvmsg, [CONTROL_FD as u64, &mut msg as *mut libc::msghdr as u64, libc::MSG_CMSG_CLOEXEC as u64, 0, 0, 0])
    };
    if got < 0 {
        return Err(-got as i32);
    }
    if got == 0 {
        return Ok(None);
    }
    let mut fds = [-1i32; MAX_FDS];
    let mut n = 0;
    if msg.msg_controllen as usize >= 16 {
        // SAFETY: the kernel wrote at least a cmsghdr.
        let hdr: libc::cmsghdr = unsafe { core::ptr::read(ctl.0.as_ptr().cast()) };
        if hdr.cmsg_level == libc::SOL_SOCKET && hdr.cmsg_type == libc::SCM_RIGHTS {
            n = ((hdr.cmsg_len as usize).saturating_sub(16) / 4).min(MAX_FDS);
            for (i, fd) in fds.iter_mut().enumerate().take(n) {
                let mut b = [0u8; 4];
                b.copy_from_slice(&ctl.0[16 + 4 * i..20 + 4 * i]);
                *fd = i32::from_ne_bytes(b);
            }
        }
    }
    if got as usize != core::mem::size_of::<Request>() || msg.msg_flags & libc::MSG_CTRUNC != 0 {
        close_all(&fds[..n]);
        return Err(libc::EINVAL);
    }
    Ok(Some((req, fds, n)))
}

/// In the copy, right after the fork: its own descriptors, parent-death
/// signal, random seed and second filter (module docs). A failure ends
/// the copy (status 125 and a message on its own stderr).
fn become_copy(req: &Request, fds: &[i32]) {
    ON.store(false, Ordering::Relaxed);
    let fail = |what: &str, e: i32| -> ! {
        crate::hypercall::stop(crate::EXIT_TENDER_FAILED, format_args!("cannot make the copy of the template its own ({what}): {}", crate::child::Errno(e)))
    };
    let (alias, watch) = (ALIAS_FD.load(Ordering::Relaxed), WATCH_FD.load(Ordering::Relaxed));
    let mut targets = [1, 2, alias, watch, 0, 0, 0, 0];
    for (i, t) in targets.iter_mut().enumerate().skip(FIXED_FDS).take(fds.len() - FIXED_FDS) {
        *t = FIRST_SOCKET_FD + (i - FIXED_FDS) as i32;
    }
    for (&from, &to) in fds.iter().zip(targets.iter()) {
        // Raw: musl's dup3 without flags makes a dup2, which the filter
        // does not allow.
        // SAFETY: dup3 only changes the descriptor table.
        let rc = unsafe { crate::sys::raw_syscall(libc::SYS_dup3, [from as u64, to as u64, 0, 0, 0, 0]) };
        if rc < 0 {
            fail("place its descriptors", -rc as i32);
        }
    }
    close_all(fds);
    close_all(&[CONTROL_FD]);
    for l in FIRST_SOCKET_FD..FIRST_SOCKET_FD + (fds.len() - FIXED_FDS) as i32 {
        if let Err(e) = crate::net::watch(watch, l) {
            fail("watch its listening socket", e);
        }
    }
    if let Err(e) = crate::sys::die_with_parent() {
        fail("die with the gateway", e.raw_os_error().unwrap_or(libc::EIO));
    }
    reseed(&req.seed).unwrap_or_else(|e| fail("give the kernel its random seed", e));
    crate::preempt::after_fork().unwrap_or_else(|e| fail("start its preemption tick", e));
    let from = DISPATCH_FROM.load(Ordering::Relaxed);
    if from != 0 {
        let (from, len) = crate::child::dispatch_range(from);
        if let Err(e) = crate::sys::syscall_user_dispatch(from, len) {
            fail("turn syscall user dispatch on again", e.raw_os_error().unwrap_or(libc::EIO));
        }
    }
    let prog = libc::sock_fprog {
        len: COPY_FILTER_LEN.load(Ordering::Relaxed) as u16,
        filter: core::ptr::with_exposed_provenance_mut::<libc::sock_filter>(COPY_FILTER.load(Ordering::Relaxed)),
    };
    // SAFETY: the leaked program `install` stored, valid for the process's life.
    let rc = unsafe { crate::sys::raw_syscall(libc::SYS_seccomp, [1, 0, &prog as *const libc::sock_fprog as u64, 0, 0, 0]) };
    if rc < 0 {
        fail("stack the second seccomp filter", -rc as i32);
    }
}

/// Writes `seed` over the boot information's random seed, which the
/// kernel's `getrandom` compares with the one it was seeded from on every
/// call (kernel/sysinfo).
fn reseed(seed: &[u8; 32]) -> Result<(), i32> {
    let page = shoal_abi::PAGE_SIZE;
    let at = shoal_abi::BOOT_INFO_ADDR + core::mem::offset_of!(shoal_abi::BootInfo, random_seed) as u64;
    // SAFETY: the boot-info page is guest memory the tender mapped and
    // protected read-only; no Rust reference points into it. Writable only
    // for the copy of the seed.
    unsafe {
        crate::sys::mprotect(shoal_abi::BOOT_INFO_ADDR, page, libc::PROT_READ | libc::PROT_WRITE).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        core::ptr::copy_nonoverlapping(seed.as_ptr(), core::ptr::with_exposed_provenance_mut::<u8>(at as usize), 32);
        crate::sys::mprotect(shoal_abi::BOOT_INFO_ADDR, page, libc::PROT_READ).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
    }
}

// ---------------------------------------------------------------------
// The parent's side.

/// Why a template could not be started or copied.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The template ended (or closed its channel) before its ready point.
    #[error("the template ended before its ready point (the program's first wait for a connection)")]
    Ended,
    /// No ready point within the time given.
    #[error("the template did not reach its ready point (the program's first wait for a connection) within {0} ms")]
    NotReady(u128),
    /// The template ended before its program wrote to the ready device.
    #[error("the template ended before its ready point (the program's first write to /dev/shoal/ready)")]
    EndedBeforeWrite,
    /// No write to the ready device within the time given.
    #[error("the template did not reach its ready point within {0} ms: the program (deployed with \"ready\": \"explicit\") did not write to /dev/shoal/ready")]
    NoWrite(u128),
    /// The template did not answer a copy request in time.
    #[error("the template did not answer within {0} ms")]
    NoAnswer(u128),
    /// The template's answer is not a copy it made.
    #[error("the template's answer is not a copy of it (pid {0}); the template is not trusted any more")]
    BadAnswer(i64),
    /// The template could not make the copy.
    #[error("the template could not make a copy: {0}")]
    CopyFailed(std::io::Error),
    /// The template holds too many listening sockets.
    #[error("a template copies at most {MAX_LISTENERS} listening sockets")]
    TooManyListeners,
    /// A system call here failed.
    #[error("cannot {what}: {source}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
}

/// The parent's end of a template's control channel.
pub struct Template {
    control: OwnedFd,
    pid: libc::pid_t,
    mem_size: u64,
    /// The template's user namespace (device, inode), when it has one of
    /// its own: every copy is in it, and no other function's instance is.
    userns: Option<(u64, u64)>,
    /// The pids cgroup that holds it and its copies (root, with a cgroup
    /// v1 `pids` hierarchy): the count of processes it may make.
    pids: Option<PidsGroup>,
    /// Where it stops (for the errors of [`Template::wait_ready`]).
    ready: shoal_abi::ReadyPoint,
    /// Held from a copy request to its answer: callers on several threads
    /// make copies at once (each prepares its descriptors unlocked), and
    /// the answers on the one channel come in the order of the requests.
    channel: std::sync::Mutex<()>,
}

/// Where the cgroup v1 `pids` hierarchy is mounted.
const PIDS_ROOT: &str = "/sys/fs/cgroup/pids";
/// The name of a template's pids cgroup, before `PID-N`.
const PIDS_PREFIX: &str = "shoal-template-";

/// The pids cgroup v1 directory of this process (root only), if any.
fn own_pids_dir() -> Option<std::path::PathBuf> {
    let root = std::path::Path::new(PIDS_ROOT);
    if !crate::confine::is_root() || !root.join("tasks").is_file() {
        return None;
    }
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| l.splitn(3, ':').nth(2).filter(|_| l.split(':').nth(1) == Some("pids")))?;
    Some(root.join(path.trim_start_matches('/')))
}

/// Ends what templates of dead parents left (a gateway killed with
/// SIGKILL after a program forged its ready word: the processes it forked
/// have no parent-death signal) and removes their groups: every process in
/// a group `shoal-template-PID-N` beneath this process's own pids cgroup
/// whose parent PID no longer runs is killed. The template and its copies
/// died with that parent already; only such strays are left there. Called
/// at a gateway's start and before each template. Returns how many it
/// killed.
pub fn end_orphaned_templates() -> usize {
    own_pids_dir().map(|home| end_orphans_in(&home)).unwrap_or(0)
}

fn end_orphans_in(home: &std::path::Path) -> usize {
    let mut killed = 0;
    let Ok(d) = std::fs::read_dir(home) else { return 0 };
    for e in d.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(parent) = name.strip_prefix(PIDS_PREFIX).and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u32>().ok()) else { continue };
        let dead = !std::path::Path::new(&format!("/proc/{parent}")).exists();
        if dead {
            let g = PidsGroup { dir: e.path(), home: home.to_path_buf() };
            for pid in g.procs() {
                if crate::sys::kill(pid, libc::SIGKILL).is_ok() {
                    killed += 1;
                }
            }
            // (Dropping `g` removes the directory once its processes are
            // reaped; otherwise the next call does.)
        }
        // A live gateway's groups are its own to remove: one it has just
        // made is empty until its spawning thread enters it, and removing
        // it then failed that gateway's template (two gateways starting
        // at once).
    }
    killed
}

/// The watcher's process name (`/proc/PID/comm`): a gateway's child that
/// is not an instance, which tools counting a gateway's children
/// (`shoal bench faas`) leave out.
pub const WATCHER_NAME: &str = "shoal-watcher";

/// [`WATCHER_NAME`] for `prctl`.
const WATCHER_NAME_C: &core::ffi::CStr = c"shoal-watcher";

/// The write end of the watcher's pipe (`start_watcher`), held by this
/// process for its whole life and by nothing else (close-on-exec).
static WATCHER: std::sync::OnceLock<Option<OwnedFd>> = std::sync::OnceLock::new();

/// Starts, once per process, the **watcher**: a child that waits for
/// this process's end (end of file on a pipe whose only write end this
/// process holds: any end, SIGKILL included) and then kills every process
/// left in this process's template groups (`shoal-template-PID-N` beneath
/// `home`) and removes the groups. The templates and their copies die with
/// the gateway by their parent-death signal; what a program forked itself
/// after forging its ready word has none, and this ends it at once instead
/// of at the next gateway's start (`end_orphaned_templates`, which stays
/// for a watcher killed too). A PID namespace held by the gateway would do
/// the same in the kernel, but a template cannot be its first process
/// (which cannot `clone(CLONE_PARENT)`) and its copies' pids would have to
/// be translated for the gateway. Not started where there are no groups.
fn start_watcher(home: &std::path::Path) {
    WATCHER.get_or_init(|| {
        use std::os::unix::ffi::OsStrExt;
        let home = std::ffi::CString::new(home.as_os_str().as_bytes()).ok()?;
        let prefix = format!("{PIDS_PREFIX}{}-", std::process::id()).into_bytes();
        let mut p = [0; 2];
        // SAFETY: pipe2 writes two descriptors into `p`.
        if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return None;
        }
        // SAFETY: two new descriptors owned by nobody else.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
        // SAFETY: the child of this (multi-threaded) process runs only
        // `watch`, which makes async-signal-safe system calls on its stack
        // and on `home` and `prefix`, made before the fork, and never
        // returns.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            watch(r.as_raw_fd(), &home, &prefix);
        }
        drop(r);
        (pid > 0).then_some(w)
    });
}

/// The watcher (`start_watcher`), in the child: system calls only, no
/// allocation (the parent may have held a lock in another thread at the
/// fork).
fn watch(r: RawFd, home: &core::ffi::CStr, prefix: &[u8]) -> ! {
    let _ = crate::sys::close_range(3, r as u32 - 1);
    let _ = crate::sys::close_from(r as u32 + 1);
    // The gateway's handlers are not this process's business.
    crate::sys::reset_signals();
    // SAFETY: PR_SET_NAME reads a NUL-terminated name.
    unsafe { libc::prctl(libc::PR_SET_NAME, WATCHER_NAME_C.as_ptr()) };
    let mut b = [0u8; 1];
    loop {
        // SAFETY: reads into a local buffer of its length.
        let n = unsafe { libc::read(r, b.as_mut_ptr().cast(), 1) };
        if n == 0 || n < 0 && crate::sys::errno() != libc::EINTR {
            break;
        }
    }
    // Forks of a stray may still be made while it is killed (at most its
    // pids.max): rounds until no group is left, 5 ms apart, 2 s at most.
    for _ in 0..400 {
        if sweep(home, prefix) == 0 {
            break;
        }
        crate::sys::sleep_ns(5_000_000);
    }
    crate::sys::exit(0)
}

/// One round of the watcher: kills every process of each group whose name
/// starts with `prefix` in directory `home` and removes the groups found
/// empty. Returns how many groups are left. System calls only.
fn sweep(home: &core::ffi::CStr, prefix: &[u8]) -> usize {
    // SAFETY: opens a NUL-terminated path.
    let dir = unsafe { libc::open(home.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if dir < 0 {
        return 0;
    }
    let mut left = 0;
    let mut ents = [0u8; 8192];
    loop {
        // SAFETY: getdents64 writes at most `ents.len()` bytes into `ents`.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, dir, ents.as_mut_ptr(), ents.len()) };
        if n <= 0 {
            break;
        }
        let mut at = 0usize;
        while at + 19 < n as usize {
            let reclen = u16::from_ne_bytes([ents[at + 16], ents[at + 17]]) as usize;
            if reclen == 0 || at + reclen > n as usize {
                break;
            }
            let name = &ents[at + 19..at + reclen];
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
            at += reclen;
            if !name.starts_with(prefix) || name.len() > 200 {
                continue;
            }
            let mut path = [0u8; 256];
            path[..name.len()].copy_from_slice(name);
            let tail = b"/cgroup.procs\0";
            path[name.len()..name.len() + tail.len()].copy_from_slice(tail);
            let killed = kill_listed(dir, &path);
            path[name.len()] = 0;
            // SAFETY: removes the NUL-terminated directory name in `dir`.
            let removed = unsafe { libc::unlinkat(dir, path.as_ptr().cast(), libc::AT_REMOVEDIR) } == 0;
            if killed > 0 || !removed {
                left += 1;
            }
        }
    }
    crate::sys::close(dir);
    left
}

/// Kills every process listed in the `cgroup.procs` file at `path`
/// (NUL-terminated, relative to `dir`); returns how many it signalled.
fn kill_listed(dir: RawFd, path: &[u8]) -> usize {
    // SAFETY: opens a NUL-terminated path relative to `dir`.
    let fd = unsafe { libc::openat(dir, path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return 0;
    }
    let mut buf = [0u8; 4096];
    let mut len = 0;
    while len < buf.len() {
        // SAFETY: reads into the rest of a local buffer.
        let n = unsafe { libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    crate::sys::close(fd);
    let mut killed = 0;
    for word in buf[..len].split(|c| c.is_ascii_whitespace()) {
        let mut pid: libc::pid_t = 0;
        if word.is_empty() || word.len() > 9 || !word.iter().all(u8::is_ascii_digit) {
            continue;
        }
        for d in word {
            pid = pid * 10 + libc::pid_t::from(d - b'0');
        }
        if pid > 1 && crate::sys::kill(pid, libc::SIGKILL).is_ok() {
            killed += 1;
        }
    }
    killed
}

/// A pids cgroup of its own for one template and its copies, beneath the
/// parent's own: `pids.max` is a count the kernel keeps outside the
/// template, which only the parent writes.
pub(crate) struct PidsGroup {
    dir: std::path::PathBuf,
    /// The parent's own pids cgroup, where the spawning thread goes back.
    home: std::path::PathBuf,
}

impl PidsGroup {
    /// A new group allowing two processes (the spawning thread while it
    /// is in there, and the template); `None` where there is no cgroup v1
    /// `pids` hierarchy or the caller is not root.
    pub(crate) fn new() -> std::io::Result<Option<PidsGroup>> {
        let root = std::path::Path::new(PIDS_ROOT);
        if !crate::confine::is_root() || !root.join("tasks").is_file() {
            return Ok(None);
        }
        let own = std::fs::read_to_string("/proc/self/cgroup")?;
        let Some(path) = own.lines().find_map(|l| l.splitn(3, ':').nth(2).filter(|_| l.split(':').nth(1) == Some("pids"))) else {
            return Ok(None);
        };
        let home = root.join(path.trim_start_matches('/'));
        end_orphans_in(&home);
        start_watcher(&home);
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = home.join(format!("{PIDS_PREFIX}{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir(&dir)?;
        let g = PidsGroup { dir, home };
        g.set_max(2)?;
        Ok(Some(g))
    }

    fn set_max(&self, n: u64) -> std::io::Result<()> {
        std::fs::write(self.dir.join("pids.max"), n.to_string())
    }

    /// Moves the calling thread (only it: cgroup v1) into the group, so
    /// that the process it makes next starts there.
    pub(crate) fn enter(&self) -> std::io::Result<()> {
        // SAFETY: gettid takes no arguments and cannot fail.
        std::fs::write(self.dir.join("tasks"), unsafe { libc::gettid() }.to_string())
    }

    /// After the template is made: its limit to one process (itself; the
    /// calling thread still counts, over the limit, which only stops
    /// forks), then the calling thread back home.
    pub(crate) fn seal(&self) -> std::io::Result<()> {
        let limited = self.set_max(1);
        // SAFETY: as in `enter`.
        let home = std::fs::write(self.home.join("tasks"), unsafe { libc::gettid() }.to_string());
        limited.and(home)
    }

    fn procs(&self) -> Vec<libc::pid_t> {
        std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default().split_whitespace().filter_map(|p| p.parse().ok()).collect()
    }
}

impl Drop for PidsGroup {
    fn drop(&mut self) {
        // Empty once the template and its copies are gone; otherwise
        // the next group made removes it.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// What one copy gets of its own from the parent.
pub struct CopyIo<'a> {
    /// Where the copy's stdout goes.
    pub stdout: &'a OwnedFd,
    /// Where the copy's stderr and its tender's messages go.
    pub stderr: &'a OwnedFd,
    /// Its listening sockets (as many as the template has).
    pub listeners: &'a [OwnedFd],
}

fn sys_err(what: &'static str) -> impl Fn(std::io::Error) -> TemplateError {
    move |source| TemplateError::Sys { what, source }
}

/// Waits up to `timeout` for `fd` to be readable; false on time-out.
fn readable(fd: RawFd, timeout: Duration) -> Result<bool, TemplateError> {
    let end = Instant::now() + timeout;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(i32::from(!left.is_zero()));
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut p, 1, ms) };
        if rc > 0 {
            return Ok(true);
        }
        if rc == 0 && Instant::now() >= end {
            return Ok(false);
        }
        if rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(sys_err("wait for the template")(std::io::Error::last_os_error()));
        }
    }
}

fn user_ns(pid: libc::pid_t) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(format!("/proc/{pid}/ns/user")).ok()?;
    Some((m.dev(), m.ino()))
}

impl Template {
    pub(crate) fn new(control: OwnedFd, pid: libc::pid_t, mem_size: u64, pids: Option<PidsGroup>, ready: shoal_abi::ReadyPoint) -> Template {
        Template { control, pid, mem_size, userns: None, pids, ready, channel: std::sync::Mutex::new(()) }
    }

    /// The template's process id (a child of the caller).
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Waits up to `timeout` for the template's ready point.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<(), TemplateError> {
        let explicit = self.ready == shoal_abi::ReadyPoint::Explicit;
        if !readable(self.control.as_raw_fd(), timeout)? {
            let ms = timeout.as_millis();
            return Err(if explicit { TemplateError::NoWrite(ms) } else { TemplateError::NotReady(ms) });
        }
        let mut word = [0u8; 8];
        // SAFETY: reads into a local buffer of its length.
        let n = unsafe { libc::recv(self.control.as_raw_fd(), word.as_mut_ptr().cast(), word.len(), libc::MSG_DONTWAIT) };
        if n != 8 || u64::from_ne_bytes(word) != READY {
            return Err(if explicit { TemplateError::EndedBeforeWrite } else { TemplateError::Ended });
        }
        // Taken now that the template has dropped root and made its own.
        if crate::confine::is_root() {
            self.userns = user_ns(self.pid);
        }
        Ok(())
    }

    /// Lets the template's pids cgroup hold up to `processes` processes
    /// (the template, its live copies and those not yet reaped): until
    /// this it holds one, the template itself, so its program could not
    /// fork before its ready point. A no-op without a cgroup (not root, no
    /// cgroup v1 `pids` hierarchy).
    pub fn allow_copies(&self, processes: u64) -> Result<(), TemplateError> {
        match &self.pids {
            Some(g) => g.set_max(processes).map_err(sys_err("let the template make copies (pids.max of its cgroup)")),
            None => Ok(()),
        }
    }

    /// Kills every process of the template's pids cgroup that is neither
    /// the template nor in `keep` (the copies still serving): processes
    /// the template's program forked itself after a forged ready point,
    /// which nobody else knows. Returns how many it killed. Not reaped
    /// here (the caller's wait tasks may own a pid that is ending): they
    /// are zombies until the caller reaps or ends.
    pub fn kill_strays(&self, keep: &[libc::pid_t]) -> usize {
        let Some(g) = &self.pids else { return 0 };
        let mut n = 0;
        for pid in g.procs() {
            if pid == self.pid || keep.contains(&pid) {
                continue;
            }
            // A process of the group, which only the template and its
            // copies (children of this process, not reaped yet) can be in.
            if crate::sys::kill(pid, libc::SIGKILL).is_ok() {
                n += 1;
            }
        }
        n
    }

    /// Makes one copy; returns its pid (a child of the caller, which must
    /// reap it). Waits up to `timeout` for the template's answer.
    pub fn copy(&self, io: &CopyIo<'_>, timeout: Duration) -> Result<libc::pid_t, TemplateError> {
        if io.listeners.len() > MAX_LISTENERS {
            return Err(TemplateError::TooManyListeners);
        }
        for l in io.listeners {
            // The guest's accept must not block the instance (crate::net),
            // and the copy cannot change the flag itself.
            // SAFETY: fcntl on an open descriptor; changes its status flags only.
            if unsafe { libc::fcntl(l.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } < 0 {
                return Err(sys_err("make the copy's listening socket non-blocking")(std::io::Error::last_os_error()));
            }
        }
        // The copy's alias file (sparse, the size of guest memory) and watch set.
        let alias = crate::sys::memfd(c"shoal-alias").map_err(sys_err("make the copy's alias file"))?;
        std::fs::File::from(alias.try_clone().map_err(sys_err("make the copy's alias file"))?)
            .set_len(self.mem_size)
            .map_err(sys_err("size the copy's alias file"))?;
        // SAFETY: epoll_create1 takes no pointers.
        let watch = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if watch < 0 {
            return Err(sys_err("make the copy's watch set")(std::io::Error::last_os_error()));
        }
        // SAFETY: a new descriptor owned by nobody else.
        let watch = unsafe { OwnedFd::from_raw_fd(watch) };
        let mut fds = vec![io.stdout.as_raw_fd(), io.stderr.as_raw_fd(), alias.as_raw_fd(), watch.as_raw_fd()];
        fds.extend(io.listeners.iter().map(AsRawFd::as_raw_fd));
        let mut seed = [0u8; 32];
        // SAFETY: fills a local buffer of its length.
        if unsafe { libc::getrandom(seed.as_mut_ptr().cast(), 32, 0) } != 32 {
            return Err(sys_err("make the copy's random seed")(std::io::Error::last_os_error()));
        }
        let req = Request { seed, listeners: io.listeners.len() as u32, _pad: 0 };
        let mut ctl = Control([0; CONTROL_LEN]);
        // Field by field: musl's cmsghdr has padding fields glibc's has not.
        // SAFETY: an all-zero cmsghdr is valid.
        let mut hdr: libc::cmsghdr = unsafe { core::mem::zeroed() };
        hdr.cmsg_len = (16 + 4 * fds.len()) as _;
        hdr.cmsg_level = libc::SOL_SOCKET;
        hdr.cmsg_type = libc::SCM_RIGHTS;
        // SAFETY: `ctl` is aligned for a cmsghdr and larger than one.
        unsafe { core::ptr::write(ctl.0.as_mut_ptr().cast::<libc::cmsghdr>(), hdr) };
        for (i, fd) in fds.iter().enumerate() {
            ctl.0[16 + 4 * i..20 + 4 * i].copy_from_slice(&fd.to_ne_bytes());
        }
        let mut iov = libc::iovec { iov_base: (&req as *const Request).cast_mut().cast(), iov_len: core::mem::size_of::<Request>() };
        // SAFETY: an all-zero msghdr is valid; the pointers are set below.
        let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctl.0.as_mut_ptr().cast();
        msg.msg_controllen = (16 + (4 * fds.len()).next_multiple_of(8)) as _;
        let channel = self.channel.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `msg` points at `req` and `ctl`, both live.
        if unsafe { libc::sendmsg(self.control.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) } < 0 {
            return Err(match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EPIPE | libc::ECONNRESET) => TemplateError::Ended,
                _ => sys_err("send the copy request")(std::io::Error::last_os_error()),
            });
        }
        drop((alias, watch));
        if !readable(self.control.as_raw_fd(), timeout)? {
            return Err(TemplateError::NoAnswer(timeout.as_millis()));
        }
        let mut word = [0u8; 8];
        // SAFETY: reads into a local buffer of its length.
        let n = unsafe { libc::recv(self.control.as_raw_fd(), word.as_mut_ptr().cast(), word.len(), libc::MSG_DONTWAIT) };
        drop(channel);
        if n == 0 {
            return Err(TemplateError::Ended);
        }
        if n != 8 {
            return Err(TemplateError::BadAnswer(-1));
        }
        let pid = i64::from_ne_bytes(word);
        if pid < 0 {
            return Err(TemplateError::CopyFailed(std::io::Error::from_raw_os_error(i32::try_from(-pid).unwrap_or(libc::EIO))));
        }
        let pid = libc::pid_t::try_from(pid).map_err(|_| TemplateError::BadAnswer(pid))?;
        self.check_copy(pid)?;
        Ok(pid)
    }

    /// The answer must name a child of this process (what `CLONE_PARENT`
    /// made) in the template's own user namespace: not another
    /// function's instance, not a process of anyone else.
    fn check_copy(&self, pid: libc::pid_t) -> Result<(), TemplateError> {
        if pid <= 0 || pid == self.pid {
            return Err(TemplateError::BadAnswer(i64::from(pid)));
        }
        // SAFETY: a zeroed siginfo_t is valid for waitid to fill; WNOWAIT
        // leaves any child as it is.
        let mut info: libc::siginfo_t = unsafe { core::mem::zeroed() };
        // SAFETY: as above.
        let rc = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) };
        if rc != 0 {
            return Err(TemplateError::BadAnswer(i64::from(pid)));
        }
        if self.userns.is_some() && user_ns(pid) != self.userns {
            // (A copy that already ended has no namespace to compare: it
            // is reaped by the caller as any ended instance.)
            if std::path::Path::new(&format!("/proc/{pid}/ns/user")).exists() {
                return Err(TemplateError::BadAnswer(i64::from(pid)));
            }
        }
        Ok(())
    }
}
