//! Loopback inside the instance: `AF_INET`/`AF_INET6` TCP and UDP
//! sockets that talk to each other over `127.0.0.1`, `::1` (and the
//! any-address) without the host, as a container's own network namespace
//! has them. Every instance gets it, with or without a network option.
//!
//! **Built on the `AF_UNIX` sockets** (module `unix`): a loopback socket is
//! a socket of a [`Unix`] table of its own, so buffering, accept queues,
//! hang-ups, `ECONNRESET` on unread data, `MSG_PEEK`, readiness and the
//! recovery log are theirs. A TCP socket is a `SOCK_STREAM` there, a UDP
//! socket a `SOCK_DGRAM`; a port is a name in that table that no `AF_UNIX`
//! name can equal (it begins with `0xff`; the table is not `AF_UNIX`'s
//! anyway), one per address family, transport and port. This module adds
//! what Internet sockets have and `AF_UNIX` ones do not: the addresses
//! (`getsockname`, `getpeername`, `accept`, `recvfrom` report
//! `127.0.0.1`/`::1` and the ports), ephemeral ports for port 0 and for a
//! socket that connects, sends or listens unbound, `EADDRINUSE`,
//! `ECONNREFUSED` from a port where nothing listens, dual-stack sockets
//! (an `AF_INET6` socket bound to `::` without `IPV6_V6ONLY` takes IPv4
//! connections and reports `::ffff:127.0.0.1`), and UDP's rules: a
//! datagram to a port nobody bound, or to a full receiver, is dropped (on
//! a connected socket the next call fails with `ECONNREFUSED`, as the
//! ICMP error does on Linux), and `connect` only sets the destination.
//!
//! **Which sockets are here.** Every Internet socket starts here; the
//! socket layer moves it to the host backend (`crate::host`) at its first
//! `bind`, `listen`, `connect` or addressed send when the instance's
//! network options give that call to the host (a published port, a
//! `--listen-fd` listener, `--net-bind-any`, `--net-outbound` for an
//! address outside the instance): [`Lo::unsettled`] hands over its type
//! and the options set so far, which are set again on the host socket.
//!
//! **Not modelled**: several addresses of `127.0.0.0/8` (a port is one
//! name whatever loopback address was bound: `127.0.0.2:P` conflicts with
//! `127.0.0.1:P`), `SO_REUSEPORT` groups (a second bind is `EADDRINUSE`),
//! `TIME_WAIT`, out-of-band data, a connected UDP socket's filter on the
//! sender of what it receives, and options other than `SOL_SOCKET`'s,
//! which are kept and reported back but change nothing.

use alloc::vec::Vec;
use shoal_plat::Errno;
use shoal_vfs::obj::Readiness;

use crate::abi::*;
use crate::backend::{Backend, Received, SockAddr};
use crate::tracked::TrackedMap;
use crate::unix::Unix;

/// The first handle of the loopback table: handles (and so readiness-log
/// keys) never collide with `AF_UNIX` ones.
const BASE: u64 = 1 << 40;
/// Linux's default ephemeral port range (`ip_local_port_range`).
const EPHEMERAL: core::ops::RangeInclusive<u16> = 32768..=60999;
/// The largest UDP payload over IPv4 and IPv6.
const UDP_MAX_V4: usize = 65507;
const UDP_MAX_V6: usize = 65527;
/// Most options kept per socket (more are refused with `ENOBUFS`).
const MAX_OPTS: usize = 32;
const ENOBUFS: Errno = Errno(105);

/// Options set on a socket: (level, name, value).
pub(crate) type Opts = Vec<(i32, i32, Vec<u8>)>;

/// What this module keeps of one socket beside its `AF_UNIX` twin.
#[derive(Clone, Debug, PartialEq)]
struct Meta {
    domain: i32,
    ty: i32,
    proto: i32,
    /// What `getsockname` reports after an explicit `bind` or a `listen`
    /// (the address given, its port filled in); `None` for an ephemeral
    /// port taken by `connect` or a send, and for accepted sockets.
    local: Option<SockAddr>,
    /// A UDP socket's connected destination.
    dest: Option<SockAddr>,
    /// `IPV6_V6ONLY`.
    v6only: bool,
    /// Bound, connected or listening: the socket stays in the instance.
    settled: bool,
    /// Options of other levels than `SOL_SOCKET`, and, while unsettled,
    /// every option set (the host socket gets them if it moves there).
    opts: Opts,
}

/// The loopback sockets of the instance.
#[derive(Clone)]
pub struct Lo {
    u: Unix,
    meta: TrackedMap<u64, Meta>,
    /// The last ephemeral port given.
    port: u16,
}

impl Default for Lo {
    fn default() -> Self {
        Lo { u: Unix::with_base(BASE), meta: TrackedMap::default(), port: *EPHEMERAL.end() }
    }
}

/// An Internet address as this module sorts it.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Any,
    Loopback,
    Other,
}

/// A parsed `sockaddr_in`/`sockaddr_in6`.
struct In {
    family: i32,
    port: u16,
    kind: Kind,
    /// An IPv4 address, or an IPv4-mapped IPv6 one (`::ffff:a.b.c.d`).
    v4: bool,
}

fn parse(a: &[u8]) -> Result<In, Errno> {
    let fam = match i32::from(u16::from_ne_bytes([*a.first().ok_or(Errno::EINVAL)?, *a.get(1).ok_or(Errno::EINVAL)?])) {
        // Linux reads an `AF_UNSPEC` address as `AF_INET` (a UDP send, a
        // bind to the any-address).
        AF_UNSPEC => AF_INET,
        f => f,
    };
    let v4kind = |ip: &[u8]| match ip {
        [0, 0, 0, 0] => Kind::Any,
        [127, ..] => Kind::Loopback,
        _ => Kind::Other,
    };
    match fam {
        AF_INET if a.len() >= 16 => Ok(In { family: fam, port: u16::from_be_bytes([a[2], a[3]]), kind: v4kind(&a[4..8]), v4: true }),
        // Linux accepts the RFC 2133 length (no scope id).
        AF_INET6 if a.len() >= 24 => {
            let ip = &a[8..24];
            let port = u16::from_be_bytes([a[2], a[3]]);
            if ip[..10].iter().all(|&b| b == 0) && ip[10..12] == [0xff, 0xff] {
                return Ok(In { family: fam, port, kind: v4kind(&ip[12..]), v4: true });
            }
            let kind = match ip {
                _ if ip.iter().all(|&b| b == 0) => Kind::Any,
                _ if ip[..15].iter().all(|&b| b == 0) && ip[15] == 1 => Kind::Loopback,
                _ => Kind::Other,
            };
            Ok(In { family: fam, port, kind, v4: false })
        }
        AF_INET | AF_INET6 => Err(Errno::EINVAL),
        _ => Err(Errno::EAFNOSUPPORT),
    }
}

/// Whether `addr` is a loopback address, or the any-address, which Linux
/// connects to as loopback (`None`: not an Internet address).
pub(crate) fn is_local(addr: &[u8]) -> Option<bool> {
    parse(addr).ok().map(|a| a.kind != Kind::Other)
}

/// Whether `addr` is the any-address (`0.0.0.0`, `::`).
pub(crate) fn is_any(addr: &[u8]) -> bool {
    parse(addr).is_ok_and(|a| a.kind == Kind::Any)
}

/// The table name of a port: `0xff`, the family, the transport and the
/// port in five digits (never a NUL: names are paths to `unix::parse`).
fn key(v4: bool, ty: i32, port: u16) -> Vec<u8> {
    let mut k = alloc::vec![0xff, if v4 { b'4' } else { b'6' }, if ty == SOCK_STREAM { b't' } else { b'u' }];
    k.extend_from_slice(alloc::format!("{port:05}").as_bytes());
    k
}

/// `struct sockaddr_un` bytes naming `key`.
fn sun(key: &[u8]) -> SockAddr {
    let mut v = (AF_UNIX as u16).to_ne_bytes().to_vec();
    v.extend_from_slice(key);
    v
}

/// The family and port of the name in `sockaddr_un` bytes the table gave.
fn unkey(sun: &[u8]) -> Option<(bool, u16)> {
    let k = sun.get(2..)?;
    if k.len() < 8 || k[0] != 0xff {
        return None;
    }
    let port = core::str::from_utf8(&k[3..8]).ok()?.parse().ok()?;
    Some((k[1] == b'4', port))
}

/// The loopback (or any-) address of `port` as a socket of `domain` sees
/// it: an IPv4 peer of an `AF_INET6` socket is `::ffff:127.0.0.1`.
fn addr_of(domain: i32, v4: bool, port: u16, any: bool) -> SockAddr {
    let p = port.to_be_bytes();
    if domain == AF_INET {
        let mut a = alloc::vec![0u8; 16];
        a[..2].copy_from_slice(&(AF_INET as u16).to_ne_bytes());
        a[2..4].copy_from_slice(&p);
        if !any {
            a[4..8].copy_from_slice(&[127, 0, 0, 1]);
        }
        a
    } else {
        let mut a = alloc::vec![0u8; 28];
        a[..2].copy_from_slice(&(AF_INET6 as u16).to_ne_bytes());
        a[2..4].copy_from_slice(&p);
        if !any {
            if v4 {
                a[18..24].copy_from_slice(&[0xff, 0xff, 127, 0, 0, 1]);
            } else {
                a[23] = 1;
            }
        }
        a
    }
}

fn int(v: i32) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

impl Lo {
    /// Brings `self`, the recovery log's copy, up to date with `live`.
    pub(crate) fn sync_from(&mut self, live: &mut Lo) {
        self.u.sync_from(&mut live.u);
        live.meta.sync_into(self.meta.raw_mut());
        self.port = live.port;
    }

    /// Forgets what its maps noted (a whole copy was just taken).
    pub(crate) fn forget_notes(&mut self) {
        self.u.forget_notes();
        self.meta.forget_notes();
    }

    /// Sockets it holds.
    pub(crate) fn len(&self) -> usize {
        self.u.len()
    }

    /// Bytes it takes on the heap (an estimate).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.u.heap_bytes() + self.meta.len() * (core::mem::size_of::<Meta>() + 96)
    }

    fn meta(&self, h: u64) -> Result<&Meta, Errno> {
        self.meta.get(&h).ok_or(Errno::EBADF)
    }

    fn meta_mut(&mut self, h: u64) -> Result<&mut Meta, Errno> {
        self.meta.get_mut(&h).ok_or(Errno::EBADF)
    }

    /// A socket not yet bound, connected or listening: its domain, type,
    /// protocol and the options set on it (`None`: it stays here).
    pub(crate) fn unsettled(&self, h: u64) -> Option<(i32, i32, i32, Opts)> {
        let m = self.meta.get(&h).filter(|m| !m.settled)?;
        Some((m.domain, m.ty, m.proto, m.opts.clone()))
    }

    /// The socket bound to the port of `v4`, type `ty`: an IPv4 port
    /// falls back to a dual-stack `AF_INET6` socket bound to `::`.
    fn target(&self, v4: bool, ty: i32, port: u16) -> Option<(u64, Vec<u8>)> {
        let k = key(v4, ty, port);
        if let Some(h) = self.u.bound(&k) {
            return Some((h, k));
        }
        if v4 {
            let k6 = key(false, ty, port);
            let h = self.u.bound(&k6)?;
            let m = self.meta.get(&h)?;
            if !m.v6only && m.local.as_deref().is_some_and(is_any) {
                return Some((h, k6));
            }
        }
        None
    }

    /// Whether something in the instance receives on `addr` for a socket
    /// of type `ty`: a listener, or a bound UDP socket.
    pub(crate) fn has_receiver(&self, ty: i32, addr: &[u8]) -> bool {
        let Ok(a) = parse(addr) else { return false };
        match self.target(a.v4, ty, a.port) {
            Some((h, _)) => ty != SOCK_STREAM || self.u.is_listening(h),
            None => false,
        }
    }

    /// Whether `port` is free for a socket of `v4`, `ty` (a dual-stack
    /// bind also needs the IPv4 port).
    fn free(&self, v4: bool, ty: i32, port: u16, dual: bool) -> bool {
        if self.u.bound(&key(v4, ty, port)).is_some() {
            return false;
        }
        if v4 {
            return self.target(true, ty, port).is_none();
        }
        !dual || self.u.bound(&key(true, ty, port)).is_none()
    }

    /// A free ephemeral port.
    fn ephemeral(&mut self, v4: bool, ty: i32, dual: bool) -> Result<u16, Errno> {
        let (lo, hi) = (*EPHEMERAL.start(), *EPHEMERAL.end());
        for _ in EPHEMERAL {
            self.port = if self.port >= hi { lo } else { self.port + 1 };
            if self.free(v4, ty, self.port, dual) {
                return Ok(self.port);
            }
        }
        Err(EADDRINUSE)
    }

    /// Binds an unbound socket to an ephemeral port (before it connects,
    /// sends or listens); `any`: what `getsockname` reports is the
    /// any-address (a listener), else the loopback address.
    fn autobind(&mut self, h: u64, v4: bool, any: bool) -> Result<(), Errno> {
        let m = self.meta(h)?;
        if m.local.is_some() || self.u.name(h, false).is_ok_and(|n| unkey(&n).is_some()) {
            return Ok(());
        }
        let (domain, ty) = (m.domain, m.ty);
        let dual = domain == AF_INET6 && !v4 && any && !m.v6only;
        let port = self.ephemeral(v4, ty, dual)?;
        self.u.bind(h, &sun(&key(v4, ty, port)))?;
        if any {
            self.meta_mut(h)?.local = Some(addr_of(domain, v4, port, true));
        }
        Ok(())
    }

    /// Checks that `a` may be used by a socket of `domain` (`connect`,
    /// `sendto`: `EAFNOSUPPORT` for another family, as Linux).
    fn same_family(domain: i32, a: &In) -> Result<(), Errno> {
        if a.family != domain {
            return Err(Errno::EAFNOSUPPORT);
        }
        Ok(())
    }

    /// Keeps an option whatever the socket's state (one nothing else keeps).
    fn keep_any(&mut self, h: u64, level: i32, name: i32, val: &[u8]) -> Result<(), Errno> {
        let m = self.meta_mut(h)?;
        match m.opts.iter().position(|(l, n, _)| *l == level && *n == name) {
            Some(i) => m.opts[i].2 = val.to_vec(),
            None if m.opts.len() >= MAX_OPTS => return Err(ENOBUFS),
            None => m.opts.push((level, name, val.to_vec())),
        }
        Ok(())
    }

    /// Notes that `h` was set an option (`SOL_SOCKET` ones only while it
    /// may still move to the host).
    fn keep_opt(&mut self, h: u64, level: i32, name: i32, val: &[u8]) -> Result<(), Errno> {
        if level == SOL_SOCKET && self.meta(h)?.settled {
            return Ok(());
        }
        self.keep_any(h, level, name, val)
    }
}

impl Backend for Lo {
    fn socket(&mut self, ty: i32, protocol: i32) -> Result<u64, Errno> {
        self.socket_in(AF_INET, ty, protocol)
    }

    fn socket_in(&mut self, domain: i32, ty: i32, protocol: i32) -> Result<u64, Errno> {
        if ty != SOCK_STREAM && ty != SOCK_DGRAM {
            return Err(ESOCKTNOSUPPORT);
        }
        let tp = if ty == SOCK_STREAM { IPPROTO_TCP } else { IPPROTO_UDP };
        if protocol != 0 && protocol != tp {
            return Err(EPROTONOSUPPORT);
        }
        let h = self.u.socket(ty, 0)?;
        self.meta.insert(h, Meta { domain, ty, proto: tp, local: None, dest: None, v6only: false, settled: false, opts: Vec::new() });
        Ok(h)
    }

    fn socketpair(&mut self, _ty: i32, _protocol: i32) -> Result<(u64, u64), Errno> {
        Err(Errno::EOPNOTSUPP)
    }

    fn bind(&mut self, h: u64, addr: &[u8]) -> Result<(), Errno> {
        let m = self.meta(h)?;
        let (domain, ty, v6only) = (m.domain, m.ty, m.v6only);
        let a = parse(addr)?;
        if a.family != domain {
            return Err(if domain == AF_INET { Errno::EAFNOSUPPORT } else { Errno::EINVAL });
        }
        if m.local.is_some() || self.u.name(h, false).is_ok_and(|n| unkey(&n).is_some()) {
            return Err(Errno::EINVAL);
        }
        if a.kind == Kind::Other {
            return Err(EADDRNOTAVAIL);
        }
        let dual = domain == AF_INET6 && !a.v4 && a.kind == Kind::Any && !v6only;
        let port = match a.port {
            0 => self.ephemeral(a.v4, ty, dual)?,
            p if self.free(a.v4, ty, p, dual) => p,
            _ => return Err(EADDRINUSE),
        };
        self.u.bind(h, &sun(&key(a.v4, ty, port)))?;
        let mut local = addr[..if domain == AF_INET { 16 } else { addr.len().min(28) }].to_vec();
        local.resize(if domain == AF_INET { 16 } else { 28 }, 0);
        local[2..4].copy_from_slice(&port.to_be_bytes());
        let m = self.meta_mut(h)?;
        m.local = Some(local);
        m.settled = true;
        Ok(())
    }

    fn listen(&mut self, h: u64, backlog: i32) -> Result<(), Errno> {
        let m = self.meta(h)?;
        if m.ty != SOCK_STREAM {
            return Err(Errno::EOPNOTSUPP);
        }
        let v4 = m.domain == AF_INET;
        if self.u.is_connected(h) {
            return Err(Errno::EINVAL);
        }
        self.autobind(h, v4, true)?;
        self.u.listen(h, backlog)?;
        self.meta_mut(h)?.settled = true;
        Ok(())
    }

    fn accept(&mut self, h: u64) -> Result<(u64, SockAddr), Errno> {
        let m = self.meta(h)?.clone();
        let (c, from) = self.u.accept(h)?;
        let peer = match unkey(&from) {
            Some((v4, port)) => addr_of(m.domain, v4, port, false),
            None => addr_of(m.domain, true, 0, true),
        };
        self.meta.insert(c, Meta { local: None, dest: None, settled: true, opts: Vec::new(), ..m });
        Ok((c, peer))
    }

    fn connect(&mut self, h: u64, addr: &[u8]) -> Result<(), Errno> {
        let m = self.meta(h)?;
        let (domain, ty) = (m.domain, m.ty);
        if addr.len() >= 2 && i32::from(u16::from_ne_bytes([addr[0], addr[1]])) == AF_UNSPEC {
            if ty == SOCK_DGRAM {
                self.meta_mut(h)?.dest = None;
                return Ok(());
            }
            return Err(Errno::EINVAL);
        }
        let a = parse(addr)?;
        Self::same_family(domain, &a)?;
        if a.kind == Kind::Other {
            return Err(ENETUNREACH);
        }
        if ty == SOCK_DGRAM {
            if a.port == 0 {
                return Err(ECONNREFUSED);
            }
            self.autobind(h, a.v4, false)?;
            let m = self.meta_mut(h)?;
            m.dest = Some(addr[..if domain == AF_INET { 16 } else { addr.len().min(28) }].to_vec());
            m.settled = true;
            return Ok(());
        }
        if self.u.is_connected(h) {
            return Err(EISCONN);
        }
        if self.u.is_listening(h) {
            return Err(Errno::EINVAL);
        }
        // As Linux over loopback: the connection completes (or is refused)
        // after `connect` returned `EINPROGRESS`; a blocking connect waits
        // for it and reports `SO_ERROR` (the socket layer).
        let Some((_, k)) = self.target(a.v4, ty, a.port).filter(|(t, _)| self.u.is_listening(*t)) else {
            self.u.set_err(h, ECONNREFUSED);
            return Err(EINPROGRESS);
        };
        self.autobind(h, a.v4, false)?;
        self.meta_mut(h)?.settled = true;
        self.u.connect(h, &sun(&k))?;
        Err(EINPROGRESS)
    }

    fn send(&mut self, h: u64, data: &[&[u8]], to: Option<&[u8]>, flags: i32) -> Result<usize, Errno> {
        let m = self.meta(h)?;
        let (domain, ty) = (m.domain, m.ty);
        if ty == SOCK_STREAM {
            if !self.u.is_connected(h) {
                return Err(Errno::EPIPE);
            }
            return self.u.send(h, data, None, flags);
        }
        let len: usize = data.iter().map(|d| d.len()).sum();
        let connected = to.is_none();
        let dest = match to {
            Some(t) => t.to_vec(),
            None => m.dest.clone().ok_or(EDESTADDRREQ)?,
        };
        let a = parse(&dest)?;
        Self::same_family(domain, &a)?;
        if a.kind == Kind::Other {
            return Err(ENETUNREACH);
        }
        if a.port == 0 {
            return Err(Errno::EINVAL);
        }
        if len > if domain == AF_INET { UDP_MAX_V4 } else { UDP_MAX_V6 } {
            return Err(EMSGSIZE);
        }
        // Unconnected, Linux reports the any-address until a connect.
        self.autobind(h, a.v4, !connected)?;
        self.meta_mut(h)?.settled = true;
        let Some((_, k)) = self.target(a.v4, SOCK_DGRAM, a.port) else {
            // Nobody there: dropped; a connected socket learns it.
            if connected {
                self.u.set_err(h, ECONNREFUSED);
            }
            return Ok(len);
        };
        match self.u.send(h, data, Some(&sun(&k)), flags) {
            // A full receiver drops the datagram, as UDP does.
            Err(Errno::EAGAIN) => Ok(len),
            r => r,
        }
    }

    fn recv(&mut self, h: u64, bufs: &mut [&mut [u8]], flags: i32) -> Result<Received, Errno> {
        let m = self.meta(h)?;
        let (domain, ty) = (m.domain, m.ty);
        let mut r = match self.u.recv(h, bufs, flags) {
            Err(Errno::EINVAL) if ty == SOCK_STREAM => return Err(ENOTCONN),
            r => r?,
        };
        r.from = r.from.map(|f| match unkey(&f) {
            Some((v4, port)) => addr_of(domain, v4, port, false),
            None => addr_of(domain, true, 0, true),
        });
        Ok(r)
    }

    fn shutdown(&mut self, h: u64, how: i32) -> Result<(), Errno> {
        let m = self.meta(h)?;
        if m.ty == SOCK_DGRAM && m.dest.is_none() {
            return Err(ENOTCONN);
        }
        self.u.shutdown(h, how)
    }

    fn name(&self, h: u64, peer: bool) -> Result<SockAddr, Errno> {
        let m = self.meta(h)?;
        if !peer {
            let named = self.u.name(h, false).ok().as_deref().and_then(unkey);
            // Bound to the any-address and connected: Linux reports the
            // address the connection uses.
            let connected = m.dest.is_some() || self.u.is_connected(h);
            if let Some(l) = m.local.as_ref().filter(|l| !(connected && is_any(l))) {
                return Ok(l.clone());
            }
            return Ok(match named {
                Some((v4, port)) => addr_of(m.domain, v4, port, false),
                None => addr_of(m.domain, true, 0, true),
            });
        }
        if m.ty == SOCK_DGRAM {
            return m.dest.clone().ok_or(ENOTCONN);
        }
        let p = self.u.name(h, true)?;
        let (v4, port) = unkey(&p).ok_or(ENOTCONN)?;
        Ok(addr_of(m.domain, v4, port, false))
    }

    fn setsockopt(&mut self, h: u64, level: i32, name: i32, val: &[u8]) -> Result<(), Errno> {
        let m = self.meta(h)?;
        let (domain, settled) = (m.domain, m.settled);
        match level {
            SOL_SOCKET => match self.u.setsockopt(h, level, name, val) {
                // One the table does not keep (`SO_PRIORITY`, `SO_MARK`,
                // …): kept here, reported back, applied by nothing — or by
                // the host socket if the socket moves there.
                Err(e) if e == ENOPROTOOPT && !matches!(name, SO_TYPE | SO_ERROR | SO_ACCEPTCONN | SO_PROTOCOL | SO_DOMAIN) => {
                    if val.len() > 256 {
                        return Err(Errno::EINVAL);
                    }
                    return self.keep_any(h, level, name, val);
                }
                r => r?,
            },
            IPPROTO_IPV6 if domain != AF_INET6 => return Err(ENOPROTOOPT),
            IPPROTO_IPV6 if name == IPV6_V6ONLY => {
                let v = i32::from_ne_bytes(val.get(..4).and_then(|b| b.try_into().ok()).ok_or(Errno::EINVAL)?);
                if settled {
                    return Err(Errno::EINVAL);
                }
                self.meta_mut(h)?.v6only = v != 0;
            }
            IPPROTO_IP | IPPROTO_TCP | IPPROTO_UDP | IPPROTO_IPV6 => {
                if val.len() > 256 {
                    return Err(Errno::EINVAL);
                }
            }
            // Any other level on a socket that may still move to the host
            // is the host's to answer then (as before it moved).
            _ if !settled && val.len() <= 256 => return self.keep_any(h, level, name, val),
            _ => return Err(ENOPROTOOPT),
        }
        self.keep_opt(h, level, name, val)
    }

    fn getsockopt(&mut self, h: u64, level: i32, name: i32) -> Result<Vec<u8>, Errno> {
        let m = self.meta(h)?.clone();
        match (level, name) {
            (SOL_SOCKET, SO_DOMAIN) => Ok(int(m.domain)),
            (SOL_SOCKET, SO_PROTOCOL) => Ok(int(m.proto)),
            (SOL_SOCKET, _) => match self.u.getsockopt(h, level, name) {
                Err(e) if e == ENOPROTOOPT => m.opts.iter().find(|(l, n, _)| *l == level && *n == name).map(|o| o.2.clone()).ok_or(e),
                r => r,
            },
            (IPPROTO_IPV6, _) if m.domain != AF_INET6 => Err(ENOPROTOOPT),
            (IPPROTO_IPV6, IPV6_V6ONLY) => Ok(int(m.v6only as i32)),
            (IPPROTO_IP | IPPROTO_TCP | IPPROTO_UDP | IPPROTO_IPV6, _) => {
                Ok(m.opts.iter().find(|(l, n, _)| *l == level && *n == name).map_or_else(|| int(0), |o| o.2.clone()))
            }
            _ => Err(ENOPROTOOPT),
        }
    }

    fn ready(&self, h: u64) -> Readiness {
        self.u.ready(h)
    }

    fn is_stream(&self, h: u64) -> bool {
        self.u.is_stream(h)
    }

    fn nread(&self, h: u64) -> usize {
        self.u.nread(h)
    }

    fn close(&mut self, h: u64) {
        self.meta.remove(&h);
        self.u.close(h);
    }
}
