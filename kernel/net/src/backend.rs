//! The socket backend interface (docs/design.md "Networking"): what a family of sockets
//! must provide so that the socket layer (`socket.rs`) can serve the BSD
//! socket calls over it.
//!
//! Three backends implement it: the in-guest `AF_UNIX` sockets of module
//! `unix`; the instance's own loopback for `AF_INET`/`AF_INET6` (module
//! `lo`, in the guest too); and host-socket passthrough for them (module
//! `host`: each guest socket a host socket the tender owns, each method a
//! hypercall). A later in-guest TCP/IP stack (smoltcp over frame I/O) would
//! be another implementation of the same trait.
//!
//! Every method is non-blocking: "would block" is `EAGAIN` (and
//! `EINPROGRESS` for a connect that goes on by itself), and the socket layer
//! waits — in the scheduler's wait queue, woken through `shoal_vfs::wait` —
//! unless the descriptor is non-blocking or the call has `MSG_DONTWAIT`. A
//! backend whose sockets change state outside the guest (host sockets) must
//! also make the idle instance wake for them (see `lib.rs`).
//!
//! Addresses cross the interface as the guest's `struct sockaddr` bytes;
//! the backend parses and produces them.

use alloc::vec::Vec;
use shoal_plat::Errno;
use shoal_vfs::obj::Readiness;

use crate::abi::*;

/// A socket address as `struct sockaddr_*` bytes.
pub type SockAddr = Vec<u8>;

/// What one receive produced.
#[derive(Debug, Default)]
pub struct Received {
    /// The value `recv` returns: bytes copied, or with `MSG_TRUNC` on a
    /// datagram socket the datagram's real length.
    pub len: usize,
    /// The sender's address, if the family reports one.
    pub from: Option<SockAddr>,
    /// `msg_flags` (`MSG_TRUNC` when a datagram did not fit).
    pub flags: i32,
    /// Descriptions passed with the data (`SCM_RIGHTS`, vfs's indices,
    /// see `shoal_vfs::Vfs::hold_fds`): the receiver's own references, or
    /// with `MSG_PEEK` the message's, which it keeps.
    pub fds: Vec<usize>,
}

/// A family of sockets. `h` is the backend's own handle of a socket.
pub trait Backend {
    /// A new socket of type `ty` (`SOCK_*`, without `SOCK_NONBLOCK` and
    /// `SOCK_CLOEXEC`) and `protocol`.
    fn socket(&mut self, ty: i32, protocol: i32) -> Result<u64, Errno>;
    /// A new socket of `domain` (for a backend that serves more than one
    /// family, such as `AF_INET` and `AF_INET6`); by default [`Self::socket`].
    fn socket_in(&mut self, domain: i32, ty: i32, protocol: i32) -> Result<u64, Errno> {
        let _ = domain;
        self.socket(ty, protocol)
    }
    /// Two connected sockets (`socketpair`); `EOPNOTSUPP` where the family
    /// has none (Internet sockets).
    fn socketpair(&mut self, ty: i32, protocol: i32) -> Result<(u64, u64), Errno>;
    /// `bind`.
    fn bind(&mut self, h: u64, addr: &[u8]) -> Result<(), Errno>;
    /// `listen`.
    fn listen(&mut self, h: u64, backlog: i32) -> Result<(), Errno>;
    /// Takes a connection from the queue of listening socket `h`: the new
    /// socket and the peer's address (`EAGAIN`: none yet).
    fn accept(&mut self, h: u64) -> Result<(u64, SockAddr), Errno>;
    /// `connect`: `Ok` when connected, `EAGAIN` to retry later (no room in
    /// the listener's queue), `EINPROGRESS` when the connection completes
    /// by itself (then `SO_ERROR` tells how it ended).
    fn connect(&mut self, h: u64, addr: &[u8]) -> Result<(), Errno>;
    /// Sends the concatenation of `data` (to `to`, if given); returns the
    /// bytes taken. A stream socket may take part of it.
    fn send(&mut self, h: u64, data: &[&[u8]], to: Option<&[u8]>, flags: i32) -> Result<usize, Errno>;
    /// [`Self::send`] with descriptions in flight (`SCM_RIGHTS`): a
    /// family that passes them takes them out of `fds` with the data it
    /// takes; what is left there the caller drops. By default none is
    /// passed (Linux ignores `SCM_RIGHTS` on Internet sockets).
    fn send_fds(&mut self, h: u64, data: &[&[u8]], to: Option<&[u8]>, flags: i32, fds: &mut Vec<usize>) -> Result<usize, Errno> {
        let _ = fds;
        self.send(h, data, to, flags)
    }
    /// Receives into `bufs` in order (one datagram, or stream bytes).
    fn recv(&mut self, h: u64, bufs: &mut [&mut [u8]], flags: i32) -> Result<Received, Errno>;
    /// `shutdown(how)`.
    fn shutdown(&mut self, h: u64, how: i32) -> Result<(), Errno>;
    /// The socket's own address (`peer` false) or its peer's.
    fn name(&self, h: u64, peer: bool) -> Result<SockAddr, Errno>;
    /// `setsockopt`.
    fn setsockopt(&mut self, h: u64, level: i32, name: i32, val: &[u8]) -> Result<(), Errno>;
    /// `getsockopt`: the option's value (the caller truncates it).
    fn getsockopt(&mut self, h: u64, level: i32, name: i32) -> Result<Vec<u8>, Errno>;
    /// What the socket is ready for.
    fn ready(&self, h: u64) -> Readiness;
    /// The log of readiness gains, for `epoll_wait` to skip the sockets
    /// that stayed quiet: brings the backend's readiness up to date (as
    /// `ready` would), then returns the current sequence number and, if
    /// the log still covers everything after `since`, appends to `out`
    /// the handles whose readiness may have gained bits (or a new event
    /// generation) since, and says `true`. `false`: no log (or it forgot)
    /// — every socket must be asked. The caller's `out` is a buffer it
    /// keeps, so a wait allocates nothing.
    fn gains_since(&self, _since: u64, _out: &mut Vec<u64>) -> (u64, bool) {
        (0, false)
    }
    /// Whether `h` is a byte stream (a blocking send goes on until it has
    /// sent everything; `MSG_WAITALL` applies).
    fn is_stream(&self, h: u64) -> bool;
    /// Bytes a read would return now (`FIONREAD`).
    fn nread(&self, h: u64) -> usize;
    /// The last descriptor of `h` was closed.
    fn close(&mut self, h: u64);
}

/// The `SOL_SOCKET` options every socket keeps and reports back as set
/// (the host backend will pass them on to its host socket instead).
#[derive(Clone, Debug, PartialEq)]
pub struct SockOpts {
    /// `SO_RCVBUF` as `getsockopt` reports it (Linux doubles the value set).
    pub rcvbuf: i32,
    /// `SO_SNDBUF`, likewise.
    pub sndbuf: i32,
    /// Boolean options by name (`SO_REUSEADDR`, `SO_KEEPALIVE`, …).
    flags: u32,
    /// `SO_LINGER`: `(l_onoff, l_linger)`.
    pub linger: (i32, i32),
    /// `SO_RCVLOWAT`.
    pub rcvlowat: i32,
    /// `SO_RCVTIMEO` and `SO_SNDTIMEO` as the guest's `struct timeval`.
    pub timeo: [[i64; 2]; 2],
}

impl Default for SockOpts {
    fn default() -> Self {
        SockOpts { rcvbuf: BUF_MAX, sndbuf: BUF_MAX, flags: 0, linger: (0, 0), rcvlowat: 1, timeo: [[0; 2]; 2] }
    }
}

/// Boolean options stored as bits (bit = option number).
const BOOL_OPTS: &[i32] = &[SO_DEBUG, SO_REUSEADDR, SO_DONTROUTE, SO_BROADCAST, SO_KEEPALIVE, SO_OOBINLINE, SO_REUSEPORT, SO_PASSCRED];

fn int_of(val: &[u8]) -> Result<i32, Errno> {
    let b: [u8; 4] = val.get(..4).and_then(|b| b.try_into().ok()).ok_or(Errno::EINVAL)?;
    Ok(i32::from_ne_bytes(b))
}

fn int(v: i32) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

impl SockOpts {
    /// Sets a stored `SOL_SOCKET` option; `ENOPROTOOPT` for one it does
    /// not keep (the caller answers the read-only ones).
    pub fn set(&mut self, name: i32, val: &[u8]) -> Result<(), Errno> {
        match name {
            _ if BOOL_OPTS.contains(&name) => {
                if int_of(val)? != 0 {
                    self.flags |= 1 << name;
                } else {
                    self.flags &= !(1 << name);
                }
            }
            // Linux doubles the value (bookkeeping overhead), capped by the
            // sysctl maximum, and keeps a minimum.
            SO_SNDBUF | SO_SNDBUFFORCE => self.sndbuf = (int_of(val)?.clamp(0, BUF_MAX) * 2).max(MIN_SNDBUF),
            SO_RCVBUF | SO_RCVBUFFORCE => self.rcvbuf = (int_of(val)?.clamp(0, BUF_MAX) * 2).max(MIN_RCVBUF),
            SO_LINGER => {
                if val.len() < 8 {
                    return Err(Errno::EINVAL);
                }
                self.linger = (int_of(&val[..4])?, int_of(&val[4..8])?);
            }
            SO_RCVLOWAT => self.rcvlowat = int_of(val)?.max(1),
            SO_RCVTIMEO | SO_SNDTIMEO => {
                let b: [u8; 16] = val.get(..16).and_then(|b| b.try_into().ok()).ok_or(Errno::EINVAL)?;
                let s = i64::from_ne_bytes(b[..8].try_into().map_err(|_| Errno::EINVAL)?);
                let us = i64::from_ne_bytes(b[8..].try_into().map_err(|_| Errno::EINVAL)?);
                if !(0..1_000_000).contains(&us) {
                    return Err(EDOM);
                }
                self.timeo[(name - SO_RCVTIMEO) as usize] = [s.max(0), us];
            }
            _ => return Err(ENOPROTOOPT),
        }
        Ok(())
    }

    /// A stored option's value; `ENOPROTOOPT` for one it does not keep.
    pub fn get(&self, name: i32) -> Result<Vec<u8>, Errno> {
        Ok(match name {
            _ if BOOL_OPTS.contains(&name) => int((self.flags >> name & 1) as i32),
            SO_SNDBUF => int(self.sndbuf),
            SO_RCVBUF => int(self.rcvbuf),
            SO_LINGER => {
                let mut v = int(self.linger.0);
                v.extend_from_slice(&self.linger.1.to_ne_bytes());
                v
            }
            SO_RCVLOWAT => int(self.rcvlowat),
            SO_SNDLOWAT => int(1),
            SO_RCVTIMEO | SO_SNDTIMEO => {
                let [s, us] = self.timeo[(name - SO_RCVTIMEO) as usize];
                let mut v = s.to_ne_bytes().to_vec();
                v.extend_from_slice(&us.to_ne_bytes());
                v
            }
            _ => return Err(ENOPROTOOPT),
        })
    }

    /// The receive (`0`) or send (`1`) timeout in nanoseconds, if set.
    pub fn timeout_ns(&self, k: usize) -> Option<u64> {
        let [s, us] = self.timeo[k];
        let ns = (s as u64).saturating_mul(1_000_000_000).saturating_add(us as u64 * 1000);
        (ns > 0).then_some(ns)
    }
}
