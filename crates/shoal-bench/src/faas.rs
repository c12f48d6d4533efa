//! `shoal bench faas`: the FaaS paper's experiments (§4, Figs. 3–13) run
//! through a real `shoal serve`, on the backends spt, hvt, process, runc
//! and runsc, each beside the paper's figure.
//!
//! The bench starts `shoal serve` on 127.0.0.1 (port 0, a temporary
//! `--state`), deploys the example functions of apps/functions (built by
//! apps/functions/build.sh into OUT/functions) through its management API
//! and measures from the client side, as the paper's harness did:
//!
//! - cold-start (Fig. 3): one request with no instance running, `--repeat`
//!   times, C no-op and the Lua runtime (the paper's Node.js);
//! - burst (Fig. 4): N concurrent first requests, each on a new instance;
//! - startup-cost (Fig. 5): host CPU time of the instance's processes from
//!   launch to its first answer;
//! - idle-cpu (Fig. 6): host CPU time of a warm idle instance over 10 s;
//! - idle-memory (Fig. 7): MemAvailable delta and summed PSS for N idle
//!   instances;
//! - workloads (Figs. 8–10, 12–13): warm fib, matmul, alloc, fileread and
//!   the static file's throughput with 4 clients;
//! - two-write (not in the paper): warm requests of the no-op, whose
//!   answer is one `write`, beside `twowrite`, which writes its head and
//!   body in two (Nagle on the function's side against delayed ACKs on the
//!   gateway's upstream connection);
//! - concurrency (Fig. 11): `hey` straight to one instance and through the
//!   gateway at 1 … 4096 clients;
//! - go (the paper's functions are Go): the Go functions of
//!   apps/functions/go (static executables: spt and hvt run the instance
//!   image built around the file, the native backends the file itself)
//!   beside the C ones: cold start and warm latency of the no-op, warm
//!   fib, and the largest `--bursts` size of concurrent Go cold starts;
//! - node: seed 002's Node.js functions (apps/functions/node) served by the
//!   Node.js function runtime (the host's node) on every backend, with the
//!   largest `--bursts` size of concurrent Node.js cold starts ([`node`]).
//!
//! CPU time is read from /proc (each thread's schedstat run time in ns,
//! plus the CPU time of reaped children): hardware counters, which the
//! paper's instruction counts come from, are not available here. Each
//! experiment writes OUT/EXPERIMENT.csv (raw samples), OUT/EXPERIMENT.svg and .png
//! and OUT/EXPERIMENT.md (its table with the paper's column); the summary
//! (one row per experiment) and the goals go to OUT/summary.md.

use crate::load::{http, run_hey, HeyResult, LoadError, Reply};
use crate::plot::{self, BarSeries, Frame, Line};
use crate::progress::Progress;
use crate::sample::{alive, children_map, cpu_ns, descendants, meminfo_kib, pss_kib, threads_cpu_ns, CallUsage, Usage};
use crate::stats::{fixed, stats};
use crate::table;
use crate::BenchError;
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// The experiments, in the order they run (`--only` names).
pub const EXPERIMENTS: [&str; 11] =
    ["cold-start", "burst", "startup-cost", "idle-cpu", "idle-memory", "workloads", "two-write", "concurrency", "go", "node", "templates"];

mod node;

/// The backends, in the order of every table.
pub const BACKENDS: [&str; 5] = ["spt", "hvt", "process", "runc", "runsc"];

/// How long one request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(180);

/// The gateway's timeout for the no-op's cold starts (cold-start, burst,
/// startup-cost, idle-cpu, idle-memory): a start that has not answered by
/// then has failed. With the 180 s of [`REQUEST_TIMEOUT`], one runsc
/// start that never answered (2026-11-26, load average 9) cost the full
/// run three minutes.
const COLD_TIMEOUT_MS: u64 = 60_000;

/// How long stopped instances may take to disappear.
const GONE_TIMEOUT: Duration = Duration::from_secs(120);

/// Requests the gateway forwards at once to the concurrency experiment's
/// instance (more wait in its queue): the example functions start a thread
/// with a 256 KiB stack per connection, so 1,024 connections fill a 256 MiB
/// instance and it drops connections (hey straight to it sees EOFs at 1,024
/// clients); 512 leave it room.
const CC_CONCURRENCY: u32 = 512;

/// `fib?n=` of the CPU workload: about 0.1 s natively here (the paper's
/// iterative Fibonacci of 10^9 is a loop of the same kind: no system calls).
const FIB_N: u32 = 35;

/// Before each timed warm call, the workloads experiment waits until every
/// warm instance has used less than [`QUIET_CPU`] of CPU time in one
/// [`QUIET_WINDOW`] (at most [`QUIET_TIMEOUT`]): one function is measured at
/// a time, as in the paper, and not beside the work another instance still
/// does after it answered. runsc's sandbox, after answering a 50 MiB
/// fileread, used 6–8 ms more CPU in the next 20 ms (and a few 0.1 ms
/// bursts up to 0.9 s later); in the bench's round order that landed on
/// spt's fib, 15.6 ms median after runsc against 13.6 after runc
/// (2026-11-26, quiet machine). An idle instance uses no CPU (runsc's
/// sandbox about 0.4 ms a second), far below the threshold.
const QUIET_WINDOW: Duration = Duration::from_millis(20);
/// See [`QUIET_WINDOW`]: 1% of one CPU over the window.
const QUIET_CPU: Duration = Duration::from_micros(200);
/// See [`QUIET_WINDOW`]: a call made after this long without quiet is
/// timed anyway, and counted.
const QUIET_TIMEOUT: Duration = Duration::from_secs(2);

/// What `shoal bench faas` was asked to do.
pub struct FaasOpts {
    pub only: Vec<String>,
    pub backends: Vec<String>,
    pub repeat: usize,
    pub requests: usize,
    pub bursts: Vec<usize>,
    pub instances: Vec<usize>,
    pub max_clients: usize,
    pub out: PathBuf,
    pub json: bool,
}

/// Failures of the bench's own machinery (not of one backend, which is
/// only reported as unavailable or failed).
#[derive(Debug, thiserror::Error)]
pub enum FaasError {
    /// An option's value makes no experiment possible.
    #[error("--{flag} {value}: {why}")]
    BadOption { flag: &'static str, value: String, why: &'static str },
    /// A request to the gateway failed, or hey's output could not be read.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The gateway refused a management request.
    #[error("{method} {path}: the gateway answered {status}: {body}")]
    Refused { method: String, path: String, status: u16, body: String },
    /// `shoal serve` did not come up.
    #[error("shoal serve did not start: {0}")]
    Gateway(String),
    /// Instances did not go away after being stopped.
    #[error("{0} instance processes were still running {1} s after being stopped")]
    NotGone(usize, u64),
}

// ------------------------------------------------------------------ gateway

/// A `shoal serve` process of this bench.
struct Gateway {
    child: Child,
    addr: SocketAddr,
    /// Its API token (`STATE/token`).
    token: String,
    _state: tempfile::TempDir,
}

/// An instance as `GET /instances` shows it.
struct Inst {
    pid: u32,
    addr: SocketAddr,
    /// runc/runsc: its own network namespace, where `addr` is.
    netns: Option<String>,
}

impl Gateway {
    /// Starts `shoal serve` on 127.0.0.1, port 0, its stderr into `log`,
    /// with the `process` backend (the comparison) and deploys from the
    /// functions' directory `fns` allowed.
    fn start(shoal: &Path, log: &Path, fns: &Path) -> Result<Gateway> {
        let state = tempfile::Builder::new().prefix("shoal-bench-faas-state-").tempdir().context("cannot make a state directory")?;
        let mut child = Command::new(shoal)
            .args(["serve", "--listen", "127.0.0.1:0", "--allow-process", "--allow-path"])
            .arg(fns)
            .arg("--state")
            .arg(state.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).with_context(|| format!("cannot create {}", log.display()))?)
            .spawn()
            .context("cannot start shoal serve")?;
        let mut out = BufReader::new(child.stdout.take().context("no stdout of shoal serve")?);
        let mut line = String::new();
        let _ = out.read_line(&mut line);
        let addr = line.strip_prefix("listening on http://").and_then(|l| l.split_whitespace().next()).and_then(|a| a.parse().ok());
        let Some(addr) = addr else {
            let _ = child.kill();
            let _ = child.wait();
            let err = std::fs::read_to_string(log).unwrap_or_default();
            return Err(FaasError::Gateway(format!("it said {:?}; its stderr: {}", line.trim(), err.trim())).into());
        };
        // Keep draining stdout so the gateway never blocks on it.
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut out, &mut std::io::sink());
        });
        let token = std::fs::read_to_string(state.path().join("token")).context("the gateway wrote no token file")?.trim().to_string();
        Ok(Gateway { child, addr, token, _state: state })
    }

    /// A management request whose answer must be 2xx.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Reply, FaasError> {
        let b = body.map(|v| v.to_string().into_bytes());
        let r = http(self.addr, Some(&self.token), method, path, b.as_deref(), true, Duration::from_secs(60))?;
        if !(200..300).contains(&r.status) {
            return Err(FaasError::Refused { method: method.into(), path: path.into(), status: r.status, body: r.text() });
        }
        Ok(r)
    }

    fn deploy(&self, name: &str, settings: &Value) -> Result<(), FaasError> {
        self.call("PUT", &format!("/functions/{name}"), Some(settings)).map(|_| ())
    }

    /// Removes `name` (nothing if it is not deployed).
    fn remove(&self, name: &str) -> Result<(), FaasError> {
        match self.call("DELETE", &format!("/functions/{name}"), None) {
            Err(FaasError::Refused { status: 404, .. }) => Ok(()),
            r => r.map(|_| ()),
        }
    }

    fn instances(&self, name: &str) -> Result<Vec<Inst>> {
        let r = self.call("GET", "/instances", None)?;
        let v: Value = serde_json::from_slice(&r.body).context("GET /instances: the answer is not JSON")?;
        Ok(v.as_array()
            .map(|a| a.as_slice())
            .unwrap_or_default()
            .iter()
            .filter(|i| i["function"] == name)
            .filter_map(|i| {
                Some(Inst { pid: i["pid"].as_u64()? as u32, addr: i["address"].as_str()?.parse().ok()?, netns: i["netns"].as_str().map(str::to_string) })
            })
            .collect())
    }

    /// Invokes `/fn/NAME{rest}` and returns the answer, whatever its status.
    fn invoke(&self, name: &str, rest: &str, keep: bool) -> Result<Reply, FaasError> {
        Ok(http(self.addr, None, "GET", &format!("/fn/{name}{rest}"), None, keep, REQUEST_TIMEOUT)?)
    }

    /// Writes the instance output of `names` (`GET /functions/NAME/logs`)
    /// to `path`.
    fn save_logs(&self, names: &[String], path: &Path) -> Result<()> {
        let mut all = Vec::new();
        for name in names {
            all.extend(self.call("GET", &format!("/functions/{name}/logs"), None)?.body);
        }
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(path, all).with_context(|| format!("cannot write {}", path.display()))
    }

    /// What the gateway said about `name`'s instances (its "gateway" log
    /// lines: starts, exits and their signals), the last `n`, in one line:
    /// why an answer ended early is there, not in the answer.
    fn gateway_notes(&self, name: &str, n: usize) -> String {
        let Ok(r) = self.call("GET", &format!("/functions/{name}/logs"), None) else { return String::new() };
        let notes: Vec<String> = String::from_utf8_lossy(&r.body)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["stream"] == "gateway")
            .filter_map(|v| Some(format!("instance {}: {}", v["instance"], v["line"].as_str()?)))
            .collect();
        notes[notes.len().saturating_sub(n)..].join("; ")
    }

    /// The running instances of any of `names`.
    fn instances_of(&self, names: &[String]) -> Result<Vec<Inst>> {
        let r = self.call("GET", "/instances", None)?;
        let v: Value = serde_json::from_slice(&r.body).context("GET /instances: the answer is not JSON")?;
        let want: BTreeSet<&str> = names.iter().map(String::as_str).collect();
        Ok(v.as_array()
            .map(|a| a.as_slice())
            .unwrap_or_default()
            .iter()
            .filter(|i| i["function"].as_str().is_some_and(|f| want.contains(f)))
            .filter_map(|i| {
                Some(Inst { pid: i["pid"].as_u64()? as u32, addr: i["address"].as_str()?.parse().ok()?, netns: i["netns"].as_str().map(str::to_string) })
            })
            .collect())
    }

    /// Removes every function of `names` and waits until their instances'
    /// processes are gone.
    fn clear_many(&self, names: &[String]) -> Result<()> {
        let kids = children_map();
        let pids: Vec<u32> = self.instances_of(names)?.iter().flat_map(|i| descendants(&kids, i.pid)).collect();
        for name in names {
            self.remove(name)?;
        }
        wait_gone(&pids)
    }

    /// Every process of `name`'s running instances.
    fn pids(&self, name: &str) -> Result<Vec<u32>> {
        let kids = children_map();
        let mut roots: Vec<u32> = self.instances(name)?.iter().map(|i| i.pid).collect();
        roots.extend(self.template_pid(name)?);
        Ok(roots.into_iter().flat_map(|p| descendants(&kids, p)).collect())
    }

    /// Removes `name` and waits until its instances' processes are gone.
    fn clear(&self, name: &str) -> Result<()> {
        let pids = self.pids(name)?;
        self.remove(name)?;
        wait_gone(&pids)?;
        self.settle()
    }

    /// Waits until every child process of the gateway is a running
    /// instance (or the gateway's template watcher): the commands it runs to remove a stopped container
    /// (`runc kill`, `runc delete --force`: Go programs, tens of ms of CPU
    /// each) outlive the container's own processes, and a cold start timed
    /// while they run paid for them (spt's no-op measured 5.4 ms median
    /// right after a runc instance's removal, 3.4 ms with no runc in the
    /// run, on the same loaded machine).
    fn settle(&self) -> Result<()> {
        let t0 = Instant::now();
        loop {
            let kids = children_map().remove(&self.child.id()).unwrap_or_default();
            let instances: BTreeSet<u32> = self.all_instances()?.into_iter().collect();
            // The gateway's watcher (it ends what its templates left when
            // the gateway ends) is its child for the gateway's whole life.
            let watcher = |k: u32| std::fs::read_to_string(format!("/proc/{k}/comm")).is_ok_and(|c| c.trim_end() == shoal_spt::WATCHER_NAME);
            let extra = kids.iter().filter(|k| !instances.contains(k) && alive(**k) && !watcher(**k)).count();
            if extra == 0 {
                return Ok(());
            }
            if t0.elapsed() > GONE_TIMEOUT {
                return Err(FaasError::NotGone(extra, GONE_TIMEOUT.as_secs()).into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The pids of every running instance and template, of any function.
    fn all_instances(&self) -> Result<Vec<u32>> {
        let mut pids = Vec::new();
        for path in ["/instances", "/templates"] {
            let r = self.call("GET", path, None)?;
            let v: Value = serde_json::from_slice(&r.body).with_context(|| format!("GET {path}: the answer is not JSON"))?;
            pids.extend(v.as_array().map(|a| a.as_slice()).unwrap_or_default().iter().filter_map(|i| Some(i["pid"].as_u64()? as u32)));
        }
        Ok(pids)
    }

    /// The pid of `name`'s template, if it has one running.
    fn template_pid(&self, name: &str) -> Result<Option<u32>> {
        let r = self.call("GET", "/templates", None)?;
        let v: Value = serde_json::from_slice(&r.body).context("GET /templates: the answer is not JSON")?;
        Ok(v.as_array().map(|a| a.as_slice()).unwrap_or_default().iter().find(|t| t["function"] == name).and_then(|t| Some(t["pid"].as_u64()? as u32)))
    }

    /// Deploys `name` afresh with no instance running.
    fn deploy_cold(&self, name: &str, settings: &Value) -> Result<()> {
        self.clear(name)?;
        self.deploy(name, settings)?;
        Ok(())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // SIGTERM: the gateway stops its instances (containers included).
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ------------------------------------------------------------------- waits

fn wait_gone(pids: &[u32]) -> Result<()> {
    let t0 = Instant::now();
    loop {
        let left = pids.iter().filter(|p| alive(**p)).count();
        if left == 0 {
            return Ok(());
        }
        if t0.elapsed() > GONE_TIMEOUT {
            return Err(FaasError::NotGone(left, GONE_TIMEOUT.as_secs()).into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until `pids` together use less than [`QUIET_CPU`] of CPU time in
/// one [`QUIET_WINDOW`], at most [`QUIET_TIMEOUT`]: how long it waited and
/// whether they went quiet.
fn wait_quiet(pids: &[u32]) -> (Duration, bool) {
    wait_quiet_by(|| cpu_ns(pids))
}

/// [`wait_quiet`] over any CPU-time reading (`cpu`, in ns), so that its
/// give-up path can be tested without a process that must win the CPU on
/// a loaded machine.
fn wait_quiet_by(mut cpu: impl FnMut() -> u64) -> (Duration, bool) {
    let t0 = Instant::now();
    let mut before = cpu();
    loop {
        std::thread::sleep(QUIET_WINDOW);
        let now = cpu();
        if now.saturating_sub(before) < QUIET_CPU.as_nanos() as u64 {
            return (t0.elapsed(), true);
        }
        if t0.elapsed() >= QUIET_TIMEOUT {
            return (t0.elapsed(), false);
        }
        before = now;
    }
}

// ---------------------------------------------------------------- functions

/// The built example functions.
struct Fns {
    dir: PathBuf,
    /// Why the Lua runtime is missing, if it is.
    lua_missing: Option<String>,
    /// Why the Go functions are missing, if they are.
    go_missing: Option<String>,
}

impl Fns {
    /// Builds apps/functions into `dir` with apps/functions/build.sh.
    fn build(shoal: &Path, dir: &Path) -> Result<Fns> {
        let paths = shoal_toolchain::Paths::discover()?;
        let script = paths.home.join("apps/functions/build.sh");
        say(&format!("building the example functions into {} (apps/functions/build.sh)", dir.display()));
        let o = Command::new("bash").arg(&script).arg(dir).env("SHOAL", shoal).stdin(Stdio::null()).output().context("cannot run apps/functions/build.sh")?;
        let err = String::from_utf8_lossy(&o.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        for f in ["noop", "noop.native", "twowrite", "twowrite.native", "fib", "matmul", "alloc", "static", "fileread", "fs/data.bin"] {
            anyhow::ensure!(dir.join(f).is_file(), "apps/functions/build.sh did not make {} ({}): {}", dir.join(f).display(), o.status, tail.join(" / "));
        }
        let lua_missing = if dir.join("lua").is_file() && dir.join("lua.native").is_file() && dir.join("lua-fs/handler.lua").is_file() {
            None
        } else if o.status.success() {
            Some("apps/functions/build.sh does not build the Lua runtime (OUT/lua, OUT/lua-fs/handler.lua)".to_string())
        } else {
            Some(format!("apps/functions/build.sh failed before the Lua runtime was built: {}", tail.join(" / ")))
        };
        let go_built = ["go-noop", "go-noop.native", "go-fib", "go-fib.native"].iter().all(|f| dir.join(f).is_file());
        let go_missing =
            (!go_built).then(|| "apps/functions/build.sh found no Go 1.22 or newer (PATH, /usr/local/go), so the Go functions are not built".to_string());
        Ok(Fns { dir: dir.to_path_buf(), lua_missing, go_missing })
    }

    /// Deploy settings of example `func` on `backend`, with `extra` on top.
    fn settings(&self, func: &str, backend: &str, extra: Value) -> Value {
        let image = if backend == "spt" || backend == "hvt" { self.dir.join(func) } else { self.dir.join(format!("{func}.native")) };
        let mut v = json!({"image": image, "backend": backend, "keep_warm_ms": 3_600_000u64, "timeout_ms": REQUEST_TIMEOUT.as_millis() as u64});
        if backend == "process" && func.starts_with("go-") {
            // The process backend's memory is RLIMIT_AS, which counts the Go
            // runtime's ~800 MB reservation (spt/hvt count memory used).
            v["memory"] = json!("1G");
        }
        match func {
            "static" | "fileread" | "go-static" | "go-fileread" => v["fs"] = json!(self.dir.join("fs")),
            "lua" => v["fs"] = json!(self.dir.join("lua-fs")),
            _ => {}
        }
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        v
    }
}

fn say(msg: &str) {
    crate::progress::say(&format!("bench faas: {msg}"));
}

// ------------------------------------------------------------------ results

/// What the paper reports for one summary row (text: the paper gives some
/// figures only as plots or ratios).
struct Paper {
    unikernel: &'static str,
    runc: &'static str,
    gvisor: &'static str,
}

/// One row of the summary table.
struct Row {
    what: String,
    paper: Paper,
    /// Per backend, the value measured here (as shown).
    values: BTreeMap<&'static str, String>,
}

/// What an experiment hands back.
struct Outcome {
    json: Value,
    table: String,
    rows: Vec<Row>,
    goals: Vec<Goal>,
}

/// A goal of the issue, checked against this run's numbers.
struct Goal {
    what: String,
    measured: String,
    met: Option<bool>,
}

/// Shared by the experiments.
struct Ctx<'a> {
    gw: &'a Gateway,
    fns: &'a Fns,
    backends: Vec<&'static str>,
    o: &'a FaasOpts,
}

/// Draws a plot; a failure is a warning (the numbers are still valid).
fn warn_plot(r: Result<(), plot::PlotError>) {
    if let Err(e) = r {
        say(&format!("warning: {e}"));
    }
}

/// Deploys `n` functions PREFIX-0 … PREFIX-(n-1) of the no-op on `backend`,
/// none of them running: a first request to each is a cold start on a new
/// instance, however quickly the others answer (one function with n
/// instances would give a later request an instance that already answered).
fn deploy_many(c: &Ctx, prefix: &str, backend: &str, n: usize) -> Result<Vec<String>> {
    deploy_many_in(c, prefix, backend, "copy", n)
}

/// [`deploy_many`] with a memory mode for spt/hvt (`copy`, `ksm`, `pool`).
fn deploy_many_in(c: &Ctx, prefix: &str, backend: &str, mem_mode: &str, n: usize) -> Result<Vec<String>> {
    deploy_many_of(c, "noop", prefix, backend, mem_mode, n)
}

/// [`deploy_many_in`] of example function `func`.
fn deploy_many_of(c: &Ctx, func: &str, prefix: &str, backend: &str, mem_mode: &str, n: usize) -> Result<Vec<String>> {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    let mut extra = json!({"concurrency": 1, "max_instances": 1, "timeout_ms": COLD_TIMEOUT_MS});
    if mem_mode != "copy" {
        extra["mem_mode"] = json!(mem_mode);
    }
    let settings = c.fns.settings(func, backend, extra);
    for name in &names {
        c.gw.deploy(name, &settings)?;
    }
    Ok(names)
}

/// Starts one request to each `/fn/NAME/` of `names` at once (threads
/// released by a barrier); per request, its completion time in s or why it
/// failed, and the instance that answered.
fn fire(gw: &Gateway, names: &[String]) -> Vec<Result<(f64, u64), String>> {
    let barrier = Arc::new(Barrier::new(names.len()));
    let addr = gw.addr;
    let handles: Vec<_> = names
        .iter()
        .map(|name| {
            let (b, p) = (barrier.clone(), format!("/fn/{name}/"));
            std::thread::spawn(move || {
                b.wait();
                let t0 = Instant::now();
                let r = http(addr, None, "GET", &p, None, true, REQUEST_TIMEOUT).map_err(|e| e.to_string())?;
                let dt = t0.elapsed().as_secs_f64();
                if r.status != 200 || !r.cold() {
                    let (st, cold, body) = (r.status, r.cold(), r.text());
                    return Err(format!("status {st} (cold start: {cold}): {body}"));
                }
                Ok((dt, r.header("x-shoal-instance").and_then(|v| v.parse().ok()).unwrap_or(0)))
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("the request's thread panicked".into()))).collect()
}

/// Times one cold request of `name` (deployed afresh with `settings`).
fn one_cold(gw: &Gateway, name: &str, settings: &Value) -> Result<f64, String> {
    one_cold_cpu(gw, name, settings).map(|(dt, _)| dt)
}

/// [`one_cold`], and the CPU time (ns) the gateway's own threads spent
/// meanwhile: its part of the start (the spawn, the namespaces its
/// `clone` makes for an spt instance, the hand-over) and the proxying.
fn one_cold_cpu(gw: &Gateway, name: &str, settings: &Value) -> Result<(f64, u64), String> {
    gw.deploy_cold(name, settings).map_err(|e| format!("{e:#}"))?;
    let g0 = threads_cpu_ns(gw.child.id());
    let t0 = Instant::now();
    let r = gw.invoke(name, "/", true).map_err(|e| e.to_string())?;
    let dt = t0.elapsed().as_secs_f64();
    let gcpu = threads_cpu_ns(gw.child.id()).saturating_sub(g0);
    if r.status != 200 || !r.cold() {
        // What the gateway and the instance said, before the function (and
        // its logs) is removed by the next deploy.
        let logs = gw.call("GET", &format!("/functions/{name}/logs"), None).map(|l| String::from_utf8_lossy(&l.body).into_owned()).unwrap_or_default();
        let tail: Vec<&str> = logs.lines().rev().take(4).collect::<Vec<_>>().into_iter().rev().collect();
        return Err(format!("status {} (cold start: {}): {}; logs: {}", r.status, r.cold(), r.text(), tail.join(" ")));
    }
    Ok((dt, gcpu))
}

fn note_failure(failures: &mut Vec<String>, what: String) {
    say(&format!("warning: {what}"));
    failures.push(what);
}

// -------------------------------------------------------------- experiments

/// Fig. 3: single cold starts.
fn cold_start(c: &Ctx) -> Result<Outcome> {
    let mut kinds = vec!["noop"];
    if c.fns.lua_missing.is_none() {
        kinds.push("lua");
    }
    let mut samples: BTreeMap<(&str, &str), Vec<f64>> = BTreeMap::new();
    let mut csv = Vec::new();
    let mut failures = Vec::new();
    for rep in 0..c.o.repeat {
        for &k in &kinds {
            for &b in &c.backends {
                let name = format!("cs-{k}-{b}");
                match one_cold(c.gw, &name, &c.fns.settings(k, b, json!({"concurrency": 1, "max_instances": 1, "timeout_ms": COLD_TIMEOUT_MS}))) {
                    Ok(dt) => {
                        samples.entry((k, b)).or_default().push(dt * 1e3);
                        csv.push(format!("{k},{b},{rep},{:.3}", dt * 1e3));
                    }
                    Err(e) => note_failure(&mut failures, format!("cold start {k} on {b}, run {rep}: {e}")),
                }
            }
        }
    }
    for &k in &kinds {
        for &b in &c.backends {
            c.gw.clear(&format!("cs-{k}-{b}"))?;
        }
    }
    let csv_path = c.o.out.join("cold-start.csv");
    table::write_csv_lines(&csv_path, "function,backend,run,ms", &csv)?;
    let st = |k: &str, b: &str| samples.get(&(k, b)).map(|v| stats(v));
    let svg = c.o.out.join("cold-start.svg");
    let series: Vec<BarSeries> =
        c.backends.iter().map(|&b| BarSeries { name: b.to_string(), values: kinds.iter().map(|&k| st(k, b).map(|s| (s.mean, s.ci95))).collect() }).collect();
    let cats: Vec<String> = kinds.iter().map(|k| if *k == "noop" { "C no-op".to_string() } else { "Lua".to_string() }).collect();
    let title = format!("Cold start through shoal serve, mean and 95% CI over {} runs (FaaS paper Fig. 3)", c.o.repeat);
    warn_plot(plot::bars(&svg, &Frame { title: &title, x_desc: "function", y_desc: "ms (log scale)", log_x: false, log_y: true }, &cats, &series));
    let mut rows = Vec::new();
    let mut results = serde_json::Map::new();
    for &k in &kinds {
        let mut per = serde_json::Map::new();
        for &b in &c.backends {
            if let Some(s) = st(k, b) {
                per.insert(b.into(), s.json());
                rows.push(vec![
                    k.to_string(),
                    b.to_string(),
                    fixed(s.mean, 1),
                    format!("± {}", fixed(s.ci95, 1)),
                    fixed(s.median, 1),
                    fixed(s.p95, 1),
                    s.n.to_string(),
                ]);
            }
        }
        results.insert(k.into(), Value::Object(per));
    }
    let header: Vec<String> = ["function", "backend", "mean ms", "95% CI", "median ms", "p95 ms", "runs"].iter().map(|s| s.to_string()).collect();
    let mut table = table::markdown(&header, &rows);
    table.push_str("\nPaper (Fig. 3, Go no-op): Nanos and OSv about 110 ms, Docker/runc 362 ms, gVisor 654 ms; Node.js: no figures in the text.\n");
    if let Some(why) = &c.fns.lua_missing {
        table.push_str(&format!("Lua runtime not measured: {why}.\n"));
    }
    let mean = |k: &str, b: &str| st(k, b).map(|s| s.mean).unwrap_or(f64::NAN);
    let mut ratios = serde_json::Map::new();
    let mut goals = Vec::new();
    for (other, want) in [("runc", 10.0), ("runsc", 20.0)] {
        let r = mean("noop", other) / mean("noop", "spt");
        ratios.insert(format!("{other}_over_spt"), json!(r));
        goals.push(Goal {
            what: format!("cold start of the C no-op on spt ≥ {want}× faster than {other}"),
            measured: format!("{}×", fixed(r, 1)),
            met: r.is_finite().then_some(r >= want),
        });
    }
    let row_of = |k: &str| -> BTreeMap<&'static str, String> { c.backends.iter().filter_map(|&b| st(k, b).map(|s| (b, fixed(s.mean, 1)))).collect() };
    let mut summary = vec![Row {
        what: "Cold start, C no-op (ms, mean)".into(),
        paper: Paper { unikernel: "≈110 (OSv, Nanos; Go)", runc: "362", gvisor: "654" },
        values: row_of("noop"),
    }];
    summary.push(Row {
        what: "Cold start, Lua runtime (ms, mean)".into(),
        paper: Paper { unikernel: "– (Node.js: plot only)", runc: "–", gvisor: "–" },
        values: if kinds.contains(&"lua") { row_of("lua") } else { c.backends.iter().map(|&b| (b, "not built".to_string())).collect() },
    });
    Ok(Outcome {
        json: json!({"unit": "ms", "runs": c.o.repeat, "results": results, "ratios": ratios, "lua_missing": c.fns.lua_missing, "failures": failures, "csv": csv_path, "plot": svg}),
        table,
        rows: summary,
        goals,
    })
}

/// Fig. 4: N concurrent first requests, each on a new instance (of its
/// own function: see [`deploy_many`]).
fn burst(c: &Ctx) -> Result<Outcome> {
    let mut csv = Vec::new();
    let mut failures = Vec::new();
    // (size, backend) -> completion times in s.
    let mut res: BTreeMap<(usize, &str), Vec<f64>> = BTreeMap::new();
    for &n in &c.o.bursts {
        for &b in &c.backends {
            let name = format!("burst-{b}");
            say(&format!("burst: {n} concurrent cold starts on {b}"));
            let names = deploy_many(c, &name, b, n)?;
            let got = fire(c.gw, &names);
            let mut ids = BTreeSet::new();
            let mut errs = 0;
            for (i, r) in got.iter().enumerate() {
                match r {
                    Ok((dt, id)) => {
                        ids.insert(*id);
                        res.entry((n, b)).or_default().push(*dt);
                        csv.push(format!("{n},{b},{i},{dt:.4}"));
                    }
                    Err(e) => {
                        errs += 1;
                        csv.push(format!("{n},{b},{i},"));
                        if errs <= 3 {
                            note_failure(&mut failures, format!("burst {n} on {b}, request {i}: {e}"));
                        }
                    }
                }
            }
            if errs > 3 {
                note_failure(&mut failures, format!("burst {n} on {b}: {errs} requests failed in all"));
            }
            if ids.len() + errs != n {
                note_failure(&mut failures, format!("burst {n} on {b}: {} distinct instances answered {} requests", ids.len(), n - errs));
            }
            if errs > 0 {
                let logs = c.o.out.join(format!("logs/burst-{n}-{b}.ndjson"));
                match c.gw.save_logs(&names, &logs) {
                    Ok(()) => note_failure(&mut failures, format!("burst {n} on {b}: the instances' output is in {}", logs.display())),
                    Err(e) => say(&format!("warning: {e:#}")),
                }
            }
            c.gw.clear_many(&names)?;
        }
    }
    let csv_path = c.o.out.join("burst.csv");
    table::write_csv_lines(&csv_path, "concurrent,backend,request,seconds", &csv)?;
    let mean = |n: usize, b: &str| res.get(&(n, b)).map(|v| stats(v).mean).unwrap_or(f64::NAN);
    let lines: Vec<Line> = c.backends.iter().map(|&b| Line { name: b.into(), points: c.o.bursts.iter().map(|&n| (n as f64, mean(n, b))).collect() }).collect();
    let svg = c.o.out.join("burst.svg");
    warn_plot(plot::lines(
        &svg,
        &Frame {
            title: "Mean completion time of N concurrent cold starts (FaaS paper Fig. 4)",
            x_desc: "concurrent cold starts",
            y_desc: "seconds",
            log_x: false,
            log_y: false,
        },
        &lines,
    ));
    let mut header = vec!["N".to_string()];
    header.extend(c.backends.iter().map(|b| format!("{b} mean s (max s)")));
    let rows: Vec<Vec<String>> =
        c.o.bursts
            .iter()
            .map(|&n| {
                let mut r = vec![n.to_string()];
                for &b in &c.backends {
                    let s = res.get(&(n, b)).map(|v| stats(v));
                    let ok = s.as_ref().map(|s| s.n).unwrap_or(0);
                    let fail = if ok < n { format!(", {} failed", n - ok) } else { String::new() };
                    r.push(s.map(|s| format!("{} ({}{fail})", fixed(s.mean, 3), fixed(s.max, 3))).unwrap_or_else(|| "all failed".into()));
                }
                r
            })
            .collect();
    let mut table = table::markdown(&header, &rows);
    table.push_str("\nN copies of the no-op deployed as N functions with one instance each, one first request to each at once (so every request is a cold start on its own instance); mean and max completion time of the N requests, one batch per size.\n");
    table.push_str(
        "\nPaper (Fig. 4, Go no-op, 100 at once): OSv 0.63 s, Nanos 0.70 s, Linux microVM 4.3 s, runc 6.5 s, gVisor 7.5 s (Node.js: 3.6 / 6.4 / 16.7 s).\n",
    );
    let big = c.o.bursts.iter().copied().max().unwrap_or(0);
    let mut results = serde_json::Map::new();
    for &b in &c.backends {
        let per: serde_json::Map<String, Value> = c.o.bursts.iter().filter_map(|&n| res.get(&(n, b)).map(|v| (n.to_string(), stats(v).json()))).collect();
        results.insert(b.into(), Value::Object(per));
    }
    let spt = mean(big, "spt");
    let goals = if big == 100 {
        vec![Goal {
            what: "100 concurrent cold starts on spt complete in ≤ 0.3 s (mean)".into(),
            measured: format!("{} s", fixed(spt, 3)),
            met: spt.is_finite().then_some(spt <= 0.3),
        }]
    } else {
        vec![Goal {
            what: "100 concurrent cold starts on spt complete in ≤ 0.3 s (mean)".into(),
            measured: format!("not run (largest burst {big})"),
            met: None,
        }]
    };
    let values = c.backends.iter().map(|&b| (b, fixed(mean(big, b), 3))).collect();
    let rows = vec![Row {
        what: format!("{big} concurrent cold starts (s, mean)"),
        paper: Paper { unikernel: "0.63 (OSv; 100)", runc: "6.5", gvisor: "7.5" },
        values,
    }];
    Ok(Outcome { json: json!({"unit": "s", "results": results, "failures": failures, "csv": csv_path, "plot": svg}), table, rows, goals })
}

/// Fig. 5: host CPU time from instance launch to its first answer.
fn startup_cost(c: &Ctx) -> Result<Outcome> {
    let mut res: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut gw_res: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut csv = Vec::new();
    let mut failures = Vec::new();
    for rep in 0..c.o.repeat {
        for &b in &c.backends {
            let name = format!("sc-{b}");
            let gw_ms =
                match one_cold_cpu(c.gw, &name, &c.fns.settings("noop", b, json!({"concurrency": 1, "max_instances": 1, "timeout_ms": COLD_TIMEOUT_MS}))) {
                    Ok((_, ns)) => ns as f64 / 1e6,
                    Err(e) => {
                        note_failure(&mut failures, format!("start-up cost on {b}, run {rep}: {e}"));
                        continue;
                    }
                };
            let pids = c.gw.pids(&name)?;
            let ms = cpu_ns(&pids) as f64 / 1e6;
            res.entry(b).or_default().push(ms);
            gw_res.entry(b).or_default().push(gw_ms);
            csv.push(format!("{b},{rep},{ms:.3},{},{gw_ms:.3}", pids.len()));
        }
    }
    for &b in &c.backends {
        c.gw.clear(&format!("sc-{b}"))?;
    }
    let csv_path = c.o.out.join("startup-cost.csv");
    table::write_csv_lines(&csv_path, "backend,run,cpu_ms,processes,gateway_cpu_ms", &csv)?;
    let st = |b: &str| res.get(b).map(|v| stats(v));
    let gst = |b: &str| gw_res.get(b).map(|v| stats(v));
    let svg = c.o.out.join("startup-cost.svg");
    let series: Vec<BarSeries> = c.backends.iter().map(|&b| BarSeries { name: b.into(), values: vec![st(b).map(|s| (s.mean, s.sd))] }).collect();
    warn_plot(plot::bars(
        &svg,
        &Frame {
            title: "Host CPU time from launch to first answer, mean ± SD (FaaS paper Fig. 5; CPU time, not instructions)",
            x_desc: "",
            y_desc: "CPU ms (log scale)",
            log_x: false,
            log_y: true,
        },
        &["C no-op".into()],
        &series,
    ));
    let header: Vec<String> =
        ["backend", "CPU ms (user+sys)", "SD", "median", "runs", "gateway CPU ms meanwhile (mean)"].iter().map(|s| s.to_string()).collect();
    let rows: Vec<Vec<String>> = c
        .backends
        .iter()
        .filter_map(|&b| {
            st(b).map(|s| {
                vec![b.into(), fixed(s.mean, 2), fixed(s.sd, 2), fixed(s.median, 2), s.n.to_string(), gst(b).map(|g| fixed(g.mean, 2)).unwrap_or_default()]
            })
        })
        .collect();
    let mut table = table::markdown(&header, &rows);
    table.push_str(
        "\nThe last column is the gateway's own threads' CPU time from the request to the answer: its part of the start (the spawn; for spt the \
         hand-over and the namespaces its `clone` makes, which `shoal-tender` made before the gateway started spt instances directly) and the \
         proxying. It is not in the first column.\n",
    );
    table.push_str(
        "\nHardware counters (perf instructions) are not available on this machine: CPU time comes from /proc (every thread's schedstat run time of the \
         instance's processes, plus their reaped children's cutime+cstime), measured right after the first answer. Paper (Fig. 5): millions of \
         instructions, shown only as a plot; Linux microVM 8.5× Nanos and 6× OSv, gVisor 61% fewer than the Linux microVM.\n",
    );
    let results: serde_json::Map<String, Value> = c.backends.iter().filter_map(|&b| st(b).map(|s| (b.to_string(), s.json()))).collect();
    let values = c.backends.iter().filter_map(|&b| st(b).map(|s| (b, fixed(s.mean, 2)))).collect();
    let rows = vec![Row {
        what: "Start-up cost (host CPU ms; paper: instructions)".into(),
        paper: Paper { unikernel: "plot only (OSv 6× < Linux VM)", runc: "plot only", gvisor: "plot only" },
        values,
    }];
    Ok(Outcome {
        json: json!({"unit": "cpu_ms", "source": "/proc schedstat + cutime/cstime; no hardware counters here", "results": results, "failures": failures, "csv": csv_path, "plot": svg}),
        table,
        rows,
        goals: vec![],
    })
}

/// Warm calls per function and backend in each round of [`two_write`].
const TWO_WRITE_CALLS: usize = 20;

/// The gap between the two-write function's median warm latency and the
/// no-op's that counts as no penalty (the target).
const TWO_WRITE_TARGET_MS: f64 = 0.5;

/// Warm requests through the gateway of the no-op (head and body in one
/// `write`) and of `twowrite` (the same answer in two): a function that
/// answers in two small writes must not pay for its Nagle meeting the
/// gateway's delayed ACK (40 ms a request on Linux). Calls alternate
/// between the two, so both see the same machine.
fn two_write(c: &Ctx) -> Result<Outcome> {
    const KINDS: [(&str, &str); 2] = [("one-write", "noop"), ("two-writes", "twowrite")];
    let mut failures = Vec::new();
    let mut up = Vec::new();
    for &b in &c.backends {
        let mut ok = true;
        for (kind, func) in KINDS {
            let name = format!("tw-{kind}-{b}");
            let r =
                c.gw.deploy_cold(&name, &c.fns.settings(func, b, json!({"concurrency": 1, "max_instances": 1}))).map_err(|e| format!("{e:#}")).and_then(|_| {
                    let r = c.gw.invoke(&name, "/", true).map_err(|e| e.to_string())?;
                    if r.status == 200 {
                        Ok(())
                    } else {
                        Err(format!("status {}: {}", r.status, r.text()))
                    }
                });
            if let Err(e) = r {
                note_failure(&mut failures, format!("{func} on {b}: {e}"));
                ok = false;
            }
        }
        if ok {
            up.push(b);
        }
    }
    let mut res: BTreeMap<(&str, &str), Vec<f64>> = BTreeMap::new();
    let mut csv = Vec::new();
    for rep in 0..c.o.repeat {
        for &b in &up {
            for i in 0..TWO_WRITE_CALLS {
                for (kind, _) in KINDS {
                    let t0 = Instant::now();
                    let r = c.gw.invoke(&format!("tw-{kind}-{b}"), "/", true);
                    let ms = t0.elapsed().as_secs_f64() * 1e3;
                    match r {
                        Ok(r) if r.status == 200 && !r.cold() => {
                            res.entry((kind, b)).or_default().push(ms);
                            csv.push(format!("{b},{kind},{rep},{i},{ms:.4}"));
                        }
                        Ok(r) => note_failure(&mut failures, format!("{kind} on {b}: status {} (cold start: {}): {}", r.status, r.cold(), r.text())),
                        Err(e) => note_failure(&mut failures, format!("{kind} on {b}: {e}")),
                    }
                }
            }
        }
    }
    for &b in &c.backends {
        for (kind, _) in KINDS {
            c.gw.clear(&format!("tw-{kind}-{b}"))?;
        }
    }
    let csv_path = c.o.out.join("two-write.csv");
    table::write_csv_lines(&csv_path, "backend,function,round,call,ms", &csv)?;
    let st = |kind: &str, b: &str| res.get(&(kind, b)).map(|v| stats(v));
    let mut results = serde_json::Map::new();
    let mut rows = Vec::new();
    let mut values = BTreeMap::new();
    let mut series = Vec::new();
    for &b in &c.backends {
        let (Some(one), Some(two)) = (st("one-write", b), st("two-writes", b)) else { continue };
        let gap = two.median - one.median;
        results
            .insert(b.to_string(), json!({"one_write": one.json(), "two_writes": two.json(), "median_gap_ms": gap, "median_ratio": two.median / one.median}));
        rows.push(vec![
            b.to_string(),
            fixed(one.median, 3),
            fixed(one.p95, 3),
            fixed(two.median, 3),
            fixed(two.p95, 3),
            format!("{:+.3}", gap),
            fixed(two.median / one.median, 2),
        ]);
        values.insert(b, format!("{} vs {}", fixed(two.median, 2), fixed(one.median, 2)));
        series.push(BarSeries { name: b.into(), values: vec![Some((one.median, 0.0)), Some((two.median, 0.0))] });
    }
    let svg = c.o.out.join("two-write.svg");
    warn_plot(plot::bars(
        &svg,
        &Frame { title: "Warm request through the gateway, median: answer in one write vs two", x_desc: "", y_desc: "ms", log_x: false, log_y: false },
        &["one write (noop)".into(), "two writes (twowrite)".into()],
        &series,
    ));
    let header: Vec<String> =
        ["backend", "one write median ms", "p95", "two writes median ms", "p95", "gap (ms)", "×one write"].iter().map(|s| s.to_string()).collect();
    let mut table = table::markdown(&header, &rows);
    table.push_str(&format!(
        "\n{} rounds of {TWO_WRITE_CALLS} warm calls per function and backend, alternating, each on a new client connection (the gateway keeps its own to the \
         instance). Target: the two-write function within {TWO_WRITE_TARGET_MS} ms of the one-write one.\n",
        c.o.repeat
    ));
    let gap = results.get("spt").and_then(|r| r["median_gap_ms"].as_f64());
    let goals = vec![Goal {
        what: format!("two writes within {TWO_WRITE_TARGET_MS} ms of one on spt (median)"),
        measured: gap.map(|g| format!("{g:+.3} ms")).unwrap_or_else(|| "–".into()),
        met: gap.map(|g| g <= TWO_WRITE_TARGET_MS),
    }];
    let srow = Row { what: "Warm request, two writes vs one (median ms)".into(), paper: Paper { unikernel: "–", runc: "–", gvisor: "–" }, values };
    Ok(Outcome {
        json: json!({"unit": "ms", "runs": c.o.repeat, "calls_per_run": TWO_WRITE_CALLS, "results": results, "failures": failures, "csv": csv_path, "plot": svg}),
        table,
        rows: vec![srow],
        goals,
    })
}

/// The Go functions beside the C ones (the paper's functions are Go): on
/// every backend, `--repeat` cold starts and `--requests` (at most 200)
/// warm calls of the no-op, `--repeat` warm fib(FIB_N), each in C and in
/// Go; then the largest `--bursts` size of concurrent Go cold starts (as
/// the burst experiment: N functions with one instance each).
fn go_functions(c: &Ctx) -> Result<Outcome> {
    let Some(why) = c.fns.go_missing.clone() else {
        return go_measured(c);
    };
    say(&format!("go: not measured: {why}"));
    Ok(Outcome {
        json: json!({"unavailable": why}),
        table: format!("Go functions not measured: {why}.\n"),
        rows: vec![Row {
            what: "Cold start, Go no-op (ms, mean)".into(),
            paper: Paper { unikernel: "≈110 (OSv, Nanos)", runc: "362", gvisor: "654" },
            values: c.backends.iter().map(|&b| (b, "not built".to_string())).collect(),
        }],
        goals: vec![],
    })
}

/// [`go_functions`] when the Go functions are built.
fn go_measured(c: &Ctx) -> Result<Outcome> {
    let mut failures = Vec::new();
    let failures = &mut failures;
    let one = json!({"concurrency": 1, "max_instances": 1, "timeout_ms": COLD_TIMEOUT_MS});
    let warm_calls = c.o.requests.clamp(1, 200);
    let mut csv = Vec::new();
    // (what, function, backend) -> samples in ms.
    let mut res: BTreeMap<(&str, &str, &str), Vec<f64>> = BTreeMap::new();
    let kinds = ["noop", "go-noop"];
    for rep in 0..c.o.repeat {
        for &k in &kinds {
            for &b in &c.backends {
                let name = format!("gc-{k}-{b}");
                match one_cold(c.gw, &name, &c.fns.settings(k, b, one.clone())) {
                    Ok(dt) => {
                        res.entry(("cold", k, b)).or_default().push(dt * 1e3);
                        csv.push(format!("cold,{k},{b},{rep},{:.3}", dt * 1e3));
                    }
                    Err(e) => note_failure(failures, format!("go: cold start {k} on {b}, run {rep}: {e}")),
                }
            }
        }
    }
    for &k in &kinds {
        for &b in &c.backends {
            c.gw.clear(&format!("gc-{k}-{b}"))?;
        }
    }
    // Warm: one instance kept, the first (cold) call not counted.
    for (what, funcs, rest, calls) in
        [("warm", ["noop", "go-noop"], "/".to_string(), warm_calls), ("fib", ["fib", "go-fib"], format!("/?n={FIB_N}"), c.o.repeat)]
    {
        for k in funcs {
            for &b in &c.backends {
                let name = format!("gw-{k}-{b}");
                if let Err(e) = c.gw.deploy_cold(&name, &c.fns.settings(k, b, json!({"concurrency": 1, "max_instances": 1}))) {
                    note_failure(failures, format!("go: deploy {k} on {b}: {e:#}"));
                    continue;
                }
                let first = c.gw.invoke(&name, &rest, true);
                if !first.as_ref().is_ok_and(|r| r.status == 200) {
                    let why = first.map(|r| format!("status {}: {}", r.status, r.text())).unwrap_or_else(|e| e.to_string());
                    note_failure(failures, format!("go: {what} {k} on {b}: the first call failed: {why}"));
                    c.gw.clear(&name)?;
                    continue;
                }
                for i in 0..calls {
                    let t0 = Instant::now();
                    match c.gw.invoke(&name, &rest, true) {
                        Ok(r) if r.status == 200 && !r.cold() => {
                            let ms = t0.elapsed().as_secs_f64() * 1e3;
                            res.entry((what, k, b)).or_default().push(ms);
                            csv.push(format!("{what},{k},{b},{i},{ms:.3}"));
                        }
                        Ok(r) => note_failure(failures, format!("go: {what} {k} on {b}, call {i}: status {} (cold start: {})", r.status, r.cold())),
                        Err(e) => note_failure(failures, format!("go: {what} {k} on {b}, call {i}: {e}")),
                    }
                }
                c.gw.clear(&name)?;
            }
        }
    }
    // The burst of Go cold starts at the largest size asked.
    let n = c.o.bursts.iter().copied().max().unwrap_or(0);
    let mut burst: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    if n > 0 {
        for &b in &c.backends {
            say(&format!("go: {n} concurrent Go cold starts on {b}"));
            let names = deploy_many_of(c, "go-noop", &format!("gb-{b}"), b, "copy", n)?;
            let got = fire(c.gw, &names);
            let mut errs = 0;
            for (i, r) in got.iter().enumerate() {
                match r {
                    Ok((dt, _)) => {
                        burst.entry(b).or_default().push(*dt);
                        csv.push(format!("burst{n},go-noop,{b},{i},{:.3}", dt * 1e3));
                    }
                    Err(e) => {
                        errs += 1;
                        if errs <= 3 {
                            note_failure(failures, format!("go: burst {n} on {b}, request {i}: {e}"));
                        }
                    }
                }
            }
            if errs > 3 {
                note_failure(failures, format!("go: burst {n} on {b}: {errs} requests failed in all"));
            }
            c.gw.clear_many(&names)?;
        }
    }
    let csv_path = c.o.out.join("go.csv");
    table::write_csv_lines(&csv_path, "what,function,backend,run,ms", &csv)?;
    let st = |w: &str, k: &str, b: &str| res.get(&(w, k, b)).map(|v| stats(v));
    let mut json_of = serde_json::Map::new();
    for (w, ks) in [("cold", ["noop", "go-noop"]), ("warm", ["noop", "go-noop"]), ("fib", ["fib", "go-fib"])] {
        let mut per_k = serde_json::Map::new();
        for k in ks {
            let per: serde_json::Map<String, Value> = c.backends.iter().filter_map(|&b| st(w, k, b).map(|s| (b.to_string(), s.json()))).collect();
            per_k.insert(k.into(), Value::Object(per));
        }
        json_of.insert(w.into(), Value::Object(per_k));
    }
    let burst_json: serde_json::Map<String, Value> = burst.iter().map(|(b, v)| (b.to_string(), stats(v).json())).collect();
    let mut header = vec!["".to_string()];
    header.extend(c.backends.iter().map(|b| b.to_string()));
    let cell = |w: &str, k: &str, b: &str| st(w, k, b).map(|s| format!("{} (p95 {})", fixed(s.mean, 1), fixed(s.p95, 1))).unwrap_or_else(|| "failed".into());
    let mut rows = Vec::new();
    for (label, w, k) in [
        ("cold start, C no-op (ms)", "cold", "noop"),
        ("cold start, Go no-op (ms)", "cold", "go-noop"),
        ("warm call, C no-op (ms)", "warm", "noop"),
        ("warm call, Go no-op (ms)", "warm", "go-noop"),
    ] {
        let mut r = vec![label.to_string()];
        r.extend(c.backends.iter().map(|&b| cell(w, k, b)));
        rows.push(r);
    }
    for (label, k) in [(format!("warm fib({FIB_N}), C (ms)"), "fib"), (format!("warm fib({FIB_N}), Go (ms)"), "go-fib")] {
        let mut r = vec![label];
        r.extend(c.backends.iter().map(|&b| cell("fib", k, b)));
        rows.push(r);
    }
    if n > 0 {
        let mut r = vec![format!("{n} concurrent Go cold starts (s, mean; max)")];
        r.extend(c.backends.iter().map(|&b| {
            burst
                .get(b)
                .map(|v| stats(v))
                .map(|s| format!("{} ({}; {} of {n} answered)", fixed(s.mean, 3), fixed(s.max, 3), s.n))
                .unwrap_or_else(|| "all failed".into())
        }));
        rows.push(r);
    }
    let mut table = table::markdown(&header, &rows);
    table.push_str(&format!(
        "\nMeans (p95) through shoal serve: {} cold starts per function and backend, {warm_calls} warm calls of the no-op and {} of fib on one kept instance \
         (its first call not counted). The Go functions are static executables (CGO_ENABLED=0): spt and hvt run the instance image built around the file, \
         process/runc/runsc the file itself.\n\
         Paper (Go no-op): cold start Nanos and OSv about 110 ms, Docker/runc 362 ms, gVisor 654 ms; 100 concurrent cold starts OSv 0.63 s, Nanos 0.70 s, \
         runc 6.5 s, gVisor 7.5 s.\n",
        c.o.repeat, c.o.repeat
    ));
    let mean_row =
        |w: &str, k: &str| -> BTreeMap<&'static str, String> { c.backends.iter().filter_map(|&b| st(w, k, b).map(|s| (b, fixed(s.mean, 1)))).collect() };
    let mut summary = vec![
        Row {
            what: "Cold start, Go no-op (ms, mean)".into(),
            paper: Paper { unikernel: "≈110 (OSv, Nanos)", runc: "362", gvisor: "654" },
            values: mean_row("cold", "go-noop"),
        },
        Row {
            what: "Warm call, Go no-op (ms, mean)".into(), paper: Paper { unikernel: "–", runc: "–", gvisor: "–" }, values: mean_row("warm", "go-noop")
        },
    ];
    if n > 0 {
        summary.push(Row {
            what: format!("{n} concurrent Go cold starts (s, mean)"),
            paper: Paper { unikernel: "0.63–0.70 (100; OSv, Nanos)", runc: "6.5 (100)", gvisor: "7.5 (100)" },
            values: burst.iter().map(|(&b, v)| (b, fixed(stats(v).mean, 3))).collect(),
        });
    }
    Ok(Outcome {
        json: json!({"unit": "ms", "runs": c.o.repeat, "warm_calls": warm_calls, "results": json_of,
            "burst": {"unit": "s", "concurrent": n, "results": burst_json}, "failures": failures.clone(), "csv": csv_path}),
        table,
        rows: summary,
        goals: vec![],
    })
}

/// Fig. 6: CPU time of one warm idle instance over 10 s.
fn idle_cpu(c: &Ctx) -> Result<Outcome> {
    const WINDOW: Duration = Duration::from_secs(10);
    let mut failures = Vec::new();
    let mut up = Vec::new();
    for &b in &c.backends {
        let name = format!("ic-{b}");
        match one_cold(c.gw, &name, &c.fns.settings("noop", b, json!({"concurrency": 1, "max_instances": 1, "timeout_ms": COLD_TIMEOUT_MS}))) {
            Ok(_) => up.push(b),
            Err(e) => note_failure(&mut failures, format!("idle CPU on {b}: {e}")),
        }
    }
    // All backends idle in the same window: none of them should run.
    std::thread::sleep(Duration::from_secs(2));
    let before: Vec<(&str, Vec<u32>, u64)> = up
        .iter()
        .map(|&b| {
            let pids = c.gw.pids(&format!("ic-{b}")).unwrap_or_default();
            let ns = cpu_ns(&pids);
            (b, pids, ns)
        })
        .collect();
    say(&format!("idle CPU: {} instances idle for {} s", before.len(), WINDOW.as_secs()));
    std::thread::sleep(WINDOW);
    let mut res: BTreeMap<&str, f64> = BTreeMap::new();
    let mut csv = Vec::new();
    for (b, pids, ns0) in &before {
        let ms = cpu_ns(pids).saturating_sub(*ns0) as f64 / 1e6;
        res.insert(b, ms);
        csv.push(format!("{b},{},{ms:.4}", WINDOW.as_secs()));
    }
    for &b in &c.backends {
        c.gw.clear(&format!("ic-{b}"))?;
    }
    let csv_path = c.o.out.join("idle-cpu.csv");
    table::write_csv_lines(&csv_path, "backend,window_s,cpu_ms", &csv)?;
    let svg = c.o.out.join("idle-cpu.svg");
    let series: Vec<BarSeries> = c.backends.iter().map(|&b| BarSeries { name: b.into(), values: vec![res.get(b).map(|v| (*v, 0.0))] }).collect();
    warn_plot(plot::bars(
        &svg,
        &Frame { title: "Host CPU time of one warm idle instance over 10 s (FaaS paper Fig. 6)", x_desc: "", y_desc: "CPU ms", log_x: false, log_y: false },
        &["C no-op".into()],
        &series,
    ));
    let header: Vec<String> = ["backend", "CPU ms in 10 s", "% of one core"].iter().map(|s| s.to_string()).collect();
    // In the backends' order, not the map's.
    let rows: Vec<Vec<String>> = c.backends.iter().filter_map(|b| res.get(b).map(|ms| vec![b.to_string(), fixed(*ms, 3), fixed(ms / 100.0, 4)])).collect();
    let mut table = table::markdown(&header, &rows);
    table.push_str(
        "\nCPU time from /proc (schedstat, ns resolution); hardware counters are not available here. Paper (Fig. 6, instructions in 1 s idle, Go): gVisor \
         50k, Linux microVM 80k, Nanos 250k, OSv > 9M, runc too few to record.\n",
    );
    let spt = res.get("spt").copied().unwrap_or(f64::NAN);
    let goals =
        vec![Goal { what: "zero idle CPU on spt".into(), measured: format!("{} ms in 10 s", fixed(spt, 3)), met: spt.is_finite().then_some(spt == 0.0) }];
    let values = res.iter().map(|(b, ms)| (*b, fixed(*ms, 3))).collect();
    let rows = vec![Row {
        what: "Idle CPU (host CPU ms per 10 s; paper: instructions per 1 s)".into(),
        paper: Paper { unikernel: "250k instr/s (Nanos)", runc: "≈0 (unmeasurable)", gvisor: "50k instr/s" },
        values,
    }];
    Ok(Outcome { json: json!({"unit": "cpu_ms_per_10s", "results": res, "failures": failures, "csv": csv_path, "plot": svg}), table, rows, goals })
}

/// Fig. 7: memory of N warm idle instances.
/// The idle-memory configurations: every backend, and for spt and hvt
/// also their `pool` and `ksm` memory modes: (label, backend, mode).
fn idle_memory_configs(backends: &[&'static str]) -> Vec<(String, &'static str, &'static str)> {
    let mut v = Vec::new();
    for &b in backends {
        v.push((b.to_string(), b, "copy"));
        if b == "spt" || b == "hvt" {
            v.push((format!("{b}+pool"), b, "pool"));
            v.push((format!("{b}+ksm"), b, "ksm"));
        }
    }
    v
}

/// How long KSM gets to merge before a `ksm` configuration is measured.
const KSM_SETTLE: Duration = Duration::from_secs(10);

fn idle_memory(c: &Ctx) -> Result<Outcome> {
    let mut failures = Vec::new();
    let mut csv = Vec::new();
    let configs = idle_memory_configs(&c.backends);
    // (n, configuration) -> (MemAvailable delta MiB, PSS MiB), totals.
    let mut res: BTreeMap<(usize, &str), (f64, f64, usize)> = BTreeMap::new();
    for &n in &c.o.instances {
        for (label, b, mode) in &configs {
            let (label, b, mode) = (label.as_str(), *b, *mode);
            let name = format!("im-{}", label.replace('+', "-"));
            std::thread::sleep(Duration::from_secs(1));
            say(&format!("idle memory: {n} instances on {label}"));
            let ksm = if mode == "ksm" {
                match super::memory::KsmGuard::on() {
                    Ok(g) => Some(g),
                    Err(e) => {
                        note_failure(&mut failures, format!("idle memory {n} on {label}: {e:#}"));
                        continue;
                    }
                }
            } else {
                None
            };
            let base = meminfo_kib("MemAvailable:");
            let names = deploy_many_in(c, &name, b, mode, n)?;
            // One after the other: what is measured is the idle state, and
            // concurrent starts fail on runsc here (burst shows it).
            let got: Vec<Result<(), String>> = names
                .iter()
                .map(|name| match c.gw.invoke(name, "/", true) {
                    Ok(r) if r.status == 200 => Ok(()),
                    Ok(r) => Err(format!("status {}: {}", r.status, r.text())),
                    Err(e) => Err(e.to_string()),
                })
                .collect();
            let errs = got.iter().filter(|r| r.is_err()).count();
            if errs > 0 {
                let first = got.iter().find_map(|r| r.as_ref().err().cloned()).unwrap_or_default();
                note_failure(&mut failures, format!("idle memory {n} on {label}: {errs} of {n} instances did not start: {first}"));
            }
            std::thread::sleep(if ksm.is_some() { KSM_SETTLE } else { Duration::from_secs(2) });
            let insts = c.gw.instances_of(&names)?;
            let after = meminfo_kib("MemAvailable:");
            let kids = children_map();
            let pss: u64 = insts.iter().flat_map(|i| descendants(&kids, i.pid)).map(pss_kib).sum();
            let k = insts.len();
            if k > 0 {
                let delta = base.saturating_sub(after) as f64 / 1024.0;
                let pss = pss as f64 / 1024.0;
                res.insert((n, label), (delta, pss, k));
                csv.push(format!("{n},{label},{k},{delta:.2},{pss:.2}"));
            }
            c.gw.clear_many(&names)?;
            drop(ksm);
        }
    }
    let csv_path = c.o.out.join("idle-memory.csv");
    table::write_csv_lines(&csv_path, "requested,backend,instances,memavailable_delta_mib,pss_mib", &csv)?;
    let svg = c.o.out.join("idle-memory.svg");
    let labels: Vec<&str> = configs.iter().map(|(l, _, _)| l.as_str()).collect();
    let lines: Vec<Line> = labels
        .iter()
        .map(|&b| Line { name: format!("{b} (PSS)"), points: c.o.instances.iter().filter_map(|&n| res.get(&(n, b)).map(|v| (v.2 as f64, v.1))).collect() })
        .collect();
    warn_plot(plot::lines(
        &svg,
        &Frame {
            title: "Memory of N idle instances of the no-op, summed PSS (FaaS paper Fig. 7)",
            x_desc: "idle instances",
            y_desc: "MiB",
            log_x: false,
            log_y: false,
        },
        &lines,
    ));
    let mut header = vec!["N".to_string()];
    header.extend(labels.iter().map(|b| format!("{b} MiB/inst PSS (MemAvail)")));
    let rows: Vec<Vec<String>> =
        c.o.instances
            .iter()
            .map(|&n| {
                let mut r = vec![n.to_string()];
                for &b in &labels {
                    r.push(
                        res.get(&(n, b))
                            .map(|&(d, p, k)| {
                                let k_of = if k == n { String::new() } else { format!(", {k} ran") };
                                format!("{} ({}{k_of})", fixed(p / k as f64, 2), fixed(d / k as f64, 2))
                            })
                            .unwrap_or_else(|| "–".into()),
                    );
                }
                r
            })
            .collect();
    let mut table = table::markdown(&header, &rows);
    table.push_str(
        "\nMiB per instance: summed PSS of every instance's processes (tender and guest, runtime and sandbox) / instances running; in parentheses the drop of MemAvailable / instances \
         (noisy when other work runs). spt and hvt run in each memory mode: copy (the default), pool (the gateway adds the image to the library pool; \
         pool pages count in PSS shared between the instances that map them) and ksm (KSM switched on, 10 s to merge before the sample). \
         Paper (Fig. 7, Go): runc 3.9, Nanos 23.8, gVisor 24.7, OSv 31.4, Linux microVM 59.9 MiB per instance.\n",
    );
    let big = c.o.instances.iter().copied().max().unwrap_or(0);
    let per = |b: &str| res.get(&(big, b)).map(|&(_, p, k)| p / k as f64).unwrap_or(f64::NAN);
    let mut results = serde_json::Map::new();
    for &b in &labels {
        let m: serde_json::Map<String, Value> = c
            .o
            .instances
            .iter()
            .filter_map(|&n| {
                res.get(&(n, b))
                    .map(|&(d, p, k)| (n.to_string(), json!({"instances": k, "memavailable_delta_mib": d, "pss_mib": p, "pss_mib_per_instance": p / k as f64})))
            })
            .collect();
        results.insert(b.into(), Value::Object(m));
    }
    // The goal is spt's best memory mode.
    let (spt_mode, spt) = ["spt", "spt+pool", "spt+ksm"].iter().map(|&l| (l, per(l))).filter(|(_, v)| v.is_finite()).fold(("spt", f64::NAN), |a, b| {
        if a.1.is_nan() || b.1 < a.1 {
            b
        } else {
            a
        }
    });
    let goals = vec![Goal {
        what: "idle memory ≤ 1 MiB per instance on spt (tender and guest, PSS)".into(),
        measured: format!("{} MiB at N={big} ({spt_mode})", fixed(spt, 2)),
        met: spt.is_finite().then_some(spt <= 1.0),
    }];
    let values = c.backends.iter().map(|&b| (b, fixed(per(b), 2))).collect();
    let rows = vec![Row {
        what: format!("Idle memory (MiB per instance, PSS, N={big})"),
        paper: Paper { unikernel: "23.8 (Nanos)", runc: "3.9", gvisor: "24.7" },
        values,
    }];
    Ok(Outcome { json: json!({"unit": "MiB", "results": results, "failures": failures, "csv": csv_path, "plot": svg}), table, rows, goals })
}

/// Figs. 8–10, 12, 13: warm invocations of the workloads.
fn workloads(c: &Ctx) -> Result<Outcome> {
    let timed: [(&str, String); 4] = [("fib", format!("/?n={FIB_N}")), ("matmul", "/?n=1024".into()), ("alloc", "/?mb=50".into()), ("fileread", "/".into())];
    let mut failures = Vec::new();
    let mut up: Vec<&str> = Vec::new();
    for &b in &c.backends {
        let mut ok = true;
        for (w, q) in &timed {
            let name = format!("wl-{w}-{b}");
            let r =
                c.gw.deploy_cold(&name, &c.fns.settings(w, b, json!({"concurrency": 1, "max_instances": 1}))).map_err(|e| format!("{e:#}")).and_then(|_| {
                    let r = c.gw.invoke(&name, q, true).map_err(|e| e.to_string())?;
                    if r.status == 200 {
                        Ok(())
                    } else {
                        Err(format!("status {}: {}", r.status, r.text()))
                    }
                });
            if let Err(e) = r {
                note_failure(&mut failures, format!("workload {w} on {b}: {e}"));
                ok = false;
            }
        }
        if ok {
            up.push(b);
        }
    }
    let mut res: BTreeMap<(&str, &str), Vec<f64>> = BTreeMap::new();
    // Per call, what the instance itself did (its processes' CPU time and
    // context switches) and what the whole machine did meanwhile: whether a
    // slower call was slower in CPU or only in waiting.
    let mut usage: BTreeMap<(&str, &str), Vec<CallUsage>> = BTreeMap::new();
    let mut pids: BTreeMap<(&str, &str), Vec<u32>> = BTreeMap::new();
    for &b in &up {
        for (w, _) in &timed {
            pids.insert((w, b), c.gw.pids(&format!("wl-{w}-{b}"))?);
        }
    }
    // Every warm instance's processes: each timed call waits until they are
    // quiet (see QUIET_WINDOW).
    let everyone: Vec<u32> = pids.values().flatten().copied().collect();
    let mut waits: BTreeMap<(&str, &str), Vec<f64>> = BTreeMap::new();
    let mut not_quiet = 0usize;
    let mut csv = Vec::new();
    for rep in 0..c.o.repeat {
        // Each round starts with another backend, so none always runs
        // right after the same one: work a backend does after answering
        // (runsc's sandbox after its 50 MiB fileread, say) would otherwise
        // always land on the same neighbour (in a fixed order, spt's fib).
        let order = up.iter().cycle().skip(rep % up.len().max(1)).take(up.len());
        for &b in order {
            for (w, q) in &timed {
                let ps = pids.get(&(*w, b)).map(Vec::as_slice).unwrap_or_default();
                let (waited, quiet) = wait_quiet(&everyone);
                not_quiet += usize::from(!quiet);
                let waited_ms = waited.as_secs_f64() * 1e3;
                let before = Usage::now(ps);
                let t0 = Instant::now();
                let r = c.gw.invoke(&format!("wl-{w}-{b}"), q, true);
                let ms = t0.elapsed().as_secs_f64() * 1e3;
                let u = Usage::now(ps).since(&before);
                match r {
                    Ok(r) if r.status == 200 && !r.cold() => {
                        res.entry((w, b)).or_default().push(ms);
                        csv.push(format!(
                            "{w},{b},{rep},{ms:.3},ms,{:.3},{:.3},{},{},{},{waited_ms:.1}",
                            u.cpu_ms, u.machine_ms, u.voluntary, u.involuntary, u.migrations
                        ));
                        usage.entry((w, b)).or_default().push(u);
                        waits.entry((w, b)).or_default().push(waited_ms);
                    }
                    Ok(r) => {
                        note_failure(&mut failures, format!("workload {w} on {b}, run {rep}: status {} (cold start: {}): {}", r.status, r.cold(), r.text()))
                    }
                    Err(e) => note_failure(&mut failures, format!("workload {w} on {b}, run {rep}: {e}")),
                }
            }
        }
    }
    for &b in &c.backends {
        for (w, _) in &timed {
            c.gw.clear(&format!("wl-{w}-{b}"))?;
        }
    }
    // Static file throughput: 4 clients, 2 × --repeat downloads in all (the
    // paper's 10 GiB is about 200 downloads of 50 MiB).
    let downloads = (2 * c.o.repeat).max(4).div_ceil(4) * 4;
    let mut thr: BTreeMap<&str, f64> = BTreeMap::new();
    for &b in &c.backends {
        let name = format!("wl-static-{b}");
        let started =
            c.gw.deploy_cold(&name, &c.fns.settings("static", b, json!({"concurrency": 4, "max_instances": 1}))).map_err(|e| format!("{e:#}")).and_then(|_| {
                let r = c.gw.invoke(&name, "/", true).map_err(|e| e.to_string())?;
                if r.status == 200 && r.bytes == 50 << 20 {
                    Ok(())
                } else {
                    let why = if r.status == 200 { String::new() } else { r.text() };
                    Err(format!("status {}, {} bytes {why}", r.status, r.bytes))
                }
            });
        if let Err(e) = started {
            note_failure(&mut failures, format!("workload static on {b}: {e}"));
            continue;
        }
        say(&format!("static: {downloads} downloads of 50 MiB by 4 clients on {b}"));
        match static_downloads(c.gw.addr, &name, downloads) {
            Err(e) => note_failure(&mut failures, format!("workload static on {b}: {e} (the gateway's notes: {})", c.gw.gateway_notes(&name, 3))),
            Ok(mibs) => {
                thr.insert(b, mibs);
                csv.push(format!("static,{b},0,{mibs:.1},MiB/s,,,,,,"));
            }
        }
        c.gw.clear(&name)?;
    }
    let csv_path = c.o.out.join("workloads.csv");
    table::write_csv_lines(
        &csv_path,
        "workload,backend,run,value,unit,instance_cpu_ms,machine_cpu_ms,voluntary_switches,involuntary_switches,migrations,quiet_wait_ms",
        &csv,
    )?;
    let st = |w: &str, b: &str| res.get(&(w, b)).map(|v| stats(v));
    // Slowdown against process: time ratio; for throughput, process's rate over this one's.
    let slow = |w: &str, b: &str| -> f64 {
        if w == "static" {
            thr.get("process").copied().unwrap_or(f64::NAN) / thr.get(b).copied().unwrap_or(f64::NAN)
        } else {
            st(w, b).map(|s| s.mean).unwrap_or(f64::NAN) / st(w, "process").map(|s| s.mean).unwrap_or(f64::NAN)
        }
    };
    let names: Vec<&str> = timed.iter().map(|(w, _)| *w).chain(["static"]).collect();
    let svg = c.o.out.join("workloads.svg");
    let series: Vec<BarSeries> = c
        .backends
        .iter()
        .map(|&b| BarSeries { name: b.into(), values: names.iter().map(|w| Some((slow(w, b), 0.0)).filter(|(v, _)| v.is_finite())).collect() })
        .collect();
    warn_plot(plot::bars(
        &svg,
        &Frame {
            title: "Warm workloads relative to a plain process (1 = process; FaaS paper Figs. 8-10, 12, 13)",
            x_desc: "workload",
            y_desc: "time relative to process",
            log_x: false,
            log_y: false,
        },
        &names.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        &series,
    ));
    let mut header = vec!["workload".to_string()];
    header.extend(c.backends.iter().map(|b| b.to_string()));
    header.push("paper (unikernel / runc / gVisor)".into());
    let paper_of = |w: &str| match w {
        "fib" => "all equal (plot only)",
        "matmul" => "all similar (plot only)",
        "alloc" => "≈40 ms (OSv) / < 20 ms / ≈40 ms",
        "fileread" => "181 ms (OSv) / 87 ms / ≈160 ms",
        _ => "> 271 MiB/s (OSv; Nanos 271) / below Linux VM / ≈180 MiB/s",
    };
    let mut rows = Vec::new();
    for w in &names {
        let mut r = vec![if *w == "static" { "static 50 MiB, 4 clients (MiB/s)".to_string() } else { format!("{w} (ms, mean ± SD, ×process)") }];
        for &b in &c.backends {
            r.push(if *w == "static" {
                thr.get(b).map(|v| format!("{} (×{})", fixed(*v, 0), fixed(slow(w, b), 2))).unwrap_or_else(|| "–".into())
            } else {
                st(w, b).map(|s| format!("{} ± {} (×{})", fixed(s.mean, 1), fixed(s.sd, 1), fixed(slow(w, b), 2))).unwrap_or_else(|| "–".into())
            });
        }
        r.push(paper_of(w).into());
        rows.push(r);
    }
    let mut table = table::markdown(&header, &rows);
    table.push_str(&format!(
        "\nfib: fib({FIB_N}) recursive; matmul: 1024×1024 doubles; alloc: 50 MiB, every page written; fileread: the 50 MiB file read into memory; \
         {} warm runs each, measured at the client through the gateway. ×process: time relative to the process backend (for static, process's rate over this one's).\n",
        c.o.repeat
    ));
    // What the instances did per call: CPU time against wall-clock time.
    let mean_of = |v: &[CallUsage], f: &dyn Fn(&CallUsage) -> f64| v.iter().map(f).sum::<f64>() / v.len().max(1) as f64;
    let mut urows = Vec::new();
    for (w, _) in &timed {
        for &b in &c.backends {
            let (Some(v), Some(s)) = (usage.get(&(*w, b)), st(w, b)) else {
                continue;
            };
            urows.push(vec![
                w.to_string(),
                b.to_string(),
                fixed(s.mean, 2),
                fixed(mean_of(v, &|u| u.cpu_ms), 2),
                fixed(mean_of(v, &|u| u.machine_ms), 1),
                fixed(mean_of(v, &|u| u.voluntary as f64), 1),
                fixed(mean_of(v, &|u| u.involuntary as f64), 2),
                fixed(mean_of(v, &|u| u.migrations as f64), 2),
                fixed(waits.get(&(*w, b)).map(|x| x.iter().sum::<f64>() / x.len().max(1) as f64).unwrap_or(f64::NAN), 1),
            ]);
        }
    }
    table.push_str("\nPer warm call, means (the instance's processes, from /proc; the machine's busy time of all CPUs from /proc/stat, 10 ms ticks):\n\n");
    table.push_str(&table::markdown(
        &[
            "workload",
            "backend",
            "wall ms",
            "instance CPU ms",
            "machine busy ms",
            "voluntary switches",
            "involuntary switches",
            "CPU migrations",
            "quiet wait ms",
        ]
        .map(String::from),
        &urows,
    ));
    table.push_str(&format!(
        "\nBefore each call the bench waited until every warm instance used less than {} µs of CPU in {} ms (quiet wait: how long; {not_quiet} of the calls were timed after {} s without quiet).\n",
        QUIET_CPU.as_micros(),
        QUIET_WINDOW.as_millis(),
        QUIET_TIMEOUT.as_secs()
    ));
    let mut results = serde_json::Map::new();
    for w in &names {
        let mut per = serde_json::Map::new();
        for &b in &c.backends {
            if *w == "static" {
                if let Some(v) = thr.get(b) {
                    per.insert(b.into(), json!({"mib_per_s": v, "downloads": downloads, "slowdown_vs_process": slow(w, b)}));
                }
            } else if let Some(s) = st(w, b) {
                let mut j = s.json();
                j["slowdown_vs_process"] = json!(slow(w, b));
                if let Some(v) = usage.get(&(*w, b)) {
                    j["instance_cpu_ms"] = json!(mean_of(v, &|u| u.cpu_ms));
                    j["machine_busy_ms"] = json!(mean_of(v, &|u| u.machine_ms));
                    j["involuntary_switches"] = json!(mean_of(v, &|u| u.involuntary as f64));
                    j["quiet_wait_ms"] = json!(waits.get(&(*w, b)).map(|x| x.iter().sum::<f64>() / x.len().max(1) as f64));
                }
                per.insert(b.into(), j);
            }
        }
        results.insert(w.to_string(), Value::Object(per));
    }
    let worst = names.iter().map(|w| slow(w, "spt")).filter(|v| v.is_finite()).fold(f64::NAN, f64::max);
    let detail: Vec<String> = names.iter().map(|w| format!("{w} ×{}", fixed(slow(w, "spt"), 3))).collect();
    let goals =
        vec![Goal { what: "workloads on spt within 5% of process".into(), measured: detail.join(", "), met: worst.is_finite().then_some(worst <= 1.05) }];
    let mut srows = Vec::new();
    for w in &names {
        let (what, paper) = match *w {
            "fib" => (format!("fib({FIB_N}) warm (ms)"), Paper { unikernel: "= others (plot)", runc: "= others", gvisor: "= others" }),
            "matmul" => ("matmul 1024² warm (ms)".to_string(), Paper { unikernel: "≈ others (plot)", runc: "≈ others", gvisor: "≈ others" }),
            "alloc" => ("alloc 50 MiB warm (ms)".to_string(), Paper { unikernel: "≈40 (OSv)", runc: "< 20", gvisor: "≈40" }),
            "fileread" => ("fileread 50 MiB warm (ms)".to_string(), Paper { unikernel: "181 (OSv)", runc: "87", gvisor: "≈160" }),
            _ => ("static 50 MiB, 4 clients (MiB/s)".to_string(), Paper { unikernel: "> 271 (OSv; Nanos 271)", runc: "< Linux VM (plot)", gvisor: "≈180" }),
        };
        let values = c
            .backends
            .iter()
            .filter_map(|&b| if *w == "static" { thr.get(b).map(|v| (b, fixed(*v, 0))) } else { st(w, b).map(|s| (b, fixed(s.mean, 1))) })
            .collect();
        srows.push(Row { what, paper, values });
    }
    Ok(Outcome {
        json: json!({"runs": c.o.repeat, "results": results, "failures": failures, "csv": csv_path, "plot": svg, "calls_timed_without_quiet": not_quiet}),
        table,
        rows: srows,
        goals,
    })
}

/// Runs `hey` with a bound on its wall time.
/// `netns`: run hey in that network namespace (a runc/runsc instance's own).
/// Fig. 11: hey at 1 … max_clients clients, straight to one instance and
/// through the gateway.
fn concurrency(c: &Ctx) -> Result<Outcome> {
    let levels: Vec<usize> = (0..).map(|i| 1usize << i).take_while(|&l| l <= c.o.max_clients).collect();
    let mut failures = Vec::new();
    let mut targets: Vec<(&str, SocketAddr)> = Vec::new();
    // Where each backend's instance is when it has a network namespace of its own.
    let mut netns: BTreeMap<&str, Option<String>> = BTreeMap::new();
    for &b in &c.backends {
        let name = format!("cc-{b}");
        let r =
            c.gw.deploy_cold(&name, &c.fns.settings("noop", b, json!({"concurrency": CC_CONCURRENCY, "max_instances": 1, "queue": 100_000})))
                .map_err(|e| format!("{e:#}"))
                .and_then(|_| {
                    let r = c.gw.invoke(&name, "/", false).map_err(|e| e.to_string())?;
                    if r.status != 200 {
                        return Err(format!("status {}", r.status));
                    }
                    c.gw.instances(&name)
                        .map_err(|e| format!("{e:#}"))?
                        .first()
                        .map(|i| i.addr)
                        .ok_or_else(|| "no instance is running after the first request".to_string())
                });
        match r {
            Ok(a) => targets.push((b, a)),
            Err(e) => note_failure(&mut failures, format!("concurrency on {b}: {e}")),
        }
    }
    // (backend, via, clients) -> result
    let mut res: BTreeMap<(&str, &str, usize), HeyResult> = BTreeMap::new();
    let mut csv = Vec::new();
    for &l in &levels {
        say(&format!("concurrency: {} requests at {l} clients", c.o.requests.max(l)));
        for (b, first) in &targets {
            for via in ["direct", "gateway"] {
                // The gateway replaces an instance that failed a request:
                // the direct runs follow the one running now.
                let name = format!("cc-{b}");
                let direct = match c.gw.instances(&name)?.first() {
                    Some(i) => {
                        netns.insert(b, i.netns.clone());
                        i.addr
                    }
                    None => {
                        let _ = c.gw.invoke(&name, "/", false);
                        let i = c.gw.instances(&name)?.into_iter().next();
                        netns.insert(b, i.as_ref().and_then(|i| i.netns.clone()));
                        i.map(|i| i.addr).unwrap_or(*first)
                    }
                };
                if via == "direct" && direct != *first {
                    note_failure(
                        &mut failures,
                        format!(
                            "concurrency {l} on {b}: the gateway had replaced the first instance \
                             ({first}) by one at {direct}: it stops an instance that fails a request"
                        ),
                    );
                }
                let url = if via == "direct" { format!("http://{direct}/") } else { format!("http://{}/fn/cc-{b}/", c.gw.addr) };
                let ns = if via == "direct" { netns.get(b).cloned().flatten() } else { None };
                match run_hey(c.o.requests.max(l), l, &url, ns.as_deref()) {
                    Ok(h) => {
                        let n = c.o.requests.max(l) as u64;
                        csv.push(format!("{b},{via},{l},{n},{:.1},{},{},{}", h.ok_rps(), h.ok(), n - h.ok(), h.errors));
                        res.insert((b, via, l), h);
                    }
                    Err(e) => note_failure(&mut failures, format!("concurrency {l} on {b} {via}: {e}")),
                }
            }
        }
    }
    for &b in &c.backends {
        c.gw.clear(&format!("cc-{b}"))?;
    }
    let csv_path = c.o.out.join("concurrency.csv");
    table::write_csv_lines(&csv_path, "backend,via,clients,requests,ok_rps,ok,failed,connection_errors", &csv)?;
    let svg = c.o.out.join("concurrency.svg");
    let mut lines = Vec::new();
    for (b, _) in &targets {
        for via in ["direct", "gateway"] {
            lines.push(Line {
                name: format!("{b} {via}"),
                points: levels.iter().filter_map(|&l| res.get(&(*b, via, l)).map(|h| (l as f64, h.ok_rps()))).collect(),
            });
        }
    }
    let title = format!("Successful requests per second, {} requests per level (FaaS paper Fig. 11)", c.o.requests);
    warn_plot(plot::lines(&svg, &Frame { title: &title, x_desc: "concurrent clients (log scale)", y_desc: "requests/s", log_x: true, log_y: false }, &lines));
    let mut header = vec!["clients".to_string()];
    for (b, _) in &targets {
        header.push(format!("{b} direct req/s (failed)"));
        header.push(format!("{b} gateway req/s (failed)"));
    }
    let rows: Vec<Vec<String>> = levels
        .iter()
        .map(|&l| {
            let mut r = vec![l.to_string()];
            for (b, _) in &targets {
                for via in ["direct", "gateway"] {
                    r.push(
                        res.get(&(*b, via, l))
                            .map(|h| format!("{} ({})", fixed(h.ok_rps(), 0), c.o.requests.max(l) as u64 - h.ok()))
                            .unwrap_or_else(|| "–".into()),
                    );
                }
            }
            r
        })
        .collect();
    let mut table = table::markdown(&header, &rows);
    table.push_str(
        "\nreq/s counts 2xx answers only (hey's own Requests/sec counts failures too); failed: requests without a 2xx answer. Paper (Fig. 11, 2^15 requests): \
         OSv up to 44,793 req/s, Linux microVM 24,621; Nanos errors above 256 clients, gVisor cannot serve more than 512; runc falls behind the microVM above 2 clients.\n",
    );
    let best = |b: &str, via: &str| levels.iter().filter_map(|&l| res.get(&(b, via, l)).map(|h| h.ok_rps())).fold(f64::NAN, f64::max);
    let mut results = serde_json::Map::new();
    for (b, _) in &targets {
        let mut per = serde_json::Map::new();
        for via in ["direct", "gateway"] {
            let m: serde_json::Map<String, Value> = levels
                .iter()
                .filter_map(|&l| {
                    res.get(&(*b, via, l)).map(|h| (l.to_string(), json!({"ok_rps": h.ok_rps(), "ok": h.ok(), "statuses": h.statuses, "connection_errors": h.errors, "p50_s": h.p50_s, "p99_s": h.p99_s})))
                })
                .collect();
            per.insert(via.into(), Value::Object(m));
        }
        results.insert(b.to_string(), Value::Object(per));
    }
    let rows = vec![
        Row {
            what: "Max req/s, no-op, one instance direct".into(),
            paper: Paper { unikernel: "44,793 (OSv)", runc: "plot only", gvisor: "plot only (fails > 512 clients)" },
            values: targets.iter().map(|(b, _)| (*b, fixed(best(b, "direct"), 0))).collect(),
        },
        Row {
            what: "Max req/s, no-op, through the gateway".into(),
            paper: Paper { unikernel: "–", runc: "–", gvisor: "–" },
            values: targets.iter().map(|(b, _)| (*b, fixed(best(b, "gateway"), 0))).collect(),
        },
    ];
    Ok(Outcome {
        json: json!({"requests": c.o.requests, "levels": levels, "results": results, "failures": failures, "csv": csv_path, "plot": svg}),
        table,
        rows,
        goals: vec![],
    })
}

// --------------------------------------------------------------------- main

/// Checks the options before anything runs.
fn check(o: &FaasOpts) -> Result<(), FaasError> {
    let bad = |flag, value: String, why| Err(FaasError::BadOption { flag, value, why });
    if o.repeat == 0 {
        return bad("repeat", "0".into(), "at least 1 run is needed");
    }
    if o.requests == 0 {
        return bad("requests", "0".into(), "hey needs at least 1 request");
    }
    if o.max_clients == 0 || o.max_clients > 65536 {
        return bad("max-clients", o.max_clients.to_string(), "expected 1 to 65536");
    }
    for (flag, v) in [("bursts", &o.bursts), ("instances", &o.instances)] {
        if let Some(&x) = v.iter().find(|&&x| x == 0 || x > 1024) {
            return bad(flag, x.to_string(), "each count must be 1 to 1024 (the gateway's max_instances)");
        }
    }
    Ok(())
}

/// Whether `backend` can run here: a real cold start of the no-op through
/// the gateway; the reason (the gateway's own words) if not.
fn probe(gw: &Gateway, fns: &Fns, backend: &str) -> Result<(), String> {
    let name = format!("probe-{backend}");
    let r = one_cold(gw, &name, &fns.settings("noop", backend, json!({"concurrency": 1, "max_instances": 1, "timeout_ms": 60_000})));
    let r = match r {
        Err(e) if e.starts_with("status") => {
            let body = gw.invoke(&name, "/", true).map(|r| r.text()).unwrap_or_default();
            Err(format!("{e}: {body}"))
        }
        r => r.map(|_| ()),
    };
    let _ = gw.clear(&name);
    r
}

/// Private memory of process `pid` in KiB: the pages only it holds
/// (`Private_Clean + Private_Dirty` of smaps_rollup), its USS.
fn uss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    s.lines()
        .filter(|l| l.starts_with("Private_Clean:") || l.starts_with("Private_Dirty:"))
        .filter_map(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        .sum()
}

/// One request on a new connection, timed to the end of the response
/// head (the first byte of a no-op's answer arrives with it): ms, or why
/// it failed (not 200, or `cold` and not a cold start).
fn timed(addr: SocketAddr, path: &str, cold: Option<bool>) -> Result<f64, String> {
    let t0 = Instant::now();
    let r = http(addr, None, "GET", path, None, false, REQUEST_TIMEOUT).map_err(|e| e.to_string())?;
    let dt = t0.elapsed().as_secs_f64() * 1e3;
    if r.status != 200 || cold.is_some_and(|c| c != r.cold()) {
        return Err(format!("status {} (cold start: {}): {}", r.status, r.cold(), r.text()));
    }
    Ok(dt)
}

/// Templates: spt and hvt (those in `--backends`) cold starts as copies of a template booted
/// at deploy, beside spt cold starts by exec (`"template": false`), for
/// the C no-op, the Go no-op and the Lua function (those built): request
/// → response p50/p99 of `--requests` (at least 20) sequential cold
/// requests, each on a new client connection and a fresh instance
/// (`requests_per_instance` 1); the wall time of 100 concurrent cold
/// requests to one function; the private memory (USS) of an instance right
/// after its first answer, and the template's own; and the gateway's warm
/// path beside the same request straight to the instance.
fn templates(c: &Ctx) -> Result<Outcome> {
    let mut failures = Vec::new();
    let mut kinds = vec!["noop"];
    if c.fns.go_missing.is_none() {
        kinds.push("go-noop");
    }
    if c.fns.lua_missing.is_none() {
        kinds.push("lua");
    }
    let n = c.o.requests.max(20);
    let mut csv = Vec::new();
    let mut rows = Vec::new();
    let mut results = serde_json::Map::new();
    let mut goal_vals: BTreeMap<&str, f64> = BTreeMap::new();
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    // The tenders asked for (`--backends`): spt's keys stay as they were,
    // hvt's are under `hvt/`.
    let tenders: Vec<&'static str> = c.backends.iter().copied().filter(|b| matches!(*b, "spt" | "hvt")).collect();
    for &tb in &tenders {
        let key_of = |k: &str, mode: &str| if tb == "spt" { format!("{k}/{mode}") } else { format!("{tb}/{k}/{mode}") };
        for &k in &kinds {
            for (mode, tmpl) in [("template", true), ("exec", false)] {
                let name = if tb == "spt" { format!("tp-{}-{mode}", k.replace('-', "")) } else { format!("tp-{tb}-{}-{mode}", k.replace('-', "")) };
                say(&format!("templates: {k} on {tb}, {mode} start: {n} sequential cold requests"));
                let one = json!({"template": tmpl, "requests_per_instance": 1, "max_instances": 1, "concurrency": 1, "timeout_ms": COLD_TIMEOUT_MS});
                c.gw.deploy_cold(&name, &c.fns.settings(k, tb, one))?;
                let path = format!("/fn/{name}/");
                let mut seq = Vec::new();
                for i in 0..n + 3 {
                    match timed(c.gw.addr, &path, Some(true)) {
                        // The first three warm the gateway's and the host's caches.
                        Ok(dt) if i >= 3 => seq.push(dt),
                        Ok(_) => {}
                        Err(e) => note_failure(&mut failures, format!("templates: {k} {mode} cold request {i}: {e}")),
                    }
                }
                for (i, dt) in seq.iter().enumerate() {
                    csv.push(format!("{tb},{k},{mode},sequential,{i},{dt:.3}"));
                }
                // 100 at once, each a cold start of its own instance.
                say(&format!("templates: {k} on {tb}, {mode} start: 100 concurrent cold requests"));
                let many = json!({"template": tmpl, "requests_per_instance": 1, "max_instances": 100, "concurrency": 1, "timeout_ms": COLD_TIMEOUT_MS});
                c.gw.deploy_cold(&name, &c.fns.settings(k, tb, many))?;
                let names = vec![name.clone(); 100];
                let t0 = Instant::now();
                let burst = fire(c.gw, &names);
                let wall = t0.elapsed().as_secs_f64() * 1e3;
                let ok = burst.iter().filter(|r| r.is_ok()).count();
                if let Some(Err(e)) = burst.iter().find(|r| r.is_err()) {
                    note_failure(&mut failures, format!("templates: {k} {mode}: {} of 100 concurrent cold requests failed, e.g. {e}", 100 - ok));
                }
                csv.push(format!("{tb},{k},{mode},burst100_wall,0,{wall:.3}"));
                // Memory of one instance right after its first answer.
                let keep = json!({"template": tmpl, "max_instances": 1, "concurrency": 1, "timeout_ms": COLD_TIMEOUT_MS});
                c.gw.deploy_cold(&name, &c.fns.settings(k, tb, keep))?;
                let (mut uss, mut tpl_uss, mut tpl_rss, mut warm, mut direct) = (f64::NAN, f64::NAN, f64::NAN, Vec::new(), Vec::new());
                match timed(c.gw.addr, &path, Some(true)) {
                    Ok(_) => {
                        if let Some(inst) = c.gw.instances(&name)?.into_iter().next() {
                            uss = uss_kib(inst.pid) as f64;
                            // The warm path: through the gateway, and straight to
                            // the instance, alternating (C no-op only).
                            if k == "noop" {
                                for _ in 0..n {
                                    match (timed(c.gw.addr, &path, Some(false)), timed(inst.addr, "/", None)) {
                                        (Ok(g), Ok(d)) => {
                                            warm.push(g);
                                            direct.push(d);
                                        }
                                        (Err(e), _) | (_, Err(e)) => note_failure(&mut failures, format!("templates: warm {k} {mode}: {e}")),
                                    }
                                }
                            }
                        }
                        if let Some(t) = c.gw.template_pid(&name)? {
                            tpl_uss = uss_kib(t) as f64;
                            tpl_rss = crate::sample::status_kib(t, "VmRSS:") as f64;
                        }
                    }
                    Err(e) => note_failure(&mut failures, format!("templates: {k} {mode}: the memory sample's request: {e}")),
                }
                c.gw.clear(&name)?;
                let s = stats(&seq);
                let (w, d) = (stats(&warm), stats(&direct));
                let mode_s = if tmpl { "template (copy)" } else { "exec" };
                rows.push(vec![
                    k.to_string(),
                    tb.to_string(),
                    mode_s.to_string(),
                    fixed(s.median, 2),
                    fixed(s.p99, 2),
                    s.n.to_string(),
                    fixed(wall, 1),
                    format!("{ok}/100"),
                    fixed(uss, 0),
                    if tmpl { format!("{} / {}", fixed(tpl_uss, 0), fixed(tpl_rss, 0)) } else { "–".into() },
                ]);
                results.insert(
                    key_of(k, mode),
                    json!({"cold_p50_ms": s.median, "cold_p99_ms": s.p99, "cold_n": s.n, "burst100_wall_ms": wall, "burst100_ok": ok,
                       "uss_kib": uss, "template_uss_kib": tpl_uss, "template_rss_kib": tpl_rss,
                       "warm_gateway_p50_ms": w.median, "warm_direct_p50_ms": d.median, "load_average": load()}),
                );
                if k == "noop" && tmpl && tb == "spt" {
                    goal_vals.insert("p50", s.median);
                    goal_vals.insert("p99", s.p99);
                    goal_vals.insert("wall", wall);
                    goal_vals.insert("uss", uss);
                    goal_vals.insert("warm", w.median);
                    goal_vals.insert("direct", d.median);
                }
                if k == "noop" && tmpl && tb == "hvt" {
                    goal_vals.insert("hvt_p50", s.median);
                    goal_vals.insert("hvt_p99", s.p99);
                }
            }
        }
    }
    let csv_path = c.o.out.join("templates.csv");
    table::write_csv_lines(&csv_path, "backend,function,start,what,i,ms", &csv)?;
    let header: Vec<String> = [
        "function",
        "backend",
        "start",
        "cold p50 ms",
        "cold p99 ms",
        "n",
        "100 concurrent: wall ms",
        "answered",
        "USS KiB after 1st answer",
        "template USS / RSS KiB",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut table = table::markdown(&header, &rows);
    let g = |k: &str| goal_vals.get(k).copied().unwrap_or(f64::NAN);
    table.push_str(&format!(
        "\nCold: request → response of a new client connection through the gateway, each on a fresh instance (`requests_per_instance` 1); load average at the end: {}.\nWarm C no-op: through the gateway p50 {} ms, straight to the instance p50 {} ms (new connection each): the gateway adds {} ms.\nFor scale: zeroboot spawn p50 0.79 / p99 1.74 ms (spawn only), Catalyzer sfork < 1 ms, KraftCloud ≈ 4 ms, Firecracker restore 4–10 ms; seed 002's cold start 110 ms.\n",
        load(),
        fixed(g("warm"), 3),
        fixed(g("direct"), 3),
        fixed(g("warm") - g("direct"), 3)
    ));
    let goal = |what: &str, v: f64, unit: &str, limit: f64| Goal {
        what: what.into(),
        measured: format!("{} {unit}", fixed(v, 3)),
        met: v.is_finite().then_some(v <= limit),
    };
    let mut goals = Vec::new();
    if tenders.contains(&"spt") {
        goals.extend([
            goal("template cold start of the C no-op on spt, p50 ≤ 0.5 ms", g("p50"), "ms", 0.5),
            goal("template cold start of the C no-op on spt, p99 ≤ 1 ms", g("p99"), "ms", 1.0),
            goal("100 concurrent template cold starts ≤ 50 ms wall", g("wall"), "ms", 50.0),
            goal("USS of a fresh no-op copy ≤ 100 KiB", g("uss"), "KiB", 100.0),
            goal("gateway warm path ≤ 0.1 ms over direct (p50)", g("warm") - g("direct"), "ms", 0.1),
            goal("cold/warm p50 ≤ 2", g("p50") / g("warm"), "×", 2.0),
        ]);
    }
    if tenders.contains(&"hvt") {
        goals.push(goal("template cold start of the C no-op on hvt, p50 ≤ 2 ms", g("hvt_p50"), "ms", 2.0));
    }
    let mut values = BTreeMap::new();
    if tenders.contains(&"spt") {
        values.insert("spt", format!("{} / {}", fixed(g("p50"), 2), fixed(g("p99"), 2)));
    }
    if tenders.contains(&"hvt") {
        values.insert("hvt", format!("{} / {}", fixed(g("hvt_p50"), 2), fixed(g("hvt_p99"), 2)));
    }
    Ok(Outcome {
        json: json!({"unit": "ms", "requests": n, "results": results, "failures": failures, "csv": csv_path}),
        table,
        rows: vec![Row { what: "Template cold start, C no-op (ms, p50 / p99)".into(), paper: Paper { unikernel: "–", runc: "–", gvisor: "–" }, values }],
        goals,
    })
}

/// Why `backend` cannot run on this machine, if it cannot: hvt needs a
/// usable /dev/kvm, runc and runsc need to be installed and root.
fn lacks(backend: &str) -> Option<String> {
    match backend {
        "hvt" => crate::host::kvm_usable().err(),
        "runc" | "runsc" if crate::host::find_program(backend).is_none() => Some(format!("{backend} is not installed (scripts/setup installs it)")),
        "runc" | "runsc" if crate::host::effective_uid() != Some(0) => Some(format!("{backend} needs root and shoal bench faas is not running as root")),
        _ => None,
    }
}

/// `shoal bench faas`.
pub fn faas(o: FaasOpts) -> Result<()> {
    check(&o)?;
    let only: Vec<&str> =
        if o.only.is_empty() { EXPERIMENTS.to_vec() } else { EXPERIMENTS.iter().copied().filter(|e| o.only.iter().any(|x| x == e)).collect() };
    let wanted: Vec<&'static str> =
        if o.backends.is_empty() { BACKENDS.to_vec() } else { BACKENDS.iter().copied().filter(|b| o.backends.iter().any(|x| x == b)).collect() };
    std::fs::create_dir_all(&o.out).with_context(|| format!("cannot create {}", o.out.display()))?;
    let t_start = Instant::now();
    // The gateway needs the tender: say so before anything is built.
    crate::host::tender_binary()?;
    let shoal = crate::host::pin_binaries(&o.out.join("bin"))?;
    let fns = Fns::build(&shoal, &o.out.join("functions"))?;
    let gw = Gateway::start(&shoal, &o.out.join("gateway.log"), &fns.dir)?;
    say(&format!("shoal serve on {} (log {})", gw.addr, o.out.join("gateway.log").display()));
    // Backends this machine lacks, and those that could run and failed.
    let mut unavailable: BTreeMap<&str, String> = BTreeMap::new();
    let mut failed: BTreeMap<&str, String> = BTreeMap::new();
    let mut backends = Vec::new();
    for b in wanted {
        if let Some(why) = lacks(b) {
            say(&format!("{b} unavailable: it cannot run here: {why}"));
            unavailable.insert(b, why);
            continue;
        }
        match probe(&gw, &fns, b) {
            Ok(()) => backends.push(b),
            Err(why) => {
                say(&format!("{b} FAILED: {why}"));
                failed.insert(b, why);
            }
        }
    }
    if backends.is_empty() {
        let reasons: Vec<String> = failed.iter().chain(&unavailable).map(|(b, w)| format!("{b}: {w}")).collect();
        return Err(BenchError::nothing_measured("faas", &reasons).into());
    }
    let c = Ctx { gw: &gw, fns: &fns, backends: backends.clone(), o: &o };
    let mut outcomes: Vec<(&str, Outcome, f64)> = Vec::new();
    // Minutes to hours: a bar of the experiments (messages go above it).
    let progress = Progress::new("bench faas", only.len() as u64, false);
    for e in only {
        progress.doing(e);
        say(&format!("experiment {e} on {}", backends.join(", ")));
        let t0 = Instant::now();
        let out = match e {
            "cold-start" => cold_start(&c),
            "burst" => burst(&c),
            "startup-cost" => startup_cost(&c),
            "idle-cpu" => idle_cpu(&c),
            "idle-memory" => idle_memory(&c),
            "workloads" => workloads(&c),
            "two-write" => two_write(&c),
            "go" => go_functions(&c),
            "node" => node::node_functions(&c),
            "templates" => templates(&c),
            _ => {
                if Command::new("hey").arg("-h").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
                    say("concurrency skipped: hey is not installed (scripts/setup installs it)");
                    continue;
                }
                concurrency(&c)
            }
        }
        .with_context(|| format!("experiment {e}"))?;
        let mut out = out;
        if let Some(f) = out.json["failures"].as_array().filter(|f| !f.is_empty()) {
            out.table.push_str(&format!("\nFailures ({}):\n", f.len()));
            for x in f.iter().take(20) {
                out.table.push_str(&format!("- {}\n", x.as_str().unwrap_or_default()));
            }
        }
        std::fs::write(o.out.join(format!("{e}.md")), &out.table)?;
        let secs = t0.elapsed().as_secs_f64();
        say(&format!("experiment {e} took {secs:.0} s ({:.1} minutes since the start)", t_start.elapsed().as_secs_f64() / 60.0));
        progress.step();
        outcomes.push((e, out, secs));
    }
    drop(gw);
    let minutes = t_start.elapsed().as_secs_f64() / 60.0;

    // The summary: one row per experiment, the paper's columns first.
    let mut header: Vec<String> = ["experiment", "paper: best unikernel", "paper: runc", "paper: gVisor"].iter().map(|s| s.to_string()).collect();
    header.extend(BACKENDS.iter().map(|b| format!("shoal {b}")));
    let mut rows = Vec::new();
    let mut goals = Vec::new();
    for (_, out, _) in &outcomes {
        for r in &out.rows {
            let mut row = vec![r.what.clone(), r.paper.unikernel.into(), r.paper.runc.into(), r.paper.gvisor.into()];
            row.extend(BACKENDS.iter().map(|b| {
                r.values.get(b).cloned().unwrap_or_else(|| {
                    if unavailable.contains_key(b) {
                        "unavailable".into()
                    } else if failed.contains_key(b) {
                        "failed".into()
                    } else {
                        "–".into()
                    }
                })
            }));
            rows.push(row);
        }
        goals.extend(out.goals.iter());
    }
    let mut summary = table::markdown(&header, &rows);
    summary.push_str("\nTargets (shoal spt, this run):\n\n");
    for g in &goals {
        let verdict = match g.met {
            Some(true) => "met",
            Some(false) => "not met",
            None => "not measured",
        };
        summary.push_str(&format!("- {}: {} — {verdict}\n", g.what, g.measured));
    }
    for (b, why) in &unavailable {
        summary.push_str(&format!("- {b} unavailable here: {why}\n"));
    }
    for (b, why) in &failed {
        summary.push_str(&format!("- {b} FAILED: {why}\n"));
    }
    summary.push_str(&format!(
        "\n{} runs (--repeat), {} hey requests per level; {:.1} minutes in all. CPU times come from /proc: hardware counters are not available here.\n",
        o.repeat, o.requests, minutes
    ));
    let summary_path = o.out.join("summary.md");
    std::fs::write(&summary_path, &summary)?;
    if o.json {
        let exps: serde_json::Map<String, Value> = outcomes
            .iter()
            .map(|(e, out, secs)| {
                (e.to_string(), {
                    let mut j = out.json.clone();
                    j["seconds"] = json!(secs);
                    j
                })
            })
            .collect();
        let goals_json: Vec<Value> = goals.iter().map(|g| json!({"goal": g.what, "measured": g.measured, "met": g.met})).collect();
        let v = json!({
            "backends": backends, "unavailable": unavailable, "failed": failed, "repeat": o.repeat, "requests": o.requests, "minutes": minutes,
            "cpu_source": "/proc (schedstat, cutime/cstime); hardware counters unavailable",
            "experiments": exps, "goals": goals_json, "summary": summary_path, "out": o.out,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    for (e, out, secs) in &outcomes {
        println!("## {e} ({secs:.0} s; CSV and plot: {})\n", o.out.join(format!("{e}.{{csv,svg}}")).display());
        println!("{}", out.table);
    }
    println!("## summary\n\n{summary}");
    println!("(written to {})", o.out.display());
    Ok(())
}

/// 4 clients downloading function `name`'s 50 MiB file through the gateway
/// at `gw`, `downloads` in all (a multiple of 4): MiB/s, or the last error
/// a client met (every client is waited for).
fn static_downloads(gw: std::net::SocketAddr, name: &str, downloads: usize) -> Result<f64, String> {
    let t0 = Instant::now();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let path = format!("/fn/{name}/");
            std::thread::spawn(move || -> Result<u64, String> {
                let mut bytes = 0;
                for _ in 0..downloads / 4 {
                    let r = http(gw, None, "GET", &path, None, false, REQUEST_TIMEOUT).map_err(|e| e.to_string())?;
                    if r.status != 200 || r.bytes != 50 << 20 {
                        return Err(format!("status {}, {} bytes", r.status, r.bytes));
                    }
                    bytes += r.bytes;
                }
                Ok(bytes)
            })
        })
        .collect();
    let mut bytes = 0;
    let mut err = None;
    for h in handles {
        match h.join().unwrap_or_else(|_| Err("a client thread panicked".into())) {
            Ok(n) => bytes += n,
            Err(e) => err = Some(e),
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok(bytes as f64 / (1 << 20) as f64 / t0.elapsed().as_secs_f64()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shell that spins for a while and then sleeps: `wait_quiet`
    /// returns quiet only after the spin (the shell writes `marker` at its
    /// end, before it sleeps).
    #[test]
    fn wait_quiet_waits_for_a_busy_process_to_stop() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("spun");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; : > {}; exec sleep 30", marker.display()))
            .spawn()
            .unwrap();
        let (_, quiet) = wait_quiet(&[child.id()]);
        let spun = marker.exists();
        let _ = child.kill();
        let _ = child.wait();
        assert!(quiet && spun, "quiet {quiet}, spin over {spun}");
    }

    /// Processes that never stop computing are never quiet: the wait ends
    /// at QUIET_TIMEOUT and says so. Their CPU time is a reading that
    /// grows by a whole window each time (a real spinner on a loaded
    /// machine may get less than QUIET_CPU of a window and look quiet).
    #[test]
    fn wait_quiet_gives_up_on_a_spinning_process() {
        let mut spent = 0u64;
        let (waited, quiet) = wait_quiet_by(|| {
            spent += QUIET_WINDOW.as_nanos() as u64;
            spent
        });
        assert!(!quiet && waited >= QUIET_TIMEOUT, "quiet {quiet} after {waited:?}");
    }
}
