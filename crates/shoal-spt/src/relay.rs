//! UDP without `--net-outbound`: the waiting parent holds the instance's
//! UDP sockets and relays their datagrams, so that the sandbox holds no
//! UDP socket that can reach the network.
//!
//! Why: a UDP socket the spt guest held itself (a published `/udp` port,
//! a `--net-bind-any` bind) could `sendto` any address. seccomp cannot
//! read a `sockaddr`, Landlock has no UDP rules, and the guest shares the
//! instance's process, so no check in a hypercall handler binds it. hvt
//! refuses an addressed send there unless it is a reply to one of the
//! socket's last 64 senders (`EACCES`); spt now enforces the same rule
//! outside the sandbox:
//!
//! - the parent (outside the sandbox, with the caller's rights and
//!   network namespace) owns each such UDP socket and gives the instance
//!   one end of a `SOCK_SEQPACKET` socket pair instead, at the descriptor
//!   the socket would have had;
//! - a datagram that arrives is recorded by sender
//!   ([`shoal_hostcall::net::RecentPeers`]) and handed over as one
//!   message: a [`HEADER`] (the sender's `sockaddr`) and the datagram;
//! - a message from the instance is the same frame with the destination;
//!   the parent sends it only to a recorded sender and drops it otherwise.
//!   The instance's handler (`crate::net`) keeps the same record and gives
//!   a refused reply `EACCES` itself, as hvt does; a guest that writes a
//!   frame itself gets nothing through.
//!
//! Each direction keeps at most one frame waiting while the other side is
//! full (a full instance queue leaves datagrams in the UDP socket's own
//! buffer, as a slow reader natively would), so nothing is lost in the
//! relay. [`serve`] is the parent's thread: it also answers the bind
//! channel of `--net-bind-any` (`crate::net`), whose UDP binds it relays
//! in the same way. The relay costs the parent two system calls and a
//! copy per datagram each way; the instance's receive and send are one
//! system call each, as before.

use crate::net::{BindReply, BindRequest, OneFdControl, MAX_RELAYS};
use shoal_hostcall::net::{RecentPeers, MAX_ADDR};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Bytes of a `sockaddr` a frame carries (`sizeof(struct sockaddr_in6)`).
pub const ADDR: usize = 28;
/// A frame's header: the address's length (native `u32`), the address.
pub const HEADER: usize = 4 + ADDR;
/// The largest UDP payload (IPv6; IPv4's is 20 bytes less, which the
/// host's `sendto` refuses).
pub const MAX_DATAGRAM: usize = 65527;
/// Datagrams moved per socket and direction before the loop looks at the
/// others.
const BURST: usize = 64;
/// The epoll key of the bind channel.
const CHANNEL_KEY: u64 = u64::MAX;

/// The header of a frame for `addr` (at most [`ADDR`] bytes are kept).
pub fn header(addr: &[u8]) -> [u8; HEADER] {
    let n = addr.len().min(ADDR);
    let mut h = [0u8; HEADER];
    h[..4].copy_from_slice(&(n as u32).to_ne_bytes());
    h[4..4 + n].copy_from_slice(&addr[..n]);
    h
}

/// A frame of `got` bytes whose header is `h`: its address and the length
/// of the datagram after the header; `None` for a frame too short or an
/// address too long.
pub fn parse_header(h: &[u8; HEADER], got: usize) -> Option<(&[u8], usize)> {
    let n = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
    (got >= HEADER && n <= ADDR).then(|| (&h[4..4 + n], got - HEADER))
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// One relayed socket, as the parent holds it.
struct Relay {
    /// The UDP socket (bound; never the instance's).
    udp: OwnedFd,
    /// The parent's end of the socket pair.
    ours: OwnedFd,
    peers: RecentPeers,
    /// A frame for the instance, waiting for room in its queue.
    to_guest: Option<Vec<u8>>,
    /// A datagram for the network (destination, payload), waiting for
    /// room in the UDP socket's send buffer.
    to_net: Option<(Vec<u8>, Vec<u8>)>,
    /// The epoll interests last set: (UDP socket, our end).
    interest: (u32, u32),
}

/// The instance's end is gone (it closed the socket or ended).
struct Gone;

impl Relay {
    fn wanted(&self) -> (u32, u32) {
        let (i, o) = (libc::EPOLLIN as u32, libc::EPOLLOUT as u32);
        let udp = if self.to_guest.is_none() { i } else { 0 } | if self.to_net.is_some() { o } else { 0 };
        let ours = if self.to_net.is_none() { i } else { 0 } | if self.to_guest.is_some() { o } else { 0 };
        (udp, ours)
    }

    /// Datagrams from the network to the instance.
    fn inbound(&mut self, buf: &mut [u8]) -> Result<(), Gone> {
        if let Some(frame) = self.to_guest.take() {
            if !self.to_instance(&frame)? {
                self.to_guest = Some(frame);
                return Ok(());
            }
        }
        for _ in 0..BURST {
            // SAFETY: an all-zero sockaddr_storage is valid.
            let mut from: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
            let mut flen = core::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            let room = buf.len() - HEADER;
            // SAFETY: the buffer's tail is `room` writable bytes; `from`
            // and `flen` are valid out-parameters.
            let n = unsafe {
                libc::recvfrom(
                    self.udp.as_raw_fd(),
                    buf[HEADER..].as_mut_ptr().cast(),
                    room,
                    libc::MSG_DONTWAIT,
                    (&mut from as *mut libc::sockaddr_storage).cast(),
                    &mut flen,
                )
            };
            if n < 0 {
                return Ok(()); // EAGAIN, or an error of an earlier send.
            }
            // SAFETY: `from` is a sockaddr_storage, readable as bytes.
            let bytes = unsafe { core::slice::from_raw_parts((&from as *const libc::sockaddr_storage).cast::<u8>(), (flen as usize).min(ADDR)) };
            self.peers.heard(bytes);
            buf[..HEADER].copy_from_slice(&header(bytes));
            let frame = &buf[..HEADER + n as usize];
            if !self.to_instance(frame)? {
                self.to_guest = Some(frame.to_vec());
                return Ok(());
            }
        }
        Ok(())
    }

    /// Sends one frame to the instance: whether it went (false: its queue
    /// is full).
    fn to_instance(&self, frame: &[u8]) -> Result<bool, Gone> {
        // SAFETY: `frame` is initialised bytes of its length.
        let n = unsafe { libc::send(self.ours.as_raw_fd(), frame.as_ptr().cast(), frame.len(), libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        match n {
            0.. => Ok(true),
            _ if errno() == libc::EAGAIN => Ok(false),
            _ => Err(Gone),
        }
    }

    /// Frames from the instance to the network: each to a recorded sender
    /// only.
    fn outbound(&mut self, buf: &mut [u8]) -> Result<(), Gone> {
        if let Some((to, data)) = self.to_net.take() {
            if !self.to_network(&to, &data) {
                self.to_net = Some((to, data));
                return Ok(());
            }
        }
        for _ in 0..BURST {
            // SAFETY: `buf` is writable bytes of its length.
            let n = unsafe { libc::recv(self.ours.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if n == 0 {
                return Err(Gone);
            }
            if n < 0 {
                return if errno() == libc::EAGAIN { Ok(()) } else { Err(Gone) };
            }
            let mut h = [0u8; HEADER];
            h.copy_from_slice(&buf[..HEADER]);
            let Some((to, len)) = parse_header(&h, n as usize) else { continue };
            // The rule that holds: a reply to a recent sender, nothing else
            // (the instance's handler refused the rest with EACCES; a frame
            // the guest wrote itself is dropped here).
            if !self.peers.contains(to) {
                continue;
            }
            let data = &buf[HEADER..HEADER + len];
            if !self.to_network(to, data) {
                self.to_net = Some((to.to_vec(), data.to_vec()));
                return Ok(());
            }
        }
        Ok(())
    }

    /// Sends one datagram: whether it is done (false: the socket's send
    /// buffer is full). A datagram the host refuses is dropped, as a
    /// network drops one.
    fn to_network(&self, to: &[u8], data: &[u8]) -> bool {
        // SAFETY: an all-zero sockaddr_storage is valid.
        let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
        // SAFETY: `to` is at most ADDR (28) bytes, which fit in `ss`.
        unsafe { core::ptr::copy_nonoverlapping(to.as_ptr(), (&mut ss as *mut libc::sockaddr_storage).cast::<u8>(), to.len()) };
        // SAFETY: `data` is initialised bytes; `ss` holds `to.len()` bytes.
        let n = unsafe {
            libc::sendto(
                self.udp.as_raw_fd(),
                data.as_ptr().cast(),
                data.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                (&ss as *const libc::sockaddr_storage).cast(),
                to.len() as libc::socklen_t,
            )
        };
        n >= 0 || errno() != libc::EAGAIN
    }
}

/// `epoll_ctl(set, op, fd)` with `events` and key `key`.
fn epoll_ctl(set: RawFd, op: libc::c_int, fd: RawFd, events: u32, key: u64) {
    let mut ev = libc::epoll_event { events, u64: key };
    // SAFETY: `ev` is a valid event; epoll_ctl only reads it.
    unsafe { libc::epoll_ctl(set, op, fd, &mut ev) };
}

/// The parent's network thread for one instance: answers the bind
/// channel (`--net-bind-any`, if `channel`), relaying the UDP sockets it
/// binds when `relay_binds`, and relays `relays` (the published UDP
/// ports: each the UDP socket and the parent's end of the pair whose
/// other end the instance holds). Returns when the instance's ends are all
/// closed.
pub fn serve(channel: Option<OwnedFd>, relays: Vec<(OwnedFd, OwnedFd)>, relay_binds: bool) {
    // SAFETY: epoll_create1 takes no pointers.
    let set = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if set < 0 {
        return; // The instance then gets no datagrams; it still runs.
    }
    // SAFETY: just created, owned by nobody else.
    let set = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(set) };
    let mut table: Vec<Option<Relay>> = Vec::new();
    for (udp, ours) in relays {
        add(&set, &mut table, udp, ours);
    }
    let mut channel = channel;
    if let Some(c) = &channel {
        epoll_ctl(set.as_raw_fd(), libc::EPOLL_CTL_ADD, c.as_raw_fd(), libc::EPOLLIN as u32, CHANNEL_KEY);
    }
    let mut buf = vec![0u8; HEADER + 65536];
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
    while channel.is_some() || table.iter().any(Option::is_some) {
        // SAFETY: `evs` has room for its length of events.
        let n = unsafe { libc::epoll_wait(set.as_raw_fd(), evs.as_mut_ptr(), evs.len() as i32, -1) };
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return;
        }
        for ev in &evs[..n as usize] {
            let (key, events) = (ev.u64, ev.events);
            if key == CHANNEL_KEY {
                if let Some(c) = &channel {
                    if !answer_bind(c.as_raw_fd(), relay_binds, &set, &mut table) {
                        channel = None; // closed: epoll forgets it
                    }
                }
                continue;
            }
            let i = (key >> 1) as usize;
            let Some(Some(r)) = table.get_mut(i) else { continue };
            let hup = (libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32;
            let (readable, writable) = (events & libc::EPOLLIN as u32 != 0, events & libc::EPOLLOUT as u32 != 0);
            let ours = key & 1 == 1;
            let mut done = Ok(());
            if ours && events & hup != 0 && !readable {
                done = Err(Gone);
            }
            if !ours && events & libc::EPOLLERR as u32 != 0 {
                // A pending error on the UDP socket (reported level-
                // triggered until read): taken, as a network drops it.
                let mut e: libc::c_int = 0;
                let mut len = core::mem::size_of::<libc::c_int>() as libc::socklen_t;
                // SAFETY: `e` and `len` are valid out-parameters of this size.
                unsafe { libc::getsockopt(r.udp.as_raw_fd(), libc::SOL_SOCKET, libc::SO_ERROR, (&mut e as *mut libc::c_int).cast(), &mut len) };
            }
            // The UDP socket readable or our end writable: datagrams in;
            // our end readable or the UDP socket writable: datagrams out.
            if done.is_ok() && ((!ours && readable) || (ours && writable)) {
                done = r.inbound(&mut buf);
            }
            if done.is_ok() && ((ours && readable) || (!ours && writable)) {
                done = r.outbound(&mut buf);
            }
            if done.is_err() {
                table[i] = None; // closes both: epoll forgets them
                continue;
            }
            let want = r.wanted();
            if want != r.interest {
                if want.0 != r.interest.0 {
                    epoll_ctl(set.as_raw_fd(), libc::EPOLL_CTL_MOD, r.udp.as_raw_fd(), want.0, (i as u64) << 1);
                }
                if want.1 != r.interest.1 {
                    epoll_ctl(set.as_raw_fd(), libc::EPOLL_CTL_MOD, r.ours.as_raw_fd(), want.1 | libc::EPOLLRDHUP as u32, ((i as u64) << 1) | 1);
                }
                r.interest = want;
            }
        }
    }
}

/// Adds a relay to the table and the watch set.
fn add(set: &OwnedFd, table: &mut Vec<Option<Relay>>, udp: OwnedFd, ours: OwnedFd) {
    let i = table.iter().position(Option::is_none).unwrap_or(table.len());
    let r = Relay { udp, ours, peers: RecentPeers::default(), to_guest: None, to_net: None, interest: (libc::EPOLLIN as u32, libc::EPOLLIN as u32) };
    epoll_ctl(set.as_raw_fd(), libc::EPOLL_CTL_ADD, r.udp.as_raw_fd(), libc::EPOLLIN as u32, (i as u64) << 1);
    epoll_ctl(set.as_raw_fd(), libc::EPOLL_CTL_ADD, r.ours.as_raw_fd(), (libc::EPOLLIN | libc::EPOLLRDHUP) as u32, ((i as u64) << 1) | 1);
    if i == table.len() {
        table.push(Some(r));
    } else {
        table[i] = Some(r);
    }
}

/// Answers one [`BindRequest`] on the bind channel `fd` with a socket
/// bound as asked ([`shoal_loader::net::bind_new`]) or the errno of the
/// failure; a UDP socket, when `relay`, stays here and the instance gets
/// its end of a relay. Every request is hostile input: only a full-sized
/// request is served. Returns false when the instance's end is closed.
fn answer_bind(fd: RawFd, relay: bool, set: &OwnedFd, table: &mut Vec<Option<Relay>>) -> bool {
    let mut req = BindRequest { domain: 0, ty: 0, flags: 0, addrlen: 0, addr: [0; MAX_ADDR as usize] };
    let len = core::mem::size_of::<BindRequest>();
    // SAFETY: `req` is `len` writable bytes; any bit pattern is valid.
    let n = unsafe { libc::recv(fd, (&mut req as *mut BindRequest).cast(), len, libc::MSG_DONTWAIT) };
    if n < 0 {
        return matches!(errno(), libc::EINTR | libc::EAGAIN);
    }
    if n == 0 {
        return false; // The instance ended (or its end was closed).
    }
    let answer = if n as usize != len || u64::from(req.addrlen) > MAX_ADDR {
        Err(libc::EINVAL)
    } else {
        shoal_loader::net::bind_new(req.domain as i32, req.ty as i32, req.flags, &req.addr[..req.addrlen as usize])
    };
    let mut reply = BindReply { errno: 0, relayed: 0, addrlen: 0, addr: [0; ADDR] };
    // What the instance gets: the bound socket, or its end of a relay.
    let sent = match answer {
        Err(e) => {
            reply.errno = e;
            None
        }
        Ok(sock) if relay && req.ty as i32 == libc::SOCK_DGRAM => {
            if table.iter().flatten().count() >= MAX_RELAYS {
                reply.errno = libc::ENOBUFS;
                None
            } else {
                match crate::sys::seqpacket_pair() {
                    Err(e) => {
                        reply.errno = e.raw_os_error().unwrap_or(libc::EIO);
                        None
                    }
                    Ok((ours, theirs)) => {
                        let mut alen = ADDR as libc::socklen_t;
                        // SAFETY: `reply.addr` and `alen` are valid out-parameters of this size.
                        unsafe { libc::getsockname(sock.as_raw_fd(), reply.addr.as_mut_ptr().cast(), &mut alen) };
                        reply.addrlen = alen.min(ADDR as libc::socklen_t);
                        reply.relayed = 1;
                        add(set, table, sock, ours);
                        Some(theirs)
                    }
                }
            }
        }
        Ok(sock) => Some(sock),
    };
    let mut iov = libc::iovec { iov_base: (&reply as *const BindReply).cast_mut().cast(), iov_len: core::mem::size_of::<BindReply>() };
    let mut ctl = OneFdControl([0; 24]);
    // SAFETY: an all-zero msghdr is valid; the pointers are set below.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(sock) = &sent {
        // Field by field: musl's cmsghdr has padding fields glibc's has not.
        // SAFETY: an all-zero cmsghdr is valid.
        let mut hdr: libc::cmsghdr = unsafe { core::mem::zeroed() };
        hdr.cmsg_len = 20;
        hdr.cmsg_level = libc::SOL_SOCKET;
        hdr.cmsg_type = libc::SCM_RIGHTS;
        // SAFETY: `ctl` is 24 bytes aligned for a cmsghdr (16 bytes),
        // followed by the descriptor.
        unsafe { core::ptr::write(ctl.0.as_mut_ptr().cast::<libc::cmsghdr>(), hdr) };
        ctl.0[16..20].copy_from_slice(&sock.as_raw_fd().to_ne_bytes());
        msg.msg_control = ctl.0.as_mut_ptr().cast();
        msg.msg_controllen = ctl.0.len() as _;
    }
    // Not waiting: an instance that does not read its answers fills only
    // its own queue.
    // SAFETY: `msg` points at `reply` and (maybe) `ctl`, both live.
    unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    // The instance holds its own copy now; ours closes with `sent`.
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_header_round_trips_and_a_short_frame_is_refused() {
        let addr = [2u8, 0, 0x14, 0xe9, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        let h = header(&addr);
        assert_eq!(parse_header(&h, HEADER + 5), Some((&addr[..], 5)));
        assert_eq!(parse_header(&h, HEADER - 1), None);
        let mut bad = h;
        bad[..4].copy_from_slice(&29u32.to_ne_bytes());
        assert_eq!(parse_header(&bad, HEADER), None);
    }
}
