//! hvt templates: a VM booted once, stopped at its ready point, and
//! copied for every cold start (docs/serve.md "Templates",
//! docs/architecture.md threat model). The spt counterpart is
//! `shoal_spt`'s `template` module; the ready point is the same.
//!
//! **The ready point** is the program's first wait for a connection with
//! nothing pending: an `accept` on a listener found nothing (the `Net`
//! hypercall got `EAGAIN` from the host), and the guest then asks to sleep
//! (`NetPoll` with a deadline). The VMM does not carry that `NetPoll` out:
//! it completes the `out` instruction (`KVM_RUN` with `immediate_exit`,
//! which finishes the port I/O and returns at once), keeps the vCPU's
//! state, tells its parent (the gateway) over the control channel that
//! it is ready, and from then on only makes copies: the guest never runs
//! again in the template, so the template never serves a request.
//! For a function deployed with `"ready": "explicit"`
//! ([`TEMPLATE_READY_ENV`]) the ready point is instead the program's first
//! write to `/dev/shoal/ready` (the `Ready` hypercall), wherever it is;
//! its waits for connections are then not ready points, and each copy
//! goes on from that write.
//!
//! **Memory.** A template's guest memory and page-table pool are memory
//! files (`memfd`) mapped shared, so that what the guest wrote until its
//! ready point is in them; a copy maps both **private** (copy-on-write)
//! at the same host addresses, so that it reads the template's pages
//! from the page cache and owns only what it writes.
//!
//! **A copy** is made in two steps, so that KVM's VM creation (0.7–1.9 ms
//! on this host) is not on a request's path:
//! 1. *An empty VM* (the gateway asks for it ahead, [`Template::make_empty`]):
//!    the template forks (`clone(CLONE_PARENT)`: the child is the
//!    gateway's, which reaps and kills it like any instance). The child
//!    drops the template's VM and vCPU descriptors, replaces the inherited
//!    shared mappings of the template's memory by inaccessible
//!    reservations (it must never write the template's pages), creates a
//!    new VM and vCPU (with the guest CPUID), says so, and waits. It holds
//!    no guest state: it is not a spare instance.
//! 2. *The copy* ([`EmptyVm::start`], on the request's path): the
//!    template's memory files mapped private over the reservations and
//!    registered with the new VM, the vCPU state set, and what must be the
//!    copy's own made fresh (below); then the pending `NetPoll` is carried
//!    out on the copy's own sockets and the guest goes on.
//!
//! | what | how |
//! |---|---|
//! | vCPU state | general registers, special registers (segments with the FS/GS bases, control registers, EFER, descriptor tables), XCR0, the XSAVE area (x87, SSE, AVX), the `syscall` MSRs (STAR, LSTAR, CSTAR, SFMASK) and KERNEL_GS_BASE, as the template's were after its `out` completed. There is no in-kernel LAPIC, PIC or PIT (hvt guests take no interrupts), so there is no LAPIC or timer state to copy |
//! | the clock | the guest reads the TSC with the calibration in its boot information; each copy's vCPU gets TSC offset 0 (as every hvt VM), so the host's TSC and the same calibration hold |
//! | listening sockets | the gateway's new sockets, in the template's order, in place of the template's in the VMM's table (the guest's handles are unchanged) |
//! | connections | none: a template holding a socket of its own (accepted or made) at its ready point is refused |
//! | the watch set (host epoll) | a new one with the copy's sockets (an inherited epoll instance would be the template's) |
//! | stdout, stderr | the gateway's new pipes (`dup3` to 1 and 2): the copy's logs are its own |
//! | the kernel's random stream | a fresh seed from the gateway written into the copy's boot-info page, which the kernel's `getrandom` checks on every call and reseeds from |
//! | timers | the preemption tick is a POSIX timer, which a fork does not inherit: the copy makes its own, at the period the template's had; the guest's own timers are guest memory and go on from the template's state (none is due: every thread waits) |
//! | parent-death signal | set again (a fork clears it) |
//! | the report page, `MAP_SHARED` aliases | none on hvt: an alias is a page-table entry in guest memory, so each copy's is in its private copy |
//! | mounted files mapped (`HOSTFS_MAP`: the libraries `ld.so` maps) | mapped again at the same guest ranges, the pages of them the template wrote over those from its memory file, where it saved them at its ready point (crate::filemap) |
//!
//! Not made fresh: what the program drew from `AT_RANDOM` or `getrandom`
//! before its ready point (musl's stack-protector canary and pointer
//! guard, a seed it keeps) is the same in every copy, as on spt.
//!
//! **The template's extra rights.** The guest has none: it cannot make a
//! host call (hvt's boundary is the VMM), the control channel is the
//! VMM's, and the VMM acts on it only after the ready point, when the
//! guest no longer runs. The gateway treats every answer as hostile
//! anyway: an empty VM's pid must be the gateway's own child.

use crate::vm;
use kvm_bindings::{kvm_msr_entry, kvm_regs, kvm_sregs, kvm_xcrs, kvm_xsave, Msrs};
use kvm_ioctls::VcpuFd;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};
use vm_memory::{Bytes, GuestMemoryRegion, GuestRegionMmap};

/// The environment variable that makes an hvt run a template: the number
/// of its end of the control channel (a `SOCK_SEQPACKET` socket). Set by
/// the gateway only.
pub const TEMPLATE_FD_ENV: &str = "SHOAL_HVT_TEMPLATE_FD";
/// With [`TEMPLATE_FD_ENV`]: `explicit` makes the template's ready point
/// the program's write to `/dev/shoal/ready` (`shoal_abi::ReadyPoint::
/// Explicit`); unset, its first wait for a connection. Set by the gateway
/// only.
pub const TEMPLATE_READY_ENV: &str = "SHOAL_HVT_TEMPLATE_READY";

/// The template's word that it reached its ready point.
const READY: u64 = 0x5944_4145_5220_5648; // "HV READY"
/// The gateway's request for an empty VM.
const MAKE: u64 = 0x5954_504d_4520_5648; // "HV EMPTY"
/// An empty VM's word that its VM exists.
const MADE: u64 = 0x4544_414d_2056_4d45; // "EMV MADE"
/// Most listening sockets a copy takes.
pub const MAX_LISTENERS: usize = 4;
/// Descriptors a copy request carries besides the listeners.
const FIXED_FDS: usize = 2;
const MAX_FDS: usize = FIXED_FDS + MAX_LISTENERS;

/// The MSRs a copy takes from its template: `syscall`'s (STAR, LSTAR,
/// CSTAR, SFMASK) and KERNEL_GS_BASE.
const MSRS: [u32; 5] = [0xc000_0081, 0xc000_0082, 0xc000_0083, 0xc000_0084, 0xc000_0102];

/// A copy request (the data part; the descriptors come as `SCM_RIGHTS`:
/// stdout, stderr, then the listeners).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Request {
    /// The copy's seed for the kernel's random stream.
    seed: [u8; 32],
    /// How many listening sockets follow stdout and stderr.
    listeners: u32,
    _pad: u32,
}

/// Why a template could not be made, started or copied.
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
    /// The template or an empty VM did not answer in time.
    #[error("the template did not answer within {0} ms")]
    NoAnswer(u128),
    /// The answer is not an empty VM the template made.
    #[error("the template's answer is not a copy of it (pid {0}); the template is not trusted any more")]
    BadAnswer(i64),
    /// The template could not make an empty VM.
    #[error("the template could not make an empty VM: {0}")]
    MakeFailed(std::io::Error),
    /// More listening sockets than a copy takes.
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

fn sys_err(what: &'static str) -> impl Fn(std::io::Error) -> TemplateError {
    move |source| TemplateError::Sys { what, source }
}

fn last_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

// ---------------------------------------------------------------------
// Sockets: words and descriptors over SOCK_SEQPACKET.

/// A connected `SOCK_SEQPACKET` pair, both ends close-on-exec.
pub fn seqpacket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
        return Err(last_err());
    }
    // SAFETY: both were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Room for a control message of `MAX_FDS` descriptors, aligned as a `cmsghdr`.
#[repr(C, align(8))]
struct Control([u8; 64]);

/// Sends `bytes` with `fds` attached (none: a plain message).
fn send_with(sock: RawFd, bytes: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let mut ctl = Control([0; 64]);
    let mut iov = libc::iovec { iov_base: bytes.as_ptr().cast_mut().cast(), iov_len: bytes.len() };
    // SAFETY: an all-zero msghdr is valid; the pointers are set below.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let n = fds.len().min(MAX_FDS);
        // SAFETY: CMSG_SPACE/CMSG_LEN only compute sizes.
        let (space, len) = unsafe { (libc::CMSG_SPACE((4 * n) as u32) as usize, libc::CMSG_LEN((4 * n) as u32) as usize) };
        msg.msg_control = ctl.0.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: `msg` has a control buffer of `space` <= 64 bytes, aligned
        // for a cmsghdr: CMSG_FIRSTHDR points into it and CMSG_DATA has room
        // for `n` descriptors.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = len as _;
            core::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), 4 * n);
        }
    }
    loop {
        // SAFETY: `msg` points at live buffers of the sizes given.
        if unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) } >= 0 {
            return Ok(());
        }
        let e = last_err();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Receives one message into `buf` (blocking unless `nonblock`): its
/// length (0 when the peer closed) and the descriptors it carried.
fn recv_with(sock: RawFd, buf: &mut [u8], nonblock: bool) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    let mut ctl = Control([0; 64]);
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: an all-zero msghdr is valid; the pointers are set below.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.0.as_mut_ptr().cast();
    msg.msg_controllen = ctl.0.len() as _;
    let flags = libc::MSG_CMSG_CLOEXEC | if nonblock { libc::MSG_DONTWAIT } else { 0 };
    let n = loop {
        // SAFETY: `msg` points at `buf` and `ctl`, both live, of the sizes given.
        let n = unsafe { libc::recvmsg(sock, &mut msg, flags) };
        if n >= 0 {
            break n as usize;
        }
        let e = last_err();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `msg`'s control buffer; CMSG_FIRSTHDR and
    // CMSG_NXTHDR stay inside msg_controllen, and every descriptor read is
    // a new one this process now owns.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let k = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize) / 4;
                let data = libc::CMSG_DATA(c);
                for i in 0..k {
                    let mut b = [0u8; 4];
                    core::ptr::copy_nonoverlapping(data.add(4 * i), b.as_mut_ptr(), 4);
                    fds.push(OwnedFd::from_raw_fd(i32::from_ne_bytes(b)));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0 {
        return Err(std::io::Error::from_raw_os_error(libc::EMSGSIZE));
    }
    Ok((n, fds))
}

fn send_word(sock: RawFd, w: u64) -> std::io::Result<()> {
    send_with(sock, &w.to_ne_bytes(), &[])
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
        if rc < 0 && last_err().raw_os_error() != Some(libc::EINTR) {
            return Err(sys_err("wait for the template")(last_err()));
        }
    }
}

/// One word from `fd` within `timeout`: `Ok(None)` when the peer closed.
fn read_word(fd: RawFd, timeout: Duration) -> Result<(Option<u64>, Vec<OwnedFd>), TemplateError> {
    if !readable(fd, timeout)? {
        return Err(TemplateError::NoAnswer(timeout.as_millis()));
    }
    let mut w = [0u8; 8];
    let (n, fds) = match recv_with(fd, &mut w, true) {
        Ok(r) => r,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNRESET | libc::EPIPE)) => return Ok((None, Vec::new())),
        Err(e) => return Err(sys_err("read the template's answer")(e)),
    };
    match n {
        0 => Ok((None, fds)),
        8 => Ok((Some(u64::from_ne_bytes(w)), fds)),
        _ => Err(TemplateError::BadAnswer(-1)),
    }
}

// ---------------------------------------------------------------------
// The VMM's side (the template and its copies).

/// A run that is a template: its control channel and the memory files
/// that back guest memory and the page-table pool.
pub(crate) struct Side {
    control: OwnedFd,
    memory: OwnedFd,
    tables: OwnedFd,
    ready: shoal_abi::ReadyPoint,
}

/// `memfd_create(name, MFD_CLOEXEC)` sized `len`.
fn memfd(name: &core::ffi::CStr, len: u64) -> std::io::Result<OwnedFd> {
    // SAFETY: memfd_create takes a valid C string; the result is a new descriptor.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(last_err());
    }
    // SAFETY: a new descriptor owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    std::fs::File::from(fd.try_clone()?).set_len(len)?;
    Ok(fd)
}

/// Maps `fd` over the whole of `region` (`MAP_FIXED`), shared or private.
fn map_over(region: &GuestRegionMmap<()>, fd: Option<RawFd>, shared: bool) -> std::io::Result<()> {
    let (prot, flags, fd) = match fd {
        Some(fd) => (libc::PROT_READ | libc::PROT_WRITE, if shared { libc::MAP_SHARED } else { libc::MAP_PRIVATE }, fd),
        // An inaccessible reservation: the range stays this mapping's.
        None => (libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1),
    };
    // SAFETY: MAP_FIXED over `region`'s own range, which the caller owns
    // (guest memory, referenced by no Rust reference); what was mapped
    // there is replaced as a whole.
    let p = unsafe { libc::mmap(region.as_ptr().cast(), region.len() as usize, prot, flags | libc::MAP_FIXED, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(last_err());
    }
    Ok(())
}

impl Side {
    /// The template side of this run, if the gateway made it a template
    /// ([`TEMPLATE_FD_ENV`]). The variable is removed, so that nothing
    /// started later inherits it.
    pub(crate) fn from_env(mem_size: u64) -> Result<Option<Side>, String> {
        let Some(v) = std::env::var_os(TEMPLATE_FD_ENV) else { return Ok(None) };
        // (The tender is single-threaded here, before the VM exists.)
        std::env::remove_var(TEMPLATE_FD_ENV);
        let ready = match std::env::var_os(TEMPLATE_READY_ENV) {
            None => shoal_abi::ReadyPoint::Listen,
            Some(v) if v == "explicit" => shoal_abi::ReadyPoint::Explicit,
            Some(v) => return Err(format!("{TEMPLATE_READY_ENV}: {v:?} is not a ready point (explicit or unset)")),
        };
        std::env::remove_var(TEMPLATE_READY_ENV);
        let fd: RawFd = v.to_str().and_then(|s| s.parse().ok()).filter(|&fd| fd > 2).ok_or_else(|| format!("{TEMPLATE_FD_ENV}: not a descriptor number"))?;
        let mut ty: libc::c_int = 0;
        let mut len = core::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `ty` and `len` are valid out-parameters of this size.
        if unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE, (&mut ty as *mut libc::c_int).cast(), &mut len) } != 0 || ty != libc::SOCK_SEQPACKET {
            return Err(format!("{TEMPLATE_FD_ENV}: descriptor {fd} is not a SOCK_SEQPACKET socket"));
        }
        // SAFETY: an inherited descriptor nobody else in this process owns.
        let control = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: fcntl on the descriptor just taken.
        unsafe { libc::fcntl(control.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        let memory = memfd(c"shoal-hvt-template", mem_size).map_err(|e| format!("cannot make the template's memory file: {e}"))?;
        let tables =
            memfd(c"shoal-hvt-template-tables", crate::protect::pool_size(mem_size)).map_err(|e| format!("cannot make the template's memory file: {e}"))?;
        Ok(Some(Side { control, memory, tables, ready }))
    }

    /// Backs guest memory with the template's memory file (before
    /// anything is written to it).
    pub(crate) fn back_memory(&self, region: &GuestRegionMmap<()>) -> std::io::Result<()> {
        map_over(region, Some(self.memory.as_raw_fd()), true)
    }

    /// What records the mounted files the template maps over its memory
    /// file (crate::filemap).
    pub(crate) fn file_maps(&self) -> std::io::Result<crate::filemap::FileMaps> {
        crate::filemap::FileMaps::new(self.memory.as_raw_fd())
    }

    /// Backs the page-table pool with its memory file (before anything
    /// is written to it).
    pub(crate) fn back_tables(&self, region: &GuestRegionMmap<()>) -> std::io::Result<()> {
        map_over(region, Some(self.tables.as_raw_fd()), true)
    }
}

/// What the ready point works on: the run loop's VM parts and sockets.
pub(crate) struct Parts<'a> {
    pub vcpu: &'a mut VcpuFd,
    pub memory: &'a GuestRegionMmap<()>,
    pub tables: &'a GuestRegionMmap<()>,
    pub net: &'a mut crate::net::Net,
    /// Mode `pool`: the pool files mapped over guest memory again in a copy.
    pub pool: Option<&'a shoal_loader::pool::PoolPlan>,
    /// Mode `ksm`: a copy's memory is mergeable.
    pub ksm: bool,
    /// The mounted files the template mapped (crate::filemap).
    pub file_maps: Option<&'a crate::filemap::FileMaps>,
}

/// The vCPU state a copy starts from.
struct CpuState {
    regs: kvm_regs,
    sregs: kvm_sregs,
    xcrs: kvm_xcrs,
    xsave: kvm_xsave,
    msrs: Vec<kvm_msr_entry>,
}

impl CpuState {
    fn save(vcpu: &VcpuFd) -> Result<CpuState, String> {
        fn e(what: &'static str) -> impl Fn(vmm_sys_util::errno::Error) -> String {
            move |err| format!("KVM refused to read {what}: {err}")
        }
        let mut msrs = Msrs::from_entries(&MSRS.map(|index| kvm_msr_entry { index, ..Default::default() })).map_err(|_| "cannot list the MSRs".to_string())?;
        let n = vcpu.get_msrs(&mut msrs).map_err(e("the MSRs"))?;
        Ok(CpuState {
            regs: vcpu.get_regs().map_err(e("the registers"))?,
            sregs: vcpu.get_sregs().map_err(e("the special registers"))?,
            xcrs: vcpu.get_xcrs().map_err(e("XCR0"))?,
            xsave: vcpu.get_xsave().map_err(e("the XSAVE state"))?,
            msrs: msrs.as_slice()[..n].to_vec(),
        })
    }

    fn restore(&self, vcpu: &VcpuFd) -> Result<(), String> {
        fn e(what: &'static str) -> impl Fn(vmm_sys_util::errno::Error) -> String {
            move |err| format!("KVM refused to set {what}: {err}")
        }
        vcpu.set_sregs(&self.sregs).map_err(e("the special registers"))?;
        // XCR0 before the XSAVE area, which is checked against it.
        vcpu.set_xcrs(&self.xcrs).map_err(e("XCR0"))?;
        // SAFETY: a whole kvm_xsave as KVM_GET_XSAVE filled it.
        unsafe { vcpu.set_xsave(&self.xsave) }.map_err(e("the XSAVE state"))?;
        let msrs = Msrs::from_entries(&self.msrs).map_err(|_| "cannot list the MSRs".to_string())?;
        let n = vcpu.set_msrs(&msrs).map_err(e("the MSRs"))?;
        if n != self.msrs.len() {
            return Err(format!("KVM set {n} of {} MSRs", self.msrs.len()));
        }
        vcpu.set_regs(&self.regs).map_err(e("the registers"))?;
        vm::sync_tsc(vcpu).map_err(|e| e.to_string())
    }
}

/// Whether the `NetPoll` at `arg` asks to sleep.
pub(crate) fn sleeps(mem: &shoal_loader::GuestMemory, arg: shoal_loader::GuestAddr) -> bool {
    matches!(mem.read_obj::<shoal_abi::NetPollArgs>(arg), Ok(a) if a.timeout_ns != 0)
}

impl Side {
    /// Whether hypercall `call` (argument at `arg`) is the ready point:
    /// the first `NetPoll` that sleeps after an `accept` found nothing
    /// (`accept_waited`), or at [`shoal_abi::ReadyPoint::Explicit`] the
    /// program's write to the ready device.
    pub(crate) fn at_ready_point(
        &self,
        call: shoal_abi::Hypercall,
        accept_waited: bool,
        mem: &shoal_loader::GuestMemory,
        arg: shoal_loader::GuestAddr,
    ) -> bool {
        match self.ready {
            shoal_abi::ReadyPoint::Explicit => call == shoal_abi::Hypercall::Ready,
            shoal_abi::ReadyPoint::Listen => call == shoal_abi::Hypercall::NetPoll && accept_waited && sleeps(mem, arg),
        }
    }

    /// The ready point (the run loop, at the first `NetPoll` that sleeps
    /// after an `accept` found nothing). In the template it does not
    /// return but to stop (an `Err`, the template cannot be copied) or
    /// exit (the gateway closed the channel); in a copy it returns the
    /// copy's own VM, registered and in the template's state, for the run
    /// loop to take and carry out the pending `NetPoll` on the copy's
    /// sockets.
    pub(crate) fn serve(self, parts: Parts<'_>) -> Result<vm::Empty, String> {
        if let Some(h) = parts.net.first_own_socket() {
            return Err(format!(
                "the program holds socket handle {h} of its own at its ready point; a template cannot give each copy its own (deploy with \"template\": false)"
            ));
        }
        if parts.net.listeners() > MAX_LISTENERS {
            return Err(format!("a template copies at most {MAX_LISTENERS} listening sockets"));
        }
        // Complete the `out` (KVM skips it at the next KVM_RUN, which
        // immediate_exit ends at once): the state is then the guest's just
        // after its hypercall.
        parts.vcpu.set_kvm_immediate_exit(1);
        match parts.vcpu.run() {
            Err(e) if e.errno() == libc::EINTR => {}
            Err(e) => return Err(format!("KVM_RUN failed completing the template's hypercall: {e}")),
            Ok(exit) => return Err(format!("the template's vCPU ran on at its ready point ({exit:?})")),
        }
        parts.vcpu.set_kvm_immediate_exit(0);
        let state = CpuState::save(parts.vcpu)?;
        if let Some(f) = parts.file_maps {
            f.save(parts.memory).map_err(|e| e.to_string())?;
        }
        crate::preempt::pause_timer();
        send_word(self.control.as_raw_fd(), READY).map_err(|e| format!("cannot tell the gateway that the template is ready: {e}"))?;
        loop {
            let mut w = [0u8; 8];
            let (n, _fds) = match recv_with(self.control.as_raw_fd(), &mut w, false) {
                Ok(r) => r,
                Err(_) => std::process::exit(0),
            };
            if n == 0 {
                // The gateway closed the channel: the function is gone.
                std::process::exit(0);
            }
            if n != 8 || u64::from_ne_bytes(w) != MAKE {
                continue;
            }
            let (ours, theirs) = match seqpacket_pair() {
                Ok(p) => p,
                Err(e) => {
                    let _ = send_with(self.control.as_raw_fd(), &(-i64::from(e.raw_os_error().unwrap_or(libc::EIO))).to_ne_bytes(), &[]);
                    continue;
                }
            };
            // Output buffered in this process would be written again by the child.
            use std::io::Write;
            let _ = std::io::stdout().flush();
            let _ = std::io::stderr().flush();
            // SAFETY: a plain fork (no new stack, no shared memory) of this
            // single-threaded process: the child continues here on a copy of
            // this stack.
            let pid = unsafe { libc::syscall(libc::SYS_clone, libc::CLONE_PARENT as u64, 0u64, 0u64, 0u64, 0u64) };
            if pid == 0 {
                drop(ours);
                return self.become_copy(theirs, &state, parts);
            }
            drop(theirs);
            let answer = if pid < 0 { -i64::from(last_err().raw_os_error().unwrap_or(libc::EIO)) } else { pid };
            let fds = if pid > 0 { vec![ours.as_raw_fd()] } else { Vec::new() };
            let _ = send_with(self.control.as_raw_fd(), &answer.to_ne_bytes(), &fds);
        }
    }

    /// In the child: an empty VM, then (at the request) the copy.
    fn become_copy(self, channel: OwnedFd, state: &CpuState, parts: Parts<'_>) -> Result<vm::Empty, String> {
        let Side { control, memory, tables, .. } = self;
        drop(control);
        // Never write the template's pages: the shared mappings go first.
        map_over(parts.memory, None, false).map_err(|e| format!("cannot drop the template's memory: {e}"))?;
        map_over(parts.tables, None, false).map_err(|e| format!("cannot drop the template's memory: {e}"))?;
        // SAFETY: prctl and getppid take no pointers.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        }
        let empty = match vm::Vm::create_empty() {
            Ok(e) => e,
            Err(e) => {
                let _ = send_word(channel.as_raw_fd(), (-i64::from(libc::EIO)) as u64);
                return Err(e.to_string());
            }
        };
        send_word(channel.as_raw_fd(), MADE).map_err(|e| format!("cannot tell the gateway that the empty VM is made: {e}"))?;
        let mut req = Request::default();
        // SAFETY: `Request` is plain old data; its bytes are received into.
        let buf = unsafe { core::slice::from_raw_parts_mut((&mut req as *mut Request).cast::<u8>(), core::mem::size_of::<Request>()) };
        let (n, fds) = recv_with(channel.as_raw_fd(), buf, false).map_err(|e| format!("cannot read the copy request: {e}"))?;
        if n == 0 {
            // Never used: the gateway let it go.
            std::process::exit(0);
        }
        let nl = req.listeners as usize;
        if n != core::mem::size_of::<Request>() || fds.len() != FIXED_FDS + nl || nl != parts.net.listeners() {
            return Err("the copy request does not match the template".into());
        }
        drop(channel);
        let mut fds = fds.into_iter();
        for to in [1, 2] {
            let Some(from) = fds.next() else { break };
            // SAFETY: dup3 only changes the descriptor table.
            if unsafe { libc::dup3(from.as_raw_fd(), to, 0) } < 0 {
                return Err(format!("cannot place the copy's output: {}", last_err()));
            }
        }
        // The copy's memory: the template's, private.
        map_over(parts.memory, Some(memory.as_raw_fd()), false).map_err(|e| format!("cannot map the template's memory: {e}"))?;
        map_over(parts.tables, Some(tables.as_raw_fd()), false).map_err(|e| format!("cannot map the template's memory: {e}"))?;
        drop((memory, tables));
        if let Some(f) = parts.file_maps {
            f.remake(parts.memory).map_err(|e| e.to_string())?;
        }
        if let Some(plan) = parts.pool {
            // SAFETY: as at the template's start (crate::run_with_console):
            // the pool ranges lie inside guest memory, mapped at `as_ptr()`.
            unsafe { plan.map_into(parts.memory.as_ptr() as u64, |_| libc::PROT_READ | libc::PROT_WRITE) }
                .map_err(|(a, e)| format!("cannot map the library pool at guest address {a:#x}: {}", std::io::Error::from_raw_os_error(e)))?;
        }
        if parts.ksm {
            // SAFETY: advice only, on this private mapping.
            let _ = unsafe { libc::madvise(parts.memory.as_ptr().cast(), parts.memory.len() as usize, libc::MADV_MERGEABLE) };
        }
        // SAFETY: both mappings are the run loop's `vm`'s, which outlives
        // the VM the run loop makes of `empty`.
        unsafe { empty.register(parts.memory, parts.tables) }.map_err(|e| e.to_string())?;
        state.restore(&empty.vcpu)?;
        let at = shoal_abi::BOOT_INFO_ADDR + core::mem::offset_of!(shoal_abi::BootInfo, random_seed) as u64;
        parts.memory.write_slice(&req.seed, vm_memory::MemoryRegionAddress(at)).map_err(|e| format!("cannot give the copy its random seed: {e}"))?;
        parts.net.make_own(fds.collect()).map_err(|e| format!("cannot give the copy its sockets: {}", std::io::Error::from_raw_os_error(e)))?;
        crate::preempt::after_fork().map_err(|e| format!("cannot make the copy's preemption timer: {}", std::io::Error::from_raw_os_error(-e as i32)))?;
        crate::forward::after_fork();
        Ok(empty)
    }
}

// ---------------------------------------------------------------------
// The gateway's side.

/// The gateway's end of a template's control channel.
pub struct Template {
    control: OwnedFd,
    pid: libc::pid_t,
    /// One request at a time on the channel.
    lock: std::sync::Mutex<()>,
}

/// An empty VM a template made ([`Template::make_empty`]): a child of the
/// caller, which must reap it.
pub struct EmptyVm {
    pid: libc::pid_t,
    channel: OwnedFd,
}

/// Whether `pid` is a child of this process (not yet reaped).
fn is_child(pid: libc::pid_t) -> bool {
    // SAFETY: a zeroed siginfo_t is valid for waitid to fill; WNOWAIT
    // leaves any child as it is.
    let mut info: libc::siginfo_t = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) == 0 }
}

impl Template {
    /// The gateway's end of the channel of the template `pid`, which it
    /// started with the other end at the descriptor [`TEMPLATE_FD_ENV`] names.
    pub fn new(control: OwnedFd, pid: libc::pid_t) -> Template {
        Template { control, pid, lock: std::sync::Mutex::new(()) }
    }

    /// The template's process id.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Waits up to `timeout` for the template's ready point.
    pub fn wait_ready(&self, timeout: Duration) -> Result<(), TemplateError> {
        self.wait_ready_at(timeout, shoal_abi::ReadyPoint::Listen)
    }

    /// [`Template::wait_ready`] for a template started with the ready
    /// point `ready` ([`TEMPLATE_READY_ENV`]): its errors name that point.
    pub fn wait_ready_at(&self, timeout: Duration, ready: shoal_abi::ReadyPoint) -> Result<(), TemplateError> {
        let explicit = ready == shoal_abi::ReadyPoint::Explicit;
        match read_word(self.control.as_raw_fd(), timeout) {
            Ok((Some(READY), _)) => Ok(()),
            Ok(_) if explicit => Err(TemplateError::EndedBeforeWrite),
            Ok(_) => Err(TemplateError::Ended),
            Err(TemplateError::NoAnswer(ms)) if explicit => Err(TemplateError::NoWrite(ms)),
            Err(TemplateError::NoAnswer(ms)) => Err(TemplateError::NotReady(ms)),
            Err(e) => Err(e),
        }
    }

    /// Asks the template for an empty VM (a child of the caller); waits
    /// up to `timeout` for the answer (not for the VM: [`EmptyVm::wait_made`]).
    pub fn make_empty(&self, timeout: Duration) -> Result<EmptyVm, TemplateError> {
        let _one = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        send_word(self.control.as_raw_fd(), MAKE).map_err(|e| match e.raw_os_error() {
            Some(libc::EPIPE | libc::ECONNRESET) => TemplateError::Ended,
            _ => sys_err("ask the template for an empty VM")(e),
        })?;
        let (word, mut fds) = read_word(self.control.as_raw_fd(), timeout)?;
        let Some(word) = word else { return Err(TemplateError::Ended) };
        let pid = word as i64;
        if pid < 0 {
            return Err(TemplateError::MakeFailed(std::io::Error::from_raw_os_error(i32::try_from(-pid).unwrap_or(libc::EIO))));
        }
        let p = libc::pid_t::try_from(pid).map_err(|_| TemplateError::BadAnswer(pid))?;
        if p <= 0 || p == self.pid || fds.len() != 1 || !is_child(p) {
            return Err(TemplateError::BadAnswer(pid));
        }
        let channel = fds.remove(0);
        Ok(EmptyVm { pid: p, channel })
    }
}

impl EmptyVm {
    /// Its process id (a child of the caller).
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Waits up to `timeout` until its VM exists.
    pub fn wait_made(&self, timeout: Duration) -> Result<(), TemplateError> {
        match read_word(self.channel.as_raw_fd(), timeout)? {
            (Some(MADE), _) => Ok(()),
            (Some(w), _) if (w as i64) < 0 => {
                Err(TemplateError::MakeFailed(std::io::Error::from_raw_os_error(i32::try_from(-(w as i64)).unwrap_or(libc::EIO))))
            }
            (Some(w), _) => Err(TemplateError::BadAnswer(w as i64)),
            (None, _) => Err(TemplateError::Ended),
        }
    }

    /// Makes it a copy of the template with its own stdout, stderr and
    /// listening sockets and a fresh random seed; it runs from then on.
    pub fn start(self, stdout: &OwnedFd, stderr: &OwnedFd, listeners: &[OwnedFd]) -> Result<(), TemplateError> {
        if listeners.len() > MAX_LISTENERS {
            return Err(TemplateError::TooManyListeners);
        }
        let mut seed = [0u8; 32];
        // SAFETY: fills a local buffer of its length.
        if unsafe { libc::getrandom(seed.as_mut_ptr().cast(), 32, 0) } != 32 {
            return Err(sys_err("make the copy's random seed")(last_err()));
        }
        let req = Request { seed, listeners: listeners.len() as u32, _pad: 0 };
        let mut fds = vec![stdout.as_raw_fd(), stderr.as_raw_fd()];
        fds.extend(listeners.iter().map(AsRawFd::as_raw_fd));
        // SAFETY: `Request` is plain old data.
        let bytes = unsafe { core::slice::from_raw_parts((&req as *const Request).cast::<u8>(), core::mem::size_of::<Request>()) };
        send_with(self.channel.as_raw_fd(), bytes, &fds).map_err(|e| match e.raw_os_error() {
            Some(libc::EPIPE | libc::ECONNRESET) => TemplateError::Ended,
            _ => sys_err("send the copy request")(e),
        })
    }
}
