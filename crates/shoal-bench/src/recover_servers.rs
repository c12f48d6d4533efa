//! `shoal bench recover`'s server experiments (VampOS),
//! beside the paper's numbers. Every server is the `nginx` or `redis`
//! recipe on spt or hvt, reached over 127.0.0.1 only, with bounded
//! request counts and durations:
//!
//! - **Fig. 7 servers**: nginx serving its static page to `wrk -c 40` for
//!   `--duration` seconds, Redis SET from `redis-benchmark -c 50 -n
//!   --requests`, and the echo server `apps/net/echo.c` (epoll) answering
//!   2,000 64-byte messages, one connection each (VampOS's echo closes
//!   every connection after its answer), without gates (`--no-recover`),
//!   with gates (default) and with gates and logs (`--recover-stateful`,
//!   with `--log-report`): requests/s, the ratios, and the log's memory
//!   when the server ends (stopped with SIGTERM after the load).
//! - **Fig. 6**: the reboot time of each rebootable component of a running
//!   nginx after 1,000 GET requests (one connection each): nginx runs with
//!   `--rejuvenate-every 0.2`; the first reboot line of each component
//!   printed after the 1,000th answer is the one counted. Rejuvenation
//!   runs at the start of a system call, so after the 1,000 GETs one GET
//!   every 50 ms keeps nginx making them until every component has been
//!   rebooted.
//! - **Table V**: nginx under `wrk -c 100` (`siege` is not installed here;
//!   wrk is) for 8 s (each of the 7 components rebooted at least once) while either every component is rebooted in turn
//!   (`--rejuvenate-every 1`) or the whole instance is killed and started
//!   again every second: failed requests (wrk's socket errors and non-2xx
//!   answers) and requests answered.
//!
//! - **Fig. 8**: Redis with its append-only file (`appendfsync always`, so
//!   every SET writes and syncs a file in ramfs, as VampOS's Redis did)
//!   answering one SET every 10 ms on one connection for 4 s while either
//!   ramfs panics (`--inject ramfs:panic@250`, its 250th call, mid-run)
//!   or the whole instance is killed and started again 2 s in: each
//!   request's latency, the longest gap between answers, the failed
//!   requests and whether the keys written before survive.
//!
//! The results come back as JSON, CSV rows and text for `recover.rs`
//! to print beside its own.

use crate::load::{free_port, redis_rps, wrk_error_kinds, wrk_errors, wrk_requests, wrk_value};
use crate::servers::redis_args;
use crate::stats::{fmt, mean_sd};
use crate::Missing;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to accept connections after it starts
/// (generous: the machine is shared, and hvt boots a VM).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The rejuvenation period of the Fig. 6 runs (seconds).
const FIG6_PERIOD: f64 = 0.2;
/// The GET requests before the Fig. 6 reboots are counted.
const FIG6_REQUESTS: usize = 1000;
/// Table V: wrk's connections, its duration and the reboot or restart period.
const TABLE5_CLIENTS: usize = 100;
const TABLE5_SECONDS: f64 = 8.0;
const TABLE5_PERIOD: f64 = 1.0;

/// The configurations of Fig. 7, with their `shoal run` flags.
const CONFIGS: [(&str, &[&str]); 3] = [("no gates", &["--no-recover"]), ("gates", &[]), ("gates+logs", &["--recover-stateful"])];

/// The rebootable components, in the order the tables show them.
const COMPONENTS: [&str; 7] = ["vfs", "ramfs", "time", "process", "sysinfo", "user", "net"];

/// Which of the server experiments to run.
#[derive(Clone, Copy, Default)]
pub struct Sections {
    pub fig7: bool,
    pub fig6: bool,
    pub table5: bool,
    pub fig8: bool,
}

/// What the server experiments need.
pub struct Opts<'a> {
    pub repeat: usize,
    /// wrk's duration in the Fig. 7 runs (seconds).
    pub duration: f64,
    /// redis-benchmark's request count in the Fig. 7 runs.
    pub requests: u64,
    pub out: &'a Path,
    pub shoal: &'a Path,
    pub home: &'a Path,
    pub tenders: &'a [&'static str],
    pub quiet: bool,
    pub sections: Sections,
}

/// The experiments' results: JSON fields, CSV rows
/// (`experiment,system,measure,run,value`) and the text tables.
pub struct Report {
    pub json: serde_json::Map<String, Value>,
    pub csv: String,
    pub text: String,
}

#[derive(Clone, Copy, PartialEq)]
enum App {
    Nginx,
    Redis,
    Echo,
}

impl App {
    fn recipe(self) -> &'static str {
        match self {
            App::Nginx => "nginx",
            App::Redis => "redis",
            App::Echo => "echo",
        }
    }
}

/// One `reboot` line: component, microseconds, calls replayed.
#[derive(Debug, PartialEq)]
pub struct Reboot {
    pub component: String,
    pub us: f64,
    pub replayed: u64,
}

/// The `shoal: rebooted COMPONENT in T µs (replayed N calls)` lines of `err`.
pub fn reboot_lines(err: &str) -> Vec<Reboot> {
    err.lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("shoal: rebooted ")?;
            let (c, rest) = rest.split_once(" in ")?;
            let (t, rest) = rest.split_once(' ')?;
            let replayed = rest.split_once("(replayed ").and_then(|(_, r)| r.split_whitespace().next()).and_then(|n| n.parse().ok()).unwrap_or(0);
            Some(Reboot { component: c.to_string(), us: t.parse().ok()?, replayed })
        })
        .collect()
}

/// A server instance (`shoal run` in its own process group).
struct Instance {
    child: Child,
    log: PathBuf,
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: kill of the process group our own child leads.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Instance {
    /// Stops the server with SIGTERM (so the kernel's exit report is
    /// printed) and waits for it, bounded; the log's size it reported, if
    /// any (`--log-report`).
    fn stop(mut self) -> Option<(f64, f64)> {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        super::recover_shrink::log_at_exit(&self.log_text())
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn log_tail(&self) -> String {
        let s = self.log_text();
        s.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string()
    }
}

/// The built recipes.
struct Images {
    nginx: Option<PathBuf>,
    redis: Option<PathBuf>,
    echo: Option<PathBuf>,
    /// Why there is no nginx or no Redis image: its load generator is not
    /// installed (unavailable) or its build failed.
    nginx_missing: Missing,
    redis_missing: Missing,
}

/// Starts `app` on `tender` with `flags`, its port on 127.0.0.1:`port`,
/// its output appended to `log`, and waits (bounded) until it accepts.
fn start(o: &Opts, image: &Path, app: App, tender: &str, flags: &[&str], port: u16, log: &Path) -> Result<Instance> {
    start_with(o, image, app, tender, flags, port, log, false)
}

/// `start`, with Redis's append-only file on (`aof`; synced at every write).
#[allow(clippy::too_many_arguments)]
fn start_with(o: &Opts, image: &Path, app: App, tender: &str, flags: &[&str], port: u16, log: &Path, aof: bool) -> Result<Instance> {
    let mut c = Command::new(o.shoal);
    c.args(["run", "--tender", tender, "--mem", "512M"]).args(flags);
    if app != App::Echo {
        c.arg("--fs").arg(o.home.join("apps/recipes").join(app.recipe()));
    }
    match app {
        App::Echo => {
            c.args(["-p", &format!("{port}:7000")]).arg(image).args(["--", "epoll", "7000"]);
        }
        App::Nginx => {
            c.args(["-p", &format!("{port}:8080")]).arg(image);
            c.args(["--", "-p", "/", "-c", "nginx.conf", "-g", "pid /tmp/nginx.pid;"]);
        }
        App::Redis => {
            c.args(["-p", &format!("{port}:6379")]).arg(image);
            c.args(["--", "/redis.conf"]);
            if aof {
                c.args(["--port", "6379", "--dir", "/tmp", "--appendonly", "yes", "--appendfsync", "always", "--save", ""]);
            } else {
                c.args(redis_args(6379, "/tmp"));
            }
        }
    }
    let f = fs::OpenOptions::new().create(true).append(true).open(log).with_context(|| format!("cannot open {}", log.display()))?;
    c.stdin(Stdio::null()).stdout(f.try_clone()?).stderr(f).process_group(0);
    let child = c.spawn().context("cannot start shoal run")?;
    let mut inst = Instance { child, log: log.to_path_buf() };
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(st) = inst.child.try_wait()? {
            bail!("{} on {tender} exited ({st}) before accepting connections: {}", app.recipe(), inst.log_tail());
        }
        if t0.elapsed() > READY_TIMEOUT {
            bail!("{} on {tender} did not accept connections within {} s: {}", app.recipe(), READY_TIMEOUT.as_secs(), inst.log_tail());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(inst)
}

/// Waits (bounded) until `port` on 127.0.0.1 can be bound again: a killed
/// instance's tender may hold its listening socket a moment longer.
fn wait_port_free(port: u16) -> Result<()> {
    let t0 = Instant::now();
    while std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
        if t0.elapsed() > Duration::from_secs(10) {
            bail!("127.0.0.1:{port} was still in use 10 s after the instance was killed");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Runs `cmd` to its end, killing it after `limit`.
fn run_bounded(cmd: &mut Command, limit: Duration, what: &str) -> Result<Output> {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().with_context(|| format!("cannot start {what}"))?;
    let t0 = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            return child.wait_with_output().with_context(|| format!("cannot read {what}'s output"));
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} did not finish within {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// wrk's result: requests/s, requests answered, failed requests, its output.
struct Wrk {
    rps: f64,
    requests: u64,
    errors: u64,
    /// See `wrk_error_kinds`.
    kinds: [u64; 5],
}

fn wrk_cmd(port: u16, clients: usize, seconds: f64) -> Command {
    let mut c = Command::new("wrk");
    // Two threads (one per core); a 30 s request timeout, as wrk's 2 s
    // would count slow answers of a loaded machine as failures.
    c.args(["-t", "2", "-c", &clients.to_string(), "-d", &format!("{seconds}s"), "--timeout", "30s"]);
    c.arg(format!("http://127.0.0.1:{port}/index.html"));
    c
}

fn wrk_result(out: &Output) -> Result<Wrk> {
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        bail!("wrk failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    let rps = wrk_value(&text, "Requests/sec:").ok_or_else(|| anyhow::anyhow!("no Requests/sec in wrk's output: {}", text.trim()))?;
    let requests = wrk_requests(&text).ok_or_else(|| anyhow::anyhow!("no request count in wrk's output: {}", text.trim()))?;
    Ok(Wrk { rps, requests, errors: wrk_errors(&text), kinds: wrk_error_kinds(&text) })
}

fn wrk(port: u16, clients: usize, seconds: f64) -> Result<Wrk> {
    let out = run_bounded(&mut wrk_cmd(port, clients, seconds), Duration::from_secs_f64(seconds + 90.0), "wrk")?;
    wrk_result(&out)
}

/// redis-benchmark's SET requests/s against `port`.
fn redis_set(port: u16, requests: u64) -> Result<f64> {
    let mut c = Command::new("redis-benchmark");
    c.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-c", "50", "-n", &requests.to_string(), "-t", "set", "--csv"]);
    let out = run_bounded(&mut c, Duration::from_secs(300), "redis-benchmark")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("redis-benchmark failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    redis_rps(&text, "SET").filter(|r| *r > 0.0).ok_or_else(|| anyhow::anyhow!("no SET row in redis-benchmark's output: {}", text.trim()))
}

/// `n` GET requests to nginx, each on its own connection (so each session
/// opens and closes, as the paper's clients do); Err on the first one that
/// is not answered `200 OK`.
fn gets(port: u16, n: usize) -> Result<()> {
    for i in 0..n {
        let mut s = TcpStream::connect(("127.0.0.1", port)).with_context(|| format!("GET {i}: cannot connect"))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        s.write_all(b"GET /index.html HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").with_context(|| format!("GET {i}: cannot send"))?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).with_context(|| format!("GET {i}: no answer"))?;
        if !answer.starts_with(b"HTTP/1.1 200 OK") {
            bail!("GET {i}: answered {:?}", String::from_utf8_lossy(&answer).lines().next().unwrap_or(""));
        }
    }
    Ok(())
}

fn say(quiet: bool, msg: &str) {
    if !quiet {
        crate::progress::say(&format!("shoal bench recover: {msg}"));
    }
}

fn build(o: &Opts, app: App) -> Result<PathBuf> {
    let image = o.out.join(format!("{}.img", app.recipe()));
    let b = Command::new(o.shoal)
        .args(["recipe", "build", app.recipe(), "-o"])
        .arg(&image)
        .stdin(Stdio::null())
        .output()
        .context("cannot run shoal recipe build")?;
    if !b.status.success() {
        bail!("shoal recipe build {} failed: {}", app.recipe(), String::from_utf8_lossy(&b.stderr).lines().last().unwrap_or("").trim());
    }
    Ok(image)
}

/// Runs the selected experiments.
pub fn run(o: &Opts) -> Report {
    let mut r = Report { json: serde_json::Map::new(), csv: String::new(), text: String::new() };
    let dir = o.out.join("servers");
    let _ = fs::remove_dir_all(&dir);
    if let Err(e) = fs::create_dir_all(&dir) {
        r.text.push_str(&format!("Server experiments: FAILED: cannot create {}: {e}\n", dir.display()));
        return r;
    }
    let missing = |p: &str| crate::host::find_program(p).is_none();
    let nginx_ok = if missing("wrk") { Err("wrk is not installed (Debian package wrk; scripts/setup installs it)".to_string()) } else { Ok(()) };
    let redis_ok = if missing("redis-benchmark") { Err("redis-benchmark is not installed (Debian package redis-tools)".to_string()) } else { Ok(()) };
    say(o.quiet, "building the nginx and redis recipes");
    let needs_redis = o.sections.fig7 || o.sections.fig8;
    let missing = |ok: &Result<(), String>, app: &str| match ok {
        Err(why) => Missing::Unavailable(why.clone()),
        Ok(()) => Missing::Failed(format!("{app} was not built")),
    };
    let images = Images {
        nginx_missing: missing(&nginx_ok, "nginx"),
        redis_missing: missing(&redis_ok, "redis"),
        nginx: nginx_ok
            .clone()
            .map_err(anyhow::Error::msg)
            .and_then(|_| build(o, App::Nginx))
            .map_err(|e| say(o.quiet, &format!("warning: nginx: {e:#}")))
            .ok(),
        redis: if needs_redis {
            redis_ok.clone().map_err(anyhow::Error::msg).and_then(|_| build(o, App::Redis)).map_err(|e| say(o.quiet, &format!("warning: redis: {e:#}"))).ok()
        } else {
            None
        },
        echo: if o.sections.fig7 {
            crate::host::build_pair(&o.home.join("apps/net/echo.c"), o.out, &["-O2"])
                .map(|(image, _)| image)
                .map_err(|e| say(o.quiet, &format!("warning: echo: {e:#}")))
                .ok()
        } else {
            None
        },
    };
    if o.sections.fig7 {
        fig7(o, &images, &dir, &mut r);
    }
    if o.sections.fig6 {
        fig6(o, &images, &dir, &mut r);
    }
    if o.sections.table5 {
        table5(o, &images, &dir, &mut r);
    }
    if o.sections.fig8 {
        fig8(o, &images, &dir, &mut r);
    }
    r
}

/// Fig. 7: nginx and Redis SET throughput without and with the gates and logs.
fn fig7(o: &Opts, images: &Images, dir: &Path, r: &mut Report) {
    // [tender][config] -> runs (requests/s), and the first failure.
    let mut rps: Vec<Vec<[Vec<f64>; 3]>> = vec![vec![[Vec::new(), Vec::new(), Vec::new()]; CONFIGS.len()]; o.tenders.len()];
    let mut failed: Vec<Vec<[Option<String>; 3]>> = vec![vec![[None, None, None]; CONFIGS.len()]; o.tenders.len()];
    // The log's bytes at exit, gates+logs only.
    let mut log_mem: Vec<[Vec<f64>; 3]> = vec![[Vec::new(), Vec::new(), Vec::new()]; o.tenders.len()];
    let mut errors = 0u64;
    for rep in 0..o.repeat {
        say(o.quiet, &format!("Fig. 7 servers, run {}/{}", rep + 1, o.repeat));
        for (ti, t) in o.tenders.iter().enumerate() {
            for (ci, (cname, flags)) in CONFIGS.iter().enumerate() {
                for (ai, app) in [App::Nginx, App::Redis, App::Echo].into_iter().enumerate() {
                    let image = match app {
                        App::Nginx => &images.nginx,
                        App::Redis => &images.redis,
                        App::Echo => &images.echo,
                    };
                    let Some(image) = image else {
                        failed[ti][ci][ai].get_or_insert_with(|| "not built".into());
                        continue;
                    };
                    if failed[ti][ci][ai].is_some() {
                        continue;
                    }
                    let log = dir.join(format!("fig7-{}-{t}-{}.log", app.recipe(), cname.replace([' ', '+'], "-")));
                    let logs = flags.contains(&"--recover-stateful");
                    let with_report: Vec<&str> = flags.iter().copied().chain(logs.then_some("--log-report")).collect();
                    let res = free_port().map_err(anyhow::Error::from).and_then(|port| {
                        let inst = start(o, image, app, t, &with_report, port, &log)?;
                        let v = match app {
                            App::Nginx => {
                                let w = wrk(port, 40, o.duration)?;
                                errors += w.errors;
                                w.rps
                            }
                            App::Redis => redis_set(port, o.requests)?,
                            App::Echo => echo_load(port, ECHO_REQUESTS)?,
                        };
                        let mem = if logs { inst.stop() } else { None };
                        Ok((v, mem))
                    });
                    match res {
                        Ok((v, mem)) => {
                            rps[ti][ci][ai].push(v);
                            if let Some((bytes, _)) = mem {
                                log_mem[ti][ai].push(bytes);
                            }
                        }
                        Err(e) => {
                            say(o.quiet, &format!("warning: {} {t} {cname} failed: {e:#}", app.recipe()));
                            failed[ti][ci][ai] = Some(format!("{e:#}"));
                        }
                    }
                }
            }
        }
    }
    let apps = [("nginx_wrk40", "nginx, wrk -c 40"), ("redis_set", "Redis SET, redis-benchmark -c 50"), ("echo", "echo, 64 B, a connection each")];
    let ratio = |ti: usize, ci: usize, ai: usize| -> Option<f64> {
        let (on, off) = (&rps[ti][ci][ai], &rps[ti][0][ai]);
        (!on.is_empty() && !off.is_empty()).then(|| mean_sd(off).0 / mean_sd(on).0)
    };
    let mut j = serde_json::Map::new();
    r.text.push_str(&format!(
        "Fig. 7 servers: requests/s, mean ± SD of {} runs (nginx: wrk -c 40 -t 2 for {} s on its static page; Redis: {} SETs from redis-benchmark -c 50; echo: {ECHO_REQUESTS} messages of 64 bytes, one connection each); overhead = requests/s without gates / with; log = vfs+ramfs's call log when the server ended (--log-report, after SIGTERM)\n",
        o.repeat, o.duration, o.requests
    ));
    for (ti, t) in o.tenders.iter().enumerate() {
        let mut tj = serde_json::Map::new();
        for (ai, (key, label)) in apps.iter().enumerate() {
            let mut aj = serde_json::Map::new();
            let mut cells = Vec::new();
            for (ci, (cname, _)) in CONFIGS.iter().enumerate() {
                let v = &rps[ti][ci][ai];
                for (run, x) in v.iter().enumerate() {
                    r.csv.push_str(&format!("{key},{t} {cname},requests_per_s,{},{x:.1}\n", run + 1));
                }
                let (m, sd) = mean_sd(v);
                let val = match &failed[ti][ci][ai] {
                    Some(why) => json!({"failed": why}),
                    None => json!({"mean": m, "sd": sd, "runs": v, "overhead": ratio(ti, ci, ai)}),
                };
                aj.insert(cname.to_string(), val);
                let cell = match (&failed[ti][ci][ai], ratio(ti, ci, ai)) {
                    (Some(why), _) => format!("{cname}: FAILED ({})", why.lines().next().unwrap_or("")),
                    (None, Some(x)) if ci > 0 => format!("{cname} {} ({x:.3}×)", fmt(v, 0)),
                    (None, _) => format!("{cname} {}", fmt(v, 0)),
                };
                cells.push(cell);
            }
            let mem = &log_mem[ti][ai];
            for (run, x) in mem.iter().enumerate() {
                r.csv.push_str(&format!("{key},{t} gates+logs,log_bytes_at_exit,{},{x:.0}\n", run + 1));
            }
            if !mem.is_empty() {
                let (m, sd) = mean_sd(mem);
                aj.insert("log_bytes_at_exit".into(), json!({"mean": m, "sd": sd, "runs": mem}));
                cells.push(format!("log {} B", fmt(mem, 0)));
            }
            tj.insert(key.to_string(), Value::Object(aj));
            r.text.push_str(&format!("  {t:<4} {label:<34} {}\n", cells.join("   ")));
        }
        j.insert(t.to_string(), Value::Object(tj));
    }
    j.insert("wrk_failed_requests".into(), json!(errors));
    j.insert("goal_max_overhead".into(), json!(1.10));
    j.insert(
        "vampos_overhead".into(),
        json!({"nginx": "up to 1.46 (Fig. 7)", "redis": "up to 1.46 (Fig. 7)", "note": "VampOS-DaS over Unikraft; its Redis ran with AOF and fsync"}),
    );
    r.text.push_str(&format!(
        "  (goal ≤ 1.10×; VampOS over Unikraft up to 1.46× across SQLite, nginx, Redis and echo; wrk reported {errors} failed requests in these runs)\n\n"
    ));
    r.json.insert("fig7_servers".into(), Value::Object(j));
}

/// Fig. 7 echo: the messages sent, one connection each.
const ECHO_REQUESTS: usize = 2000;

/// Sends `n` 64-byte messages to the echo server on `port`, each on its own
/// connection (connect, write, read the echo back, close), one after the
/// other; requests per second.
fn echo_load(port: u16, n: usize) -> Result<f64> {
    let msg = [b'e'; 64];
    let mut back = [0u8; 64];
    let t0 = Instant::now();
    for i in 0..n {
        let mut s = connect(port).with_context(|| format!("echo: connection {}", i + 1))?;
        s.set_nodelay(true)?;
        s.write_all(&msg)?;
        s.read_exact(&mut back).with_context(|| format!("echo: no answer on connection {}", i + 1))?;
        if back != msg {
            bail!("echo: connection {} answered other bytes", i + 1);
        }
    }
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

/// Fig. 6: reboot time of each component of nginx after 1,000 GETs.
fn fig6(o: &Opts, images: &Images, dir: &Path, r: &mut Report) {
    let mut j = serde_json::Map::new();
    r.text.push_str(&format!(
        "Fig. 6: reboot time of each component of a running nginx after {FIG6_REQUESTS} GET requests (one connection each), µs, from the reboot lines printed after the last answer (--rejuvenate-every {FIG6_PERIOD}; {} runs; mean ± SD, median, samples; calls replayed, mean)\n",
        o.repeat
    ));
    let Some(image) = &images.nginx else {
        r.text.push_str(&format!("  {}\n\n", images.nginx_missing));
        r.json.insert("fig6_nginx_reboot_us".into(), images.nginx_missing.json());
        return;
    };
    for t in o.tenders {
        let mut per: Vec<Vec<f64>> = vec![Vec::new(); COMPONENTS.len()];
        let mut replayed: Vec<Vec<f64>> = vec![Vec::new(); COMPONENTS.len()];
        let mut failure = None;
        for rep in 0..o.repeat {
            say(o.quiet, &format!("Fig. 6 on {t}, run {}/{}", rep + 1, o.repeat));
            let log = dir.join(format!("fig6-{t}-{rep}.log"));
            let res = free_port().map_err(anyhow::Error::from).and_then(|port| {
                let mut inst = start(o, image, App::Nginx, t, &["--rejuvenate-every", &FIG6_PERIOD.to_string()], port, &log)?;
                gets(port, FIG6_REQUESTS)?;
                let mark = inst.log_text().len();
                // Every component is rebooted once per len × period; twice that and some.
                let wait = Duration::from_secs_f64(FIG6_PERIOD * COMPONENTS.len() as f64 * 2.0 + 0.5);
                let t0 = Instant::now();
                loop {
                    // Rejuvenation runs at the start of a system call: an
                    // idle nginx waits in epoll_wait and makes none, so a
                    // GET every 50 ms lets the period's reboots happen.
                    std::thread::sleep(Duration::from_millis(50));
                    gets(port, 1)?;
                    let text = inst.log_text();
                    let after = reboot_lines(text.get(mark..).unwrap_or(""));
                    let all = COMPONENTS.iter().all(|c| after.iter().any(|b| b.component == *c));
                    if all || t0.elapsed() > wait {
                        if let Some(st) = inst.child.try_wait()? {
                            bail!("nginx ended ({st}): {}", inst.log_tail());
                        }
                        // The first reboot of each component after the requests.
                        return Ok(COMPONENTS
                            .iter()
                            .filter_map(|c| after.iter().find(|b| b.component == *c).map(|b| (c.to_string(), b.us, b.replayed)))
                            .collect::<Vec<_>>());
                    }
                }
            });
            match res {
                Ok(v) => {
                    for (c, us, n) in v {
                        if let Some(i) = COMPONENTS.iter().position(|x| *x == c) {
                            per[i].push(us);
                            replayed[i].push(n as f64);
                            r.csv.push_str(&format!("nginx_reboot_after_1000_gets,{t},{c}_us,{},{us:.2}\n", rep + 1));
                        }
                    }
                }
                Err(e) => {
                    say(o.quiet, &format!("warning: Fig. 6 on {t} failed: {e:#}"));
                    failure = Some(format!("{e:#}"));
                    break;
                }
            }
        }
        if let Some(why) = failure {
            r.text.push_str(&format!("  {t:<4} FAILED: {why}\n"));
            j.insert(t.to_string(), json!({"failed": why}));
            continue;
        }
        let mut tj = serde_json::Map::new();
        let mut cells = Vec::new();
        for (ci, c) in COMPONENTS.iter().enumerate() {
            let (m, sd) = mean_sd(&per[ci]);
            let med = crate::stats::median(&per[ci]);
            let rep_mean = if replayed[ci].is_empty() { f64::NAN } else { mean_sd(&replayed[ci]).0 };
            tj.insert(c.to_string(), json!({"mean_us": m, "sd_us": sd, "median_us": med, "samples": per[ci].len(), "replayed_calls_mean": rep_mean}));
            cells.push(format!("{c} {} (median {med:.2}, n={}, replayed {rep_mean:.0})", fmt(&per[ci], 2), per[ci].len()));
        }
        j.insert(t.to_string(), Value::Object(tj));
        r.text.push_str(&format!("  {t:<4} {}\n", cells.join("   ")));
    }
    r.text.push_str("  (VampOS after 1,000 GETs to nginx: PROCESS ≤ 7.4 µs, stateful components ≤ 48 ms; goals here: stateless ≤ 10 µs, stateful ≤ 1 ms)\n\n");
    j.insert("vampos".into(), json!({"process_us": 7.428, "stateful_max_ms": 48}));
    r.json.insert("fig6_nginx_reboot_us".into(), Value::Object(j));
}

/// Table V: failed requests under load with component rejuvenation vs
/// restarting the whole instance.
fn table5(o: &Opts, images: &Images, dir: &Path, r: &mut Report) {
    let mut j = serde_json::Map::new();
    r.text.push_str(&format!(
        "Table V: nginx under wrk -c {TABLE5_CLIENTS} for {TABLE5_SECONDS} s (siege is not installed here; wrk is): failed requests (socket errors + non-2xx) while every component is rebooted in turn (--rejuvenate-every {TABLE5_PERIOD}) vs the whole instance killed and restarted every {TABLE5_PERIOD} s; {} runs\n",
        o.repeat
    ));
    let Some(image) = &images.nginx else {
        r.text.push_str(&format!("  {}\n\n", images.nginx_missing));
        r.json.insert("table5_rejuvenation".into(), images.nginx_missing.json());
        return;
    };
    for t in o.tenders {
        let mut tj = serde_json::Map::new();
        for mode in ["components", "restart"] {
            let mut failed = Vec::new();
            let mut answered = Vec::new();
            let mut events = Vec::new();
            let mut kinds = Vec::new();
            let mut failure = None;
            for rep in 0..o.repeat {
                say(o.quiet, &format!("Table V on {t}, {mode}, run {}/{}", rep + 1, o.repeat));
                let log = dir.join(format!("table5-{t}-{mode}-{rep}.log"));
                let res = free_port().map_err(anyhow::Error::from).and_then(|port| table5_run(o, image, t, mode, port, &log));
                match res {
                    Ok((w, n)) => {
                        failed.push(w.errors as f64);
                        answered.push(w.requests as f64);
                        events.push(n as f64);
                        kinds.push(w.kinds);
                        for (name, v) in ["connect", "read", "write", "timeout", "non_2xx"].iter().zip(w.kinds) {
                            r.csv.push_str(&format!("table5_{mode},{t},errors_{name},{},{v}\n", rep + 1));
                        }
                        r.csv.push_str(&format!("table5_{mode},{t},failed_requests,{},{}\n", rep + 1, w.errors));
                        r.csv.push_str(&format!("table5_{mode},{t},requests,{},{}\n", rep + 1, w.requests));
                        r.csv.push_str(&format!("table5_{mode},{t},reboots_or_restarts,{},{n}\n", rep + 1));
                    }
                    Err(e) => {
                        say(o.quiet, &format!("warning: Table V on {t} ({mode}) failed: {e:#}"));
                        failure = Some(format!("{e:#}"));
                        break;
                    }
                }
            }
            let label = if mode == "components" { "component reboots" } else { "whole-instance restarts" };
            match failure {
                Some(why) => {
                    r.text.push_str(&format!("  {t:<4} {label:<24} FAILED: {why}\n"));
                    tj.insert(mode.into(), json!({"failed": why}));
                }
                None => {
                    let total_failed: f64 = failed.iter().sum();
                    let total: f64 = answered.iter().sum::<f64>() + total_failed;
                    let rate = if total > 0.0 { 100.0 * (1.0 - total_failed / total) } else { f64::NAN };
                    let mut sum = [0u64; 5];
                    for k in &kinds {
                        for (s, v) in sum.iter_mut().zip(k) {
                            *s += v;
                        }
                    }
                    r.text.push_str(&format!(
                        "  {t:<4} {label:<24} failed {} per run, answered {} per run, {} reboots/restarts per run, success {rate:.2}%; all runs: connect {} read {} write {} timeout {} non-2xx {}\n",
                        fmt(&failed, 1),
                        fmt(&answered, 0),
                        fmt(&events, 1),
                        sum[0],
                        sum[1],
                        sum[2],
                        sum[3],
                        sum[4]
                    ));
                    tj.insert(
                        mode.into(),
                        json!({"failed_requests": failed, "requests": answered, "reboots_or_restarts": events, "success_percent": rate,
                            "errors": {"connect": sum[0], "read": sum[1], "write": sum[2], "timeout": sum[3], "non_2xx": sum[4]}}),
                    );
                }
            }
        }
        j.insert(t.to_string(), Value::Object(tj));
    }
    r.text.push_str("  (VampOS: component rejuvenation every 30 s under siege with 100 clients lost no transaction; Unikraft's full reboot lost 64 connections, 25.1%; goal here: zero failed requests with component reboots. A restart resets every open connection (read errors) and wrk reconnects at once while the port is closed, so connect errors count each refused attempt)\n\n");
    r.json.insert("table5_rejuvenation".into(), Value::Object(j));
}

/// One Table V run: wrk's result and the number of reboots (components)
/// or restarts (whole instance).
fn table5_run(o: &Opts, image: &Path, t: &str, mode: &str, port: u16, log: &Path) -> Result<(Wrk, usize)> {
    let period = TABLE5_PERIOD.to_string();
    let flags: Vec<&str> = if mode == "components" { vec!["--rejuvenate-every", &period] } else { vec![] };
    let mut inst = start(o, image, App::Nginx, t, &flags, port, log)?;
    let mut client =
        wrk_cmd(port, TABLE5_CLIENTS, TABLE5_SECONDS).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context("cannot start wrk")?;
    let t0 = Instant::now();
    let mut restarts = 0;
    let mut next = TABLE5_PERIOD;
    let limit = Duration::from_secs_f64(TABLE5_SECONDS + 120.0);
    loop {
        if client.try_wait()?.is_some() {
            break;
        }
        if t0.elapsed() > limit {
            let _ = client.kill();
            let _ = client.wait();
            bail!("wrk did not finish within {} s", limit.as_secs());
        }
        let now = t0.elapsed().as_secs_f64();
        if mode == "restart" && now >= next && now < TABLE5_SECONDS - 0.2 {
            // The whole instance: kill it and start it again on the same port.
            drop(inst);
            wait_port_free(port)?;
            inst = start(o, image, App::Nginx, t, &[], port, log)?;
            restarts += 1;
            next = t0.elapsed().as_secs_f64() + TABLE5_PERIOD;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = client.wait_with_output().context("cannot read wrk's output")?;
    let w = wrk_result(&out)?;
    if mode == "components" {
        let text = inst.log_text();
        if let Ok(Some(st)) = inst.child.try_wait() {
            bail!("nginx ended ({st}) during rejuvenation: {}", inst.log_tail());
        }
        return Ok((w, reboot_lines(&text).len()));
    }
    drop(inst);
    Ok((w, restarts))
}

/// Fig. 8: how long the Fig. 8 client runs, its request period, when the
/// whole instance is restarted, and ramfs's call that panics.
const FIG8_SECONDS: f64 = 4.0;
const FIG8_PERIOD: Duration = Duration::from_millis(10);
const FIG8_RESTART_AT: f64 = 2.0;
const FIG8_PANIC_AT: u32 = 250;

/// One Fig. 8 run: (seconds since the start, latency in ms or None for a
/// failed request) per request, when the failure happened (seconds; the
/// reboot line's appearance or the restart), and whether the first key
/// written was still there at the end.
struct Fig8Run {
    samples: Vec<(f64, Option<f64>)>,
    event_s: Option<f64>,
    first_key_kept: bool,
}

/// Sends `cmd` (an inline Redis command) on `s` and reads one reply line.
fn redis_line(s: &mut TcpStream, cmd: &str) -> Result<String> {
    s.write_all(cmd.as_bytes())?;
    s.write_all(b"\r\n")?;
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n") {
        if s.read(&mut b)? == 0 {
            bail!("connection closed");
        }
        buf.push(b[0]);
        if buf.len() > 4096 {
            bail!("reply too long");
        }
    }
    Ok(String::from_utf8_lossy(&buf).trim_end().to_string())
}

fn connect(port: u16) -> Result<TcpStream> {
    let s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// The longest time (ms) between two answered requests (from the previous
/// answer's send time to the next answer's completion), and the largest
/// latency (ms).
pub fn fig8_gap_and_max(samples: &[(f64, Option<f64>)]) -> (f64, f64) {
    let mut gap: f64 = 0.0;
    let mut max: f64 = 0.0;
    let mut last: Option<f64> = None;
    for (t, lat) in samples {
        if let Some(l) = lat {
            let done = t + l / 1000.0;
            if let Some(p) = last {
                gap = gap.max((done - p) * 1000.0);
            }
            last = Some(done);
            max = max.max(*l);
        }
    }
    (gap, max)
}

fn fig8_run(o: &Opts, image: &Path, t: &str, mode: &str, port: u16, log: &Path) -> Result<Fig8Run> {
    let inject = format!("ramfs:panic@{FIG8_PANIC_AT}");
    let flags: Vec<&str> = if mode == "component" { vec!["--inject", &inject] } else { vec![] };
    let first = start_with(o, image, App::Redis, t, &flags, port, log, true)?;
    std::thread::scope(|scope| fig8_client(o, image, t, mode, port, log, first, scope))
}

/// The client loop of `fig8_run`; a restart runs in a thread of `scope`
/// so the client keeps sending (and failing) while the instance is down.
#[allow(clippy::too_many_arguments)]
fn fig8_client<'s, 'e: 's>(
    o: &'e Opts,
    image: &'e Path,
    t: &'e str,
    mode: &str,
    port: u16,
    log: &'e Path,
    first: Instance,
    scope: &'s std::thread::Scope<'s, 'e>,
) -> Result<Fig8Run> {
    let mut inst = Some(first);
    let mut restarting: Option<std::thread::ScopedJoinHandle<'s, Result<Instance>>> = None;
    let mut conn = Some(connect(port)?);
    let t0 = Instant::now();
    let mut samples = Vec::new();
    let mut event_s = None;
    let mut restarted = false;
    let mut i = 0u64;
    while t0.elapsed().as_secs_f64() < FIG8_SECONDS {
        let at = t0.elapsed().as_secs_f64();
        if mode == "restart" && !restarted && at >= FIG8_RESTART_AT {
            // The whole instance: killed and started again on the same port.
            drop(conn.take());
            drop(inst.take());
            event_s = Some(t0.elapsed().as_secs_f64());
            restarting = Some(scope.spawn(move || {
                wait_port_free(port)?;
                start_with(o, image, App::Redis, t, &[], port, log, true)
            }));
            restarted = true;
        }
        if restarting.as_ref().is_some_and(|h| h.is_finished()) {
            let h = restarting.take().ok_or_else(|| anyhow::anyhow!("no restart"))?;
            inst = Some(h.join().map_err(|_| anyhow::anyhow!("the restart thread panicked"))??);
        }
        let sent = Instant::now();
        let ok = (|| -> Result<()> {
            if conn.is_none() {
                conn = Some(connect(port)?);
            }
            let s = conn.as_mut().ok_or_else(|| anyhow::anyhow!("no connection"))?;
            let reply = redis_line(s, &format!("SET key:{i} v{i}"))?;
            anyhow::ensure!(reply == "+OK", "SET answered {reply}");
            Ok(())
        })();
        let lat = sent.elapsed().as_secs_f64() * 1000.0;
        match ok {
            Ok(()) => samples.push((at, Some(lat))),
            Err(_) => {
                conn = None;
                samples.push((at, None));
            }
        }
        if mode == "component" && event_s.is_none() && inst.as_ref().is_some_and(|i| i.log_text().contains("shoal: rebooted ramfs")) {
            event_s = Some(t0.elapsed().as_secs_f64());
        }
        i += 1;
        std::thread::sleep(FIG8_PERIOD.saturating_sub(sent.elapsed()));
    }
    if let Some(h) = restarting.take() {
        inst = Some(h.join().map_err(|_| anyhow::anyhow!("the restart thread panicked"))??);
    }
    let inst = inst.as_mut().ok_or_else(|| anyhow::anyhow!("no instance"))?;
    if let Some(st) = inst.child.try_wait()? {
        bail!("redis ended ({st}): {}", inst.log_tail());
    }
    let s = match conn.as_mut() {
        Some(s) => s,
        None => conn.insert(connect(port)?),
    };
    let first_key_kept = redis_line(s, "EXISTS key:0")? == ":1";
    Ok(Fig8Run { samples, event_s, first_key_kept })
}

/// Fig. 8: Redis latency across an injected ramfs panic vs a full restart.
fn fig8(o: &Opts, images: &Images, dir: &Path, r: &mut Report) {
    let mut j = serde_json::Map::new();
    r.text.push_str(&format!(
        "Fig. 8: Redis (append-only file synced at every write) answering one SET every {} ms on one connection for {FIG8_SECONDS} s, across a ramfs panic (--inject ramfs:panic@{FIG8_PANIC_AT}) vs the whole instance restarted at {FIG8_RESTART_AT} s; {} runs: median and max latency, the longest gap between answers, failed requests, keys kept\n",
        FIG8_PERIOD.as_millis(),
        o.repeat
    ));
    let Some(image) = &images.redis else {
        r.text.push_str(&format!("  {}\n\n", images.redis_missing));
        r.json.insert("fig8_redis_latency".into(), images.redis_missing.json());
        return;
    };
    for t in o.tenders {
        let mut tj = serde_json::Map::new();
        for mode in ["component", "restart"] {
            let mut runs = Vec::new();
            let mut failure = None;
            for rep in 0..o.repeat {
                say(o.quiet, &format!("Fig. 8 on {t}, {mode}, run {}/{}", rep + 1, o.repeat));
                let log = dir.join(format!("fig8-{t}-{mode}-{rep}.log"));
                match free_port().map_err(anyhow::Error::from).and_then(|port| fig8_run(o, image, t, mode, port, &log)) {
                    Ok(run) => {
                        for (at, lat) in &run.samples {
                            let v = lat.map_or("failed".to_string(), |l| format!("{l:.3}"));
                            r.csv.push_str(&format!("fig8_{mode},{t},latency_ms_at_{at:.3}s,{},{v}\n", rep + 1));
                        }
                        runs.push(run);
                    }
                    Err(e) => {
                        say(o.quiet, &format!("warning: Fig. 8 on {t} ({mode}) failed: {e:#}"));
                        failure = Some(format!("{e:#}"));
                        break;
                    }
                }
            }
            let label = if mode == "component" { "ramfs panic, reboot" } else { "whole-instance restart" };
            if let Some(why) = failure {
                r.text.push_str(&format!("  {t:<4} {label:<23} FAILED: {why}\n"));
                tj.insert(mode.into(), json!({"failed": why}));
                continue;
            }
            let mut medians = Vec::new();
            let mut maxes = Vec::new();
            let mut gaps = Vec::new();
            let mut failed = Vec::new();
            let mut kept = 0;
            let mut events = Vec::new();
            for run in &runs {
                let lats: Vec<f64> = run.samples.iter().filter_map(|(_, l)| *l).collect();
                medians.push(crate::stats::median(&lats));
                let (gap, max) = fig8_gap_and_max(&run.samples);
                gaps.push(gap);
                maxes.push(max);
                failed.push(run.samples.iter().filter(|(_, l)| l.is_none()).count() as f64);
                kept += usize::from(run.first_key_kept);
                events.push(run.event_s);
            }
            r.text.push_str(&format!(
                "  {t:<4} {label:<23} median {} ms, max {} ms, longest gap {} ms, failed {} per run, first key kept in {kept}/{} runs, failure at {} s\n",
                fmt(&medians, 3),
                fmt(&maxes, 2),
                fmt(&gaps, 2),
                fmt(&failed, 1),
                runs.len(),
                events.iter().map(|e| e.map_or("-".to_string(), |x| format!("{x:.2}"))).collect::<Vec<_>>().join(", ")
            ));
            tj.insert(
                mode.into(),
                json!({"median_ms": medians, "max_ms": maxes, "gap_ms": gaps, "failed_requests": failed, "first_key_kept_runs": kept, "runs": runs.len(), "failure_at_s": events}),
            );
        }
        j.insert(t.to_string(), Value::Object(tj));
    }
    r.text.push_str("  (VampOS: Redis kept its latency across a 9PFS panic; Unikraft's full reboot failed requests and restored its keys from the AOF. Here a restart loses the instance's ramfs and with it the AOF: the keys are gone)\n\n");
    r.json.insert("fig8_redis_latency".into(), Value::Object(j));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_reboot_lines_with_their_replay_counts() {
        let err = "nginx: ready\nshoal: rebooted vfs in 27.5 µs (replayed 37 calls)\nshoal: rebooted time in 0.4 µs\n";
        assert_eq!(
            reboot_lines(err),
            vec![Reboot { component: "vfs".into(), us: 27.5, replayed: 37 }, Reboot { component: "time".into(), us: 0.4, replayed: 0 }]
        );
        assert!(reboot_lines("shoal: rebooted vfs in soon\n").is_empty());
    }

    #[test]
    fn reads_wrk_request_counts() {
        let text = "Running 6s test @ http://127.0.0.1:1/index.html\n  2 threads and 100 connections\n  12345 requests in 6.00s, 3.1MB read\n  Socket errors: connect 3, read 2, write 0, timeout 0\nRequests/sec:   2057.50\n";
        assert_eq!(wrk_requests(text), Some(12345));
        assert_eq!(wrk_errors(text), 5);
        assert_eq!(wrk_requests("Requests/sec: 1\n"), None);
        let t = "  Socket errors: connect 7, read 100, write 2, timeout 1\n  Non-2xx or 3xx responses: 4\n";
        assert_eq!(wrk_error_kinds(t), [7, 100, 2, 1, 4]);
        assert_eq!(wrk_error_kinds("Requests/sec: 1\n"), [0; 5]);
    }

    #[test]
    fn fig8_gap_spans_failed_requests() {
        // Answers at 0.001 s and 0.012 s, two failures, one at 0.041 s.
        let s = [(0.0, Some(1.0)), (0.01, Some(2.0)), (0.02, None), (0.03, None), (0.04, Some(1.0))];
        let (gap, max) = fig8_gap_and_max(&s);
        assert!((gap - 29.0).abs() < 1e-9, "{gap}");
        assert_eq!(max, 2.0);
        assert_eq!(fig8_gap_and_max(&[]), (0.0, 0.0));
    }
}
