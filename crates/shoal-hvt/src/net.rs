//! Host-socket passthrough on hvt (a guest socket is a host socket): the `Net` and `NetPoll`
//! hypercalls. The VMM owns the instance's host sockets; the guest names
//! them by **handles**, indexes into a table the VMM keeps ([`Net`]), never
//! by the VMM's descriptor numbers. The VMM process also holds the KVM,
//! VM and vCPU descriptors, the console and (mode `pool`) pool files: a
//! guest that could name those could `close` the vCPU or `recv` from a
//! file, so every handle that is not in the table is `EBADF` (and
//! `POLLNVAL` in a poll).
//!
//! The batch, the bounds on what is copied and the checks of a new
//! socket are shared with spt (`shoal_hostcall::net`); the rest of the
//! results are spt's (`shoal_spt::net`), errno for errno: `-EFAULT`
//! for a buffer outside guest memory (or, for results, outside *writable*
//! guest memory), `-EINVAL` for an oversized address, option or batch,
//! `-EBADF` for a handle, `-ENOSYS` for an unknown operation, `-EACCES`
//! for `socket`/`bind`/`connect` without outbound. On spt the guest could
//! make the host calls itself, so seccomp and Landlock bound it; on hvt it
//! cannot, so the rules Landlock enforces there are enforced here: a TCP
//! socket of the guest binds port 0 only; and with an allow-list
//! (`--net-allow`) every `connect` and `sendto` destination must match a
//! rule (a send to `AF_UNSPEC`, which Linux's UDP takes as `AF_INET`,
//! matches none), except a UDP listener's reply to a recent sender.
//! Without outbound the guest has no traffic of its own: no
//! `MSG_FASTOPEN` (a send that connects) and no addressed send but such a
//! reply (`EACCES`). Socket protocols
//! are the default, TCP and UDP (`shoal_hostcall::net::protocol_allowed`). The VMM may run
//! as root (a FaaS host), so what only privilege allows is refused too: a
//! UDP bind below port 1024, and socket options outside a list of
//! ordinary ones ([`option_allowed`]; `ENOPROTOOPT`, as for an option the
//! host does not know); `SO_REUSEADDR` on UDP is accepted but not applied
//! (it would let the guest share a port a host service bound).
//!
//! With `--net-bind-any` ([`Net::with_bind_any`]) the guest may also ask
//! for a host socket bound to any address and port (`BIND_NEW`): the VMM
//! binds it with its own rights, as the process of a container binds in
//! its network namespace, so the privileged-port rule above is the host's
//! (a VMM running as root may bind port 80 for the guest, one running as
//! an ordinary user gets `EACCES`, as that user would). Such a socket is a
//! listener of the table, like a published port.
//!
//! Host sockets are non-blocking (`SOCK_NONBLOCK`, `MSG_DONTWAIT`): the
//! guest kernel blocks its threads, and the instance sleeps only in
//! `NetPoll`, which is `ppoll` on the table's descriptors with the guest's
//! deadline, so an idle instance costs no CPU.
//!
//! **The watch set** (as on spt): the VMM keeps one epoll instance with
//! every table entry registered edge-triggered under its handle (listeners
//! from the start, each socket as `SOCKET` or `ACCEPT` adds it; dropping an
//! entry closes it, which removes it). `NetPoll` with `max_events` reports
//! the handles whose readiness rose (`epoll_pwait2`), so a wait costs time
//! proportional to the ready sockets, not to all of them.

use crate::hypercall::Guest;
use shoal_abi::{net_op, NetArgs, NetOp, NetPollArgs, NetPollFd, NET_MAX_POLL, NET_MAX_POLL_WATCH};
use shoal_loader::net::Allow;
use shoal_loader::GuestAddr;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The lowest handle (as on spt, where handles are descriptors above
/// stdio).
pub const FIRST_HANDLE: i64 = 3;
use shoal_hostcall::net::{neg, RecentPeers, MAX_ADDR, MAX_IO, MAX_OPT};
/// Below this port a bind needs privilege the VMM may have and the guest
/// must not borrow.
const FIRST_UNPRIVILEGED_PORT: u16 = 1024;

/// What a table entry is: it decides which operations the policy allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A listener the caller published or handed over.
    Listener,
    /// A socket the guest made (outbound only); `tcp`: `SOCK_STREAM`.
    Own { tcp: bool },
    /// A connection accepted on a listener.
    Accepted,
}

struct Sock {
    fd: OwnedFd,
    kind: Kind,
    /// A datagram (UDP) socket.
    dgram: bool,
    /// A UDP listener's recent senders, to which it may always reply
    /// (without outbound, the only destinations an addressed send on it
    /// may name; the last `shoal_hostcall::net::MAX_PEERS`, as spt's relay
    /// keeps them). Made at its first datagram.
    peers: Option<Box<RecentPeers>>,
}

impl Sock {
    fn new(fd: OwnedFd, kind: Kind, dgram: bool) -> Sock {
        Sock { fd, kind, dgram, peers: None }
    }
}

/// Whether `fd` is a datagram socket (`SO_TYPE`).
fn is_dgram(fd: RawFd) -> bool {
    let mut ty: libc::c_int = 0;
    let mut len = core::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `ty` and `len` are valid out-parameters of this size.
    let rc = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE, (&mut ty as *mut libc::c_int).cast(), &mut len) };
    rc == 0 && ty == libc::SOCK_DGRAM
}

/// Exit counts of the network hypercalls, for `SHOAL_HVT_STATS`.
#[derive(Clone, Copy, Debug, Default)]
pub struct NetStats {
    /// `Net` hypercalls.
    pub batches: u64,
    /// Operations in them.
    pub ops: u64,
    /// `NetPoll` hypercalls.
    pub polls: u64,
    /// Of those, the ones that slept (a non-zero deadline).
    pub waits: u64,
}

/// A `NetPoll` with no entries and no deadline: nothing could end it.
#[derive(Debug)]
pub struct NothingToWaitFor;

/// The instance's host sockets and what it may do with them.
pub struct Net {
    /// Handle `FIRST_HANDLE + i` is `socks[i]`.
    socks: Vec<Option<Sock>>,
    outbound: bool,
    allow: Vec<Allow>,
    /// `--net-bind-any`: `BIND_NEW` is allowed.
    bind_any: bool,
    /// Scratch for `NetPoll` (kept to avoid an allocation per exit).
    pollfds: Vec<libc::pollfd>,
    entries: Vec<NetPollFd>,
    /// The watch set (module docs), if the host has `epoll_pwait2`.
    watch: Option<OwnedFd>,
    /// Scratch for the watch set's reports.
    evbuf: Vec<libc::epoll_event>,
    /// Counts, for the statistics line.
    pub stats: NetStats,
    /// An `accept` on a listener found nothing (a template's ready point
    /// is the next wait that sleeps: `crate::template`).
    accept_waited: bool,
}

/// Most reports one `NetPoll` collects; the rest stay on the host's ready
/// list for the next call.
const WATCH_BATCH: usize = 256;
/// What the watch set reports: readiness and its loss, edge-triggered.
const WATCH_EVENTS: u32 = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
/// The bits a report carries to the guest (`POLL*` values).
const REPORTED: u32 = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLERR | libc::EPOLLHUP) as u32;

/// The wait a `NetPoll` asking for `ns` makes: none when a forwarded
/// signal already waits in the guest's word (it came before this wait, so
/// it would not cut it short). Checked here, just before the host call,
/// the window left is the few instructions in between; the guest's
/// scheduler picks again after any wait that raised a signal.
fn wait_ns(ns: u64) -> u64 {
    if ns > 0 && crate::forward::waiting_in_word() {
        0
    } else {
        ns
    }
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / 1_000_000_000).min(i64::MAX as u64) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long }
}

/// A new watch set, or `None` when the host cannot make one or lacks
/// `epoll_pwait2` (Linux < 5.11): the guest then polls every socket.
fn open_watch() -> Option<OwnedFd> {
    // SAFETY: epoll_create1 takes no pointers.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just created and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    let ts = timespec(0);
    // SAFETY: `ev` is one writable event, `ts` a valid timespec.
    let rc = unsafe { libc::syscall(libc::SYS_epoll_pwait2, fd.as_raw_fd(), &mut ev, 1, &ts, core::ptr::null::<libc::sigset_t>(), 8usize) };
    (rc >= 0).then_some(fd)
}

/// Registers `fd` in watch set `set` under `handle`.
fn watch(set: &OwnedFd, fd: RawFd, handle: i64) -> Result<(), i32> {
    let mut ev = libc::epoll_event { events: WATCH_EVENTS, u64: handle as u64 };
    // SAFETY: `ev` is a valid event; epoll_ctl only reads it.
    if unsafe { libc::epoll_ctl(set.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
        return Err(errno());
    }
    Ok(())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// A libc call's result as a value or a negative errno.
fn ret(rc: libc::c_long) -> i64 {
    if rc < 0 {
        neg(errno())
    } else {
        rc
    }
}

/// Whether the guest may set option `name` at `level`: ordinary options
/// only. Left out on purpose: what needs `CAP_NET_ADMIN`/`CAP_NET_RAW`
/// (`SO_MARK`, `SO_BINDTODEVICE`, `SO_PRIORITY`, `*BUFFORCE`,
/// `IP_TRANSPARENT`, `TCP_REPAIR`), what makes the host load a kernel
/// module (`TCP_CONGESTION`, `TCP_ULP`), and `SO_REUSEPORT` (a socket
/// could join another process's port group of the same user, root
/// included).
pub fn option_allowed(level: i32, name: i32) -> bool {
    match level {
        libc::SOL_SOCKET => matches!(
            name,
            libc::SO_REUSEADDR
                | libc::SO_KEEPALIVE
                | libc::SO_BROADCAST
                | libc::SO_LINGER
                | libc::SO_SNDBUF
                | libc::SO_RCVBUF
                | libc::SO_OOBINLINE
                | libc::SO_RCVLOWAT
                | libc::SO_RCVTIMEO
                | libc::SO_SNDTIMEO
                | libc::SO_TIMESTAMP
                | libc::SO_TIMESTAMPNS
        ),
        libc::IPPROTO_TCP => matches!(
            name,
            libc::TCP_NODELAY
                | libc::TCP_MAXSEG
                | libc::TCP_CORK
                | libc::TCP_KEEPIDLE
                | libc::TCP_KEEPINTVL
                | libc::TCP_KEEPCNT
                | libc::TCP_SYNCNT
                | libc::TCP_LINGER2
                | libc::TCP_DEFER_ACCEPT
                | libc::TCP_WINDOW_CLAMP
                | libc::TCP_QUICKACK
                | libc::TCP_USER_TIMEOUT
                | libc::TCP_FASTOPEN
                | libc::TCP_NOTSENT_LOWAT
        ),
        libc::IPPROTO_IP => matches!(
            name,
            libc::IP_TOS
                | libc::IP_TTL
                | libc::IP_RECVERR
                | libc::IP_PKTINFO
                | libc::IP_RECVTOS
                | libc::IP_MTU_DISCOVER
                | libc::IP_MULTICAST_TTL
                | libc::IP_MULTICAST_LOOP
        ),
        libc::IPPROTO_IPV6 => matches!(
            name,
            libc::IPV6_V6ONLY
                | libc::IPV6_UNICAST_HOPS
                | libc::IPV6_TCLASS
                | libc::IPV6_RECVERR
                | libc::IPV6_MTU_DISCOVER
                | libc::IPV6_RECVPKTINFO
                | libc::IPV6_MULTICAST_HOPS
                | libc::IPV6_MULTICAST_LOOP
        ),
        _ => false,
    }
}

/// Where a `sockaddr` points, for the allow-list.
#[derive(Debug, PartialEq, Eq)]
enum Dest {
    /// An `AF_INET`/`AF_INET6` address.
    Addr(SocketAddr),
    /// `AF_UNSPEC`: `connect` dissolves an association and reaches
    /// nothing; but a UDP `sendto` takes it as `AF_INET` and sends to the
    /// IPv4 address that follows, so a send to it is refused.
    Unspec,
    /// Anything else (another family, too short).
    Other,
}

fn dest(sa: &[u8]) -> Dest {
    let Some(fam) = sa.get(..2).map(|f| u16::from_ne_bytes([f[0], f[1]])) else {
        return Dest::Other;
    };
    let port = |sa: &[u8]| u16::from_be_bytes([sa[2], sa[3]]);
    match i32::from(fam) {
        libc::AF_UNSPEC => Dest::Unspec,
        libc::AF_INET if sa.len() >= 16 => {
            let ip = Ipv4Addr::new(sa[4], sa[5], sa[6], sa[7]);
            Dest::Addr(SocketAddr::V4(SocketAddrV4::new(ip, port(sa))))
        }
        // Linux takes an IPv6 address without its scope id (24 bytes).
        libc::AF_INET6 if sa.len() >= 24 => {
            let mut b = [0u8; 16];
            b.copy_from_slice(&sa[8..24]);
            Dest::Addr(SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(b), port(sa), 0, 0)))
        }
        _ => Dest::Other,
    }
}

impl Net {
    /// A table holding `listeners` (handles `FIRST_HANDLE..`, in order).
    /// With `outbound`, the guest may make sockets of its own; a non-empty
    /// `allow` limits where they go.
    pub fn new(listeners: Vec<OwnedFd>, outbound: bool, allow: Vec<Allow>) -> Net {
        let socks: Vec<Option<Sock>> = listeners
            .into_iter()
            .map(|fd| {
                let dgram = is_dgram(fd.as_raw_fd());
                Some(Sock::new(fd, Kind::Listener, dgram))
            })
            .collect();
        let watch = open_watch()
            .filter(|set| socks.iter().enumerate().all(|(i, s)| s.as_ref().is_none_or(|s| watch(set, s.fd.as_raw_fd(), FIRST_HANDLE + i as i64).is_ok())));
        Net {
            socks,
            outbound,
            allow,
            bind_any: false,
            pollfds: Vec::new(),
            entries: Vec::new(),
            watch,
            evbuf: Vec::new(),
            stats: NetStats::default(),
            accept_waited: false,
        }
    }

    /// With `on`, the guest may have host sockets bound to any port
    /// (`BIND_NEW`; the module docs say with what rights).
    pub fn with_bind_any(mut self, on: bool) -> Net {
        self.bind_any = on;
        self
    }

    /// Whether there is a watch set (boot info `NET_WATCH`).
    pub fn watching(&self) -> bool {
        self.watch.is_some()
    }

    /// Whether an `accept` on a listener has found nothing yet.
    pub fn accept_waited(&self) -> bool {
        self.accept_waited
    }

    /// The handle of the first socket that is not a listener, if the
    /// guest holds one (a template holding it cannot be copied: the
    /// socket would be every copy's).
    pub fn first_own_socket(&self) -> Option<i64> {
        self.socks.iter().position(|s| s.as_ref().is_some_and(|s| s.kind != Kind::Listener)).map(|i| FIRST_HANDLE + i as i64)
    }

    /// How many listeners the table holds.
    pub fn listeners(&self) -> usize {
        self.socks.iter().filter(|s| s.as_ref().is_some_and(|s| s.kind == Kind::Listener)).count()
    }

    /// A copy of a template: its own listening sockets, in the template's
    /// order, in place of the template's (which the copy closes), and its
    /// own watch set with them (an inherited epoll instance would be the
    /// template's and every sibling's). `fds` must be as many as
    /// [`Net::listeners`].
    pub fn make_own(&mut self, fds: Vec<OwnedFd>) -> Result<(), i32> {
        let mut fds = fds.into_iter();
        for s in self.socks.iter_mut().flatten().filter(|s| s.kind == Kind::Listener) {
            let fd = fds.next().ok_or(libc::EINVAL)?;
            // The guest's accept must not block the VMM.
            // SAFETY: fcntl on a descriptor this table owns; status flags only.
            if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } < 0 {
                return Err(errno());
            }
            s.dgram = is_dgram(fd.as_raw_fd());
            s.peers = None;
            s.fd = fd;
        }
        if fds.next().is_some() {
            return Err(libc::EINVAL);
        }
        if self.watch.is_some() {
            let set = open_watch().ok_or(libc::ENOMEM)?;
            for (i, s) in self.socks.iter().enumerate() {
                if let Some(s) = s {
                    watch(&set, s.fd.as_raw_fd(), FIRST_HANDLE + i as i64)?;
                }
            }
            self.watch = Some(set);
        }
        self.accept_waited = false;
        Ok(())
    }

    fn get(&self, h: i64) -> Result<&Sock, i64> {
        let i = h.checked_sub(FIRST_HANDLE).and_then(|i| usize::try_from(i).ok()).ok_or(neg(libc::EBADF))?;
        self.socks.get(i).and_then(Option::as_ref).ok_or(neg(libc::EBADF))
    }

    fn fd(&self, h: i64) -> Result<RawFd, i64> {
        self.get(h).map(|s| s.fd.as_raw_fd())
    }

    /// Puts `fd` in the lowest free slot and in the watch set; returns its
    /// handle, or (closing `fd`) `-ENOMEM` when the watch set cannot take
    /// it (what `accept` and `socket` give for want of resources).
    fn insert(&mut self, fd: OwnedFd, kind: Kind, dgram: bool) -> Result<i64, i64> {
        let next = FIRST_HANDLE + self.socks.iter().position(Option::is_none).unwrap_or(self.socks.len()) as i64;
        if let Some(set) = &self.watch {
            watch(set, fd.as_raw_fd(), next).map_err(|_| neg(libc::ENOMEM))?;
        }
        Ok(self.put(fd, kind, dgram))
    }

    /// Puts `fd` in the lowest free slot; returns its handle.
    fn put(&mut self, fd: OwnedFd, kind: Kind, dgram: bool) -> i64 {
        let s = Some(Sock::new(fd, kind, dgram));
        let i = match self.socks.iter().position(Option::is_none) {
            Some(i) => {
                self.socks[i] = s;
                i
            }
            None => {
                self.socks.push(s);
                self.socks.len() - 1
            }
        };
        FIRST_HANDLE + i as i64
    }

    /// Whether the allow-list (if any) lets the guest reach `sa` with a
    /// `connect` (`send` false) or an addressed send (`send` true): an
    /// `AF_UNSPEC` destination passes only in a `connect`, which dissolves.
    fn allowed(&self, sa: &[u8], send: bool) -> bool {
        if self.allow.is_empty() {
            return true;
        }
        match dest(sa) {
            Dest::Addr(a) => self.allow.iter().any(|r| r.matches(&a)),
            Dest::Unspec => !send,
            Dest::Other => false,
        }
    }

    /// Whether an addressed send on `s` may go to `sa`: a UDP socket from a
    /// bind (a published port or `--net-bind-any`) may reply to one of its
    /// recent senders; anything else needs outbound and the allow-list.
    /// Without outbound the guest has no traffic of its own (on a TCP
    /// socket the address is ignored, but with `MSG_FASTOPEN` it connects,
    /// which `send` refuses before).
    fn send_allowed(&self, s: &Sock, sa: &[u8]) -> bool {
        let reply = s.kind == Kind::Listener && s.dgram && s.peers.as_ref().is_some_and(|p| p.contains(sa));
        reply || (self.outbound && self.allowed(sa, true))
    }

    /// The `Net` hypercall: carries out each operation of the batch, writing
    /// each result into its `ret`. Returns how many were carried out, or a
    /// negative errno for a batch that cannot be read.
    pub fn batch(&mut self, g: &Guest<'_>, a: &NetArgs) -> i64 {
        self.stats.batches += 1;
        shoal_hostcall::net::batch(
            g.mem,
            |addr, len| g.read_only.writable(g.mem, addr, len),
            a,
            |op| {
                self.stats.ops += 1;
                self.one(g, op)
            },
        )
    }

    /// The guest range `[addr, addr + len)` as a host pointer, readable
    /// (`write` false) or writable by the guest (`write` true).
    fn range(g: &Guest<'_>, addr: u64, len: u64, write: bool) -> Result<*mut u8, i64> {
        if write && !g.read_only.writable(g.mem, addr, len) {
            return Err(neg(libc::EFAULT));
        }
        g.mem.host_ptr(GuestAddr(addr), len).map_err(|_| neg(libc::EFAULT))
    }

    /// Copies the operation's address from the guest; returns its length.
    fn addr_in(g: &Guest<'_>, op: &NetOp, buf: &mut [u8; MAX_ADDR as usize]) -> Result<usize, i64> {
        if op.addrlen > MAX_ADDR {
            return Err(neg(libc::EINVAL));
        }
        let n = op.addrlen as usize;
        g.mem.read(GuestAddr(op.addr), &mut buf[..n]).map_err(|_| neg(libc::EFAULT))?;
        Ok(n)
    }

    /// Copies an address the host returned to the guest's `op.addr`, at
    /// most `op.addrlen` bytes (Linux truncates too), into writable memory.
    fn addr_out(g: &Guest<'_>, op: &NetOp, buf: &[u8], len: libc::socklen_t) -> Result<(), i64> {
        let n = shoal_hostcall::net::addr_out_len(op, len, buf.len());
        if n == 0 {
            return Ok(());
        }
        if !g.read_only.writable(g.mem, op.addr, n) {
            return Err(neg(libc::EFAULT));
        }
        g.mem.write(GuestAddr(op.addr), &buf[..n as usize]).map_err(|_| neg(libc::EFAULT))
    }

    /// Remembers `from`, the sender of a datagram received on `handle`, if
    /// that is a UDP listener (the replies [`Net::send_allowed`] lets go).
    fn heard(&mut self, handle: i64, from: &[u8]) {
        let Some(Some(s)) = usize::try_from(handle - FIRST_HANDLE).ok().and_then(|i| self.socks.get_mut(i)) else { return };
        if s.kind != Kind::Listener || !s.dgram {
            return;
        }
        s.peers.get_or_insert_with(Box::default).heard(from);
    }

    fn one(&mut self, g: &Guest<'_>, op: &mut NetOp) -> Result<i64, i64> {
        let mut sa = [0u8; MAX_ADDR as usize];
        match op.op {
            net_op::SOCKET => {
                let (domain, ty, proto) = shoal_hostcall::net::socket_args(op, self.outbound)?;
                // SAFETY: socket takes no pointers.
                let fd = unsafe { libc::socket(domain, ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, proto) };
                if fd < 0 {
                    return Err(neg(errno()));
                }
                // SAFETY: `fd` was just created and nothing else owns it.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                self.insert(fd, Kind::Own { tcp: ty == libc::SOCK_STREAM }, ty == libc::SOCK_DGRAM)
            }
            net_op::BIND | net_op::CONNECT => {
                let s = self.get(op.handle)?;
                let (fd, kind) = (s.fd.as_raw_fd(), s.kind);
                if !self.outbound {
                    return Err(neg(libc::EACCES));
                }
                let len = Self::addr_in(g, op, &mut sa)?;
                let addr = &sa[..len];
                if op.op == net_op::BIND {
                    // The port is bytes 2-3 for AF_INET, AF_INET6 and the
                    // AF_UNSPEC Linux takes as AF_INET; a shorter address
                    // the host refuses itself.
                    let port = if len >= 4 { u16::from_be_bytes([addr[2], addr[3]]) } else { 0 };
                    let udp = kind == Kind::Own { tcp: false };
                    // As Landlock on spt: TCP binds port 0 only (published
                    // ports are the caller's to give); UDP not below 1024.
                    if port != 0 && (!udp || port < FIRST_UNPRIVILEGED_PORT) {
                        return Err(neg(libc::EACCES));
                    }
                } else if !self.allowed(addr, false) {
                    return Err(neg(libc::EACCES));
                }
                let p = addr.as_ptr().cast::<libc::sockaddr>();
                // SAFETY: `p` points at `len` (<= 128) initialised bytes.
                let rc = unsafe {
                    if op.op == net_op::BIND {
                        libc::bind(fd, p, len as libc::socklen_t)
                    } else {
                        libc::connect(fd, p, len as libc::socklen_t)
                    }
                };
                Ok(ret(rc.into()))
            }
            net_op::BIND_NEW => {
                if !self.bind_any {
                    return Err(neg(libc::EACCES));
                }
                let len = Self::addr_in(g, op, &mut sa)?;
                let fd = shoal_loader::net::bind_new(op.a as i32, op.b as i32, op.flags, &sa[..len]).map_err(neg)?;
                self.insert(fd, Kind::Listener, op.b as i32 == libc::SOCK_DGRAM)
            }
            net_op::LISTEN => {
                let fd = self.fd(op.handle)?;
                // SAFETY: listen takes no pointers.
                Ok(ret(unsafe { libc::listen(fd, op.a.min(4096) as i32) }.into()))
            }
            net_op::ACCEPT => {
                let s = self.get(op.handle)?;
                if s.kind != Kind::Listener && !self.outbound {
                    return Err(neg(libc::EINVAL));
                }
                let fd = s.fd.as_raw_fd();
                let mut len = MAX_ADDR as libc::socklen_t;
                // SAFETY: `sa` and `len` are valid out-parameters of this size.
                let nfd = unsafe { libc::accept4(fd, sa.as_mut_ptr().cast(), &mut len, libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) };
                if nfd < 0 {
                    let e = errno();
                    if e == libc::EAGAIN && s.kind == Kind::Listener {
                        self.accept_waited = true;
                    }
                    return Ok(neg(e));
                }
                // SAFETY: `nfd` was just accepted and nothing else owns it.
                let nfd = unsafe { OwnedFd::from_raw_fd(nfd) };
                if op.addr != 0 {
                    op.a = u64::from(len);
                    // On failure `nfd` is dropped (closed): the guest never
                    // saw it.
                    Self::addr_out(g, op, &sa, len)?;
                }
                self.insert(nfd, Kind::Accepted, false)
            }
            net_op::SEND => {
                let s = self.get(op.handle)?;
                let fd = s.fd.as_raw_fd();
                // A TCP Fast Open send connects: outbound only.
                if op.flags as i32 & libc::MSG_FASTOPEN != 0 && !self.outbound {
                    return Err(neg(libc::EACCES));
                }
                let len = op.len.min(MAX_IO);
                let p = Self::range(g, op.buf, len, false)?;
                let (ap, alen) = if op.addr != 0 {
                    let n = Self::addr_in(g, op, &mut sa)?;
                    if !self.send_allowed(s, &sa[..n]) {
                        return Err(neg(libc::EACCES));
                    }
                    (sa.as_ptr().cast::<libc::sockaddr>(), n as libc::socklen_t)
                } else {
                    (core::ptr::null(), 0)
                };
                let flags = op.flags as i32 | libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
                // SAFETY: `p` is `len` bytes of guest memory, mapped for the
                // VMM's lifetime; `ap` is null or `alen` initialised bytes.
                Ok(ret(unsafe { libc::sendto(fd, p.cast(), len as usize, flags, ap, alen) } as libc::c_long))
            }
            net_op::RECV => {
                let fd = self.fd(op.handle)?;
                let len = op.len.min(MAX_IO);
                let p = Self::range(g, op.buf, len, true)?;
                let mut alen = MAX_ADDR as libc::socklen_t;
                let flags = op.flags as i32 | libc::MSG_DONTWAIT;
                // SAFETY: `p` is `len` bytes of writable guest memory; `sa`
                // and `alen` are valid out-parameters.
                let rc = unsafe { libc::recvfrom(fd, p.cast(), len as usize, flags, sa.as_mut_ptr().cast(), &mut alen) };
                let rc = ret(rc as libc::c_long);
                if rc >= 0 {
                    self.heard(op.handle, &sa[..(alen as usize).min(sa.len())]);
                }
                if rc >= 0 && op.addr != 0 {
                    op.a = u64::from(alen);
                    Self::addr_out(g, op, &sa, alen)?;
                }
                Ok(rc)
            }
            net_op::SHUTDOWN => {
                let fd = self.fd(op.handle)?;
                // SAFETY: shutdown takes no pointers.
                Ok(ret(unsafe { libc::shutdown(fd, op.a as i32) }.into()))
            }
            net_op::CLOSE => {
                self.get(op.handle)?;
                // `get` checked the index; dropping the entry closes it.
                let i = (op.handle - FIRST_HANDLE) as usize;
                self.socks[i] = None;
                while self.socks.last().is_some_and(Option::is_none) {
                    self.socks.pop();
                }
                Ok(0)
            }
            net_op::SETSOCKOPT => {
                let fd = self.fd(op.handle)?;
                if op.len > MAX_OPT {
                    return Err(neg(libc::EINVAL));
                }
                let mut v = [0u8; MAX_OPT as usize];
                g.mem.read(GuestAddr(op.buf), &mut v[..op.len as usize]).map_err(|_| neg(libc::EFAULT))?;
                let (level, name) = (op.a as i32, op.b as i32);
                if !option_allowed(level, name) {
                    return Err(neg(libc::ENOPROTOOPT));
                }
                // On UDP, SO_REUSEADDR lets a second socket bind a port in
                // use with no owner check, and the newest takes the
                // unicast datagrams: a guest could take a host service's.
                // Accepted and not applied (the bind then answers
                // EADDRINUSE), as programs set it before binding and do
                // not expect it to fail; on TCP it only reuses a port in
                // TIME_WAIT, and a guest's TCP bind is port 0 anyway.
                if level == libc::SOL_SOCKET && name == libc::SO_REUSEADDR && self.get(op.handle)?.dgram {
                    return Ok(0);
                }
                // SAFETY: `v` holds `len` (<= 256) initialised bytes.
                Ok(ret(unsafe { libc::setsockopt(fd, level, name, v.as_ptr().cast(), op.len as libc::socklen_t) }.into()))
            }
            net_op::GETSOCKOPT => {
                let fd = self.fd(op.handle)?;
                let mut v = [0u8; MAX_OPT as usize];
                let mut len = op.len.min(MAX_OPT) as libc::socklen_t;
                // SAFETY: `v` and `len` are valid out-parameters of this size.
                let rc = unsafe { libc::getsockopt(fd, op.a as i32, op.b as i32, v.as_mut_ptr().cast(), &mut len) };
                if rc < 0 {
                    return Ok(neg(errno()));
                }
                let n = u64::from(len).min(op.len).min(MAX_OPT);
                if n > 0 {
                    Self::range(g, op.buf, n, true)?;
                    g.mem.write(GuestAddr(op.buf), &v[..n as usize]).map_err(|_| neg(libc::EFAULT))?;
                }
                Ok(i64::from(len))
            }
            net_op::GETSOCKNAME | net_op::GETPEERNAME => {
                let fd = self.fd(op.handle)?;
                let mut len = MAX_ADDR as libc::socklen_t;
                // SAFETY: `sa` and `len` are valid out-parameters.
                let rc = unsafe {
                    if op.op == net_op::GETSOCKNAME {
                        libc::getsockname(fd, sa.as_mut_ptr().cast(), &mut len)
                    } else {
                        libc::getpeername(fd, sa.as_mut_ptr().cast(), &mut len)
                    }
                };
                if rc < 0 {
                    return Ok(neg(errno()));
                }
                Self::addr_out(g, op, &sa, len)?;
                Ok(i64::from(len))
            }
            _ => Err(neg(libc::ENOSYS)),
        }
    }

    /// The `NetPoll` hypercall: `ppoll` on the descriptors of the guest's
    /// handles with the deadline; a handle not in the table gets
    /// `POLLNVAL` (and makes the poll return at once, as Linux does), a
    /// negative one is ignored. Returns the number of entries with events,
    /// 0 on time-out, or a negative errno. A poll with nothing to wait for
    /// and no deadline would never return: the caller stops the instance
    /// instead.
    pub fn poll(&mut self, g: &Guest<'_>, a: &mut NetPollArgs) -> Result<i64, NothingToWaitFor> {
        self.stats.polls += 1;
        a.nevents = 0;
        if a.max_events > 0 {
            return Ok(self.poll_watch(g, a));
        }
        if a.nfds > NET_MAX_POLL {
            return Ok(neg(libc::EINVAL));
        }
        if a.nfds == 0 && a.timeout_ns == u64::MAX {
            return Err(NothingToWaitFor);
        }
        let size = core::mem::size_of::<NetPollFd>() as u64;
        // No overflow: nfds <= NET_MAX_POLL.
        if a.nfds > 0 && !g.read_only.writable(g.mem, a.fds, a.nfds * size) {
            return Ok(neg(libc::EFAULT));
        }
        self.entries.clear();
        self.pollfds.clear();
        let mut invalid = 0i64;
        for i in 0..a.nfds {
            let Ok(e) = g.mem.read_obj::<NetPollFd>(GuestAddr(a.fds + i * size)) else {
                return Ok(neg(libc::EFAULT));
            };
            let fd = if e.handle < 0 {
                -1
            } else if e.handle == shoal_abi::STDIN_HANDLE {
                // The VMM's stdin: an idle guest waits here for input.
                0
            } else {
                match self.fd(i64::from(e.handle)) {
                    Ok(fd) => fd,
                    Err(_) => {
                        invalid += 1;
                        -1
                    }
                }
            };
            self.entries.push(e);
            self.pollfds.push(libc::pollfd { fd, events: e.events, revents: 0 });
        }
        // A forwarded signal already in the guest's word came before this
        // wait and would not end it: no wait then (see `wait_ns`).
        let timeout = if invalid > 0 { 0 } else { wait_ns(a.timeout_ns) };
        if timeout > 0 {
            self.stats.waits += 1;
        }
        let ts = libc::timespec { tv_sec: (timeout / 1_000_000_000).min(i64::MAX as u64) as libc::time_t, tv_nsec: (timeout % 1_000_000_000) as libc::c_long };
        let tsp = if timeout == u64::MAX { core::ptr::null() } else { &ts as *const libc::timespec };
        // SAFETY: `pollfds` holds `nfds` valid entries; `tsp` is null or a
        // valid timespec; no signal mask.
        let rc = unsafe { libc::ppoll(self.pollfds.as_mut_ptr(), self.pollfds.len() as libc::nfds_t, tsp, core::ptr::null()) };
        let rc = if rc < 0 {
            match errno() {
                // A signal to the VMM (a terminal resize, …): a spurious
                // wake-up, which the guest handles by polling again.
                libc::EINTR => 0,
                e => return Ok(neg(e)),
            }
        } else {
            i64::from(rc)
        };
        for (i, (e, p)) in self.entries.iter_mut().zip(&self.pollfds).enumerate() {
            let unknown = e.handle >= 0 && p.fd < 0 && e.handle != shoal_abi::STDIN_HANDLE;
            e.revents = if unknown {
                libc::POLLNVAL
            } else if rc > 0 {
                p.revents
            } else {
                0
            };
            if g.mem.write_obj(GuestAddr(a.fds + i as u64 * size), e).is_err() {
                return Ok(neg(libc::EFAULT));
            }
        }
        Ok(rc + invalid)
    }

    /// `NetPoll` with the watch set: waits for the guest's few
    /// level-triggered entries (standard input, table handles) and the
    /// watch set at once — `epoll_pwait2` alone when there are none, else
    /// `ppoll` with the watch descriptor added — then writes up to
    /// `max_events` reports (handle, `POLL*` bits) to the guest's `events`.
    /// Sets `nevents`; returns the number of `fds` entries with events.
    fn poll_watch(&mut self, g: &Guest<'_>, a: &mut NetPollArgs) -> i64 {
        let Some(set) = self.watch.as_ref().map(AsRawFd::as_raw_fd) else {
            return neg(libc::EINVAL);
        };
        if a.nfds > NET_MAX_POLL_WATCH || a.max_events > NET_MAX_POLL {
            return neg(libc::EINVAL);
        }
        let size = core::mem::size_of::<NetPollFd>() as u64;
        // No overflow: both counts are bounded above.
        if !g.read_only.writable(g.mem, a.events, a.max_events * size) || (a.nfds > 0 && !g.read_only.writable(g.mem, a.fds, a.nfds * size)) {
            return neg(libc::EFAULT);
        }
        let timeout_ns = wait_ns(a.timeout_ns);
        let ts = timespec(timeout_ns);
        let zero = timespec(0);
        let tsp = if timeout_ns == u64::MAX { core::ptr::null() } else { &ts as *const libc::timespec };
        if a.timeout_ns > 0 {
            self.stats.waits += 1;
        }
        let mut ret = 0;
        let wait_tsp = if a.nfds == 0 {
            tsp
        } else {
            self.entries.clear();
            self.pollfds.clear();
            for i in 0..a.nfds {
                let Ok(e) = g.mem.read_obj::<NetPollFd>(GuestAddr(a.fds + i * size)) else {
                    return neg(libc::EFAULT);
                };
                let fd = if e.handle == shoal_abi::STDIN_HANDLE { 0 } else { self.fd(i64::from(e.handle)).unwrap_or(-1) };
                self.entries.push(e);
                self.pollfds.push(libc::pollfd { fd, events: e.events, revents: 0 });
            }
            self.pollfds.push(libc::pollfd { fd: set, events: libc::POLLIN, revents: 0 });
            // SAFETY: `pollfds` holds `nfds + 1` valid entries; `tsp` is
            // null or a valid timespec; no signal mask.
            let rc = unsafe { libc::ppoll(self.pollfds.as_mut_ptr(), self.pollfds.len() as libc::nfds_t, tsp, core::ptr::null()) };
            if rc < 0 {
                let e = errno();
                return if e == libc::EINTR { 0 } else { neg(e) };
            }
            for (i, (e, p)) in self.entries.iter_mut().zip(&self.pollfds).enumerate() {
                e.revents = if rc > 0 { p.revents } else { 0 };
                ret += i64::from(e.revents != 0);
                if g.mem.write_obj(GuestAddr(a.fds + i as u64 * size), e).is_err() {
                    return neg(libc::EFAULT);
                }
            }
            if self.pollfds.last().is_none_or(|p| p.revents == 0) {
                return ret;
            }
            &zero as *const libc::timespec
        };
        let max = (a.max_events as usize).min(WATCH_BATCH);
        self.evbuf.resize(max, libc::epoll_event { events: 0, u64: 0 });
        // SAFETY: `evbuf` has room for `max` events; `wait_tsp` is null or
        // a valid timespec; no signal mask.
        let rc =
            unsafe { libc::syscall(libc::SYS_epoll_pwait2, set, self.evbuf.as_mut_ptr(), max as i32, wait_tsp, core::ptr::null::<libc::sigset_t>(), 8usize) };
        if rc < 0 {
            // EINTR: a signal to the VMM, a spurious wake-up.
            let e = errno();
            return if e == libc::EINTR { ret } else { neg(e) };
        }
        let got = (rc as usize).min(max);
        for (i, ev) in self.evbuf.iter().take(got).enumerate() {
            let r = NetPollFd { handle: ev.u64 as i32, events: 0, revents: (ev.events & REPORTED) as u16 as i16 };
            if g.mem.write_obj(GuestAddr(a.events + i as u64 * size), &r).is_err() {
                return neg(libc::EFAULT);
            }
        }
        a.nevents = got as u64;
        ret
    }
}

const _: () = assert!(core::mem::size_of::<NetPollFd>() == core::mem::size_of::<libc::pollfd>());

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_loader::GuestMemory;

    #[test]
    fn destinations_parse_from_sockaddrs() {
        let (ss, len) = shoal_loader::net::sockaddr(&"10.1.2.3:80".parse().unwrap());
        // SAFETY: `ss` is a sockaddr_storage of at least `len` bytes.
        let b = unsafe { core::slice::from_raw_parts((&ss as *const libc::sockaddr_storage).cast::<u8>(), len as usize) };
        assert_eq!(dest(b), Dest::Addr("10.1.2.3:80".parse().unwrap()));
        assert_eq!(dest(&b[..8]), Dest::Other, "too short");
        let (ss, len) = shoal_loader::net::sockaddr(&"[::1]:443".parse().unwrap());
        // SAFETY: as above.
        let b = unsafe { core::slice::from_raw_parts((&ss as *const libc::sockaddr_storage).cast::<u8>(), len as usize) };
        assert_eq!(dest(b), Dest::Addr("[::1]:443".parse().unwrap()));
        assert_eq!(dest(&b[..24]), Dest::Addr("[::1]:443".parse().unwrap()), "without scope id");
        assert_eq!(dest(&0u16.to_ne_bytes()), Dest::Unspec);
        assert_eq!(dest(&1u16.to_ne_bytes()), Dest::Other, "AF_UNIX");
        assert_eq!(dest(&[]), Dest::Other);
    }

    #[test]
    fn handles_outside_the_table_are_ebadf() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut n = Net::new(vec![OwnedFd::from(l)], false, Vec::new());
        assert!(n.fd(3).is_ok());
        for h in [-5, 0, 1, 2, 4, 999, 1 << 40, i64::MIN, i64::MAX] {
            assert_eq!(n.fd(h), Err(neg(libc::EBADF)), "handle {h}");
        }
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(n.insert(OwnedFd::from(s), Kind::Own { tcp: false }, true), Ok(4));
        n.socks[0] = None;
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(n.insert(OwnedFd::from(s), Kind::Own { tcp: false }, true), Ok(3), "the lowest free handle");
    }

    /// Reads `n` reports from guest address `at`.
    fn reports(g: &Guest<'_>, at: u64, n: u64) -> Vec<(i32, i16)> {
        (0..n).map(|i| g.mem.read_obj::<NetPollFd>(GuestAddr(at + i * 8)).map(|e| (e.handle, e.revents)).unwrap()).collect()
    }

    #[test]
    fn the_watch_set_reports_only_sockets_whose_readiness_rose() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let mut n = Net::new(vec![OwnedFd::from(l)], false, Vec::new());
        assert!(n.watching(), "this host has epoll_pwait2");
        with_guest(|g| {
            let ev = GuestMemory::LOW + 0x4000;
            let wait = |n: &mut Net, timeout_ns| {
                let mut a = NetPollArgs { events: ev, max_events: 16, timeout_ns, ..NetPollArgs::default() };
                assert_eq!(n.poll(g, &mut a).unwrap(), 0);
                reports(g, ev, a.nevents)
            };
            assert_eq!(wait(&mut n, 0), vec![], "nothing happened yet");
            let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            assert_eq!(wait(&mut n, 5_000_000_000), vec![(3, libc::POLLIN)], "a connection on the listener");
            assert_eq!(wait(&mut n, 0), vec![], "edge-triggered: reported once");
            let h = run(&mut n, g, NetOp { op: net_op::ACCEPT, handle: 3, ..NetOp::default() });
            assert_eq!(h, 4);
            assert_eq!(wait(&mut n, 5_000_000_000), vec![(4, libc::POLLOUT)], "an accepted socket is reported when watching starts");
            c.write_all(b"hi").unwrap();
            assert_eq!(wait(&mut n, 5_000_000_000), vec![(4, libc::POLLIN | libc::POLLOUT)]);
            drop(c);
            let r = wait(&mut n, 5_000_000_000);
            assert_eq!(r.len(), 1);
            assert_eq!((r[0].0, r[0].1 & (libc::POLLIN | libc::POLLRDHUP)), (4, libc::POLLIN | libc::POLLRDHUP), "the hang-up");
            // Too many level-triggered entries, or a report array outside
            // writable guest memory (the first page is read-only).
            let mut a = NetPollArgs { fds: ev, nfds: NET_MAX_POLL_WATCH + 1, events: ev, max_events: 1, ..NetPollArgs::default() };
            assert_eq!(n.poll(g, &mut a).unwrap(), neg(libc::EINVAL));
            let mut a = NetPollArgs { events: GuestMemory::LOW, max_events: 1, ..NetPollArgs::default() };
            assert_eq!(n.poll(g, &mut a).unwrap(), neg(libc::EFAULT));
        });
    }

    /// A guest of 0x10000 bytes above `GuestMemory::LOW` whose first page
    /// is read-only; runs `f` with it.
    fn with_guest(f: impl FnOnce(&Guest<'_>)) {
        let low = GuestMemory::LOW;
        let mut buf = vec![0u8; 0x10000];
        // SAFETY: `buf` backs guest addresses [LOW, LOW + 0x10000) and
        // outlives `mem`; nothing else references it meanwhile.
        let mem = unsafe { GuestMemory::new(buf.as_mut_ptr(), low + 0x10000) };
        let private = vm_memory::GuestRegionMmap::new(vm_memory::MmapRegion::new(0x1000).unwrap(), vm_memory::GuestAddress(0)).unwrap();
        let ro = crate::hypercall::ReadOnly(vec![(low, low + 0x1000)]);
        f(&Guest {
            mem: &mem,
            private: &private,
            read_only: &ro,
            protect: None,
            alias: None,
            release: None,
            volume: None,
            fault: None,
            program: None,
            mounts: None,
            file_maps: None,
        });
    }

    /// Runs one operation through the `Net` hypercall's path; its `ret`.
    fn run(n: &mut Net, g: &Guest<'_>, op: NetOp) -> i64 {
        let at = GuestMemory::LOW + 0x2000;
        g.mem.write_obj(GuestAddr(at), &op).unwrap();
        assert_eq!(n.batch(g, &NetArgs { ops: at, count: 1, ret: 0 }), 1);
        g.mem.read_obj::<NetOp>(GuestAddr(at)).unwrap().ret
    }

    /// Puts `addr` as a sockaddr in guest memory; its (address, length).
    fn put_addr(g: &Guest<'_>, at: u64, addr: &str) -> (u64, u64) {
        let (ss, len) = shoal_loader::net::sockaddr(&addr.parse().unwrap());
        // SAFETY: `ss` is a sockaddr_storage of at least `len` bytes.
        let b = unsafe { core::slice::from_raw_parts((&ss as *const libc::sockaddr_storage).cast::<u8>(), len as usize) };
        g.mem.write(GuestAddr(at), b).unwrap();
        (at, u64::from(len))
    }

    #[test]
    fn the_vmm_enforces_the_policy_the_guest_cannot_bypass() {
        let allowed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let udp_peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let (pa, pr, pu) = (allowed.local_addr().unwrap().port(), refused.local_addr().unwrap().port(), udp_peer.local_addr().unwrap().port());
        let rules = vec![Allow::parse(&format!("127.0.0.1:{pa}")).unwrap(), Allow::parse(&format!("127.0.0.1:{pu}")).unwrap()];
        let mut n = Net::new(Vec::new(), true, rules);
        with_guest(|g| {
            let low = GuestMemory::LOW;
            let tcp = run(&mut n, g, NetOp { op: net_op::SOCKET, a: libc::AF_INET as u64, b: libc::SOCK_STREAM as u64, ..NetOp::default() });
            assert_eq!(tcp, FIRST_HANDLE);
            let (addr, addrlen) = put_addr(g, low + 0x3000, "127.0.0.1:8080");
            assert_eq!(run(&mut n, g, NetOp { op: net_op::BIND, handle: tcp, addr, addrlen, ..NetOp::default() }), neg(libc::EACCES), "a TCP bind to a port");
            let (addr, addrlen) = put_addr(g, low + 0x3000, "127.0.0.1:0");
            assert_eq!(run(&mut n, g, NetOp { op: net_op::BIND, handle: tcp, addr, addrlen, ..NetOp::default() }), 0);
            let (addr, addrlen) = put_addr(g, low + 0x3000, &format!("127.0.0.1:{pr}"));
            assert_eq!(run(&mut n, g, NetOp { op: net_op::CONNECT, handle: tcp, addr, addrlen, ..NetOp::default() }), neg(libc::EACCES));
            let (addr, addrlen) = put_addr(g, low + 0x3000, &format!("[::ffff:127.0.0.1]:{pr}"));
            assert_eq!(run(&mut n, g, NetOp { op: net_op::CONNECT, handle: tcp, addr, addrlen, ..NetOp::default() }), neg(libc::EACCES), "IPv4-mapped");
            refused.set_nonblocking(true).unwrap();
            assert!(refused.accept().is_err(), "a refused connect reached the host");
            let (addr, addrlen) = put_addr(g, low + 0x3000, &format!("127.0.0.1:{pa}"));
            let rc = run(&mut n, g, NetOp { op: net_op::CONNECT, handle: tcp, addr, addrlen, ..NetOp::default() });
            assert!(rc == 0 || rc == neg(libc::EINPROGRESS), "{rc}");
            // UDP: sendto only to a listed destination; binds not below 1024.
            let udp = run(&mut n, g, NetOp { op: net_op::SOCKET, a: libc::AF_INET as u64, b: libc::SOCK_DGRAM as u64, ..NetOp::default() });
            assert_eq!(udp, FIRST_HANDLE + 1);
            let (addr, addrlen) = put_addr(g, low + 0x3000, "127.0.0.1:53");
            assert_eq!(run(&mut n, g, NetOp { op: net_op::BIND, handle: udp, addr, addrlen, ..NetOp::default() }), neg(libc::EACCES), "a privileged port");
            g.mem.write(GuestAddr(low + 0x4000), b"datagram").unwrap();
            let send = |n: &mut Net, to: &str| {
                let (addr, addrlen) = put_addr(g, low + 0x3000, to);
                run(n, g, NetOp { op: net_op::SEND, handle: udp, buf: low + 0x4000, len: 8, addr, addrlen, ..NetOp::default() })
            };
            assert_eq!(send(&mut n, &format!("127.0.0.1:{pr}")), neg(libc::EACCES));
            assert_eq!(send(&mut n, &format!("127.0.0.1:{pu}")), 8);
            let mut got = [0u8; 16];
            udp_peer.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
            let k = udp_peer.recv(&mut got).unwrap();
            assert_eq!(&got[..k], b"datagram");
            // The VMM's own descriptors are not handles; nor is anything freed.
            for h in [0, 1, 2, n.socks.len() as i64 + FIRST_HANDLE] {
                let rc = run(&mut n, g, NetOp { op: net_op::RECV, handle: h, buf: low + 0x4000, len: 8, ..NetOp::default() });
                assert_eq!(rc, neg(libc::EBADF), "handle {h}");
            }
            // A forbidden option.
            g.mem.write(GuestAddr(low + 0x4000), &1i32.to_ne_bytes()).unwrap();
            let rc = run(
                &mut n,
                g,
                NetOp {
                    op: net_op::SETSOCKOPT,
                    handle: tcp,
                    a: libc::SOL_SOCKET as u64,
                    b: libc::SO_MARK as u64,
                    buf: low + 0x4000,
                    len: 4,
                    ..NetOp::default()
                },
            );
            assert_eq!(rc, neg(libc::ENOPROTOOPT));
            // Results are never written into read-only memory.
            assert_eq!(n.batch(g, &NetArgs { ops: low + 0x100, count: 1, ret: 0 }), neg(libc::EFAULT));
            let rc = run(&mut n, g, NetOp { op: net_op::RECV, handle: udp, buf: low + 0x800, len: 8, ..NetOp::default() });
            assert_eq!(rc, neg(libc::EFAULT));
            // Poll: an unknown handle is POLLNVAL and ends the wait at once;
            // a negative one is ignored.
            let fds = low + 0x5000;
            let entries = [
                NetPollFd { handle: udp as i32, events: libc::POLLOUT, revents: 0 },
                NetPollFd { handle: 1, events: libc::POLLIN, revents: 0 },
                NetPollFd { handle: -1, events: libc::POLLIN, revents: 0 },
            ];
            for (i, e) in entries.iter().enumerate() {
                g.mem.write_obj(GuestAddr(fds + 8 * i as u64), e).unwrap();
            }
            let t0 = std::time::Instant::now();
            assert_eq!(n.poll(g, &mut NetPollArgs { fds, nfds: 3, timeout_ns: 5_000_000_000, ..NetPollArgs::default() }).unwrap(), 2);
            assert!(t0.elapsed() < std::time::Duration::from_secs(1));
            let r = |i: u64| g.mem.read_obj::<NetPollFd>(GuestAddr(fds + 8 * i)).unwrap().revents;
            assert_eq!((r(0) & libc::POLLOUT, r(1), r(2)), (libc::POLLOUT, libc::POLLNVAL, 0));
            // Closing frees the handle for reuse.
            assert_eq!(run(&mut n, g, NetOp { op: net_op::CLOSE, handle: tcp, ..NetOp::default() }), 0);
            assert_eq!(run(&mut n, g, NetOp { op: net_op::CLOSE, handle: tcp, ..NetOp::default() }), neg(libc::EBADF));
        });
    }

    #[test]
    fn without_outbound_the_guest_makes_no_sockets() {
        let mut n = Net::new(Vec::new(), false, Vec::new());
        with_guest(|g| {
            let rc = run(&mut n, g, NetOp { op: net_op::SOCKET, a: libc::AF_INET as u64, b: libc::SOCK_STREAM as u64, ..NetOp::default() });
            assert_eq!(rc, neg(libc::EACCES));
            assert!(n.poll(g, &mut NetPollArgs { fds: 0, nfds: 0, timeout_ns: u64::MAX, ..NetPollArgs::default() }).is_err(), "nothing to wait for");
        });
    }

    #[test]
    fn bind_new_only_with_bind_any_and_with_the_hosts_answers() {
        with_guest(|g| {
            let low = GuestMemory::LOW;
            let bind_new = |n: &mut Net, addr: &str, ty: i32| {
                let (addr, addrlen) = put_addr(g, low + 0x3000, addr);
                run(n, g, NetOp { op: net_op::BIND_NEW, a: libc::AF_INET as u64, b: ty as u64, addr, addrlen, ..NetOp::default() })
            };
            let mut off = Net::new(Vec::new(), true, Vec::new());
            assert_eq!(bind_new(&mut off, "127.0.0.1:0", libc::SOCK_STREAM), neg(libc::EACCES), "without --net-bind-any");
            let mut n = Net::new(Vec::new(), false, Vec::new()).with_bind_any(true);
            let h = bind_new(&mut n, "127.0.0.1:0", libc::SOCK_STREAM);
            assert_eq!(h, FIRST_HANDLE);
            assert_eq!(run(&mut n, g, NetOp { op: net_op::LISTEN, handle: h, a: 8, ..NetOp::default() }), 0);
            let (at, cap) = (low + 0x3000, 128u64);
            let len = run(&mut n, g, NetOp { op: net_op::GETSOCKNAME, handle: h, addr: at, addrlen: cap, ..NetOp::default() });
            assert_eq!(len, 16);
            let mut sa = [0u8; 16];
            g.mem.read(GuestAddr(at), &mut sa).unwrap();
            let port = u16::from_be_bytes([sa[2], sa[3]]);
            assert_ne!(port, 0, "port 0 binds an ephemeral port");
            assert_eq!(bind_new(&mut n, &format!("127.0.0.1:{port}"), libc::SOCK_STREAM), neg(libc::EADDRINUSE));
            let c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let acc = loop {
                let rc = run(&mut n, g, NetOp { op: net_op::ACCEPT, handle: h, ..NetOp::default() });
                if rc != neg(libc::EAGAIN) || std::time::Instant::now() > deadline {
                    break rc;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            };
            assert_eq!(acc, FIRST_HANDLE + 1, "a bound socket is a listener, even without outbound");
            drop(c);
            assert_eq!(bind_new(&mut n, "127.0.0.1:0", libc::SOCK_RAW), neg(libc::EINVAL));
        });
    }

    /// At the VMM: an `AF_UNSPEC` send outside the
    /// allow-list, a protocol but TCP/UDP, `MSG_FASTOPEN` and a datagram of
    /// its own without outbound are refused; a UDP listener still replies
    /// to its senders; `SO_REUSEADDR` on UDP does not let a bind share a
    /// port.
    #[test]
    fn the_policy_holds_against_unspec_fast_open_mptcp_and_address_reuse() {
        with_guest(|g| {
            let low = GuestMemory::LOW;
            g.mem.write(GuestAddr(low + 0x4000), b"datagram").unwrap();
            let target = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            target.set_read_timeout(Some(std::time::Duration::from_millis(200))).unwrap();
            let tp = target.local_addr().unwrap().port();
            // AF_UNSPEC with the target's address after it, allow-list elsewhere.
            let mut n = Net::new(Vec::new(), true, vec![Allow::parse("127.0.0.1:9").unwrap()]);
            let udp = run(&mut n, g, NetOp { op: net_op::SOCKET, a: libc::AF_INET as u64, b: libc::SOCK_DGRAM as u64, ..NetOp::default() });
            let (addr, addrlen) = put_addr(g, low + 0x3000, &format!("127.0.0.1:{tp}"));
            g.mem.write(GuestAddr(addr), &(libc::AF_UNSPEC as u16).to_ne_bytes()).unwrap();
            let send = NetOp { op: net_op::SEND, handle: udp, buf: low + 0x4000, len: 8, addr, addrlen, ..NetOp::default() };
            assert_eq!(run(&mut n, g, send), neg(libc::EACCES));
            let connect = NetOp { op: net_op::CONNECT, handle: udp, addr, addrlen, ..NetOp::default() };
            assert_eq!(run(&mut n, g, connect), 0, "a connect to AF_UNSPEC dissolves");
            assert!(target.recv(&mut [0u8; 16]).is_err(), "the refused datagram arrived");
            // Protocols: TCP and UDP only.
            for (ty, proto, want) in [
                (libc::SOCK_STREAM, 262, neg(libc::EPROTONOSUPPORT)),
                (libc::SOCK_STREAM, libc::IPPROTO_UDP, neg(libc::EPROTONOSUPPORT)),
                (libc::SOCK_DGRAM, libc::IPPROTO_ICMP, neg(libc::EPROTONOSUPPORT)),
                (libc::SOCK_STREAM, libc::IPPROTO_TCP, FIRST_HANDLE + 1),
            ] {
                let op = NetOp { op: net_op::SOCKET, a: libc::AF_INET as u64, b: ty as u64, flags: proto as u32, ..NetOp::default() };
                assert_eq!(run(&mut n, g, op), want, "{ty}/{proto}");
            }
            // SO_REUSEADDR on UDP: accepted, not applied.
            let service = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let one = 1i32;
            // SAFETY: a valid int option of its size on an owned socket.
            assert_eq!(unsafe { libc::setsockopt(service.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, (&one as *const i32).cast(), 4) }, 0);
            let sp = service.local_addr().unwrap().port();
            let mut n = Net::new(Vec::new(), true, Vec::new());
            let udp = run(&mut n, g, NetOp { op: net_op::SOCKET, a: libc::AF_INET as u64, b: libc::SOCK_DGRAM as u64, ..NetOp::default() });
            g.mem.write(GuestAddr(low + 0x5000), &1i32.to_ne_bytes()).unwrap();
            let opt = |name: i32| NetOp {
                op: net_op::SETSOCKOPT,
                handle: udp,
                a: libc::SOL_SOCKET as u64,
                b: name as u64,
                buf: low + 0x5000,
                len: 4,
                ..NetOp::default()
            };
            assert_eq!(run(&mut n, g, opt(libc::SO_REUSEADDR)), 0);
            assert_eq!(run(&mut n, g, opt(libc::SO_REUSEPORT)), neg(libc::ENOPROTOOPT));
            let (addr, addrlen) = put_addr(g, low + 0x3000, &format!("127.0.0.1:{sp}"));
            assert_eq!(run(&mut n, g, NetOp { op: net_op::BIND, handle: udp, addr, addrlen, ..NetOp::default() }), neg(libc::EADDRINUSE));
            // Without outbound: a UDP socket from a bind replies to its
            // senders only; no Fast Open.
            let mut n = Net::new(Vec::new(), false, Vec::new()).with_bind_any(true);
            let bind_new = |ty: i32| {
                let (addr, addrlen) = put_addr(g, low + 0x3000, "127.0.0.1:0");
                NetOp { op: net_op::BIND_NEW, a: libc::AF_INET as u64, b: ty as u64, addr, addrlen, ..NetOp::default() }
            };
            let h = run(&mut n, g, bind_new(libc::SOCK_DGRAM));
            assert_eq!(h, FIRST_HANDLE);
            let send_to = |n: &mut Net, h: i64, to: &str, flags: i32| {
                let (addr, addrlen) = put_addr(g, low + 0x3000, to);
                run(n, g, NetOp { op: net_op::SEND, handle: h, buf: low + 0x4000, len: 8, addr, addrlen, flags: flags as u32, ..NetOp::default() })
            };
            assert_eq!(send_to(&mut n, h, &format!("127.0.0.1:{tp}"), 0), neg(libc::EACCES), "a datagram of its own");
            assert!(target.recv(&mut [0u8; 16]).is_err(), "the refused datagram arrived");
            let len = run(&mut n, g, NetOp { op: net_op::GETSOCKNAME, handle: h, addr: low + 0x3000, addrlen: 128, ..NetOp::default() });
            assert_eq!(len, 16);
            let mut sa = [0u8; 16];
            g.mem.read(GuestAddr(low + 0x3000), &mut sa).unwrap();
            let hp = u16::from_be_bytes([sa[2], sa[3]]);
            target.send_to(b"question", ("127.0.0.1", hp)).unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let got = loop {
                let rc =
                    run(&mut n, g, NetOp { op: net_op::RECV, handle: h, buf: low + 0x6000, len: 64, addr: low + 0x7000, addrlen: 128, ..NetOp::default() });
                if rc != neg(libc::EAGAIN) || std::time::Instant::now() > deadline {
                    break rc;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            };
            assert_eq!(got, 8);
            assert_eq!(send_to(&mut n, h, &format!("127.0.0.1:{tp}"), 0), 8, "a reply");
            assert_eq!(send_to(&mut n, h, &format!("127.0.0.1:{}", tp ^ 1), 0), neg(libc::EACCES), "another port of the sender's host");
            let mut buf = [0u8; 16];
            assert_eq!(target.recv(&mut buf).unwrap(), 8);
            let tcp_peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let t = run(&mut n, g, bind_new(libc::SOCK_STREAM));
            assert_eq!(t, FIRST_HANDLE + 1);
            let to = tcp_peer.local_addr().unwrap().to_string();
            assert_eq!(send_to(&mut n, t, &to, libc::MSG_FASTOPEN), neg(libc::EACCES), "Fast Open connects");
            assert_eq!(send_to(&mut n, t, &to, 0), neg(libc::EACCES), "an addressed send on TCP");
            // A published UDP port replies to its senders even when the
            // allow-list does not name them.
            let published = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let pp = published.local_addr().unwrap().port();
            let mut n = Net::new(vec![OwnedFd::from(published)], true, vec![Allow::parse("127.0.0.1:9").unwrap()]);
            assert_eq!(send_to(&mut n, FIRST_HANDLE, &format!("127.0.0.1:{tp}"), 0), neg(libc::EACCES), "not a sender yet");
            target.send_to(b"question", ("127.0.0.1", pp)).unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let got = loop {
                let rc = run(
                    &mut n,
                    g,
                    NetOp { op: net_op::RECV, handle: FIRST_HANDLE, buf: low + 0x6000, len: 64, addr: low + 0x7000, addrlen: 128, ..NetOp::default() },
                );
                if rc != neg(libc::EAGAIN) || std::time::Instant::now() > deadline {
                    break rc;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            };
            assert_eq!(got, 8);
            assert_eq!(send_to(&mut n, FIRST_HANDLE, &format!("127.0.0.1:{tp}"), 0), 8, "a reply");
        });
    }

    #[test]
    fn only_ordinary_options_may_be_set() {
        assert!(option_allowed(libc::IPPROTO_TCP, libc::TCP_NODELAY));
        assert!(option_allowed(libc::SOL_SOCKET, libc::SO_REUSEADDR));
        for (l, n) in [
            (libc::SOL_SOCKET, libc::SO_MARK),
            (libc::SOL_SOCKET, libc::SO_BINDTODEVICE),
            (libc::SOL_SOCKET, libc::SO_REUSEPORT),
            (libc::IPPROTO_TCP, libc::TCP_CONGESTION),
            (libc::IPPROTO_TCP, libc::TCP_ULP),
            (libc::IPPROTO_IP, libc::IP_TRANSPARENT),
            (libc::SOL_SOCKET + 1000, 1),
        ] {
            assert!(!option_allowed(l, n), "{l}/{n}");
        }
    }
}
