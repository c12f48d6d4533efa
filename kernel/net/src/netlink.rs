//! `AF_NETLINK` route sockets (`NETLINK_ROUTE`): what `getifaddrs` and
//! `if_nameindex` (glibc), and through them Node's
//! `os.networkInterfaces()` and Python's `socket.if_nameindex()`, ask the
//! kernel about the instance's network interfaces.
//!
//! The instance has one interface, its own loopback (module `lo`): `lo`,
//! index 1, up, 127.0.0.1/8 and ::1/128 — what a Linux network namespace
//! with only `lo` up shows. Host-socket passthrough (`--publish`,
//! `--net-outbound`) gives the program sockets, not interfaces, so it adds
//! none. [`IFACE`] is that description, shared with the `SIOCGIF*`
//! ioctls (module `sys`).
//!
//! Requests answered as Linux answers them: `RTM_GETLINK` (a dump, or one
//! interface by index or `IFLA_IFNAME`) and `RTM_GETADDR` dumps (filtered
//! by family), each dump one datagram of `NLM_F_MULTI` messages followed
//! by `NLMSG_DONE`, with the caller's sequence number and port id; every
//! other request is an `NLMSG_ERROR` of `EOPNOTSUPP` (Linux's answer for a
//! type no handler serves). Attributes carry what the interface is
//! (name, addresses, MTU, queue length, state); counters (`IFLA_STATS*`)
//! and timestamps (`IFA_CACHEINFO`) are left out rather than made up, so
//! `getifaddrs` gives `ifa_data` NULL. Multicast groups can be joined but
//! nothing is ever announced (interfaces never change); messages to
//! another socket's port id are refused (`ECONNREFUSED`).
//!
//! Replies wait in the socket's queue until read; past `SO_RCVBUF` bytes
//! a reply is dropped and the next receive fails with `ENOBUFS`, as a
//! Linux netlink socket overruns.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use shoal_plat::Errno;
use shoal_vfs::obj::*;

use crate::abi::*;
use crate::backend::{Backend, Received, SockAddr, SockOpts};

/// `AF_NETLINK`.
pub const AF_NETLINK: i32 = 16;
const SOCK_RAW: i32 = 3;
const NETLINK_ROUTE: i32 = 0;
const SOL_NETLINK: i32 = 270;
/// Largest `NETLINK_*` socket option number kept (`NETLINK_GET_STRICT_CHK`).
const NETLINK_OPT_MAX: i32 = 12;

const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_MIN_TYPE: u16 = 0x10;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_MULTI: u16 = 0x2;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_CAPPED: u16 = 0x100;

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWADDR: u16 = 20;
const RTM_GETADDR: u16 = 22;

const IFLA_ADDRESS: u16 = 1;
const IFLA_BROADCAST: u16 = 2;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_TXQLEN: u16 = 13;
const IFLA_OPERSTATE: u16 = 16;
const IFLA_LINKMODE: u16 = 17;
const IFLA_CARRIER: u16 = 33;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_LABEL: u16 = 3;
const IFA_FLAGS: u16 = 8;
const IFA_F_PERMANENT: u8 = 0x80;
const RT_SCOPE_HOST: u8 = 254;
const ARPHRD_LOOPBACK: u16 = 772;

/// `IFF_UP`, `IFF_LOOPBACK`, `IFF_RUNNING`, `IFF_LOWER_UP`.
pub const IFF_LO: u32 = 0x1 | 0x8 | 0x40 | 0x10000;

/// An interface of the instance.
pub struct Iface {
    /// `ifr_name`, `IFLA_IFNAME`.
    pub name: &'static [u8],
    /// `ifi_index`.
    pub index: u32,
    /// `IFF_*`.
    pub flags: u32,
    /// `IFLA_MTU`.
    pub mtu: u32,
    /// IPv4 address and prefix length.
    pub v4: ([u8; 4], u8),
    /// IPv6 address and prefix length.
    pub v6: ([u8; 16], u8),
}

/// The instance's one interface (module documentation).
pub const IFACE: Iface =
    Iface { name: b"lo", index: 1, flags: IFF_LO, mtu: 65536, v4: ([127, 0, 0, 1], 8), v6: ([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], 128) };

#[derive(Clone, Debug, PartialEq)]
struct Sock {
    ty: i32,
    /// Bound port id (0: not yet bound).
    portid: u32,
    groups: u32,
    /// Connected destination (`connect`): port id and groups.
    dst: (u32, u32),
    /// Replies not yet read, one datagram each.
    q: VecDeque<Vec<u8>>,
    queued: usize,
    /// Pending error (`ENOBUFS` after an overrun).
    err: i32,
    /// `SOL_NETLINK` boolean options, one bit each.
    nlopts: u32,
    opts: SockOpts,
    gen: u64,
}

/// The netlink sockets of the instance.
#[derive(Clone, Default, PartialEq)]
pub struct Netlink {
    socks: BTreeMap<u64, Sock>,
    next: u64,
    /// Linux's rover for port ids after the first: -4096 downwards.
    rover: u32,
}

/// `struct sockaddr_nl` bytes.
fn sockaddr(pid: u32, groups: u32) -> SockAddr {
    let mut v = Vec::with_capacity(12);
    v.extend_from_slice(&(AF_NETLINK as u16).to_ne_bytes());
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(&pid.to_ne_bytes());
    v.extend_from_slice(&groups.to_ne_bytes());
    v
}

/// Port id and groups of `struct sockaddr_nl` bytes (`EINVAL` if short or
/// of another family).
fn parse(addr: &[u8]) -> Result<(u32, u32), Errno> {
    if addr.len() < 12 || u16::from_ne_bytes([addr[0], addr[1]]) as i32 != AF_NETLINK {
        return Err(Errno::EINVAL);
    }
    let w = |i: usize| u32::from_ne_bytes([addr[i], addr[i + 1], addr[i + 2], addr[i + 3]]);
    Ok((w(4), w(8)))
}

/// Builds netlink messages (`NLMSG_ALIGN`ed, attributes `NLA_ALIGN`ed).
struct Msgs {
    buf: Vec<u8>,
    start: usize,
}

impl Msgs {
    fn new() -> Msgs {
        Msgs { buf: Vec::new(), start: 0 }
    }
    fn begin(&mut self, ty: u16, flags: u16, seq: u32, pid: u32) {
        self.start = self.buf.len();
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(&flags.to_ne_bytes());
        self.buf.extend_from_slice(&seq.to_ne_bytes());
        self.buf.extend_from_slice(&pid.to_ne_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
    fn attr(&mut self, ty: u16, val: &[u8]) {
        self.buf.extend_from_slice(&((4 + val.len()) as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(val);
        self.pad();
    }
    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }
    fn end(&mut self) {
        self.pad();
        let len = (self.buf.len() - self.start) as u32;
        self.buf[self.start..self.start + 4].copy_from_slice(&len.to_ne_bytes());
    }
}

/// `RTM_NEWLINK` for the interface.
fn link_msg(m: &mut Msgs, flags: u16, seq: u32, pid: u32) {
    let i = &IFACE;
    m.begin(RTM_NEWLINK, flags, seq, pid);
    // struct ifinfomsg
    m.bytes(&[0, 0]);
    m.bytes(&ARPHRD_LOOPBACK.to_ne_bytes());
    m.bytes(&(i.index as i32).to_ne_bytes());
    m.bytes(&i.flags.to_ne_bytes());
    m.bytes(&0u32.to_ne_bytes());
    let mut name = i.name.to_vec();
    name.push(0);
    m.attr(IFLA_IFNAME, &name);
    m.attr(IFLA_TXQLEN, &1000u32.to_ne_bytes());
    // IF_OPER_UNKNOWN, as Linux reports for lo.
    m.attr(IFLA_OPERSTATE, &[0]);
    m.attr(IFLA_LINKMODE, &[0]);
    m.attr(IFLA_MTU, &i.mtu.to_ne_bytes());
    m.attr(IFLA_CARRIER, &[1]);
    m.attr(IFLA_ADDRESS, &[0; 6]);
    m.attr(IFLA_BROADCAST, &[0; 6]);
    m.end();
}

/// `RTM_NEWADDR`s for the interface's addresses of `family`
/// (`AF_UNSPEC`: all).
fn addr_msgs(m: &mut Msgs, family: u8, seq: u32, pid: u32) {
    let i = &IFACE;
    let mut label = i.name.to_vec();
    label.push(0);
    if family == AF_UNSPEC as u8 || family == AF_INET as u8 {
        m.begin(RTM_NEWADDR, NLM_F_MULTI, seq, pid);
        m.bytes(&[AF_INET as u8, i.v4.1, IFA_F_PERMANENT, RT_SCOPE_HOST]);
        m.bytes(&i.index.to_ne_bytes());
        m.attr(IFA_ADDRESS, &i.v4.0);
        m.attr(IFA_LOCAL, &i.v4.0);
        m.attr(IFA_LABEL, &label);
        m.attr(IFA_FLAGS, &(IFA_F_PERMANENT as u32).to_ne_bytes());
        m.end();
    }
    if family == AF_UNSPEC as u8 || family == AF_INET6 as u8 {
        m.begin(RTM_NEWADDR, NLM_F_MULTI, seq, pid);
        m.bytes(&[AF_INET6 as u8, i.v6.1, IFA_F_PERMANENT, RT_SCOPE_HOST]);
        m.bytes(&i.index.to_ne_bytes());
        m.attr(IFA_ADDRESS, &i.v6.0);
        m.attr(IFA_FLAGS, &(IFA_F_PERMANENT as u32).to_ne_bytes());
        m.end();
    }
}

/// `NLMSG_DONE` ending a dump.
fn done_msg(seq: u32, pid: u32) -> Vec<u8> {
    let mut m = Msgs::new();
    m.begin(NLMSG_DONE, NLM_F_MULTI, seq, pid);
    m.bytes(&0i32.to_ne_bytes());
    m.end();
    m.buf
}

/// `NLMSG_ERROR` for request `req` (its whole message on an error, its
/// header alone on an acknowledgement, as Linux answers without
/// `NETLINK_CAP_ACK`).
fn error_msg(req: &[u8], err: i32, seq: u32, pid: u32) -> Vec<u8> {
    let mut m = Msgs::new();
    m.begin(NLMSG_ERROR, if err == 0 { NLM_F_CAPPED } else { 0 }, seq, pid);
    m.bytes(&(-err).to_ne_bytes());
    m.bytes(if err == 0 { &req[..NLMSG_HDRLEN] } else { req });
    m.end();
    m.buf
}

/// The attribute `ty` among the attributes in `attrs`.
fn find_attr(mut attrs: &[u8], ty: u16) -> Option<&[u8]> {
    while attrs.len() >= 4 {
        let len = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
        let t = u16::from_ne_bytes([attrs[2], attrs[3]]) & 0x3fff;
        if len < 4 || len > attrs.len() {
            return None;
        }
        if t == ty {
            return Some(&attrs[4..len]);
        }
        attrs = &attrs[((len + 3) & !3).min(attrs.len())..];
    }
    None
}

/// The replies (datagrams) to one request message `req` from port `pid`.
fn answer(req: &[u8], pid: u32, out: &mut Vec<Vec<u8>>) {
    let ty = u16::from_ne_bytes([req[4], req[5]]);
    let flags = u16::from_ne_bytes([req[6], req[7]]);
    let seq = u32::from_ne_bytes([req[8], req[9], req[10], req[11]]);
    let body = &req[NLMSG_HDRLEN..];
    // Linux answers only requests; control messages get at most an ack.
    if flags & NLM_F_REQUEST == 0 {
        return;
    }
    if ty < NLMSG_MIN_TYPE {
        if flags & NLM_F_ACK != 0 {
            out.push(error_msg(req, 0, seq, pid));
        }
        return;
    }
    let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
    let r: Result<(), Errno> = match ty {
        RTM_GETLINK if dump => {
            let mut m = Msgs::new();
            link_msg(&mut m, NLM_F_MULTI, seq, pid);
            out.push(m.buf);
            out.push(done_msg(seq, pid));
            return;
        }
        RTM_GETLINK => {
            // By index, or by name when the index is 0.
            let index = body.get(4..8).map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
            let name = body.get(16..).and_then(|a| find_attr(a, IFLA_IFNAME)).map(|n| n.split(|&c| c == 0).next().unwrap_or(n));
            let ours = match (index, name) {
                (i, _) if i > 0 => i as u32 == IFACE.index,
                (0, Some(n)) => n == IFACE.name,
                _ => false,
            };
            if ours {
                let mut m = Msgs::new();
                link_msg(&mut m, 0, seq, pid);
                out.push(m.buf);
                Ok(())
            } else if index == 0 && name.is_none() {
                Err(Errno::EINVAL)
            } else {
                Err(Errno::ENODEV)
            }
        }
        RTM_GETADDR if dump => {
            let mut m = Msgs::new();
            addr_msgs(&mut m, body.first().copied().unwrap_or(0), seq, pid);
            if !m.buf.is_empty() {
                out.push(m.buf);
            }
            out.push(done_msg(seq, pid));
            return;
        }
        _ => Err(Errno::EOPNOTSUPP),
    };
    match r {
        Err(e) => out.push(error_msg(req, e.0, seq, pid)),
        Ok(()) if flags & NLM_F_ACK != 0 => out.push(error_msg(req, 0, seq, pid)),
        Ok(()) => {}
    }
}

impl Netlink {
    /// Bytes of heap the sockets hold (an estimate, for the recovery log).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.socks.values().map(|s| core::mem::size_of::<Sock>() + 32 + s.queued).sum()
    }

    /// Sockets.
    pub fn len(&self) -> usize {
        self.socks.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.socks.is_empty()
    }

    fn sock(&self, h: u64) -> Result<&Sock, Errno> {
        self.socks.get(&h).ok_or(Errno::EBADF)
    }
    fn sock_mut(&mut self, h: u64) -> Result<&mut Sock, Errno> {
        self.socks.get_mut(&h).ok_or(Errno::EBADF)
    }

    fn taken(&self, pid: u32) -> bool {
        self.socks.values().any(|s| s.portid == pid)
    }

    /// Gives `h` a port id if it has none: the process id for the first
    /// socket, then Linux's negative rover.
    fn autobind(&mut self, h: u64) -> Result<u32, Errno> {
        if let Some(p) = self.sock(h).ok().map(|s| s.portid).filter(|&p| p != 0) {
            return Ok(p);
        }
        let mut pid = shoal_process::PID as u32;
        while self.taken(pid) {
            if self.rover == 0 || self.rover > (-4096i32) as u32 {
                self.rover = (-4096i32) as u32;
            }
            pid = self.rover;
            self.rover -= 1;
        }
        self.sock_mut(h)?.portid = pid;
        Ok(pid)
    }

    fn push(&mut self, h: u64, msgs: Vec<Vec<u8>>) -> Result<(), Errno> {
        let s = self.sock_mut(h)?;
        for d in msgs {
            if s.queued + d.len() > s.opts.rcvbuf as usize {
                s.err = ENOBUFS.0;
                break;
            }
            s.queued += d.len();
            s.q.push_back(d);
        }
        s.gen += 1;
        Ok(())
    }
}

impl Backend for Netlink {
    fn socket(&mut self, ty: i32, protocol: i32) -> Result<u64, Errno> {
        if ty != SOCK_RAW && ty != SOCK_DGRAM {
            return Err(ESOCKTNOSUPPORT);
        }
        if protocol != NETLINK_ROUTE {
            return Err(EPROTONOSUPPORT);
        }
        self.next += 1;
        let s = Sock { ty, portid: 0, groups: 0, dst: (0, 0), q: VecDeque::new(), queued: 0, err: 0, nlopts: 0, opts: SockOpts::default(), gen: 0 };
        self.socks.insert(self.next, s);
        Ok(self.next)
    }

    fn socketpair(&mut self, _ty: i32, _protocol: i32) -> Result<(u64, u64), Errno> {
        Err(Errno::EOPNOTSUPP)
    }

    fn bind(&mut self, h: u64, addr: &[u8]) -> Result<(), Errno> {
        let (pid, groups) = parse(addr)?;
        let cur = self.sock(h)?.portid;
        if cur != 0 && pid != 0 && pid != cur {
            return Err(Errno::EINVAL);
        }
        if cur == 0 && pid != 0 {
            if self.taken(pid) {
                return Err(EADDRINUSE);
            }
            self.sock_mut(h)?.portid = pid;
        } else {
            self.autobind(h)?;
        }
        self.sock_mut(h)?.groups = groups;
        Ok(())
    }

    fn listen(&mut self, _h: u64, _backlog: i32) -> Result<(), Errno> {
        Err(Errno::EOPNOTSUPP)
    }

    fn accept(&mut self, _h: u64) -> Result<(u64, SockAddr), Errno> {
        Err(Errno::EOPNOTSUPP)
    }

    fn connect(&mut self, h: u64, addr: &[u8]) -> Result<(), Errno> {
        if addr.len() >= 2 && u16::from_ne_bytes([addr[0], addr[1]]) as i32 == AF_UNSPEC {
            self.sock_mut(h)?.dst = (0, 0);
            return Ok(());
        }
        let dst = parse(addr)?;
        self.autobind(h)?;
        self.sock_mut(h)?.dst = dst;
        Ok(())
    }

    fn send(&mut self, h: u64, data: &[&[u8]], to: Option<&[u8]>, _flags: i32) -> Result<usize, Errno> {
        let dst = match to {
            Some(a) => parse(a)?.0,
            None => self.sock(h)?.dst.0,
        };
        if dst != 0 {
            // Another socket of the instance's, or one that is not there.
            return Err(ECONNREFUSED);
        }
        let pid = self.autobind(h)?;
        let buf: Vec<u8> = data.iter().flat_map(|d| d.iter().copied()).collect();
        let mut out = Vec::new();
        let mut rest = &buf[..];
        // As Linux's netlink_rcv_skb: stop at the first message whose
        // length does not fit.
        while rest.len() >= NLMSG_HDRLEN {
            let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            if len < NLMSG_HDRLEN || len > rest.len() {
                break;
            }
            answer(&rest[..len], pid, &mut out);
            rest = &rest[((len + 3) & !3).min(rest.len())..];
        }
        self.push(h, out)?;
        Ok(buf.len())
    }

    fn recv(&mut self, h: u64, bufs: &mut [&mut [u8]], flags: i32) -> Result<Received, Errno> {
        let s = self.sock_mut(h)?;
        let Some(d) = s.q.front() else {
            if s.err != 0 {
                return Err(Errno(core::mem::take(&mut s.err)));
            }
            return Err(Errno::EAGAIN);
        };
        let mut copied = 0;
        for b in bufs.iter_mut() {
            let n = b.len().min(d.len() - copied);
            b[..n].copy_from_slice(&d[copied..copied + n]);
            copied += n;
        }
        let full = d.len();
        if flags & MSG_PEEK == 0 {
            s.queued -= full;
            s.q.pop_front();
        }
        let trunc = copied < full;
        Ok(Received {
            len: if trunc && flags & MSG_TRUNC != 0 { full } else { copied },
            from: Some(sockaddr(0, 0)),
            flags: if trunc { MSG_TRUNC } else { 0 },
            fds: Vec::new(),
        })
    }

    fn shutdown(&mut self, _h: u64, _how: i32) -> Result<(), Errno> {
        Err(Errno::EOPNOTSUPP)
    }

    fn name(&self, h: u64, peer: bool) -> Result<SockAddr, Errno> {
        let s = self.sock(h)?;
        Ok(if peer { sockaddr(s.dst.0, s.dst.1) } else { sockaddr(s.portid, s.groups) })
    }

    fn setsockopt(&mut self, h: u64, level: i32, name: i32, val: &[u8]) -> Result<(), Errno> {
        let s = self.sock_mut(h)?;
        match level {
            SOL_SOCKET => match name {
                SO_TYPE | SO_ERROR | SO_ACCEPTCONN | SO_PROTOCOL | SO_DOMAIN => Err(ENOPROTOOPT),
                _ => s.opts.set(name, val),
            },
            SOL_NETLINK if (1..=NETLINK_OPT_MAX).contains(&name) => {
                let b: [u8; 4] = val.get(..4).and_then(|b| b.try_into().ok()).ok_or(Errno::EINVAL)?;
                let on = i32::from_ne_bytes(b) != 0;
                // NETLINK_ADD_MEMBERSHIP (1) and _DROP_ (2) name a group;
                // nothing is ever announced, so they are kept nowhere.
                if name > 2 {
                    if on {
                        s.nlopts |= 1 << name;
                    } else {
                        s.nlopts &= !(1 << name);
                    }
                }
                Ok(())
            }
            _ => Err(ENOPROTOOPT),
        }
    }

    fn getsockopt(&mut self, h: u64, level: i32, name: i32) -> Result<Vec<u8>, Errno> {
        let s = self.sock_mut(h)?;
        let int = |v: i32| v.to_ne_bytes().to_vec();
        match level {
            SOL_SOCKET => Ok(match name {
                SO_TYPE => int(s.ty),
                SO_ERROR => int(core::mem::take(&mut s.err)),
                SO_ACCEPTCONN => int(0),
                SO_PROTOCOL => int(NETLINK_ROUTE),
                SO_DOMAIN => int(AF_NETLINK),
                _ => s.opts.get(name)?,
            }),
            SOL_NETLINK if (3..=NETLINK_OPT_MAX).contains(&name) => Ok(int((s.nlopts >> name & 1) as i32)),
            _ => Err(ENOPROTOOPT),
        }
    }

    fn ready(&self, h: u64) -> Readiness {
        let Some(s) = self.socks.get(&h) else { return Readiness { mask: EPOLLERR | EPOLLHUP, gen: 0 } };
        let mut m = EPOLLOUT | EPOLLWRNORM;
        if !s.q.is_empty() {
            m |= EPOLLIN | EPOLLRDNORM;
        }
        if s.err != 0 {
            m |= EPOLLERR;
        }
        Readiness { mask: m, gen: s.gen }
    }

    fn is_stream(&self, _h: u64) -> bool {
        false
    }

    fn nread(&self, h: u64) -> usize {
        self.socks.get(&h).map_or(0, |s| s.queued)
    }

    fn close(&mut self, h: u64) {
        self.socks.remove(&h);
    }
}
