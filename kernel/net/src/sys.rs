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
