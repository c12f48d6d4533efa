//! `shoal bench echo`: the UKL paper's echo experiment (Fig. 1): latency
//! of a TCP echo server (`apps/net/echo.c`, its edge-triggered epoll
//! variant) on shoal spt, shoal hvt and as a native static musl process.
//!
//! Runs are interleaved — native, spt, hvt, native, spt, hvt, … — so that
//! a change in the shared machine's load hits every system alike. Each run
//! starts the server on a free port (on shoal published with `-p` to the
//! same guest port), waits for its "listening on" line and then measures
//! with a blocking client in this process, on 127.0.0.1 only:
//!
//! - persistent: one connection with TCP_NODELAY, N round trips of a
//!   SIZE-byte message, each timed with `Instant` (a monotonic clock);
//! - per connection: N/10 requests, each connect, send, receive, close.
//!
//! A system that cannot run here (no usable /dev/kvm) is reported as
//! `unavailable: REASON`, a failing run (a tender that refuses networking
//! included) as `failed: REASON`, the reason being the server's own error
//! line; nothing is ever estimated for either.
//! With hvt measured and `perf` allowed to count the `kvm_userspace_exit`
//! tracepoint, one more untimed hvt run per mode counts the VM exits the
//! tender handles per round trip.

use crate::host::{build_pair, find_program};
use crate::load::free_port;
use crate::progress::Progress;
use crate::stats::mean_sd;
use crate::stats::percentile;
use crate::Missing;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The UKL paper, Fig. 1 (average and 99th percentile, ms): the UKL echo server
/// and the same server as a Linux process, both in a QEMU/KVM VM with the
/// client on the host. The paper states neither the message size nor
/// whether the connection persists.
const PAPER_UKL_MS: (f64, f64) = (0.06, 0.22);
const PAPER_LINUX_MS: (f64, f64) = (0.13, 0.37);

/// Until the server prints "listening on" (a VM boot included).
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for one connect, send or receive: a server that stops
/// answering ends its run instead of hanging the bench.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// A whole run's budget: this plus 2 ms per round trip (the paper's
/// round trips take 0.1–0.4 ms; anything slower is broken).
const RUN_BASE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bounds on the options, so that a run's size and time stay bounded.
const MAX_ROUND_TRIPS: usize = 1_000_000;
const MAX_SIZE: usize = 65_536;
const MAX_REPEAT: usize = 100;

pub struct EchoOpts {
    pub round_trips: usize,
    pub repeat: usize,
    pub size: usize,
    /// Directory for the CSV and the plot.
    pub out: PathBuf,
    pub json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Native,
    Spt,
    Hvt,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Native, Kind::Spt, Kind::Hvt];

    fn key(self) -> &'static str {
        match self {
            Kind::Native => "native",
            Kind::Spt => "spt",
            Kind::Hvt => "hvt",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Native => "native process",
            Kind::Spt => "shoal spt",
            Kind::Hvt => "shoal hvt",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Persistent,
    PerConnection,
}

impl Mode {
    const ALL: [Mode; 2] = [Mode::Persistent, Mode::PerConnection];

    fn key(self) -> &'static str {
        match self {
            Mode::Persistent => "persistent",
            Mode::PerConnection => "per_connection",
        }
    }
}

/// One system's samples (ms per round trip), per mode; `runs[mode][run]`.
struct System {
    kind: Kind,
    /// Why it has no measurement, once it has none.
    missing: Option<Missing>,
    runs: [Vec<Vec<f64>>; 2],
}

/// What every run needs.
struct Setup {
    shoal: PathBuf,
    image: PathBuf,
    native: PathBuf,
    stderr_file: PathBuf,
    round_trips: usize,
    per_connection: usize,
    size: usize,
}

/// A running echo server, killed with its whole process group (the tender
/// and its instance) when dropped, however its run ended.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        // Only while the leader is unreaped: its pid, and so the group's
        // number, cannot have been reused by anyone else's processes.
        if let (Ok(None), Ok(pid)) = (self.child.try_wait(), i32::try_from(self.child.id())) {
            // SAFETY: kill has no memory-safety preconditions; the group is
            // the one this process created for the server (process_group(0)).
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = self.child.wait();
    }
}

/// Why a server did not start; `in_use` when its port was taken meanwhile
/// (the free port is only free when it is picked), so that a new one is tried.
struct StartError {
    reason: String,
    in_use: bool,
}

/// The server's command for `kind` on `port`; `max`: exit after that many
/// connections (the exit-counting runs need the server to end by itself,
/// so that perf prints its count).
fn server_command(kind: Kind, s: &Setup, port: u16, max: Option<usize>) -> Command {
    let mut guest_args = vec!["epoll".to_string(), port.to_string()];
    guest_args.extend(max.map(|m| m.to_string()));
    match kind {
        Kind::Native => {
            let mut c = Command::new(&s.native);
            c.args(&guest_args).env_clear();
            c
        }
        Kind::Spt | Kind::Hvt => {
            let mut c = Command::new(&s.shoal);
            c.args(["run", "--tender", kind.key(), "-p", &format!("127.0.0.1:{port}:{port}")]).arg(&s.image).arg("--").args(&guest_args);
            c
        }
    }
}

/// Starts `cmd` in its own process group and waits for "listening on".
fn start(mut cmd: Command, port: u16, stderr_file: &Path) -> Result<Server, StartError> {
    let fail = |reason: String| StartError { in_use: reason.contains("in use"), reason };
    let err = File::create(stderr_file).map_err(|e| fail(format!("cannot create {}: {e}", stderr_file.display())))?;
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(err).process_group(0);
    let mut child = cmd.spawn().map_err(|e| fail(format!("cannot start the server: {e}")))?;
    let stdout = child.stdout.take();
    let server = Server { child, port };
    let Some(stdout) = stdout else { return Err(fail("no stdout pipe".into())) };
    // A thread reads the server's stdout (until it dies) so that the wait
    // for the first line can time out; it also keeps the pipe drained.
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) if line.starts_with("listening on") => return Ok(server),
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(fail(format!("no \"listening on\" within {} s", START_TIMEOUT.as_secs())));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // The server ended before listening: its last stderr line
                // says why (for hvt today, that networking is not built).
                // Its stdout closed; give it a moment to exit rather than a
                // blocking wait (the drop kills whatever is left).
                let mut server = server;
                let gone = Instant::now() + Duration::from_secs(2);
                let status = loop {
                    match server.child.try_wait() {
                        Ok(Some(st)) => break st.to_string(),
                        Ok(None) if Instant::now() < gone => std::thread::sleep(Duration::from_millis(10)),
                        Ok(None) => break "still running".to_string(),
                        Err(e) => break e.to_string(),
                    }
                };
                let text = fs::read_to_string(stderr_file).unwrap_or_default();
                let reason = match text.lines().rev().find(|l| !l.trim().is_empty()) {
                    Some(l) => l.trim().trim_start_matches("shoal: ").to_string(),
                    None => format!("the server exited ({status}) before listening"),
                };
                return Err(fail(reason));
            }
        }
    }
}

/// Starts `kind`'s server on a free port; a port taken between picking and
/// binding it is retried with another.
fn start_server(kind: Kind, s: &Setup, max: Option<usize>, wrap: Option<&dyn Fn(Command) -> Command>) -> Result<Server> {
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port()?;
        let mut cmd = server_command(kind, s, port, max);
        if let Some(wrap) = wrap {
            cmd = wrap(cmd);
        }
        match start(cmd, port, &s.stderr_file) {
            Ok(server) => return Ok(server),
            Err(e) if e.in_use => last = e.reason,
            Err(e) => bail!("{}", e.reason),
        }
    }
    bail!("{last}")
}

/// Ends the run with an error once its budget is spent.
fn check_deadline(deadline: Instant) -> Result<()> {
    if Instant::now() > deadline {
        bail!("the run took longer than its time limit (killed)");
    }
    Ok(())
}

/// The i-th message: bytes that differ from one round trip to the next, so
/// that an echo of an earlier message is noticed.
fn fill(msg: &mut [u8], i: usize) {
    for (k, b) in msg.iter_mut().enumerate() {
        *b = (i.wrapping_mul(31).wrapping_add(k) & 0xff) as u8;
    }
}

fn connect(port: u16) -> Result<TcpStream> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).with_context(|| format!("cannot connect to 127.0.0.1:{port}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(s)
}

/// One round trip on `s`: send `msg`, read the echo into `back`.
fn round_trip(s: &mut TcpStream, msg: &[u8], back: &mut [u8]) -> Result<()> {
    s.write_all(msg).context("send")?;
    s.read_exact(back).context("receive")?;
    if back != msg {
        bail!("the echo differs from the message");
    }
    Ok(())
}

/// `n` round trips on one connection; ms per round trip.
fn persistent(port: u16, n: usize, size: usize, deadline: Instant) -> Result<Vec<f64>> {
    let mut s = connect(port)?;
    let (mut msg, mut back) = (vec![0u8; size], vec![0u8; size]);
    let mut ms = Vec::with_capacity(n);
    for i in 0..n {
        fill(&mut msg, i);
        let t = Instant::now();
        round_trip(&mut s, &msg, &mut back).with_context(|| format!("round trip {}", i + 1))?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        check_deadline(deadline)?;
    }
    Ok(ms)
}

/// `n` requests, each on a fresh connection; ms from connect to close. The
/// socket options (three setsockopt calls) are inside the timing, as they
/// can only be set once the socket exists; they cost about a microsecond.
fn per_connection(port: u16, n: usize, size: usize, deadline: Instant) -> Result<Vec<f64>> {
    let (mut msg, mut back) = (vec![0u8; size], vec![0u8; size]);
    let mut ms = Vec::with_capacity(n);
    for i in 0..n {
        fill(&mut msg, i);
        let t = Instant::now();
        let mut s = connect(port)?;
        round_trip(&mut s, &msg, &mut back).with_context(|| format!("request {}", i + 1))?;
        drop(s);
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        check_deadline(deadline)?;
    }
    Ok(ms)
}

fn run_budget(s: &Setup) -> Instant {
    let trips = (s.round_trips + s.per_connection) as u32;
    Instant::now() + RUN_BASE_TIMEOUT + Duration::from_millis(2) * trips
}

/// One run of `kind`: (persistent ms, per-connection ms).
fn measure(kind: Kind, s: &Setup) -> Result<(Vec<f64>, Vec<f64>)> {
    let server = start_server(kind, s, None, None)?;
    let deadline = run_budget(s);
    let p = persistent(server.port, s.round_trips, s.size, deadline).context("persistent connection")?;
    let c = per_connection(server.port, s.per_connection, s.size, deadline).context("connection per request")?;
    drop(server);
    Ok((p, c))
}

/// The tracepoint counted: KVM_RUN returning to the tender (hypercalls,
/// halts), which is what shoal-hvt's own exit counter counts. `kvm_exit`
/// (every exit, in-kernel ones too) reads 0 on this nested KVM.
const EXIT_EVENT: &str = "kvm:kvm_userspace_exit";

/// `perf`, if it may count the KVM tracepoint here (root or a low
/// perf_event_paranoid); the reason otherwise.
fn perf_for_exits() -> Result<PathBuf, String> {
    let perf = find_program("perf").ok_or("perf is not installed (Debian package linux-perf)")?;
    let out = Command::new(&perf)
        .args(["stat", "-x,", "-e", EXIT_EVENT, "-o", "/dev/null", "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run perf: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
        return Err(format!("perf cannot count {EXIT_EVENT} here: {line}"));
    }
    Ok(perf)
}

/// A named pipe at `path`.
fn mkfifo(path: &Path) -> Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).context("a NUL in the temporary path")?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("mkfifo {}", path.display()));
    }
    Ok(())
}

/// Sends `cmd` ("enable", "disable") to perf's control fifo and waits for
/// its "ack", so that the count covers exactly the client's phase.
fn perf_control(ctl: &mut File, ack: &mut File, cmd: &str) -> Result<()> {
    ctl.write_all(format!("{cmd}\n").as_bytes()).with_context(|| format!("perf control {cmd}"))?;
    let mut pfd = libc::pollfd { fd: ack.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let mut got = Vec::new();
    let deadline = Instant::now() + IO_TIMEOUT;
    // perf 6.1 writes "ack\n\0": look for the word, not for a line ending.
    while !got.windows(3).any(|w| w == b"ack") {
        let left = deadline.saturating_duration_since(Instant::now()).as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `pfd` is one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, left) };
        if r <= 0 {
            bail!("perf did not acknowledge {cmd}");
        }
        let mut buf = [0u8; 16];
        match ack.read(&mut buf) {
            Ok(0) => bail!("perf closed its acknowledgement fifo"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e).context("reading perf's acknowledgement"),
        }
    }
    Ok(())
}

/// The count perf wrote (`-x,`: "COUNT,UNIT,EVENT,…").
fn parse_perf_count(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(',').collect();
        (f.len() > 2 && f[2] == EXIT_EVENT).then(|| f[0].parse().ok()).flatten()
    })
}

/// VM exits the hvt tender handled per round trip in `mode`: one untimed
/// hvt run under `perf stat`, counting only while the client runs; the
/// server is told to exit after its connections so that perf reports.
fn count_exits(perf: &Path, s: &Setup, tmp: &Path, mode: Mode) -> Result<f64> {
    let (ctl_path, ack_path, out_path) = (tmp.join("perf-ctl"), tmp.join("perf-ack"), tmp.join("perf.out"));
    for p in [&ctl_path, &ack_path, &out_path] {
        let _ = fs::remove_file(p);
    }
    mkfifo(&ctl_path)?;
    mkfifo(&ack_path)?;
    let (n, conns) = match mode {
        Mode::Persistent => (s.round_trips, 1),
        Mode::PerConnection => (s.per_connection, s.per_connection),
    };
    let wrap = |inner: Command| {
        let mut c = Command::new(perf);
        c.args(["stat", "-x,", "-e", EXIT_EVENT, "-D", "-1"])
            .arg("--control")
            .arg(format!("fifo:{},{}", ctl_path.display(), ack_path.display()))
            .arg("-o")
            .arg(&out_path)
            .arg("--")
            .arg(inner.get_program())
            .args(inner.get_args());
        c
    };
    let mut server = start_server(Kind::Hvt, s, Some(conns), Some(&wrap))?;
    // perf opened both fifos before it started the server, so these opens
    // find their peers; non-blocking, so that a dead perf is an error, not a hang.
    let mut ctl = fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&ctl_path)?;
    let mut ack = fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&ack_path)?;
    let deadline = run_budget(s);
    perf_control(&mut ctl, &mut ack, "enable")?;
    match mode {
        Mode::Persistent => persistent(server.port, n, s.size, deadline)?,
        Mode::PerConnection => per_connection(server.port, n, s.size, deadline)?,
    };
    perf_control(&mut ctl, &mut ack, "disable")?;
    // The server exits after its last connection; perf then writes its count.
    let stop = Instant::now() + IO_TIMEOUT;
    while server.child.try_wait()?.is_none() {
        if Instant::now() > stop {
            bail!("the hvt server did not exit after its {conns} connections");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = fs::read_to_string(&out_path).context("perf wrote no output")?;
    let count = parse_perf_count(&text).ok_or_else(|| anyhow!("no {EXIT_EVENT} count in perf's output: {}", text.trim()))?;
    Ok(count as f64 / n as f64)
}

/// Statistics over all of a system's runs in one mode (ms).
/// Writes `echo.csv` (one row per mode and measured system: average, SD of
/// the run averages, p50 and p99 in ms, samples, average and p99 over
/// native's) and `echo.svg` (the averages with their SD, per mode) into `out`.
fn write_csv_and_plot(out: &Path, kinds: &[Kind], stat: &[[Option<Stats>; 2]]) {
    let native = kinds.iter().position(|k| *k == Kind::Native);
    let cell = |r: Option<f64>| r.map(|r| format!("{r:.3}")).unwrap_or_default();
    let mut lines = Vec::new();
    for (mi, m) in Mode::ALL.iter().enumerate() {
        let base = native.and_then(|i| stat[i][mi].as_ref());
        for (k, st) in kinds.iter().zip(stat) {
            let Some(x) = &st[mi] else { continue };
            lines.push(format!(
                "{},{},{:.4},{:.4},{:.4},{:.4},{},{},{}",
                m.key(),
                k.key(),
                x.average,
                x.sd_of_run_averages,
                x.p50,
                x.p99,
                x.samples,
                cell(base.and_then(|b| ratio(x.average, b.average))),
                cell(base.and_then(|b| ratio(x.p99, b.p99)))
            ));
        }
    }
    let header = "mode,system,average_ms,sd_of_run_averages_ms,p50_ms,p99_ms,samples,average_over_native,p99_over_native";
    let cats: Vec<String> = Mode::ALL.iter().map(|m| m.key().to_string()).collect();
    let series: Vec<crate::plot::BarSeries> = kinds
        .iter()
        .zip(stat)
        .filter(|(_, st)| st.iter().any(Option::is_some))
        .map(|(k, st)| crate::plot::BarSeries {
            name: k.label().into(),
            values: st.iter().map(|x| x.as_ref().map(|x| (x.average, x.sd_of_run_averages))).collect(),
        })
        .collect();
    let frame =
        crate::plot::Frame {
            title: "Echo latency (average ± SD of the runs)", x_desc: "connection use", y_desc: "ms per request", log_x: false, log_y: false
        };
    crate::write_csv_and_bars("echo", out, header, &lines, &frame, &cats, &series);
}

struct Stats {
    average: f64,
    sd_of_run_averages: f64,
    p50: f64,
    p99: f64,
    samples: usize,
}

fn stats(runs: &[Vec<f64>]) -> Stats {
    let all: Vec<f64> = runs.iter().flatten().copied().collect();
    let averages: Vec<f64> = runs.iter().map(|r| mean_sd(r).0).collect();
    Stats { average: mean_sd(&all).0, sd_of_run_averages: mean_sd(&averages).1, p50: percentile(&all, 50.0), p99: percentile(&all, 99.0), samples: all.len() }
}

fn ratio(x: f64, base: f64) -> Option<f64> {
    (base > 0.0 && x.is_finite() && base.is_finite()).then(|| x / base)
}

pub fn echo(o: EchoOpts) -> Result<()> {
    if o.round_trips == 0 || o.round_trips > MAX_ROUND_TRIPS {
        bail!("--round-trips must be between 1 and {MAX_ROUND_TRIPS}");
    }
    if o.repeat == 0 || o.repeat > MAX_REPEAT {
        bail!("--repeat must be between 1 and {MAX_REPEAT}");
    }
    if o.size == 0 || o.size > MAX_SIZE {
        bail!("--size must be between 1 and {MAX_SIZE} bytes");
    }
    let paths = shoal_toolchain::Paths::discover()?;
    let tmp = tempfile::tempdir()?;
    let src = paths.home.join("apps/net/echo.c");
    let (image, native) = build_pair(&src, tmp.path(), &["-O2"])?;
    let setup = Setup {
        shoal: std::env::current_exe()?,
        image,
        native,
        stderr_file: tmp.path().join("stderr"),
        round_trips: o.round_trips,
        per_connection: (o.round_trips / 10).max(1),
        size: o.size,
    };
    let mut systems: Vec<System> = Kind::ALL
        .iter()
        .map(|&kind| {
            let missing = match kind {
                Kind::Hvt => {
                    fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").err().map(|e| Missing::Unavailable(format!("/dev/kvm is not usable ({e})")))
                }
                _ => None,
            };
            System { kind, missing, runs: [Vec::new(), Vec::new()] }
        })
        .collect();

    if !o.json {
        eprintln!("shoal bench echo: {} run(s) of each system, interleaved", o.repeat);
    }
    // Each run of each system is thousands of round trips: one step each.
    let progress = Progress::new("bench echo", (o.repeat * systems.len()) as u64, o.json);
    for run in 0..o.repeat {
        for s in systems.iter_mut().filter(|s| s.missing.is_none()) {
            progress.step();
            progress.doing(s.kind.label());
            match measure(s.kind, &setup) {
                Ok((p, c)) => {
                    s.runs[0].push(p);
                    s.runs[1].push(c);
                }
                // The first run's error is the reason as the server gave it
                // (hvt: its one-line refusal of networking).
                Err(e) if run == 0 => s.missing = Some(Missing::Failed(format!("{e:#}"))),
                Err(e) => s.missing = Some(Missing::Failed(format!("run {} failed: {e:#}", run + 1))),
            }
        }
    }
    drop(progress);
    if systems.iter().all(|s| s.missing.is_some()) {
        let reasons: Vec<String> =
            systems.iter().map(|s| format!("{}: {}", s.kind.key(), s.missing.as_ref().map(Missing::to_string).unwrap_or_default())).collect();
        return Err(crate::BenchError::nothing_measured("echo", &reasons).into());
    }

    // VM exits per round trip, only where hvt itself ran.
    let hvt_ran = systems.iter().any(|s| s.kind == Kind::Hvt && s.missing.is_none());
    let exits: Result<[f64; 2], Missing> = if !hvt_ran {
        Err(Missing::Unavailable("hvt was not measured".into()))
    } else {
        perf_for_exits().map_err(Missing::Unavailable).and_then(|perf| {
            if !o.json {
                eprintln!("shoal bench echo: counting hvt's VM exits (untimed runs under perf stat)");
            }
            let mut per = [0.0; 2];
            for (i, m) in Mode::ALL.iter().enumerate() {
                per[i] = count_exits(&perf, &setup, tmp.path(), *m).map_err(|e| Missing::Failed(format!("{} mode: {e:#}", m.key())))?;
            }
            Ok(per)
        })
    };

    let stat: Vec<[Option<Stats>; 2]> =
        systems.iter().map(|s| if s.missing.is_some() { [None, None] } else { [Some(stats(&s.runs[0])), Some(stats(&s.runs[1]))] }).collect();
    let native_idx = systems.iter().position(|s| s.kind == Kind::Native).unwrap_or(0);
    let kinds: Vec<Kind> = systems.iter().map(|s| s.kind).collect();
    write_csv_and_plot(&o.out, &kinds, &stat);

    if o.json {
        let mut modes = serde_json::Map::new();
        for (mi, m) in Mode::ALL.iter().enumerate() {
            let base = stat[native_idx][mi].as_ref();
            let mut sys = serde_json::Map::new();
            for (s, st) in systems.iter().zip(&stat) {
                let v = match (&s.missing, &st[mi]) {
                    (Some(m), _) => m.json(),
                    (None, None) => Missing::Failed("not measured".into()).json(),
                    (None, Some(x)) => {
                        let per_run: Vec<Value> =
                            s.runs[mi].iter().map(|r| json!({"average": mean_sd(r).0, "p50": percentile(r, 50.0), "p99": percentile(r, 99.0)})).collect();
                        json!({
                            "label": s.kind.label(),
                            "average_ms": x.average,
                            "sd_of_run_averages_ms": x.sd_of_run_averages,
                            "p50_ms": x.p50,
                            "p99_ms": x.p99,
                            "samples": x.samples,
                            "runs_ms": per_run,
                            "ratio_over_native": base.map(|b| json!({
                                "average": ratio(x.average, b.average),
                                "p50": ratio(x.p50, b.p50),
                                "p99": ratio(x.p99, b.p99),
                            })),
                        })
                    }
                };
                sys.insert(s.kind.key().to_string(), v);
            }
            let trips = if *m == Mode::Persistent { setup.round_trips } else { setup.per_connection };
            modes.insert(m.key().to_string(), json!({ "round_trips_per_run": trips, "systems": sys }));
        }
        let exits_json = match &exits {
            Ok([p, c]) => json!({ "event": EXIT_EVENT, "persistent": p, "per_connection": c }),
            Err(m) => m.json(),
        };
        let report = json!({
            "program": "apps/net/echo.c epoll",
            "size_bytes": setup.size,
            "repeat": o.repeat,
            "unit": "ms",
            "modes": modes,
            "hvt_exits_per_round_trip": exits_json,
            "paper": {
                "source": "the UKL paper's Fig. 1, server in a QEMU/KVM VM, client on the host",
                "ukl_ms": { "average": PAPER_UKL_MS.0, "p99": PAPER_UKL_MS.1 },
                "linux_process_ms": { "average": PAPER_LINUX_MS.0, "p99": PAPER_LINUX_MS.1 },
                "ratio_ukl_over_linux": { "average": PAPER_UKL_MS.0 / PAPER_LINUX_MS.0, "p99": PAPER_UKL_MS.1 / PAPER_LINUX_MS.1 },
            },
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }

    println!(
        "shoal bench echo: apps/net/echo.c (epoll), {}-byte messages, TCP_NODELAY, client on 127.0.0.1; \
         {} run(s) of each system, interleaved native, spt, hvt",
        setup.size, o.repeat
    );
    let fmt_ratio = |r: Option<f64>| r.map(|r| format!("{r:.2}×")).unwrap_or_else(|| "—".into());
    for (mi, m) in Mode::ALL.iter().enumerate() {
        println!();
        match m {
            Mode::Persistent => println!("persistent connection: {} round trips per run (ms per round trip)", setup.round_trips),
            Mode::PerConnection => {
                println!("connection per request: {} requests per run (connect, send, receive, close; ms per request)", setup.per_connection)
            }
        }
        println!(
            "{:<15} {:>19} {:>8} {:>8} {:>10} {:>10}   UKL paper Fig. 1 (avg / p99)",
            "system", "average ± SD(runs)", "p50", "p99", "avg/native", "p99/native"
        );
        let base = stat[native_idx][mi].as_ref();
        for (s, st) in systems.iter().zip(&stat) {
            let Some(x) = &st[mi] else {
                println!("{:<15} {}", s.kind.label(), s.missing.clone().unwrap_or(Missing::Failed("not measured".into())));
                continue;
            };
            let paper = match (m, s.kind) {
                (Mode::PerConnection, _) => "—".to_string(),
                (_, Kind::Native) => format!("Linux process {:.2} / {:.2}", PAPER_LINUX_MS.0, PAPER_LINUX_MS.1),
                _ => format!("UKL {:.2} / {:.2}", PAPER_UKL_MS.0, PAPER_UKL_MS.1),
            };
            println!(
                "{:<15} {:>19} {:>8.4} {:>8.4} {:>10} {:>10}   {paper}",
                s.kind.label(),
                format!("{:.4} ± {:.4}", x.average, x.sd_of_run_averages),
                x.p50,
                x.p99,
                fmt_ratio(base.and_then(|b| ratio(x.average, b.average))),
                fmt_ratio(base.and_then(|b| ratio(x.p99, b.p99))),
            );
        }
    }
    println!();
    match &exits {
        Ok([p, c]) => println!("hvt VM exits to the tender ({EXIT_EVENT}): {p:.2} per round trip (persistent), {c:.2} per request"),
        Err(m) => println!("hvt VM exits per round trip: {m}"),
    }
    println!(
        "(paper: UKL/Linux {:.2}× average, {:.2}× p99, both servers in a QEMU/KVM VM with the client on the host and the \
         message size and connection use not stated; here native is a host process and spt passes sockets through to the host.)",
        PAPER_UKL_MS.0 / PAPER_LINUX_MS.0,
        PAPER_UKL_MS.1 / PAPER_LINUX_MS.1
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_csv_and_plot() {
        let dir = tempfile::tempdir().unwrap();
        let st = |average: f64| Some(Stats { average, sd_of_run_averages: 0.001, p50: average, p99: 2.0 * average, samples: 100 });
        let stat = [[st(0.02), st(0.1)], [st(0.04), st(0.3)], [None, None]];
        write_csv_and_plot(dir.path(), &[Kind::Native, Kind::Spt, Kind::Hvt], &stat);
        let csv = std::fs::read_to_string(dir.path().join("echo.csv")).unwrap();
        assert_eq!(
            csv,
            "mode,system,average_ms,sd_of_run_averages_ms,p50_ms,p99_ms,samples,average_over_native,p99_over_native\n\
             persistent,native,0.0200,0.0010,0.0200,0.0400,100,1.000,1.000\n\
             persistent,spt,0.0400,0.0010,0.0400,0.0800,100,2.000,2.000\n\
             per_connection,native,0.1000,0.0010,0.1000,0.2000,100,1.000,1.000\n\
             per_connection,spt,0.3000,0.0010,0.3000,0.6000,100,3.000,3.000\n"
        );
        assert!(dir.path().join("echo.svg").is_file());
    }

    #[test]
    fn perf_count_line() {
        let text = "# started on Mon Nov 23\n\n6,,kvm:kvm_userspace_exit,742150,100.00,,\n";
        assert_eq!(parse_perf_count(text), Some(6));
        assert_eq!(parse_perf_count("<not counted>,,kvm:kvm_userspace_exit,0,0.00,,\n"), None);
        assert_eq!(parse_perf_count(""), None);
    }

    #[test]
    fn messages_change_per_round_trip() {
        let (mut a, mut b) = ([0u8; 64], [0u8; 64]);
        fill(&mut a, 0);
        fill(&mut b, 1);
        assert_ne!(a, b);
    }

    #[test]
    fn stats_pool_runs() {
        let s = stats(&[vec![1.0, 2.0, 3.0], vec![3.0, 4.0, 5.0]]);
        assert_eq!(s.samples, 6);
        assert!((s.average - 3.0).abs() < 1e-12);
        assert!((s.sd_of_run_averages - 2f64.sqrt()).abs() < 1e-12);
        assert!((s.p50 - 3.0).abs() < 1e-12);
    }
}
