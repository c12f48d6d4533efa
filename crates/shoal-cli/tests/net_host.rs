//! Host-socket networking (docs/design.md, "Networking"):
//! the example servers of `apps/net` and the programs `apps/tests/net_*.c`
//! on shoal, talked to by real clients on 127.0.0.1 (std's sockets, curl),
//! with bounded counts and time; hostile guests and bad input. Each test
//! runs on every tender `common::tenders()` finds (hvt when /dev/kvm is
//! usable, with a visible skip otherwise); where the mechanism differs, the
//! test says why.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(60);

fn app_net(name: &str) -> PathBuf {
    home().join("apps/net").join(name)
}

/// A port nothing listens on right now (bound and released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Raises this process's descriptor limit to its hard limit (a test that
/// holds 1000 connections needs more than the usual 1024 soft limit).
fn raise_nofile() {
    // SAFETY: getrlimit/setrlimit on a valid, owned rlimit structure.
    unsafe {
        let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
}

/// A running server instance whose stdout we read.
struct Server {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Server {
    /// Starts `shoal run ARGS`, with `listener` (if any) handed over as
    /// descriptor 10 (`--listen-fd 10` must be among ARGS), and waits for a
    /// line starting with `ready`.
    fn start(args: &[&str], listener: Option<&TcpListener>, ready: &str) -> Server {
        let mut cmd = shoal();
        cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::inherit());
        if let Some(l) = listener {
            let fd = l.as_raw_fd();
            // SAFETY: dup2 and fcntl are async-signal-safe; they put the
            // listener at descriptor 10 without close-on-exec for the child
            // only. A dup2 of the listener onto itself (when it already is
            // 10, as it is now and then with tests running side by side)
            // would keep close-on-exec, so that case clears the flag.
            unsafe {
                cmd.pre_exec(move || {
                    let r = if fd == 10 { libc::fcntl(10, libc::F_SETFD, 0) } else { libc::dup2(fd, 10) };
                    if r < 0 {
                        Err(std::io::Error::last_os_error())
                    } else {
                        Ok(())
                    }
                });
            }
        }
        let mut child = cmd.spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(line.starts_with(ready), "server said {line:?} instead of {ready:?}");
        Server { child, out }
    }

    /// Waits (bounded) for the instance to exit; returns its status and the
    /// rest of its stdout.
    fn finish(mut self) -> (Option<i32>, String) {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                let mut rest = String::new();
                self.out.read_to_string(&mut rest).unwrap();
                return (st.code(), rest);
            }
            if t0.elapsed() > DEADLINE {
                let _ = self.child.kill();
                panic!("the instance did not finish within {DEADLINE:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `["run", "--tender", T]` followed by `rest`.
fn run_args<'a>(tender: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["run", "--tender", tender];
    v.extend_from_slice(rest);
    v
}

/// 1,000 connections open at once, each sending its own bytes; every byte
/// must come back on its own connection.
fn echo_thousand(variant: &str) {
    raise_nofile();
    let dir = scratch();
    let image = build_image(&app_net("echo.c"), dir.path(), &[]);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let img = image.display().to_string();
    for t in tenders() {
        echo_thousand_on(t, &img, variant, &listener);
    }
}

fn echo_thousand_on(tender: &str, img: &str, variant: &str, listener: &TcpListener) {
    let addr = listener.local_addr().unwrap();
    const N: usize = 1000;
    let n = N.to_string();
    let srv = Server::start(&run_args(tender, &["--mem", "512M", "--listen-fd", "10", img, "--", variant, "7", &n]), Some(listener), "listening on 7");
    let workers: Vec<_> = (0..8)
        .map(|w| {
            std::thread::spawn(move || {
                let mine: Vec<usize> = (0..N).filter(|i| i % 8 == w).collect();
                let mut conns: Vec<TcpStream> = mine.iter().map(|_| TcpStream::connect(addr).unwrap()).collect();
                for (c, &i) in conns.iter_mut().zip(&mine) {
                    c.set_read_timeout(Some(DEADLINE)).unwrap();
                    c.write_all(format!("connection {i:04} says hello;").repeat(20).as_bytes()).unwrap();
                }
                for (c, &i) in conns.iter_mut().zip(&mine) {
                    let want = format!("connection {i:04} says hello;").repeat(20);
                    let mut got = vec![0u8; want.len()];
                    c.read_exact(&mut got).unwrap();
                    assert_eq!(got, want.as_bytes(), "connection {i} got other bytes back");
                }
                mine.len()
            })
        })
        .collect();
    let total: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(total, N, "{tender}");
    let (status, rest) = srv.finish();
    assert_eq!(rest, format!("served {N} connections\n"), "{tender}");
    assert_eq!(status, Some(0), "{tender}");
}

#[test]
fn echo_threads_answers_1000_concurrent_connections() {
    echo_thousand("threads");
}

#[test]
fn echo_epoll_answers_1000_concurrent_connections() {
    echo_thousand("epoll");
}

/// A 50 MiB file over HTTP/1.1 with sendfile, fetched with curl; then a
/// keep-alive pair of requests and a chunked response.
#[test]
fn http_serves_a_50_mib_file_with_sendfile() {
    let dir = scratch();
    let image = build_image(&app_net("http.c"), dir.path(), &[]);
    let www = dir.path().join("www");
    std::fs::create_dir(&www).unwrap();
    let mut data = vec![0u8; 50 << 20];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in data.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(www.join("big.bin"), &data).unwrap();
    for t in tenders() {
        http_on(t, dir.path(), &image, &www, &data);
    }
}

fn http_on(tender: &str, dir: &Path, image: &Path, www: &Path, data: &[u8]) {
    let port = free_port();
    let (img, wwwp, publ) = (image.display().to_string(), www.display().to_string(), format!("{port}:80"));
    let srv = Server::start(&run_args(tender, &["--mem", "512M", "--fs", &wwwp, "-p", &publ, &img, "--", "80", "/", "2"]), None, "listening on 80");
    let got = dir.join(format!("got-{tender}.bin"));
    let o = Command::new("curl").args(["-sS", "--max-time", "60", "-o"]).arg(&got).arg(format!("http://127.0.0.1:{port}/big.bin")).output().unwrap();
    assert!(o.status.success(), "{tender}: curl: {}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&got).unwrap() == data, "{tender}: the downloaded file differs from the served one");
    // Two requests on one connection (curl reuses it), the second chunked.
    let o = Command::new("curl")
        .args(["-sS", "--max-time", "20", &format!("http://127.0.0.1:{port}/hello"), &format!("http://127.0.0.1:{port}/chunked?n=3")])
        .output()
        .unwrap();
    assert_eq!(stdout(&o), "hello from http\nline 0\nline 1\nline 2\n", "{tender}: {}", stderr(&o));
    let (status, rest) = srv.finish();
    assert_eq!((status, rest.as_str()), (Some(0), "served 2 connections\n"), "{tender}");
}

/// UDP: 100 datagrams to a published /udp port, each echoed to its sender.
#[test]
fn udp_round_trips() {
    let dir = scratch();
    let image = build_image(&test_app("net_udp.c"), dir.path(), &[]);
    for t in tenders() {
        let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (img, publ) = (image.display().to_string(), format!("{port}:5353/udp"));
        let srv = Server::start(&run_args(t, &["-p", &publ, &img, "--", "5353", "100"]), None, "ready");
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        for i in 0..100 {
            let msg = format!("datagram {i}");
            sock.send_to(msg.as_bytes(), ("127.0.0.1", port)).unwrap();
            let mut buf = [0u8; 128];
            let (n, _) = sock.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], format!("echo:{msg}").as_bytes(), "{t}");
        }
        let (status, rest) = srv.finish();
        assert_eq!((status, rest.as_str()), (Some(0), "echoed 100 datagrams\n"), "{t}");
    }
}

/// Outbound (--net-outbound): a non-blocking connect to a closed port ends
/// in ECONNREFUSED through SO_ERROR, as natively; a connect to a listening
/// host port talks.
#[test]
fn nonblocking_connect_to_a_closed_port_gives_econnrefused() {
    let dir = scratch();
    let src = test_app("net_connect.c");
    let image = build_image(&src, dir.path(), &[]);
    let native = build_native(&src, dir.path(), &[]);
    for tender in tenders() {
        let port = free_port().to_string();
        let n = output(Command::new(&native).args(["refused", &port]));
        let s = output(shoal_run(tender).arg("--net-outbound").arg(&image).args(["--", "refused", &port]));
        assert_eq!(stdout(&s), stdout(&n), "{tender}: shoal stderr: {}", stderr(&s));
        assert!(stdout(&s).contains("SO_ERROR: Connection refused"), "{tender}: {}", stdout(&s));
        assert_eq!(s.status.code(), Some(0), "{tender}");
        // And a connection that works.
        let (port, t) = pong_server();
        let s = output(shoal_run(tender).arg("--net-outbound").arg(&image).args(["--", "talk", &port.to_string()]));
        assert_eq!(stdout(&s), "got: pong\n", "{tender}: {}", stderr(&s));
        assert_eq!(&t.join().unwrap(), b"ping", "{tender}");
        // Without --net-outbound the guest may not connect: 127.0.0.1 is
        // the instance's own loopback, where nothing listens on that port.
        let s = output(shoal_run(tender).arg(&image).args(["--", "talk", &port.to_string()]));
        assert_eq!((s.status.code(), stdout(&s).as_str()), (Some(1), "connect: Connection refused\n"), "{tender}: {}", stderr(&s));
    }
}

/// A host listener on 127.0.0.1 that answers one connection's "ping" with
/// "pong"; its port, and the thread that returns what it read.
fn pong_server() -> (u16, std::thread::JoinHandle<[u8; 4]>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).unwrap();
        c.write_all(b"pong").unwrap();
        b
    });
    (port, t)
}

/// hvt's allow-list (`--net-allow CIDR[:PORT]`), enforced by the VMM: a
/// connect to an allowed destination talks; one to another port of the
/// same host is refused with EACCES and never reaches it. spt refuses the
/// option (its guest makes the host calls itself, past any address check).
#[test]
fn net_allow_lets_through_only_the_listed_destinations() {
    let dir = scratch();
    let image = build_image(&test_app("net_connect.c"), dir.path(), &[]);
    let o = output(shoal().args(["run", "--net-allow", "127.0.0.1/32"]).arg(&image).args(["--", "talk", "1"]));
    assert_clean_error(&o, "--net-allow needs --tender hvt");
    assert_eq!(o.status.code(), Some(125));
    if !tenders().contains(&"hvt") {
        return;
    }
    let (port, t) = pong_server();
    let rule = format!("127.0.0.0/8:{port}");
    let s = output(shoal_run("hvt").args(["--net-allow", &rule]).arg(&image).args(["--", "talk", &port.to_string()]));
    assert_eq!((s.status.code(), stdout(&s).as_str()), (Some(0), "got: pong\n"), "{}", stderr(&s));
    assert_eq!(&t.join().unwrap(), b"ping");
    // Another port of the same host, listening, is not on the list.
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    other.set_nonblocking(true).unwrap();
    let oport = other.local_addr().unwrap().port().to_string();
    let s = output(shoal_run("hvt").args(["--net-allow", &rule, "--net-allow", "10.0.0.0/8"]).arg(&image).args(["--", "talk", &oport]));
    assert_eq!((s.status.code(), stdout(&s).as_str()), (Some(1), "connect: Permission denied\n"), "{}", stderr(&s));
    assert_eq!(other.accept().map(|_| ()).unwrap_err().kind(), std::io::ErrorKind::WouldBlock, "the refused connect reached the host");
}

/// Cold-start safety: a connection made (and its request sent) before the
/// instance even exists waits in the host's backlog and is served.
#[test]
fn a_connection_made_before_the_guest_accepts_is_served() {
    let dir = scratch();
    let image = build_image(&app_net("echo.c"), dir.path(), &[]);
    let img = image.display().to_string();
    for t in tenders() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut early = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        early.write_all(b"sent before the instance started").unwrap();
        let srv = Server::start(&run_args(t, &["--listen-fd", "10", &img, "--", "epoll", "7", "1"]), Some(&listener), "listening on 7");
        early.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut got = [0u8; 32];
        early.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"sent before the instance started", "{t}");
        drop(early);
        assert_eq!(srv.finish().0, Some(0), "{t}");
    }
}

/// CPU time (user + system) of process `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// The instance process under `pid` (the spt instance is its child; on
/// hvt the VMM is the `shoal` process itself).
fn instance_of(pid: u32) -> u32 {
    let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    kids.split_whitespace().next().and_then(|k| k.parse().ok()).unwrap_or(pid)
}

/// An instance blocked in accept (threads) or epoll_wait (epoll) uses no
/// host CPU: over 10 s, at most one clock tick (10 ms) of user + system
/// time, which is the resolution /proc gives. Each also holds an idle
/// kept-open connection, so the threads variant has two blocked threads
/// (one in accept, one in read): their shared idle wait once woke both
/// at every preemption tick, which re-armed the tick (100 wake-ups a
/// second, 6–19 ms of CPU per second).
#[test]
fn an_idle_server_uses_no_cpu() {
    let dir = scratch();
    let image = build_image(&app_net("echo.c"), dir.path(), &[]);
    let img = image.display().to_string();
    // Every tender's pair at once: one 10 s wait for all.
    let mut servers = Vec::new();
    for t in tenders() {
        for variant in ["threads", "epoll"] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let s = Server::start(&run_args(t, &["--listen-fd", "10", &img, "--", variant, "7"]), Some(&l), "listening on 7");
            // Let the instance finish starting and settle into its wait.
            std::thread::sleep(Duration::from_millis(200));
            let pid = instance_of(s.child.id());
            let mut conn = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            conn.write_all(b"ping\n").unwrap();
            let mut got = [0u8; 5];
            conn.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"ping\n", "{t} {variant}");
            servers.push((t, variant, s, l, pid, 0u64, conn));
        }
    }
    // The instances settle after the exchange.
    std::thread::sleep(Duration::from_millis(200));
    for s in servers.iter_mut() {
        s.5 = cpu_ticks(s.4);
    }
    std::thread::sleep(Duration::from_secs(10));
    for (t, variant, _, _, pid, before, _) in &servers {
        let d = cpu_ticks(*pid) - before;
        let what = if *variant == "threads" { "accept and read" } else { "epoll_wait" };
        assert!(d <= 1, "{t}: an instance blocked in {what} used {d} ticks of CPU in 10 s");
    }
}

/// Socket hypercalls with wild pointers, lengths and handles: each is an
/// error for the guest; the tender goes on.
#[test]
fn hostile_socket_hypercalls_are_refused() {
    let dir = scratch();
    let image = build_image(&test_app("net_hostile.c"), dir.path(), &[]);
    // The same numbers on both tenders: hvt's VMM checks every pointer and
    // handle against its own table as spt's checks do.
    for t in tenders() {
        let publ = format!("{}:80", free_port());
        let o = output(shoal_run(t).args(["-p", &publ]).arg(&image));
        hostile_output(t, &o, "bind_new without --net-bind-any: -13\n");
        // BIND_NEW itself (on spt through the parent, which checks again).
        let publ = format!("{}:80", free_port());
        let o = output(shoal_run(t).args(["-p", &publ, "--net-bind-any"]).arg(&image).args(["--", "bind-any"]));
        hostile_output(
            t,
            &o,
            "bind_new of a wild address: -14\nbind_new of a 4096-byte address: -22\nbind_new of AF_UNIX: -97\nbind_new of SOCK_RAW: -22\n\
             bind_new with unknown flags: -22\nbind_new of a 2-byte address: -22\nbind_new of 127.0.0.1:0: a handle\n",
        );
    }
}

fn hostile_output(tender: &str, o: &std::process::Output, bind_new: &str) {
    assert_eq!(
        stdout(o),
        format!(
            "ops array wild: -14\nops array in rodata: -14\ntoo many ops: -22\nrecv into wild buffer: -14\nrecv into code: -14\n\
             send of a huge length: -14\nhandle 1 (the console): -9\nhandle -5: -9\nhandle 2^40: -9\nhandle 999 (not open): -9\n\
             getsockopt into rodata: -14\nunknown operation: -38\nsocket without --net-outbound: -13\n{bind_new}poll of a wild array: -14\n\
             poll of 2^30 entries: -22\nsurvived\n"
        ),
        "{tender}: {}",
        stderr(o)
    );
    assert_eq!(o.status.code(), Some(0), "{tender}");
}

/// An spt guest calling the host's socket calls itself: what the sandbox
/// forbids kills it with 159 and says which call; what it allows does only
/// what the policy lets (Landlock refuses a TCP bind). spt only: an hvt
/// guest has no host to call (a `syscall` instruction there ends it with
/// 159 too, but as a CPU fault the VMM reports, whatever the call — what
/// `tests/hostile.rs` checks), so the socket policy is the VMM's, tested
/// through the hypercalls above.
#[test]
fn raw_host_socket_calls_without_outbound_are_killed() {
    let dir = scratch();
    let image = build_image(&test_app("net_rawsys.c"), dir.path(), &[]);
    for (what, sys) in [("socket", "41, socket"), ("connect", "42, connect"), ("accept-blocking", "288, accept4"), ("accept-other", "288, accept4")] {
        let publ = format!("{}:80", free_port());
        let o = output(shoal().args(["run", "-p", &publ]).arg(&image).args(["--", what]));
        assert_eq!(o.status.code(), Some(159), "{what}: {}", stderr(&o));
        assert_eq!(stderr(&o), format!("shoal: the guest made a system call that the spt sandbox forbids and was killed (system call {sys})\n"), "{what}");
    }
    let publ = format!("{}:80", free_port());
    let o = output(shoal().args(["run", "-p", &publ]).arg(&image).args(["--", "accept-ok"]));
    assert_eq!((o.status.code(), stdout(&o).as_str()), (Some(0), "accept4 on the listener: -11\n"));
    let o = output(shoal().args(["run", "--net-outbound"]).arg(&image).args(["--", "bind"]));
    assert_eq!((o.status.code(), stdout(&o).as_str()), (Some(0), "socket: ok\nbind 127.0.0.1:8080: -13\n"), "{}", stderr(&o));
    // recvmsg: only with --net-bind-any, and only on the bind channel,
    // where the guest gets from the parent what the hypercall gives.
    let publ = format!("{}:80", free_port());
    let o = output(shoal().args(["run", "-p", &publ]).arg(&image).args(["--", "recvmsg"]));
    assert_eq!(
        (o.status.code(), stderr(&o)),
        (Some(159), "shoal: the guest made a system call that the spt sandbox forbids and was killed (system call 47, recvmsg)\n".to_string())
    );
    let o = output(shoal().args(["run", "--net-bind-any"]).arg(&image).args(["--", "recvmsg-0"]));
    assert_eq!(
        (o.status.code(), stderr(&o)),
        (Some(159), "shoal: the guest made a system call that the spt sandbox forbids and was killed (system call 47, recvmsg)\n".to_string())
    );
    let o = output(shoal().args(["run", "--net-bind-any"]).arg(&image).args(["--", "channel"]));
    assert_eq!(
        (o.status.code(), stdout(&o).as_str()),
        (
            Some(0),
            "garbage sent: 5\ngarbage: 4 bytes, errno 22, no descriptor\nrequest sent: 144\nAF_UNIX: 4 bytes, errno 97, no descriptor\n\
             request sent: 144\nAF_INET: 4 bytes, errno 0, a descriptor\n"
        ),
        "{}",
        stderr(&o)
    );
}

/// Bad network options: one `shoal:` line and status 125.
#[test]
fn bad_network_options_are_one_line_errors() {
    let dir = scratch();
    let image = build_image(&app("hello.c"), dir.path(), &[]);
    let o = output(shoal().args(["run", "-p", "80"]).arg(&image));
    assert_clean_error(&o, "--publish 80: expected [HOSTADDR:]HOSTPORT:GUESTPORT[/udp]");
    assert_eq!(o.status.code(), Some(125));
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let o = output(shoal().args(["run", "-p", &format!("{port}:80")]).arg(&image));
    assert_clean_error(&o, &format!("cannot publish 127.0.0.1:{port}: the address is already in use"));
    assert_eq!(o.status.code(), Some(125));
    let o = output(shoal().args(["run", "--listen-fd", "77"]).arg(&image));
    assert_clean_error(&o, "--listen-fd 77: expected the number of an open descriptor");
    // A privileged port, as a user who may not bind it: nobody, through
    // setpriv, which needs root.
    if shoal_testkit::need(&["root", "setpriv"]) {
        // The scratch directory is root's own: let nobody read the image.
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let o = output(
            Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(env!("CARGO_BIN_EXE_shoal"))
                .args(["run", "-p", "81:80"])
                .arg(&image),
        );
        assert_clean_error(&o, "cannot publish 127.0.0.1:81: port 81 is privileged and this user may not bind it");
        assert_eq!(o.status.code(), Some(125));
    }
    let o = output(shoal().args(["run", "--net-allow", "10.0.0.0/33"]).arg(&image));
    assert_clean_error(&o, "--net-allow 10.0.0.0/33: expected CIDR[:PORT]");
    assert_eq!(o.status.code(), Some(125));
    // hvt opens its listeners before boot, with the same checks and words.
    if tenders().contains(&"hvt") {
        let o = output(shoal_run("hvt").args(["-p", &format!("{port}:80")]).arg(&image));
        assert_clean_error(&o, &format!("cannot publish 127.0.0.1:{port}: the address is already in use"));
        assert_eq!(o.status.code(), Some(125));
    }
}

/// getaddrinfo answers numeric addresses and `localhost` (from the
/// /etc/hosts an empty root gets) without a name server.
#[test]
fn getaddrinfo_resolves_numeric_addresses_and_localhost() {
    let dir = scratch();
    let image = build_image(&test_app("net_resolve.c"), dir.path(), &[]);
    for tender in tenders() {
        let o = output(shoal_run(tender).arg(&image));
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{tender}: {}", stderr(&o));
        assert!(out.starts_with("127.0.0.1: 127.0.0.1\n::1: ::1\n10.1.2.3: 10.1.2.3\n"), "{tender}: {out}");
        assert!(out.contains("localhost: 127.0.0.1\n") && out.contains("localhost: ::1\n"), "{tender}: {out}");
    }
}

/// `--net-bind-any` (the mode shoal-oci runs containers in): a guest bind
/// on any port binds that host port right then, TCP and UDP, IPv4 and
/// IPv6; port 0 gets an ephemeral port that getsockname reports; a taken
/// port is EADDRINUSE and a privileged one is what the tender's user may
/// bind, as a native run of the same program says. Without the mode the
/// same bind is refused.
#[test]
fn net_bind_any_binds_the_guests_ports_on_demand() {
    let dir = scratch();
    let src = test_app("net_bindany.c");
    let image = build_image(&src, dir.path(), &[]);
    let native = build_native(&src, dir.path(), &[]);
    let img = image.display().to_string();
    for t in tenders() {
        // TCP on a port nothing published, on every address.
        let port = free_port();
        let p = port.to_string();
        let srv = Server::start(&run_args(t, &["--net-bind-any", &img, "--", "tcp", "0.0.0.0", &p]), None, &format!("listening on {port}"));
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        assert_eq!(got, format!("hello from {port}\n"), "{t}");
        assert_eq!(srv.finish(), (Some(0), "served\n".to_string()), "{t}");
        // Port 0 on IPv6: an ephemeral port, which getsockname reports.
        let mut child = shoal().args(run_args(t, &["--net-bind-any", &img, "--", "tcp", "::1", "0"])).stdout(Stdio::piped()).spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let srv = Server { child, out };
        let eph: u16 = line.strip_prefix("listening on ").and_then(|p| p.trim().parse().ok()).unwrap_or_else(|| panic!("{t}: {line:?}"));
        assert_ne!(eph, 0, "{t}");
        let mut c = TcpStream::connect(("::1", eph)).unwrap();
        c.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        assert_eq!(got, format!("hello from {eph}\n"), "{t}");
        assert_eq!(srv.finish(), (Some(0), "served\n".to_string()), "{t}");
        // UDP.
        let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let srv = Server::start(&run_args(t, &["--net-bind-any", &img, "--", "udp", &port.to_string()]), None, "ready");
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        sock.send_to(b"ping", ("127.0.0.1", port)).unwrap();
        let mut buf = [0u8; 64];
        let (n, _) = sock.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"echo:ping", "{t}");
        assert_eq!(srv.finish(), (Some(0), "echoed\n".to_string()), "{t}");
        // A taken port, by the host or by the guest itself: as natively.
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let tp = taken.local_addr().unwrap().port().to_string();
        let n = output(Command::new(&native).arg("listen"));
        let s = output(shoal_run(t).arg("--net-bind-any").arg(&image).args(["--", "listen"]));
        assert_eq!((stdout(&s).as_str(), stdout(&n).as_str()), ("listen without bind: a port\n", "listen without bind: a port\n"), "{t}: {}", stderr(&s));
        for args in [&["bind", "127.0.0.1", &tp][..], &["twice"][..]] {
            let n = output(Command::new(&native).args(args));
            let s = output(shoal_run(t).arg("--net-bind-any").arg(&image).arg("--").args(args));
            assert_eq!(stdout(&s), stdout(&n), "{t} {args:?}: {}", stderr(&s));
            assert!(stdout(&s).contains("Address in use"), "{t} {args:?}: {}", stdout(&s));
        }
        // A privileged port: what the tender's user may bind. Root may (as
        // natively); nobody may not (checked on spt: nobody cannot open
        // /dev/kvm, and hvt's VMM binds with the same host call).
        let n = output(Command::new(&native).args(["bind", "127.0.0.1", "81"]));
        let s = output(shoal_run(t).arg("--net-bind-any").arg(&image).args(["--", "bind", "127.0.0.1", "81"]));
        assert_eq!(stdout(&s), stdout(&n), "{t}: {}", stderr(&s));
        // As nobody (through setpriv, which needs root), once: on spt.
        if t == "spt" && shoal_testkit::need(&["root", "setpriv"]) {
            std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
            let nobody = |cmd: &Path| {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(cmd);
                c
            };
            let n = output(nobody(&native).args(["bind", "127.0.0.1", "81"]));
            let s = output(nobody(Path::new(env!("CARGO_BIN_EXE_shoal"))).args(["run", "--net-bind-any"]).arg(&image).args(["--", "bind", "127.0.0.1", "81"]));
            assert_eq!((stdout(&s).as_str(), stdout(&n).as_str()), ("bind: Permission denied\n", "bind: Permission denied\n"), "{t}: {}", stderr(&s));
        }
        // Without the mode the bind stays inside the instance, on its own
        // loopback (as in a container whose port is not published), with
        // or without outbound: no host socket; on the any-address a note
        // says that nothing outside reaches it. A bind to a host address
        // is refused.
        let p = free_port().to_string();
        let s = output(shoal_run(t).arg(&image).args(["--", "bind", "127.0.0.1", &p]));
        assert_eq!((stdout(&s).as_str(), stderr(&s).as_str()), ("bound\n", ""), "{t}");
        let s = output(shoal_run(t).arg("--net-outbound").arg(&image).args(["--", "bind", "0.0.0.0", &p]));
        assert_eq!(stdout(&s), "bound\n", "{t}");
        assert_eq!(
            stderr(&s),
            format!(
                "shoal: the guest's bind to 0.0.0.0:{p} is reachable only inside the instance: port {p} is not published (shoal run --publish HOSTPORT:{p})\n"
            ),
            "{t}"
        );
        let s = output(shoal_run(t).arg("--net-outbound").arg(&image).args(["--", "bind", "192.0.2.1", &p]));
        assert_eq!(stdout(&s), "bind: Permission denied\n", "{t}");
        assert_eq!(
            stderr(&s),
            format!("shoal: the guest's bind to 192.0.2.1:{p} was refused: port {p} is not published (shoal run --publish HOSTPORT:{p}, or --net-bind-any)\n"),
            "{t}"
        );
    }
    // spt binds through its waiting parent, which --single-process drops.
    let o = output(shoal().args(["run", "--single-process", "--net-bind-any"]).arg(&image));
    assert_clean_error(&o, "--net-bind-any cannot be used with --single-process on spt");
}

/// Whether nothing arrives on `sock` within a short wait (a datagram the
/// guest was refused must not reach the host).
fn no_datagram(sock: &UdpSocket) -> bool {
    sock.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut buf = [0u8; 64];
    sock.recv_from(&mut buf).is_err()
}

/// Whether no connection arrives on `l` within a short wait.
fn no_connection(l: &TcpListener) -> bool {
    l.set_nonblocking(true).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    l.accept().is_err()
}

/// hvt (spt refuses `--net-allow`): a UDP send to
/// `AF_UNSPEC`, which Linux sends as `AF_INET` to the address that
/// follows, is refused when that address is not on the allow-list.
#[test]
fn an_af_unspec_send_does_not_pass_the_allow_list() {
    // --net-allow is hvt's: without KVM, tenders() reports the skip.
    if !tenders().contains(&"hvt") {
        return;
    }
    let dir = scratch();
    let image = build_image(&test_app("net_policy.c"), dir.path(), &[]);
    let target = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = target.local_addr().unwrap().port().to_string();
    let other = format!("127.0.0.1:{}", free_port());
    let o = output(shoal_run("hvt").args(["--net-allow", &other]).arg(&image).args(["--", "unspec", &port]));
    assert_eq!(stdout(&o), "sendto: EACCES\n", "{}", stderr(&o));
    assert!(no_datagram(&target), "the refused datagram arrived");
}

/// Without `--net-outbound`, a socket the guest bound
/// with `--net-bind-any` makes no traffic of its own: a TCP Fast Open send
/// (which connects) is `EACCES`, and so is a UDP send to anyone but a
/// recent sender (a reply, which `net_bind_any_binds_the_guests_ports_on_
/// demand`, `udp_round_trips` and `a_udp_socket_without_outbound_replies_
/// only_to_its_recent_senders` check still goes), on both tenders: on spt
/// the waiting parent holds the UDP socket and relays it (docs/
/// architecture.md, threat model).
#[test]
fn without_outbound_a_bound_socket_makes_no_traffic_of_its_own() {
    let dir = scratch();
    let image = build_image(&test_app("net_policy.c"), dir.path(), &[]);
    for t in tenders() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port().to_string();
        let o = output(shoal_run(t).arg("--net-bind-any").arg(&image).args(["--", "tfo", &port]));
        assert_eq!(stdout(&o), "socket: ok\nbind: ok\nsendto: EACCES\n", "{t}: {}", stderr(&o));
        assert!(no_connection(&l), "{t}: the Fast Open send connected");
        let target = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = target.local_addr().unwrap().port().to_string();
        let o = output(shoal_run(t).arg("--net-bind-any").arg(&image).args(["--", "udp", &port]));
        assert_eq!(stdout(&o), "socket: ok\nbind: ok\nsendto: EACCES\n", "{t}: {}", stderr(&o));
        assert!(no_datagram(&target), "{t}: the refused datagram arrived");
    }
}

/// Without `--net-outbound` a UDP socket from a bind answers its senders
/// and nobody else: a reply to the datagram's sender arrives, a send to
/// another address on the same socket is `EACCES` and nothing reaches
/// that address (spt: the relay through the waiting parent; hvt: the
/// VMM's rule).
#[test]
fn a_udp_socket_without_outbound_replies_only_to_its_recent_senders() {
    let dir = scratch();
    let image = build_image(&test_app("net_policy.c"), dir.path(), &[]);
    for t in tenders() {
        let target = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tport = target.local_addr().unwrap().port().to_string();
        let lport = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut srv =
            Server::start(&run_args(t, &["--net-bind-any", &image.display().to_string(), "--", "reply", &lport.to_string(), &tport]), None, "socket: ok");
        let mut line = String::new();
        for want in ["bind: ok\n", "ready\n"] {
            line.clear();
            srv.out.read_line(&mut line).unwrap();
            assert_eq!(line, want, "{t}");
        }
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        client.send_to(b"ping", ("127.0.0.1", lport)).unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = client.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from.port()), (&b"pong"[..], lport), "{t}");
        assert_eq!(srv.finish(), (Some(0), "recvfrom: ok\nreply: ok\nsendto other: EACCES\n".to_string()), "{t}");
        assert!(no_datagram(&target), "{t}: the refused datagram arrived");
    }
}

/// spt: the guest's UDP port is the instance's end of the parent's relay,
/// so a guest that sends past the handler — a `sendto` with an address, or
/// a relay frame it wrote itself naming an address no datagram came from
/// — reaches nobody. (Before the relay, the first went out.) A UDP port
/// without outbound needs the waiting parent: `--single-process` is
/// refused with one line. hvt has no host calls of the guest's
/// (`raw_host_socket_calls_without_outbound_are_killed`).
#[test]
fn an_spt_guest_cannot_send_past_its_udp_relay() {
    let dir = scratch();
    let image = build_image(&test_app("net_rawsys.c"), dir.path(), &[]);
    let target = UdpSocket::bind("127.0.0.1:0").unwrap();
    let tport = target.local_addr().unwrap().port().to_string();
    let publ = format!("{}:53/udp", UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
    let o = output(shoal().args(["run", "-p", &publ]).arg(&image).args(["--", "relay", &tport]));
    assert_eq!((o.status.code(), stdout(&o).as_str()), (Some(0), "sendto with an address: 4\nframe sent: 36\n"), "{}", stderr(&o));
    assert!(no_datagram(&target), "a datagram of the guest's own arrived");
    let o = output(shoal().args(["run", "--single-process", "-p", &publ]).arg(&image).args(["--", "relay", &tport]));
    assert_clean_error(&o, "a UDP port (--publish …/udp, --listen-fd) without --net-outbound needs the waiting parent process");
}

/// A published /udp echo server under load: 4 clients, 250 datagrams
/// each with up to 8 in flight, every one echoed to its own sender (spt:
/// through the relay).
#[test]
fn a_published_udp_echo_server_answers_1000_datagrams() {
    let dir = scratch();
    let image = build_image(&test_app("net_udp.c"), dir.path(), &[]);
    const CLIENTS: usize = 4;
    const EACH: usize = 250;
    const WINDOW: usize = 8;
    for t in tenders() {
        let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (img, publ) = (image.display().to_string(), format!("{port}:5353/udp"));
        let n = (CLIENTS * EACH).to_string();
        let srv = Server::start(&run_args(t, &["-p", &publ, &img, "--", "5353", &n]), None, "ready");
        let t0 = Instant::now();
        let clients: Vec<_> = (0..CLIENTS)
            .map(|c| {
                std::thread::spawn(move || {
                    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
                    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let (mut sent, mut got) = (0, 0);
                    let mut buf = [0u8; 128];
                    while got < EACH {
                        while sent < EACH && sent - got < WINDOW {
                            sock.send_to(format!("c{c} d{sent}").as_bytes(), ("127.0.0.1", port)).unwrap();
                            sent += 1;
                        }
                        let (k, _) = sock.recv_from(&mut buf).unwrap();
                        // Loopback keeps each sender's order.
                        assert_eq!(&buf[..k], format!("echo:c{c} d{got}").as_bytes());
                        got += 1;
                    }
                    got
                })
            })
            .collect();
        let total: usize = clients.into_iter().map(|h| h.join().unwrap()).sum();
        eprintln!("{t}: {total} datagrams echoed in {:?}", t0.elapsed());
        assert_eq!(total, CLIENTS * EACH, "{t}");
        let (status, rest) = srv.finish();
        assert_eq!((status, rest), (Some(0), format!("echoed {n} datagrams\n")), "{t}");
    }
}

/// An `IPPROTO_MPTCP` socket (whose ports Landlock's TCP
/// rules do not cover on spt) is `EPROTONOSUPPORT`, the answer Go falls
/// back from; a TCP listener made as Go makes one (`SO_REUSEADDR`, bind,
/// listen) still serves.
#[test]
fn mptcp_sockets_are_refused_and_tcp_listeners_still_work() {
    let dir = scratch();
    let image = build_image(&test_app("net_policy.c"), dir.path(), &[]);
    let img = image.display().to_string();
    for t in tenders() {
        let port = free_port();
        let publ = format!("{port}:8080");
        let mut srv = Server::start(&run_args(t, &["--net-outbound", "-p", &publ, &img, "--", "mptcp", "8080"]), None, "mptcp socket: EPROTONOSUPPORT");
        let mut lines = String::new();
        while !lines.contains("listening\n") {
            let mut line = String::new();
            assert!(srv.out.read_line(&mut line).unwrap() > 0, "{t}: {lines}");
            lines.push_str(&line);
        }
        assert_eq!(lines, "socket: ok\nsetsockopt SO_REUSEADDR: ok\nbind: ok\nlisten: ok\nlistening\n", "{t}");
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        assert_eq!(got, "hello\n", "{t}");
        assert_eq!(srv.finish(), (Some(0), "accept: ok\nwrite: ok\n".to_string()), "{t}");
    }
}

/// A UDP socket on 127.0.0.1 with `SO_REUSEADDR`, as a host service that
/// shares its port binds it.
fn udp_with_reuseaddr() -> UdpSocket {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a descriptor this function owns until
    // it becomes the UdpSocket.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let one: libc::c_int = 1;
        assert_eq!(libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, (&one as *const libc::c_int).cast(), 4), 0);
        let sock = UdpSocket::from_raw_fd(fd);
        let a = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: 0,
            sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes([127, 0, 0, 1]) },
            sin_zero: [0; 8],
        };
        assert_eq!(libc::bind(fd, (&a as *const libc::sockaddr_in).cast(), core::mem::size_of::<libc::sockaddr_in>() as u32), 0);
        sock
    }
}

/// A guest cannot share the port of a host service that
/// bound it with `SO_REUSEADDR` (which UDP allows with no owner check, the
/// newest socket taking the datagrams): the option is accepted and not
/// applied, so the bind the tender makes for `--net-bind-any` is
/// `EADDRINUSE`, as for a port in use. The service still gets its
/// datagrams. (With `--net-outbound` alone the guest's bind to a port is
/// refused before any host call; the raw host calls are
/// `raw_host_socket_calls_with_outbound_keep_to_tcp_and_udp`'s.)
#[test]
fn a_guest_cannot_take_a_host_services_udp_port() {
    let dir = scratch();
    let image = build_image(&test_app("net_policy.c"), dir.path(), &[]);
    for t in tenders() {
        let service = udp_with_reuseaddr();
        let port = service.local_addr().unwrap().port();
        let o = output(shoal_run(t).arg("--net-bind-any").arg(&image).args(["--", "reuse", &port.to_string()]));
        assert_eq!(stdout(&o), "socket: ok\nsetsockopt SO_REUSEADDR: ok\nsetsockopt SO_REUSEPORT: ok\nbind: EADDRINUSE\n", "{t}: {}", stderr(&o));
        UdpSocket::bind("127.0.0.1:0").unwrap().send_to(b"for the service", ("127.0.0.1", port)).unwrap();
        service.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 64];
        let (n, _) = service.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"for the service", "{t}");
    }
}

/// The network policy on spt, where the guest can make the host calls
/// itself and the filter is the boundary: with `--net-outbound` a socket
/// of any protocol but TCP and UDP (`IPPROTO_MPTCP`) and address reuse
/// (`SO_REUSEADDR`, `SO_REUSEPORT`) are killed, while TCP/UDP sockets and
/// other options go on; a send with `MSG_FASTOPEN` (which connects)
/// without outbound is killed. (hvt's guest has no host calls: the same
/// rules are the VMM's, in `shoal-hvt`'s unit tests.)
#[test]
fn raw_host_socket_calls_with_outbound_keep_to_tcp_and_udp() {
    let dir = scratch();
    let image = build_image(&test_app("net_rawsys.c"), dir.path(), &[]);
    let killed = |call: &str| format!("shoal: the guest made a system call that the spt sandbox forbids and was killed (system call {call})\n");
    let o = output(shoal().args(["run", "--net-outbound"]).arg(&image).args(["--", "mptcp"]));
    assert_eq!((o.status.code(), stderr(&o)), (Some(159), killed("41, socket")));
    for what in ["reuseaddr", "reuseport"] {
        let o = output(shoal().args(["run", "--net-outbound"]).arg(&image).args(["--", what]));
        assert_eq!((o.status.code(), stdout(&o), stderr(&o)), (Some(159), "socket: ok\n".to_string(), killed("54, setsockopt")), "{what}");
    }
    let o = output(shoal().args(["run", "--net-outbound"]).arg(&image).args(["--", "tcp"]));
    assert_eq!((o.status.code(), stdout(&o).as_str()), (Some(0), "tcp socket: ok\nudp socket: ok\n"), "{}", stderr(&o));
    let o = output(shoal().args(["run", "--net-outbound"]).arg(&image).args(["--", "nodelay"]));
    assert_eq!((o.status.code(), stdout(&o).as_str()), (Some(0), "setsockopt TCP_NODELAY: 0\nsetsockopt SO_KEEPALIVE: 0\n"), "{}", stderr(&o));
    let publ = format!("{}:80", free_port());
    let o = output(shoal().args(["run", "-p", &publ]).arg(&image).args(["--", "fastopen"]));
    assert_eq!((o.status.code(), stderr(&o)), (Some(159), killed("44, sendto")));
}

/// A server that binds its port on IPv4 and on IPv6 (as Redis does) when
/// the port is published once: the second bind succeeds inside the
/// instance (as in a container, where nothing outside reaches it), and the
/// note names the address and says why (the one published socket is
/// taken), not that the port is unpublished.
#[test]
fn a_second_bind_of_a_published_port_stays_inside_and_says_it_is_taken() {
    let dir = scratch();
    let src = dir.path().join("bind2.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <string.h>\n#include <errno.h>\n#include <netinet/in.h>\n#include <sys/socket.h>\n#include <stdlib.h>\n\
         int main(int c, char **v){ int port = atoi(v[1]);\n\
         int a = socket(AF_INET, SOCK_STREAM, 0); struct sockaddr_in s4 = {0}; s4.sin_family = AF_INET; s4.sin_port = htons(port);\n\
         printf(\"ipv4: %d\\n\", bind(a, (void *)&s4, sizeof s4) ? errno : 0);\n\
         int b = socket(AF_INET6, SOCK_STREAM, 0); struct sockaddr_in6 s6 = {0}; s6.sin6_family = AF_INET6; s6.sin6_port = htons(port);\n\
         printf(\"ipv6: %s\\n\", bind(b, (void *)&s6, sizeof s6) ? strerror(errno) : \"bound\"); return 0; }\n",
    )
    .unwrap();
    let image = build_image(&src, dir.path(), &[]);
    for t in tenders() {
        let p = free_port().to_string();
        let s = output(shoal_run(t).args(["-p", &format!("{p}:6379")]).arg(&image).args(["--", "6379"]));
        assert_eq!(stdout(&s), "ipv4: 0\nipv6: bound\n", "{t}: {}", stderr(&s));
        assert_eq!(
            stderr(&s),
            "shoal: the guest's bind to [::]:6379 is reachable only inside the instance: published port 6379 is taken by another of its sockets (one --publish gives one socket; publish it once more on another host address, e.g. --publish [::1]:HOSTPORT:6379)\n",
            "{t}"
        );
    }
}
