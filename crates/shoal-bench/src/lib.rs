//! `shoal bench`: experiments, never tests. Each runs shoal and what it is
//! compared with side by side in one run, alternating, repeats, and prints
//! mean ± standard deviation and the ratio (`--json`: the same numbers as
//! JSON); each also writes a CSV of the rows it prints and a plot into
//! its `--out` directory, some also CSVs of the raw samples and Markdown
//! tables.
//!
//! One module per experiment ([`apps`], [`boot`], [`cri`], [`density`], [`dyn_exec`] for `dyn`, [`echo`], [`exec`],
//! [`faas`], [`memory`] with `size`, [`pages`], [`recover`] with
//! [`recover_servers`] and [`recover_shrink`], [`servers`] for `http` and
//! `kv`, [`syscall`]) over shared modules: [`stats`] (mean, SD,
//! percentiles, confidence intervals), [`sample`] (process trees, CPU time
//! and memory from /proc), [`load`] (the HTTP client, hey, wrk and
//! redis-benchmark), [`host`] (what this machine can run, builds),
//! [`table`] (the one table writer: text, Markdown, CSV), [`plot`] (SVG
//! and PNG plots) and [`progress`] (progress bars). The OCI bundles of the
//! container runs come from `shoal_serve::bundle`, shared with the gateway.
//!
//! Why each dependency: `plotters` draws the plots (axes, log scales,
//! legends) in SVG and PNG from one description, instead of hand-written
//! SVG; `indicatif` draws progress bars for the experiments that run for
//! minutes, and only when stderr is a terminal; `clap` defines the
//! subcommands that `shoal` flattens into its command line; `serde_json`
//! writes `--json`; `thiserror`/`anyhow` the errors; `libc` the few system
//! calls std lacks (getrusage, sysconf, setrlimit, affinity, signals);
//! `tempfile` the scratch directories.

pub mod apps;
pub mod boot;
pub mod cri;
pub mod density;
pub mod dyn_exec;
pub mod echo;
pub mod exec;
pub mod faas;
pub mod host;
pub mod load;
pub mod memory;
pub mod pages;
pub mod plot;
pub mod progress;
pub mod recover;
pub mod recover_servers;
pub mod recover_shrink;
pub mod sample;
pub mod servers;
pub mod stats;
pub mod syscall;
pub mod table;

use anyhow::Result;
use clap::Subcommand;
use serde_json::json;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum Bench {
    /// Total execution time of the recipes' applications (`shoal recipe list`) natively, on spt (per memory mode) and on hvt.
    Apps {
        /// Runs of each side (at least 2; mean ± SD) [default: 5; --quick: 2].
        #[arg(long)]
        repeat: Option<usize>,
        /// A short run with small counts (a smoke run, not a measurement); the options above override it.
        #[arg(long)]
        quick: bool,
        /// Only these recipes (default: all).
        #[arg(long = "only", value_name = "RECIPE")]
        only: Vec<String>,
        /// Memory modes to compare on spt, one column each (repeatable:
        /// `--mem-mode copy --mem-mode ksm --mem-mode pool`; default copy).
        #[arg(long = "mem-mode", value_name = "MODE", value_parser = ["copy", "ksm", "pool"])]
        mem_modes: Vec<String>,
        /// Directory for the CSV and the plot.
        #[arg(long, default_value = "shoal-bench-apps")]
        out: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Time to first stdout byte and to exit of hello world on spt, hvt, a native process, runc and runsc.
    Boot {
        /// Runs of each system (median and p95) [default: 20; --quick: 3].
        #[arg(long)]
        runs: Option<usize>,
        /// A short run with small counts (a smoke run, not a measurement); the options above override it.
        #[arg(long)]
        quick: bool,
        /// Directory for the CSV and the plot.
        #[arg(long, default_value = "shoal-bench-boot")]
        out: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Host memory per idle instance: N warm instances of apps/functions/noop on spt and hvt (copy and pool) beside N native processes (target: a quarter MiB each).
    Density {
        /// Instances per configuration [default: 100; --quick: 10].
        #[arg(long)]
        count: Option<usize>,
        /// A short run with small counts (a smoke run, not a measurement); the options above override it.
        #[arg(long)]
        quick: bool,
        /// Guest memory of each instance.
        #[arg(long, default_value = "32M")]
        mem: String,
        /// Only these configurations (process, spt+copy, spt+pool, hvt+copy, hvt+pool).
        #[arg(long = "only", value_name = "CONFIG")]
        only: Vec<String>,
        /// Directory for the CSV and the plot.
        #[arg(long, default_value = "shoal-bench-density")]
        out: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The host's dynamically linked node and python3.11, unmodified, on spt and hvt beside native: start → exit, a pinned HTTP hello at 1 and 50 connections, idle memory per instance and of N idle Node instances.
    Dyn {
        /// Start → exit runs and HTTP runs of each system [default: 10; --quick: 3].
        #[arg(long)]
        repeat: Option<usize>,
        /// Idle Node instances started together for the PSS sum [default: 20; --quick: 20].
        #[arg(long)]
        instances: Option<usize>,
        /// Whole seconds of each wrk run [default: 5; --quick: 1].
        #[arg(long)]
        duration: Option<u64>,
        /// A short run with small counts (a smoke run, not a measurement); the options above override it.
        #[arg(long)]
        quick: bool,
        /// Directory for the scripts, logs, CSV, plot and Markdown table.
        #[arg(long, default_value = "shoal-bench-dyn")]
        out: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Echo latency of apps/net/echo.c (epoll) on spt, hvt and a native process: a persistent connection and a connection per request (the UKL paper's Fig. 1).
    Echo {
        /// Round trips on the persistent connection per run (the connection-per-request mode makes a tenth as many requests) [default: 10000; --quick: 500].
        #[arg(long)]
        round_trips: Option<usize>,
        /// Runs of each system, interleaved native, spt, hvt [default: 3; --quick: 1].
        #[arg(long)]
        repeat: Option<usize>,
        /// A short run with small counts (a smoke run, not a measurement); the options above override it.
        #[arg(long)]
        quick: bool,
        /// Message size in bytes.
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Directory for the CSV and the plot.
        #[arg(long, default_value = "shoal-bench-echo")]
        out: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The FaaS paper's experiments through a real `shoal serve` on spt, hvt, process, runc and runsc:
    /// cold-start, burst, startup-cost, idle-cpu, idle-memory, workloads, concurrency, go, node (Node.js functions), templates (a quick run, about
    /// 15 minutes here: --repeat 10 --requests 2048 --bursts 10,20,50,100 --instances 1,10,50,100).
    Faas {
        /// Only these experiments (repeatable; default all).
        #[arg(long = "only", value_name = "EXPERIMENT", value_parser = faas::EXPERIMENTS)]
        only: Vec<String>,
        /// Backends to compare (comma-separated; default all five; one that cannot run here is skipped with its reason).
        #[arg(long, value_delimiter = ',', value_parser = faas::BACKENDS)]
        backends: Vec<String>,
        /// Cold starts, start-up cost samples and warm runs of each workload per backend (the paper's 100) [default: 100; --quick: 3].
        #[arg(long)]
        repeat: Option<usize>,
        /// hey requests per concurrency level (the paper's 2^15) [default: 32768; --quick: 256].
        #[arg(long)]
        requests: Option<usize>,
        /// Concurrency levels: powers of two from 1 up to this many clients [default: 4096; --quick: 8].
        #[arg(long)]
        max_clients: Option<usize>,
        /// Burst sizes (concurrent cold starts), comma-separated [default: 10,20,…,100; --quick: 2,5].
        #[arg(long, value_delimiter = ',')]
        bursts: Vec<usize>,
        /// Numbers of idle instances for idle-memory, comma-separated [default: 1,10,25,50,100; --quick: 1,5].
        #[arg(long, value_delimiter = ',')]
        instances: Vec<usize>,
        /// A short run with small counts (a smoke run, not a measurement); the options above override it.
        #[arg(long)]
        quick: bool,
        /// Directory for the functions, CSVs, plots and tables.
        #[arg(long, default_value = "shoal-bench-faas")]
        out: PathBuf,
        /// Print JSON instead of the tables.
        #[arg(long)]
        json: bool,
    },
    /// The servers paper's Fig. 3: nginx's requests/s serving a small static page (wrk) against concurrent clients, and the memory footprint, on a native process, runc, runsc, spt and hvt interleaved.
    Http {
        #[command(flatten)]
        common: ServerArgs,
        /// Seconds of each wrk run [default: 2; --quick: 0.5].
        #[arg(long)]
        duration: Option<f64>,
        /// Directory for the builds, logs, CSVs, plot and table.
        #[arg(long, default_value = "shoal-bench-http")]
        out: PathBuf,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The servers paper's Fig. 5: Redis GET and SET requests/s (redis-benchmark) against concurrent clients, and the memory footprint, on a native process, runc, runsc, spt and hvt interleaved.
    Kv {
        #[command(flatten)]
        common: ServerArgs,
        /// Requests per operation in each redis-benchmark run [default: 20000; --quick: 2000].
        #[arg(long)]
        requests: Option<usize>,
        /// Requests each client pipelines (redis-benchmark -P; the paper pipelined but gives no depth).
        #[arg(long, default_value_t = 1)]
        pipeline: usize,
        /// Directory for the builds, logs, CSVs, plots and table.
        #[arg(long, default_value = "shoal-bench-kv")]
        out: PathBuf,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Memory of 8 idle instances of different SQLite versions launched one every --interval s, per layout and memory mode (the Spacer paper's Fig. 8).
    Memory {
        /// Seconds between launches [default: 10; --quick: 1].
        #[arg(long)]
        interval: Option<f64>,
        /// A short run with small counts (a smoke run, not a measurement); the options above override it.
        #[arg(long)]
        quick: bool,
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
    /// Start latency through Kubernetes' CRI (containerd + crictl): pod sandbox start → ready and container create + start → first HTTP answer of a FROM-scratch Go image, the runc handler beside the shoal handler on spt and hvt (and a shoal image of apps/net/http.c on spt).
    Cri {
        /// Measured rounds, each system once per round after one warm-up round (median and p95; at least 2).
        #[arg(long, default_value_t = 10)]
        repeat: usize,
        /// Three rounds (a smoke run, not a measurement).
        #[arg(long)]
        quick: bool,
        /// Systems to compare (comma-separated: runc, spt, hvt, spt-image — apps/net/http.c as a shoal image on spt; default all; one that cannot run here is reported with its reason).
        #[arg(long, value_delimiter = ',')]
        systems: Vec<String>,
        /// Directory for the binaries, the CSVs, the plot and the Markdown table.
        #[arg(long, default_value = "shoal-bench-cri")]
        out: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Unmodified static executables on spt beside native: getpid through a rewritten site, the trap path and natively; a Go net/http hello server's throughput (pinned, 1/50/200 connections), start to first byte and idle memory.
    Exec {
        /// Fewer and shorter runs (a smoke run, not a measurement).
        #[arg(long)]
        quick: bool,
        /// Directory for the CSVs, the plot and the Markdown table.
        #[arg(long, default_value = "shoal-bench-exec")]
        out: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Disk use of the 8 idle images per configuration, and images + pool for the pool (the Spacer paper's Fig. 9).
    Size {
        /// Accepted as every bench's is; this one has nothing to shorten.
        #[arg(long)]
        quick: bool,
        /// Directory for the images, the CSV and the plot.
        #[arg(long, default_value = "shoal-bench-size")]
        out: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Distinct code+rodata frames of speedtest1 against 8 SQLite versions, per layout policy (as in the Spacer paper).
    Pages {
        /// Accepted as every bench's is; this one has nothing to shorten.
        #[arg(long)]
        quick: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Directory for the CSV and the plot.
        #[arg(long, default_value = "shoal-bench-pages")]
        out: PathBuf,
        /// Keep the built images in this directory.
        #[arg(long)]
        keep: Option<PathBuf>,
    },
    /// The VampOS paper's experiments: gate cost in cycles, Fig. 5 system calls and SQLite 10,000 inserts without and with the component gates (`--no-recover`), the reboot time of each rebootable component, nginx and Redis throughput (Fig. 7), nginx's reboot times after 1,000 GETs (Fig. 6) and failed requests under rejuvenation vs whole restarts (Table V), Redis latency across a ramfs panic vs a restart (Fig. 8), on spt, hvt and a native process.
    Recover {
        /// Runs of each system (at least 2; mean ± SD) [default: 5; --quick: 2].
        #[arg(long)]
        repeat: Option<usize>,
        /// Calls of each operation per loop (each run times 5 loops and keeps the lowest) [default: 20000; --quick: 2000].
        #[arg(long)]
        iterations: Option<u64>,
        /// A short run with small counts (a smoke run, not a measurement); the options above override it.
        #[arg(long)]
        quick: bool,
        /// Directory for the builds, the CSV and the plot.
        #[arg(long, default_value = "shoal-bench-recover")]
        out: PathBuf,
        /// Print JSON instead of the tables.
        #[arg(long)]
        json: bool,
        /// Run only these parts, comma-separated: syscalls (gate cost and Fig. 5), reboot, sqlite, servers (Fig. 7 nginx and Redis), nginx-reboot (Fig. 6), rejuvenation (Table V), redis-latency (Fig. 8). Default: all.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Seconds of each wrk run of the Fig. 7 nginx runs (0.5-60) [default: 3; --quick: 0.5].
        #[arg(long)]
        duration: Option<f64>,
        /// SET requests of each redis-benchmark run of Fig. 7 (1-10,000,000) [default: 50000; --quick: 5000].
        #[arg(long)]
        requests: Option<u64>,
    },
    /// Cost of getpid and of a 1-byte write through shoal (spt) and a native Linux process.
    Syscall {
        /// Calls per run [default: 200000; --quick: 20000].
        #[arg(long)]
        iterations: Option<u64>,
        /// Runs of each side [default: 10; --quick: 2].
        #[arg(long)]
        repeat: Option<usize>,
        /// A short run with small counts (a smoke run, not a measurement); the options above override it.
        #[arg(long)]
        quick: bool,
        /// Directory for the CSV and the plot.
        #[arg(long, default_value = "shoal-bench-syscall")]
        out: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// The options `shoal bench http` and `shoal bench kv` share.
#[derive(clap::Args)]
pub struct ServerArgs {
    /// Concurrency levels (comma-separated; the paper's 1, 100, 200, …, 1000) [--quick: 1,100].
    #[arg(long, value_delimiter = ',')]
    pub clients: Vec<usize>,
    /// Runs per system and level (the paper's n = 30; mean ± SD) [default: 30; --quick: 2].
    #[arg(long)]
    pub repeat: Option<usize>,
    /// A short run with small counts (a smoke run, not a measurement); the options above override it.
    #[arg(long)]
    pub quick: bool,
    /// Systems to compare (comma-separated: native, runc, runsc, spt, hvt, spt-other; default all; one that cannot run here is skipped with its reason).
    #[arg(long, value_delimiter = ',')]
    pub systems: Vec<String>,
    /// Pin the servers to one CPU and the client to another (the first two CPUs this process may use; runc/runsc also get that CPU as their container's cpuset): at 1 client, unpinned runs mostly measure whether client and server share a core.
    #[arg(long)]
    pub pin: bool,
    /// Another shoal build (the `shoal` binary of another tree, its tenders beside it) to compare with this one in the same interleaved run: adds the system `spt-other`, the server on spt with that build's tender and an image that build makes from its own tree's kernel.
    #[arg(long)]
    pub shoal_bin: Option<PathBuf>,
}

/// Why a bench has no measurement of a system or configuration: it cannot
/// run on this machine (no `/dev/kvm`, a runtime not installed, not root),
/// or it could and failed. The two are reported apart, in the JSON
/// (`{"unavailable": WHY}` or `{"failed": WHY}`) and in the table: a
/// failure is a fault to look into, not a property of the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// This machine lacks what the system needs.
    Unavailable(String),
    /// The system could run here and failed.
    Failed(String),
}

impl Missing {
    /// The JSON entry in place of the measurement.
    pub fn json(&self) -> serde_json::Value {
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

/// Writes `DIR/NAME.csv` (`header`, then `lines`) and `DIR/NAME.svg` (and
/// the PNG beside it), a bar chart of `series` over `cats`. A failure is one
/// warning line on stderr (`bench NAME: no …`); the bench still prints its
/// table.
pub(crate) fn write_csv_and_bars(
    name: &str,
    dir: &std::path::Path,
    header: &str,
    lines: &[String],
    frame: &plot::Frame,
    cats: &[String],
    series: &[plot::BarSeries],
) {
    let warn = |what: &str, e: &dyn std::fmt::Display| eprintln!("bench {name}: no {what}: {e}");
    if let Err(e) = std::fs::create_dir_all(dir) {
        return warn("CSV or plot", &e);
    }
    if let Err(e) = table::write_csv_lines(&dir.join(format!("{name}.csv")), header, lines) {
        warn("CSV", &e);
    }
    if let Err(e) = plot::bars(&dir.join(format!("{name}.svg")), frame, cats, series) {
        warn("plot", &e);
    }
}

/// A knob's value: the one given, else the quick run's or the full run's.
fn knob<T>(given: Option<T>, quick: bool, full: T, short: T) -> T {
    given.unwrap_or(if quick { short } else { full })
}

/// A list knob's value: the one given (non-empty), else the quick run's or
/// the full run's.
fn list(given: Vec<usize>, quick: bool, full: &[usize], short: &[usize]) -> Vec<usize> {
    if !given.is_empty() {
        given
    } else if quick {
        short.to_vec()
    } else {
        full.to_vec()
    }
}

const FULL_CLIENTS: [usize; 11] = [1, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000];

pub fn run(which: Bench) -> Result<()> {
    match which {
        Bench::Apps { repeat, quick, only, mem_modes, out, json } => apps::apps(knob(repeat, quick, 5, 2), only, mem_modes, &absolute_dir("--out", out)?, json),
        Bench::Boot { runs, quick, out, json } => boot::boot(knob(runs, quick, 20, 3), &absolute_dir("--out", out)?, json),
        Bench::Density { count, quick, mem, only, out, json } => {
            let out = absolute_dir("--out", out)?;
            density::density(density::DensityOpts { count: knob(count, quick, 100, 10), mem, only, json, out })
        }
        Bench::Dyn { repeat, instances, duration, quick, out, json } => {
            let out = absolute_dir("--out", out)?;
            let (repeat, instances, secs) = (knob(repeat, quick, 10, 3), knob(instances, quick, 20, 20), knob(duration, quick, 5, 1));
            dyn_exec::dyn_exec(dyn_exec::DynOpts { repeat, instances, secs, out, json })
        }
        Bench::Echo { round_trips, repeat, quick, size, out, json } => {
            let out = absolute_dir("--out", out)?;
            echo::echo(echo::EchoOpts { round_trips: knob(round_trips, quick, 10_000, 500), repeat: knob(repeat, quick, 3, 1), size, out, json })
        }
        Bench::Memory { interval, quick, settle, tender, mem, supervised, only, out, workload, json } => {
            let out = absolute_dir("--out", out)?;
            let interval = knob(interval, quick, 10.0, 1.0);
            memory::memory(memory::MemoryOpts { workload, interval, settle, tender, supervised, only, out, mem, json })
        }
        Bench::Faas { only, backends, repeat, requests, max_clients, bursts, instances, quick, out, json } => {
            let out = absolute_dir("--out", out)?;
            let (repeat, requests, max_clients) = (knob(repeat, quick, 100, 3), knob(requests, quick, 32768, 256), knob(max_clients, quick, 4096, 8));
            let bursts = list(bursts, quick, &[10, 20, 30, 40, 50, 60, 70, 80, 90, 100], &[2, 5]);
            let instances = list(instances, quick, &[1, 10, 25, 50, 100], &[1, 5]);
            faas::faas(faas::FaasOpts { only, backends, repeat, requests, bursts, instances, max_clients, out, json })
        }
        Bench::Http { common: ServerArgs { clients, repeat, quick, systems, pin, shoal_bin }, duration, out, json } => {
            let out = absolute_dir("--out", out)?;
            let which = servers::Which::Http;
            let (clients, repeat, duration) = (list(clients, quick, &FULL_CLIENTS, &[1, 100]), knob(repeat, quick, 30, 2), knob(duration, quick, 2.0, 0.5));
            servers::servers(servers::ServersOpts { which, clients, repeat, duration, requests: 1, pipeline: 1, systems, pin, shoal_bin, out, json })
        }
        Bench::Kv { common: ServerArgs { clients, repeat, quick, systems, pin, shoal_bin }, requests, pipeline, out, json } => {
            let out = absolute_dir("--out", out)?;
            let which = servers::Which::Kv;
            let (clients, repeat, requests) = (list(clients, quick, &FULL_CLIENTS, &[1, 100]), knob(repeat, quick, 30, 2), knob(requests, quick, 20000, 2000));
            servers::servers(servers::ServersOpts { which, clients, repeat, duration: 2.0, requests, pipeline, systems, pin, shoal_bin, out, json })
        }
        Bench::Cri { repeat, quick, systems, out, json } => cri::cri(cri::CriOpts { repeat, quick, systems, out: absolute_dir("--out", out)?, json }),
        Bench::Exec { quick, out, json } => exec::exec(exec::ExecOpts { quick, out: absolute_dir("--out", out)?, json }),
        Bench::Size { quick: _, out, json } => memory::size(json, absolute_dir("--out", out)?),
        Bench::Pages { quick: _, json, out, keep } => pages::run(json, &absolute_dir("--out", out)?, keep.map(|k| absolute_dir("--keep", k)).transpose()?),
        Bench::Syscall { iterations, repeat, quick, out, json } => {
            syscall::syscall(knob(iterations, quick, 200_000, 20_000), knob(repeat, quick, 10, 2), &absolute_dir("--out", out)?, json)
        }
        Bench::Recover { repeat, iterations, quick, out, json, only, duration, requests } => {
            let (repeat, iterations) = (knob(repeat, quick, 5, 2), knob(iterations, quick, 20_000, 2_000));
            let (duration, requests) = (knob(duration, quick, 3.0, 0.5), knob(requests, quick, 50_000, 5_000));
            recover::recover(recover::RecoverOpts { repeat, iterations, out: absolute_dir("--out", out)?, json, only, duration, requests })
        }
    }
}

#[cfg(test)]
mod cli_tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        bench: Bench,
    }

    /// Every experiment, by its subcommand name.
    const ALL: [&str; 15] = ["apps", "boot", "cri", "density", "dyn", "echo", "faas", "http", "kv", "memory", "exec", "size", "pages", "recover", "syscall"];

    #[test]
    fn every_bench_takes_quick_and_json() {
        use clap::CommandFactory;
        let names: Vec<String> = Cli::command().get_subcommands().map(|c| c.get_name().to_string()).collect();
        for name in &names {
            assert!(ALL.contains(&name.as_str()), "{name} is not in this test's list");
            let parsed = Cli::try_parse_from(["bench", name, "--quick", "--json"]);
            assert!(parsed.is_ok(), "{name} --quick --json: {}", parsed.err().map(|e| e.to_string()).unwrap_or_default());
        }
        assert_eq!(names.len(), 15);
    }

    #[test]
    fn the_detailed_knobs_override_quick() {
        let Cli { bench: Bench::Boot { runs, quick, .. } } = Cli::try_parse_from(["bench", "boot", "--quick", "--runs", "7"]).unwrap() else {
            panic!("not boot")
        };
        assert_eq!(knob(runs, quick, 20, 3), 7);
        let Cli { bench: Bench::Boot { runs, quick, .. } } = Cli::try_parse_from(["bench", "boot", "--quick"]).unwrap() else { panic!("not boot") };
        assert_eq!(knob(runs, quick, 20, 3), 3);
        let Cli { bench: Bench::Boot { runs, quick, .. } } = Cli::try_parse_from(["bench", "boot"]).unwrap() else { panic!("not boot") };
        assert_eq!(knob(runs, quick, 20, 3), 20);
        let Cli { bench: Bench::Http { common, .. } } = Cli::try_parse_from(["bench", "http", "--quick"]).unwrap() else { panic!("not http") };
        assert_eq!(list(common.clients, common.quick, &FULL_CLIENTS, &[1, 100]), vec![1, 100]);
    }
}
