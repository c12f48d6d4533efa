//! Host-socket passthrough (docs/design.md "Networking"): the [`Backend`] of `AF_INET`
//! and `AF_INET6`. Each guest socket is, once it needs one, a host socket
//! the tender owns; the guest holds its handle, and every operation is a
//! `Net` hypercall ([`shoal_plat::hypercall::net`]). Host sockets never
//! block: the socket layer waits in the scheduler, and when every thread
//! waits, the instance sleeps in the `NetPoll` hypercall on its host
//! sockets ([`idle_wait`], installed as the scheduler's idle wait).
//!
//! **What a guest socket attaches to.** The tender decided before boot
//! what the instance may reach (`BootInfo::listeners`, `net_flags`):
//!
//! - `bind` to a port that was published (`--publish HOST:PORT:GUESTPORT`)
//!   attaches the guest socket to that already bound and listening host
//!   socket; a listener handed over with `--listen-fd` is attached to the
//!   first `bind` (or `listen`, for an unbound socket) of its type whose
//!   port nothing else claims. `getsockname` then reports the address the
//!   guest bound.
//! - with bind-any on (`--net-bind-any`, `NET_BIND_ANY`), any other `bind`
//!   asks the tender for a host socket bound to that address and port
//!   (`BIND_NEW`): the host's answer is the guest's (`EADDRINUSE`, `EACCES`,
//!   an ephemeral port for port 0, reported by `getsockname`), and a
//!   `listen` on an unbound socket gets an ephemeral port, as on Linux;
//! - with outbound on (`--net-outbound`), a socket that connects, sends to
//!   an address, or binds elsewhere gets a host socket of its own (the
//!   tender's Landlock and seccomp rules decide what it may reach);
//! - otherwise such calls fail with `EACCES`, and the first refused `bind`
//!   says once on stderr which `--publish` would allow it.
//!
//! **Readiness** is cached per socket (`POLL*` bits): learned from
//! `NetPoll` results and from the operations' own results (`EAGAIN` on a
//! receive clears "readable", on a send "writable"). A descriptor asked
//! about while a bit is missing refreshes the whole cache with one
//! zero-timeout `NetPoll`, at most once per system call, so `poll`,
//! `select` and `epoll_wait` never miss data that arrived. The one
//! exception is a blocking `epoll_wait` with no other thread to run whose
//! entries have nothing to report from the cache: it blocks at once
//! ([`without_refresh`]), since the idle wait then asks the tender anyway
//! (with the wait's deadline) and counts as the call's refresh — one host
//! call per wake-up, as a native `epoll_wait`, instead of two.
//!
//! With the tender's **watch set** (boot info `NET_WATCH`, both tenders
//! on Linux >= 5.11) a `NetPoll` returns only the sockets whose readiness
//! rose since they were last reported (the tender's edge-triggered host
//! epoll), each with its current bits, which replace the cached ones. A
//! refresh or a wait then costs time in proportion to the sockets that
//! became ready, not to all of them: a server with 1,000 mostly idle
//! connections no longer polls 1,000 host sockets per `epoll_wait`. The
//! cache is exact as long as a bit is cleared only when the host says it
//! is gone (`EAGAIN`, a short receive or send — after which a new arrival
//! is a new report), never after a `MSG_PEEK` or once the peer hung up;
//! a socket attached to a listener the tender already watched asks the
//! tender once for its current state. Without the watch set, the idle
//! wait asks the tender (one `ppoll` over the host sockets) only for the
//! bits not already known, so a readable socket nobody reads does not wake
//! the instance again and again.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec;
use alloc::vec::Vec;
use shoal_abi::{net_op, Listener, NetOp, NetPollFd, LISTENER_ANY_PORT, NET_BIND_ANY, NET_MAX_POLL, NET_OUTBOUND, NET_WATCH};
use shoal_plat::Errno;
use shoal_vfs::obj::Readiness;

use crate::abi::*;
use crate::backend::{Backend, Received, SockAddr, SockOpts};
use crate::tracked::TrackedSlab;

/// `EINPROGRESS`: a non-blocking connect goes on by itself.
const EINPROGRESS: Errno = Errno(115);

const POLLIN: u32 = 0x001;
const POLLOUT: u32 = 0x004;
const POLLERR: u32 = 0x008;
const POLLHUP: u32 = 0x010;
const POLLRDHUP: u32 = 0x2000;

/// One guest socket of this family.
#[derive(Clone, PartialEq)]
struct HostSock {
    domain: i32,
    ty: i32,
    proto: i32,
    /// The host socket's handle, once it has one.
    host: Option<i64>,
    /// Attached to handed-over listener `i` (published or `--listen-fd`).
    listener: Option<usize>,
    /// The address the guest bound (what `getsockname` reports).
    local: Option<SockAddr>,
    /// Options set before there was a host socket (replayed on creation).
    opts: SockOpts,
    /// Cached `POLL*` bits.
    ready: u32,
    /// Bumped whenever the socket may have become newly ready.
    gen: u64,
    /// Set once `listen` was called.
    listening: bool,
    /// An accepted connection of a published port: that port, which
    /// `getsockname` reports instead of the host port.
    guest_port: Option<u16>,
    /// `IPV6_V6ONLY` set before there was a host socket (for `BIND_NEW`).
    v6only: bool,
}

impl HostSock {
    fn new(domain: i32, ty: i32, proto: i32) -> HostSock {
        HostSock {
            domain,
            ty,
            proto,
            host: None,
            listener: None,
            local: None,
            opts: SockOpts::default(),
            ready: 0,
            gen: 0,
            listening: false,
            guest_port: None,
            v6only: false,
        }
    }

    /// Adds newly learned readiness bits.
    fn learn(&mut self, bits: u32) {
        if bits & !self.ready != 0 {
            self.gen += 1;
        }
        self.ready |= bits;
    }

    /// Takes a watch-set report: the socket's current bits.
    fn report(&mut self, bits: u32) {
        if bits & !self.ready != 0 {
            self.gen += 1;
        }
        self.ready = bits;
    }

    /// Forgets "readable" after a receive that found nothing or drained the
    /// socket — unless the peer hung up (end of file stays readable, and
    /// the watch set would not report it again).
    fn drained(&mut self) {
        if self.ready & (POLLRDHUP | POLLHUP | POLLERR) == 0 {
            self.ready &= !POLLIN;
        }
    }
}

/// Most reports collected by one `NetPoll` (more wait for the next).
const WATCH_BATCH: usize = 256;

pub(crate) struct State {
    /// The guest sockets by handle (a slab: every request looks its
    /// socket up; see `crate::tracked::TrackedSlab`).
    socks: TrackedSlab<HostSock>,
    next: u64,
    /// The tender's listeners and whether a guest socket took each.
    listeners: Vec<(Listener, bool)>,
    outbound: bool,
    /// `--net-bind-any`: a bind no listener takes is a `BIND_NEW`.
    bind_any: bool,
    /// `shoal_plat::syscall_epoch()` of the last refresh.
    refreshed: u64,
    /// Whether the "bind refused" note was printed.
    noted: bool,
    /// Whether the tender keeps a watch set (`NET_WATCH`).
    watch: bool,
    /// Host handle → guest socket, for the watch set's reports.
    by_host: HostIndex,
    /// Scratch for the reports.
    events: Vec<NetPollFd>,
    /// Sequence number of the last readiness gain (see [`State::gained`]).
    seq: u64,
    /// The recent gains: (sequence number, socket), oldest first.
    gains: VecDeque<(u64, u64)>,
    /// The log holds every gain after this sequence number.
    floor: u64,
}

/// Host handles below this are indexed directly in [`HostIndex`].
const DENSE_HANDLES: i64 = 1 << 14;

/// Host handle → guest socket (ids start at 1; 0 marks a free slot). Host
/// handles are small and dense (host descriptors on spt, table handles on
/// hvt), so they index a vector: the watch set reports every socket that
/// became ready, and each report costs one index instead of a tree search
/// over every connection. A handle past [`DENSE_HANDLES`] (a host with a
/// huge descriptor limit) goes to a map.
#[derive(Default)]
struct HostIndex {
    dense: Vec<u64>,
    sparse: BTreeMap<i64, u64>,
    len: usize,
}

impl HostIndex {
    fn insert(&mut self, fd: i64, h: u64) {
        if (0..DENSE_HANDLES).contains(&fd) {
            let i = fd as usize;
            if self.dense.len() <= i {
                self.dense.resize(i + 1, 0);
            }
            if self.dense[i] == 0 {
                self.len += 1;
            }
            self.dense[i] = h;
        } else if self.sparse.insert(fd, h).is_none() {
            self.len += 1;
        }
    }

    fn get(&self, fd: i64) -> Option<u64> {
        if (0..DENSE_HANDLES).contains(&fd) {
            self.dense.get(fd as usize).copied().filter(|&h| h != 0)
        } else {
            self.sparse.get(&fd).copied()
        }
    }

    fn remove(&mut self, fd: i64) {
        if (0..DENSE_HANDLES).contains(&fd) {
            if let Some(slot) = self.dense.get_mut(fd as usize) {
                if *slot != 0 {
                    *slot = 0;
                    self.len -= 1;
                }
            }
        } else if self.sparse.remove(&fd).is_some() {
            self.len -= 1;
        }
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Most gains the log keeps (older ones make `epoll_wait` ask every socket).
const MAX_GAINS: usize = 4096;

// A `ZeroGlobal` (all zero, in `.bss`): see `NET`.
static STATE: shoal_plat::ZeroGlobal<Option<State>> = shoal_plat::ZeroGlobal::new();

fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    crate::heal::touched();
    STATE.with(|s| {
        let s = s.get_or_insert_with(State::new);
        let seq = s.seq;
        let r = f(s);
        if s.seq != seq {
            s.wake_gained(seq);
        }
        r
    })
}

/// Brings `log`, the recovery log's copy of the backend's state
/// (`crate::heal`: everything but the scratch buffer and the gain log,
/// which a rebuild starts afresh, [`install_image`]), up to date: only
/// the sockets that changed are copied. `None`: the state is borrowed.
pub(crate) fn sync_image(log: &mut Option<State>) -> Option<()> {
    STATE.try_with(|s| match (log.as_mut(), s.as_mut()) {
        (Some(l), Some(s)) => l.sync_from(s),
        (_, Some(s)) => {
            *log = Some(s.image());
            s.socks.forget_notes();
        }
        (_, None) => *log = None,
    })
}

/// Installs `img` as the backend's state after net was rebooted: its
/// memory is the boot snapshot again, whose state points at heap objects
/// long since changed or freed; they are abandoned, not dropped. The host
/// sockets are the tender's and still open: the handles in `img` are
/// reattached as they are (nothing is reopened or re-bound). What the
/// tender's watch set reported since the log was written went to the
/// abandoned state, so each socket's readiness is asked once, with a
/// zero-timeout level-triggered `NetPoll` (a question, not an operation
/// repeated), and every epoll instance looks at all its host sockets
/// once (the gain log starts empty, above every instance's position).
pub(crate) fn install_image(img: Option<State>) {
    let Some(mut s) = img else {
        STATE.with(|g| core::mem::forget(g.take()));
        return;
    };
    s.refreshed = u64::MAX;
    s.seq += 1;
    s.floor = s.seq;
    // The log's copy keeps no list of free slots: rebuilt from the ids.
    s.socks = TrackedSlab::from_map(s.socks.to_map());
    s.by_host = HostIndex::default();
    for (&id, sock) in s.socks.iter() {
        if let Some(fd) = sock.host {
            s.by_host.insert(fd, id);
        }
    }
    s.relearn();
    // Whatever a blocking call waited for may have come meanwhile.
    s.wake_gained(0);
    STATE.with(|g| core::mem::forget(g.replace(s)));
}

/// Frees the backend's state (before a rejuvenation: it is sound, and the
/// reboot installs the log's copy).
pub(crate) fn drop_state() {
    drop(STATE.try_with(|s| s.take()).flatten());
}

/// Installs the backend if the tender handed the instance any network
/// (listeners or outbound). Called once at boot, after `net::init`.
pub fn init() {
    let info = shoal_plat::boot::info();
    let n = (info.listener_count as usize).min(info.listeners.len());
    let outbound = info.net_flags & NET_OUTBOUND != 0;
    let bind_any = info.net_flags & NET_BIND_ANY != 0;
    // Always the idle wait: an idle instance waits for its standard input
    // too, networked or not.
    shoal_sched::set_idle_wait(idle_wait);
    if n == 0 && !outbound && !bind_any {
        return;
    }
    with(|s| {
        s.listeners = info.listeners[..n].iter().map(|l| (*l, false)).collect();
        s.outbound = outbound;
        s.bind_any = bind_any;
        s.watch = info.net_flags & NET_WATCH != 0;
    });
    crate::set_inet_backend(alloc::boxed::Box::new(HostBackend));
}

/// Whether the host takes the first `bind` of an Internet socket of type
/// `ty` to `addr` (see `socket::route`): a published port or handed-over
/// listener, `--net-bind-any`, an address outside the instance (the host's
/// answer, a refusal without the options, is the guest's), and with
/// `--net-outbound` a port-0 bind to the any-address (a client choosing
/// its source port before it connects out). Otherwise the socket stays
/// inside the instance (loopback): a socket bound to `127.0.0.1` or `::1`
/// can only talk to the instance's own loopback, as in a container.
pub(crate) fn takes_bind(ty: i32, addr: &[u8]) -> bool {
    let Ok(port) = port_of(addr) else { return false };
    let local = crate::lo::is_local(addr);
    with(|s| s.find_listener(ty, Some(port)).is_some() || s.bind_any || local == Some(false) || (s.outbound && port == 0 && crate::lo::is_any(addr)))
}

/// Whether `port` is published for sockets of type `ty` and its one
/// handed-over socket already went to another guest socket.
pub(crate) fn published_and_taken(ty: i32, port: u16) -> bool {
    STATE
        .try_with(|s| s.as_ref().is_some_and(|s| s.listeners.iter().any(|(l, t)| *t && l.sock_type == ty as u32 && l.port == u32::from(port))))
        .unwrap_or(false)
}

/// Whether the host takes the `listen` of an unbound socket of type `ty`:
/// a `--listen-fd` listener, or `--net-bind-any`.
pub(crate) fn takes_listen(ty: i32) -> bool {
    with(|s| s.find_listener(ty, None).is_some() || s.bind_any)
}

/// Whether the instance may reach out (`--net-outbound`).
pub(crate) fn outbound() -> bool {
    with(|s| s.outbound)
}

/// The backend: a handle on [`STATE`].
pub struct HostBackend;

/// Runs one operation; returns its result.
fn op(mut o: NetOp) -> (Result<i64, Errno>, NetOp) {
    // hvt's VMM reads data by guest-physical address: a buffer in a shared
    // file mapping (whose pages show the file's pages) goes through a copy.
    if (o.op == net_op::SEND || o.op == net_op::RECV) && shoal_plat::hypercall::needs_bounce(o.buf, o.len) {
        let mut tmp = alloc::vec![0u8; o.len as usize];
        let user = o.buf;
        if o.op == net_op::SEND {
            // SAFETY: the caller's buffer of o.len bytes (a slice it holds).
            tmp.copy_from_slice(unsafe { core::slice::from_raw_parts(user as *const u8, o.len as usize) });
        }
        o.buf = tmp.as_mut_ptr() as u64;
        let (r, mut back) = op(o);
        if o.op == net_op::RECV {
            if let Ok(n) = r {
                let n = (n as usize).min(tmp.len());
                // SAFETY: as above, writable (the caller holds it mutably).
                unsafe { core::ptr::copy_nonoverlapping(tmp.as_ptr(), user as *mut u8, n) };
            }
        }
        back.buf = user;
        return (r, back);
    }
    let mut ops = [o];
    let rc = shoal_plat::hypercall::net(&mut ops);
    o = ops[0];
    if rc < 0 {
        return (Err(Errno(-rc as i32)), o);
    }
    if o.ret < 0 {
        (Err(Errno(-o.ret as i32)), o)
    } else {
        (Ok(o.ret), o)
    }
}

fn simple(code: u32, handle: i64, a: u64) -> Result<i64, Errno> {
    op(NetOp { op: code, handle, a, ..NetOp::default() }).0
}

/// The port of an `AF_INET`/`AF_INET6` address.
fn port_of(addr: &[u8]) -> Result<u16, Errno> {
    let fam = u16::from_ne_bytes([*addr.first().ok_or(Errno::EINVAL)?, *addr.get(1).ok_or(Errno::EINVAL)?]);
    let need = match i32::from(fam) {
        AF_INET => 16,
        AF_INET6 => 28,
        _ => return Err(Errno::EAFNOSUPPORT),
    };
    if addr.len() < need {
        return Err(Errno::EINVAL);
    }
    Ok(u16::from_be_bytes([addr[2], addr[3]]))
}

/// A socket address as people write it (`0.0.0.0:80`, `[::]:6379`, with
/// `/udp` for a datagram socket left to the caller), for messages.
pub(crate) struct SockAddrText<'a>(pub(crate) &'a [u8]);

impl core::fmt::Display for SockAddrText<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let a = self.0;
        let port = |a: &[u8]| u16::from_be_bytes([a[2], a[3]]);
        match (a.len(), a.first().zip(a.get(1)).map(|(x, y)| i32::from(u16::from_ne_bytes([*x, *y])))) {
            (16.., Some(AF_INET)) => write!(f, "{}:{}", core::net::Ipv4Addr::new(a[4], a[5], a[6], a[7]), port(a)),
            (28.., Some(AF_INET6)) => {
                let mut ip = [0u8; 16];
                ip.copy_from_slice(&a[8..24]);
                write!(f, "[{}]:{}", core::net::Ipv6Addr::from(ip), port(a))
            }
            _ => write!(f, "an address of family {:?}", a.first()),
        }
    }
}

/// The local address of host socket `fd`, as the host reports it.
fn host_name(fd: i64) -> Option<SockAddr> {
    let mut buf = [0u8; 128];
    let n = op(NetOp { op: net_op::GETSOCKNAME, handle: fd, addr: buf.as_mut_ptr() as u64, addrlen: buf.len() as u64, ..NetOp::default() }).0.ok()?;
    Some(buf[..(n as usize).min(buf.len())].to_vec())
}

/// `addr` with its port replaced.
fn with_port(mut addr: SockAddr, port: u16) -> SockAddr {
    if addr.len() >= 4 {
        addr[2..4].copy_from_slice(&port.to_be_bytes());
    }
    addr
}

impl State {
    fn new() -> State {
        State {
            socks: TrackedSlab::default(),
            next: 0,
            listeners: Vec::new(),
            outbound: false,
            bind_any: false,
            refreshed: u64::MAX,
            noted: false,
            watch: false,
            by_host: HostIndex::default(),
            events: Vec::new(),
            seq: 0,
            gains: VecDeque::new(),
            floor: 0,
        }
    }

    /// See [`sync_image`].
    fn sync_from(&mut self, live: &mut State) {
        live.socks.sync_into_slab(&mut self.socks);
        if self.listeners != live.listeners {
            self.listeners.clone_from(&live.listeners);
        }
        self.next = live.next;
        self.outbound = live.outbound;
        self.bind_any = live.bind_any;
        self.noted = live.noted;
        self.watch = live.watch;
        self.seq = live.seq;
        self.floor = live.seq;
    }

    /// Guest sockets it holds.
    pub(crate) fn len(&self) -> usize {
        self.socks.len()
    }

    /// Bytes its tables take on the heap (an estimate).
    pub(crate) fn heap_bytes(&self) -> usize {
        let per = core::mem::size_of::<HostSock>() + 32;
        let addrs: usize = self.socks.iter().map(|(_, s)| s.local.as_ref().map_or(0, |a| a.capacity())).sum();
        self.socks.len() * per + addrs + self.by_host.len * 32 + self.listeners.len() * core::mem::size_of::<(Listener, bool)>()
    }

    /// See [`image`].
    pub(crate) fn image(&self) -> State {
        State {
            socks: self.socks.clone(),
            next: self.next,
            listeners: self.listeners.clone(),
            outbound: self.outbound,
            bind_any: self.bind_any,
            refreshed: u64::MAX,
            noted: self.noted,
            watch: self.watch,
            // Derived from the sockets' handles: rebuilt by
            // `install_image`, not kept in the log.
            by_host: HostIndex::default(),
            events: Vec::new(),
            seq: self.seq,
            gains: VecDeque::new(),
            floor: self.seq,
        }
    }

    /// Asks the tender for the current readiness of every host socket
    /// (see [`install_image`]); each one is marked as possibly gained.
    fn relearn(&mut self) {
        let all: Vec<(u64, i64)> = self.socks.iter().filter_map(|(&id, s)| s.host.map(|fd| (id, fd))).collect();
        for chunk in all.chunks(NET_MAX_POLL as usize) {
            let mut fds: Vec<NetPollFd> =
                chunk.iter().map(|&(_, fd)| NetPollFd { handle: fd as i32, events: (POLLIN | POLLOUT | POLLRDHUP) as i16, revents: 0 }).collect();
            let rc = shoal_plat::hypercall::net_poll(&mut fds, 0);
            for (f, &(id, _)) in fds.iter().zip(chunk) {
                if let Some(s) = self.socks.get_mut(&id) {
                    if rc >= 0 {
                        // The current bits replace the cached ones; the
                        // generation moves on, so edge-triggered entries
                        // are looked at again.
                        s.ready = f.revents as u16 as u32;
                    }
                    s.gen += 1;
                }
                self.gained(id);
            }
        }
    }

    /// The sockets that gained after sequence number `since`, or `None` if
    /// the log no longer reaches back that far (tests).
    #[cfg(test)]
    fn gains_after(&self, since: u64) -> Option<Vec<u64>> {
        let mut v = Vec::new();
        self.gains_after_into(since, &mut v).then_some(v)
    }

    /// [`State::gains_after`] into the caller's buffer (appended; `false`
    /// when the log no longer reaches back that far).
    fn gains_after_into(&self, since: u64, out: &mut Vec<u64>) -> bool {
        if since < self.floor {
            return false;
        }
        // The log is in sequence order: walk back to `since`.
        out.extend(self.gains.iter().rev().take_while(|(q, _)| *q > since).map(|(_, h)| *h));
        true
    }

    /// Wakes the blocking calls waiting on the sockets that gained after
    /// sequence number `since` (`crate::sock_key`), or on every socket if
    /// the log no longer reaches back that far.
    fn wake_gained(&self, since: u64) {
        if since < self.floor {
            for (&id, _) in self.socks.iter() {
                shoal_sched::wake_key(crate::sock_key(id));
            }
            return;
        }
        for &(_, id) in self.gains.iter().rev().take_while(|(q, _)| *q > since) {
            shoal_sched::wake_key(crate::sock_key(id));
        }
    }

    /// Notes that socket `h` may have gained readiness bits or a new event
    /// generation (`Backend::gains_since`).
    fn gained(&mut self, h: u64) {
        self.seq += 1;
        self.gains.push_back((self.seq, h));
        if self.gains.len() > MAX_GAINS {
            if let Some((q, _)) = self.gains.pop_front() {
                self.floor = q;
            }
        }
    }

    fn get(&mut self, h: u64) -> Result<&mut HostSock, Errno> {
        self.socks.get_mut(&h).ok_or(Errno::EBADF)
    }

    /// A handed-over listener for a socket of type `ty` bound to `port`
    /// (`None`: an unbound socket, any `--listen-fd` listener).
    fn find_listener(&self, ty: i32, port: Option<u16>) -> Option<usize> {
        let free = |l: &Listener, taken: bool| !taken && l.sock_type == ty as u32;
        let exact = port.and_then(|p| self.listeners.iter().position(|(l, t)| free(l, *t) && l.port == u32::from(p)));
        exact.or_else(|| self.listeners.iter().position(|(l, t)| free(l, *t) && l.port == LISTENER_ANY_PORT))
    }

    /// Gives socket `h` a host socket of its own (outbound only).
    fn create_host(&mut self, h: u64) -> Result<i64, Errno> {
        if !self.outbound {
            return Err(Errno::EACCES);
        }
        let s = self.get(h)?;
        if let Some(fd) = s.host {
            return Ok(fd);
        }
        let (domain, ty, proto) = (s.domain, s.ty, s.proto);
        let fd = op(NetOp { op: net_op::SOCKET, a: domain as u64, b: ty as u64, flags: proto as u32, ..NetOp::default() }).0?;
        let opts = s.opts.clone();
        s.host = Some(fd);
        s.ready = POLLOUT;
        self.by_host.insert(fd, h);
        self.gained(h);
        for name in [SO_REUSEADDR, SO_REUSEPORT, SO_KEEPALIVE, SO_BROADCAST] {
            if let Ok(v) = opts.get(name) {
                if v != 0i32.to_ne_bytes() {
                    let _ = set_host_opt(fd, SOL_SOCKET, name, &v);
                }
            }
        }
        Ok(fd)
    }

    /// `bind` under `--net-bind-any`: the tender makes a host socket bound
    /// to `addr` with its own rights; the guest socket takes it, and its
    /// local address is the host's (the real port of a port-0 bind).
    fn bind_new(&mut self, h: u64, addr: &[u8]) -> Result<(), Errno> {
        let s = self.get(h)?;
        let (domain, ty) = (s.domain, s.ty);
        let mut flags = 0;
        if s.opts.get(SO_REUSEADDR).is_ok_and(|v| v != 0i32.to_ne_bytes()) {
            flags |= net_op::BIND_REUSEADDR;
        }
        if s.v6only {
            flags |= net_op::BIND_V6ONLY;
        }
        let opts = s.opts.clone();
        let fd = op(NetOp {
            op: net_op::BIND_NEW,
            a: domain as u64,
            b: ty as u64,
            flags,
            addr: addr.as_ptr() as u64,
            addrlen: addr.len() as u64,
            ..NetOp::default()
        })
        .0?;
        let local = host_name(fd).unwrap_or_else(|| addr.to_vec());
        let s = self.get(h)?;
        s.host = Some(fd);
        s.local = Some(local);
        s.ready = POLLOUT;
        self.by_host.insert(fd, h);
        self.gained(h);
        for name in [SO_KEEPALIVE, SO_BROADCAST] {
            if let Ok(v) = opts.get(name) {
                if v != 0i32.to_ne_bytes() {
                    let _ = set_host_opt(fd, SOL_SOCKET, name, &v);
                }
            }
        }
        Ok(())
    }

    /// Attaches guest socket `h` to handed-over listener `i`. With the
    /// watch set, asks the tender for the listener's current state once: a
    /// connection that arrived before (or was reported to a socket attached
    /// earlier) is not reported again.
    fn attach(&mut self, h: u64, i: usize) -> Result<i64, Errno> {
        self.listeners[i].1 = true;
        let fd = self.listeners[i].0.handle;
        let sock = self.get(h)?;
        sock.host = Some(fd);
        sock.listener = Some(i);
        self.by_host.insert(fd, h);
        if self.watch {
            let mut f = [NetPollFd { handle: fd as i32, events: (POLLIN | POLLOUT) as i16, revents: 0 }];
            if shoal_plat::hypercall::net_poll(&mut f, 0) > 0 {
                self.get(h)?.report(f[0].revents as u16 as u32);
            }
        }
        self.gained(h);
        Ok(fd)
    }

    /// Waits for the watch set's reports (and standard input, when a reader
    /// wants it) for at most `timeout_ns`; takes them. Returns `None` when
    /// there was nothing to wait for.
    fn poll_watch(&mut self, timeout_ns: u64) -> Option<i64> {
        let stdin = shoal_plat::console::with_stdin(|s| s.wants_wait());
        if self.by_host.is_empty() && !stdin {
            return None;
        }
        let mut fds = [NetPollFd { handle: shoal_abi::STDIN_HANDLE, events: POLLIN as i16, revents: 0 }];
        let fds: &mut [NetPollFd] = if stdin { &mut fds } else { &mut [] };
        let mut events = core::mem::take(&mut self.events);
        events.resize(WATCH_BATCH, NetPollFd::default());
        let (rc, n) = shoal_plat::hypercall::net_poll_watch(fds, &mut events, timeout_ns);
        if rc > 0 && stdin {
            let revents = fds[0].revents;
            shoal_plat::console::with_stdin(|s| s.learn(revents));
        }
        for e in &events[..n] {
            if let Some(id) = self.by_host.get(i64::from(e.handle)) {
                if let Some(s) = self.socks.get_mut(&id) {
                    let gen = s.gen;
                    s.report(e.revents as u16 as u32);
                    if s.gen != gen {
                        self.gained(id);
                    }
                }
            }
        }
        self.events = events;
        Some(if rc < 0 { rc } else { rc + n as i64 })
    }

    /// Polls every host socket with a bit not known yet, for at most
    /// `timeout_ns`; learns what happened. Returns `None` when there was
    /// nothing to wait for.
    fn poll(&mut self, timeout_ns: u64) -> Option<i64> {
        if self.watch {
            return self.poll_watch(timeout_ns);
        }
        let mut fds: Vec<NetPollFd> = Vec::new();
        let mut ids: Vec<u64> = Vec::new();
        for (&id, s) in self.socks.iter() {
            let Some(fd) = s.host else { continue };
            if s.ready & (POLLHUP | POLLERR) != 0 {
                continue;
            }
            let mut ev = 0u32;
            if s.ready & POLLIN == 0 {
                ev |= POLLIN | POLLRDHUP;
            }
            if s.ready & POLLOUT == 0 && !s.listening {
                ev |= POLLOUT;
            }
            if ev == 0 || fds.len() as u64 >= NET_MAX_POLL {
                continue;
            }
            fds.push(NetPollFd { handle: fd as i32, events: ev as i16, revents: 0 });
            ids.push(id);
        }
        // Standard input, when a reader found nothing and input is not
        // known to be there (the last entry; no guest socket id).
        let stdin = fds.len() < NET_MAX_POLL as usize && shoal_plat::console::with_stdin(|s| s.wants_wait());
        if stdin {
            fds.push(NetPollFd { handle: shoal_abi::STDIN_HANDLE, events: POLLIN as i16, revents: 0 });
        }
        if fds.is_empty() {
            return None;
        }
        let rc = shoal_plat::hypercall::net_poll(&mut fds, timeout_ns);
        if rc > 0 {
            if stdin {
                let revents = fds[fds.len() - 1].revents;
                shoal_plat::console::with_stdin(|s| s.learn(revents));
            }
            for (f, &id) in fds.iter().zip(&ids) {
                if f.revents != 0 {
                    if let Some(s) = self.socks.get_mut(&id) {
                        let gen = s.gen;
                        s.learn(f.revents as u16 as u32);
                        if s.gen != gen {
                            self.gained(id);
                        }
                    }
                }
            }
        }
        Some(rc)
    }
}

/// What `ready` reports for a guest socket (`None`: no such socket).
fn readiness(sock: Option<&HostSock>) -> Readiness {
    match sock {
        Some(sock) if sock.host.is_some() => {
            let mut m = sock.ready;
            if sock.listening {
                m &= !POLLOUT;
            }
            Readiness { mask: m, gen: sock.gen }
        }
        // No host socket yet: an unconnected socket is writable (a send
        // fails at once) as on Linux, never readable.
        Some(sock) => Readiness { mask: if sock.ty == SOCK_DGRAM { POLLOUT } else { POLLOUT | POLLHUP }, gen: sock.gen },
        None => Readiness { mask: POLLERR | POLLHUP, gen: 0 },
    }
}

fn set_host_opt(fd: i64, level: i32, name: i32, val: &[u8]) -> Result<i64, Errno> {
    op(NetOp { op: net_op::SETSOCKOPT, handle: fd, a: level as u64, b: name as u64, buf: val.as_ptr() as u64, len: val.len() as u64, ..NetOp::default() }).0
}

/// The scheduler's idle wait (see `shoal_sched::IdleWait`): sleeps in the
/// tender until a host socket or standard input has news or the deadline
/// passes.
pub fn idle_wait(deadline: Option<u64>) -> bool {
    // One clock read for both (each is a `rdtsc`; a busy server's every
    // request passes here).
    let t0 = shoal_time::monotonic_ns();
    let timeout = match deadline {
        Some(d) => d.saturating_sub(t0),
        None => u64::MAX,
    };
    // What the tender reports is fresh: the wait's own system call (the
    // `epoll_wait` that blocked) need not ask again when it wakes.
    let Some(rc) = with(|s| {
        let rc = s.poll(timeout);
        if rc.is_some() {
            s.refreshed = shoal_plat::syscall_epoch();
        }
        rc
    }) else {
        return false;
    };
    shoal_time::account_sleep(shoal_time::monotonic_ns().saturating_sub(t0));
    // Wake the waiters only when something may have changed for them: a
    // host object became ready (rc > 0), the wait failed, or a signal
    // came from the host. A wait that ended at its deadline (the scheduler
    // expires the deadlines itself) or that the preemption tick cut short
    // changes nothing. Waking every blocked thread then made them all
    // runnable, which armed the tick again, whose expiry cut the next wait
    // short: an idle server with two blocked threads (one in accept, one
    // in read) took 100 ticks a second.
    if rc != 0 || shoal_plat::hostsig::pending() {
        crate::wake();
    }
    true
}

/// Runs `f` with the cache taken as it is: no refresh during `f` (the
/// caller blocks next if `f` finds nothing, and the idle wait then asks
/// the tender with the caller's deadline, returning at once if something
/// is ready). Afterwards the system call's refresh is still to come, so
/// whatever the caller does next sees the tender's news. This saves a
/// blocking `epoll_wait` one zero-timeout `NetPoll` (a host
/// `epoll_pwait2`) per wake-up.
pub(crate) fn without_refresh<R>(f: impl FnOnce() -> R) -> R {
    let epoch = shoal_plat::syscall_epoch();
    let prev = with(|s| core::mem::replace(&mut s.refreshed, epoch));
    let r = f();
    with(|s| {
        if prev != epoch && s.refreshed == epoch {
            s.refreshed = prev;
        }
    });
    r
}

/// Refreshes the cache once per system call, when a socket is asked about
/// and lacks a bit.
fn refresh_if_stale(s: &mut State) {
    let epoch = shoal_plat::syscall_epoch();
    if s.refreshed != epoch {
        s.refreshed = epoch;
        if s.poll(0).is_some_and(|rc| rc > 0) {
            crate::wake();
        }
    }
}

impl Backend for HostBackend {
    fn socket(&mut self, ty: i32, protocol: i32) -> Result<u64, Errno> {
        self.socket_in(AF_INET, ty, protocol)
    }

    fn socket_in(&mut self, domain: i32, ty: i32, protocol: i32) -> Result<u64, Errno> {
        if ty != SOCK_STREAM && ty != SOCK_DGRAM {
            return Err(ESOCKTNOSUPPORT);
        }
        // TCP and UDP only, as the tenders allow (they refuse the host
        // socket later, at the first bind or send): refused here, at
        // `socket`, where a program probing for a protocol looks. Go
        // probes IPPROTO_MPTCP once and listens with TCP after this error.
        if protocol != 0 && protocol != if ty == SOCK_STREAM { IPPROTO_TCP } else { IPPROTO_UDP } {
            return Err(EPROTONOSUPPORT);
        }
        Ok(with(|s| {
            s.next += 1;
            s.socks.add(s.next, HostSock::new(domain, ty, protocol))
        }))
    }

    fn socketpair(&mut self, _ty: i32, _protocol: i32) -> Result<(u64, u64), Errno> {
        Err(Errno::EOPNOTSUPP)
    }

    fn bind(&mut self, h: u64, addr: &[u8]) -> Result<(), Errno> {
        let port = port_of(addr)?;
        with(|s| {
            let ty = s.get(h)?.ty;
            if s.get(h)?.local.is_some() {
                return Err(Errno::EINVAL);
            }
            if let Some(i) = s.find_listener(ty, Some(port)) {
                s.attach(h, i)?;
                s.get(h)?.local = Some(addr.to_vec());
                return Ok(());
            }
            if s.bind_any && s.get(h)?.host.is_none() {
                return s.bind_new(h, addr);
            }
            if !s.outbound || port != 0 {
                if !s.noted {
                    s.noted = true;
                    // Published, but its one socket already went to
                    // another bind (a server binding IPv4 and IPv6 alike).
                    let taken = s.listeners.iter().any(|(l, t)| *t && l.sock_type == ty as u32 && l.port == u32::from(port));
                    let what = SockAddrText(addr);
                    use core::fmt::Write;
                    let _ = if taken {
                        writeln!(
                            shoal_plat::console::Stderr,
                            "shoal: the guest's bind to {what} was refused: published port {port} is taken by another of its sockets (one --publish gives one socket; publish it once more on another host address, e.g. --publish [::1]:HOSTPORT:{port})"
                        )
                    } else {
                        writeln!(
                            shoal_plat::console::Stderr,
                            "shoal: the guest's bind to {what} was refused: port {port} is not published (shoal run --publish HOSTPORT:{port}, or --net-bind-any)"
                        )
                    };
                }
                return Err(Errno::EACCES);
            }
            let fd = s.create_host(h)?;
            op(NetOp { op: net_op::BIND, handle: fd, addr: addr.as_ptr() as u64, addrlen: addr.len() as u64, ..NetOp::default() }).0?;
            // A port-0 bind: `getsockname` reports the port the host chose
            // (it reported port 0, and a client told it got refused).
            let local = if port == 0 { host_name(fd).unwrap_or_else(|| addr.to_vec()) } else { addr.to_vec() };
            s.get(h)?.local = Some(local);
            Ok(())
        })
    }

    fn listen(&mut self, h: u64, backlog: i32) -> Result<(), Errno> {
        with(|s| {
            let sock = s.get(h)?;
            let ty = sock.ty;
            if ty != SOCK_STREAM {
                return Err(Errno::EOPNOTSUPP);
            }
            if sock.host.is_none() {
                // An unbound socket: a --listen-fd listener, if any; with
                // --net-bind-any, an ephemeral port on the family's any
                // address, as Linux binds an unbound socket that listens.
                match s.find_listener(ty, None) {
                    Some(i) => {
                        s.attach(h, i)?;
                    }
                    None if s.bind_any => {
                        let domain = s.get(h)?.domain;
                        let mut any = vec![0u8; if domain == AF_INET6 { 28 } else { 16 }];
                        any[..2].copy_from_slice(&(domain as u16).to_ne_bytes());
                        s.bind_new(h, &any)?;
                    }
                    None => return Err(Errno::EACCES),
                }
            }
            let sock = s.get(h)?;
            sock.listening = true;
            sock.ready &= !POLLOUT;
            let fd = sock.host.ok_or(Errno::EINVAL)?;
            simple(net_op::LISTEN, fd, backlog.clamp(1, 4096) as u64).map(|_| ())
        })
    }

    fn accept(&mut self, h: u64) -> Result<(u64, SockAddr), Errno> {
        with(|s| {
            let sock = s.get(h)?;
            let fd = sock.host.ok_or(Errno::EINVAL)?;
            if !sock.listening {
                return Err(Errno::EINVAL);
            }
            let (domain, ty, proto) = (sock.domain, sock.ty, sock.proto);
            let guest_port = sock.listener.map(|i| s.listeners[i].0.port).filter(|&p| p != LISTENER_ANY_PORT).map(|p| p as u16);
            let mut peer = [0u8; 128];
            let (r, o) = op(NetOp { op: net_op::ACCEPT, handle: fd, addr: peer.as_mut_ptr() as u64, addrlen: peer.len() as u64, ..NetOp::default() });
            let nfd = match r {
                Ok(v) => v,
                Err(e) => {
                    if e == Errno::EAGAIN {
                        s.get(h)?.ready &= !POLLIN;
                    }
                    return Err(e);
                }
            };
            let mut c = HostSock::new(domain, ty, proto);
            c.host = Some(nfd);
            c.ready = POLLOUT;
            c.guest_port = guest_port;
            s.next += 1;
            let id = s.socks.add(s.next, c);
            s.by_host.insert(nfd, id);
            let n = (o.a as usize).min(peer.len());
            Ok((id, peer[..n].to_vec()))
        })
    }

    fn connect(&mut self, h: u64, addr: &[u8]) -> Result<(), Errno> {
        port_of(addr)?;
        with(|s| {
            let fd = s.create_host(h)?;
            let r = op(NetOp { op: net_op::CONNECT, handle: fd, addr: addr.as_ptr() as u64, addrlen: addr.len() as u64, ..NetOp::default() }).0;
            // What was known before connecting (an unconnected socket
            // reports a hang-up) no longer holds; the tender reports the
            // connection's completion.
            match r {
                Ok(_) => {
                    s.get(h)?.ready = POLLOUT;
                    s.gained(h);
                    Ok(())
                }
                Err(e) if e == EINPROGRESS => {
                    s.get(h)?.ready = 0;
                    Err(e)
                }
                Err(e) => Err(e),
            }
        })
    }

    fn send(&mut self, h: u64, data: &[&[u8]], to: Option<&[u8]>, flags: i32) -> Result<usize, Errno> {
        with(|s| {
            let fd = match s.get(h)?.host {
                Some(fd) => fd,
                None if to.is_some() => s.create_host(h)?,
                None => return Err(ENOTCONN),
            };
            // One buffer for a datagram (it must go in one call); a stream
            // takes the pieces in order until one is short.
            let joined: Vec<u8>;
            let one: [&[u8]; 1];
            let bufs: &[&[u8]] = if data.len() > 1 && s.get(h)?.ty == SOCK_DGRAM {
                joined = data.concat();
                one = [&joined[..]];
                &one
            } else {
                data
            };
            let (ap, al) = to.map_or((0, 0), |a| (a.as_ptr() as u64, a.len() as u64));
            let mut total = 0usize;
            for &b in bufs {
                if b.is_empty() && total > 0 {
                    continue;
                }
                let r = op(NetOp {
                    op: net_op::SEND,
                    handle: fd,
                    flags: flags as u32,
                    buf: b.as_ptr() as u64,
                    len: b.len() as u64,
                    addr: ap,
                    addrlen: al,
                    ..NetOp::default()
                })
                .0;
                match r {
                    Ok(n) => {
                        total += n as usize;
                        if (n as usize) < b.len() {
                            s.get(h)?.ready &= !POLLOUT;
                            break;
                        }
                    }
                    Err(e) => {
                        if e == Errno::EAGAIN {
                            s.get(h)?.ready &= !POLLOUT;
                        }
                        if total == 0 {
                            return Err(e);
                        }
                        break;
                    }
                }
            }
            Ok(total)
        })
    }

    fn recv(&mut self, h: u64, bufs: &mut [&mut [u8]], flags: i32) -> Result<Received, Errno> {
        with(|s| {
            let sock = s.get(h)?;
            let fd = sock.host.ok_or(ENOTCONN)?;
            let dgram = sock.ty == SOCK_DGRAM;
            let mut from = [0u8; 128];
            let mut got = Received::default();
            if bufs.is_empty() {
                return Ok(got);
            }
            // Only a datagram's sender is reported (a stream's peer is
            // fixed): a stream receive asks the tender for no address.
            let recv_into = |buf: &mut [u8], flags: i32, from: &mut [u8; 128]| {
                let (addr, addrlen) = if dgram { (from.as_mut_ptr() as u64, from.len() as u64) } else { (0, 0) };
                op(NetOp {
                    op: net_op::RECV,
                    handle: fd,
                    flags: flags as u32,
                    buf: buf.as_mut_ptr() as u64,
                    len: buf.len() as u64,
                    addr,
                    addrlen,
                    ..NetOp::default()
                })
            };
            let first = if dgram && bufs.len() > 1 {
                // A datagram must come in one call: gather, then scatter.
                let mut scratch = vec![0u8; bufs.iter().map(|b| b.len()).sum()];
                let r = recv_into(&mut scratch, flags, &mut from);
                if let (Ok(n), _) = r {
                    let mut src = &scratch[..(n as usize).min(scratch.len())];
                    for b in bufs.iter_mut() {
                        let k = src.len().min(b.len());
                        b[..k].copy_from_slice(&src[..k]);
                        src = &src[k..];
                    }
                }
                r
            } else {
                recv_into(bufs[0], flags, &mut from)
            };
            let (r, o) = first;
            let n = match r {
                Ok(n) => n as usize,
                Err(e) => {
                    if e == Errno::EAGAIN && flags & MSG_PEEK == 0 {
                        s.get(h)?.drained();
                    }
                    return Err(e);
                }
            };
            got.len = n;
            if !dgram && n > 0 && n == bufs[0].len() && bufs.len() > 1 {
                // A stream that filled the first buffer: more may follow.
                for b in bufs.iter_mut().skip(1) {
                    match recv_into(b, flags | MSG_DONTWAIT, &mut from).0 {
                        Ok(k) if k > 0 => {
                            got.len += k as usize;
                            if (k as usize) < b.len() {
                                break;
                            }
                        }
                        _ => break,
                    }
                }
            } else if !dgram && n > 0 && n < bufs[0].len() && flags & MSG_PEEK == 0 {
                // Drained (a stream returns less only when it has no more):
                // new data is a new report, or a refresh finds it.
                s.get(h)?.drained();
            }
            if o.a > 0 && dgram {
                got.from = Some(from[..(o.a as usize).min(from.len())].to_vec());
            }
            Ok(got)
        })
    }

    fn shutdown(&mut self, h: u64, how: i32) -> Result<(), Errno> {
        with(|s| {
            let fd = s.get(h)?.host.ok_or(ENOTCONN)?;
            simple(net_op::SHUTDOWN, fd, how as u64).map(|_| ())
        })
    }

    fn name(&self, h: u64, peer: bool) -> Result<SockAddr, Errno> {
        with(|s| {
            let sock = s.get(h)?;
            if !peer {
                if let Some(l) = &sock.local {
                    return Ok(l.clone());
                }
            }
            let Some(fd) = sock.host else {
                if peer {
                    return Err(ENOTCONN);
                }
                // Unbound: the family's any-address, port 0.
                let len = if sock.domain == AF_INET6 { 28 } else { 16 };
                let mut a = vec![0u8; len];
                a[..2].copy_from_slice(&(sock.domain as u16).to_ne_bytes());
                return Ok(a);
            };
            let mut buf = [0u8; 128];
            let code = if peer { net_op::GETPEERNAME } else { net_op::GETSOCKNAME };
            let n = op(NetOp { op: code, handle: fd, addr: buf.as_mut_ptr() as u64, addrlen: buf.len() as u64, ..NetOp::default() }).0?;
            let mut a = buf[..(n as usize).min(buf.len())].to_vec();
            // An accepted connection of a published port: the guest's port.
            if let (false, Some(p)) = (peer, sock.guest_port) {
                a = with_port(a, p);
            }
            Ok(a)
        })
    }

    fn setsockopt(&mut self, h: u64, level: i32, name: i32, val: &[u8]) -> Result<(), Errno> {
        with(|s| {
            let sock = s.get(h)?;
            if level == SOL_SOCKET {
                // Kept for getsockopt and for a host socket made later;
                // options it does not keep go to the host only.
                let _ = sock.opts.set(name, val);
            }
            // A handed-over listener was bound by the tender: address reuse
            // options are settled there, and the guest's (nginx sets
            // SO_REUSEPORT) are kept for getsockopt only.
            if sock.listener.is_some() && level == SOL_SOCKET && (name == SO_REUSEADDR || name == SO_REUSEPORT) {
                return Ok(());
            }
            match sock.host {
                Some(fd) => set_host_opt(fd, level, name, val).map(|_| ()),
                None => {
                    // Settled at the bind, which `BIND_NEW` makes.
                    if level == IPPROTO_IPV6 && name == IPV6_V6ONLY {
                        sock.v6only = val.get(..4).is_some_and(|v| v != [0; 4]);
                    }
                    Ok(())
                }
            }
        })
    }

    fn getsockopt(&mut self, h: u64, level: i32, name: i32) -> Result<Vec<u8>, Errno> {
        with(|s| {
            let sock = s.get(h)?;
            if level == SOL_SOCKET {
                match name {
                    SO_TYPE => return Ok(sock.ty.to_ne_bytes().to_vec()),
                    SO_DOMAIN => return Ok(sock.domain.to_ne_bytes().to_vec()),
                    SO_ACCEPTCONN => return Ok((sock.listening as i32).to_ne_bytes().to_vec()),
                    _ => {}
                }
            }
            let Some(fd) = sock.host else {
                return match (level, name) {
                    (SOL_SOCKET, SO_ERROR) => Ok(0i32.to_ne_bytes().to_vec()),
                    (SOL_SOCKET, SO_PROTOCOL) => Ok(sock.proto.to_ne_bytes().to_vec()),
                    (SOL_SOCKET, n) => sock.opts.get(n),
                    _ => Ok(0i32.to_ne_bytes().to_vec()),
                };
            };
            let mut buf = [0u8; 256];
            let n = op(NetOp {
                op: net_op::GETSOCKOPT,
                handle: fd,
                a: level as u64,
                b: name as u64,
                buf: buf.as_mut_ptr() as u64,
                len: buf.len() as u64,
                ..NetOp::default()
            })
            .0?;
            Ok(buf[..(n as usize).min(buf.len())].to_vec())
        })
    }

    fn ready(&self, h: u64) -> Readiness {
        with(|s| {
            // A socket lacking a bit refreshes the cache (once per system
            // call) and is looked up again; otherwise one lookup.
            if let Some(sock) = s.socks.get(&h) {
                let missing = sock.host.is_some() && sock.ready & (POLLIN | POLLOUT) != (POLLIN | POLLOUT);
                if !missing || s.refreshed == shoal_plat::syscall_epoch() {
                    return readiness(Some(sock));
                }
            }
            refresh_if_stale(s);
            readiness(s.socks.get(&h))
        })
    }

    fn gains_since(&self, since: u64, out: &mut Vec<u64>) -> (u64, bool) {
        with(|s| {
            refresh_if_stale(s);
            (s.seq, s.gains_after_into(since, out))
        })
    }

    fn is_stream(&self, h: u64) -> bool {
        with(|s| s.socks.get(&h).is_some_and(|k| k.ty == SOCK_STREAM))
    }

    fn nread(&self, h: u64) -> usize {
        // The tender has no FIONREAD: report what the cache says (readable
        // means at least one byte or end of file).
        with(|s| s.socks.get(&h).map_or(0, |k| usize::from(k.ready & POLLIN != 0)))
    }

    fn close(&mut self, h: u64) {
        with(|s| {
            if let Some(sock) = s.socks.remove(&h) {
                if let Some(fd) = sock.host {
                    if s.by_host.get(fd) == Some(h) {
                        s.by_host.remove(fd);
                    }
                }
                if let Some(i) = sock.listener {
                    // The tender's listener stays open for a later bind.
                    if let Some(l) = s.listeners.get_mut(i) {
                        l.1 = false;
                    }
                } else if let Some(fd) = sock.host {
                    let _ = simple(net_op::CLOSE, fd, 0);
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sin(port: u16) -> Vec<u8> {
        let mut a = vec![0u8; 16];
        a[..2].copy_from_slice(&(AF_INET as u16).to_ne_bytes());
        a[2..4].copy_from_slice(&port.to_be_bytes());
        a
    }

    #[test]
    fn ports_of_addresses_and_bad_addresses() {
        assert_eq!(port_of(&sin(8080)), Ok(8080));
        let mut six = vec![0u8; 28];
        six[..2].copy_from_slice(&(AF_INET6 as u16).to_ne_bytes());
        six[2..4].copy_from_slice(&443u16.to_be_bytes());
        assert_eq!(port_of(&six), Ok(443));
        assert_eq!(port_of(&six[..20]), Err(Errno::EINVAL));
        assert_eq!(port_of(&[1, 0, 0, 0]), Err(Errno::EAFNOSUPPORT));
        assert_eq!(port_of(&[]), Err(Errno::EINVAL));
        assert_eq!(port_of(&with_port(sin(1), 2)), Ok(2));
    }

    #[test]
    fn a_bind_attaches_to_the_listener_of_its_port_then_to_an_any_port_one() {
        let l = |port, ty: i32| (Listener { handle: 3, port, sock_type: ty as u32, family: AF_INET as u32, reserved: 0 }, false);
        let mut s = State { listeners: vec![l(80, SOCK_STREAM), l(LISTENER_ANY_PORT, SOCK_STREAM), l(53, SOCK_DGRAM)], ..State::new() };
        assert_eq!(s.find_listener(SOCK_STREAM, Some(80)), Some(0));
        assert_eq!(s.find_listener(SOCK_DGRAM, Some(53)), Some(2));
        // No TCP listener for 8080: the handed-over (any-port) one.
        assert_eq!(s.find_listener(SOCK_STREAM, Some(8080)), Some(1));
        assert_eq!(s.find_listener(SOCK_DGRAM, Some(54)), None);
        s.listeners[0].1 = true;
        assert_eq!(s.find_listener(SOCK_STREAM, Some(80)), Some(1), "a taken listener is not attached twice");
        assert_eq!(s.find_listener(SOCK_STREAM, None), Some(1));
    }

    #[test]
    fn watch_reports_replace_the_bits_and_a_hung_up_socket_stays_readable() {
        let mut k = HostSock::new(AF_INET, SOCK_STREAM, 0);
        // An unconnected socket's report (hang-up), then the connection's.
        k.report(POLLOUT | POLLHUP);
        assert_eq!((k.ready, k.gen), (POLLOUT | POLLHUP, 1));
        k.report(POLLOUT);
        assert_eq!((k.ready, k.gen), (POLLOUT, 1), "a report of fewer bits is no new readiness");
        k.report(POLLIN | POLLOUT);
        assert_eq!((k.ready, k.gen), (POLLIN | POLLOUT, 2));
        k.drained();
        assert_eq!(k.ready, POLLOUT, "drained: the next arrival is a new report");
        k.report(POLLIN | POLLOUT | POLLRDHUP);
        k.drained();
        assert_eq!(k.ready & POLLIN, POLLIN, "end of file stays readable");
    }

    #[test]
    fn the_gain_log_names_what_gained_since_and_says_when_it_forgot() {
        let mut s = State::new();
        assert_eq!(s.gains_after(0), Some(vec![]));
        s.gained(7);
        s.gained(9);
        let at = s.seq;
        s.gained(7);
        assert_eq!(s.gains_after(at), Some(vec![7]));
        assert_eq!(s.gains_after(0), Some(vec![7, 9, 7]));
        for h in 0..MAX_GAINS as u64 {
            s.gained(h);
        }
        assert_eq!(s.gains_after(at), None, "older than the log: ask every socket");
        assert_eq!(s.gains_after(s.seq - 1), Some(vec![MAX_GAINS as u64 - 1]));
    }

    #[test]
    fn the_host_index_maps_small_and_large_handles() {
        let mut x = HostIndex::default();
        assert!(x.is_empty());
        x.insert(5, 1);
        x.insert(DENSE_HANDLES + 3, 2);
        x.insert(5, 3);
        assert_eq!((x.get(5), x.get(DENSE_HANDLES + 3), x.get(4), x.get(-1), x.get(100_000)), (Some(3), Some(2), None, None, None));
        assert_eq!(x.len, 2, "a handle mapped again counts once");
        x.remove(5);
        x.remove(5);
        x.remove(7);
        assert_eq!((x.get(5), x.len), (None, 1));
        x.remove(DENSE_HANDLES + 3);
        assert!(x.is_empty());
    }

    #[test]
    fn without_refresh_asks_no_one_and_leaves_the_refresh_to_come() {
        // A connected socket whose cache lacks "readable": asked about, it
        // would make the system call's one refresh (a NetPoll hypercall,
        // which panics in a unit test) — not inside `without_refresh`.
        shoal_plat::next_syscall_epoch();
        let epoch = shoal_plat::syscall_epoch();
        let id = with(|s| {
            s.refreshed = epoch - 1;
            s.next += 1;
            let mut k = HostSock::new(AF_INET, SOCK_STREAM, 0);
            k.host = Some(1000);
            k.ready = POLLOUT;
            s.socks.add(s.next, k)
        });
        let r = without_refresh(|| HostBackend.ready(id));
        assert_eq!(r.mask, POLLOUT, "the cache as it is");
        assert_eq!(with(|s| s.refreshed), epoch - 1, "the refresh is still to come");
        // A system call that refreshed already stays refreshed.
        with(|s| s.refreshed = epoch);
        without_refresh(|| ());
        assert_eq!(with(|s| s.refreshed), epoch);
        assert_eq!(HostBackend.ready(id).mask, POLLOUT, "refreshed: asks no one again");
        with(|s| s.socks.remove(&id));
    }

    #[test]
    fn readiness_gains_bump_the_generation_only_when_new() {
        let mut k = HostSock::new(AF_INET, SOCK_STREAM, 0);
        k.learn(POLLOUT);
        assert_eq!(k.gen, 1);
        k.learn(POLLOUT);
        assert_eq!(k.gen, 1);
        k.learn(POLLIN);
        assert_eq!((k.gen, k.ready), (2, POLLIN | POLLOUT));
    }
}
