//! The log and the rebuild, on the host: random sequences of socket,
//! epoll, eventfd and timerfd calls through the entry points, with net
//! rebooted at a random point (its state forgotten, as restoring the
//! snapshot abandons it, then rebuilt from the log), must show exactly
//! what the same sequence shows without the reboot.

use crate::abi::*;
use crate::sys;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use shoal_plat::{Args, Errno};
use shoal_vfs::obj::{EPOLLIN, EPOLLOUT};

fn args(v: &[u64]) -> Args {
    let mut a = [0u64; 6];
    a[..v.len()].copy_from_slice(v);
    Args(a)
}

/// A small seeded generator (xorshift64*), so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Stream,
    Dgram,
    Event,
    Epoll,
    Timer,
}

fn show<T: core::fmt::Debug>(r: Result<T, Errno>) -> String {
    match r {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("errno {}", e.0),
    }
}

fn epoll_events(out: &[u8], n: usize) -> Vec<(u32, u64)> {
    (0..n)
        .map(|k| {
            let e = &out[k * 12..(k + 1) * 12];
            (u32::from_ne_bytes(e[..4].try_into().unwrap()), u64::from_ne_bytes(e[4..].try_into().unwrap()))
        })
        .collect()
}

/// Two non-blocking Internet sockets of type `ty` connected to each other
/// over 127.0.0.1 (the instance's loopback): accepted from a listener for
/// TCP, bound and connected to each other for UDP.
fn loopback_pair(ty: i32) -> (i32, i32) {
    let sock = || sys::socket(&args(&[AF_INET as u64, (ty | SOCK_NONBLOCK) as u64, 0])).unwrap() as i32;
    let mut lo = [0u8; 16];
    lo[..2].copy_from_slice(&(AF_INET as u16).to_ne_bytes());
    lo[4..8].copy_from_slice(&[127, 0, 0, 1]);
    let name = |fd: i32| {
        let mut a = [0u8; 16];
        let mut len = 16u32;
        sys::getsockname(&args(&[fd as u64, a.as_mut_ptr() as u64, &mut len as *mut u32 as u64])).unwrap();
        a
    };
    let a = sock();
    sys::bind(&args(&[a as u64, lo.as_ptr() as u64, 16])).unwrap();
    let b = sock();
    if ty == SOCK_DGRAM {
        sys::bind(&args(&[b as u64, lo.as_ptr() as u64, 16])).unwrap();
        let (na, nb) = (name(a), name(b));
        sys::connect(&args(&[a as u64, nb.as_ptr() as u64, 16])).unwrap();
        sys::connect(&args(&[b as u64, na.as_ptr() as u64, 16])).unwrap();
        return (a, b);
    }
    sys::listen(&args(&[a as u64, 4])).unwrap();
    let na = name(a);
    assert_eq!(sys::connect(&args(&[b as u64, na.as_ptr() as u64, 16])), Err(EINPROGRESS));
    let s = sys::accept4(&args(&[a as u64, 0, 0, SOCK_NONBLOCK as u64])).unwrap() as i32;
    shoal_vfs::with(|v| v.close_fd(a)).unwrap();
    (s, b)
}

/// Runs `steps` random calls from `seed`, rebooting net before step
/// `reboot_at` (if any); returns what every call and a final look at
/// every descriptor showed.
fn run(seed: u64, steps: usize, reboot_at: Option<usize>) -> Vec<String> {
    let mut rng = Rng(seed | 1);
    let mut fds: Vec<(i32, Kind)> = Vec::new();
    let mut seen = Vec::new();
    let pick = |rng: &mut Rng, fds: &[(i32, Kind)], want: &dyn Fn(Kind) -> bool| {
        let c: Vec<(i32, Kind)> = fds.iter().copied().filter(|(_, k)| want(*k)).collect();
        (!c.is_empty()).then(|| c[rng.below(c.len())])
    };
    for step in 0..steps {
        if reboot_at == Some(step) {
            let (_, entries, _) = super::stats().expect("the log");
            assert!(entries as usize >= fds.len().min(1), "the log holds the objects");
            super::simulate_reboot();
        }
        let what = match rng.below(12) {
            0 if rng.below(2) == 0 => {
                // A connected pair over the instance's loopback.
                let ty = if rng.below(3) == 0 { SOCK_DGRAM } else { SOCK_STREAM };
                let (a, b) = loopback_pair(ty);
                let k = if ty == SOCK_DGRAM { Kind::Dgram } else { Kind::Stream };
                fds.push((a, k));
                fds.push((b, k));
                format!("loopback pair {ty}: {a} {b}")
            }
            0 | 1 => {
                let ty = if rng.below(3) == 0 { SOCK_DGRAM } else { SOCK_STREAM };
                let mut sv = [0i32; 2];
                let r = sys::socketpair(&args(&[AF_UNIX as u64, (ty | SOCK_NONBLOCK) as u64, 0, sv.as_mut_ptr() as u64]));
                if r.is_ok() {
                    let k = if ty == SOCK_DGRAM { Kind::Dgram } else { Kind::Stream };
                    fds.push((sv[0], k));
                    fds.push((sv[1], k));
                }
                format!("socketpair {ty}: {} {sv:?}", show(r))
            }
            2 => {
                let init = rng.below(3) as u64;
                let fl = EFD_NONBLOCK | if rng.below(2) == 0 { EFD_SEMAPHORE } else { 0 };
                let r = sys::eventfd2(&args(&[init, fl as u64]));
                if let Ok(fd) = r {
                    fds.push((fd as i32, Kind::Event));
                }
                format!("eventfd {init} {fl}: {}", show(r))
            }
            3 => {
                let r = sys::epoll_create1(&args(&[0]));
                if let Ok(fd) = r {
                    fds.push((fd as i32, Kind::Epoll));
                }
                format!("epoll_create1: {}", show(r))
            }
            4 => {
                let r = sys::timerfd_create(&args(&[CLOCK_MONOTONIC as u64, TFD_NONBLOCK as u64]));
                if let Ok(fd) = r {
                    // A long interval, far in the future: nothing expires
                    // during the test, whatever the machine's speed.
                    let spec: [i64; 4] = [rng.below(5) as i64 + 100, 0, 1000, 0];
                    let s = sys::timerfd_settime(&args(&[fd, 0, spec.as_ptr() as u64, 0]));
                    fds.push((fd as i32, Kind::Timer));
                    format!("timerfd: {} settime {}", show(r), show(s))
                } else {
                    format!("timerfd: {}", show(r))
                }
            }
            5 | 6 => match pick(&mut rng, &fds, &|k| matches!(k, Kind::Stream | Kind::Dgram | Kind::Event)) {
                Some((fd, Kind::Event)) => {
                    let v = rng.below(4) as u64;
                    let r = sys::write(&args(&[fd as u64, v.to_ne_bytes().as_ptr() as u64, 8]));
                    format!("write eventfd {fd} {v}: {}", show(r))
                }
                Some((fd, _)) => {
                    let n = 1 + rng.below(40);
                    let data: Vec<u8> = (0..n).map(|i| (step + i) as u8).collect();
                    let r = sys::write(&args(&[fd as u64, data.as_ptr() as u64, n as u64]));
                    format!("write {fd} {n}: {}", show(r))
                }
                None => String::from("no write"),
            },
            7 => match pick(&mut rng, &fds, &|k| k != Kind::Epoll) {
                Some((fd, _)) => {
                    let mut b = [0u8; 24];
                    let r = sys::read(&args(&[fd as u64, b.as_mut_ptr() as u64, 24]));
                    let got = r.map(|n| if fd >= 0 { b[..(n as usize).min(24)].to_vec() } else { Vec::new() });
                    format!("read {fd}: {}", show(got))
                }
                None => String::from("no read"),
            },
            8 => match (pick(&mut rng, &fds, &|k| k == Kind::Epoll), pick(&mut rng, &fds, &|_| true)) {
                (Some((ep, _)), Some((fd, _))) => {
                    let events = [EPOLLIN, EPOLLIN | EPOLLET, EPOLLIN | EPOLLONESHOT, EPOLLIN | EPOLLOUT][rng.below(4)];
                    let op = if rng.below(4) == 0 { EPOLL_CTL_DEL } else { EPOLL_CTL_ADD };
                    let mut ev = [0u8; 12];
                    ev[..4].copy_from_slice(&events.to_ne_bytes());
                    ev[4..].copy_from_slice(&(step as u64).to_ne_bytes());
                    let r = sys::epoll_ctl(&args(&[ep as u64, op as u64, fd as u64, ev.as_ptr() as u64]));
                    format!("epoll_ctl {ep} {op} {fd} {events:#x}: {}", show(r))
                }
                _ => String::from("no epoll_ctl"),
            },
            9 | 10 => match pick(&mut rng, &fds, &|k| k == Kind::Epoll) {
                Some((ep, _)) => {
                    let mut out = [0u8; 12 * 4];
                    let r = sys::epoll_wait(&args(&[ep as u64, out.as_mut_ptr() as u64, 4, 0]));
                    format!("epoll_wait {ep}: {}", show(r.map(|n| epoll_events(&out, n as usize))))
                }
                None => String::from("no epoll_wait"),
            },
            _ => {
                if rng.below(3) == 0 {
                    match pick(&mut rng, &fds, &|k| k == Kind::Stream) {
                        Some((fd, _)) => format!("shutdown {fd}: {}", show(sys::shutdown(&args(&[fd as u64, SHUT_WR as u64])))),
                        None => String::from("no shutdown"),
                    }
                } else {
                    match pick(&mut rng, &fds, &|_| true) {
                        Some((fd, _)) => {
                            fds.retain(|(f, _)| *f != fd);
                            format!("close {fd}: {}", show(shoal_vfs::with(|v| v.close_fd(fd))))
                        }
                        None => String::from("no close"),
                    }
                }
            }
        };
        seen.push(what);
        // What the gate does after every system call.
        super::commit();
    }
    // A last look at everything: what each descriptor holds or reports.
    for &(fd, k) in &fds {
        let look = match k {
            Kind::Epoll => {
                let mut out = [0u8; 12 * 16];
                let r = sys::epoll_wait(&args(&[fd as u64, out.as_mut_ptr() as u64, 16, 0]));
                show(r.map(|n| epoll_events(&out, n as usize)))
            }
            Kind::Timer => {
                let mut cur = [0i64; 4];
                let r = sys::timerfd_gettime(&args(&[fd as u64, cur.as_mut_ptr() as u64]));
                format!("{} interval {} armed {}", show(r), cur[0], cur[2] > 0 || cur[3] > 0)
            }
            _ => {
                let mut b = [0u8; 4096];
                let r = sys::read(&args(&[fd as u64, b.as_mut_ptr() as u64, 4096]));
                show(r.map(|n| b[..(n as usize).min(4096)].to_vec()))
            }
        };
        seen.push(format!("final {fd} {k:?}: {look}"));
    }
    for &(fd, _) in &fds {
        let _ = shoal_vfs::with(|v| v.close_fd(fd));
    }
    super::commit();
    seen
}

#[test]
fn a_reboot_at_any_point_leaves_what_the_program_sees_unchanged() {
    let _one_at_a_time = crate::tests::setup();
    super::start_log();
    for seed in 1..=40u64 {
        let steps = 80;
        let want = run(seed, steps, None);
        let at = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1).below(steps);
        let got = run(seed, steps, Some(at));
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            assert_eq!(w, g, "seed {seed}, reboot before step {at}: first difference at line {i}");
        }
        assert_eq!(want.len(), got.len(), "seed {seed}");
    }
    // The log holds the live state only: everything was closed.
    let (_, entries, calls) = super::stats().expect("the log");
    assert_eq!(entries, 0, "closed objects leave the log");
    assert!(calls > 0);
}
