//! `shoal bench dyn`: the host's own dynamically linked interpreters,
//! Debian's `/usr/bin/node` (20) and `/usr/bin/python3.11`, unmodified,
//! on spt and hvt with the host's `/usr`, `/lib` and `/lib64` mounted
//! read-only, beside the same programs run natively. Measured: start to
//! exit of `node -e 0` and `python3.11 -c pass` (median and p95), a Node
//! `http` and a Python `http.server` hello under `wrk` at 1 and 50
//! connections with the server on one CPU and wrk on another (as `bench
//! http --pin`; mean ± SD) and the server's CPU time per request during
//! them (user + system time of its process tree from /proc/PID/stat,
//! ended threads included: Python's server runs a thread per connection;
//! less dependent on the machine's load than req/s), the idle memory of one instance (PSS of its
//! process tree) and the PSS sum of `--instances` idle Node instances
//! against as many native Node processes. spt runs in memory mode `copy`
//! (named: `node`'s default on spt is `pool`; the executable's segments
//! copied into each instance)
//! and, as `spt-pool`, with `--mem-mode pool` (the executable's code and
//! read-only data mapped from the library pool, shared by every
//! instance; a pool of the bench's own in /dev/shm, counted once at its
//! full size as `bench density` counts it).

use crate::host::{kvm_usable, pin_binaries};
use crate::load::{free_port, wrk_errors, wrk_requests, wrk_value};
use crate::sample::{clock_ticks, pss_split_kib, stat_fields, tree};
use crate::servers::{pin_command, pin_cpus, Pin};
use crate::stats::{mean_sd, median, p95};
use crate::table::Table;
use crate::Missing;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Options of `shoal bench dyn`.
pub struct DynOpts {
    /// Start→exit runs of each system, and HTTP runs of each system and
    /// connection count.
    pub repeat: usize,
    /// Idle Node instances started together for the PSS sum.
    pub instances: usize,
    /// Seconds of each wrk run (wrk takes whole seconds).
    pub secs: u64,
    /// Where CSVs, the plot and the Markdown table go.
    pub out: PathBuf,
    /// Print JSON instead of a table.
    pub json: bool,
}

const NODE: &str = "/usr/bin/node";
const PYTHON: &str = "/usr/bin/python3.11";

/// The host directories the interpreters, `ld.so` and the libraries come
/// from, mounted where they are.
const SYSTEM_MOUNTS: [&str; 6] = ["--mount", "/usr:/usr:ro", "--mount", "/lib:/lib:ro", "--mount", "/lib64:/lib64:ro"];

/// The systems, in the order each round runs them.
const SYSTEMS: [&str; 4] = ["spt", "spt-pool", "hvt", "native"];

/// Connection counts of the HTTP runs.
const CONNS: [usize; 2] = [1, 50];

/// How long a server may take to answer first, an idle instance to say
/// it is ready, or a start→exit run to end.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The HTTP hello of Node: `http`, one fixed body.
const NODE_HTTP: &str = r#"const http = require('http');
const body = 'hello from node\n';
http.createServer((req, res) => {
  res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': body.length });
  res.end(body);
}).listen(Number(process.argv[2]), process.argv[3]);
"#;

/// The HTTP hello of Python: `http.server` with keep-alive (HTTP/1.1),
/// a thread per connection, no logging, `TCP_NODELAY` (it writes the
/// headers and the body apart: with Nagle's algorithm each answer waited
/// for the client's delayed ACK, 21 req/s at one connection natively as
/// on shoal), and a listen backlog for 50 connections at once (the
/// default, 5, makes wrk's burst of connects wait for SYN
/// retransmissions).
const PYTHON_HTTP: &str = r#"import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    disable_nagle_algorithm = True
    def do_GET(self):
        b = b'hello from python\n'
        self.send_response(200)
        self.send_header('Content-Type', 'text/plain')
        self.send_header('Content-Length', str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
class S(http.server.ThreadingHTTPServer):
    request_queue_size = 128
S((sys.argv[2], int(sys.argv[1])), H).serve_forever()
"#;

/// Idle programs: say `ready`, then wait for nothing.
const NODE_IDLE: &str = "console.log('ready'); setInterval(() => {}, 1 << 30);\n";
const PYTHON_IDLE: &str = "import time\nprint('ready', flush=True)\ntime.sleep(1 << 30)\n";

/// One interpreter: its path, its `-e`/`-c` flag, and its scripts' names
/// (not `http.py`: a script of that name is the `http` module for its own
/// `import http.server`).
#[derive(Clone, Copy)]
struct Runtime {
    name: &'static str,
    exe: &'static str,
    noop: [&'static str; 2],
    http: &'static str,
    idle: &'static str,
}

const RUNTIMES: [Runtime; 2] = [
    Runtime { name: "node", exe: NODE, noop: ["-e", "0"], http: "hello.js", idle: "idle.js" },
    Runtime { name: "python", exe: PYTHON, noop: ["-c", "pass"], http: "hello.py", idle: "idle.py" },
];

/// The binaries and directories every run uses.
struct Env {
    shoal: PathBuf,
    tender: PathBuf,
    /// The scripts, mounted at `/app` in the guest.
    scripts: PathBuf,
    /// The library pool of `spt-pool` (a directory in /dev/shm).
    pool: tempfile::TempDir,
    pin: Pin,
}

impl Env {
    /// `program ARGS` as `sys` runs it: natively, or through `shoal run`
    /// (`lean`: through `shoal-tender`, one process per spt instance, as
    /// `bench density` runs them), publishing 127.0.0.1:`publish` as the
    /// guest's port 8080 if given. A script argument `/app/X` is the
    /// scripts directory's `X` natively.
    fn command(&self, sys: &str, lean: bool, exe: &str, args: &[&str], publish: Option<u16>) -> Command {
        if sys == "native" {
            let mut c = Command::new(exe);
            c.args(args.iter().map(|a| a.strip_prefix("/app/").map_or_else(|| PathBuf::from(a), |x| self.scripts.join(x))));
            return c;
        }
        let mut c = if lean {
            let mut c = Command::new(&self.tender);
            if sys.starts_with("spt") {
                c.arg("--single-process");
            }
            c
        } else {
            let mut c = Command::new(&self.shoal);
            c.arg("run");
            c
        };
        let tender = if sys == "hvt" { "hvt" } else { "spt" };
        c.args(["--tender", tender]).args(SYSTEM_MOUNTS).arg("--mount").arg(format!("{}:/app:ro", self.scripts.display()));
        if sys == "spt-pool" {
            c.args(["--mem-mode", "pool"]).env("SHOAL_POOL_DIR", self.pool.path());
        } else if sys == "spt" {
            // Named: a large executable's default on spt is pool mode.
            c.args(["--mem-mode", "copy"]);
        }
        if let Some(port) = publish {
            c.arg("--publish").arg(format!("127.0.0.1:{port}:8080"));
        }
        c.arg(exe).arg("--").args(args);
        c
    }
}

/// A child killed and reaped when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `cmd` to its end: the milliseconds from spawn to exit (status 0
/// required).
fn start_exit(mut cmd: Command) -> Result<f64> {
    let t0 = Instant::now();
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().context("cannot start it")?;
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let st = child.wait()?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    if !st.success() {
        bail!("it exited with {st}: {}", err.trim());
    }
    Ok(ms)
}

/// One `GET /` to 127.0.0.1:`port`: whether a whole 200 answer came.
fn answers(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET / HTTP/1.0\r\nHost: x\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut text = Vec::new();
    let _ = s.read_to_end(&mut text);
    text.starts_with(b"HTTP/1.") && text.windows(4).any(|w| w == b" 200")
}

/// Starts `cmd` (a server on 127.0.0.1:`port`) and waits for its first
/// answer.
fn start_server(mut cmd: Command, port: u16, log: &Path) -> Result<Running> {
    let f = std::fs::File::create(log)?;
    let child = cmd.stdin(Stdio::null()).stdout(f.try_clone()?).stderr(f).spawn().context("cannot start the server")?;
    let mut server = Running(child);
    let t0 = Instant::now();
    loop {
        if answers(port) {
            return Ok(server);
        }
        if let Some(st) = server.0.try_wait()? {
            bail!("the server exited ({st}) before answering: {}", std::fs::read_to_string(log).unwrap_or_default().trim());
        }
        if t0.elapsed() > TIMEOUT {
            bail!("the server did not answer within {} s", TIMEOUT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// User + system CPU time (ns) of `root`'s process tree so far: each
/// process's own (`/proc/PID/stat`, which keeps its ended threads' time,
/// in clock ticks) and its waited-for children's.
fn tree_cpu_ns(root: u32) -> u64 {
    let ticks: u64 = tree(root)
        .into_iter()
        .filter_map(stat_fields)
        .map(|f| [11, 12, 13, 14].iter().filter_map(|&i| f.get(i).and_then(|v| v.parse::<u64>().ok())).sum::<u64>())
        .sum();
    ticks * 1_000_000_000 / clock_ticks()
}

/// wrk against 127.0.0.1:`port` with `conns` connections for `secs`
/// seconds on `pin`'s client CPU: requests per second, errors and the
/// CPU time (µs) per request of `server`'s process tree meanwhile.
fn wrk(port: u16, conns: usize, secs: u64, pin: Pin, server: u32) -> Result<(f64, u64, f64)> {
    let mut c = Command::new("wrk");
    c.args(["-t", &conns.min(2).to_string(), "-c", &conns.to_string(), "-d", &format!("{secs}s"), "--timeout", "30s"]);
    c.arg(format!("http://127.0.0.1:{port}/"));
    pin_command(&mut c, pin.client);
    let cpu0 = tree_cpu_ns(server);
    let out = c.stdin(Stdio::null()).output().context("cannot run wrk")?;
    let cpu = tree_cpu_ns(server).saturating_sub(cpu0);
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("wrk failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    let rps = wrk_value(&text, "Requests/sec:").ok_or_else(|| anyhow::anyhow!("no Requests/sec in wrk's output: {}", text.trim()))?;
    let n = wrk_requests(&text).filter(|&n| n > 0).ok_or_else(|| anyhow::anyhow!("no requests in wrk's output: {}", text.trim()))?;
    Ok((rps, wrk_errors(&text), cpu as f64 / 1e3 / n as f64))
}

/// Starts `cmd` (an idle program) and waits until it prints `ready`.
fn start_idle(mut cmd: Command) -> Result<Running> {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().context("cannot start it")?;
    let out = child.stdout.take().context("no stdout")?;
    let running = Running(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(TIMEOUT) {
        Ok(l) if l.trim() == "ready" => Ok(running),
        Ok(l) => bail!("it printed {:?} instead of ready", l.trim()),
        Err(_) => bail!("it was not ready within {} s", TIMEOUT.as_secs()),
    }
}

/// PSS (KiB) of `pids`' process trees, with the pages of files in the
/// pool directory `pool` counted at the whole size of each file any of
/// them maps, once (the pool's pages occupy memory in /dev/shm whether
/// mapped or not, as `bench density` counts them).
fn pss_sum(pids: &[u32], pool: Option<&Path>) -> u64 {
    let dir = pool.map(|d| d.to_string_lossy().to_string());
    let (mut all, mut in_pool) = (0, 0);
    let mut files = std::collections::BTreeSet::new();
    for &pid in pids {
        for p in tree(pid) {
            let (a, b) = pss_split_kib(p, dir.as_deref());
            all += a;
            in_pool += b;
            if let Some(d) = &dir {
                let maps = std::fs::read_to_string(format!("/proc/{p}/maps")).unwrap_or_default();
                files.extend(maps.lines().filter_map(|l| l.find(d.as_str()).map(|i| l[i..].trim_end_matches(" (deleted)").to_string())));
            }
        }
    }
    let pool_kib: u64 = files.iter().filter_map(|f| std::fs::metadata(f).ok()).map(|m| m.len()).sum::<u64>() / 1024;
    all - in_pool + pool_kib
}

/// A system's measurement: samples, or why there are none.
type Samples = Result<Vec<f64>, Missing>;

/// Adds `r`'s value to `slot` (the first failure replaces the samples).
fn push(slot: &mut Samples, r: Result<f64>) {
    match (slot.as_mut(), r) {
        (Ok(v), Ok(x)) => v.push(x),
        (Ok(_), Err(e)) => *slot = Err(Missing::Failed(format!("{e:#}"))),
        (Err(_), _) => {}
    }
}

fn stats_json(s: &Samples, unit: &str) -> Value {
    match s {
        Ok(v) if !v.is_empty() => json!({ format!("median_{unit}"): median(v), format!("p95_{unit}"): p95(v) }),
        Ok(_) => Missing::Failed("no samples".into()).json(),
        Err(m) => m.json(),
    }
}

fn mean_json(s: &Samples) -> Value {
    match s {
        Ok(v) if !v.is_empty() => {
            let (m, sd) = mean_sd(v);
            json!({ "mean": m, "sd": sd })
        }
        Ok(_) => Missing::Failed("no samples".into()).json(),
        Err(m) => m.json(),
    }
}

fn med(s: &Samples) -> Option<f64> {
    s.as_ref().ok().filter(|v| !v.is_empty()).map(|v| median(v))
}

fn mean(s: &Samples) -> Option<f64> {
    s.as_ref().ok().filter(|v| !v.is_empty()).map(|v| mean_sd(v).0)
}

/// `a / b`, or null.
fn ratio(a: Option<f64>, b: Option<f64>) -> Value {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => json!(a / b),
        _ => Value::Null,
    }
}

/// The 1-minute load average, for the conditions of a run.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).unwrap_or_default()
}

/// Runs `shoal bench dyn`.
pub fn dyn_exec(o: DynOpts) -> Result<()> {
    if o.repeat == 0 || o.instances == 0 {
        bail!("--repeat and --instances must be at least 1");
    }
    for p in [NODE, PYTHON] {
        if !Path::new(p).is_file() {
            bail!("{p} is not installed (Debian's nodejs and python3.11 packages)");
        }
    }
    std::fs::create_dir_all(&o.out).with_context(|| format!("cannot create {}", o.out.display()))?;
    let shoal = pin_binaries(&o.out.join("bin"))?;
    let tender = shoal.with_file_name("shoal-tender");
    let scripts = o.out.join("scripts");
    std::fs::create_dir_all(&scripts)?;
    for (name, text) in [("hello.js", NODE_HTTP), ("hello.py", PYTHON_HTTP), ("idle.js", NODE_IDLE), ("idle.py", PYTHON_IDLE)] {
        std::fs::write(scripts.join(name), text).with_context(|| format!("cannot write {}", scripts.join(name).display()))?;
    }
    let shm = if Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" };
    let pool = tempfile::Builder::new().prefix("shoal-bench-dyn-pool-").tempdir_in(shm)?;
    let env = Env { shoal, tender, scripts, pool, pin: pin_cpus()? };
    let load_before = loadavg();
    let kvm = kvm_usable();
    let unavailable = |sys: &str| -> Option<Missing> { (sys == "hvt").then(|| kvm.clone().err().map(Missing::Unavailable)).flatten() };
    let fresh = |sys: &str| -> Samples { unavailable(sys).map_or(Ok(Vec::new()), Err) };
    let say = |what: String| {
        if !o.json {
            eprintln!("bench dyn: {what}");
        }
    };

    // Start → exit. The first run of each system is a warm-up, not kept:
    // it builds the instance image (and, for spt-pool, fills the pool).
    let mut start: Vec<Vec<Samples>> = RUNTIMES.iter().map(|_| SYSTEMS.iter().map(|s| fresh(s)).collect()).collect();
    for (ri, rt) in RUNTIMES.iter().enumerate() {
        say(format!("{} {} start → exit", rt.exe, rt.noop.join(" ")));
        for (si, sys) in SYSTEMS.iter().enumerate() {
            if start[ri][si].is_ok() {
                if let Err(e) = start_exit(env.command(sys, false, rt.exe, &rt.noop, None)) {
                    start[ri][si] = Err(Missing::Failed(format!("{e:#}")));
                }
            }
        }
        for _ in 0..o.repeat {
            for (si, sys) in SYSTEMS.iter().enumerate() {
                if start[ri][si].is_ok() {
                    let r = start_exit(env.command(sys, false, rt.exe, &rt.noop, None));
                    push(&mut start[ri][si], r);
                }
            }
        }
    }

    // HTTP hello, pinned; spt-pool maps the same code, so only spt.
    let http_systems: Vec<(usize, &str)> = SYSTEMS.iter().copied().enumerate().filter(|(_, s)| *s != "spt-pool").collect();
    let mut rps: Vec<Vec<Vec<Samples>>> = RUNTIMES.iter().map(|_| CONNS.iter().map(|_| SYSTEMS.iter().map(|s| fresh(s)).collect()).collect()).collect();
    let mut cpu = rps.clone();
    let mut errors = vec![vec![0u64; SYSTEMS.len()]; RUNTIMES.len()];
    for (ri, rt) in RUNTIMES.iter().enumerate() {
        say(format!("{} HTTP hello under wrk", rt.name));
        for _ in 0..o.repeat {
            for &(si, sys) in &http_systems {
                if rps[ri].iter().all(|c| c[si].is_err()) {
                    continue;
                }
                let port = match free_port() {
                    Ok(p) => p,
                    Err(e) => bail!("no free port: {e}"),
                };
                let script = format!("/app/{}", rt.http);
                let mut cmd = match sys {
                    // Natively on loopback only; in a guest on its any
                    // address (its own loopback is not the host's), reached
                    // through the port published on the host's 127.0.0.1.
                    "native" => env.command(sys, false, rt.exe, &[&script, &port.to_string(), "127.0.0.1"], None),
                    _ => env.command(sys, false, rt.exe, &[&script, "8080", "0.0.0.0"], Some(port)),
                };
                pin_command(&mut cmd, env.pin.server);
                let server = match start_server(cmd, port, &o.out.join(format!("{}-{sys}.log", rt.name))) {
                    Ok(s) => s,
                    Err(e) => {
                        for c in rps[ri].iter_mut().chain(cpu[ri].iter_mut()) {
                            c[si] = Err(Missing::Failed(format!("{e:#}")));
                        }
                        continue;
                    }
                };
                for (ci, &conns) in CONNS.iter().enumerate() {
                    match wrk(port, conns, o.secs, env.pin, server.0.id()) {
                        Ok((r, e, us)) => {
                            errors[ri][si] += e;
                            push(&mut rps[ri][ci][si], Ok(r));
                            push(&mut cpu[ri][ci][si], Ok(us));
                        }
                        Err(e) => {
                            push(&mut cpu[ri][ci][si], Err(anyhow::anyhow!("{e:#}")));
                            push(&mut rps[ri][ci][si], Err(e));
                        }
                    }
                }
                drop(server);
            }
        }
    }

    // Idle memory: one instance of each, then --instances Node ones.
    let mut idle: Vec<Vec<Samples>> = RUNTIMES.iter().map(|_| SYSTEMS.iter().map(|s| fresh(s)).collect()).collect();
    let pool_size = |sys: &str| (sys == "spt-pool").then(|| env.pool.path());
    for (ri, rt) in RUNTIMES.iter().enumerate() {
        say(format!("{} idle memory", rt.name));
        for (si, sys) in SYSTEMS.iter().enumerate() {
            if idle[ri][si].is_err() {
                continue;
            }
            let script = format!("/app/{}", rt.idle);
            let r = start_idle(env.command(sys, true, rt.exe, &[&script], None)).map(|c| {
                std::thread::sleep(Duration::from_millis(500));
                pss_sum(&[c.0.id()], pool_size(sys)) as f64
            });
            push(&mut idle[ri][si], r);
        }
    }
    let many_systems = ["spt", "spt-pool", "native"];
    let mut many: Vec<Result<u64, Missing>> = Vec::new();
    for sys in many_systems {
        say(format!("{} idle Node instances on {sys}", o.instances));
        let mut running = Vec::with_capacity(o.instances);
        let started = (0..o.instances).try_for_each(|_| -> Result<()> {
            running.push(start_idle(env.command(sys, true, NODE, &["/app/idle.js"], None))?);
            Ok(())
        });
        many.push(match started {
            Ok(()) => {
                std::thread::sleep(Duration::from_secs(1));
                let pids: Vec<u32> = running.iter().map(|c| c.0.id()).collect();
                Ok(pss_sum(&pids, pool_size(sys)))
            }
            Err(e) => Err(Missing::Failed(format!("{e:#}"))),
        });
        drop(running);
    }
    let load_after = loadavg();

    // JSON.
    let by_sys =
        |f: &dyn Fn(usize) -> Value| -> Value { SYSTEMS.iter().enumerate().map(|(si, s)| (s.to_string(), f(si))).collect::<serde_json::Map<_, _>>().into() };
    let native = SYSTEMS.len() - 1;
    let mut res = serde_json::Map::new();
    res.insert(
        "conditions".into(),
        json!({
            "repeat": o.repeat,
            "wrk_seconds": o.secs,
            "instances": o.instances,
            "pinned": {"server_cpu": env.pin.server, "client_cpu": env.pin.client},
            "loadavg_before": load_before,
            "loadavg_after": load_after,
        }),
    );
    let mut start_json = serde_json::Map::new();
    let mut http_json = serde_json::Map::new();
    let mut idle_json = serde_json::Map::new();
    for (ri, rt) in RUNTIMES.iter().enumerate() {
        let mut s = by_sys(&|si| stats_json(&start[ri][si], "ms"));
        s["spt_over_native"] = ratio(med(&start[ri][0]), med(&start[ri][native]));
        s["spt_pool_over_native"] = ratio(med(&start[ri][1]), med(&start[ri][native]));
        s["hvt_over_native"] = ratio(med(&start[ri][2]), med(&start[ri][native]));
        start_json.insert(rt.name.into(), s);
        let mut h = serde_json::Map::new();
        for (ci, c) in CONNS.iter().enumerate() {
            let mut x: serde_json::Map<String, Value> = http_systems.iter().map(|&(si, s)| (s.to_string(), mean_json(&rps[ri][ci][si]))).collect();
            x.insert("spt_over_native".into(), ratio(mean(&rps[ri][ci][0]), mean(&rps[ri][ci][native])));
            x.insert("hvt_over_native".into(), ratio(mean(&rps[ri][ci][2]), mean(&rps[ri][ci][native])));
            let mut u: serde_json::Map<String, Value> = http_systems.iter().map(|&(si, s)| (s.to_string(), stats_json(&cpu[ri][ci][si], "us"))).collect();
            u.insert("spt_over_native".into(), ratio(med(&cpu[ri][ci][0]), med(&cpu[ri][ci][native])));
            u.insert("hvt_over_native".into(), ratio(med(&cpu[ri][ci][2]), med(&cpu[ri][ci][native])));
            x.insert("server_cpu_us_per_request".into(), u.into());
            h.insert(c.to_string(), x.into());
        }
        h.insert("errors".into(), http_systems.iter().map(|&(si, s)| (s.to_string(), json!(errors[ri][si]))).collect::<serde_json::Map<_, _>>().into());
        http_json.insert(rt.name.into(), h.into());
        idle_json.insert(rt.name.into(), by_sys(&|si| stats_json(&idle[ri][si], "kib")));
    }
    res.insert("start_exit".into(), start_json.into());
    res.insert("http".into(), http_json.into());
    res.insert("idle_pss".into(), idle_json.into());
    let mut m = serde_json::Map::new();
    for (sys, r) in many_systems.iter().zip(&many) {
        m.insert(sys.to_string(), r.as_ref().map_or_else(|e| e.json(), |k| json!({"pss_sum_kib": k})));
    }
    let many_kib = |i: usize| many[i].as_ref().ok().map(|&k| k as f64);
    m.insert("spt_over_native".into(), ratio(many_kib(0), many_kib(2)));
    m.insert("spt_pool_over_native".into(), ratio(many_kib(1), many_kib(2)));
    res.insert("node_idle_instances".into(), m.into());

    // The table: one column per system, the last the ratios to native.
    let mut t = Table::new(["measure", "spt", "spt-pool", "hvt", "native", "ratio to native"]);
    let cell = |s: &Samples, f: &dyn Fn(&[f64]) -> String| -> String {
        match s {
            Ok(v) if !v.is_empty() => f(v),
            Ok(_) => String::new(),
            Err(Missing::Unavailable(_)) => "n/a".into(),
            Err(Missing::Failed(_)) => "FAILED".into(),
        }
    };
    let r2 = |a: Option<f64>, b: Option<f64>| a.zip(b).map_or("–".to_string(), |(a, b)| format!("{:.2}×", a / b));
    let mut csv = Vec::new();
    for (ri, rt) in RUNTIMES.iter().enumerate() {
        let f = |v: &[f64]| format!("{:.0} / {:.0}", median(v), p95(v));
        let row = &start[ri];
        t.row([
            format!("{} {} start → exit, median / p95 (ms)", rt.name, rt.noop.join(" ")),
            cell(&row[0], &f),
            cell(&row[1], &f),
            cell(&row[2], &f),
            cell(&row[3], &f),
            format!("spt {}, pool {}, hvt {}", r2(med(&row[0]), med(&row[3])), r2(med(&row[1]), med(&row[3])), r2(med(&row[2]), med(&row[3]))),
        ]);
        for (si, sys) in SYSTEMS.iter().enumerate() {
            if let Some(m) = med(&row[si]) {
                csv.push(format!("{} start-exit ms,{sys},{m:.1}", rt.name));
            }
        }
    }
    for (ri, rt) in RUNTIMES.iter().enumerate() {
        for (ci, c) in CONNS.iter().enumerate() {
            let row = &rps[ri][ci];
            let f = |v: &[f64]| {
                let (m, sd) = mean_sd(v);
                format!("{m:.0} ± {sd:.0}")
            };
            t.row([
                format!("{} HTTP hello, {c} conn. (req/s)", rt.name),
                cell(&row[0], &f),
                String::new(),
                cell(&row[2], &f),
                cell(&row[3], &f),
                format!("spt {}, hvt {}", r2(mean(&row[0]), mean(&row[3])), r2(mean(&row[2]), mean(&row[3]))),
            ]);
            for &(si, sys) in &http_systems {
                if let Some(m) = mean(&row[si]) {
                    csv.push(format!("{} http {c} conn. req/s,{sys},{m:.1}", rt.name));
                }
            }
            let row = &cpu[ri][ci];
            let f = |v: &[f64]| format!("{:.1}", median(v));
            t.row([
                format!("{} HTTP hello, {c} conn., server CPU per request, median (µs)", rt.name),
                cell(&row[0], &f),
                String::new(),
                cell(&row[2], &f),
                cell(&row[3], &f),
                format!("spt {}, hvt {}", r2(med(&row[0]), med(&row[3])), r2(med(&row[2]), med(&row[3]))),
            ]);
            for &(si, sys) in &http_systems {
                if let Some(m) = med(&row[si]) {
                    csv.push(format!("{} http {c} conn. server cpu us/req,{sys},{m:.1}", rt.name));
                }
            }
        }
    }
    for (ri, rt) in RUNTIMES.iter().enumerate() {
        let row = &idle[ri];
        let f = |v: &[f64]| format!("{:.1}", median(v) / 1024.0);
        t.row([
            format!("{} idle, PSS (MiB)", rt.name),
            cell(&row[0], &f),
            cell(&row[1], &f),
            cell(&row[2], &f),
            cell(&row[3], &f),
            format!("spt {}, pool {}, hvt {}", r2(med(&row[0]), med(&row[3])), r2(med(&row[1]), med(&row[3])), r2(med(&row[2]), med(&row[3]))),
        ]);
    }
    let mc = |i: usize| {
        many[i]
            .as_ref()
            .map_or_else(|e| if matches!(e, Missing::Unavailable(_)) { "n/a".into() } else { "FAILED".into() }, |&k| format!("{:.0}", k as f64 / 1024.0))
    };
    t.row([
        format!("{} idle node, PSS sum (MiB)", o.instances),
        mc(0),
        mc(1),
        String::new(),
        mc(2),
        format!("spt {}, pool {}", r2(many_kib(0), many_kib(2)), r2(many_kib(1), many_kib(2))),
    ]);
    for (i, sys) in many_systems.iter().enumerate() {
        if let Some(k) = many_kib(i) {
            csv.push(format!("{} idle node PSS sum MiB,{sys},{:.1}", o.instances, k / 1024.0));
        }
    }
    for (ri, rt) in RUNTIMES.iter().enumerate() {
        for (si, sys) in SYSTEMS.iter().enumerate() {
            let why = [&start[ri][si], &idle[ri][si]].into_iter().chain(rps[ri].iter().map(|c| &c[si])).find_map(|s| s.as_ref().err().cloned());
            if let Some(Missing::Failed(why)) = why {
                t.note(format!("{} on {sys}", rt.name), format!("failed: {why}"));
            }
        }
        let errs: Vec<String> = http_systems.iter().filter(|&&(si, _)| errors[ri][si] > 0).map(|&(si, s)| format!("{s} {}", errors[ri][si])).collect();
        if !errs.is_empty() {
            t.note(format!("{} HTTP errors", rt.name), errs.join(", "));
        }
    }
    if let Err(why) = &kvm {
        t.note("hvt", format!("unavailable here: {why}"));
    }
    for (sys, r) in many_systems.iter().zip(&many) {
        if let Err(Missing::Failed(why)) = r {
            t.note(format!("{} idle node on {sys}", o.instances), format!("failed: {why}"));
        }
    }
    t.note(
        "conditions",
        format!(
            "{} runs of each (start → exit after one warm-up run); wrk {} s per run, server on CPU {}, wrk on CPU {}; spt-pool: --mem-mode pool, each pool file mapped counted once at its full size; load average {load_before} before, {load_after} after",
            o.repeat, o.secs, env.pin.server, env.pin.client
        ),
    );
    crate::table::write(&o.out.join("dyn.md"), &t.markdown())?;
    let cats: Vec<String> = RUNTIMES.iter().flat_map(|rt| CONNS.iter().map(move |c| format!("{} {c} conn.", rt.name))).collect();
    let series: Vec<crate::plot::BarSeries> = http_systems
        .iter()
        .map(|&(si, s)| crate::plot::BarSeries {
            name: s.to_string(),
            values: (0..RUNTIMES.len())
                .flat_map(|ri| (0..CONNS.len()).map(move |ci| (ri, ci)))
                .map(|(ri, ci)| rps[ri][ci][si].as_ref().ok().filter(|v| !v.is_empty()).map(|v| mean_sd(v)))
                .collect(),
        })
        .collect();
    let frame = crate::plot::Frame { title: "Node and Python HTTP hello, pinned", x_desc: "", y_desc: "req/s", log_x: false, log_y: false };
    crate::write_csv_and_bars("dyn", &o.out, "measure,system,value", &csv, &frame, &cats, &series);
    if o.json {
        println!("{}", serde_json::to_string_pretty(&Value::Object(res))?);
    } else {
        print!("{}", t.text());
        println!("(written to {})", o.out.display());
    }
    Ok(())
}
