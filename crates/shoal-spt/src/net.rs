//! Host-socket passthrough on spt (a guest socket is a host socket): the
//! `Net` and `NetPoll` hypercalls (the batch, bounds and socket checks
//! shared with hvt in `shoal_hostcall::net`). A guest socket of family
//! `AF_INET`/`AF_INET6` is a host socket owned by the instance process;
//! its handle is the host descriptor number. Every descriptor at or above [`FIRST_SOCKET_FD`] in
//! the instance is a guest socket (the instance closed everything else
//! before the guest's first instruction), so a handle check is a range
//! check.
//!
//! The guest shares this process, so it could make these system calls
//! itself; what bounds it is the seccomp filter (`crate::filter`, built
//! from the same [`NetPolicy`]) and Landlock (`crate::landlock`), not the
//! checks here. The checks here make a buggy or hostile guest get an
//! error instead of making the tender touch memory outside the guest's
//! writable range. Host sockets are non-blocking (created with
//! `SOCK_NONBLOCK`, data calls with `MSG_DONTWAIT`): the guest kernel blocks
//! a thread, and the instance sleeps only in `NetPoll`.
//!
//! **The watch set.** A server holds hundreds of connections, and a `ppoll`
//! over all of them on every wait costs time proportional to all of them
//! where Linux's `epoll` costs time proportional to the ready ones. So the
//! instance keeps one host epoll instance ([`open_watch`], at the pinned
//! descriptor [`watch_fd`], after the listeners, the bind channel and the alias file) with every guest
//! socket registered edge-triggered: listeners when the instance starts,
//! each socket as `SOCKET` or `ACCEPT` makes it; closing a socket removes
//! it. `NetPoll` with `max_events` returns the sockets whose readiness rose
//! (`epoll_pwait2`, nanosecond deadline); the guest keeps the readiness of
//! the rest (`kernel/net/src/host.rs`). The watch descriptor is not a
//! guest socket: every handle check refuses it.
//!
//! **`--net-bind-any`** (`BIND_NEW`): a guest `bind` on any port makes a
//! host socket bound there right then. The instance cannot do that bind
//! itself, and must not be let: Landlock grants it TCP port 0 only, a
//! root-started instance runs as `nobody` (no privileged port, which a
//! container's root may bind) in an empty network namespace (not the one
//! whose ports the caller means). So the waiting parent, which is outside
//! the sandbox with the caller's rights and namespace, binds for it: the
//! instance sends a [`BindRequest`] on a `SOCK_SEQPACKET` socket pair (its
//! end at [`NetPolicy::channel_fd`]) and receives the bound socket back
//! with `SCM_RIGHTS` ([`crate::relay::serve`] is the parent's half). The guest
//! could use the channel directly (it shares this process, and the filter
//! allows `sendto` on it and `recvmsg` on it alone); what it gets is what
//! the hypercall gives anyway, because the parent treats every request as
//! hostile: fixed size, family, type and option bits checked, the address
//! checked by the host's `bind`.
//!
//! **UDP without outbound** ([`crate::relay`]): a UDP socket the guest
//! held could `sendto` any address (the filter cannot read it), so without
//! `--net-outbound` the instance holds none: a published `/udp` port, and
//! a UDP socket the parent binds for `BIND_NEW`, stay in the parent, and
//! the instance gets one end of a socket pair at that descriptor. The
//! handlers here turn `RECV`/`SEND` on such a descriptor into one frame
//! each (a header with the address, then the datagram) and keep the
//! socket's recent senders, refusing a send to anyone else with `EACCES`;
//! the parent keeps the same record and is what holds.
//!
//! Like every hypercall handler, nothing here allocates.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use shoal_abi::{net_op, NetArgs, NetOp, NetPollArgs, NetPollFd, NET_MAX_POLL, NET_MAX_POLL_WATCH};
use shoal_loader::{GuestAddr, GuestMemory};

/// A system call through [`crate::sys::raw_syscall`] with up to six
/// arguments, each cast to `u64`: the result or the negative errno. The
/// hypercall handlers here run with the guest's FS base loaded
/// (`crate::hypercall::fast`), so they make every system call this way:
/// libc's wrappers would store `errno` through the guest's thread pointer.
macro_rules! sc {
    ($nr:expr, $a:expr) => {
        crate::sys::raw_syscall($nr, [$a as u64, 0, 0, 0, 0, 0])
    };
    ($nr:expr, $a:expr, $b:expr) => {
        crate::sys::raw_syscall($nr, [$a as u64, $b as u64, 0, 0, 0, 0])
    };
    ($nr:expr, $a:expr, $b:expr, $c:expr) => {
        crate::sys::raw_syscall($nr, [$a as u64, $b as u64, $c as u64, 0, 0, 0])
    };
    ($nr:expr, $a:expr, $b:expr, $c:expr, $d:expr) => {
        crate::sys::raw_syscall($nr, [$a as u64, $b as u64, $c as u64, $d as u64, 0, 0])
    };
    ($nr:expr, $a:expr, $b:expr, $c:expr, $d:expr, $e:expr) => {
        crate::sys::raw_syscall($nr, [$a as u64, $b as u64, $c as u64, $d as u64, $e as u64, 0])
    };
    ($nr:expr, $a:expr, $b:expr, $c:expr, $d:expr, $e:expr, $f:expr) => {
        crate::sys::raw_syscall($nr, [$a as u64, $b as u64, $c as u64, $d as u64, $e as u64, $f as u64])
    };
}

use shoal_hostcall::net::{neg, MAX_ADDR, MAX_IO, MAX_OPT};

/// The lowest descriptor number a guest socket can have.
pub const FIRST_SOCKET_FD: i32 = 3;

/// What the instance may do on the network, fixed before the guest runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetPolicy {
    /// Listening sockets handed over, at descriptors
    /// `FIRST_SOCKET_FD..FIRST_SOCKET_FD + listeners`.
    pub listeners: u32,
    /// Whether the guest may make sockets of its own and connect out.
    pub outbound: bool,
    /// `--net-bind-any`: the parent binds host sockets for the guest
    /// through the channel at [`NetPolicy::channel_fd`].
    pub bind_any: bool,
    /// UDP sockets from a bind (published `/udp` ports, `--net-bind-any`)
    /// are relayed through the waiting parent ([`crate::relay`]): without
    /// outbound, whenever the instance may hold one.
    pub relay: bool,
}

impl NetPolicy {
    /// Whether the instance has any networking at all.
    pub fn any(&self) -> bool {
        self.listeners > 0 || self.outbound || self.bind_any
    }

    /// The instance's end of the bind channel: right after the listening
    /// sockets (`None` without `--net-bind-any`).
    pub fn channel_fd(&self) -> Option<i32> {
        self.bind_any.then_some(FIRST_SOCKET_FD + self.listeners as i32)
    }

    /// The alias memory file of shared file mappings (`crate::protect`):
    /// the first descriptor after the listening sockets and the bind
    /// channel.
    pub fn alias_fd(&self) -> i32 {
        FIRST_SOCKET_FD + self.listeners as i32 + i32::from(self.bind_any)
    }
}

static LISTENERS: AtomicU32 = AtomicU32::new(0);
static OUTBOUND: AtomicBool = AtomicBool::new(false);
static BIND_ANY: AtomicBool = AtomicBool::new(false);
static RELAY: AtomicBool = AtomicBool::new(false);
/// The watch set's descriptor, or -1 without one.
static WATCH: AtomicI32 = AtomicI32::new(-1);
/// Most events one `NetPoll` collects (a stack buffer: handlers do not
/// allocate); the rest stay on the host's ready list for the next call.
const WATCH_BATCH: usize = 128;
/// What the watch set reports: readiness and its loss, edge-triggered.
const WATCH_EVENTS: u32 = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
/// The bits a report carries to the guest (`POLL*` values).
const REPORTED: u32 = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLERR | libc::EPOLLHUP) as u32;

/// The descriptor number of the watch set of an instance with policy
/// `pol`: right after its alias memory file ([`NetPolicy::alias_fd`]), so
/// fixed before the guest runs and the seccomp filter can pin the epoll
/// calls to it.
pub fn watch_fd(pol: &NetPolicy) -> i32 {
    pol.alias_fd() + 1
}

/// Makes the watch set (in the instance, after every descriptor from
/// [`watch_fd`] up was closed, before the guest) and registers the
/// listeners. Returns whether there is one: not on a host without
/// `epoll_pwait2` (Linux < 5.11), where the guest polls every socket.
pub fn open_watch(pol: &NetPolicy) -> Result<bool, i32> {
    let want = watch_fd(pol);
    // SAFETY: epoll_create1 takes no pointers.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return Err(crate::sys::errno());
    }
    if fd != want {
        // Cannot happen (every descriptor from `want` up is closed); refuse
        // rather than watch at a number the filter does not pin.
        // SAFETY: closes the descriptor just made.
        unsafe { libc::close(fd) };
        return Err(libc::EBADF);
    }
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    let ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ev` is one writable event, `ts` a valid timespec.
    let rc = unsafe { libc::syscall(libc::SYS_epoll_pwait2, fd, &mut ev, 1, &ts, core::ptr::null::<libc::sigset_t>(), 8usize) };
    if rc < 0 {
        let e = crate::sys::errno();
        // SAFETY: closes the descriptor just made.
        unsafe { libc::close(fd) };
        return if e == libc::ENOSYS { Ok(false) } else { Err(e) };
    }
    for l in FIRST_SOCKET_FD..FIRST_SOCKET_FD + pol.listeners as i32 {
        watch(fd, l)?;
    }
    WATCH.store(fd, Ordering::Relaxed);
    Ok(true)
}

/// Registers socket `sock` in watch set `set`.
pub(crate) fn watch(set: i32, sock: i32) -> Result<(), i32> {
    let mut ev = libc::epoll_event { events: WATCH_EVENTS, u64: sock as u64 };
    // SAFETY: `ev` is a valid event; epoll_ctl only reads it.
    let rc = unsafe { sc!(libc::SYS_epoll_ctl, set, libc::EPOLL_CTL_ADD, sock, &mut ev as *mut libc::epoll_event) };
    if rc < 0 {
        return Err(-rc as i32);
    }
    Ok(())
}

/// Registers a socket the guest just got, if there is a watch set; on
/// failure closes it and returns the error (`ENOMEM`, `ENOSPC` for too
/// many watches: what `accept` and `socket` give for want of resources).
fn watch_new(fd: i64) -> Result<i64, i64> {
    let set = WATCH.load(Ordering::Relaxed);
    if fd < 0 || set < 0 {
        return Ok(fd);
    }
    match watch(set, fd as i32) {
        Ok(()) => Ok(fd),
        Err(e) => {
            // SAFETY: closes the descriptor just made, which the guest
            // never saw.
            unsafe { sc!(libc::SYS_close, fd) };
            Err(neg(if e == libc::ENOSPC { libc::ENOMEM } else { e }))
        }
    }
}

/// Records the policy for the handlers (in the instance, before the guest).
pub fn install(p: NetPolicy) {
    LISTENERS.store(p.listeners, Ordering::Relaxed);
    OUTBOUND.store(p.outbound, Ordering::Relaxed);
    BIND_ANY.store(p.bind_any, Ordering::Relaxed);
    RELAY.store(p.relay, Ordering::Relaxed);
}

fn policy() -> NetPolicy {
    NetPolicy {
        listeners: LISTENERS.load(Ordering::Relaxed),
        outbound: OUTBOUND.load(Ordering::Relaxed),
        bind_any: BIND_ANY.load(Ordering::Relaxed),
        relay: RELAY.load(Ordering::Relaxed),
    }
}

/// A request on the bind channel: the arguments of `BIND_NEW`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BindRequest {
    /// `AF_INET` or `AF_INET6`.
    pub domain: u32,
    /// `SOCK_STREAM` or `SOCK_DGRAM`.
    pub ty: u32,
    /// `net_op::BIND_REUSEADDR`, `net_op::BIND_V6ONLY`.
    pub flags: u32,
    /// Bytes of `addr` used.
    pub addrlen: u32,
    /// The `sockaddr`.
    pub addr: [u8; MAX_ADDR as usize],
}

/// The parent's answer: 0 with the socket attached, or a positive errno;
/// for a relayed UDP socket ([`crate::relay`]: the attached socket is the
/// instance's end of the relay) `relayed` is 1 and `addr` is the address
/// the parent's UDP socket is bound to (what `getsockname` reports).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BindReply {
    pub(crate) errno: i32,
    pub(crate) relayed: u32,
    pub(crate) addrlen: u32,
    pub(crate) addr: [u8; crate::relay::ADDR],
}

/// Room for one `SCM_RIGHTS` descriptor (`CMSG_SPACE(sizeof(int))`),
/// aligned as a `cmsghdr`.
#[repr(C, align(8))]
pub(crate) struct OneFdControl(pub(crate) [u8; 24]);

/// `BIND_NEW` in the instance: asks the parent and takes the socket it
/// sends back (as the lowest free descriptor, which is >= 3: a guest
/// socket), recording it as relayed if the parent says it is. Allocates
/// nothing.
fn bind_through_parent(channel: i32, req: &BindRequest) -> Result<i64, i64> {
    let len = core::mem::size_of::<BindRequest>();
    // SAFETY: `req` is `len` initialised bytes; no address.
    let sent = unsafe { sc!(libc::SYS_sendto, channel, (req as *const BindRequest).cast::<u8>(), len, libc::MSG_NOSIGNAL, 0, 0) };
    if sent != len as i64 {
        return Err(if sent < 0 { sent } else { neg(libc::EIO) });
    }
    let mut reply = BindReply { errno: libc::EIO, relayed: 0, addrlen: 0, addr: [0; crate::relay::ADDR] };
    let mut ctl = OneFdControl([0; 24]);
    let mut iov = libc::iovec { iov_base: (&mut reply as *mut BindReply).cast(), iov_len: core::mem::size_of::<BindReply>() };
    // SAFETY: an all-zero msghdr is valid; the pointers are set below.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.0.as_mut_ptr().cast();
    msg.msg_controllen = ctl.0.len() as _;
    let got = loop {
        // SAFETY: `msg` points at `reply` and `ctl`, both live and of the
        // sizes given.
        let rc = unsafe { sc!(libc::SYS_recvmsg, channel, &mut msg as *mut libc::msghdr, libc::MSG_CMSG_CLOEXEC) };
        if rc == neg(libc::EINTR) {
            continue;
        }
        break rc;
    };
    if got < 0 {
        return Err(got);
    }
    // The descriptor, if one came: one SCM_RIGHTS message of one int.
    let mut fd = -1;
    if msg.msg_controllen >= 20 {
        // SAFETY: the kernel wrote at least a cmsghdr (16 bytes) and one int.
        let hdr: libc::cmsghdr = unsafe { core::ptr::read(ctl.0.as_ptr().cast()) };
        if hdr.cmsg_level == libc::SOL_SOCKET && hdr.cmsg_type == libc::SCM_RIGHTS && hdr.cmsg_len >= 20 {
            let mut b = [0u8; 4];
            b.copy_from_slice(&ctl.0[16..20]);
            fd = i32::from_ne_bytes(b);
        }
    }
    if got as usize != core::mem::size_of::<BindReply>() || (reply.errno == 0) != (fd >= 0) {
        if fd >= 0 {
            // SAFETY: a descriptor just received that nothing else knows.
            unsafe { sc!(libc::SYS_close, fd) };
        }
        return Err(neg(libc::EIO));
    }
    if reply.errno != 0 {
        return Err(neg(reply.errno));
    }
    if reply.relayed != 0 {
        let local = &reply.addr[..(reply.addrlen as usize).min(crate::relay::ADDR)];
        if let Err(e) = relay_add(fd, local) {
            // SAFETY: a descriptor just received that the guest never saw.
            unsafe { sc!(libc::SYS_close, fd) };
            return Err(e);
        }
    }
    Ok(i64::from(fd))
}

/// Most relayed UDP sockets an instance holds at once (published `/udp`
/// ports count too); a `--net-bind-any` UDP bind beyond is `ENOBUFS`.
pub const MAX_RELAYS: usize = 64;
/// Relayed sockets have descriptor numbers below this (a bitmap of them
/// makes the check on every send and receive one load).
const RELAY_FD_LIMIT: i32 = 1 << 16;

/// The instance's record of one relayed UDP socket: its descriptor (the
/// instance's end of the relay), the address the parent's socket is
/// bound to, and its recent senders. The parent keeps the same senders
/// and is what holds; this copy gives the guest the errno (`EACCES`) a
/// refused reply gets on hvt.
struct RelaySlot {
    fd: i32,
    local_len: u32,
    local: [u8; crate::relay::ADDR],
    peers: shoal_hostcall::net::RecentPeers,
}

struct RelayTable(core::cell::UnsafeCell<[RelaySlot; MAX_RELAYS]>);
// SAFETY: the table is used only by the hypercall handlers and the
// instance's set-up before the guest, all on the instance's one thread
// (the guest's threads are its kernel's own); no signal handler uses it.
unsafe impl Sync for RelayTable {}

static RELAYS: RelayTable = RelayTable(core::cell::UnsafeCell::new(
    [const { RelaySlot { fd: -1, local_len: 0, local: [0; crate::relay::ADDR], peers: shoal_hostcall::net::RecentPeers::EMPTY } }; MAX_RELAYS],
));
/// Which descriptors are relayed sockets, one bit each.
static RELAY_BITS: [AtomicU64; (RELAY_FD_LIMIT / 64) as usize] = [const { AtomicU64::new(0) }; (RELAY_FD_LIMIT / 64) as usize];

fn relay_bit(fd: i32) -> bool {
    fd < RELAY_FD_LIMIT && RELAY_BITS[(fd / 64) as usize].load(Ordering::Relaxed) & (1 << (fd % 64)) != 0
}

/// The record of relayed socket `fd`, if it is one.
fn relay_slot(fd: i32) -> Option<&'static mut RelaySlot> {
    if !relay_bit(fd) {
        return None;
    }
    // SAFETY: one thread only (see `RelayTable`), and no caller holds two
    // references from here at once.
    let t = unsafe { &mut *RELAYS.0.get() };
    t.iter_mut().find(|s| s.fd == fd)
}

/// Records `fd` as a relayed UDP socket whose parent-side socket is bound
/// to `local`: before the guest for published ports, at `BIND_NEW` for
/// `--net-bind-any`. `ENOBUFS` when the table is full.
pub fn relay_add(fd: i32, local: &[u8]) -> Result<(), i64> {
    if !(0..RELAY_FD_LIMIT).contains(&fd) {
        return Err(neg(libc::ENOBUFS));
    }
    // SAFETY: as in `relay_slot`.
    let t = unsafe { &mut *RELAYS.0.get() };
    let Some(s) = t.iter_mut().find(|s| s.fd < 0) else {
        return Err(neg(libc::ENOBUFS));
    };
    let n = local.len().min(crate::relay::ADDR);
    s.fd = fd;
    s.local_len = n as u32;
    s.local[..n].copy_from_slice(&local[..n]);
    s.peers.clear();
    RELAY_BITS[(fd / 64) as usize].fetch_or(1 << (fd % 64), Ordering::Relaxed);
    Ok(())
}

/// Forgets relayed socket `fd` (closed by the guest).
fn relay_remove(fd: i32) {
    if let Some(s) = relay_slot(fd) {
        s.fd = -1;
        RELAY_BITS[(fd / 64) as usize].fetch_and(!(1 << (fd % 64)), Ordering::Relaxed);
    }
}

/// `RECV` on a relayed socket: one frame (header, then the datagram) in
/// one `recvmsg`, the header's sender recorded and reported as the
/// datagram's source.
fn relay_recv(r: &mut RelaySlot, op: &mut NetOp, p: *mut u8, len: u64) -> Result<i64, i64> {
    let mut hdr = [0u8; crate::relay::HEADER];
    let mut iov = [libc::iovec { iov_base: hdr.as_mut_ptr().cast(), iov_len: hdr.len() }, libc::iovec { iov_base: p.cast(), iov_len: len as usize }];
    // SAFETY: an all-zero msghdr is valid; the pointers are set below.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = 2;
    // SAFETY: `msg` points at `hdr` and at `len` bytes of writable guest
    // memory (`p`), both live.
    let rc = unsafe { sc!(libc::SYS_recvmsg, r.fd, &mut msg as *mut libc::msghdr, op.flags as i32 | libc::MSG_DONTWAIT) };
    if rc < 0 {
        return Ok(rc);
    }
    let Some((from, n)) = crate::relay::parse_header(&hdr, rc as usize) else {
        // Only the parent writes frames; a short one is not a datagram.
        return Err(neg(libc::EIO));
    };
    r.peers.heard(from);
    if op.addr != 0 {
        op.a = from.len() as u64;
        addr_out(op, from, from.len() as u32)?;
    }
    Ok(n as i64)
}

/// `SEND` on a relayed socket: only to a recorded sender (else `EACCES`,
/// as hvt answers), as one frame in one `sendmsg`; the parent checks the
/// destination again before it sends.
fn relay_send(r: &RelaySlot, mem: &GuestMemory, op: &NetOp, p: *const u8, len: u64) -> Result<i64, i64> {
    if op.addr == 0 {
        // Never connected (connect needs outbound, which has no relays).
        return Err(neg(libc::EDESTADDRREQ));
    }
    let mut sa = [0u8; MAX_ADDR as usize];
    let alen = addr_in(mem, op, &mut sa)? as usize;
    if !r.peers.contains(&sa[..alen]) {
        return Err(neg(libc::EACCES));
    }
    if len > crate::relay::MAX_DATAGRAM as u64 {
        return Err(neg(libc::EMSGSIZE));
    }
    let hdr = crate::relay::header(&sa[..alen]);
    let iov =
        [libc::iovec { iov_base: hdr.as_ptr().cast_mut().cast(), iov_len: hdr.len() }, libc::iovec { iov_base: p.cast_mut().cast(), iov_len: len as usize }];
    // SAFETY: an all-zero msghdr is valid; the pointers are set below.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = 2;
    // SAFETY: `msg` points at `hdr` and at `len` bytes of guest memory.
    let rc = unsafe { sc!(libc::SYS_sendmsg, r.fd, &msg as *const libc::msghdr, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    Ok(if rc >= crate::relay::HEADER as i64 { rc - crate::relay::HEADER as i64 } else { rc })
}

fn handle_fd(h: i64) -> Result<i32, i64> {
    match i32::try_from(h) {
        Ok(fd) if fd >= FIRST_SOCKET_FD && fd != WATCH.load(Ordering::Relaxed) => Ok(fd),
        _ => Err(neg(libc::EBADF)),
    }
}

/// The guest range `[addr, addr + len)` as a host pointer, readable
/// (`write` false) or writable by the guest (`write` true).
fn range(mem: &GuestMemory, addr: u64, len: u64, write: bool) -> Result<*mut u8, i64> {
    if write && !crate::hypercall::writable(addr, len) {
        return Err(neg(libc::EFAULT));
    }
    mem.host_ptr(GuestAddr(addr), len).map_err(|_| neg(libc::EFAULT))
}

/// Copies an address from the guest into `buf`; returns its length.
fn addr_in(mem: &GuestMemory, op: &NetOp, buf: &mut [u8; MAX_ADDR as usize]) -> Result<u32, i64> {
    if op.addrlen > MAX_ADDR {
        return Err(neg(libc::EINVAL));
    }
    mem.read(GuestAddr(op.addr), &mut buf[..op.addrlen as usize]).map_err(|_| neg(libc::EFAULT))?;
    Ok(op.addrlen as u32)
}

/// Copies an address the host returned (`len` bytes of `buf`) to the
/// guest's `op.addr`, at most `op.addrlen` bytes, as Linux truncates.
fn addr_out(op: &NetOp, buf: &[u8], len: u32) -> Result<(), i64> {
    let n = shoal_hostcall::net::addr_out_len(op, len, buf.len());
    if n == 0 {
        return Ok(());
    }
    if !crate::hypercall::writable(op.addr, n) {
        return Err(neg(libc::EFAULT));
    }
    crate::hypercall::guest_mem().write(GuestAddr(op.addr), &buf[..n as usize]).map_err(|_| neg(libc::EFAULT))
}

fn one(mem: &GuestMemory, op: &mut NetOp) -> Result<i64, i64> {
    let pol = policy();
    let mut sa = [0u8; MAX_ADDR as usize];
    match op.op {
        net_op::SOCKET => {
            // The filter traps any other protocol (IPPROTO_MPTCP, whose
            // ports Landlock's TCP rules do not cover): answered by
            // `socket_args` as Linux answers a protocol it lacks.
            let (domain, ty, proto) = shoal_hostcall::net::socket_args(op, pol.outbound)?;
            // SAFETY: socket takes no pointers.
            watch_new(unsafe { sc!(libc::SYS_socket, domain, ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, proto) })
        }
        net_op::BIND | net_op::CONNECT => {
            let fd = handle_fd(op.handle)?;
            if !pol.outbound {
                return Err(neg(libc::EACCES));
            }
            let len = addr_in(mem, op, &mut sa)?;
            let nr = if op.op == net_op::BIND { libc::SYS_bind } else { libc::SYS_connect };
            // SAFETY: `sa` holds `len` initialised bytes.
            Ok(unsafe { sc!(nr, fd, sa.as_ptr(), len) })
        }
        net_op::BIND_NEW => {
            let Some(channel) = pol.channel_fd().filter(|_| pol.bind_any) else {
                return Err(neg(libc::EACCES));
            };
            let mut req = BindRequest { domain: op.a as u32, ty: op.b as u32, flags: op.flags, addrlen: 0, addr: [0; MAX_ADDR as usize] };
            req.addrlen = addr_in(mem, op, &mut req.addr)?;
            watch_new(bind_through_parent(channel, &req)?)
        }
        net_op::LISTEN => {
            let fd = handle_fd(op.handle)?;
            // SAFETY: listen takes no pointers.
            let rc = unsafe { sc!(libc::SYS_listen, fd, op.a.min(4096) as i32) };
            if rc == 0 && fd < FIRST_SOCKET_FD + pol.listeners as i32 {
                // An event loop (Node's libuv) listens and then waits in
                // epoll for the socket to be readable: it calls accept only
                // once a connection is there, so listening counts as the
                // first wait for a connection too.
                crate::template::note_accept_wait();
            }
            Ok(rc)
        }
        net_op::ACCEPT => {
            let fd = handle_fd(op.handle)?;
            if fd >= FIRST_SOCKET_FD + pol.listeners as i32 && !pol.outbound && !pol.bind_any {
                return Err(neg(libc::EINVAL));
            }
            let mut len = MAX_ADDR as libc::socklen_t;
            // SAFETY: `sa` and `len` are valid out-parameters of this size.
            let rc =
                watch_new(unsafe { sc!(libc::SYS_accept4, fd, sa.as_mut_ptr(), &mut len as *mut libc::socklen_t, libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) })?;
            if rc == neg(libc::EAGAIN) && fd < FIRST_SOCKET_FD + pol.listeners as i32 {
                crate::template::note_accept_wait();
            }
            if rc >= 0 && op.addr != 0 {
                op.a = u64::from(len);
                if let Err(e) = addr_out(op, &sa, len) {
                    // SAFETY: closes the descriptor just accepted, which
                    // the guest never saw.
                    unsafe { sc!(libc::SYS_close, rc) };
                    return Err(e);
                }
            }
            Ok(rc)
        }
        net_op::SEND => {
            let fd = handle_fd(op.handle)?;
            // A TCP Fast Open send connects, which Landlock does not see:
            // outbound only (the filter traps the flag otherwise).
            if op.flags as i32 & libc::MSG_FASTOPEN != 0 && !pol.outbound {
                return Err(neg(libc::EACCES));
            }
            let len = op.len.min(MAX_IO);
            let p = range(mem, op.buf, len, false)?;
            if let Some(r) = relay_slot(fd) {
                return relay_send(r, mem, op, p, len);
            }
            let (ap, alen) = if op.addr != 0 { (sa.as_ptr(), addr_in(mem, op, &mut sa)?) } else { (core::ptr::null(), 0) };
            let flags = op.flags as i32 | libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
            // SAFETY: `p` is `len` bytes of mapped guest memory; `ap` is
            // null or `alen` initialised bytes.
            Ok(unsafe { sc!(libc::SYS_sendto, fd, p, len, flags, ap, alen) })
        }
        net_op::RECV => {
            let fd = handle_fd(op.handle)?;
            let len = op.len.min(MAX_IO);
            let p = range(mem, op.buf, len, true)?;
            if let Some(r) = relay_slot(fd) {
                return relay_recv(r, op, p, len);
            }
            let mut alen = MAX_ADDR as libc::socklen_t;
            let flags = op.flags as i32 | libc::MSG_DONTWAIT;
            // The sender's address only when the guest asked for it (a
            // stream socket's read does not: the host then copies none).
            let (ap, lp) = if op.addr != 0 { (sa.as_mut_ptr(), &mut alen as *mut libc::socklen_t) } else { (core::ptr::null_mut(), core::ptr::null_mut()) };
            // SAFETY: `p` is `len` bytes of writable guest memory; `ap` and
            // `lp` are null or valid out-parameters.
            let rc = unsafe { sc!(libc::SYS_recvfrom, fd, p, len, flags, ap, lp) };
            if rc >= 0 && op.addr != 0 {
                op.a = u64::from(alen);
                addr_out(op, &sa, alen)?;
            }
            Ok(rc)
        }
        net_op::SHUTDOWN => {
            let fd = handle_fd(op.handle)?;
            // SAFETY: shutdown takes no pointers.
            Ok(unsafe { sc!(libc::SYS_shutdown, fd, op.a as i32) })
        }
        net_op::CLOSE => {
            let fd = handle_fd(op.handle)?;
            relay_remove(fd);
            // SAFETY: the descriptor is a guest socket, which the guest
            // gives up; nothing of the tender uses it.
            Ok(unsafe { sc!(libc::SYS_close, fd) })
        }
        net_op::SETSOCKOPT => {
            let fd = handle_fd(op.handle)?;
            if op.len > MAX_OPT {
                return Err(neg(libc::EINVAL));
            }
            let mut v = [0u8; MAX_OPT as usize];
            mem.read(GuestAddr(op.buf), &mut v[..op.len as usize]).map_err(|_| neg(libc::EFAULT))?;
            // Address reuse, which the filter traps (it cannot tell UDP
            // from TCP): SO_REUSEPORT would join a port group of another
            // process of this user, and SO_REUSEADDR on UDP shares a port
            // another process bound with no owner check (the newest socket
            // takes the unicast datagrams). SO_REUSEPORT is ENOPROTOOPT,
            // as on hvt; SO_REUSEADDR is accepted and not applied, since
            // programs set it before binding and do not expect it to fail
            // (Go on every TCP listener), and on TCP it changes nothing
            // here: a guest's TCP bind is port 0, a published port is
            // bound, and `--net-bind-any` binds carry it in the request.
            if op.a as i32 == libc::SOL_SOCKET {
                match op.b as i32 {
                    libc::SO_REUSEPORT => return Err(neg(libc::ENOPROTOOPT)),
                    libc::SO_REUSEADDR => return Ok(0),
                    _ => {}
                }
            } else if relay_bit(fd) {
                // A relayed socket's UDP socket is the parent's: options
                // of the IP levels are accepted and not applied (the
                // instance's end is a local socket pair, where they fail).
                return Ok(0);
            }
            // SAFETY: `v` holds `len` initialised bytes.
            Ok(unsafe { sc!(libc::SYS_setsockopt, fd, op.a as i32, op.b as i32, v.as_ptr(), op.len as u32) })
        }
        net_op::GETSOCKOPT => {
            let fd = handle_fd(op.handle)?;
            let mut v = [0u8; MAX_OPT as usize];
            let mut len = op.len.min(MAX_OPT) as libc::socklen_t;
            // SAFETY: `v` and `len` are valid out-parameters of this size.
            let rc = unsafe { sc!(libc::SYS_getsockopt, fd, op.a as i32, op.b as i32, v.as_mut_ptr(), &mut len as *mut libc::socklen_t) };
            if rc < 0 {
                return Ok(rc);
            }
            let n = u64::from(len).min(op.len).min(MAX_OPT);
            if n > 0 {
                range(mem, op.buf, n, true)?;
                mem.write(GuestAddr(op.buf), &v[..n as usize]).map_err(|_| neg(libc::EFAULT))?;
            }
            Ok(i64::from(len))
        }
        net_op::GETSOCKNAME | net_op::GETPEERNAME => {
            let fd = handle_fd(op.handle)?;
            if let Some(r) = relay_slot(fd) {
                // The parent's UDP socket's address; never connected.
                if op.op == net_op::GETPEERNAME {
                    return Err(neg(libc::ENOTCONN));
                }
                addr_out(op, &r.local, r.local_len)?;
                return Ok(i64::from(r.local_len));
            }
            let nr = if op.op == net_op::GETSOCKNAME { libc::SYS_getsockname } else { libc::SYS_getpeername };
            let mut len = MAX_ADDR as libc::socklen_t;
            // SAFETY: `sa` and `len` are valid out-parameters.
            let rc = unsafe { sc!(nr, fd, sa.as_mut_ptr(), &mut len as *mut libc::socklen_t) };
            if rc < 0 {
                return Ok(rc);
            }
            addr_out(op, &sa, len)?;
            Ok(i64::from(len))
        }
        _ => Err(neg(libc::ENOSYS)),
    }
}

/// The `Net` hypercall: carries out each operation of the batch, writing
/// each result into its `ret`. Returns how many were carried out, or a
/// negative errno for a batch that cannot be read.
pub fn batch(a: &NetArgs) -> i64 {
    let mem = crate::hypercall::guest_mem();
    shoal_hostcall::net::batch(&mem, crate::hypercall::writable, a, |op| one(&mem, op))
}

/// The `NetPoll` hypercall: `ppoll` on the guest's array (which has the
/// layout of `struct pollfd`) with the deadline, and with `max_events`
/// the watch set too ([`poll_watch`]). Returns the number of entries with
/// events, 0 on time-out, or a negative errno. A poll with nothing to wait
/// for and no deadline would never return: the caller stops the instance
/// instead.
pub fn poll(a: &mut NetPollArgs) -> Result<i64, ()> {
    a.nevents = 0;
    if a.max_events > 0 {
        return Ok(poll_watch(a));
    }
    if a.nfds > NET_MAX_POLL {
        return Ok(neg(libc::EINVAL));
    }
    if a.nfds == 0 && a.timeout_ns == u64::MAX {
        return Err(());
    }
    let size = core::mem::size_of::<NetPollFd>() as u64;
    let mem = crate::hypercall::guest_mem();
    let p = if a.nfds == 0 {
        core::ptr::null_mut()
    } else {
        match range(&mem, a.fds, a.nfds * size, true) {
            Ok(p) => p,
            Err(e) => return Ok(e),
        }
    };
    let timeout_ns = wait_ns(a.timeout_ns);
    let ts = timespec(timeout_ns);
    let tsp = if timeout_ns == u64::MAX { core::ptr::null() } else { &ts as *const libc::timespec };
    // SAFETY: `p` is `nfds` writable `pollfd`-shaped entries of guest
    // memory (NetPollFd has pollfd's layout); `tsp` is null or a valid
    // timespec; no signal mask.
    let rc = unsafe { sc!(libc::SYS_ppoll, p, a.nfds, tsp, core::ptr::null::<libc::sigset_t>(), 8) };
    if rc == neg(libc::EINTR) {
        return Ok(0);
    }
    Ok(rc)
}

/// The wait a `NetPoll` asking for `ns` makes: none when a forwarded
/// signal already waits in the guest's word (it came before this wait, so
/// it would not cut it short). Checked here, just before the host call,
/// the window left is the few instructions in between; the guest's
/// scheduler picks again after any wait that raised a signal.
fn wait_ns(ns: u64) -> u64 {
    if ns > 0 && crate::signals::forward_waiting() {
        0
    } else {
        ns
    }
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / 1_000_000_000).min(i64::MAX as u64) as _, tv_nsec: (ns % 1_000_000_000) as libc::c_long }
}

/// `NetPoll` with the watch set: waits for the guest's few level-triggered
/// entries (standard input) and the watch set at once — `epoll_pwait2`
/// alone when there are none, else `ppoll` with the watch descriptor
/// added — then collects up to `max_events` reports into the guest's
/// `events`. Sets `nevents`; returns the number of `fds` entries with
/// events. With no deadline and no socket ever ready this sleeps until a
/// signal: the guest asks only when it has sockets or input to wait for.
fn poll_watch(a: &mut NetPollArgs) -> i64 {
    let set = WATCH.load(Ordering::Relaxed);
    if set < 0 {
        return neg(libc::EINVAL);
    }
    if a.nfds > NET_MAX_POLL_WATCH || a.max_events > NET_MAX_POLL {
        return neg(libc::EINVAL);
    }
    let size = core::mem::size_of::<NetPollFd>() as u64;
    let mem = crate::hypercall::guest_mem();
    // No overflow: both counts are bounded above.
    if !crate::hypercall::writable(a.events, a.max_events * size) || (a.nfds > 0 && !crate::hypercall::writable(a.fds, a.nfds * size)) {
        return neg(libc::EFAULT);
    }
    let timeout_ns = wait_ns(a.timeout_ns);
    let ts = timespec(timeout_ns);
    let tsp = if timeout_ns == u64::MAX { core::ptr::null() } else { &ts as *const libc::timespec };
    let max = (a.max_events as usize).min(WATCH_BATCH);
    // Not zeroed (1.5 KiB a call, every wake-up of a busy server): the
    // host writes the first `rc` entries and only those are read.
    let mut evs = core::mem::MaybeUninit::<[libc::epoll_event; WATCH_BATCH]>::uninit();
    let zero = timespec(0);
    let mut ret = 0;
    let wait_tsp = if a.nfds == 0 {
        tsp
    } else {
        // Standard input and the like: ppoll on them and the watch set.
        let n = a.nfds as usize;
        let mut pfds = [libc::pollfd { fd: -1, events: 0, revents: 0 }; NET_MAX_POLL_WATCH as usize + 1];
        for (i, p) in pfds.iter_mut().enumerate().take(n) {
            let Ok(e) = mem.read_obj::<NetPollFd>(GuestAddr(a.fds + i as u64 * size)) else {
                return neg(libc::EFAULT);
            };
            // Only what the guest may name: stdin and its own sockets.
            let ok = e.handle == shoal_abi::STDIN_HANDLE || handle_fd(i64::from(e.handle)).is_ok();
            *p = libc::pollfd { fd: if ok { e.handle } else { -1 }, events: e.events, revents: 0 };
        }
        pfds[n] = libc::pollfd { fd: set, events: libc::POLLIN, revents: 0 };
        // SAFETY: `pfds` holds `n + 1` valid entries; `tsp` is null or a
        // valid timespec; no signal mask.
        let rc = unsafe { sc!(libc::SYS_ppoll, pfds.as_mut_ptr(), n + 1, tsp, core::ptr::null::<libc::sigset_t>(), 8) };
        if rc < 0 {
            return if rc == neg(libc::EINTR) { 0 } else { rc };
        }
        for (i, p) in pfds.iter().enumerate().take(n) {
            let mut e = mem.read_obj::<NetPollFd>(GuestAddr(a.fds + i as u64 * size)).unwrap_or_default();
            e.revents = if rc > 0 { p.revents } else { 0 };
            if e.revents != 0 {
                ret += 1;
            }
            // Cannot fail: the array was checked writable.
            let _ = mem.write_obj(GuestAddr(a.fds + i as u64 * size), &e);
        }
        if pfds[n].revents == 0 {
            return ret;
        }
        &zero as *const libc::timespec
    };
    // SAFETY: `evs` has room for `max` events; `wait_tsp` is null or a
    // valid timespec; no signal mask.
    let rc = unsafe { sc!(libc::SYS_epoll_pwait2, set, evs.as_mut_ptr().cast::<libc::epoll_event>(), max, wait_tsp, core::ptr::null::<libc::sigset_t>(), 8) };
    if rc < 0 {
        return if rc == neg(libc::EINTR) { ret } else { rc };
    }
    let got = (rc as usize).min(max);
    // SAFETY: epoll_pwait2 wrote `rc` entries (at most `max`) at the
    // array's start; `got` is no more than that.
    let evs = unsafe { core::slice::from_raw_parts(evs.as_ptr().cast::<libc::epoll_event>(), got) };
    for (i, ev) in evs.iter().enumerate() {
        let r = NetPollFd { handle: ev.u64 as i32, events: 0, revents: (ev.events & REPORTED) as u16 as i16 };
        // Cannot fail: the array was checked writable.
        let _ = mem.write_obj(GuestAddr(a.events + i as u64 * size), &r);
    }
    a.nevents = got as u64;
    ret
}

const _: () = assert!(core::mem::size_of::<NetPollFd>() == core::mem::size_of::<libc::pollfd>());
