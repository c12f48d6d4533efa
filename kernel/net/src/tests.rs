//! Unit tests on the host: the AF_UNIX backend, eventfd and timerfd
//! directly, and epoll and the socket calls through their entry points
//! (user memory is host memory: `umem` bounds are opened up).

use super::*;
use crate::abi::*;
use crate::backend::Backend;
use shoal_plat::Args;
use shoal_vfs::obj::*;

fn args(v: &[u64]) -> Args {
    let mut a = [0u64; 6];
    a[..v.len()].copy_from_slice(v);
    Args(a)
}

/// The tests through the entry points share the kernel's global state
/// (descriptor table, objects, readiness log): one at a time.
static ENTRY_POINTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(crate) fn setup() -> std::sync::MutexGuard<'static, ()> {
    let guard = ENTRY_POINTS.lock().unwrap_or_else(|e| e.into_inner());
    shoal_plat::umem::set_bounds(1, u64::MAX);
    init();
    guard
}

#[test]
fn unix_stream_pair_moves_bytes_and_hangs_up() {
    let mut u = unix::Unix::default();
    let (a, b) = u.socketpair(SOCK_STREAM, 0).unwrap();
    assert_eq!(u.ready(b).mask & EPOLLIN, 0);
    let g0 = u.ready(b).gen;
    assert_eq!(u.send(a, &[b"hel", b"lo"], None, 0), Ok(5));
    let r = u.ready(b);
    assert_ne!(r.mask & EPOLLIN, 0);
    assert_ne!(r.gen, g0, "new data moves the generation");
    let mut x = [0u8; 3];
    let mut y = [0u8; 8];
    let got = u.recv(b, &mut [&mut x, &mut y], 0).unwrap();
    assert_eq!(got.len, 5);
    assert_eq!((&x, &y[..2]), (b"hel", &b"lo"[..]));
    assert_eq!(u.recv(b, &mut [&mut y], 0).unwrap_err(), Errno::EAGAIN);
    // The sender's SO_SNDBUF bounds what is in flight.
    let big = alloc::vec![7u8; 300_000];
    let n = u.send(a, &[&big], None, 0).unwrap();
    assert_eq!(n, BUF_MAX as usize);
    assert_eq!(u.send(a, &[&big], None, 0), Err(Errno::EAGAIN));
    assert_eq!(u.ready(a).mask & EPOLLOUT, 0);
    u.shutdown(a, SHUT_WR).unwrap();
    assert_ne!(u.ready(b).mask & EPOLLRDHUP, 0);
    let mut sink = alloc::vec![0u8; 300_000];
    assert_eq!(u.recv(b, &mut [&mut sink], 0).unwrap().len, BUF_MAX as usize);
    assert_eq!(u.recv(b, &mut [&mut sink], 0).unwrap().len, 0, "end of file after SHUT_WR");
    assert_eq!(u.send(a, &[b"x"], None, 0), Err(Errno::EPIPE));
    u.close(a);
    assert_ne!(u.ready(b).mask & EPOLLHUP, 0);
    assert_eq!(u.send(b, &[b"x"], None, 0), Err(Errno::EPIPE));
}

#[test]
fn unix_listen_connect_accept_and_names() {
    let mut u = unix::Unix::default();
    let addr = |s: &[u8]| {
        let mut v = (AF_UNIX as u16).to_ne_bytes().to_vec();
        v.extend_from_slice(s);
        v
    };
    let l = u.socket(SOCK_STREAM, 0).unwrap();
    assert_eq!(u.listen(l, 1), Err(Errno::EINVAL), "unbound");
    u.bind(l, &addr(b"/tmp/s\0")).unwrap();
    u.listen(l, 1).unwrap();
    let other = u.socket(SOCK_STREAM, 0).unwrap();
    assert_eq!(u.bind(other, &addr(b"/tmp/s\0")), Err(EADDRINUSE));
    assert_eq!(u.accept(l).unwrap_err(), Errno::EAGAIN);
    let c1 = u.socket(SOCK_STREAM, 0).unwrap();
    let c2 = u.socket(SOCK_STREAM, 0).unwrap();
    let c3 = u.socket(SOCK_STREAM, 0).unwrap();
    u.connect(c1, &addr(b"/tmp/s")).unwrap();
    u.connect(c2, &addr(b"/tmp/s")).unwrap();
    assert_eq!(u.connect(c3, &addr(b"/tmp/s")), Err(Errno::EAGAIN), "backlog + 1 queued");
    assert_ne!(u.ready(l).mask & EPOLLIN, 0);
    u.send(c1, &[b"hi"], None, 0).unwrap();
    let (s1, peer) = u.accept(l).unwrap();
    assert_eq!(peer, addr(b""), "an unnamed client");
    let mut b = [0u8; 4];
    assert_eq!(u.recv(s1, &mut [&mut b], 0).unwrap().len, 2, "data sent before accept");
    assert_eq!(u.name(s1, false).unwrap(), addr(b"/tmp/s\0"));
    assert_eq!(u.connect(c1, &addr(b"/tmp/s")), Err(EISCONN));
    assert_eq!(u.connect(c3, &addr(b"/tmp/none")), Err(Errno::ENOENT));
    assert_eq!(u.connect(c3, &addr(b"\0none")), Err(ECONNREFUSED));
    // Closing the listener closes what nobody accepted.
    u.close(l);
    assert_ne!(u.ready(c2).mask & EPOLLHUP, 0);
    // The name is free again.
    u.bind(other, &addr(b"/tmp/s\0")).unwrap();
}

#[test]
fn unix_datagrams_keep_boundaries_and_report_the_sender() {
    let mut u = unix::Unix::default();
    let addr = |s: &[u8]| {
        let mut v = (AF_UNIX as u16).to_ne_bytes().to_vec();
        v.extend_from_slice(s);
        v
    };
    let a = u.socket(SOCK_DGRAM, 0).unwrap();
    let b = u.socket(SOCK_DGRAM, 0).unwrap();
    u.bind(a, &addr(b"\0a")).unwrap();
    u.bind(b, &addr(b"\0b")).unwrap();
    assert_eq!(u.send(a, &[b"12345"], Some(&addr(b"\0b")), 0), Ok(5));
    assert_eq!(u.send(a, &[b"6"], None, 0), Err(ENOTCONN));
    let mut small = [0u8; 2];
    let r = u.recv(b, &mut [&mut small], MSG_TRUNC).unwrap();
    assert_eq!((r.len, r.flags), (5, MSG_TRUNC));
    assert_eq!(r.from.unwrap(), addr(b"\0a"));
    assert_eq!(u.recv(b, &mut [&mut small], 0).unwrap_err(), Errno::EAGAIN);
}

#[test]
fn socket_options_read_back_as_set() {
    let mut u = unix::Unix::default();
    let s = u.socket(SOCK_STREAM, 0).unwrap();
    let int = |v: &[u8]| i32::from_ne_bytes(v[..4].try_into().unwrap());
    u.setsockopt(s, SOL_SOCKET, SO_RCVBUF, &1000i32.to_ne_bytes()).unwrap();
    assert_eq!(int(&u.getsockopt(s, SOL_SOCKET, SO_RCVBUF).unwrap()), 2304, "doubled, at least the minimum");
    u.setsockopt(s, SOL_SOCKET, SO_SNDBUF, &65536i32.to_ne_bytes()).unwrap();
    assert_eq!(int(&u.getsockopt(s, SOL_SOCKET, SO_SNDBUF).unwrap()), 131072);
    u.setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &1i32.to_ne_bytes()).unwrap();
    assert_eq!(int(&u.getsockopt(s, SOL_SOCKET, SO_KEEPALIVE).unwrap()), 1);
    assert_eq!(int(&u.getsockopt(s, SOL_SOCKET, SO_REUSEADDR).unwrap()), 0);
    assert_eq!(int(&u.getsockopt(s, SOL_SOCKET, SO_TYPE).unwrap()), SOCK_STREAM);
    assert_eq!(u.setsockopt(s, SOL_SOCKET, SO_TYPE, &1i32.to_ne_bytes()), Err(ENOPROTOOPT));
    assert_eq!(u.setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &[1]), Err(Errno::EINVAL), "short value");
    assert_eq!(u.getsockopt(s, 6, 1), Err(Errno::EOPNOTSUPP), "TCP level on AF_UNIX");
}

#[test]
fn eventfd_counter_rules() {
    let mut e = eventfd::EventFd::new(0, false);
    let mut b = [0u8; 8];
    assert_eq!(e.read(&mut b), Err(Errno::EAGAIN));
    assert_eq!(e.write(&(u64::MAX - 1).to_ne_bytes()), Ok(8));
    assert_eq!(e.ready().mask & EPOLLOUT, 0, "full");
    assert_eq!(e.write(&1u64.to_ne_bytes()), Err(Errno::EAGAIN));
    assert_eq!(e.write(&u64::MAX.to_ne_bytes()), Err(Errno::EINVAL));
    assert_eq!(e.read(&mut b[..4]), Err(Errno::EINVAL));
    assert_eq!(e.read(&mut b), Ok(8));
    assert_eq!(u64::from_ne_bytes(b), u64::MAX - 1);
    let mut s = eventfd::EventFd::new(2, true);
    for _ in 0..2 {
        assert_eq!(s.read(&mut b), Ok(8));
        assert_eq!(u64::from_ne_bytes(b), 1);
    }
    assert_eq!(s.read(&mut b), Err(Errno::EAGAIN));
}

#[test]
fn timerfd_counts_expirations_lazily() {
    let mut t = timerfd::TimerFd::new(CLOCK_MONOTONIC);
    let mut b = [0u8; 8];
    assert_eq!(t.read(&mut b, 0), Err(Errno::EAGAIN), "unarmed");
    t.test_arm(1000, 100, 10);
    assert_eq!(t.deadline(), Some(1100));
    assert_eq!(t.ready(1099).mask, 0);
    let r = t.ready(1350);
    assert_ne!(r.mask & EPOLLIN, 0);
    assert_eq!(r.gen, 26, "expirations ever: 1100, 1110, …, 1350");
    assert_eq!(t.read(&mut b, 1350), Ok(8));
    assert_eq!(u64::from_ne_bytes(b), 26, "1100..=1350 every 10");
    assert_eq!(t.deadline(), Some(1360));
    assert_eq!(t.read(&mut b, 1355), Err(Errno::EAGAIN));
}

#[test]
fn epoll_edge_triggered_through_the_entry_points() {
    let _one_at_a_time = setup();
    let mut sv = [0i32; 2];
    sys::socketpair(&args(&[AF_UNIX as u64, SOCK_STREAM as u64, 0, sv.as_mut_ptr() as u64])).unwrap();
    let ep = sys::epoll_create1(&args(&[0])).unwrap();
    let mut ev = [0u8; 12];
    ev[..4].copy_from_slice(&(EPOLLIN | EPOLLET).to_ne_bytes());
    ev[4..].copy_from_slice(&7u64.to_ne_bytes());
    sys::epoll_ctl(&args(&[ep, EPOLL_CTL_ADD as u64, sv[1] as u64, ev.as_ptr() as u64])).unwrap();
    let mut out = [0u8; 12 * 4];
    let wait = |out: &mut [u8]| sys::epoll_wait(&args(&[ep, out.as_mut_ptr() as u64, 4, 0])).unwrap();
    assert_eq!(wait(&mut out), 0);
    let data = *b"0123456789";
    sys::write(&args(&[sv[0] as u64, data.as_ptr() as u64, 10])).unwrap();
    assert_eq!(wait(&mut out), 1);
    assert_eq!(u64::from_ne_bytes(out[4..12].try_into().unwrap()), 7);
    let mut b = [0u8; 4];
    sys::read(&args(&[sv[1] as u64, b.as_mut_ptr() as u64, 4])).unwrap();
    assert_eq!(wait(&mut out), 0, "ET: no new data, no report");
    sys::write(&args(&[sv[0] as u64, data.as_ptr() as u64, 1])).unwrap();
    assert_eq!(wait(&mut out), 1, "ET: new data");
    // Closing the watched descriptor removes it from the set.
    shoal_vfs::with(|v| v.close_fd(sv[1])).unwrap();
    shoal_vfs::with(|v| v.close_fd(sv[0])).unwrap();
    assert_eq!(wait(&mut out), 0);
    assert_eq!(sys::epoll_ctl(&args(&[ep, EPOLL_CTL_DEL as u64, sv[1] as u64, 0])), Err(Errno::EBADF));
    // Internet sockets exist without a network (the instance's loopback);
    // unknown families do not.
    let s = sys::socket(&args(&[AF_INET as u64, SOCK_STREAM as u64, 0])).unwrap();
    shoal_vfs::with(|v| v.close_fd(s as i32)).unwrap();
    assert_eq!(sys::socket(&args(&[12345, SOCK_STREAM as u64, 0])), Err(Errno::EAFNOSUPPORT));
    shoal_vfs::with(|v| v.close_fd(ep as i32)).unwrap();
}

/// One `epoll_event` as written by `epoll_wait`: (events, data).
fn event(out: &[u8], k: usize) -> (u32, u64) {
    let e = &out[k * 12..(k + 1) * 12];
    (u32::from_ne_bytes(e[..4].try_into().unwrap()), u64::from_ne_bytes(e[4..].try_into().unwrap()))
}

#[test]
fn epoll_ready_list_looks_only_at_what_changed() {
    let _one_at_a_time = setup();
    let ep = sys::epoll_create1(&args(&[0])).unwrap();
    let add = |fd: i32, events: u32, data: u64| {
        let mut ev = [0u8; 12];
        ev[..4].copy_from_slice(&events.to_ne_bytes());
        ev[4..].copy_from_slice(&data.to_ne_bytes());
        sys::epoll_ctl(&args(&[ep, EPOLL_CTL_ADD as u64, fd as u64, ev.as_ptr() as u64])).unwrap();
    };
    let modify = |fd: i32, events: u32, data: u64| {
        let mut ev = [0u8; 12];
        ev[..4].copy_from_slice(&events.to_ne_bytes());
        ev[4..].copy_from_slice(&data.to_ne_bytes());
        sys::epoll_ctl(&args(&[ep, EPOLL_CTL_MOD as u64, fd as u64, ev.as_ptr() as u64])).unwrap();
    };
    let mut out = [0u8; 12 * 8];
    let mut wait = |max: u64| {
        let n = sys::epoll_wait(&args(&[ep, out.as_mut_ptr() as u64, max, 0])).unwrap() as usize;
        (0..n).map(|k| event(&out, k)).collect::<Vec<_>>()
    };
    // 200 idle AF_UNIX pairs: after one wait, none of them is on the list.
    let mut idle = Vec::new();
    for i in 0..200u64 {
        let mut sv = [0i32; 2];
        sys::socketpair(&args(&[AF_UNIX as u64, SOCK_STREAM as u64, 0, sv.as_mut_ptr() as u64])).unwrap();
        add(sv[1], EPOLLIN, 1000 + i);
        idle.push(sv);
    }
    assert_eq!(epoll::queued(ep as i32), 200, "added entries are looked at once");
    assert_eq!(wait(8), vec![]);
    assert_eq!(epoll::queued(ep as i32), 0, "idle entries leave the ready list");
    // Level-triggered: reported while readable, and stays on the list.
    let data = *b"0123456789";
    sys::write(&args(&[idle[7][0] as u64, data.as_ptr() as u64, 10])).unwrap();
    assert_eq!(epoll::queued(ep as i32), 0, "queued by the next wait, from the log");
    assert_eq!(wait(8), vec![(EPOLLIN, 1007)]);
    assert_eq!(epoll::queued(ep as i32), 1);
    assert_eq!(wait(8), vec![(EPOLLIN, 1007)], "LT: still readable");
    let mut b = [0u8; 16];
    sys::read(&args(&[idle[7][1] as u64, b.as_mut_ptr() as u64, 16])).unwrap();
    assert_eq!(wait(8), vec![], "drained");
    assert_eq!(epoll::queued(ep as i32), 0);
    // A pipe and an eventfd.
    let mut p = [0i32; 2];
    shoal_vfs::sys::pipe(&args(&[p.as_mut_ptr() as u64])).unwrap();
    add(p[0], EPOLLIN | EPOLLET, 1);
    let efd = sys::eventfd2(&args(&[0, 0])).unwrap() as i32;
    add(efd, EPOLLIN | EPOLLONESHOT, 2);
    assert_eq!(wait(8), vec![]);
    sys::write(&args(&[p[1] as u64, data.as_ptr() as u64, 3])).unwrap();
    let one = 1u64.to_ne_bytes();
    sys::write(&args(&[efd as u64, one.as_ptr() as u64, 8])).unwrap();
    assert_eq!(wait(8), vec![(EPOLLIN, 1), (EPOLLIN, 2)], "in the order they became ready");
    assert_eq!(wait(8), vec![], "ET: nothing new; ONESHOT: disarmed");
    assert_eq!(epoll::queued(ep as i32), 0);
    sys::write(&args(&[p[1] as u64, data.as_ptr() as u64, 1])).unwrap();
    sys::write(&args(&[efd as u64, one.as_ptr() as u64, 8])).unwrap();
    assert_eq!(wait(8), vec![(EPOLLIN, 1)], "ET: new data; ONESHOT: still disarmed");
    modify(efd, EPOLLIN | EPOLLONESHOT, 3);
    assert_eq!(wait(8), vec![(EPOLLIN, 3)], "re-armed by EPOLL_CTL_MOD");
    // maxevents smaller than what is ready: the rest comes next, and a
    // level-triggered entry reported goes to the back (no starvation).
    for &i in &[3usize, 4, 5] {
        sys::write(&args(&[idle[i][0] as u64, data.as_ptr() as u64, 1])).unwrap();
    }
    assert_eq!(wait(2), vec![(EPOLLIN, 1003), (EPOLLIN, 1004)]);
    assert_eq!(wait(2), vec![(EPOLLIN, 1005), (EPOLLIN, 1003)]);
    assert_eq!(wait(8), vec![(EPOLLIN, 1004), (EPOLLIN, 1005), (EPOLLIN, 1003)]);
    // A hang-up is a change too; closing the watched end removes it.
    shoal_vfs::with(|v| v.close_fd(idle[9][0])).unwrap();
    let got = wait(8);
    assert!(got.contains(&(EPOLLIN | EPOLLHUP, 1009)), "{got:?}");
    shoal_vfs::with(|v| v.close_fd(idle[9][1])).unwrap();
    assert!(!wait(8).iter().any(|e| e.1 == 1009));
    for sv in idle.iter().filter(|sv| sv[0] != idle[9][0]) {
        shoal_vfs::with(|v| v.close_fd(sv[0])).unwrap();
        shoal_vfs::with(|v| v.close_fd(sv[1])).unwrap();
    }
    for fd in [p[0], p[1], efd, ep as i32] {
        shoal_vfs::with(|v| v.close_fd(fd)).unwrap();
    }
}

fn sin(port: u16, ip: [u8; 4]) -> alloc::vec::Vec<u8> {
    let mut a = alloc::vec![0u8; 16];
    a[..2].copy_from_slice(&(AF_INET as u16).to_ne_bytes());
    a[2..4].copy_from_slice(&port.to_be_bytes());
    a[4..8].copy_from_slice(&ip);
    a
}

fn sin6(port: u16, last: u8) -> alloc::vec::Vec<u8> {
    let mut a = alloc::vec![0u8; 28];
    a[..2].copy_from_slice(&(AF_INET6 as u16).to_ne_bytes());
    a[2..4].copy_from_slice(&port.to_be_bytes());
    a[23] = last;
    a
}

#[test]
fn loopback_tcp_connects_accepts_and_reports_addresses() {
    let mut lo = lo::Lo::default();
    let l = lo.socket_in(AF_INET, SOCK_STREAM, 0).unwrap();
    lo.bind(l, &sin(8080, [0; 4])).unwrap();
    lo.listen(l, 4).unwrap();
    assert_eq!(lo.name(l, false).unwrap(), sin(8080, [0; 4]));
    let c = lo.socket_in(AF_INET, SOCK_STREAM, 0).unwrap();
    // Nothing on 8081: refused, reported through SO_ERROR as Linux does.
    assert_eq!(lo.connect(c, &sin(8081, [127, 0, 0, 1])), Err(EINPROGRESS));
    assert_eq!(lo.getsockopt(c, SOL_SOCKET, SO_ERROR).unwrap(), ECONNREFUSED.0.to_ne_bytes());
    assert_eq!(lo.connect(c, &sin(8080, [127, 0, 0, 1])), Err(EINPROGRESS));
    assert_eq!(lo.connect(c, &sin(8080, [127, 0, 0, 1])), Err(EISCONN));
    assert_eq!(lo.getsockopt(c, SOL_SOCKET, SO_ERROR).unwrap(), 0i32.to_ne_bytes());
    assert_ne!(lo.ready(l).mask & EPOLLIN, 0);
    let (s, peer) = lo.accept(l).unwrap();
    assert_eq!(peer, lo.name(c, false).unwrap());
    assert_eq!(&peer[4..8], &[127, 0, 0, 1]);
    assert!(u16::from_be_bytes([peer[2], peer[3]]) >= 32768);
    assert_eq!(lo.name(s, false).unwrap(), sin(8080, [127, 0, 0, 1]));
    assert_eq!(lo.name(c, true).unwrap(), sin(8080, [127, 0, 0, 1]));
    assert_eq!(lo.send(c, &[b"ping"], None, 0), Ok(4));
    let mut b = [0u8; 8];
    assert_eq!(lo.recv(s, &mut [&mut b], MSG_PEEK).unwrap().len, 4);
    assert_eq!(lo.recv(s, &mut [&mut b], 0).unwrap().len, 4);
    assert_eq!(&b[..4], b"ping");
    assert_eq!(lo.recv(s, &mut [&mut b], 0).unwrap_err(), Errno::EAGAIN);
    // The port is taken, by IPv4 and by a dual-stack IPv6 bind alike.
    let d = lo.socket_in(AF_INET, SOCK_STREAM, 0).unwrap();
    assert_eq!(lo.bind(d, &sin(8080, [127, 0, 0, 1])), Err(EADDRINUSE));
    let d6 = lo.socket_in(AF_INET6, SOCK_STREAM, 0).unwrap();
    assert_eq!(lo.bind(d6, &sin6(8080, 0)), Err(EADDRINUSE));
    // Addresses outside the instance are not here.
    assert_eq!(lo.bind(d, &sin(80, [10, 0, 0, 1])), Err(EADDRNOTAVAIL));
    assert_eq!(lo.connect(d, &sin(80, [10, 0, 0, 1])), Err(ENETUNREACH));
    lo.close(c);
    assert_eq!(lo.recv(s, &mut [&mut b], 0).unwrap().len, 0, "end of file");
}

#[test]
fn loopback_udp_keeps_datagrams_drops_to_nobody_and_serves_dual_stack() {
    let mut lo = lo::Lo::default();
    let a = lo.socket_in(AF_INET6, SOCK_DGRAM, 0).unwrap();
    lo.bind(a, &sin6(0, 1)).unwrap();
    let port = {
        let n = lo.name(a, false).unwrap();
        u16::from_be_bytes([n[2], n[3]])
    };
    let b = lo.socket_in(AF_INET6, SOCK_DGRAM, 0).unwrap();
    assert_eq!(lo.send(b, &[b"x"], None, 0), Err(EDESTADDRREQ));
    for m in [&b"a"[..], b"bb", b"ccc"] {
        assert_eq!(lo.send(b, &[m], Some(&sin6(port, 1)), 0), Ok(m.len()));
    }
    let mut buf = [0u8; 2];
    let r = lo.recv(a, &mut [&mut buf], 0).unwrap();
    assert_eq!((r.len, r.flags), (1, 0));
    let from = r.from.unwrap();
    assert_eq!(&from[8..24], &sin6(0, 1)[8..24], "from ::1");
    assert_eq!(lo.recv(a, &mut [&mut buf], 0).unwrap().len, 2);
    let r = lo.recv(a, &mut [&mut buf], MSG_TRUNC).unwrap();
    assert_eq!((r.len, r.flags), (3, MSG_TRUNC));
    // To a port nobody bound: dropped; a connected socket then learns it.
    assert_eq!(lo.send(b, &[b"x"], Some(&sin6(9, 1)), 0), Ok(1));
    lo.connect(b, &sin6(9, 1)).unwrap();
    assert_eq!(lo.send(b, &[b"x"], None, 0), Ok(1));
    assert_eq!(lo.recv(b, &mut [&mut buf], 0).unwrap_err(), ECONNREFUSED);
    // A dual-stack socket on :: takes an IPv4 datagram from ::ffff:127.0.0.1.
    let d = lo.socket_in(AF_INET6, SOCK_DGRAM, 0).unwrap();
    lo.bind(d, &sin6(5353, 0)).unwrap();
    let v4 = lo.socket_in(AF_INET, SOCK_DGRAM, 0).unwrap();
    assert_eq!(lo.send(v4, &[b"hi"], Some(&sin(5353, [127, 0, 0, 1])), 0), Ok(2));
    let r = lo.recv(d, &mut [&mut buf], 0).unwrap();
    assert_eq!(&r.from.unwrap()[18..24], &[0xff, 0xff, 127, 0, 0, 1]);
}

/// `struct msghdr` for the tests: one iovec, a control buffer (written
/// through by `recvmsg`, hence a pointer from a mutable borrow).
fn msghdr(iov: &[u64; 2], control: (*mut u8, usize)) -> [u64; 7] {
    [0, 0, iov.as_ptr() as u64, 1, control.0 as u64, control.1 as u64, 0]
}

fn ctl(c: &mut [u8]) -> (*mut u8, usize) {
    (c.as_mut_ptr(), c.len())
}

/// One `SCM_RIGHTS` control message naming `fds`.
fn rights(fds: &[i32]) -> alloc::vec::Vec<u8> {
    let len = 16 + 4 * fds.len();
    let mut c = (len as u64).to_ne_bytes().to_vec();
    c.extend_from_slice(&SOL_SOCKET.to_ne_bytes());
    c.extend_from_slice(&SCM_RIGHTS.to_ne_bytes());
    for fd in fds {
        c.extend_from_slice(&fd.to_ne_bytes());
    }
    c.resize((len + 7) & !7, 0);
    c
}

#[test]
fn scm_rights_pass_descriptions_truncate_and_drop_with_the_message() {
    let _g = setup();
    let close = |fd: i32| shoal_vfs::with(|v| v.close_fd(fd)).unwrap();
    let mut sv = [0i32; 2];
    sys::socketpair(&args(&[AF_UNIX as u64, SOCK_DGRAM as u64, 0, sv.as_mut_ptr() as u64])).unwrap();
    let efd = sys::eventfd2(&args(&[5, 0])).unwrap() as i32;
    let data = *b"hi";
    let iov = [data.as_ptr() as u64, 2];
    let mut c = rights(&[efd, efd]);
    let m = msghdr(&iov, ctl(&mut c));
    assert_eq!(sys::sendmsg(&args(&[sv[0] as u64, m.as_ptr() as u64, 0])), Ok(2));
    // The sender's descriptor goes; the message keeps the eventfd.
    close(efd);
    let mut buf = [0u8; 8];
    let riov = [buf.as_mut_ptr() as u64, 8];
    let mut rc = [0u8; 64];
    let mut rm = msghdr(&riov, ctl(&mut rc));
    assert_eq!(sys::recvmsg(&args(&[sv[1] as u64, rm.as_mut_ptr() as u64, MSG_PEEK as u64])), Ok(2));
    assert_eq!((rm[5], rm[6] as i32), (24, 0), "CMSG_LEN(8), no flags");
    let peeked = [i32::from_ne_bytes(rc[16..20].try_into().unwrap()), i32::from_ne_bytes(rc[20..24].try_into().unwrap())];
    for fd in peeked {
        close(fd);
    }
    // Room for one: the second is closed, MSG_CTRUNC.
    let mut rm = msghdr(&riov, ctl(&mut rc[..20]));
    assert_eq!(sys::recvmsg(&args(&[sv[1] as u64, rm.as_mut_ptr() as u64, 0])), Ok(2));
    assert_eq!((rm[5], rm[6] as i32), (20, MSG_CTRUNC));
    assert_eq!(u64::from_ne_bytes(rc[..8].try_into().unwrap()), 20);
    let got = i32::from_ne_bytes(rc[16..20].try_into().unwrap());
    let mut v = [0u8; 8];
    assert_eq!(sys::read(&args(&[got as u64, v.as_mut_ptr() as u64, 8])), Ok(8));
    assert_eq!(u64::from_ne_bytes(v), 5, "the same eventfd");
    close(got);
    // Bad descriptors and headers.
    let mut bad = rights(&[999]);
    let m = msghdr(&iov, ctl(&mut bad));
    assert_eq!(sys::sendmsg(&args(&[sv[0] as u64, m.as_ptr() as u64, 0])), Err(Errno::EBADF));
    let mut short = rights(&[sv[0]]);
    short[..8].copy_from_slice(&8u64.to_ne_bytes());
    let m = msghdr(&iov, ctl(&mut short));
    assert_eq!(sys::sendmsg(&args(&[sv[0] as u64, m.as_ptr() as u64, 0])), Err(Errno::EINVAL));
    // A message dropped unread with its socket lets its descriptions go:
    // the eventfd's object is released.
    let objs = || with(|n| n.objs.len());
    let efd = sys::eventfd2(&args(&[0, 0])).unwrap() as i32;
    let mut c = rights(&[efd]);
    let m = msghdr(&iov, ctl(&mut c));
    assert_eq!(sys::sendmsg(&args(&[sv[0] as u64, m.as_ptr() as u64, 0])), Ok(2));
    close(efd);
    let before = objs();
    close(sv[1]);
    assert_eq!(objs(), before - 2, "the receiving socket and the eventfd in flight");
    close(sv[0]);
    // A stream: descriptions ride on their send's bytes; a read stops
    // after them.
    sys::socketpair(&args(&[AF_UNIX as u64, SOCK_STREAM as u64, 0, sv.as_mut_ptr() as u64])).unwrap();
    let w = |b: &[u8]| sys::write(&args(&[sv[0] as u64, b.as_ptr() as u64, b.len() as u64])).unwrap();
    w(b"abc");
    let iov = [b"defg".as_ptr() as u64, 4];
    let mut c = rights(&[sv[0]]);
    let m = msghdr(&iov, ctl(&mut c));
    assert_eq!(sys::sendmsg(&args(&[sv[0] as u64, m.as_ptr() as u64, 0])), Ok(4));
    w(b"hij");
    let mut buf = [0u8; 16];
    let riov = [buf.as_mut_ptr() as u64, 16];
    let mut rc = [0u8; 24];
    let mut rm = msghdr(&riov, ctl(&mut rc));
    assert_eq!(sys::recvmsg(&args(&[sv[1] as u64, rm.as_mut_ptr() as u64, 0])), Ok(7), "abc + defg");
    assert_eq!(rm[5], 24);
    close(i32::from_ne_bytes(rc[16..20].try_into().unwrap()));
    let mut rm = msghdr(&riov, ctl(&mut rc));
    assert_eq!(sys::recvmsg(&args(&[sv[1] as u64, rm.as_mut_ptr() as u64, 0])), Ok(3));
    assert_eq!(rm[5], 0);
    close(sv[0]);
    close(sv[1]);
}

/// A netlink route socket as glibc's `getifaddrs` drives it, and what it
/// answers to requests it does not serve and to malformed ones.
#[test]
fn netlink_route_dumps_and_refusals() {
    use crate::netlink::{Netlink, AF_NETLINK};
    let mut nl = Netlink::default();
    assert_eq!(nl.socket(SOCK_STREAM, 0), Err(ESOCKTNOSUPPORT));
    assert_eq!(nl.socket(3, 9), Err(EPROTONOSUPPORT));
    let h = nl.socket(3, 0).unwrap();
    let mut sa = (AF_NETLINK as u16).to_ne_bytes().to_vec();
    sa.extend_from_slice(&[0; 10]);
    assert_eq!(nl.bind(h, &sa[..8]), Err(Errno::EINVAL));
    nl.bind(h, &sa).unwrap();
    let name = nl.name(h, false).unwrap();
    assert_eq!(u32::from_ne_bytes(name[4..8].try_into().unwrap()), shoal_process::PID as u32);
    // nlmsghdr { len, type, flags = REQUEST | DUMP, seq, pid } + rtgenmsg.
    let req = |ty: u16, flags: u16, seq: u32| {
        let mut m = 20u32.to_ne_bytes().to_vec();
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&[0; 4]);
        m
    };
    let recv = |nl: &mut Netlink| {
        let mut b = [0u8; 4096];
        let r = nl.recv(h, &mut [&mut b], 0)?;
        Ok::<_, Errno>(b[..r.len].to_vec())
    };
    let hdr = |m: &[u8]| (u16::from_ne_bytes([m[4], m[5]]), u16::from_ne_bytes([m[6], m[7]]), u32::from_ne_bytes(m[8..12].try_into().unwrap()));
    assert_eq!(nl.send(h, &[&req(18, 0x301, 7)], Some(&sa), 0), Ok(20));
    assert_ne!(nl.ready(h).mask & EPOLLIN, 0);
    let links = recv(&mut nl).unwrap();
    assert_eq!(hdr(&links), (16, 2, 7), "RTM_NEWLINK, NLM_F_MULTI, the request's seq");
    assert_eq!(i32::from_ne_bytes(links[20..24].try_into().unwrap()), 1, "lo is index 1");
    assert_eq!(hdr(&recv(&mut nl).unwrap()), (3, 2, 7), "NLMSG_DONE");
    nl.send(h, &[&req(22, 0x301, 8)], None, 0).unwrap();
    let addrs = recv(&mut nl).unwrap();
    assert_eq!(hdr(&addrs), (20, 2, 8));
    assert_eq!(addrs[16], AF_INET as u8);
    assert_eq!(hdr(&recv(&mut nl).unwrap()).0, 3);
    // A type nobody serves: NLMSG_ERROR with -EOPNOTSUPP and the request.
    nl.send(h, &[&req(0x99, 1, 9)], None, 0).unwrap();
    let e = recv(&mut nl).unwrap();
    assert_eq!(hdr(&e), (2, 0, 9));
    assert_eq!(i32::from_ne_bytes(e[16..20].try_into().unwrap()), -95);
    // Malformed (a length shorter than a header, or past the data) and
    // non-requests: no answer.
    let mut bad = req(18, 0x301, 10);
    bad[0] = 3;
    nl.send(h, &[&bad], None, 0).unwrap();
    bad[0] = 200;
    nl.send(h, &[&bad], None, 0).unwrap();
    nl.send(h, &[&req(18, 0, 11)], None, 0).unwrap();
    assert_eq!(recv(&mut nl), Err(Errno::EAGAIN));
    // Another port: nobody there.
    let mut to = sa.clone();
    to[4] = 5;
    assert_eq!(nl.send(h, &[&req(18, 0x301, 12)], Some(&to), 0), Err(ECONNREFUSED));
    // Replies past SO_RCVBUF are dropped and the next receive says so.
    for i in 0..3000 {
        nl.send(h, &[&req(18, 0x301, i)], None, 0).unwrap();
    }
    let mut n = 0;
    let err = loop {
        match recv(&mut nl) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err, ENOBUFS);
    assert!(n > 0 && n < 6000, "{n}");
    nl.close(h);
    assert!(nl.is_empty());
}
