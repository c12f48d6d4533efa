//! The system-call entry points `shoal-syscall` dispatches to.
//!
//! `read`, `write`, `readv` and `writev` come here first for every
//! descriptor: those of this component's objects are served here (a
//! socket's `readv` is one `recvmsg`, so a datagram is not split across
//! calls; a timerfd read waits until its next expiry), all others go on
//! to vfs unchanged.

use shoal_plat::{Args, Errno, SysResult};

use crate::{epoll, eventfd, socket, timerfd, Obj};

/// What kind of object `fd` is, if it is one of ours.
enum Kind {
    /// A socket, and whether its descriptor is non-blocking (looked up
    /// once here, not again by the socket layer).
    Socket(crate::Sock, bool),
    /// Eventfd, timerfd, epoll: one 8-byte read or write through the
    /// object table; with the object id and whether it is non-blocking.
    Other(u64, bool),
}

fn kind(fd: i32) -> Option<Kind> {
    let (id, nb) = shoal_vfs::obj_of_fd(fd).ok()?;
    crate::with(|n| match n.objs.get(&id) {
        Some(Obj::Socket(s)) => Some(Kind::Socket(*s, nb)),
        Some(_) => Some(Kind::Other(id, nb)),
        None => None,
    })
}

/// Reads or writes object `id` through its table entry, waiting (until
/// its next timer expiry, if it has one) unless non-blocking.
fn obj_io(id: u64, nb: bool, mut f: impl FnMut(&dyn shoal_vfs::obj::ObjOps) -> Result<usize, Errno>) -> SysResult {
    use shoal_vfs::obj::ObjOps;
    loop {
        match f(&crate::Ops) {
            Err(Errno::EAGAIN) if !nb => {
                let dl = shoal_vfs::with(|v| crate::Ops.deadline(id, v));
                shoal_vfs::wait::block("an eventfd or timerfd", dl)?;
            }
            r => return r.map(|n| n as u64),
        }
    }
}

/// `read(fd, buf, count)`.
pub fn read(a: &Args) -> SysResult {
    match kind(a.int(0)) {
        Some(Kind::Socket(s, nb)) => socket::read_iov(s, nb, &[(a.u(1), a.usize(2).min(0x7fff_f000))]),
        Some(Kind::Other(id, nb)) => {
            let buf = shoal_plat::umem::slice_mut(a.u(1), a.usize(2).min(0x7fff_f000))?;
            obj_io(id, nb, |o| o.read(id, buf))
        }
        None => shoal_vfs::sys::read(a),
    }
}

/// `write(fd, buf, count)`.
pub fn write(a: &Args) -> SysResult {
    match kind(a.int(0)) {
        Some(Kind::Socket(s, nb)) => socket::write_iov(s, nb, &[(a.u(1), a.usize(2).min(0x7fff_f000))]),
        Some(Kind::Other(id, nb)) => {
            let buf = shoal_plat::umem::slice(a.u(1), a.usize(2).min(0x7fff_f000))?;
            obj_io(id, nb, |o| o.write(id, buf))
        }
        None => shoal_vfs::sys::write(a),
    }
}

/// `readv(fd, iov, cnt)`.
pub fn readv(a: &Args) -> SysResult {
    match kind(a.int(0)) {
        Some(Kind::Socket(s, nb)) => socket::with_rw_iovecs(a.u(1), a.int(2), |iov| socket::read_iov(s, nb, iov)),
        Some(Kind::Other(id, nb)) => {
            // One 8-byte value: the first buffer must hold it.
            let (base, len) = socket::with_rw_iovecs(a.u(1), a.int(2), |iov| iov.first().copied().ok_or(Errno::EINVAL))?;
            let buf = shoal_plat::umem::slice_mut(base, len)?;
            obj_io(id, nb, |o| o.read(id, buf))
        }
        None => shoal_vfs::sys::readv(a),
    }
}

/// `writev(fd, iov, cnt)`.
pub fn writev(a: &Args) -> SysResult {
    match kind(a.int(0)) {
        Some(Kind::Socket(s, nb)) => socket::with_rw_iovecs(a.u(1), a.int(2), |iov| socket::write_iov(s, nb, iov)),
        Some(Kind::Other(id, nb)) => {
            let (base, len) = socket::with_rw_iovecs(a.u(1), a.int(2), |iov| iov.first().copied().ok_or(Errno::EINVAL))?;
            let buf = shoal_plat::umem::slice(base, len)?;
            obj_io(id, nb, |o| o.write(id, buf))
        }
        None => shoal_vfs::sys::writev(a),
    }
}

/// `ioctl(fd, req, arg)`: a socket answers the interface requests
/// (`SIOCGIF*`, about the instance's one interface, see module
/// `netlink`) on any family, as Linux's `sock_do_ioctl` passes them to
/// `dev_ioctl`; everything else is vfs's.
pub fn ioctl(a: &Args) -> SysResult {
    if matches!(kind(a.int(0)), Some(Kind::Socket(..))) {
        if let Some(r) = iface_ioctl(a.uint(1), a.u(2)) {
            return r;
        }
    }
    shoal_vfs::sys::ioctl(a)
}

const SIOCGIFNAME: u32 = 0x8910;
const SIOCGIFCONF: u32 = 0x8912;
const SIOCGIFFLAGS: u32 = 0x8913;
const SIOCGIFMTU: u32 = 0x8921;
const SIOCGIFHWADDR: u32 = 0x8927;
const SIOCGIFINDEX: u32 = 0x8933;
/// `sizeof(struct ifreq)`; its union starts at byte 16 (`IFNAMSIZ`).
const IFREQ: usize = 40;

/// The answer to interface request `req` on `struct ifreq` (or `struct
/// ifconf`) at `arg`; `None` for a request that is not one.
fn iface_ioctl(req: u32, arg: u64) -> Option<SysResult> {
    use crate::netlink::IFACE;
    use shoal_plat::umem;
    let name_is_ours = |r: &[u8; IFREQ]| {
        let n = &r[..16];
        n.split(|&c| c == 0).next() == Some(IFACE.name)
    };
    let r = || -> SysResult {
        if req == SIOCGIFCONF {
            // struct ifconf { int ifc_len; char *ifc_buf; }: one entry per
            // IPv4 address; a NULL buffer asks for the length only.
            let (len, buf): (i32, u64) = (umem::read(arg)?, umem::read(arg + 8)?);
            if buf == 0 {
                umem::write(arg, IFREQ as i32)?;
                return Ok(0);
            }
            let mut n = 0;
            if len >= IFREQ as i32 {
                let mut r = [0u8; IFREQ];
                r[..IFACE.name.len()].copy_from_slice(IFACE.name);
                r[16..18].copy_from_slice(&(crate::abi::AF_INET as u16).to_ne_bytes());
                r[20..24].copy_from_slice(&IFACE.v4.0);
                umem::write(buf, r)?;
                n = IFREQ as i32;
            }
            umem::write(arg, n)?;
            return Ok(0);
        }
        let mut r: [u8; IFREQ] = umem::read(arg)?;
        match req {
            SIOCGIFNAME => {
                if i32::from_ne_bytes([r[16], r[17], r[18], r[19]]) as u32 != IFACE.index {
                    return Err(Errno::ENODEV);
                }
                r[..16].fill(0);
                r[..IFACE.name.len()].copy_from_slice(IFACE.name);
            }
            _ if !name_is_ours(&r) => return Err(Errno::ENODEV),
            SIOCGIFINDEX => r[16..20].copy_from_slice(&(IFACE.index as i32).to_ne_bytes()),
            SIOCGIFFLAGS => r[16..18].copy_from_slice(&(IFACE.flags as u16).to_ne_bytes()),
            SIOCGIFMTU => r[16..20].copy_from_slice(&(IFACE.mtu as i32).to_ne_bytes()),
            SIOCGIFHWADDR => {
                // ARPHRD_LOOPBACK and lo's all-zero address.
                r[16..32].fill(0);
                r[16..18].copy_from_slice(&772u16.to_ne_bytes());
            }
            _ => return Err(Errno::ENOTTY),
        }
        umem::write(arg, r)?;
        Ok(0)
    };
    matches!(req, SIOCGIFNAME | SIOCGIFCONF | SIOCGIFFLAGS | SIOCGIFMTU | SIOCGIFHWADDR | SIOCGIFINDEX).then(r)
}

/// `socket(domain, type, protocol)`.
pub fn socket(a: &Args) -> SysResult {
    socket::socket(a.int(0), a.int(1), a.int(2))
}

/// `socketpair(domain, type, protocol, sv)`.
pub fn socketpair(a: &Args) -> SysResult {
    socket::socketpair(a.int(0), a.int(1), a.int(2), a.u(3))
}

/// `bind(fd, addr, addrlen)`.
pub fn bind(a: &Args) -> SysResult {
    socket::bind(a.int(0), a.u(1), a.uint(2))
}

/// `listen(fd, backlog)`.
pub fn listen(a: &Args) -> SysResult {
    socket::listen(a.int(0), a.int(1))
}

/// `accept(fd, addr, addrlen)`.
pub fn accept(a: &Args) -> SysResult {
    socket::accept4(a.int(0), a.u(1), a.u(2), 0)
}

/// `accept4(fd, addr, addrlen, flags)`.
pub fn accept4(a: &Args) -> SysResult {
    socket::accept4(a.int(0), a.u(1), a.u(2), a.int(3))
}

/// `connect(fd, addr, addrlen)`.
pub fn connect(a: &Args) -> SysResult {
    socket::connect(a.int(0), a.u(1), a.uint(2))
}

/// `sendto(fd, buf, len, flags, addr, addrlen)`.
pub fn sendto(a: &Args) -> SysResult {
    socket::sendto(a.int(0), a.u(1), a.usize(2), a.int(3), a.u(4), a.uint(5))
}

/// `recvfrom(fd, buf, len, flags, addr, addrlen)`.
pub fn recvfrom(a: &Args) -> SysResult {
    socket::recvfrom(a.int(0), a.u(1), a.usize(2), a.int(3), a.u(4), a.u(5))
}

/// `sendmsg(fd, msg, flags)`.
pub fn sendmsg(a: &Args) -> SysResult {
    socket::sendmsg(a.int(0), a.u(1), a.int(2))
}

/// `recvmsg(fd, msg, flags)`.
pub fn recvmsg(a: &Args) -> SysResult {
    socket::recvmsg(a.int(0), a.u(1), a.int(2))
}

/// `sendmmsg(fd, vec, vlen, flags)`.
pub fn sendmmsg(a: &Args) -> SysResult {
    socket::sendmmsg(a.int(0), a.u(1), a.uint(2), a.int(3))
}

/// `recvmmsg(fd, vec, vlen, flags, timeout)`.
pub fn recvmmsg(a: &Args) -> SysResult {
    socket::recvmmsg(a.int(0), a.u(1), a.uint(2), a.int(3), a.u(4))
}

/// `shutdown(fd, how)`.
pub fn shutdown(a: &Args) -> SysResult {
    socket::shutdown(a.int(0), a.int(1))
}

/// `getsockname(fd, addr, addrlen)`.
pub fn getsockname(a: &Args) -> SysResult {
    socket::name(a.int(0), a.u(1), a.u(2), false)
}

/// `getpeername(fd, addr, addrlen)`.
pub fn getpeername(a: &Args) -> SysResult {
    socket::name(a.int(0), a.u(1), a.u(2), true)
}

/// `setsockopt(fd, level, name, val, len)`.
pub fn setsockopt(a: &Args) -> SysResult {
    socket::setsockopt(a.int(0), a.int(1), a.int(2), a.u(3), a.int(4))
}

/// `getsockopt(fd, level, name, val, lenp)`.
pub fn getsockopt(a: &Args) -> SysResult {
    socket::getsockopt(a.int(0), a.int(1), a.int(2), a.u(3), a.u(4))
}

/// `epoll_create(size)`: `size` must be positive and is otherwise ignored.
pub fn epoll_create(a: &Args) -> SysResult {
    if a.int(0) <= 0 {
        return Err(Errno::EINVAL);
    }
    epoll::create1(0)
}

/// `epoll_create1(flags)`.
pub fn epoll_create1(a: &Args) -> SysResult {
    epoll::create1(a.int(0))
}

/// `epoll_ctl(epfd, op, fd, event)`.
pub fn epoll_ctl(a: &Args) -> SysResult {
    epoll::ctl(a.int(0), a.int(1), a.int(2), a.u(3))
}

/// A timeout in milliseconds (negative: forever) in ns.
fn ms(t: i32) -> Option<u64> {
    (t >= 0).then(|| t as u64 * 1_000_000)
}

/// `epoll_wait(epfd, events, maxevents, timeout_ms)`.
pub fn epoll_wait(a: &Args) -> SysResult {
    epoll::wait(a.int(0), a.u(1), a.int(2), ms(a.int(3)))
}

/// `epoll_pwait(epfd, events, maxevents, timeout_ms, sigmask, size)`.
pub fn epoll_pwait(a: &Args) -> SysResult {
    epoll::wait(a.int(0), a.u(1), a.int(2), ms(a.int(3)))
}

/// `epoll_pwait2(epfd, events, maxevents, timeout, sigmask, size)`.
pub fn epoll_pwait2(a: &Args) -> SysResult {
    let t = if a.u(3) == 0 {
        None
    } else {
        let [s, ns]: [i64; 2] = shoal_plat::umem::read(a.u(3))?;
        if s < 0 || !(0..1_000_000_000).contains(&ns) {
            return Err(Errno::EINVAL);
        }
        Some((s as u64).saturating_mul(1_000_000_000).saturating_add(ns as u64))
    };
    epoll::wait(a.int(0), a.u(1), a.int(2), t)
}

/// `eventfd(initval)`.
pub fn eventfd(a: &Args) -> SysResult {
    eventfd::eventfd2(a.uint(0), 0)
}

/// `eventfd2(initval, flags)`.
pub fn eventfd2(a: &Args) -> SysResult {
    eventfd::eventfd2(a.uint(0), a.int(1))
}

/// `signalfd(fd, mask, sizemask)`.
pub fn signalfd(a: &Args) -> SysResult {
    crate::signalfd::signalfd4(a.int(0), a.u(1), a.u(2), 0)
}

/// `signalfd4(fd, mask, sizemask, flags)`.
pub fn signalfd4(a: &Args) -> SysResult {
    crate::signalfd::signalfd4(a.int(0), a.u(1), a.u(2), a.int(3))
}

/// `timerfd_create(clockid, flags)`.
pub fn timerfd_create(a: &Args) -> SysResult {
    timerfd::create(a.int(0), a.int(1))
}

/// `timerfd_settime(fd, flags, new, old)`.
pub fn timerfd_settime(a: &Args) -> SysResult {
    timerfd::settime(a.int(0), a.int(1), a.u(2), a.u(3))
}

/// `timerfd_gettime(fd, cur)`.
pub fn timerfd_gettime(a: &Args) -> SysResult {
    timerfd::gettime(a.int(0), a.u(1))
}
