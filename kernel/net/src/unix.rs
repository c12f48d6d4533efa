//! `AF_UNIX` sockets inside the guest (docs/design.md "Networking"): the first
//! [`Backend`](crate::backend::Backend). Both ends live in this component;
//! data moves between their buffers with no hypercall.
//!
//! - `SOCK_STREAM`: a byte stream; the bytes a socket has sent and its
//!   peer has not read yet count against the sender's `SO_SNDBUF` (as on
//!   Linux), so a writer blocks when its peer falls that far behind.
//! - `SOCK_SEQPACKET`: connections like a stream, messages like datagrams.
//! - `SOCK_DGRAM`: messages to a bound name or the connected peer; a
//!   receiver holds at most `SO_RCVBUF` bytes and 512 datagrams.
//!
//! Names: a path (`sun_path` up to its first NUL) or an abstract name
//! (`sun_path[0] == 0`, all the bytes the address length covers). Binding
//! a path makes a socket node in the file system (`S_IFSOCK`, made by the
//! socket layer through vfs: `EADDRINUSE` if the name exists, and it stays
//! after the socket is closed, as on Linux), and `connect`/`sendto` of a
//! path reach the socket bound to that node ([`file_key`]): `ENOENT`
//! without the node, `ECONNREFUSED` for a node that is not a socket or
//! whose socket is gone. Relative paths are made absolute by the socket
//! layer (from the working directory at the call) before they get here,
//! so a socket bound to a relative path reports the absolute one.
//!
//! Connecting creates the server's end at once and queues it on the
//! listener (Linux does the same): the client can write before the server
//! accepts; the queue holds `backlog + 1` connections, then `connect`
//! waits (`EAGAIN` when non-blocking). Closing a socket hangs up its peer
//! (`EPOLLHUP`, end of file, `EPIPE`), with `ECONNRESET` if it left data
//! unread.
//!
//! Descriptors pass as Linux passes them (`SCM_RIGHTS`): the socket layer
//! takes a reference to each description (`shoal_vfs::Vfs::hold_fds`)
//! and the message carries the references. A datagram or seqpacket
//! message carries them whole; on a stream they ride on the bytes of the
//! send that carried them (Linux's first `skb` of it), and a read that
//! reaches those bytes receives them and stops at the end of them, as
//! Linux's reads stop after an `skb` with descriptors. A socket closed
//! with such messages unread lets the references go (`Unix::dropped`,
//! handed back to vfs). No credentials are passed (`SCM_CREDENTIALS` is
//! accepted and ignored; `SO_PASSCRED` adds nothing). A socket in flight
//! inside its own queue, or in a cycle of queues, stays until the
//! instance ends: Linux's garbage collector of such cycles is not there.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use shoal_plat::Errno;
use shoal_vfs::obj::*;

use crate::abi::*;
use crate::backend::{Backend, Received, SockAddr, SockOpts};
use crate::tracked::TrackedMap;

/// Datagrams a receiver queues at most (`net.unix.max_dgram_qlen`).
const MAX_DGRAMS: usize = 512;
/// Longest `sun_path`.
const PATH_MAX: usize = 108;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Stream,
    Dgram,
    SeqPacket,
}

impl Ty {
    fn of(ty: i32) -> Result<Ty, Errno> {
        match ty {
            SOCK_STREAM => Ok(Ty::Stream),
            SOCK_DGRAM => Ok(Ty::Dgram),
            SOCK_SEQPACKET => Ok(Ty::SeqPacket),
            _ => Err(ESOCKTNOSUPPORT),
        }
    }
    fn raw(self) -> i32 {
        match self {
            Ty::Stream => SOCK_STREAM,
            Ty::Dgram => SOCK_DGRAM,
            Ty::SeqPacket => SOCK_SEQPACKET,
        }
    }
    fn connection(self) -> bool {
        self != Ty::Dgram
    }
}

/// One message of a datagram or seqpacket socket, with its sender's name.
#[derive(Clone, Debug, PartialEq)]
struct Msg {
    data: Vec<u8>,
    from: Option<Vec<u8>>,
    /// Descriptions in flight with it (`SCM_RIGHTS`).
    fds: Vec<usize>,
}

/// Descriptions in flight on a stream, carried by the bytes `at..end`
/// (positions counted from the stream's first byte received).
#[derive(Clone, Debug, PartialEq)]
struct Mark {
    at: u64,
    end: u64,
    fds: Vec<usize>,
}

#[derive(Debug, PartialEq)]
struct Sock {
    ty: Ty,
    /// The bound name (the bytes after `sun_family`).
    name: Option<Vec<u8>>,
    /// The key of its entry in the table of names when that is not its
    /// name: a path's socket is found by its node ([`file_key`]).
    key: Option<Vec<u8>>,
    /// Listening: the queue of connections not yet accepted, and its limit.
    listen: Option<(usize, VecDeque<u64>)>,
    /// The connected peer (for a datagram socket: the default destination).
    peer: Option<u64>,
    /// A connection-based socket that is or was connected.
    connected: bool,
    /// Stream bytes received and not read.
    rx: VecDeque<u8>,
    /// Stream bytes read so far: the position of `rx`'s first byte.
    rx_head: u64,
    /// Descriptions in flight on the stream, in order.
    marks: VecDeque<Mark>,
    /// Messages received and not read (datagram, seqpacket).
    msgs: VecDeque<Msg>,
    msg_bytes: usize,
    /// Linux's `sk_shutdown`: no more receiving / sending.
    shut_rcv: bool,
    shut_snd: bool,
    /// Pending `SO_ERROR`.
    err: i32,
    opts: SockOpts,
    /// Counts changes that can make the socket newly ready.
    gen: u64,
}

// By hand: `clone_from` reuses the copy's buffers (the recovery log
// brings its copy of a socket up to date after every call that touched
// it; a derived `clone_from` would allocate its buffers afresh).
impl Clone for Sock {
    fn clone(&self) -> Sock {
        Sock {
            ty: self.ty,
            name: self.name.clone(),
            key: self.key.clone(),
            listen: self.listen.clone(),
            peer: self.peer,
            connected: self.connected,
            rx: self.rx.clone(),
            rx_head: self.rx_head,
            marks: self.marks.clone(),
            msgs: self.msgs.clone(),
            msg_bytes: self.msg_bytes,
            shut_rcv: self.shut_rcv,
            shut_snd: self.shut_snd,
            err: self.err,
            opts: self.opts.clone(),
            gen: self.gen,
        }
    }

    fn clone_from(&mut self, s: &Sock) {
        self.ty = s.ty;
        self.name.clone_from(&s.name);
        self.key.clone_from(&s.key);
        self.listen.clone_from(&s.listen);
        self.peer = s.peer;
        self.connected = s.connected;
        // As slices: `extend` copies a slice of bytes in one go.
        self.rx.clear();
        let (a, b) = s.rx.as_slices();
        self.rx.extend(a);
        self.rx.extend(b);
        self.rx_head = s.rx_head;
        self.marks.clone_from(&s.marks);
        self.msgs.clone_from(&s.msgs);
        self.msg_bytes = s.msg_bytes;
        self.shut_rcv = s.shut_rcv;
        self.shut_snd = s.shut_snd;
        self.err = s.err;
        self.opts.clone_from(&s.opts);
        self.gen = s.gen;
    }
}

impl Sock {
    fn new(ty: Ty) -> Sock {
        Sock {
            ty,
            name: None,
            key: None,
            listen: None,
            peer: None,
            connected: false,
            rx: VecDeque::new(),
            rx_head: 0,
            marks: VecDeque::new(),
            msgs: VecDeque::new(),
            msg_bytes: 0,
            shut_rcv: false,
            shut_snd: false,
            err: 0,
            opts: SockOpts::default(),
            gen: 0,
        }
    }

    fn queued(&self) -> usize {
        if self.ty == Ty::Stream {
            self.rx.len()
        } else {
            self.msg_bytes
        }
    }
}

/// The `AF_UNIX` sockets of the instance and their names.
#[derive(Clone, Default)]
pub struct Unix {
    socks: TrackedMap<u64, Sock>,
    next: u64,
    names: TrackedMap<Vec<u8>, u64>,
    /// The next abstract name `bind` picks for an address without a name.
    autobind: u32,
    /// Descriptions in flight that nobody will receive (their socket was
    /// closed, or a plain read through vfs took them), for vfs to let go
    /// when the next socket is released (`ObjOps::release`): this
    /// component never calls vfs from inside (see `shoal_vfs::obj`).
    pub(crate) dropped: Vec<usize>,
}

/// First byte of a socket file's key: neither a path's (`/`, made
/// absolute) nor an abstract name's (`0`) nor the loopback table's
/// (`0xff`).
const FILE_KEY: u8 = 0xfe;

/// The key under which the socket bound to the file-system node `ino` is
/// found, as `struct sockaddr_un` bytes (no NUL in it): `connect` and
/// `sendto` of a path reach the socket by its node, as Linux does, so a
/// renamed socket file still leads to it and an unlinked one does not.
pub fn file_key(ino: u64) -> Vec<u8> {
    let mut v = (AF_UNIX as u16).to_ne_bytes().to_vec();
    v.push(FILE_KEY);
    v.extend_from_slice(alloc::format!("{ino:x}").as_bytes());
    v
}

/// `struct sockaddr_un` bytes for `name` (family only when unnamed).
fn sockaddr(name: Option<&[u8]>) -> SockAddr {
    let mut v = (AF_UNIX as u16).to_ne_bytes().to_vec();
    if let Some(n) = name {
        v.extend_from_slice(n);
        if n.first() != Some(&0) {
            v.push(0); // a path's terminating NUL, counted by Linux
        }
    }
    v
}

/// The name in `struct sockaddr_un` bytes: `Ok(None)` for an address of
/// the family alone.
pub fn parse(addr: &[u8]) -> Result<Option<Vec<u8>>, Errno> {
    if addr.len() < 2 || addr.len() > 2 + PATH_MAX {
        return Err(Errno::EINVAL);
    }
    if u16::from_ne_bytes([addr[0], addr[1]]) as i32 != AF_UNIX {
        return Err(Errno::EINVAL);
    }
    let p = &addr[2..];
    if p.is_empty() {
        return Ok(None);
    }
    if p[0] == 0 {
        return Ok(Some(p.to_vec()));
    }
    let end = p.iter().position(|&b| b == 0).unwrap_or(p.len());
    Ok(Some(p[..end].to_vec()))
}

impl Unix {
    /// Brings `self`, the recovery log's copy, up to date with `live`:
    /// only the sockets a call touched are looked at (`crate::tracked`).
    pub(crate) fn sync_from(&mut self, live: &mut Unix) {
        live.socks.sync_into(self.socks.raw_mut());
        live.names.sync_into(self.names.raw_mut());
        self.next = live.next;
        self.autobind = live.autobind;
        self.dropped.clone_from(&live.dropped);
    }

    /// Forgets what its maps noted (a whole copy was just taken).
    pub(crate) fn forget_notes(&mut self) {
        self.socks.forget_notes();
        self.names.forget_notes();
    }

    /// An empty table whose handles start after `base` (the loopback
    /// family's own table, `crate::lo`, keeps its handles — and so its
    /// readiness-log keys — apart from `AF_UNIX`'s).
    pub(crate) fn with_base(base: u64) -> Unix {
        Unix { next: base, ..Unix::default() }
    }

    /// The socket bound to `name`, if any.
    pub(crate) fn bound(&self, name: &[u8]) -> Option<u64> {
        self.names.get(name).copied()
    }

    /// Whether `h` is connected (or was: a connection-based socket).
    /// Whether `h` has a name (`bind` again is `EINVAL`).
    pub(crate) fn is_named(&self, h: u64) -> Result<bool, Errno> {
        Ok(self.sock(h)?.name.is_some())
    }

    /// Binds `h` to `path`, whose socket node the file system made (`key`
    /// from [`file_key`]).
    pub(crate) fn bind_file(&mut self, h: u64, path: Vec<u8>, key: Vec<u8>) -> Result<(), Errno> {
        if self.sock(h)?.name.is_some() {
            return Err(Errno::EINVAL);
        }
        // A node is new when bound: an entry under its key is of a node
        // since removed whose number came back; the new one wins.
        self.names.insert(key.clone(), h);
        let s = self.sock_mut(h)?;
        s.name = Some(path);
        s.key = Some(key);
        Ok(())
    }

    pub(crate) fn is_connected(&self, h: u64) -> bool {
        self.socks.get(&h).is_some_and(|s| s.connected)
    }

    /// Whether `h` listens.
    pub(crate) fn is_listening(&self, h: u64) -> bool {
        self.socks.get(&h).is_some_and(|s| s.listen.is_some())
    }

    /// Sets `h`'s pending `SO_ERROR` (an ICMP-like error of a datagram
    /// socket's connected destination) and wakes its waiters.
    pub(crate) fn set_err(&mut self, h: u64, e: Errno) {
        if let Some(s) = self.socks.get_mut(&h) {
            s.err = e.0;
        }
        self.touch(h);
    }

    /// Sockets it holds.
    pub fn len(&self) -> usize {
        self.socks.len()
    }

    /// Whether it holds no socket.
    pub fn is_empty(&self) -> bool {
        self.socks.is_empty()
    }

    /// Bytes its sockets take on the heap, buffered data included (an
    /// estimate, for the recovery log's size).
    pub fn heap_bytes(&self) -> usize {
        let per = core::mem::size_of::<Sock>() + 32;
        let data: usize = self
            .socks
            .values()
            .map(|s| s.rx.capacity() + s.msgs.iter().map(|m| m.data.capacity() + m.from.as_ref().map_or(0, |f| f.capacity()) + 48).sum::<usize>())
            .sum();
        let names: usize = self.names.keys().map(|k| k.capacity() + 32).sum();
        self.socks.len() * per + data + names
    }

    fn sock(&self, h: u64) -> Result<&Sock, Errno> {
        self.socks.get(&h).ok_or(Errno::EBADF)
    }
    fn sock_mut(&mut self, h: u64) -> Result<&mut Sock, Errno> {
        self.socks.get_mut(&h).ok_or(Errno::EBADF)
    }

    fn add(&mut self, s: Sock) -> u64 {
        self.next += 1;
        self.socks.insert(self.next, s);
        self.next
    }

    /// Marks `h` changed (readiness may differ), notes it in the readiness
    /// log (`shoal_vfs::readylog`) and wakes waiters.
    fn touch(&mut self, h: u64) {
        if let Some(s) = self.socks.get_mut(&h) {
            s.gen += 1;
        }
        shoal_vfs::readylog::note(unix_src(h));
        crate::wake();
    }

    /// The socket bound to `name` (`ECONNREFUSED`, or `ENOENT` for a path
    /// nobody bound).
    fn lookup(&self, name: &[u8]) -> Result<u64, Errno> {
        match self.names.get(name) {
            Some(&h) => Ok(h),
            // An abstract name, or a socket file nobody is bound to.
            None if matches!(name.first(), Some(&0 | &FILE_KEY)) => Err(ECONNREFUSED),
            None => Err(Errno::ENOENT),
        }
    }

    /// The socket of type `ty` bound to `name`. A socket of another type
    /// there is `EPROTOTYPE` for a path, and for an abstract name is not
    /// found at all (`ECONNREFUSED`), as Linux looks those up by type.
    fn lookup_typed(&self, name: &[u8], ty: Ty) -> Result<u64, Errno> {
        let h = self.lookup(name)?;
        match self.socks.get(&h) {
            Some(s) if s.ty == ty => Ok(h),
            Some(_) if name.first() != Some(&0) => Err(EPROTOTYPE),
            _ => Err(ECONNREFUSED),
        }
    }

    /// Connects `a` and `b` to each other (a pair, or a connect).
    fn join(&mut self, a: u64, b: u64) {
        for (x, y) in [(a, b), (b, a)] {
            if let Some(s) = self.socks.get_mut(&x) {
                s.peer = Some(y);
                s.connected = true;
            }
        }
    }

    /// Takes the descriptions in flight nobody will receive.
    pub(crate) fn take_dropped(&mut self) -> Vec<usize> {
        core::mem::take(&mut self.dropped)
    }

    /// Queues `data` from `from` as a message for `to`, with the
    /// descriptions in `fds` (taken only when it is queued; `EAGAIN` when
    /// full).
    fn deliver(&mut self, to: u64, data: Vec<u8>, from: Option<Vec<u8>>, fds: &mut Vec<usize>) -> Result<(), Errno> {
        let t = self.sock_mut(to)?;
        if t.shut_rcv {
            return Err(Errno::EPIPE);
        }
        if t.msgs.len() >= MAX_DGRAMS || (t.msg_bytes > 0 && t.msg_bytes + data.len() > t.opts.rcvbuf as usize) {
            return Err(Errno::EAGAIN);
        }
        t.msg_bytes += data.len();
        t.msgs.push_back(Msg { data, from, fds: core::mem::take(fds) });
        self.touch(to);
        Ok(())
    }

    /// Hangs up `h`'s peer: it will read end of file and get `EPIPE`.
    fn hang_up(&mut self, peer: u64, reset: bool) {
        if let Some(p) = self.socks.get_mut(&peer) {
            p.shut_rcv = true;
            p.shut_snd = true;
            if reset {
                p.err = ECONNRESET.0;
            }
        }
        self.touch(peer);
    }
}

fn gather(data: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::with_capacity(data.iter().map(|d| d.len()).sum());
    for d in data {
        v.extend_from_slice(d);
    }
    v
}

/// Copies `src` into the buffers in order; returns the bytes copied.
fn scatter(bufs: &mut [&mut [u8]], mut src: impl Iterator<Item = u8>) -> usize {
    let mut n = 0;
    'out: for b in bufs.iter_mut() {
        for d in b.iter_mut() {
            match src.next() {
                Some(x) => *d = x,
                None => break 'out,
            }
            n += 1;
        }
    }
    n
}

impl Backend for Unix {
    fn socket(&mut self, ty: i32, protocol: i32) -> Result<u64, Errno> {
        let ty = Ty::of(ty)?;
        if protocol != 0 && protocol != AF_UNIX {
            return Err(EPROTONOSUPPORT);
        }
        Ok(self.add(Sock::new(ty)))
    }

    fn socketpair(&mut self, ty: i32, protocol: i32) -> Result<(u64, u64), Errno> {
        let a = self.socket(ty, protocol)?;
        let b = self.socket(ty, protocol)?;
        self.join(a, b);
        Ok((a, b))
    }

    fn bind(&mut self, h: u64, addr: &[u8]) -> Result<(), Errno> {
        let name = match parse(addr)? {
            Some(n) => n,
            None => {
                // Autobind: an abstract name of five hex digits.
                loop {
                    self.autobind = (self.autobind + 1) & 0xfffff;
                    let mut n = alloc::vec![0u8];
                    n.extend_from_slice(alloc::format!("{:05x}", self.autobind).as_bytes());
                    if !self.names.contains_key(&n) {
                        break n;
                    }
                }
            }
        };
        if self.sock(h)?.name.is_some() {
            return Err(Errno::EINVAL);
        }
        if self.names.contains_key(&name) {
            return Err(EADDRINUSE);
        }
        self.names.insert(name.clone(), h);
        self.sock_mut(h)?.name = Some(name);
        Ok(())
    }

    fn listen(&mut self, h: u64, backlog: i32) -> Result<(), Errno> {
        let s = self.sock_mut(h)?;
        if !s.ty.connection() {
            return Err(Errno::EOPNOTSUPP);
        }
        if s.name.is_none() || s.connected {
            return Err(Errno::EINVAL);
        }
        let backlog = backlog.clamp(0, 4096) as usize;
        match &mut s.listen {
            Some((b, _)) => *b = backlog,
            None => s.listen = Some((backlog, VecDeque::new())),
        }
        Ok(())
    }

    fn accept(&mut self, h: u64) -> Result<(u64, SockAddr), Errno> {
        let s = self.sock_mut(h)?;
        let Some((_, q)) = &mut s.listen else { return Err(Errno::EINVAL) };
        let c = q.pop_front().ok_or(Errno::EAGAIN)?;
        let peer = self.socks.get(&c).and_then(|s| s.peer);
        let from = peer.and_then(|p| self.socks.get(&p)).and_then(|p| p.name.clone());
        // A connecting socket may wait for room in the queue.
        crate::wake();
        Ok((c, sockaddr(from.as_deref())))
    }

    fn connect(&mut self, h: u64, addr: &[u8]) -> Result<(), Errno> {
        if addr.len() >= 2 && u16::from_ne_bytes([addr[0], addr[1]]) as i32 == AF_UNSPEC {
            // Dissolves a datagram socket's association.
            let s = self.sock_mut(h)?;
            if s.ty == Ty::Dgram {
                s.peer = None;
                return Ok(());
            }
            return Err(Errno::EINVAL);
        }
        let name = parse(addr)?.ok_or(Errno::EINVAL)?;
        let ty = self.sock(h)?.ty;
        let target = self.lookup_typed(&name, ty)?;
        let t = self.sock(target)?;
        if ty == Ty::Dgram {
            self.sock_mut(h)?.peer = Some(target);
            return Ok(());
        }
        let me = self.sock(h)?;
        if me.connected {
            return Err(EISCONN);
        }
        if me.listen.is_some() {
            return Err(Errno::EINVAL);
        }
        let Some((backlog, q)) = &t.listen else { return Err(ECONNREFUSED) };
        if q.len() > *backlog {
            return Err(Errno::EAGAIN);
        }
        // The server's end, born connected, named like the listener.
        let mut server = Sock::new(ty);
        server.name = t.name.clone();
        server.opts = t.opts.clone();
        let sv = self.add(server);
        self.join(h, sv);
        if let Some((_, q)) = &mut self.sock_mut(target)?.listen {
            q.push_back(sv);
        }
        self.touch(target);
        Ok(())
    }

    fn send(&mut self, h: u64, data: &[&[u8]], to: Option<&[u8]>, flags: i32) -> Result<usize, Errno> {
        self.send_fds(h, data, to, flags, &mut Vec::new())
    }

    fn send_fds(&mut self, h: u64, data: &[&[u8]], to: Option<&[u8]>, _flags: i32, fds: &mut Vec<usize>) -> Result<usize, Errno> {
        let me = self.sock(h)?;
        let len: usize = data.iter().map(|d| d.len()).sum();
        if me.shut_snd {
            return Err(Errno::EPIPE);
        }
        match me.ty {
            Ty::Dgram => {
                let target = match to {
                    Some(a) => self.lookup_typed(&parse(a)?.ok_or(Errno::EINVAL)?, Ty::Dgram)?,
                    None => me.peer.ok_or(ENOTCONN)?,
                };
                if len > me.opts.sndbuf as usize {
                    return Err(EMSGSIZE);
                }
                if !self.socks.contains_key(&target) {
                    return Err(ECONNREFUSED);
                }
                if self.sock(target)?.ty != Ty::Dgram {
                    return Err(EPROTOTYPE);
                }
                let from = me.name.clone();
                self.deliver(target, gather(data), from, fds)?;
                Ok(len)
            }
            Ty::SeqPacket | Ty::Stream if to.is_some() && !me.connected => Err(Errno::EOPNOTSUPP),
            Ty::SeqPacket => {
                let peer = match me.peer {
                    Some(p) => p,
                    None if me.connected => return Err(Errno::EPIPE),
                    None => return Err(ENOTCONN),
                };
                if len > me.opts.sndbuf as usize {
                    return Err(EMSGSIZE);
                }
                let from = me.name.clone();
                self.deliver(peer, gather(data), from, fds)?;
                Ok(len)
            }
            Ty::Stream => {
                let peer = match me.peer {
                    Some(p) => p,
                    None if me.connected => return Err(Errno::EPIPE),
                    None => return Err(ENOTCONN),
                };
                let cap = me.opts.sndbuf as usize;
                let p = self.sock_mut(peer)?;
                if p.shut_rcv {
                    return Err(Errno::EPIPE);
                }
                if len == 0 {
                    return Ok(0);
                }
                let room = cap.saturating_sub(p.rx.len());
                if room == 0 {
                    return Err(Errno::EAGAIN);
                }
                let mut left = room.min(len);
                let n = left;
                if !fds.is_empty() {
                    // Linux attaches them to the first skb of the send.
                    let at = p.rx_head + p.rx.len() as u64;
                    p.marks.push_back(Mark { at, end: at + n as u64, fds: core::mem::take(fds) });
                }
                for d in data {
                    let k = d.len().min(left);
                    p.rx.extend(&d[..k]);
                    left -= k;
                    if left == 0 {
                        break;
                    }
                }
                self.touch(peer);
                Ok(n)
            }
        }
    }

    fn recv(&mut self, h: u64, bufs: &mut [&mut [u8]], flags: i32) -> Result<Received, Errno> {
        let peek = flags & MSG_PEEK != 0;
        let s = self.sock_mut(h)?;
        let want: usize = bufs.iter().map(|b| b.len()).sum();
        match s.ty {
            Ty::Stream => {
                if s.rx.is_empty() {
                    if s.err != 0 {
                        return Err(Errno(core::mem::take(&mut s.err)));
                    }
                    if s.shut_rcv {
                        return Ok(Received::default());
                    }
                    if !s.connected {
                        return Err(Errno::EINVAL);
                    }
                    return Err(Errno::EAGAIN);
                }
                if want == 0 {
                    return Ok(Received::default());
                }
                let mut n = want.min(s.rx.len());
                let mut fds = Vec::new();
                // A read that reaches bytes carrying descriptions takes
                // them and stops at the end of those bytes.
                if let Some(m) = s.marks.front() {
                    if m.at < s.rx_head + n as u64 {
                        n = n.min((m.end - s.rx_head) as usize);
                        fds = if peek { m.fds.clone() } else { s.marks.pop_front().map(|m| m.fds).unwrap_or_default() };
                    }
                }
                let copied = scatter(bufs, s.rx.iter().copied().take(n));
                if !peek {
                    s.rx.drain(..copied);
                    s.rx_head += copied as u64;
                }
                let peer = s.peer;
                if let (Some(p), false) = (peer, peek) {
                    // Room for the writer.
                    self.touch(p);
                }
                Ok(Received { len: copied, from: None, flags: 0, fds })
            }
            Ty::Dgram | Ty::SeqPacket => {
                let Some(m) = s.msgs.front_mut() else {
                    if s.err != 0 {
                        return Err(Errno(core::mem::take(&mut s.err)));
                    }
                    if s.ty == Ty::SeqPacket {
                        if s.shut_rcv {
                            return Ok(Received::default());
                        }
                        if !s.connected {
                            return Err(ENOTCONN);
                        }
                    }
                    return Err(Errno::EAGAIN);
                };
                let copied = scatter(bufs, m.data.iter().copied());
                let full = m.data.len();
                // An unnamed sender has no address: the length comes back 0
                // (Linux's `unix_copy_addr`).
                let from = if s.ty == Ty::Dgram { m.from.as_deref().map(|n| sockaddr(Some(n))) } else { None };
                let fds = if peek { m.fds.clone() } else { core::mem::take(&mut m.fds) };
                if !peek {
                    s.msg_bytes -= full;
                    s.msgs.pop_front();
                }
                let trunc = copied < full;
                let peer = s.peer;
                if let (Some(p), false) = (peer, peek) {
                    self.touch(p);
                } else if !peek {
                    // Datagram senders blocked on a full queue re-check.
                    crate::wake();
                }
                Ok(Received { len: if trunc && flags & MSG_TRUNC != 0 { full } else { copied }, from, flags: if trunc { MSG_TRUNC } else { 0 }, fds })
            }
        }
    }

    fn shutdown(&mut self, h: u64, how: i32) -> Result<(), Errno> {
        let (rd, wr) = match how {
            SHUT_RD => (true, false),
            SHUT_WR => (false, true),
            SHUT_RDWR => (true, true),
            _ => return Err(Errno::EINVAL),
        };
        let s = self.sock_mut(h)?;
        if s.ty.connection() && !s.connected {
            return Err(ENOTCONN);
        }
        s.shut_rcv |= rd;
        s.shut_snd |= wr;
        let peer = s.peer;
        self.touch(h);
        if let (Some(p), true) = (peer, self.sock(h)?.ty.connection()) {
            if let Some(ps) = self.socks.get_mut(&p) {
                ps.shut_snd |= rd;
                ps.shut_rcv |= wr;
            }
            self.touch(p);
        }
        Ok(())
    }

    fn name(&self, h: u64, peer: bool) -> Result<SockAddr, Errno> {
        let s = self.sock(h)?;
        if !peer {
            return Ok(sockaddr(s.name.as_deref()));
        }
        let p = s.peer.ok_or(ENOTCONN)?;
        Ok(sockaddr(self.socks.get(&p).and_then(|p| p.name.as_deref())))
    }

    fn setsockopt(&mut self, h: u64, level: i32, name: i32, val: &[u8]) -> Result<(), Errno> {
        if level != SOL_SOCKET {
            return Err(Errno::EOPNOTSUPP);
        }
        match name {
            SO_TYPE | SO_ERROR | SO_ACCEPTCONN | SO_PROTOCOL | SO_DOMAIN => Err(ENOPROTOOPT),
            _ => {
                self.sock_mut(h)?.opts.set(name, val)?;
                // A bigger buffer may let a writer go on.
                self.touch(h);
                Ok(())
            }
        }
    }

    fn getsockopt(&mut self, h: u64, level: i32, name: i32) -> Result<Vec<u8>, Errno> {
        if level != SOL_SOCKET {
            return Err(Errno::EOPNOTSUPP);
        }
        let s = self.sock_mut(h)?;
        let int = |v: i32| v.to_ne_bytes().to_vec();
        Ok(match name {
            SO_TYPE => int(s.ty.raw()),
            SO_ERROR => int(core::mem::take(&mut s.err)),
            SO_ACCEPTCONN => int(s.listen.is_some() as i32),
            SO_PROTOCOL => int(0),
            SO_DOMAIN => int(AF_UNIX),
            _ => s.opts.get(name)?,
        })
    }

    fn ready(&self, h: u64) -> Readiness {
        let Some(s) = self.socks.get(&h) else { return Readiness { mask: EPOLLERR | EPOLLHUP, gen: 0 } };
        const IN: u32 = EPOLLIN | EPOLLRDNORM;
        const OUT: u32 = EPOLLOUT | EPOLLWRNORM;
        let mut m = 0;
        if let Some((_, q)) = &s.listen {
            if !q.is_empty() {
                m |= IN;
            }
            return Readiness { mask: m, gen: s.gen };
        }
        // As Linux's unix_poll / unix_dgram_poll.
        if s.err != 0 {
            m |= EPOLLERR;
        }
        if s.shut_rcv {
            m |= EPOLLRDHUP | IN;
        }
        if s.shut_rcv && s.shut_snd {
            m |= EPOLLHUP;
        }
        if s.queued() > 0 || !s.msgs.is_empty() {
            m |= IN;
        }
        if s.ty.connection() && !s.connected {
            m |= EPOLLHUP;
        }
        let writable = match (s.ty, s.peer) {
            (_, _) if s.shut_snd => true,
            (Ty::Stream, Some(p)) => self.socks.get(&p).is_none_or(|p| p.rx.len() * 4 <= s.opts.sndbuf as usize),
            (_, Some(p)) => self.socks.get(&p).is_none_or(|p| p.msgs.len() < MAX_DGRAMS && p.msg_bytes * 4 <= p.opts.rcvbuf as usize),
            (_, None) => true,
        };
        if writable {
            m |= OUT;
        }
        Readiness { mask: m, gen: s.gen }
    }

    fn is_stream(&self, h: u64) -> bool {
        self.socks.get(&h).is_some_and(|s| s.ty == Ty::Stream)
    }

    fn nread(&self, h: u64) -> usize {
        match self.socks.get(&h) {
            Some(s) if s.ty == Ty::Stream => s.rx.len(),
            Some(s) => s.msgs.front().map_or(0, |m| m.data.len()),
            None => 0,
        }
    }

    fn close(&mut self, h: u64) {
        let Some(s) = self.socks.remove(&h) else { return };
        for fds in s.msgs.iter().map(|m| &m.fds).chain(s.marks.iter().map(|m| &m.fds)) {
            self.dropped.extend_from_slice(fds);
        }
        if let Some(n) = s.key.as_ref().or(s.name.as_ref()) {
            if self.names.get(n) == Some(&h) {
                self.names.remove(n);
            }
        }
        // Connections nobody accepted go with the listener.
        if let Some((_, q)) = &s.listen {
            for &c in q {
                self.close(c);
            }
        }
        if let Some(p) = s.peer {
            if s.ty.connection() {
                let unread = s.queued() > 0;
                if let Some(ps) = self.socks.get_mut(&p) {
                    ps.peer = None;
                }
                self.hang_up(p, unread);
            }
        }
        // Datagram sockets that had this one as their destination keep
        // its handle (never reused) and get ECONNREFUSED sending to it.
        crate::wake();
    }
}

/// The readiness-log source key of `AF_UNIX` socket `h`.
pub(crate) fn unix_src(h: u64) -> u64 {
    shoal_vfs::readylog::TAG_UNIX | (h & (shoal_vfs::readylog::TAG_PIPE - 1))
}
