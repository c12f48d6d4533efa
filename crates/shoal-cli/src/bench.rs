//! `shoal bench`: experiments, never tests (DESIGN §8).
//!
//! Each benchmark runs shoal and its comparison side by side in one run,
//! alternating, repeats, and prints mean ± standard deviation and the ratio;
//! `--json` prints the same numbers as JSON.

#[path = "bench_apps.rs"]
mod apps;
#[path = "bench_boot.rs"]
mod boot;
#[path = "bench_density.rs"]
mod density;
#[path = "bench_echo.rs"]
mod echo;
#[path = "bench_faas.rs"]
mod faas;
#[path = "bench_memory.rs"]
mod memory;
#[path = "bench_recover.rs"]
mod recover;
#[path = "bench_recover_servers.rs"]
mod recover_servers;
#[path = "bench_recover_shrink.rs"]
mod recover_shrink;
#[path = "bench_servers.rs"]
mod servers;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(Subcommand)]
pub enum Bench {
    /// Total execution time of the recipes' applications (`shoal recipe list`) natively, on spt (per memory mode) and on hvt.
    Apps {
        /// Runs of each side (at least 2; mean ± SD).
        #[arg(long, default_value_t = 5)]
        repeat: usize,
        /// Only these recipes (default: all).
        #[arg(long = "only", value_name = "RECIPE")]
        only: Vec<String>,
        /// Memory modes to compare on spt, one column each (repeatable:
        /// `--mem-mode copy --mem-mode ksm --mem-mode pool`; default copy).
        #[arg(long = "mem-mode", value_name = "MODE", value_parser = ["copy", "ksm", "pool"])]
        mem_modes: Vec<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Time to first stdout byte and to exit of hello world on spt, hvt, a native process, runc and runsc.
    Boot {
        /// Runs of each system (median and p95).
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Host memory per idle instance: N warm instances of apps/functions/noop on spt and hvt (copy and pool) beside N native processes (issue 18).
    Density {
        /// Instances per configuration.
        #[arg(long, default_value_t = 100)]
        count: usize,
        /// Guest memory of each instance.
        #[arg(long, default_value = "32M")]
        mem: String,
        /// Only these configurations (process, spt+copy, spt+pool, hvt+copy, hvt+pool).
        #[arg(long = "only", value_name = "CONFIG")]
        only: Vec<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Echo latency of apps/net/echo.c (epoll) on spt, hvt and a native process: a persistent connection and a connection per request (seed 001 Fig. 1).
    Echo {
        /// Round trips on the persistent connection per run (the connection-per-request mode makes a tenth as many requests).
        #[arg(long, default_value_t = 10_000)]
        round_trips: usize,
        /// Runs of each system, interleaved native, spt, hvt.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Message size in bytes.
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Seed 002's FaaS experiments through a real `shoal serve` on spt, hvt, process, runc and runsc:
    /// cold-start, burst, startup-cost, idle-cpu, idle-memory, workloads, concurrency (a quick run, about
    /// 15 minutes here: --repeat 10 --requests 2048 --bursts 10,20,50,100 --instances 1,10,50,100).
    Faas {
        /// Only these experiments (repeatable; default all).
        #[arg(long = "only", value_name = "EXPERIMENT", value_parser = faas::EXPERIMENTS)]
        only: Vec<String>,
        /// Backends to compare (comma-separated; default all five; one that cannot run here is skipped with its reason).
        #[arg(long, value_delimiter = ',', value_parser = faas::BACKENDS)]
        backends: Vec<String>,
        /// Cold starts, start-up cost samples and warm runs of each workload per backend (the paper's 100).
        #[arg(long, default_value_t = 100)]
        repeat: usize,
        /// hey requests per concurrency level (the paper's 2^15).
        #[arg(long, default_value_t = 32768)]
        requests: usize,
        /// Concurrency levels: powers of two from 1 up to this many clients.
        #[arg(long, default_value_t = 4096)]
        max_clients: usize,
        /// Burst sizes (concurrent cold starts), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "10,20,30,40,50,60,70,80,90,100")]
        bursts: Vec<usize>,
        /// Numbers of idle instances for idle-memory, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,10,25,50,100")]
        instances: Vec<usize>,
        /// Directory for the functions, CSVs, plots and tables.
        #[arg(long, default_value = "shoal-bench-faas")]
        out: PathBuf,
        /// Print JSON instead of the tables.
        #[arg(long)]
        json: bool,
    },
    /// Seed 004 Fig. 3: nginx's requests/s serving a small static page (wrk) against concurrent clients, and the memory footprint, on a native process, runc, runsc, spt and hvt interleaved.
    Http {
        /// Concurrency levels (comma-separated; the paper's 1, 100, 200, …, 1000).
        #[arg(long, value_delimiter = ',', default_value = "1,100,200,300,400,500,600,700,800,900,1000")]
        clients: Vec<usize>,
        /// Runs per system and level (the paper's n = 30; mean ± SD).
        #[arg(long, default_value_t = 30)]
        repeat: usize,
        /// Seconds of each wrk run.
        #[arg(long, default_value_t = 2.0)]
        duration: f64,
        /// Systems to compare (comma-separated: native, runc, runsc, spt, hvt, spt-other; default all; one that cannot run here is skipped with its reason).
        #[arg(long, value_delimiter = ',')]
        systems: Vec<String>,
        /// Pin the servers to one CPU and the client to another (the first two CPUs this process may use; runc/runsc also get that CPU as their container's cpuset): at 1 client, unpinned runs mostly measure whether client and server share a core.
        #[arg(long)]
        pin: bool,
        /// Another shoal build (the `shoal` binary of another tree, its tenders beside it) to compare with this one in the same interleaved run: adds the system `spt-other`, the server on spt with that build's tender and an image that build makes from its own tree's kernel.
        #[arg(long)]
        shoal_bin: Option<PathBuf>,
        /// Directory for the builds, logs, CSVs, plot and table.
        #[arg(long, default_value = "shoal-bench-http")]
        out: PathBuf,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Seed 004 Fig. 5: Redis GET and SET requests/s (redis-benchmark) against concurrent clients, and the memory footprint, on a native process, runc, runsc, spt and hvt interleaved.
    Kv {
        /// Concurrency levels (comma-separated; the paper's 1, 100, 200, …, 1000).
        #[arg(long, value_delimiter = ',', default_value = "1,100,200,300,400,500,600,700,800,900,1000")]
        clients: Vec<usize>,
        /// Runs per system and level (the paper's n = 30; mean ± SD).
        #[arg(long, default_value_t = 30)]
        repeat: usize,
        /// Requests per operation in each redis-benchmark run.
        #[arg(long, default_value_t = 20000)]
        requests: usize,
        /// Requests each client pipelines (redis-benchmark -P; the paper pipelined but gives no depth).
        #[arg(long, default_value_t = 1)]
        pipeline: usize,
        /// Systems to compare (comma-separated: native, runc, runsc, spt, hvt, spt-other; default all; one that cannot run here is skipped with its reason).
        #[arg(long, value_delimiter = ',')]
        systems: Vec<String>,
        /// Pin the servers to one CPU and the client to another (the first two CPUs this process may use; runc/runsc also get that CPU as their container's cpuset): at 1 client, unpinned runs mostly measure whether client and server share a core.
        #[arg(long)]
        pin: bool,
        /// Another shoal build (the `shoal` binary of another tree, its tenders beside it) to compare with this one in the same interleaved run: adds the system `spt-other`, the server on spt with that build's tender and an image that build makes from its own tree's kernel.
        #[arg(long)]
        shoal_bin: Option<PathBuf>,
        /// Directory for the builds, logs, CSVs, plots and table.
        #[arg(long, default_value = "shoal-bench-kv")]
        out: PathBuf,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Memory of 8 idle instances of different SQLite versions launched one every --interval s, per layout and memory mode (seed 000 Fig. 8).
    Memory {
        /// Seconds between launches.
        #[arg(long, default_value_t = 10.0)]
        interval: f64,
        /// Seconds to keep sampling after the last launch (default: --interval).
        #[arg(long)]
        settle: Option<f64>,
        /// Which tender runs the instances: spt or hvt.
        #[arg(long, default_value = "spt")]
        tender: String,
        /// Guest memory per instance.
        #[arg(long, default_value = "64M")]
        mem: String,
        /// spt: run every instance with its waiting parent (`shoal-tender` without
        /// --single-process), as `shoal run` does; by default each instance is one process.
        #[arg(long)]
        supervised: bool,
        /// Only these configurations (default, dce, delta+ksm, delta+pool, default-aslr, dce-aslr, aslr+ksm, aslr+pool, default+copy, aligned+ksm, aligned+pool).
        #[arg(long = "only", value_name = "CONFIG")]
        only: Vec<String>,
        /// Directory for the images, logs, CSV and plot.
        #[arg(long, default_value = "shoal-bench-memory")]
        out: PathBuf,
        /// Run a workload of ROWS inserts in every instance before it idles
        /// (the second variant: heap growth dilutes sharing); 0: idle at once.
        #[arg(long, default_value_t = 0, value_name = "ROWS")]
        workload: u64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Disk use of the 8 idle images per configuration, and images + pool for the pool (seed 000 Fig. 9).
    Size {
        /// Directory for the images.
        #[arg(long, default_value = "shoal-bench-size")]
        out: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Distinct code+rodata frames of speedtest1 against 8 SQLite versions, per layout policy (seed 000).
    Pages {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Keep the built images in this directory.
        #[arg(long)]
        keep: Option<PathBuf>,
    },
    /// Seed 003 (VampOS): gate cost in cycles, Fig. 5 system calls and SQLite 10,000 inserts without and with the component gates (`--no-recover`), the reboot time of each rebootable component, nginx and Redis throughput (Fig. 7), nginx's reboot times after 1,000 GETs (Fig. 6) and failed requests under rejuvenation vs whole restarts (Table V), Redis latency across a ramfs panic vs a restart (Fig. 8), on spt, hvt and a native process.
    Recover {
        /// Runs of each system (at least 2; mean ± SD).
        #[arg(long, default_value_t = 5)]
        repeat: usize,
        /// Calls of each operation per loop (each run times 5 loops and keeps the lowest).
        #[arg(long, default_value_t = 20_000)]
        iterations: u64,
        /// Directory for the builds, the CSV and the plot.
        #[arg(long, default_value = "shoal-bench-recover")]
        out: PathBuf,
        /// Print JSON instead of the tables.
        #[arg(long)]
        json: bool,
        /// Run only these parts, comma-separated: syscalls (gate cost and Fig. 5), reboot, sqlite, servers (Fig. 7 nginx and Redis), nginx-reboot (Fig. 6), rejuvenation (Table V), redis-latency (Fig. 8). Default: all.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Seconds of each wrk run of the Fig. 7 nginx runs (0.5-60).
        #[arg(long, default_value_t = 3.0)]
        duration: f64,
        /// SET requests of each redis-benchmark run of Fig. 7 (1-10,000,000).
        #[arg(long, default_value_t = 50_000)]
        requests: u64,
    },
    /// Cost of getpid and of a 1-byte write through shoal (spt) and a native Linux process.
    Syscall {
        /// Calls per run.
        #[arg(long, default_value_t = 200_000)]
        iterations: u64,
        /// Runs of each side.
        #[arg(long, default_value_t = 10)]
        repeat: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Why a bench has no measurement of a system or configuration: it cannot
/// run on this machine (no `/dev/kvm`, a runtime not installed, not root),
/// or it could and failed. The two are reported apart, in the JSON
/// (`{"unavailable": WHY}` or `{"failed": WHY}`) and in the table: a
/// failure is a fault to look into, not a property of the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Missing {
    /// This machine lacks what the system needs.
    Unavailable(String),
    /// The system could run here and failed.
    Failed(String),
}

impl Missing {
    /// The JSON entry in place of the measurement.
    pub(crate) fn json(&self) -> serde_json::Value {
        match self {
            Missing::Unavailable(why) => json!({ "unavailable": why }),
            Missing::Failed(why) => json!({ "failed": why }),
        }
    }
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::Unavailable(why) => write!(f, "unavailable here: {why}"),
            Missing::Failed(why) => write!(f, "FAILED: {why}"),
        }
    }
}

/// Failures of a bench as a whole. One configuration's or system's failure
/// is only a warning and a `failed: REASON` entry (one that cannot run here
/// an `unavailable: REASON` entry), so that the others' results are still
/// printed; these end the command with an error.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Every configuration failed or was unavailable: an empty table with
    /// status 0 would read as a result.
    #[error("bench {bench}: nothing could be measured: {reasons}")]
    NothingMeasured { bench: &'static str, reasons: String },
    /// The current directory is needed to resolve a relative directory.
    #[error("{flag} {}: cannot make it absolute: {source}", path.display())]
    Directory { flag: &'static str, path: PathBuf, source: std::io::Error },
}

impl BenchError {
    /// All of `bench`'s configurations failed, for these reasons ("NAME: why").
    pub fn nothing_measured(bench: &'static str, reasons: &[String]) -> BenchError {
        let reasons = if reasons.is_empty() { "no configuration was selected".to_string() } else { reasons.join("; ") };
        BenchError::NothingMeasured { bench, reasons }
    }
}

/// `dir` made absolute against the current directory, once, before anything
/// uses it: the builds write workspace files into it whose relative paths
/// are resolved against the workspace file's own directory, so a relative
/// `--out` used to be resolved a second time there and nothing was found.
fn absolute_dir(flag: &'static str, dir: PathBuf) -> Result<PathBuf, BenchError> {
    std::path::absolute(&dir).map_err(|source| BenchError::Directory { flag, path: dir, source })
}

/// How the instance programs beside `shoal` are linked, for the benches'
/// headers: "shoal-tender static, shoal-spt static" (what scripts/setup
/// leaves) or "dynamic" (what a plain `cargo build` leaves; slower start).
pub fn tender_linking() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    ["shoal-tender", "shoal-spt"]
        .iter()
        .map(|name| {
            let how = match linked_statically(&exe.with_file_name(name)) {
                Some(true) => "static",
                Some(false) => "dynamic",
                None => "missing",
            };
            format!("{name} {how}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the ELF file at `path` has no program interpreter (no
/// `PT_INTERP`: statically linked); `None` when it cannot be read as a
/// 64-bit little-endian ELF file.
pub fn linked_statically(path: &Path) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    let bytes = std::fs::read(path).ok()?;
    if bytes.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let word = |at: usize, n: usize| -> Option<u64> {
        let b = bytes.get(at..at.checked_add(n)?)?;
        Some(b.iter().rev().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    };
    let phoff = usize::try_from(word(0x20, 8)?).ok()?;
    let phentsize = usize::try_from(word(0x36, 2)?).ok()?;
    let phnum = usize::try_from(word(0x38, 2)?).ok()?;
    for i in 0..phnum {
        if word(phoff.checked_add(i.checked_mul(phentsize)?)?, 4)? == u64::from(PT_INTERP) {
            return Some(false);
        }
    }
    Some(true)
}

/// The lean `shoal-tender` command, which `cargo build` puts beside
/// `shoal`; an error saying so when it is not there.
pub fn tender_binary() -> Result<PathBuf> {
    let t = std::env::current_exe()?.with_file_name("shoal-tender");
    anyhow::ensure!(t.is_file(), "{} is missing: `cargo build --release` builds it beside shoal", t.display());
    Ok(t)
}

/// Mean and sample standard deviation.
pub fn mean_sd(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return (mean, 0.0);
    }
    let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

pub fn run(which: Bench) -> Result<()> {
    match which {
        Bench::Apps { repeat, only, mem_modes, json } => apps::apps(repeat, only, mem_modes, json),
        Bench::Boot { runs, json } => boot::boot(runs, json),
        Bench::Density { count, mem, only, json } => density::density(density::DensityOpts { count, mem, only, json }),
        Bench::Echo { round_trips, repeat, size, json } => echo::echo(echo::EchoOpts { round_trips, repeat, size, json }),
        Bench::Memory { interval, settle, tender, mem, supervised, only, out, workload, json } => {
            let out = absolute_dir("--out", out)?;
            memory::memory(memory::MemoryOpts { workload, interval, settle, tender, supervised, only, out, mem, json })
        }
        Bench::Faas { only, backends, repeat, requests, max_clients, bursts, instances, out, json } => {
            let out = absolute_dir("--out", out)?;
            faas::faas(faas::FaasOpts { only, backends, repeat, requests, bursts, instances, max_clients, out, json })
        }
        Bench::Http { clients, repeat, duration, systems, pin, shoal_bin, out, json } => {
            let out = absolute_dir("--out", out)?;
            let which = servers::Which::Http;
            servers::servers(servers::ServersOpts { which, clients, repeat, duration, requests: 1, pipeline: 1, systems, pin, shoal_bin, out, json })
        }
        Bench::Kv { clients, repeat, requests, pipeline, systems, pin, shoal_bin, out, json } => {
            let out = absolute_dir("--out", out)?;
            let which = servers::Which::Kv;
            servers::servers(servers::ServersOpts { which, clients, repeat, duration: 2.0, requests, pipeline, systems, pin, shoal_bin, out, json })
        }
        Bench::Size { out, json } => memory::size(json, absolute_dir("--out", out)?),
        Bench::Pages { json, keep } => crate::bench_pages::run(json, keep.map(|k| absolute_dir("--keep", k)).transpose()?),
        Bench::Syscall { iterations, repeat, json } => syscall(iterations, repeat, json),
        Bench::Recover { repeat, iterations, out, json, only, duration, requests } => {
            recover::recover(recover::RecoverOpts { repeat, iterations, out: absolute_dir("--out", out)?, json, only, duration, requests })
        }
    }
}

/// Builds `apps/SRC` as a shoal image and as a native static musl program
/// in `dir`; returns (image, native).
fn build_pair(src: &Path, dir: &Path, cflags: &[&str]) -> Result<(PathBuf, PathBuf)> {
    let paths = shoal_toolchain::Paths::discover()?;
    let stem = src.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
    let image = dir.join(format!("{stem}.shoal"));
    let native = dir.join(format!("{stem}.native"));
    let mut args: Vec<String> = cflags.iter().map(|s| s.to_string()).collect();
    args.extend([src.display().to_string(), "-o".into(), image.display().to_string()]);
    shoal_toolchain::cc::cc(&paths, &args)?;
    let status = Command::new("musl-gcc")
        .args(["-static"])
        .args(cflags)
        .arg(src)
        .arg("-o")
        .arg(&native)
        .status()
        .context("cannot run musl-gcc (install Debian's musl-tools)")?;
    if !status.success() {
        bail!("musl-gcc failed to build {}", src.display());
    }
    Ok((image, native))
}

fn parse_kv(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .last()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn run_measure(cmd: &mut Command) -> Result<Vec<(String, f64)>> {
    let out = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).output().context("cannot start the benchmark program")?;
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("the benchmark program failed ({}): {}", out.status, err.trim());
    }
    let kv = parse_kv(&err);
    if kv.is_empty() {
        bail!("the benchmark program printed no results: {}", err.trim());
    }
    Ok(kv)
}

fn syscall(iterations: u64, repeat: usize, as_json: bool) -> Result<()> {
    if repeat == 0 || iterations == 0 {
        bail!("--repeat and --iterations must be at least 1");
    }
    let paths = shoal_toolchain::Paths::discover()?;
    let tmp = tempfile::tempdir()?;
    let src = paths.home.join("apps/bench/syscall.c");
    let (image, native) = build_pair(&src, tmp.path(), &["-O2"])?;
    let shoal = std::env::current_exe()?;
    let ops = ["getpid", "write", "filewrite"];
    let mut native_r: Vec<Vec<f64>> = vec![Vec::new(); ops.len()];
    let mut spt_r: Vec<Vec<f64>> = vec![Vec::new(); ops.len()];
    for _ in 0..repeat {
        let n = run_measure(Command::new(&native).arg(iterations.to_string()))?;
        let s = run_measure(Command::new(&shoal).arg("run").arg(&image).arg("--").arg(iterations.to_string()))?;
        for (i, op) in ops.iter().enumerate() {
            if let Some((_, v)) = n.iter().find(|(k, _)| k == op) {
                native_r[i].push(*v);
            }
            if let Some((_, v)) = s.iter().find(|(k, _)| k == op) {
                spt_r[i].push(*v);
            }
        }
    }
    let console = console_writes(&paths.home, tmp.path(), &shoal, repeat)?;
    let labels = ["getpid()", "write(1 byte, stdout→/dev/null)", "write(1 byte, file)"];
    let mut results = serde_json::Map::new();
    let mut rows = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let (nm, nsd) = mean_sd(&native_r[i]);
        let (sm, ssd) = mean_sd(&spt_r[i]);
        let ratio = sm / nm;
        results.insert(op.to_string(), json!({"native_ns": {"mean": nm, "sd": nsd}, "spt_ns": {"mean": sm, "sd": ssd}, "ratio_spt_over_native": ratio}));
        rows.push((labels[i], nm, nsd, sm, ssd, ratio));
    }
    if as_json {
        let console: serde_json::Map<String, serde_json::Value> = console
            .iter()
            .map(|(k, r)| {
                let v = match r {
                    Ok(xs) => {
                        let (m, sd) = mean_sd(xs);
                        json!({"mean_ms": m, "sd_ms": sd})
                    }
                    Err(why) => json!({"unavailable": why}),
                };
                (k.to_string(), v)
            })
            .collect();
        let doc = json!({"iterations": iterations, "repeat": repeat, "results": results, "console_20000_writes": console});
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!("shoal bench syscall: {iterations} calls per run, {repeat} runs of each, native and spt alternating");
    println!("{:<34} {:>20} {:>20} {:>12}", "operation (ns per call)", "native process", "shoal spt", "spt/native");
    for (l, nm, nsd, sm, ssd, r) in rows {
        println!("{:<34} {:>20} {:>20} {:>12.3}", l, format!("{nm:.1} ± {nsd:.1}"), format!("{sm:.1} ± {ssd:.1}"), r);
    }
    println!("(file writes: shoal's in-memory ramfs vs the host's /tmp; stdout: shoal's console hypercall vs write(2).)");
    println!();
    println!("console: {CONSOLE_WRITES} writes of 2 bytes to stdout (a file), start to exit, ms (mean ± SD of {repeat})");
    let mean_of = |k: &str| console.iter().find(|(n, _)| *n == k).and_then(|(_, r)| r.as_ref().ok()).map(|xs| mean_sd(xs).0);
    for (name, r) in &console {
        match r {
            Ok(xs) => {
                let (m, sd) = mean_sd(xs);
                let vs = |k: &str| mean_of(k).map(|b| format!("{:.2}x {k}", m / b)).unwrap_or_default();
                let note = match *name {
                    "spt" => vs("native"),
                    "hvt" => format!("{}  (issue 18 goal: at most 2x spt)", vs("spt")),
                    _ => String::new(),
                };
                println!("  {name:<8} {:>16}  {note}", format!("{m:.1} ± {sd:.1}"));
            }
            Err(why) => println!("  {name:<8} unavailable here: {why}"),
        }
    }
    println!("UKL (seed 001) replaces the syscall instruction by a function call; its echo server halves average latency.");
    Ok(())
}

/// Whether hvt can run here (`/dev/kvm` opens read-write), or why not:
/// the reason a bench prints beside an unavailable hvt column.
pub(crate) fn kvm_usable() -> Result<(), String> {
    std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").map(|_| ()).map_err(|e| format!("/dev/kvm is not usable: {e}"))
}

/// `name` in PATH or in the sbin directories (runc lives in /usr/sbin).
pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from)).map(|d| d.join(name)).find(|p| p.is_file())
}

/// The effective uid, from `/proc/self/status` (root runs runc/runsc).
pub(crate) fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Console writes per run in `bench syscall`'s console section (issue 18's
/// measure: a program printing 20,000 short lines).
const CONSOLE_WRITES: u64 = 20_000;

/// apps/bench/console.c start to exit, stdout in a file: native, spt and
/// hvt alternating, `repeat` runs each (ms); hvt is unavailable, with the
/// reason, when /dev/kvm is not usable (a failed run fails the bench).
/// A system's runs in ms, or why it cannot run here.
type Runs = Result<Vec<f64>, String>;

fn console_writes(home: &Path, dir: &Path, shoal: &Path, repeat: usize) -> Result<Vec<(&'static str, Runs)>> {
    let (image, native) = build_pair(&home.join("apps/bench/console.c"), dir, &["-O2"])?;
    let out = dir.join("console.out");
    let hvt = kvm_usable();
    let n = CONSOLE_WRITES.to_string();
    let mut rows: Vec<(&'static str, Runs)> = vec![("native", Ok(Vec::new())), ("spt", Ok(Vec::new())), ("hvt", hvt.map(|_| Vec::new()))];
    for _ in 0..repeat {
        for (name, r) in rows.iter_mut() {
            let Ok(xs) = r else { continue };
            let mut cmd = if *name == "native" {
                Command::new(&native)
            } else {
                let mut c = Command::new(shoal);
                c.args(["run", "--tender", name]).arg(&image).arg("--");
                c
            };
            cmd.arg(&n).stdout(std::fs::File::create(&out)?).stderr(Stdio::piped());
            let t0 = std::time::Instant::now();
            let o = cmd.output().with_context(|| format!("cannot start the console benchmark on {name}"))?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            let len = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
            if !o.status.success() || len != 2 * CONSOLE_WRITES {
                bail!("the console benchmark failed on {name} ({}, {len} bytes written): {}", o.status, String::from_utf8_lossy(&o.stderr).trim());
            }
            xs.push(ms);
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics() {
        let (m, sd) = mean_sd(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert!((m - 5.0).abs() < 1e-9);
        assert!((sd - 2.138).abs() < 1e-3);
        assert_eq!(mean_sd(&[3.0]), (3.0, 0.0));
    }

    #[test]
    fn parses_results() {
        let kv = parse_kv("noise\ngetpid=1.5 write=20.0");
        assert_eq!(kv, vec![("getpid".to_string(), 1.5), ("write".to_string(), 20.0)]);
    }
}
