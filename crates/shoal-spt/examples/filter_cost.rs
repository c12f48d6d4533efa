//! What spt's seccomp filter adds to each host call a server instance
//! makes per request (`epoll_pwait2` on the watch set, `recvfrom`,
//! `sendto`): a native process pays none of it. For each call, a child
//! makes it `N` times (cheap failing or empty forms: a `recvfrom` that
//! finds nothing, a `sendto` without a destination, an `epoll_pwait2` with
//! a zero timeout on an empty set) without and with the filter spt
//! installs in an instance with one `--publish`ed port; the child's CPU
//! time (`wait4`'s rusage) divided by `N` is the cost per call.
//!
//! Usage: `cargo run --release -p shoal-spt --example filter_cost [N] [ROUNDS]`
//! (defaults 2,000,000 and 5; rounds alternate without/with).

use std::time::Duration;

/// Guest memory as a 512 MiB Redis instance has it (the filter's ladders
/// depend on it only through their length).
const HEAP_START: u64 = 16 << 20;
const MEM_SIZE: u64 = 512 << 20;

#[derive(Clone, Copy)]
enum Call {
    Recvfrom,
    Sendto,
    EpollPwait2,
}

/// The child: descriptors where the instance has them (socket at 3, the
/// watch set at its pinned number), the filter if `filter`, then `n` calls
/// and exit. Single-threaded program, so no locks can be held across fork.
fn child(call: Call, n: u64, filter: Option<&[u8]>, watch: i32) -> ! {
    // SAFETY: plain system calls on descriptors this child owns; the
    // filter bytes are whole sock_filter records (filter::to_bytes) that
    // outlive the prctl call.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK, 0);
        if s < 0 || (s != 3 && libc::dup2(s, 3) != 3) {
            libc::_exit(2);
        }
        let ep = libc::epoll_create1(0);
        if ep < 0 || (ep != watch && libc::dup2(ep, watch) != watch) {
            libc::_exit(3);
        }
        if let Some(f) = filter {
            let prog = libc::sock_fprog { len: (f.len() / 8) as u16, filter: f.as_ptr() as *mut libc::sock_filter };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const _) != 0 {
                libc::_exit(4);
            }
        }
        let mut buf = [0u8; 64];
        let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 4];
        for _ in 0..n {
            match call {
                Call::Recvfrom => {
                    libc::recvfrom(3, buf.as_mut_ptr().cast(), buf.len(), 0, std::ptr::null_mut(), std::ptr::null_mut());
                }
                Call::Sendto => {
                    libc::sendto(3, buf.as_ptr().cast(), 1, 0, std::ptr::null(), 0);
                }
                Call::EpollPwait2 => {
                    libc::syscall(libc::SYS_epoll_pwait2, watch, ev.as_mut_ptr(), 4, &zero as *const libc::timespec, std::ptr::null::<u8>(), 8);
                }
            }
        }
        libc::_exit(0)
    }
}

/// CPU time (user + system) per call of a child making `n` calls.
fn measure(call: Call, n: u64, filter: Option<&[u8]>, watch: i32) -> f64 {
    // SAFETY: fork of a single-threaded process; the child only makes
    // system calls and exits (child()).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        child(call, n, filter, watch);
    }
    assert!(pid > 0, "fork failed");
    let mut status = 0;
    // SAFETY: zeroed rusage is valid; wait4 on our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child failed: status {status:#x}");
    let t = |tv: libc::timeval| Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000);
    (t(ru.ru_utime) + t(ru.ru_stime)).as_secs_f64() * 1e9 / n as f64
}

fn main() {
    let mut a = std::env::args().skip(1);
    let n: u64 = a.next().and_then(|s| s.parse().ok()).unwrap_or(2_000_000);
    let rounds: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let filter = shoal_spt::filter::server_instance_bytes(1, HEAP_START, MEM_SIZE).expect("spt's filter");
    let watch = shoal_spt::filter::server_watch_fd(1);
    println!("spt's filter for a server instance: {} instructions; {n} calls per run, {rounds} rounds, CPU ns per call (user + system)", filter.len() / 8);
    for (name, call) in [("recvfrom (EAGAIN)", Call::Recvfrom), ("sendto (EDESTADDRREQ)", Call::Sendto), ("epoll_pwait2 (timeout 0)", Call::EpollPwait2)] {
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            off.push(measure(call, n, None, watch));
            on.push(measure(call, n, Some(&filter), watch));
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let min = |v: &[f64]| v.iter().cloned().fold(f64::INFINITY, f64::min);
        println!(
            "{name:26} without {:6.1} (min {:6.1})  with {:6.1} (min {:6.1})  filter {:+5.1} ns (mins {:+5.1})",
            mean(&off),
            min(&off),
            mean(&on),
            min(&on),
            mean(&on) - mean(&off),
            min(&on) - min(&off)
        );
    }
}
