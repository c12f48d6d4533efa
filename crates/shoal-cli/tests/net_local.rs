//! Guest-local networking: AF_UNIX sockets, epoll,
//! eventfd, timerfd and poll/select over them, all inside the guest (no
//! host sockets). Each program in `apps/tests/net_*.c` prints what the same
//! source prints as a native static musl program, on spt and on hvt (hvt
//! skips visibly without /dev/kvm).

mod common;
use common::*;

#[test]
fn socketpair_moves_one_mib_between_threads_and_keeps_message_boundaries() {
    matches_native("net_socketpair.c");
}

#[test]
fn epoll_edge_triggered_oneshot_hangups_and_close_semantics() {
    matches_native("net_epoll.c");
}

#[test]
fn eventfd_between_threads_semaphore_and_overflow() {
    matches_native("net_eventfd.c");
}

#[test]
fn timerfd_interval_counts_absolute_and_poll() {
    matches_native("net_timerfd.c");
}

#[test]
fn poll_and_select_over_sockets_eventfds_and_epoll() {
    matches_native("net_poll.c");
}

#[test]
fn server_thread_accepts_unix_connections_from_client_threads() {
    matches_native("net_accept.c");
}

#[test]
fn without_a_network_internet_sockets_reach_only_the_instance_loopback() {
    let dir = scratch();
    let image = build_image(&test_app("net_inet.c"), dir.path(), &[]);
    for tender in tenders() {
        let s = output(shoal_run(tender).arg(&image));
        assert_eq!(
            stdout(&s),
            "AF_INET stream: ok\nconnect 192.0.2.1:80: ENETUNREACH\nAF_INET6 dgram: ok\nsendto [2001:db8::1]:53: ENETUNREACH\n\
             bind 192.0.2.1:80: EADDRNOTAVAIL\nAF_INET socketpair: EOPNOTSUPP\nunknown family: EAFNOSUPPORT\n",
            "{tender}: {}",
            stderr(&s)
        );
        // Said once, however many addresses were refused.
        assert_eq!(
            stderr(&s),
            "shoal: the program's Internet address outside the instance was refused: this instance has no network, only its own loopback (shoal run --publish HOSTPORT:GUESTPORT for a server, --net-outbound for connections out)\n",
            "{tender}"
        );
        assert_eq!(s.status.code(), Some(0), "{tender}");
    }
}

/// TCP and UDP over 127.0.0.1 and ::1 inside one instance with no network
/// option (echoes, accept, poll/epoll, MSG_PEEK, datagram boundaries,
/// EADDRINUSE, ECONNREFUSED, a dual-stack listener): what the same program
/// prints natively. It includes libc-test's functional/socket case, a UDP
/// socket sending to itself on 127.0.0.1.
#[test]
fn loopback_tcp_and_udp_echo_over_ipv4_and_ipv6_match_native() {
    matches_native("net_loopback.c");
}

/// A thread blocked on a timerfd while every other thread waits too: the
/// instance sleeps in the tender until the expiry, using (almost) no CPU.
#[test]
fn waiting_on_a_timerfd_uses_no_cpu() {
    let dir = scratch();
    let src = dir.path().join("tfd_idle.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <stdint.h>\n#include <sys/timerfd.h>\n#include <sys/resource.h>\n\
         int main(void){ int t = timerfd_create(CLOCK_MONOTONIC, 0);\n\
         struct itimerspec i = {{0, 0}, {0, 300000000}}; timerfd_settime(t, 0, &i, 0);\n\
         uint64_t n; read(t, &n, 8); printf(\"%llu\\n\", (unsigned long long)n); return 0; }\n",
    )
    .unwrap();
    let image = build_image(&src, dir.path(), &[]);
    for tender in tenders() {
        let t0 = std::time::Instant::now();
        // Reaped by wait_with_cpu (wait4, which also gives its CPU time).
        #[allow(clippy::zombie_processes)]
        let child = shoal_run(tender).arg(&image).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        let (status, cpu) = wait_with_cpu(child.id() as i32);
        let wall = t0.elapsed().as_secs_f64();
        let mut out = String::new();
        std::io::Read::read_to_string(&mut child.stdout.unwrap(), &mut out).unwrap();
        assert_eq!(out, "1\n", "{tender}");
        assert_eq!(status, 0, "{tender}");
        assert!(wall >= 0.3, "{tender}: returned after {wall}s");
        // The wait is 300 ms; start-up costs some CPU, spinning would cost
        // the whole wait.
        assert!(cpu < 0.2, "{tender}: {cpu}s of CPU over a 300 ms wait");
    }
}

/// Waits for child `pid`; its exit status and the CPU seconds (user +
/// system) it and its own waited-for children used.
fn wait_with_cpu(pid: i32) -> (i32, f64) {
    let mut ru = Rusage { utime: [0; 2], stime: [0; 2], rest: [0; 14] };
    let mut status = 0i32;
    // SAFETY: wait4 writes an int status and a struct rusage (144 bytes on
    // x86-64, the size of Rusage) into our locals.
    let r = unsafe { wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4");
    let tv = |t: [i64; 2]| t[0] as f64 + t[1] as f64 / 1e6;
    ((status >> 8) & 0xff, tv(ru.utime) + tv(ru.stime))
}

#[repr(C)]
struct Rusage {
    utime: [i64; 2],
    stime: [i64; 2],
    rest: [i64; 14],
}

extern "C" {
    fn wait4(pid: i32, status: *mut i32, options: i32, usage: *mut Rusage) -> i32;
}

/// With `--net-outbound` the loopback echoes print the same: sockets bound
/// to 127.0.0.1 and ::1 stay inside the instance and find each other; the
/// port-0 binds to `::` and connections to ports nothing inside listens on
/// go to the host, whose answers (`ECONNREFUSED`, a dual-stack listener
/// reporting the port the host chose) are Linux's.
#[test]
fn loopback_echo_with_outbound_matches_native() {
    matches_native_with("net_loopback.c", &["--net-outbound"]);
}
