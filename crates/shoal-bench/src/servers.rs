//! `shoal bench http` and `shoal bench kv`: the servers paper's application study
//! (§V–VI, Figs. 3–5) on this machine: throughput
//! in requests per second against the number of concurrent clients for
//! nginx serving a small static page (`wrk`) and for Redis GET and SET
//! (`redis-benchmark`), for a native process, runc, runsc, shoal spt and
//! shoal hvt, plus each system's memory footprint idle and under load.
//!
//! The servers come from the `nginx` and `redis` recipes (Debian sources;
//! the image and the native static program from the same build), run
//! exactly as tests/servers.rs runs them. Every system's server is started
//! once and keeps running; then every round (`--repeat`) runs every
//! concurrency level on every system in turn, so that the systems are
//! interleaved and a slow phase of the machine hits them all. Clients and
//! servers talk over 127.0.0.1 only; each wrk run lasts `--duration`
//! seconds and each redis-benchmark run makes `--requests` requests per
//! operation. Redis runs cache-only (no RDB, no AOF), as in the paper.
//!
//! runc and runsc run the same native program in an OCI bundle (its root a
//! copy of the recipe's directory) on the host network: the paper's
//! containers went through a NAT, which is left out here so that only the
//! runtime differs. runsc uses its default platform.
//!
//! Memory: the footprint of a system is the summed PSS of the processes
//! it consists of (the command started and all its descendants: for spt
//! `shoal run`, the tender and the instance process; for hvt the VMM with
//! its guest memory; for runc/runsc the runtime and the sandbox), read
//! from /proc/PID/smaps_rollup; for runc and runsc the container's cgroup
//! memory (memory.usage_in_bytes or memory.current, page cache included)
//! is reported beside it. Idle: after start-up, before any load; under
//! load: during each run at the largest concurrency, the largest of the
//! samples taken 0.1 s into the run and every 0.5 s after.
//!
//! Pinned mode (`--pin`): every server's whole process tree runs on one CPU
//! and the client on another (the first two CPUs the bench may use), set
//! with `sched_setaffinity` before the server or client program starts, so
//! that it is inherited by everything they start (the tender and instance,
//! the runtime's sandbox); runc and runsc also get that CPU as their
//! container's cpuset. The bench reads every server process's allowed CPUs
//! back from /proc and reports them. Unpinned, a single client's rate on a
//! small machine is mostly set by whether client and server share a core.

use crate::host::{effective_uid, find_program, pin_binaries, pin_build};
use crate::load::{free_port, redis_rps, wrk_errors, wrk_value};
use crate::plot::{self, Frame, Line};
use crate::progress::Progress;
use crate::sample::{pss_kib, tree};
use crate::stats::{fixed, mean_sd};
use crate::table::Table;
use crate::{BenchError, Missing};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use shoal_serve::bundle::{self, BundleError, Network, Process};
use shoal_serve::raise_nofile;
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to accept its first connection.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A client run that takes longer than this is killed and counts as failed.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(300);

/// The systems, in the order of every table.
pub const SYSTEMS: [&str; 6] = ["native", "runc", "runsc", "spt", "hvt", OTHER];

/// The system that runs the server on spt with another shoal build
/// (`--shoal-bin`): two builds compared in one interleaved run.
pub const OTHER: &str = "spt-other";

/// Which of the two benches.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// nginx + wrk.
    Http,
    /// Redis + redis-benchmark.
    Kv,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::Http => "http",
            Which::Kv => "kv",
        }
    }

    fn recipe(self) -> &'static str {
        match self {
            Which::Http => "nginx",
            Which::Kv => "redis",
        }
    }

    /// The operations measured (one throughput per run each).
    fn ops(self) -> &'static [&'static str] {
        match self {
            Which::Http => &["GET"],
            Which::Kv => &["GET", "SET"],
        }
    }

    fn client(self) -> (&'static str, &'static str) {
        match self {
            Which::Http => ("wrk", "wrk"),
            Which::Kv => ("redis-benchmark", "redis-tools"),
        }
    }
}

pub struct ServersOpts {
    pub which: Which,
    pub clients: Vec<usize>,
    pub repeat: usize,
    pub duration: f64,
    pub requests: usize,
    pub pipeline: usize,
    pub systems: Vec<String>,
    /// Servers on one CPU, the client on another (`--pin`).
    pub pin: bool,
    /// Another shoal build to compare (system [`OTHER`]).
    pub shoal_bin: Option<PathBuf>,
    pub out: PathBuf,
    pub json: bool,
}

/// Failures of the bench's set-up (a system's own failure is reported, as
/// failed, beside the others' results).
#[derive(Debug, thiserror::Error)]
pub enum ServersError {
    #[error("--clients needs at least one level and every level at least 1 client")]
    Clients,
    #[error("--repeat must be at least 1")]
    Repeat,
    #[error("--duration must be between 0.5 and 600 seconds")]
    Duration,
    #[error("--requests must be at least 1 and --pipeline between 1 and 1000")]
    Requests,
    #[error("unknown system `{0}` (the systems are native, runc, runsc, spt, hvt, and spt-other with --shoal-bin)")]
    System(String),
    #[error("the system spt-other needs --shoal-bin PATH (another build's shoal binary)")]
    NoOtherBin,
    #[error("--shoal-bin {0}: not a file")]
    OtherBin(PathBuf),
    #[error("this bench needs `{0}` (Debian package {1}; scripts/setup installs it)")]
    Client(&'static str, &'static str),
    #[error("--pin needs two CPUs, one for the servers and one for the client; this process may use {0}")]
    PinCpus(String),
    #[error("cannot read this process's CPU affinity: {0}")]
    Affinity(std::io::Error),
}

fn say(which: Which, msg: &str) {
    crate::progress::say(&format!("bench {}: {msg}", which.name()));
}

/// Why `sys` cannot run here, if it cannot (checked before anything starts).
fn unavailable(sys: &str) -> Option<String> {
    match sys {
        "hvt" => fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").err().map(|e| format!("/dev/kvm is not usable ({e})")),
        "runc" | "runsc" => {
            if find_program(sys).is_none() {
                Some(format!("{sys} is not installed (Debian package {sys}; scripts/setup installs it)"))
            } else if effective_uid() != Some(0) {
                Some(format!("{sys} needs root here and this bench is not running as root"))
            } else {
                None
            }
        }
        _ => None,
    }
}

/// The CPUs of `--pin`: the servers on one, the client on the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pin {
    pub server: usize,
    pub client: usize,
}

/// The first two CPUs this process may use (its affinity mask), as
/// [`Pin`]; an error when it may use fewer than two.
pub(crate) fn pin_cpus() -> Result<Pin, ServersError> {
    // SAFETY: cpu_set_t is plain bits; all zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity of our own process into a set of the size
    // passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Err(ServersError::Affinity(std::io::Error::last_os_error()));
    }
    // SAFETY: CPU_ISSET reads a bit of the set, the index below CPU_SETSIZE.
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect();
    match cpus[..] {
        [server, client, ..] => Ok(Pin { server, client }),
        _ => Err(ServersError::PinCpus(format!("{cpus:?}"))),
    }
}

/// Makes `cmd`'s process (and so everything it starts, which inherits the
/// mask) run only on `cpu`.
pub(crate) fn pin_command(cmd: &mut Command, cpu: usize) {
    // SAFETY: cpu_set_t is plain bits; all zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes a bit of the set; `cpu` came from pin_cpus,
    // below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the closure runs in the child between fork and exec; it only
    // makes the sched_setaffinity system call (async-signal-safe, no
    // allocation) on the child itself, with a set copied into the closure.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The `Cpus_allowed_list` of `pid` (e.g. "0" or "0-1"), if readable.
fn cpus_allowed(pid: u32) -> Option<String> {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|v| v.trim().to_string())
}

/// Copies the files of directory `from` into `to`, recursively.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to)?;
    for e in fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let e = e?;
        let dst = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_tree(&e.path(), &dst)?;
        } else {
            fs::copy(e.path(), &dst).with_context(|| format!("cannot copy {}", e.path().display()))?;
        }
    }
    Ok(())
}

/// Redis's arguments after the configuration file: cache-only, as in the
/// paper (the recipe's configuration turns persistence on).
pub(super) fn redis_args(port: u16, dir: &str) -> Vec<String> {
    ["--port", &port.to_string(), "--dir", dir, "--appendonly", "no", "--save", ""].iter().map(|s| s.to_string()).collect()
}

/// The recipe's nginx directory with `listen` on 127.0.0.1:`port`, in `dir`.
fn nginx_prefix(home: &Path, dir: &Path, port: u16) -> Result<()> {
    let src = home.join("apps/recipes/nginx");
    copy_tree(&src, dir)?;
    let conf = fs::read_to_string(src.join("nginx.conf"))?;
    anyhow::ensure!(conf.contains("listen 8080;"), "apps/recipes/nginx/nginx.conf no longer says `listen 8080;`");
    fs::write(dir.join("nginx.conf"), conf.replace("listen 8080;", &format!("listen 127.0.0.1:{port};")))?;
    Ok(())
}

/// What the bench starts the servers from.
struct Setup {
    which: Which,
    home: PathBuf,
    shoal: PathBuf,
    image: PathBuf,
    native: PathBuf,
    dir: PathBuf,
    /// The other build's pinned `shoal` and the image it made (`--shoal-bin`).
    other: Option<(PathBuf, PathBuf)>,
    /// `--pin`'s CPUs.
    pin: Option<Pin>,
}

/// A running server of one system.
struct Server {
    sys: &'static str,
    child: Child,
    port: u16,
    log: PathBuf,
    /// runc/runsc: (runtime, container id).
    container: Option<(PathBuf, String)>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some((rt, id)) = &self.container {
            let mut c = Command::new(rt);
            if self.sys == "runsc" {
                c.args(["delete", "-force", id]);
            } else {
                c.args(["delete", "-f", id]);
            }
            let _ = c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status();
        }
        // The whole process group: the server and whatever it started.
        // SAFETY: kill of the process group our own child leads.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Server {
    fn log_tail(&self) -> String {
        let s = fs::read_to_string(&self.log).unwrap_or_default();
        s.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string()
    }

    /// The container's cgroup memory in KiB (runc, runsc), if readable.
    fn cgroup_kib(&self) -> Option<u64> {
        let (rt, id) = self.container.as_ref()?;
        let out = Command::new(rt).args(["state", id]).stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        let pid = v["pid"].as_u64()?;
        let cg = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        // cgroup v1: the memory controller's line; v2: the unified line.
        if let Some(path) = cg.lines().find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string())) {
            let bytes = fs::read_to_string(format!("/sys/fs/cgroup/memory{path}/memory.usage_in_bytes")).ok()?;
            return bytes.trim().parse::<u64>().ok().map(|b| b / 1024);
        }
        let path = cg.lines().find_map(|l| l.strip_prefix("0::"))?;
        let bytes = fs::read_to_string(format!("/sys/fs/cgroup{path}/memory.current")).ok()?;
        bytes.trim().parse::<u64>().ok().map(|b| b / 1024)
    }

    /// The distinct CPU lists the server's processes may run on.
    fn cpus(&self) -> Vec<String> {
        let mut v: Vec<String> = tree(self.child.id()).into_iter().filter_map(cpus_allowed).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Summed PSS (KiB) of the server's process and its descendants.
    fn pss_kib(&self) -> u64 {
        tree(self.child.id()).into_iter().map(pss_kib).sum()
    }
}

/// An OCI bundle in `bundle` from `RUNTIME spec`: root `rootfs` (already
/// filled, writable: the servers write their pid file and temporary
/// files), `args`, the host network (no network namespace of its own).
fn make_bundle(rt: &Path, bundle: &Path, args: &[String], cpu: Option<usize>) -> Result<(), BundleError> {
    let process = Process { args: args.to_vec(), env: Vec::new(), files: Vec::new(), readonly_root: false, hostname: "shoal-bench", network: Network::Host };
    bundle::make_bundle(rt, bundle, &process, |c| {
        // The spec's default is 1024 open files, too few for 1000 clients.
        c["process"]["rlimits"] = json!([{"type": "RLIMIT_NOFILE", "hard": 20000u64, "soft": 20000u64}]);
        // nginx started as root chowns its temporary directories to `nobody`,
        // as it does natively: the spec's default capabilities lack CAP_CHOWN.
        for set in ["bounding", "effective", "permitted"] {
            if let Some(caps) = c["process"]["capabilities"][set].as_array_mut() {
                caps.push(json!("CAP_CHOWN"));
            }
        }
        // --pin: the container's cpuset (besides the inherited affinity).
        if let Some(cpu) = cpu {
            c["linux"]["resources"]["cpu"]["cpus"] = json!(cpu.to_string());
        }
    })
}

/// Starts `sys`'s server and waits (bounded) until it accepts connections.
fn start(s: &Setup, sys: &'static str) -> Result<Server> {
    let port = free_port()?;
    let mut container = None;
    let mut cmd = match (sys, s.which) {
        ("native", Which::Kv) => {
            let data = s.dir.join("native-data");
            fs::create_dir_all(&data)?;
            let mut c = Command::new(&s.native);
            c.arg(s.home.join("apps/recipes/redis/redis.conf")).args(redis_args(port, &data.display().to_string()));
            c
        }
        ("native", Which::Http) => {
            let prefix = s.dir.join("nginx-native");
            nginx_prefix(&s.home, &prefix, port)?;
            let mut c = Command::new(&s.native);
            c.arg("-p").arg(format!("{}/", prefix.display())).args(["-c", "nginx.conf", "-g"]);
            c.arg(format!("pid {}/nginx.pid;", prefix.display()));
            c
        }
        ("spt" | "hvt" | OTHER, which) => {
            let (shoal, image, tender) = match (sys, &s.other) {
                (OTHER, Some((shoal, image))) => (shoal, image, "spt"),
                (OTHER, None) => bail!("{}", ServersError::NoOtherBin),
                _ => (&s.shoal, &s.image, sys),
            };
            let mut c = Command::new(shoal);
            c.args(["run", "--tender", tender, "--mem", "512M", "--fs"]);
            match which {
                Which::Kv => {
                    c.arg(s.home.join("apps/recipes/redis")).args(["-p", &format!("{port}:6379")]).arg(image);
                    c.args(["--", "/redis.conf"]).args(redis_args(6379, "/tmp"));
                }
                Which::Http => {
                    c.arg(s.home.join("apps/recipes/nginx")).args(["-p", &format!("{port}:8080")]).arg(image);
                    c.args(["--", "-p", "/", "-c", "nginx.conf", "-g", "pid /tmp/nginx.pid;"]);
                }
            }
            c
        }
        (rt_name, which) => {
            let rt = find_program(rt_name).ok_or_else(|| anyhow::anyhow!("{rt_name} is not installed"))?;
            let bundle = s.dir.join(format!("bundle-{rt_name}"));
            let _ = fs::remove_dir_all(&bundle);
            let rootfs = bundle.join("rootfs");
            fs::create_dir_all(rootfs.join("tmp"))?;
            let args: Vec<String> = match which {
                Which::Kv => {
                    fs::copy(s.home.join("apps/recipes/redis/redis.conf"), rootfs.join("redis.conf"))?;
                    fs::copy(&s.native, rootfs.join("redis-server"))?;
                    let mut a = vec!["/redis-server".to_string(), "/redis.conf".to_string()];
                    a.extend(redis_args(port, "/tmp"));
                    a
                }
                Which::Http => {
                    nginx_prefix(&s.home, &rootfs, port)?;
                    fs::copy(&s.native, rootfs.join("nginx"))?;
                    ["/nginx", "-p", "/", "-c", "nginx.conf", "-g", "pid /tmp/nginx.pid;"].iter().map(|a| a.to_string()).collect()
                }
            };
            make_bundle(&rt, &bundle, &args, s.pin.map(|p| p.server))?;
            let id = format!("shoal-bench-{}-{}-{rt_name}", which.name(), std::process::id());
            let mut c = Command::new(&rt);
            if rt_name == "runsc" {
                c.arg("--network=host");
            }
            c.arg("run").arg("--bundle").arg(&bundle).arg(&id);
            container = Some((rt, id));
            c
        }
    };
    let log = s.dir.join(format!("{}-{sys}.log", s.which.recipe()));
    let f = File::create(&log)?;
    cmd.stdin(Stdio::null()).stdout(f.try_clone()?).stderr(f).process_group(0);
    if let Some(p) = s.pin {
        pin_command(&mut cmd, p.server);
    }
    let child = cmd.spawn().with_context(|| format!("cannot start {sys}"))?;
    let mut server = Server { sys, child, port, log, container };
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(st) = server.child.try_wait()? {
            bail!("the server exited ({st}) before accepting connections: {}", server.log_tail());
        }
        if t0.elapsed() > READY_TIMEOUT {
            bail!("the server did not accept connections within {} s: {}", READY_TIMEOUT.as_secs(), server.log_tail());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(server)
}

/// One client run's result: requests per second per operation, errors.
struct RunResult {
    rps: Vec<f64>,
    errors: u64,
    load_kib: u64,
}

/// Runs the client against `server` with `clients` connections, sampling
/// the server's PSS every 0.5 s if `sample`.
fn run_client(o: &ServersOpts, server: &Server, clients: usize, sample: bool, pin: Option<Pin>) -> Result<RunResult> {
    let mut cmd = match o.which {
        Which::Http => {
            let mut c = Command::new("wrk");
            // wrk needs at least as many connections as threads; two
            // threads, one per core. Its 2 s default request timeout would
            // count slow answers of a loaded machine as errors.
            let threads = clients.min(2);
            c.args(["-t", &threads.to_string(), "-c", &clients.to_string(), "-d", &format!("{}s", o.duration), "--timeout", "30s"]);
            c.arg(format!("http://127.0.0.1:{}/index.html", server.port));
            c
        }
        Which::Kv => {
            let mut c = Command::new("redis-benchmark");
            c.args(["-h", "127.0.0.1", "-p", &server.port.to_string(), "-c", &clients.to_string(), "-n", &o.requests.to_string()]);
            c.args(["-P", &o.pipeline.to_string(), "-t", "get,set", "--csv"]);
            c
        }
    };
    let out_path = server.log.with_extension("client.out");
    let err_path = server.log.with_extension("client.err");
    cmd.stdin(Stdio::null()).stdout(File::create(&out_path)?).stderr(File::create(&err_path)?);
    if let Some(p) = pin {
        pin_command(&mut cmd, p.client);
    }
    let t0 = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("cannot start {}", o.which.client().0))?;
    let mut load_kib = 0;
    let mut next = Duration::from_millis(100);
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if t0.elapsed() > CLIENT_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{} did not finish within {} s", o.which.client().0, CLIENT_TIMEOUT.as_secs());
        }
        if sample && t0.elapsed() >= next {
            load_kib = load_kib.max(server.pss_kib());
            next += Duration::from_millis(500);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // A load shorter than the first sampling point (a quick run on an idle
    // machine) is sampled right after it ends, while the server still
    // holds what the load made it allocate: the run reports its memory
    // under load either way.
    if sample && load_kib == 0 {
        load_kib = server.pss_kib();
    }
    let text = fs::read_to_string(&out_path).unwrap_or_default();
    let err = fs::read_to_string(&err_path).unwrap_or_default();
    if !status.success() {
        bail!("{} failed ({status}): {}", o.which.client().0, err.lines().last().unwrap_or("").trim());
    }
    let (rps, errors) = match o.which {
        Which::Http => {
            let r = wrk_value(&text, "Requests/sec:").ok_or_else(|| anyhow::anyhow!("no Requests/sec in wrk's output: {}", text.trim()))?;
            (vec![r], wrk_errors(&text))
        }
        Which::Kv => {
            let mut v = Vec::new();
            for op in o.which.ops() {
                v.push(redis_rps(&text, op).ok_or_else(|| anyhow::anyhow!("no {op} row in redis-benchmark's output: {} {}", text.trim(), err.trim()))?);
            }
            (v, 0)
        }
    };
    if rps.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
        bail!("{} measured no throughput: {}", o.which.client().0, text.trim());
    }
    Ok(RunResult { rps, errors, load_kib })
}

/// One system's results.
struct Sys {
    name: &'static str,
    /// Why it has (some) measurements missing, once it has.
    missing: Option<Missing>,
    /// (op index, clients) -> requests per second of each run.
    rps: BTreeMap<(usize, usize), Vec<f64>>,
    errors: u64,
    idle_kib: Vec<f64>,
    idle_cgroup_kib: Vec<f64>,
    load_kib: Vec<f64>,
    load_cgroup_kib: Vec<f64>,
    /// The CPU lists its server's processes may run on (read after start).
    cpus: Vec<String>,
}

fn check(o: &ServersOpts) -> Result<Vec<&'static str>> {
    if o.clients.is_empty() || o.clients.contains(&0) {
        return Err(ServersError::Clients.into());
    }
    if o.repeat == 0 {
        return Err(ServersError::Repeat.into());
    }
    if !(0.5..=600.0).contains(&o.duration) {
        return Err(ServersError::Duration.into());
    }
    if o.requests == 0 || !(1..=1000).contains(&o.pipeline) {
        return Err(ServersError::Requests.into());
    }
    let wanted = selected(&o.systems, o.shoal_bin.as_deref())?;
    let (prog, pkg) = o.which.client();
    if find_program(prog).is_none() {
        return Err(ServersError::Client(prog, pkg).into());
    }
    if o.pin {
        pin_cpus()?;
    }
    Ok(wanted)
}

/// The systems to run, in table order: those `--systems` names (all if
/// none), spt-other only with another build (`--shoal-bin`).
fn selected(systems: &[String], other_bin: Option<&Path>) -> Result<Vec<&'static str>, ServersError> {
    for s in systems {
        if !SYSTEMS.contains(&s.as_str()) {
            return Err(ServersError::System(s.clone()));
        }
        if s == OTHER && other_bin.is_none() {
            return Err(ServersError::NoOtherBin);
        }
    }
    if let Some(b) = other_bin {
        if !b.is_file() {
            return Err(ServersError::OtherBin(b.to_path_buf()));
        }
    }
    let named = |s: &str| systems.is_empty() || systems.iter().any(|x| x == s);
    Ok(SYSTEMS.iter().copied().filter(|&s| named(s) && (s != OTHER || other_bin.is_some())).collect())
}

/// `shoal bench http` / `shoal bench kv`.
pub fn servers(o: ServersOpts) -> Result<()> {
    let wanted = check(&o)?;
    let which = o.which;
    fs::create_dir_all(&o.out).with_context(|| format!("cannot create {}", o.out.display()))?;
    raise_nofile();
    let paths = shoal_toolchain::Paths::discover()?;
    let shoal = pin_binaries(&o.out.join("bin"))?;
    let image = o.out.join(format!("{}.img", which.recipe()));
    let native = o.out.join(format!("{}.native", which.recipe()));
    say(which, &format!("building the {} recipe (image and native program) into {}", which.recipe(), o.out.display()));
    let b = Command::new(&shoal)
        .args(["recipe", "build", which.recipe(), "-o"])
        .arg(&image)
        .arg("--native")
        .arg(&native)
        .stdin(Stdio::null())
        .output()
        .context("cannot run shoal recipe build")?;
    if !b.status.success() {
        let err = String::from_utf8_lossy(&b.stderr);
        bail!("shoal recipe build {} failed: {}", which.recipe(), err.lines().last().unwrap_or("").trim());
    }
    let run_dir = o.out.join("run");
    let _ = fs::remove_dir_all(&run_dir);
    fs::create_dir_all(&run_dir)?;
    let other = match &o.shoal_bin {
        Some(bin) if wanted.contains(&OTHER) => {
            // Pinned like this build's; the image is made by the other
            // build (its tree's kernel and libc).
            let pinned = pin_build(bin, &o.out.join("bin-other"))?;
            let img = o.out.join(format!("{}-other.img", which.recipe()));
            say(which, &format!("building the {} recipe with {}", which.recipe(), bin.display()));
            let b = Command::new(&pinned)
                .args(["recipe", "build", which.recipe(), "-o"])
                .arg(&img)
                .stdin(Stdio::null())
                .output()
                .with_context(|| format!("cannot run {}", pinned.display()))?;
            if !b.status.success() {
                let err = String::from_utf8_lossy(&b.stderr);
                bail!("{} recipe build {} failed: {}", bin.display(), which.recipe(), err.lines().last().unwrap_or("").trim());
            }
            Some((pinned, img))
        }
        _ => None,
    };
    let pin = if o.pin { Some(pin_cpus()?) } else { None };
    if let Some(p) = pin {
        say(which, &format!("pinned: servers on CPU {}, the client on CPU {}", p.server, p.client));
    }
    let setup = Setup { which, home: paths.home.clone(), shoal, image, native, dir: run_dir, other, pin };

    let mut systems: Vec<Sys> = wanted
        .iter()
        .map(|&name| Sys {
            name,
            missing: unavailable(name).map(Missing::Unavailable),
            rps: BTreeMap::new(),
            errors: 0,
            idle_kib: Vec::new(),
            idle_cgroup_kib: Vec::new(),
            load_kib: Vec::new(),
            load_cgroup_kib: Vec::new(),
            cpus: Vec::new(),
        })
        .collect();
    // Start every server once; a failed start skips its system.
    let mut servers: HashMap<&'static str, Server> = HashMap::new();
    for s in systems.iter_mut().filter(|s| s.missing.is_none()) {
        say(which, &format!("starting {} on {}", which.recipe(), s.name));
        match start(&setup, s.name) {
            Ok(srv) => {
                s.cpus = srv.cpus();
                servers.insert(s.name, srv);
            }
            Err(e) => s.missing = Some(Missing::Failed(format!("cannot start {}: {e:#}", which.recipe()))),
        }
    }
    // Idle footprint: five samples 0.2 s apart once all are up and settled.
    std::thread::sleep(Duration::from_secs(1));
    for _ in 0..5 {
        for s in systems.iter_mut() {
            if let Some(srv) = servers.get(s.name) {
                s.idle_kib.push(srv.pss_kib() as f64);
                if let Some(c) = srv.cgroup_kib() {
                    s.idle_cgroup_kib.push(c as f64);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // An untimed warm-up run of each (the paper's warm-up procedure).
    for s in systems.iter_mut() {
        let Some(srv) = servers.get(s.name) else {
            continue;
        };
        if let Err(e) = run_client(&o, srv, o.clients[0], false, pin) {
            s.missing = Some(Missing::Failed(format!("the warm-up run failed: {e:#}; server: {}", srv.log_tail())));
            servers.remove(s.name);
        }
    }
    let max_clients = o.clients.iter().copied().max().unwrap_or(1);
    let n = systems.len();
    // One step per client run: rounds × levels × systems.
    let progress = Progress::new(&format!("bench {}", which.name()), (o.repeat * o.clients.len() * n) as u64, false);
    for round in 0..o.repeat {
        say(which, &format!("round {} of {}", round + 1, o.repeat));
        for &c in &o.clients {
            // The order rotates from level to level and round to round.
            for k in 0..n {
                let s = &mut systems[(round + c + k) % n];
                progress.step();
                let Some(srv) = servers.get(s.name) else {
                    continue;
                };
                progress.doing(&format!("{} at {c} clients", s.name));
                let sample = c == max_clients;
                match run_client(&o, srv, c, sample, pin) {
                    Ok(r) => {
                        for (i, v) in r.rps.iter().enumerate() {
                            s.rps.entry((i, c)).or_default().push(*v);
                        }
                        s.errors += r.errors;
                        // A run shorter than the first sample has none.
                        if sample && r.load_kib > 0 {
                            s.load_kib.push(r.load_kib as f64);
                            if let Some(cg) = srv.cgroup_kib() {
                                s.load_cgroup_kib.push(cg as f64);
                            }
                        }
                    }
                    Err(e) => {
                        s.missing = Some(Missing::Failed(format!("round {}, {c} clients: {e:#}; server: {}", round + 1, srv.log_tail())));
                        servers.remove(s.name);
                    }
                }
            }
        }
    }
    drop(servers);
    drop(progress);
    if systems.iter().all(|s| s.missing.is_some()) {
        let reasons: Vec<String> = systems.iter().map(|s| format!("{}: {}", s.name, s.missing.as_ref().map(Missing::to_string).unwrap_or_default())).collect();
        return Err(BenchError::nothing_measured(if which == Which::Http { "http" } else { "kv" }, &reasons).into());
    }
    report(&o, &systems, pin)
}

fn ms(xs: &[f64]) -> Value {
    let (m, sd) = mean_sd(xs);
    if xs.is_empty() {
        Value::Null
    } else {
        json!({"mean": m, "sd": sd, "samples": xs})
    }
}

/// The servers paper's observations (§VI, Figs. 3–5) for this bench: the paper gives
/// its throughputs only as plots, so these are its statements.
fn paper(which: Which) -> &'static [(&'static str, &'static str)] {
    match which {
        Which::Http => &[
            ("setup", "nginx 1.8.0, weighttp from a second host over 10 GbE, favicon, 0–1000 clients in steps of 100, keep-alive, n = 30, mean ± SD"),
            ("containers vs native", "Docker and LXD add significant overhead (p < 0.0001), likely the NAT"),
            ("unikernel (Rumprun/KVM)", "similar to containers; significantly better only from 600 clients on"),
            ("memory (Fig. 4a)", "unikernels below a Linux VM; containers need the least memory"),
        ],
        Which::Kv => &[
            (
                "setup",
                "Redis 3.0.1 cache-only, redis-benchmark from a second host, GET and SET, 0–1000 clients in steps of 100, keep-alive and pipelining, n = 30",
            ),
            ("containers vs native", "significant overhead (p < 0.0001), native and on KVM"),
            ("unikernels (Rumprun, OSv)", "slight but significant improvements over Linux under many conditions"),
            ("memory (Fig. 4b)", "containers most flexible; Rumprun below Linux; OSv distinctly more (apparently a leak)"),
        ],
    }
}

fn report(o: &ServersOpts, systems: &[Sys], pin: Option<Pin>) -> Result<()> {
    let which = o.which;
    let ops = which.ops();
    let get = |name: &str| systems.iter().find(|s| s.name == name && !s.rps.is_empty());
    let mean_of = |name: &str, op: usize, c: usize| get(name).and_then(|s| s.rps.get(&(op, c))).map(|v| mean_sd(v).0);

    // CSV of every run.
    let mut csv = String::from("bench,system,operation,clients,run,requests_per_s\n");
    for s in systems {
        for ((op, c), v) in &s.rps {
            for (i, x) in v.iter().enumerate() {
                csv.push_str(&format!("{},{},{},{c},{},{x:.1}\n", which.name(), s.name, ops[*op], i + 1));
            }
        }
    }
    let csv_path = o.out.join(format!("{}.csv", which.name()));
    fs::write(&csv_path, csv).with_context(|| format!("cannot write {}", csv_path.display()))?;
    let mut mem_csv = String::from("system,state,measure,kib\n");
    for s in systems {
        for (state, measure, v) in
            [("idle", "pss", &s.idle_kib), ("idle", "cgroup", &s.idle_cgroup_kib), ("load", "pss", &s.load_kib), ("load", "cgroup", &s.load_cgroup_kib)]
        {
            for x in v {
                mem_csv.push_str(&format!("{},{state},{measure},{x:.0}\n", s.name));
            }
        }
    }
    let mem_path = o.out.join(format!("{}-memory.csv", which.name()));
    fs::write(&mem_path, mem_csv).with_context(|| format!("cannot write {}", mem_path.display()))?;

    // One plot per operation.
    let mut svgs = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let lines: Vec<Line> = systems
            .iter()
            .filter(|s| !s.rps.is_empty())
            .map(|s| Line { name: s.name.into(), points: o.clients.iter().filter_map(|&c| s.rps.get(&(i, c)).map(|v| (c as f64, mean_sd(v).0))).collect() })
            .collect();
        let svg = o.out.join(format!("{}-{}.svg", which.name(), if ops.len() == 1 { "throughput".to_string() } else { op.to_lowercase() }));
        let title = format!(
            "{} {op}: requests per second against concurrent clients (servers paper Fig. {})",
            which.recipe(),
            if which == Which::Http { 3 } else { 5 }
        );
        if let Err(e) =
            plot::lines(&svg, &Frame { title: &title, x_desc: "concurrent clients", y_desc: "requests per second", log_x: false, log_y: false }, &lines)
        {
            say(which, &format!("warning: {e}"));
        }
        svgs.push(svg);
    }

    // Goals, per operation and concurrency: spt ≥ native, spt ≥ 1.5 × runsc;
    // idle footprint of spt ≤ 1/4 of runsc's.
    let mut goal_rows = Vec::new();
    let mut all_native = Some(true);
    let mut all_runsc = Some(true);
    for (i, op) in ops.iter().enumerate() {
        for &c in &o.clients {
            let spt = mean_of("spt", i, c);
            let vs_native = spt.zip(mean_of("native", i, c)).map(|(a, b)| a / b);
            let vs_runsc = spt.zip(mean_of("runsc", i, c)).map(|(a, b)| a / b);
            all_native = match (all_native, vs_native) {
                (Some(ok), Some(r)) => Some(ok && r >= 1.0),
                _ => None,
            };
            all_runsc = match (all_runsc, vs_runsc) {
                (Some(ok), Some(r)) => Some(ok && r >= 1.5),
                _ => None,
            };
            goal_rows.push(json!({"operation": op, "clients": c, "spt_over_native": vs_native, "spt_over_runsc": vs_runsc}));
        }
    }
    let idle = |name: &str| systems.iter().find(|s| s.name == name && !s.idle_kib.is_empty()).map(|s| mean_sd(&s.idle_kib).0);
    let idle_ratio = idle("spt").zip(idle("runsc")).map(|(a, b)| a / b);

    if o.json {
        let mut sys = serde_json::Map::new();
        for s in systems {
            let mut v = serde_json::Map::new();
            if let Some(Value::Object(m)) = s.missing.as_ref().map(Missing::json) {
                v.extend(m);
            }
            if !s.rps.is_empty() {
                let mut t = serde_json::Map::new();
                for (i, op) in ops.iter().enumerate() {
                    let pts: Vec<Value> = o
                        .clients
                        .iter()
                        .filter_map(|&c| {
                            let xs = s.rps.get(&(i, c))?;
                            let (m, sd) = mean_sd(xs);
                            Some(json!({"clients": c, "mean": m, "sd": sd, "samples": xs}))
                        })
                        .collect();
                    t.insert(op.to_string(), json!(pts));
                }
                v.insert("requests_per_s".into(), Value::Object(t));
                v.insert("client_errors".into(), json!(s.errors));
                v.insert("server_cpus".into(), json!(s.cpus));
                v.insert(
                    "memory_kib".into(),
                    json!({"idle_pss": ms(&s.idle_kib), "load_pss": ms(&s.load_kib), "idle_cgroup": ms(&s.idle_cgroup_kib), "load_cgroup": ms(&s.load_cgroup_kib)}),
                );
            }
            sys.insert(s.name.to_string(), Value::Object(v));
        }
        let doc = json!({
            "bench": which.name(),
            "server": which.recipe(),
            "client": which.client().0,
            "clients": o.clients,
            "repeat": o.repeat,
            "duration_s": if which == Which::Http { json!(o.duration) } else { Value::Null },
            "requests": if which == Which::Kv { json!(o.requests) } else { Value::Null },
            "pipeline": if which == Which::Kv { json!(o.pipeline) } else { Value::Null },
            "pinned": pin.map(|p| json!({"server_cpu": p.server, "client_cpu": p.client})),
            "memory_measure": "pss: summed PSS of the command's process tree; cgroup: the container's cgroup memory usage (runc, runsc)",
            "systems": sys,
            "ratios": goal_rows,
            "goals": {
                "spt_at_least_native_everywhere": all_native,
                "spt_at_least_1_5x_runsc_everywhere": all_runsc,
                "spt_idle_over_runsc_idle": idle_ratio,
                "spt_idle_at_most_quarter_of_runsc": idle_ratio.map(|r| r <= 0.25),
            },
            "paper": paper(which).iter().map(|(k, v)| json!({"what": k, "observation": v})).collect::<Vec<_>>(),
            "csv": csv_path,
            "memory_csv": mem_path,
            "svg": svgs,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }

    let mut t = String::new();
    let what = match which {
        Which::Http => format!("nginx, wrk {} s per run", o.duration),
        Which::Kv => format!("Redis (cache-only), redis-benchmark -n {} -P {} per run", o.requests, o.pipeline),
    };
    t.push_str(&format!("shoal bench {}: {what}, {} rounds, systems interleaved; requests/s, mean ± SD\n", which.name(), o.repeat));
    match pin {
        Some(p) => t.push_str(&format!("pinned: every server on CPU {}, the client on CPU {}\n", p.server, p.client)),
        None => t.push_str("not pinned: servers and client go where the host's scheduler puts them (--pin to pin)\n"),
    }
    let shown: Vec<&Sys> = systems.iter().filter(|s| !s.rps.is_empty()).collect();
    for (i, op) in ops.iter().enumerate() {
        t.push_str(&format!("\n| {} {op}: clients |", which.recipe()));
        for s in &shown {
            t.push_str(&format!(" {} |", s.name));
        }
        // With another build (--shoal-bin): its ratio to native, and this
        // build's to it.
        let other = shown.iter().any(|s| s.name == OTHER);
        t.push_str(" spt/native | spt/runsc |");
        if other {
            t.push_str(" spt-other/native | spt/spt-other |");
        }
        t.push_str("\n|---|");
        t.push_str(&"---|".repeat(shown.len() + if other { 4 } else { 2 }));
        t.push('\n');
        for &c in &o.clients {
            t.push_str(&format!("| {c} |"));
            for s in &shown {
                match s.rps.get(&(i, c)) {
                    Some(v) => {
                        let (m, sd) = mean_sd(v);
                        t.push_str(&format!(" {} ± {} |", fixed(m, 0), fixed(sd, 0)));
                    }
                    None => t.push_str(" – |"),
                }
            }
            let r = |a: &str, b: &str| mean_of(a, i, c).zip(mean_of(b, i, c)).map(|(a, b)| format!("{:.2}", a / b)).unwrap_or_else(|| "–".into());
            t.push_str(&format!(" {} | {} |", r("spt", "native"), r("spt", "runsc")));
            if other {
                t.push_str(&format!(" {} | {} |", r(OTHER, "native"), r("spt", OTHER)));
            }
            t.push('\n');
        }
    }
    let mib = |v: &[f64]| {
        if v.is_empty() {
            "–".to_string()
        } else {
            let (m, sd) = mean_sd(v);
            format!("{:.1} ± {:.1}", m / 1024.0, sd / 1024.0)
        }
    };
    let mut memory = Table::new(["memory (MiB)", "idle PSS", "PSS under load", "idle cgroup", "cgroup under load"]);
    for s in &shown {
        memory.row([s.name.to_string(), mib(&s.idle_kib), mib(&s.load_kib), mib(&s.idle_cgroup_kib), mib(&s.load_cgroup_kib)]);
    }
    t.push('\n');
    t.push_str(&memory.markdown());
    if pin.is_some() {
        for s in &shown {
            t.push_str(&format!("{}: server processes may run on CPU {}\n", s.name, s.cpus.join(" / ")));
        }
    }
    let max_c = o.clients.iter().max().copied().unwrap_or(0);
    t.push_str(&format!("(PSS: the command's whole process tree; cgroup: the container's memory cgroup, page cache included; under load: largest sample during the {max_c}-client runs)\n"));
    for s in systems {
        if let Some(m) = &s.missing {
            t.push_str(&format!("{} {m}\n", s.name));
        }
        if s.errors > 0 {
            t.push_str(&format!("{}: wrk reported {} socket errors or error answers in total\n", s.name, s.errors));
        }
    }
    let yn = |g: Option<bool>| match g {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "not measured",
    };
    t.push_str(&format!(
        "targets: spt ≥ native at every concurrency: {}; spt ≥ 1.5 × runsc at every concurrency: {}; spt idle PSS ≤ 1/4 of runsc's: {}{}\n",
        yn(all_native),
        yn(all_runsc),
        yn(idle_ratio.map(|r| r <= 0.25)),
        idle_ratio.map(|r| format!(" ({r:.2})")).unwrap_or_default()
    ));
    let mut observations = Table::new(["servers paper", "observation"]);
    for (k, v) in paper(which) {
        observations.row([*k, *v]);
    }
    t.push('\n');
    t.push_str(&observations.markdown());
    let md = o.out.join(format!("{}.md", which.name()));
    fs::write(&md, &t).with_context(|| format!("cannot write {}", md.display()))?;
    print!("{t}");
    println!("CSV: {} and {}; plots: {}", csv_path.display(), mem_path.display(), svgs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_build_runs_as_spt_other_only_when_named() {
        let none: &[String] = &[];
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(selected(none, None).unwrap(), vec!["native", "runc", "runsc", "spt", "hvt"]);
        let bin = std::env::current_exe().unwrap();
        assert_eq!(selected(none, Some(&bin)).unwrap(), SYSTEMS.to_vec());
        assert_eq!(selected(&names(&["spt", OTHER]), Some(&bin)).unwrap(), vec!["spt", OTHER]);
        assert_eq!(selected(&names(&["native", "spt"]), Some(&bin)).unwrap(), vec!["native", "spt"]);
        assert!(matches!(selected(&names(&[OTHER]), None), Err(ServersError::NoOtherBin)));
        assert!(matches!(selected(none, Some(Path::new("/nonexistent/shoal"))), Err(ServersError::OtherBin(_))));
        assert!(matches!(selected(&names(&["qemu"]), None), Err(ServersError::System(_))));
    }

    #[test]
    fn parses_wrk_output() {
        let text = "Running 2s test @ http://127.0.0.1:1/\n  2 threads and 10 connections\n  40000 requests in 2.00s, 10.00MB read\n  Socket errors: connect 1, read 2, write 0, timeout 3\n  Non-2xx or 3xx responses: 4\nRequests/sec:  20000.50\nTransfer/sec:      5.00MB\n";
        assert_eq!(wrk_value(text, "Requests/sec:"), Some(20000.5));
        assert_eq!(wrk_errors(text), 10);
        assert_eq!(wrk_errors("Requests/sec: 1\n"), 0);
    }

    #[test]
    fn parses_redis_benchmark_csv() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\"\n\"SET\",\"41322.31\",\"0.700\"\n\"GET\",\"45454.55\",\"0.600\"\n";
        assert_eq!(redis_rps(csv, "GET"), Some(45454.55));
        assert_eq!(redis_rps(csv, "SET"), Some(41322.31));
        assert_eq!(redis_rps(csv, "INCR"), None);
    }

    #[test]
    fn tree_contains_the_root_and_its_children() {
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let me = std::process::id();
        let t = tree(me);
        assert_eq!(t[0], me);
        assert!(t.contains(&child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(pss_kib(me) > 0);
    }
}
