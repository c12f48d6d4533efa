//! The socket layer (docs/design.md "Networking"): the BSD socket calls over the
//! [`Backend`](crate::backend::Backend) of each family.
//!
//! This module reads the guest's arguments (addresses, `msghdr`,
//! `mmsghdr`, iovecs), gives every socket a descriptor in vfs's table, and
//! waits where a blocking call must: the backends never block. Blocking
//! stream sends go on until everything is sent; `MSG_WAITALL` receives
//! until the buffers are full (or end of file); `MSG_DONTWAIT` or a
//! non-blocking descriptor turn waits into `EAGAIN`. `SIGPIPE` for `EPIPE`
//! without `MSG_NOSIGNAL` is raised by the syscall table, which joins this
//! component with `process`. Ancillary data: `AF_UNIX` sockets pass
//! descriptors (`SCM_RIGHTS`, module `unix`) — this layer parses the
//! sender's control messages, takes references to the descriptions
//! through vfs, and installs them in the receiver's table as Linux's
//! `scm_detach_fds` does (`MSG_CTRUNC` and the rest closed when the
//! control buffer is short); Internet sockets ignore control messages.

use alloc::vec::Vec;
use shoal_plat::{umem, Errno, SysResult};

use crate::abi::*;
use crate::backend::{Received, SockAddr};
use crate::{Fam, Obj, Sock};

/// Longest socket address accepted (`sizeof(struct sockaddr_storage)`).
const ADDR_MAX: usize = 128;
/// Most messages one `sendmmsg`/`recvmmsg` handles (`UIO_MAXIOV`).
const MMSG_MAX: usize = 1024;
/// Most iovecs in one message.
const IOV_MAX: usize = 1024;
/// Longest option value accepted.
const OPT_MAX: usize = 256;

/// The socket behind `fd`, its object id and whether it is non-blocking.
pub(crate) fn sock_of(fd: i32) -> Result<(Sock, u64, bool), Errno> {
    let (id, nb) = shoal_vfs::obj_of_fd(fd)?;
    let s = crate::with(|n| match n.objs.get(&id) {
        Some(Obj::Socket(s)) => Ok(*s),
        _ => Err(Errno::ENOTSOCK),
    })?;
    Ok((s, id, nb))
}

/// Runs `f` on the backend of `s`.
fn call<R>(s: Sock, f: impl FnOnce(&mut dyn crate::Backend, u64) -> Result<R, Errno>) -> Result<R, Errno> {
    crate::with(|n| f(n.backend(s.fam)?, s.h))
}

/// Runs `f` on `s` until it stops answering `EAGAIN`, waiting in between
/// (for `want`, see [`wait_for`]) unless `nonblock` (then `EAGAIN` is the
/// answer).
fn retry<R>(s: Sock, nonblock: bool, want: u32, what: &str, mut f: impl FnMut() -> Result<R, Errno>) -> Result<R, Errno> {
    loop {
        match f() {
            Err(Errno::EAGAIN) if !nonblock => wait_for(s, want, what)?,
            r => return r,
        }
    }
}

/// Whether a blocking receive on `s` would only fetch `EAGAIN` from the
/// tender and then wait, and waiting at once costs nothing: a host socket
/// whose cached readiness lacks "readable" (cleared when the host said the
/// data is gone; see [`wait_for`]), with no other thread to run, so the
/// wait goes straight to the idle wait, which asks the tender for this
/// socket anyway (returning at once if data came). A thread-per-connection
/// server's receive after each answer was a host `recvfrom` that found
/// nothing before that wait. The cache is read as it is (asking the tender
/// first would be the same host call).
fn known_unreadable(s: Sock) -> bool {
    use shoal_vfs::obj::{EPOLLERR, EPOLLHUP, EPOLLIN};
    s.fam == Fam::Inet
        && !shoal_sched::others_runnable()
        && crate::host::without_refresh(|| call(s, |b, h| Ok(b.ready(h)))).is_ok_and(|r| r.mask & (EPOLLIN | EPOLLERR | EPOLLHUP) == 0)
}

/// Waits, after a blocking call on `s` found nothing to do (`EAGAIN`),
/// until `s` may be ready for `want` (`EPOLLIN`, `EPOLLOUT`) again.
///
/// A host socket's cached readiness says when: the backend clears a bit
/// only when the host said it is gone (the `EAGAIN` that brought the
/// caller here) and sets it again only when the tender reports it. So the
/// caller waits on the socket's own queue ([`crate::sock_key`], woken when
/// it gains readiness) and tries again only once the bit is back. On the
/// one queue every change wakes, a Python server's main thread blocked in
/// `accept` woke and paid a host `accept4` for every request of a
/// connection's thread, and each of 50 threads blocked in `recv` woke for
/// every request of the others. In-instance sockets (unix, lo) wait on
/// that one queue and simply try again: they answer without the tender.
fn wait_for(s: Sock, want: u32, what: &str) -> Result<(), Errno> {
    use shoal_vfs::obj::{EPOLLERR, EPOLLHUP};
    if s.fam != Fam::Inet {
        return shoal_vfs::wait::block(what, None);
    }
    loop {
        shoal_vfs::wait::block_on(crate::sock_key(s.h), what, None)?;
        if call(s, |b, h| Ok(b.ready(h)))?.mask & (want | EPOLLERR | EPOLLHUP) != 0 {
            return Ok(());
        }
    }
}

/// Gives a new socket a descriptor; closes it again if none is free.
fn install(s: Sock, flags: i32) -> SysResult {
    let id = crate::with(|n| n.add(Obj::Socket(s)));
    let fd = shoal_vfs::with(|v| v.install_obj(id, flags & SOCK_NONBLOCK != 0, flags & SOCK_CLOEXEC != 0))?;
    Ok(fd as u64)
}

/// Splits `type` into the socket type and the flags (`EINVAL` for
/// unknown flags).
fn type_flags(ty: i32) -> Result<(i32, i32), Errno> {
    let flags = ty & !SOCK_TYPE_MASK;
    if flags & !(SOCK_NONBLOCK | SOCK_CLOEXEC) != 0 {
        return Err(Errno::EINVAL);
    }
    Ok((ty & SOCK_TYPE_MASK, flags))
}

/// The family serving `domain` (`EAFNOSUPPORT` for unknown ones). An
/// Internet socket starts inside the instance (module `lo`); [`route`]
/// moves it to the host backend when its first `bind`, `listen`,
/// `connect` or addressed send is the host's.
fn family(domain: i32) -> Result<Fam, Errno> {
    match domain {
        AF_UNIX => Ok(Fam::Unix),
        AF_INET | AF_INET6 => Ok(Fam::Lo),
        crate::netlink::AF_NETLINK => Ok(Fam::Netlink),
        _ => Err(Errno::EAFNOSUPPORT),
    }
}

/// What an unsettled Internet socket is about to do (see [`route`]).
#[derive(Clone, Copy, PartialEq)]
enum Want<'a> {
    Bind(&'a [u8]),
    Listen,
    /// `connect`, or a send to this address.
    Reach(&'a [u8]),
}

/// Where the first `bind`, `listen`, `connect` or addressed send of an
/// Internet socket goes: to the host backend (the socket is moved there,
/// with the options set so far) when the instance's network options give
/// that call to the host — a published port or handed-over listener,
/// `--net-bind-any`, with `--net-outbound` a port-0 bind or an address
/// outside the instance; and a connection to a loopback address nothing
/// inside the instance listens on. Everything else stays inside
/// (loopback): binds to loopback and any-addresses, connections to
/// loopback listeners. Returns the socket as it is now; `ENETUNREACH` /
/// `EADDRNOTAVAIL` for an address outside an instance with no network.
fn route(id: u64, s: Sock, want: Want) -> Result<Sock, Errno> {
    if s.fam != Fam::Lo {
        return Ok(s);
    }
    let r = crate::with(|n| {
        let Some((domain, ty, proto, opts)) = n.lo.unsettled(s.h) else { return Ok((s, false)) };
        let Some(inet) = n.inet.as_deref_mut() else {
            // No network at all: what is not local is unreachable.
            let outside = match want {
                Want::Bind(a) | Want::Reach(a) => crate::lo::is_local(a) == Some(false),
                Want::Listen => false,
            };
            if let (Want::Bind(a), false) = (want, outside) {
                local_bind_note(ty, a);
            }
            return Ok((s, outside));
        };
        let host = match want {
            Want::Bind(a) => crate::host::takes_bind(ty, a),
            Want::Listen => crate::host::takes_listen(ty),
            Want::Reach(a) => match crate::lo::is_local(a) {
                Some(true) => !n.lo.has_receiver(ty, a) && crate::host::outbound(),
                Some(false) => true,
                None => false,
            },
        };
        if !host {
            if let Want::Bind(a) = want {
                local_bind_note(ty, a);
            }
            return Ok((s, false));
        }
        let h = inet.socket_in(domain, ty, proto)?;
        for (level, name, val) in &opts {
            let _ = inet.setsockopt(h, *level, *name, val);
        }
        crate::Backend::close(&mut n.lo, s.h);
        let moved = Sock { fam: Fam::Inet, h };
        if let Some(Obj::Socket(o)) = n.objs.get_mut(&id) {
            *o = moved;
        }
        Ok((moved, false))
    });
    match r {
        Ok((_, true)) => {
            no_network_hint();
            Err(match want {
                Want::Bind(_) => EADDRNOTAVAIL,
                _ => ENETUNREACH,
            })
        }
        Ok((s, false)) => Ok(s),
        Err(e) => Err(e),
    }
}

/// Says once, on stderr, that a bind to the any-address stays inside the
/// instance because no `--publish` gives it its port: the program runs,
/// and nothing outside reaches it, as in a container whose port is not
/// published.
fn local_bind_note(ty: i32, addr: &[u8]) {
    if cfg!(test) || !crate::lo::is_any(addr) || addr.get(2..4).is_none_or(|p| p == [0, 0]) {
        return;
    }
    static SAID: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, core::sync::atomic::Ordering::Relaxed) {
        use core::fmt::Write;
        let port = u16::from_be_bytes([addr[2], addr[3]]);
        let udp = if ty == SOCK_DGRAM { "/udp" } else { "" };
        let what = crate::host::SockAddrText(addr);
        let _ = if crate::host::published_and_taken(ty, port) {
            writeln!(
                shoal_plat::console::Stderr,
                "shoal: the guest's bind to {what} is reachable only inside the instance: published port {port} is taken by another of its sockets (one --publish gives one socket; publish it once more on another host address, e.g. --publish [::1]:HOSTPORT:{port}{udp})"
            )
        } else {
            writeln!(
                shoal_plat::console::Stderr,
                "shoal: the guest's bind to {what} is reachable only inside the instance: port {port} is not published (shoal run --publish HOSTPORT:{port}{udp})"
            )
        };
    }
}

/// Says once, on stderr, why an Internet address outside the instance
/// was refused and which options give the instance a network: the
/// program itself only sees `ENETUNREACH` or `EADDRNOTAVAIL` and often
/// reports something unrelated (`getaddrinfo: System error`).
fn no_network_hint() {
    // Host unit tests have no console (plat's writes are hypercalls).
    if cfg!(test) {
        return;
    }
    static SAID: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, core::sync::atomic::Ordering::Relaxed) {
        use core::fmt::Write;
        let _ = writeln!(
            shoal_plat::console::Stderr,
            "shoal: the program's Internet address outside the instance was refused: this instance has no network, only its own loopback (shoal run --publish HOSTPORT:GUESTPORT for a server, --net-outbound for connections out)"
        );
    }
}

/// `socket(domain, type, protocol)`.
pub fn socket(domain: i32, ty: i32, protocol: i32) -> SysResult {
    let (t, flags) = type_flags(ty)?;
    let fam = family(domain)?;
    let h = crate::with(|n| n.backend(fam)?.socket_in(domain, t, protocol))?;
    install(Sock { fam, h }, flags)
}

/// `socketpair(domain, type, protocol, sv)`.
pub fn socketpair(domain: i32, ty: i32, protocol: i32, sv: u64) -> SysResult {
    let (t, flags) = type_flags(ty)?;
    let fam = match domain {
        AF_INET | AF_INET6 => return Err(Errno::EOPNOTSUPP),
        d => family(d)?,
    };
    umem::check_write(sv, 8)?;
    let (a, b) = crate::with(|n| n.backend(fam)?.socketpair(t, protocol))?;
    let fa = match install(Sock { fam, h: a }, flags) {
        Ok(fd) => fd,
        Err(e) => {
            crate::with(|n| n.backend(fam).map(|be| be.close(b)).ok());
            return Err(e);
        }
    };
    let fb = match install(Sock { fam, h: b }, flags) {
        Ok(fd) => fd,
        Err(e) => {
            let _ = shoal_vfs::with(|v| v.close_fd(fa as i32));
            return Err(e);
        }
    };
    umem::write(sv, [fa as i32, fb as i32])?;
    Ok(0)
}

/// The address at `addr` of `len` bytes; for `AF_UNIX` a relative path is
/// made absolute from the working directory.
fn read_addr(fam: Fam, addr: u64, len: u32) -> Result<SockAddr, Errno> {
    if len as usize > ADDR_MAX {
        return Err(Errno::EINVAL);
    }
    let mut a = umem::slice(addr, len as usize)?.to_vec();
    if fam == Fam::Unix {
        if let Ok(Some(name)) = crate::unix::parse(&a) {
            if name.first().is_some_and(|&c| c != 0 && c != b'/') {
                let mut p = shoal_vfs::with(|v| v.cwd_path())?;
                if p.last() != Some(&b'/') {
                    p.push(b'/');
                }
                p.extend_from_slice(&name);
                if p.len() >= 108 {
                    return Err(Errno::ENAMETOOLONG);
                }
                a.truncate(2);
                a.extend_from_slice(&p);
                a.push(0);
            }
        }
    }
    Ok(a)
}

/// Stores `a` at `addr` with its length at `lenp` (value-result: at most
/// the given length is written, the full length is reported).
fn write_addr(addr: u64, lenp: u64, a: &[u8]) -> Result<(), Errno> {
    if addr == 0 || lenp == 0 {
        return Ok(());
    }
    let len: i32 = umem::read(lenp)?;
    if len < 0 {
        return Err(Errno::EINVAL);
    }
    let n = (len as usize).min(a.len());
    umem::slice_mut(addr, n)?.copy_from_slice(&a[..n]);
    umem::write(lenp, a.len() as u32)
}

/// The path an `AF_UNIX` address names (`None`: abstract, unnamed, or
/// not an `AF_UNIX` address).
fn unix_path(fam: Fam, a: &[u8]) -> Option<Vec<u8>> {
    if fam != Fam::Unix {
        return None;
    }
    crate::unix::parse(a).ok().flatten().filter(|n| n.first() != Some(&0))
}

/// An `AF_UNIX` address to reach, with a path replaced by the key of the
/// socket node it names (see `unix::file_key`): `ENOENT` and the other
/// lookup errors if there is none, `ECONNREFUSED` if it is not a socket.
fn unix_target(fam: Fam, a: SockAddr) -> Result<SockAddr, Errno> {
    match unix_path(fam, &a) {
        Some(p) => Ok(crate::unix::file_key(shoal_vfs::with_ref(|v| v.socket_file(&p))?)),
        None => Ok(a),
    }
}

/// `bind` of an `AF_UNIX` socket to `path`: the socket node first (as
/// Linux's `unix_bind_bsd`), then the name.
fn bind_file(h: u64, path: Vec<u8>) -> Result<(), Errno> {
    if crate::with(|n| n.unix.is_named(h))? {
        return Err(Errno::EINVAL);
    }
    let ino = shoal_vfs::with(|v| v.bind_socket_file(&path))?;
    let r = crate::with(|n| n.unix.bind_file(h, path.clone(), crate::unix::file_key(ino)[2..].to_vec()));
    if r.is_err() {
        shoal_vfs::with(|v| v.unbind_socket_file(&path, ino));
    }
    r
}

/// Whether `s` is a datagram socket.
fn is_dgram(s: Sock) -> Result<bool, Errno> {
    let t = call(s, |b, h| b.getsockopt(h, SOL_SOCKET, SO_TYPE))?;
    Ok(t.get(..4) == Some(&SOCK_DGRAM.to_ne_bytes()[..]))
}

/// `bind(fd, addr, len)`.
pub fn bind(fd: i32, addr: u64, len: u32) -> SysResult {
    let (s, id, _) = sock_of(fd)?;
    let a = read_addr(s.fam, addr, len)?;
    if let Some(p) = unix_path(s.fam, &a) {
        bind_file(s.h, p)?;
        return Ok(0);
    }
    let s = route(id, s, Want::Bind(&a))?;
    call(s, |b, h| b.bind(h, &a))?;
    Ok(0)
}

/// `listen(fd, backlog)`.
pub fn listen(fd: i32, backlog: i32) -> SysResult {
    let (s, id, _) = sock_of(fd)?;
    let s = route(id, s, Want::Listen)?;
    call(s, |b, h| b.listen(h, backlog))?;
    Ok(0)
}

/// `accept4(fd, addr, addrlen, flags)`.
pub fn accept4(fd: i32, addr: u64, lenp: u64, flags: i32) -> SysResult {
    if flags & !(SOCK_NONBLOCK | SOCK_CLOEXEC) != 0 {
        return Err(Errno::EINVAL);
    }
    let (s, _, nb) = sock_of(fd)?;
    if addr != 0 {
        umem::check_write(lenp, 4)?;
    }
    let (h, from) = retry(s, nb, shoal_vfs::obj::EPOLLIN, "accept", || call(s, |b, h| b.accept(h)))?;
    let nfd = install(Sock { fam: s.fam, h }, flags)?;
    if let Err(e) = write_addr(addr, lenp, &from) {
        let _ = shoal_vfs::with(|v| v.close_fd(nfd as i32));
        return Err(e);
    }
    Ok(nfd)
}

/// `connect(fd, addr, len)`.
pub fn connect(fd: i32, addr: u64, len: u32) -> SysResult {
    let (s, id, nb) = sock_of(fd)?;
    let a = unix_target(s.fam, read_addr(s.fam, addr, len)?)?;
    let s = route(id, s, Want::Reach(&a))?;
    match retry(s, nb, shoal_vfs::obj::EPOLLOUT, "connect", || call(s, |b, h| b.connect(h, &a))) {
        Err(EINPROGRESS) if !nb => {
            // Wait until the connection is made or failed, then report it.
            loop {
                let r = call(s, |b, h| Ok(b.ready(h)))?;
                if r.mask & (shoal_vfs::obj::EPOLLOUT | shoal_vfs::obj::EPOLLERR | shoal_vfs::obj::EPOLLHUP) != 0 {
                    break;
                }
                shoal_vfs::wait::block("connect", None)?;
            }
            let e = call(s, |b, h| b.getsockopt(h, SOL_SOCKET, SO_ERROR))?;
            let e = i32::from_ne_bytes(e.get(..4).and_then(|b| b.try_into().ok()).unwrap_or([0; 4]));
            if e != 0 {
                return Err(Errno(e));
            }
            Ok(0)
        }
        r => r.map(|()| 0),
    }
}

/// Drops the first `n` bytes of a list of buffers: whole ones are
/// skipped (`start` moves past them), a partly consumed one is cut in
/// place.
fn advance<T: AsRef<[u8]> + Default>(bufs: &mut [T], start: &mut usize, mut n: usize, split: impl Fn(T, usize) -> T) {
    while n > 0 && *start < bufs.len() {
        let l = bufs[*start].as_ref().len();
        if n >= l {
            *start += 1;
            n -= l;
        } else {
            let b = core::mem::take(&mut bufs[*start]);
            bufs[*start] = split(b, n);
            n = 0;
        }
    }
}

/// Most buffers a call keeps on the stack (more go to the heap): reads
/// and writes of one buffer, and most `readv`/`writev`/`sendmsg` calls,
/// allocate nothing.
const INLINE_BUFS: usize = 8;

/// Runs `f` on the buffers of `iov`, each made by `conv` (a user-memory
/// check), on the stack when there are few.
fn with_bufs<T: Default, R>(
    iov: &[(u64, usize)],
    conv: impl Fn(u64, usize) -> Result<T, Errno>,
    f: impl FnOnce(&mut [T]) -> Result<R, Errno>,
) -> Result<R, Errno> {
    if iov.len() <= INLINE_BUFS {
        let mut a: [T; INLINE_BUFS] = core::array::from_fn(|_| T::default());
        for (slot, &(b, l)) in a.iter_mut().zip(iov) {
            *slot = conv(b, l)?;
        }
        f(&mut a[..iov.len()])
    } else {
        let mut v = iov.iter().map(|&(b, l)| conv(b, l)).collect::<Result<Vec<T>, Errno>>()?;
        f(&mut v)
    }
}

/// Sends the buffers `data` (to `to`) on `fd` with `flags`.
fn do_send(fd: i32, data: &mut [&'static [u8]], to: Option<(u64, u32)>, flags: i32) -> Result<usize, Errno> {
    do_send_ctl(fd, data, to, flags, None)
}

/// [`do_send`] with the control buffer `(address, length)` of a
/// `sendmsg`: an `AF_UNIX` socket passes the descriptors it names.
fn do_send_ctl(fd: i32, data: &mut [&'static [u8]], to: Option<(u64, u32)>, flags: i32, control: Option<(u64, u64)>) -> Result<usize, Errno> {
    let (s, id, nb) = sock_of(fd)?;
    let s = match to {
        Some((addr, len)) if addr != 0 && s.fam == Fam::Lo => route(id, s, Want::Reach(&read_addr(s.fam, addr, len)?))?,
        _ => s,
    };
    let mut held = match control {
        Some((addr, len)) if s.fam == Fam::Unix && len > 0 => hold_rights(addr, len)?,
        _ => Vec::new(),
    };
    let r = send_on(s, nb, data, to, flags, &mut held);
    // What no message took (an error, a stream send of no bytes).
    drop_held(&held);
    r
}

/// The `(level, type, data)` of each control message in `buf` (Linux's
/// `CMSG_FIRSTHDR`/`CMSG_NXTHDR` walk); `EINVAL` for a header whose
/// length is shorter than a header or runs past the buffer.
fn cmsgs(buf: &[u8]) -> impl Iterator<Item = Result<(i32, i32, &[u8]), Errno>> {
    let mut off = 0usize;
    core::iter::from_fn(move || {
        let hdr = buf.get(off..off.checked_add(CMSG_HDR)?)?;
        let len = u64::from_ne_bytes(hdr[..8].try_into().ok()?) as usize;
        if len < CMSG_HDR || len > buf.len() - off {
            off = buf.len();
            return Some(Err(Errno::EINVAL));
        }
        let level = i32::from_ne_bytes(hdr[8..12].try_into().ok()?);
        let ty = i32::from_ne_bytes(hdr[12..16].try_into().ok()?);
        let data = &buf[off + CMSG_HDR..off + len];
        off = off.saturating_add((len + 7) & !7);
        Some(Ok((level, ty, data)))
    })
}

/// `sizeof(struct cmsghdr)` (x86-64).
const CMSG_HDR: usize = 16;

/// Reads the control messages of a `sendmsg` on an `AF_UNIX` socket, as
/// Linux's `__scm_send` does, and takes a reference to each description
/// `SCM_RIGHTS` names: `ENOBUFS` for a buffer longer than
/// `optmem_max`, `EINVAL` for a malformed header, an unknown
/// `SOL_SOCKET` type or more than `SCM_MAX_FD` descriptors, `EBADF` for
/// one that is not open (then no reference is kept). Other levels are
/// skipped; `SCM_CREDENTIALS` of the right size is accepted and ignored.
fn hold_rights(addr: u64, len: u64) -> Result<Vec<usize>, Errno> {
    if len > OPTMEM_MAX as u64 {
        return Err(ENOBUFS);
    }
    let buf = umem::slice(addr, len as usize)?;
    let mut held: Vec<usize> = Vec::new();
    let r = (|| {
        for c in cmsgs(buf) {
            let (level, ty, data) = c?;
            if level != SOL_SOCKET {
                continue;
            }
            match ty {
                SCM_RIGHTS => {
                    let fds: Vec<i32> = data.chunks_exact(4).map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]])).collect();
                    if fds.len() > SCM_MAX_FD || held.len() + fds.len() > SCM_MAX_FD {
                        return Err(Errno::EINVAL);
                    }
                    let more = shoal_vfs::with(|v| v.hold_fds(&fds))?;
                    held.extend(more);
                }
                SCM_CREDENTIALS if data.len() == 12 => {}
                _ => return Err(Errno::EINVAL),
            }
        }
        Ok(())
    })();
    match r {
        Ok(()) => Ok(held),
        Err(e) => {
            drop_held(&held);
            Err(e)
        }
    }
}

/// Lets go of descriptions in flight that no message or descriptor
/// took (vfs closes each one no descriptor refers to any more).
fn drop_held(held: &[usize]) {
    if !held.is_empty() {
        shoal_vfs::with(|v| v.drop_held(held));
    }
}

/// Lets go of the descriptions received with `r` where the call has no
/// room for them (`recv`, `read`): those of a peek stay the message's.
fn discard_fds(r: &Received, flags: i32) {
    if flags & MSG_PEEK == 0 {
        drop_held(&r.fds);
    }
}

/// [`do_send`] on socket `s` (non-blocking descriptor: `nb`), already
/// looked up; `fds` are descriptions in flight the first piece of data
/// carries (the backend takes them).
fn send_on(s: Sock, nb: bool, data: &mut [&'static [u8]], to: Option<(u64, u32)>, flags: i32, fds: &mut Vec<usize>) -> Result<usize, Errno> {
    let nb = nb || flags & MSG_DONTWAIT != 0;
    let to = match to {
        // A datagram's destination path is looked up once, before it waits.
        Some((addr, len)) if addr != 0 && s.fam == Fam::Unix && is_dgram(s)? => Some(unix_target(s.fam, read_addr(s.fam, addr, len)?)?),
        Some((addr, len)) if addr != 0 => Some(read_addr(s.fam, addr, len)?),
        _ => None,
    };
    let total: usize = data.iter().map(|d| d.len()).sum();
    // Whether the socket is a stream matters only after a short send
    // (asked then: most sends are whole).
    let mut stream = None;
    let mut sent = 0;
    let mut start = 0;
    loop {
        match call(s, |b, h| b.send_fds(h, &data[start..], to.as_deref(), flags, fds)) {
            Ok(k) => {
                sent += k;
                if sent >= total {
                    return Ok(sent);
                }
                if !*stream.get_or_insert(call(s, |b, h| Ok(b.is_stream(h)))?) {
                    return Ok(sent);
                }
                advance(data, &mut start, k, |b, n| &b[n..]);
            }
            Err(Errno::EAGAIN) if !nb => wait_for(s, shoal_vfs::obj::EPOLLOUT, "a socket")?,
            Err(e) if sent > 0 && e != Errno::EFAULT => return Ok(sent),
            Err(e) => return Err(e),
        }
    }
}

/// Receives into `bufs` on `fd` with `flags`.
fn do_recv(fd: i32, bufs: &mut [&'static mut [u8]], flags: i32) -> Result<Received, Errno> {
    let (s, _, nb) = sock_of(fd)?;
    recv_on(s, nb, bufs, flags)
}

/// [`do_recv`] on socket `s` (non-blocking descriptor: `nb`), already
/// looked up.
fn recv_on(s: Sock, nb: bool, bufs: &mut [&'static mut [u8]], flags: i32) -> Result<Received, Errno> {
    let nb = nb || flags & MSG_DONTWAIT != 0;
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    // Whether it is a stream matters only for a blocking MSG_WAITALL.
    let waitall = flags & MSG_WAITALL != 0 && flags & MSG_PEEK == 0 && !nb && call(s, |b, h| Ok(b.is_stream(h)))?;
    let mut got: Option<Received> = None;
    let mut start = 0;
    if !nb && flags & MSG_PEEK == 0 && known_unreadable(s) {
        wait_for(s, shoal_vfs::obj::EPOLLIN, "a socket")?;
    }
    loop {
        match call(s, |b, h| b.recv(h, &mut bufs[start..], flags)) {
            Ok(r) => {
                let n = r.len;
                let acc = got.get_or_insert_with(Received::default);
                acc.len += n;
                acc.flags |= r.flags;
                if acc.from.is_none() {
                    acc.from = r.from;
                }
                // Descriptions end a read, as on Linux (even MSG_WAITALL).
                let passed = !r.fds.is_empty();
                acc.fds.extend(r.fds);
                if !waitall || n == 0 || acc.len >= total || passed {
                    return Ok(got.unwrap_or_default());
                }
                advance(bufs, &mut start, n, |b, k| &mut b[k..]);
            }
            Err(Errno::EAGAIN) if !nb => wait_for(s, shoal_vfs::obj::EPOLLIN, "a socket")?,
            Err(e) => return got.ok_or(e),
        }
    }
}

/// Runs `f` on the iovec array at `addr` (`cnt` entries) as (base,
/// length) pairs, on the stack when there are few.
fn with_iovecs<R>(addr: u64, cnt: usize, f: impl FnOnce(&[(u64, usize)]) -> Result<R, Errno>) -> Result<R, Errno> {
    if cnt > IOV_MAX {
        return Err(EMSGSIZE);
    }
    let mut total = 0usize;
    // Entry `k`, its length cut so that the total stays below Linux's
    // limit.
    let mut entry = |k: usize| -> Result<(u64, usize), Errno> {
        let [base, len]: [u64; 2] = umem::read(addr.checked_add(16 * k as u64).ok_or(Errno::EFAULT)?)?;
        if (len as i64) < 0 {
            return Err(Errno::EINVAL);
        }
        let len = (len as usize).min(0x7fff_f000 - total);
        total += len;
        Ok((base, len))
    };
    if cnt <= INLINE_BUFS {
        let mut inline = [(0u64, 0usize); INLINE_BUFS];
        for (k, slot) in inline.iter_mut().enumerate().take(cnt) {
            *slot = entry(k)?;
        }
        f(&inline[..cnt])
    } else {
        let heap = (0..cnt).map(entry).collect::<Result<Vec<_>, Errno>>()?;
        f(&heap)
    }
}

/// `sendto(fd, buf, len, flags, addr, addrlen)`.
pub fn sendto(fd: i32, buf: u64, len: usize, flags: i32, addr: u64, alen: u32) -> SysResult {
    let data = umem::slice(buf, len.min(0x7fff_f000))?;
    do_send(fd, &mut [data], Some((addr, alen)), flags).map(|n| n as u64)
}

/// `recvfrom(fd, buf, len, flags, addr, addrlen)`.
pub fn recvfrom(fd: i32, buf: u64, len: usize, flags: i32, addr: u64, lenp: u64) -> SysResult {
    let b = umem::slice_mut(buf, len.min(0x7fff_f000))?;
    let r = do_recv(fd, &mut [b], flags)?;
    discard_fds(&r, flags);
    write_addr(addr, lenp, r.from.as_deref().unwrap_or(&[]))?;
    Ok(r.len as u64)
}

/// `struct msghdr` (x86-64).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct MsgHdr {
    name: u64,
    namelen: u32,
    _pad: u32,
    iov: u64,
    iovlen: u64,
    control: u64,
    controllen: u64,
    flags: i32,
    _pad2: u32,
}

fn sendmsg_at(fd: i32, msg: u64, flags: i32) -> Result<usize, Errno> {
    let m: MsgHdr = umem::read(msg)?;
    if m.controllen > i32::MAX as u64 {
        return Err(ENOBUFS);
    }
    let control = Some((m.control, m.controllen));
    with_iovecs(m.iov, m.iovlen as usize, |iov| with_bufs(iov, umem::slice, |b| do_send_ctl(fd, b, Some((m.name, m.namelen)), flags, control)))
}

/// Installs the descriptions `fds` received by a `recvmsg` into the
/// descriptor table and describes them in its control buffer as Linux's
/// `scm_detach_fds` does: as many as the buffer has room for (and the
/// table takes), `MSG_CTRUNC` if not all, the rest closed (a peek's stay
/// with the message). Returns `msg_controllen` and the flags to add.
fn put_rights(m: &MsgHdr, fds: &[usize], flags: i32) -> (u64, i32) {
    let peek = flags & MSG_PEEK != 0;
    let cloexec = flags & MSG_CMSG_CLOEXEC != 0;
    let room = if m.controllen as usize <= CMSG_HDR { 0 } else { (m.controllen as usize - CMSG_HDR) / 4 };
    let fit = room.min(fds.len());
    // Linux stores each number before it installs the descriptor: a
    // buffer it cannot write gets none.
    let writable = fit > 0 && umem::check_write(m.control, (CMSG_HDR + 4 * fit) as u64).is_ok();
    let mut got: Vec<i32> = Vec::new();
    if writable {
        shoal_vfs::with(|v| {
            for &o in &fds[..fit] {
                match v.install_held(o, cloexec, !peek) {
                    Ok(fd) => got.push(fd),
                    Err(_) => break,
                }
            }
        });
    }
    if !peek {
        drop_held(&fds[got.len()..]);
    }
    let trunc = if got.len() < fds.len() { MSG_CTRUNC } else { 0 };
    if got.is_empty() {
        return (0, trunc);
    }
    let len = CMSG_HDR + 4 * got.len();
    let mut buf = Vec::with_capacity(len);
    buf.extend_from_slice(&(len as u64).to_ne_bytes());
    buf.extend_from_slice(&SOL_SOCKET.to_ne_bytes());
    buf.extend_from_slice(&SCM_RIGHTS.to_ne_bytes());
    for fd in &got {
        buf.extend_from_slice(&fd.to_ne_bytes());
    }
    if let Ok(dst) = umem::slice_mut(m.control, len) {
        dst.copy_from_slice(&buf);
    }
    (((len + 7) & !7).min(m.controllen as usize) as u64, trunc)
}

fn recvmsg_at(fd: i32, msg: u64, flags: i32) -> Result<usize, Errno> {
    let m: MsgHdr = umem::read(msg)?;
    let r = with_iovecs(m.iov, m.iovlen as usize, |iov| with_bufs(iov, umem::slice_mut, |b| do_recv(fd, b, flags)))?;
    let (controllen, cflags) = if r.fds.is_empty() { (0, 0) } else { put_rights(&m, &r.fds, flags) };
    let from = r.from.unwrap_or_default();
    let mut namelen = 0u32;
    if m.name != 0 {
        let n = (m.namelen as usize).min(from.len());
        umem::slice_mut(m.name, n)?.copy_from_slice(&from[..n]);
        namelen = from.len() as u32;
    }
    // msg_namelen, msg_controllen, msg_flags.
    umem::write(msg + 8, namelen)?;
    umem::write(msg + 40, controllen)?;
    umem::write(msg + 48, r.flags | cflags)?;
    Ok(r.len)
}

/// `sendmsg(fd, msg, flags)`.
pub fn sendmsg(fd: i32, msg: u64, flags: i32) -> SysResult {
    sendmsg_at(fd, msg, flags).map(|n| n as u64)
}

/// `recvmsg(fd, msg, flags)`.
pub fn recvmsg(fd: i32, msg: u64, flags: i32) -> SysResult {
    recvmsg_at(fd, msg, flags).map(|n| n as u64)
}

/// `sizeof(struct mmsghdr)`.
const MMSG_SIZE: u64 = 64;

/// `sendmmsg(fd, vec, vlen, flags)`: sends until one fails; returns how
/// many were sent (the error if none was).
pub fn sendmmsg(fd: i32, vec: u64, vlen: u32, flags: i32) -> SysResult {
    let vlen = (vlen as usize).min(MMSG_MAX);
    let mut k = 0;
    while k < vlen {
        let at = vec + k as u64 * MMSG_SIZE;
        match sendmsg_at(fd, at, flags) {
            Ok(n) => umem::write(at + 56, n as u32)?,
            Err(e) if k == 0 => return Err(e),
            Err(_) => break,
        }
        k += 1;
    }
    Ok(k as u64)
}

/// `recvmmsg(fd, vec, vlen, flags, timeout)`: with `MSG_WAITFORONE` only
/// the first receive may wait. The timeout is checked between messages (as
/// Linux does).
pub fn recvmmsg(fd: i32, vec: u64, vlen: u32, flags: i32, timeout: u64) -> SysResult {
    let dl = if timeout != 0 {
        let [s, ns]: [i64; 2] = umem::read(timeout)?;
        if s < 0 || !(0..1_000_000_000).contains(&ns) {
            return Err(Errno::EINVAL);
        }
        Some(shoal_time::monotonic_ns().saturating_add((s as u64).saturating_mul(1_000_000_000) + ns as u64))
    } else {
        None
    };
    let vlen = (vlen as usize).min(MMSG_MAX);
    let mut k = 0;
    let mut fl = flags & !MSG_WAITFORONE;
    while k < vlen {
        let at = vec + k as u64 * MMSG_SIZE;
        match recvmsg_at(fd, at, fl) {
            Ok(n) => umem::write(at + 56, n as u32)?,
            Err(e) if k == 0 => return Err(e),
            Err(_) => break,
        }
        k += 1;
        if flags & MSG_WAITFORONE != 0 {
            fl |= MSG_DONTWAIT;
        }
        if dl.is_some_and(|d| shoal_time::monotonic_ns() >= d) {
            break;
        }
    }
    Ok(k as u64)
}

/// `shutdown(fd, how)`.
pub fn shutdown(fd: i32, how: i32) -> SysResult {
    let (s, _, _) = sock_of(fd)?;
    call(s, |b, h| b.shutdown(h, how))?;
    Ok(0)
}

/// `getsockname` (`peer` false) and `getpeername`.
pub fn name(fd: i32, addr: u64, lenp: u64, peer: bool) -> SysResult {
    let (s, _, _) = sock_of(fd)?;
    umem::check_write(lenp, 4)?;
    let a = call(s, |b, h| b.name(h, peer))?;
    write_addr(addr, lenp, &a)?;
    Ok(0)
}

/// `setsockopt(fd, level, name, val, len)`.
pub fn setsockopt(fd: i32, level: i32, name: i32, val: u64, len: i32) -> SysResult {
    if len < 0 {
        return Err(Errno::EINVAL);
    }
    let (s, _, _) = sock_of(fd)?;
    let v = umem::slice(val, (len as usize).min(OPT_MAX))?;
    call(s, |b, h| b.setsockopt(h, level, name, v))?;
    Ok(0)
}

/// `getsockopt(fd, level, name, val, lenp)`.
pub fn getsockopt(fd: i32, level: i32, name: i32, val: u64, lenp: u64) -> SysResult {
    let (s, _, _) = sock_of(fd)?;
    let len: i32 = umem::read(lenp)?;
    if len < 0 {
        return Err(Errno::EINVAL);
    }
    let v = call(s, |b, h| b.getsockopt(h, level, name))?;
    let n = (len as usize).min(v.len());
    umem::slice_mut(val, n)?.copy_from_slice(&v[..n]);
    umem::write(lenp, n as u32)?;
    Ok(0)
}

/// `read`/`readv` on a socket: `recv` without flags.
pub(crate) fn read_iov(s: Sock, nb: bool, iov: &[(u64, usize)]) -> SysResult {
    let r = with_bufs(iov, umem::slice_mut, |b| recv_on(s, nb, b, 0))?;
    discard_fds(&r, 0);
    Ok(r.len as u64)
}

/// `write`/`writev` on a socket: `send` without flags.
pub(crate) fn write_iov(s: Sock, nb: bool, iov: &[(u64, usize)]) -> SysResult {
    with_bufs(iov, umem::slice, |b| send_on(s, nb, b, None, 0, &mut Vec::new())).map(|n| n as u64)
}

/// Runs `f` on the iovec array of `readv`/`writev` (Linux's checks).
pub(crate) fn with_rw_iovecs<R>(addr: u64, cnt: i32, f: impl FnOnce(&[(u64, usize)]) -> Result<R, Errno>) -> Result<R, Errno> {
    if cnt < 0 || cnt as usize > IOV_MAX {
        return Err(Errno::EINVAL);
    }
    with_iovecs(addr, cnt as usize, f)
}
