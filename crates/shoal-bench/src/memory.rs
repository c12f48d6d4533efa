//! `shoal bench memory` and `shoal bench size`: the Spacer paper's §V-A (Fig. 8) and
//! §V-B (Fig. 9).
//!
//! Memory: 8 instances of `apps/bench/idle.c` (links SQLite, runs one
//! statement, then idles in a long `nanosleep`, i.e. blocked in the poll
//! hypercall), each against another SQLite version, are launched one every
//! `--interval` seconds and kept alive; every 500 ms the host's memory use
//! (MemTotal − MemAvailable, relative to a baseline taken before the
//! configuration's pool began to fill; a `pool` configuration adds each
//! version's libraries to the pool just before its first instance starts) and the instances' PSS (from
//! `/proc/PID/smaps`, tender processes included) are sampled. Instances
//! run from the lean `shoal-tender` command (the same code as `shoal run`
//! without the toolchain and benchmarks; crate `shoal-tender`): a tender's
//! binary pages are part of what an instance costs. Per
//! configuration (layout policy + memory mode) this gives a curve; the CSV,
//! an SVG plot (hand-written: a few polylines do not need a plotting
//! crate) and a table with the final values beside the paper's ratios.
//!
//! What is attributed to the instances: the sum of their PSS, except that
//! for `pool` configurations the PSS of pool mappings is replaced by the
//! whole size of the pool files (they occupy RAM in /dev/shm whether
//! mapped or not), which is conservative.
//!
//! KSM is switched on (`/sys/kernel/mm/ksm/run` = 1) only while a `ksm`
//! configuration runs; `run`, `pages_to_scan` and `sleep_millisecs` are
//! restored afterwards, on errors and on Ctrl-C or SIGTERM too (the run
//! stops, its instances are killed, and the command exits with an error).
//! ksmd's CPU time during the run is reported.
//!
//! `--workload ROWS` is the design's second variant: every instance first
//! inserts ROWS rows into an indexed in-memory table, then idles, showing
//! how heap growth dilutes sharing.
//! The ASLR variants (the Spacer paper: "the libraries were rearranged, and a
//! random offset was introduced between each library") are the workspace
//! policies `default-aslr`, `dce-aslr` (a shuffled plain link) and `aslr`
//! (Spacer-Δ with a trampoline table per library); each ASLR configuration
//! is compared with `default-aslr`, as the paper compares them.

use crate::plot::{self, Frame, Line};
use crate::progress::Progress;
use crate::sample::{meminfo_used_kib, pss_split_kib, tree};
use crate::table::Table;
use anyhow::{bail, Context, Result};
use serde_json::json;
use shoal_loader::pool::{pool_libs, Pool};
use shoal_toolchain::sqlite_versions::{prepare_all, SqliteVersion};
use shoal_toolchain::Paths;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One configuration of Fig. 8.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Name in tables and JSON.
    pub name: &'static str,
    /// Layout policy of the workspace.
    pub policy: &'static str,
    /// Memory mode of the instances.
    pub mode: &'static str,
    /// The paper's baseline/this memory ratio (Fig. 8), if it gives one.
    pub paper_vs_default: Option<f64>,
    /// The configuration this one is compared with: `default`, or
    /// `default-aslr` for the ASLR variants.
    pub baseline: &'static str,
}

/// The configurations, in table order. The paper's Default and DCE runs
/// use KSM too (all its runs but the loader's do), and so do these.
pub const CONFIGS: &[Config] = &[
    Config { name: "default", policy: "default", mode: "ksm", paper_vs_default: Some(1.0), baseline: "default" },
    Config { name: "dce", policy: "dce", mode: "ksm", paper_vs_default: Some(2.8 / 2.5), baseline: "default" },
    Config { name: "delta+ksm", policy: "delta", mode: "ksm", paper_vs_default: Some(2.8), baseline: "default" },
    Config { name: "delta+pool", policy: "delta", mode: "pool", paper_vs_default: Some(2.8 / 1.4), baseline: "default" },
    Config { name: "default-aslr", policy: "default-aslr", mode: "ksm", paper_vs_default: Some(1.0), baseline: "default-aslr" },
    Config { name: "dce-aslr", policy: "dce-aslr", mode: "ksm", paper_vs_default: Some(2.0 / 1.8), baseline: "default-aslr" },
    Config { name: "aslr+ksm", policy: "aslr", mode: "ksm", paper_vs_default: Some(2.0), baseline: "default-aslr" },
    Config { name: "aslr+pool", policy: "aslr", mode: "pool", paper_vs_default: None, baseline: "default-aslr" },
    Config { name: "default+copy", policy: "default", mode: "copy", paper_vs_default: None, baseline: "default" },
    Config { name: "aligned+ksm", policy: "aligned", mode: "ksm", paper_vs_default: None, baseline: "default" },
    Config { name: "aligned+pool", policy: "aligned", mode: "pool", paper_vs_default: None, baseline: "default" },
];

/// Options of `shoal bench memory`.
pub struct MemoryOpts {
    /// Rows of the workload each instance runs before idling (0: none).
    pub workload: u64,
    pub interval: f64,
    pub settle: Option<f64>,
    pub tender: String,
    /// spt instances keep their waiting parent (no `--single-process`).
    pub supervised: bool,
    pub only: Vec<String>,
    pub out: PathBuf,
    pub mem: String,
    pub json: bool,
}

fn say(quiet: bool, msg: &str) {
    if !quiet {
        crate::progress::say(&format!("shoal bench: {msg}"));
    }
}

/// Compiles apps/bench/idle.c against the oldest SQLite's header.
fn idle_object(paths: &Paths, shoal: &Path, oldest: &SqliteVersion, dir: &Path) -> Result<PathBuf> {
    let obj = dir.join("idle.o");
    let src = paths.home.join("apps/bench/idle.c");
    let st = Command::new(shoal)
        .arg("cc")
        .args(shoal_toolchain::sqlite_versions::CFLAGS)
        .arg("-I")
        .arg(&oldest.source)
        .arg("-c")
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .status()
        .context("cannot run shoal cc")?;
    anyhow::ensure!(st.success(), "compiling {} failed", src.display());
    Ok(obj)
}

/// What [`build_all`] gives: the images per policy that could be built.
struct Built {
    images: Vec<(String, Vec<PathBuf>)>,
    /// The SQLite versions, oldest first.
    versions: Vec<String>,
    /// "policy P: why" for each policy that could not be built.
    failures: Vec<String>,
}

impl Built {
    fn images_of(&self, policy: &str) -> Option<&[PathBuf]> {
        self.images.iter().find(|(p, _)| p == policy).map(|(_, i)| i.as_slice())
    }
}

/// Builds the images of every policy `configs` need into `root`, which must
/// be absolute (see `bench::absolute_dir`).
fn build_all(json_out: bool, root: &Path, configs: &[Config]) -> Result<Built> {
    let paths = Paths::discover()?;
    let shoal = std::env::current_exe()?;
    say(json_out, "fetching and compiling 8 SQLite versions (cached after the first run)…");
    let versions = prepare_all(&paths, &shoal)?;
    std::fs::create_dir_all(root)?;
    let app = idle_object(&paths, &shoal, &versions[0], root)?;
    let mut built = Vec::new();
    let mut failures = Vec::new();
    let wanted: BTreeSet<&str> = configs.iter().map(|c| c.policy).collect();
    let policies: Vec<&str> = ["default", "dce", "aligned", "delta", "aslr", "default-aslr", "dce-aslr"].into_iter().filter(|p| wanted.contains(p)).collect();
    let started = |p: &str| say(json_out, &format!("building 8 idle images with policy {p}…"));
    for (p, r) in policies.iter().zip(shoal_toolchain::sqlite_versions::build_policies(&paths, root, &policies, &versions, &app, &started)) {
        match r {
            Ok(images) => built.push((p.to_string(), images)),
            // Another policy's failure must not hide the others' results.
            Err(e) => {
                eprintln!("shoal bench: warning: policy {p} cannot be built, its configurations failed: {e:#}");
                failures.push(format!("policy {p}: {e:#}"));
            }
        }
    }
    Ok(Built { images: built, versions: versions.iter().map(|v| v.version.clone()).collect(), failures })
}

// ---------------------------------------------------------------- KSM

const KSM: &str = "/sys/kernel/mm/ksm";

/// KSM's settings, saved to be restored.
pub(super) struct KsmGuard {
    saved: Vec<(String, String)>,
}

impl KsmGuard {
    /// Switches KSM on (root needed); the settings come back on drop.
    pub(super) fn on() -> Result<KsmGuard> {
        let mut saved = Vec::new();
        for k in ["run", "pages_to_scan", "sleep_millisecs"] {
            let v = std::fs::read_to_string(format!("{KSM}/{k}")).with_context(|| format!("KSM is not available ({KSM}/{k})"))?;
            saved.push((k.to_string(), v.trim().to_string()));
        }
        std::fs::write(format!("{KSM}/run"), "1").context("cannot switch KSM on (root needed)")?;
        Ok(KsmGuard { saved })
    }
    fn setting(&self, k: &str) -> String {
        self.saved.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap_or_default()
    }
}

impl Drop for KsmGuard {
    fn drop(&mut self) {
        for (k, v) in self.saved.iter().rev() {
            let _ = std::fs::write(format!("{KSM}/{k}"), v);
        }
    }
}

/// Set by SIGINT/SIGTERM during a run, so that the run stops through the
/// normal path: instances killed, KSM's settings restored.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Catches Ctrl-C and SIGTERM for the rest of the command.
fn catch_interrupts() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; `signal` has no other preconditions.
        unsafe {
            libc::signal(sig, on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t);
        }
    }
}

fn ksm_value(k: &str) -> u64 {
    std::fs::read_to_string(format!("{KSM}/{k}")).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// CPU time of the ksmd kernel thread, in seconds.
fn ksmd_cpu() -> f64 {
    let Ok(procs) = std::fs::read_dir("/proc") else { return 0.0 };
    for p in procs.flatten() {
        if std::fs::read_to_string(p.path().join("comm")).map(|c| c.trim() == "ksmd").unwrap_or(false) {
            if let Ok(stat) = std::fs::read_to_string(p.path().join("stat")) {
                let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
                let f: Vec<&str> = rest.split_whitespace().collect();
                let ticks: f64 = f.get(11).and_then(|s| s.parse().ok()).unwrap_or(0.0) + f.get(12).and_then(|s| s.parse().ok()).unwrap_or(0.0);
                return ticks / CLK_TCK;
            }
        }
    }
    0.0
}

/// `sysconf(_SC_CLK_TCK)`: Linux reports 100 to user space on every
/// configuration.
const CLK_TCK: f64 = 100.0;

/// One sample.
#[derive(Clone, Debug)]
struct Sample {
    t: f64,
    instances: usize,
    host_mib: f64,
    pss_mib: f64,
    attributed_mib: f64,
    ksm_sharing: u64,
}

/// What one configuration gave.
struct Outcome {
    config: Config,
    samples: Vec<Sample>,
    ksm_cpu_s: f64,
    ksm_settings: Option<(String, String)>,
    pool_mib: f64,
    pool_verify_ms: Option<f64>,
    alive: usize,
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn run_config(c: Config, images: &[PathBuf], o: &MemoryOpts) -> Result<Outcome> {
    let tender = crate::host::tender_binary()?;
    // Let memory freed by the previous configuration settle.
    std::thread::sleep(Duration::from_millis(1500));
    let baseline = meminfo_used_kib();
    // A fresh directory with a random name, made mode 0700 (tempfile's
    // O_EXCL mkdir), not a predictable name another user could claim first.
    let scratch = tempfile::Builder::new().prefix("shoal-pool-bench-").tempdir_in(if Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" })?;
    let pool_dir = scratch.path().to_path_buf();
    // The pool fills as versions arrive: each image's libraries are added
    // just before its first instance starts (as `shoal serve` adds them at
    // deploy and `shoal pool add` before a first run), so a sample counts
    // the pool files of the versions launched so far, not all eight from
    // the first instance on.
    let pool = (c.mode == "pool").then(|| Pool::new(&pool_dir));
    let mut pool_kib = 0;
    let mut pool_verify_ms = None;
    if pool.is_some() {
        // How long one instance's check of its pool pages takes, measured
        // in a pool of its own so the run's pool starts empty.
        let probe = tempfile::Builder::new().prefix("shoal-pool-probe-").tempdir_in(scratch.path().parent().unwrap_or(Path::new("/tmp")))?;
        let probe_pool = Pool::new(probe.path());
        probe_pool.add(&images[0])?;
        let image = shoal_loader::Image::open(&images[0])?;
        let (cmp, hash, bytes) = shoal_loader::pool::verify_cost(&probe_pool, &image)?;
        pool_verify_ms = Some(cmp.as_secs_f64() * 1e3);
        drop(probe);
        say(
            o.json,
            &format!(
                "pool: filled as the versions start; verifying one instance's {:.2} MiB of pool pages: {:.2} ms by comparison with the image (SHA-256 would take {:.2} ms)",
                bytes as f64 / 1048576.0,
                cmp.as_secs_f64() * 1e3,
                hash.as_secs_f64() * 1e3
            ),
        );
    }
    let ksm = if c.mode == "ksm" { Some(KsmGuard::on()?) } else { None };
    let ksm_settings = ksm.as_ref().map(|k| (k.setting("pages_to_scan"), k.setting("sleep_millisecs")));
    if let Some((pages, sleep)) = &ksm_settings {
        say(o.json, &format!("KSM on for {}: pages_to_scan={pages}, sleep_millisecs={sleep} (the kernel's settings, restored afterwards)", c.name));
    }
    let ksm_cpu0 = ksmd_cpu();
    let settle = o.settle.unwrap_or(o.interval);
    let total = o.interval * (images.len() as f64 - 1.0) + settle;
    let logs = o.out.join("logs");
    std::fs::create_dir_all(&logs)?;
    let mut children: Vec<Child> = Vec::new();
    let mut samples = Vec::new();
    let t0 = Instant::now();
    let pool_dir_s = pool_dir.to_string_lossy().to_string();
    let result = (|| -> Result<()> {
        let mut next_sample = 0.0;
        loop {
            let t = t0.elapsed().as_secs_f64();
            while children.len() < images.len() && t >= o.interval * children.len() as f64 {
                let img = &images[children.len()];
                if let Some(pool) = &pool {
                    pool.add(img)?;
                    pool_kib = pool.list()?.iter().map(|e| e.bytes).sum::<u64>() / 1024;
                }
                let log = std::fs::File::create(logs.join(format!("{}-{}.log", c.name, children.len())))?;
                let mut cmd = Command::new(&tender);
                cmd.args(["--tender", &o.tender, "--mem", &o.mem, "--mem-mode", c.mode]);
                if !o.supervised {
                    cmd.arg("--single-process");
                }
                cmd.arg(img);
                if o.workload > 0 {
                    cmd.arg("--").arg(format!("work={}", o.workload));
                }
                if c.mode == "pool" {
                    cmd.env("SHOAL_POOL_DIR", &pool_dir);
                }
                children
                    .push(cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log).spawn().with_context(|| format!("cannot start {}", tender.display()))?);
            }
            if t >= next_sample {
                let (mut pss, mut pool_pss) = (0, 0);
                for ch in &children {
                    for p in tree(ch.id()) {
                        let (a, b) = pss_split_kib(p, (c.mode == "pool").then_some(pool_dir_s.as_str()));
                        pss += a;
                        pool_pss += b;
                    }
                }
                let attributed = pss - pool_pss + if c.mode == "pool" { pool_kib } else { 0 };
                samples.push(Sample {
                    t,
                    instances: children.len(),
                    host_mib: mib(meminfo_used_kib().saturating_sub(baseline)),
                    pss_mib: mib(pss),
                    attributed_mib: mib(attributed),
                    ksm_sharing: ksm_value("pages_sharing"),
                });
                next_sample += 0.5;
            }
            if t >= total {
                break;
            }
            if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
                bail!("interrupted: the instances were stopped and KSM's settings restored");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    })();
    let mut alive = 0;
    for ch in &mut children {
        if matches!(ch.try_wait(), Ok(None)) {
            alive += 1;
        }
        let _ = ch.kill();
        let _ = ch.wait();
    }
    let ksm_cpu_s = ksmd_cpu() - ksm_cpu0;
    drop(ksm);
    drop(scratch);
    result?;
    Ok(Outcome { config: c, samples, ksm_cpu_s, ksm_settings, pool_mib: mib(pool_kib), pool_verify_ms, alive })
}

/// The last non-empty line of a configuration's first instance log: why
/// its instances stopped (logs are written by `run_config`).
fn first_log_line(out: &Path, config: &str) -> String {
    let log = out.join("logs").join(format!("{config}-0.log"));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    match text.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(l) => format!("first instance: {}", l.trim()),
        None => format!("its log {} is empty", log.display()),
    }
}

// ---------------------------------------------------------------- output

/// The memory of each configuration's instances over time, as
/// OUT/memory.svg and .png; a plot that cannot be drawn is a warning.
fn plot(path: &Path, outcomes: &[Outcome], title: &str) {
    let lines: Vec<Line> =
        outcomes.iter().map(|o| Line { name: o.config.name.to_string(), points: o.samples.iter().map(|p| (p.t, p.attributed_mib)).collect() }).collect();
    let frame = Frame { title, x_desc: "time (s)", y_desc: "memory of the instances (MiB)", log_x: false, log_y: false };
    if let Err(e) = plot::lines(path, &frame, &lines) {
        eprintln!("shoal bench: warning: {e}");
    }
}

/// The mean memory attributed over the whole run (what "after the same
/// time" compares: KSM configurations pay a peak at every launch until the
/// scanner catches up).
fn mean_of(o: &Outcome) -> f64 {
    if o.samples.is_empty() {
        return 0.0;
    }
    o.samples.iter().map(|s| s.attributed_mib).sum::<f64>() / o.samples.len() as f64
}

fn final_of(o: &Outcome) -> (f64, f64) {
    // The mean of the last two samples smooths the 500 ms sampling.
    let n = o.samples.len();
    let last = &o.samples[n.saturating_sub(2)..];
    let a = last.iter().map(|s| s.attributed_mib).sum::<f64>() / last.len() as f64;
    let h = last.iter().map(|s| s.host_mib).sum::<f64>() / last.len() as f64;
    (a, h)
}

pub fn memory(o: MemoryOpts) -> Result<()> {
    if o.interval <= 0.0 {
        bail!("--interval must be positive");
    }
    let configs: Vec<Config> =
        if o.only.is_empty() {
            CONFIGS.to_vec()
        } else {
            let mut v = Vec::new();
            for n in &o.only {
                v.push(*CONFIGS.iter().find(|c| c.name == n).with_context(|| {
                    format!("--only {n}: unknown configuration (known: {})", CONFIGS.iter().map(|c| c.name).collect::<Vec<_>>().join(", "))
                })?);
            }
            v
        };
    std::fs::create_dir_all(&o.out).with_context(|| format!("cannot create --out {}", o.out.display()))?;
    let built = build_all(o.json, &o.out.join("images"), &configs)?;
    let versions = &built.versions;
    let mut outcomes = Vec::new();
    // (configuration, why it failed): in the output beside the results.
    let mut failed: Vec<(&str, String)> = Vec::new();
    // Why nothing was measured, if so: the policies that failed to build
    // (once each, not once per configuration) and the runs that failed.
    let mut reasons: Vec<String> = built.failures.clone();
    // From here on Ctrl-C stops the run through its normal end (the builds
    // above had nothing to restore).
    catch_interrupts();
    // Each configuration takes 8 × --interval and the settling time.
    let progress = Progress::new("bench memory", configs.len() as u64, o.json);
    for c in &configs {
        progress.step();
        progress.doing(c.name);
        let Some(images) = built.images_of(c.policy).filter(|i| !i.is_empty()) else {
            failed.push((c.name, format!("policy {} cannot be built", c.policy)));
            continue;
        };
        say(o.json, &format!("{}: launching 8 instances, one every {} s…", c.name, o.interval));
        let why = match run_config(*c, images, &o) {
            // Every instance gone before the end: the samples are of
            // nothing, so the configuration failed.
            Ok(oc) if oc.alive == 0 => format!("no instance was still running at the end ({})", first_log_line(&o.out, c.name)),
            Ok(oc) => {
                outcomes.push(oc);
                continue;
            }
            Err(e) if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) => return Err(e),
            Err(e) => format!("{e:#}"),
        };
        eprintln!("shoal bench: warning: {} failed: {why}", c.name);
        reasons.push(format!("{}: {why}", c.name));
        failed.push((c.name, why));
    }
    drop(progress);
    if outcomes.is_empty() {
        return Err(crate::BenchError::nothing_measured("memory", &reasons).into());
    }
    // CSV
    let mut csv = String::from("config,t_s,instances,host_mib,pss_mib,attributed_mib,ksm_pages_sharing\n");
    for oc in &outcomes {
        for s in &oc.samples {
            csv += &format!("{},{:.2},{},{:.2},{:.2},{:.2},{}\n", oc.config.name, s.t, s.instances, s.host_mib, s.pss_mib, s.attributed_mib, s.ksm_sharing);
        }
    }
    let csv_path = o.out.join("memory.csv");
    std::fs::write(&csv_path, csv)?;
    let svg_path = o.out.join("memory.svg");
    let tender_desc = match (o.tender.as_str(), o.supervised) {
        ("spt", true) => "spt, with waiting parents",
        ("spt", false) => "spt, one process each",
        (t, _) => t,
    };
    let (oldest, newest) = (versions.first().map_or("?", |v| v.as_str()), versions.last().map_or("?", |v| v.as_str()));
    plot(&svg_path, &outcomes, &format!("8 idle instances, SQLite {oldest} … {newest}, one every {} s ({tender_desc})", o.interval));
    let final_named = |n: &str| outcomes.iter().find(|x| x.config.name == n).map(|x| final_of(x).0);
    let def = final_named("default");
    if o.json {
        let failed_json: serde_json::Map<String, serde_json::Value> = failed.iter().map(|(n, w)| (n.to_string(), json!(w))).collect();
        let mut m = serde_json::Map::new();
        for oc in &outcomes {
            let (a, h) = final_of(oc);
            m.insert(
                oc.config.name.to_string(),
                json!({
                    "final_mib": a,
                    "host_mib": h,
                    "pss_mib": oc.samples.last().map(|s| s.pss_mib),
                    "pool_mib": oc.pool_mib,
                    "pool_verify_ms": oc.pool_verify_ms,
                    "policy": oc.config.policy,
                    "mode": oc.config.mode,
                    "mean_mib": mean_of(oc),
                    "default_over_this": def.map(|d| d / a),
                    "baseline": oc.config.baseline,
                    "baseline_over_this": final_named(oc.config.baseline).map(|d| d / a),
                    "paper_default_over_this": oc.config.paper_vs_default,
                    "ksmd_cpu_s": oc.ksm_cpu_s,
                    "ksm_pages_to_scan_sleep_ms": oc.ksm_settings,
                    "instances_alive_at_end": oc.alive,
                }),
            );
        }
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"interval_s": o.interval, "tender": o.tender, "supervised": o.supervised, "sqlite_versions": versions, "csv": csv_path, "plot": svg_path, "configs": m, "failed": failed_json})
            )?
        );
        return Ok(());
    }
    let work = if o.workload > 0 { format!(", each after a workload of {} rows", o.workload) } else { String::new() };
    println!("shoal bench memory: 8 idle instances (SQLite {}){work}, one every {} s, tender {tender_desc}", versions.join(", "), o.interval);
    println!(
        "{:<13} {:>11} {:>10} {:>10} {:>10} {:>14} {:>14} {:>14} {:>10} {:>6}",
        "config", "final MiB", "mean MiB", "host MiB", "pool MiB", "baseline", "baseline/this", "paper", "ksmd CPU", "alive"
    );
    for oc in &outcomes {
        let (a, h) = final_of(oc);
        println!(
            "{:<13} {:>11.1} {:>10.1} {:>10.1} {:>10.1} {:>14} {:>14} {:>14} {:>9.2}s {:>6}",
            oc.config.name,
            a,
            mean_of(oc),
            h,
            oc.pool_mib,
            oc.config.baseline,
            final_named(oc.config.baseline).map(|d| format!("{:.2}", d / a)).unwrap_or("-".into()),
            oc.config.paper_vs_default.map(|r| format!("{r:.2}")).unwrap_or("-".into()),
            oc.ksm_cpu_s,
            oc.alive
        );
    }
    for (n, why) in &failed {
        println!("{n:<13} FAILED: {why}");
    }
    println!("final MiB: the instances' PSS (tenders included; for pool, pool mappings replaced by the whole pool files) at the end; mean MiB: the same averaged over the run; host MiB: MemTotal−MemAvailable above the memory baseline.");
    println!("Spacer paper Fig. 8: Spacer-Δ+KSM 2.8× below Default (+KSM), 2.5× below DCE; the loader+pool 1.4× above Spacer-Δ+KSM (2.0× below Default); with ASLR, Spacer-Δ+KSM 2× below Default and 1.8× below DCE.");
    println!("CSV: {}  plot: {}", csv_path.display(), svg_path.display());
    Ok(())
}

// ---------------------------------------------------------------- sizes

/// One policy's disk use: its name, the 8 images' bytes, their bytes
/// without the pooled pages, the distinct pool files' bytes and count.
type SizeRow = (String, u64, u64, u64, usize);

/// A row `bench size` prints: configuration, images, pool (None: no
/// pool), total in MiB, default's and dce's total over this one, and for a
/// pool row the ksm row's total over this one.
type SizeLine = (String, f64, Option<f64>, f64, f64, f64, Option<f64>);

/// The rows `bench size` prints.
fn size_table(rows: &[SizeRow]) -> Vec<SizeLine> {
    let get = |p: &str| rows.iter().find(|r| r.0 == p).map(|r| r.1 as f64).unwrap_or(f64::NAN);
    let (def, dce) = (get("default"), get("dce"));
    let m = |b: f64| b / 1048576.0;
    let mut out = Vec::new();
    for (p, total, stripped, pool, _) in rows {
        let name = if matches!(p.as_str(), "default" | "dce" | "default-aslr" | "dce-aslr") { p.clone() } else { format!("{p}+ksm") };
        let tot = *total as f64;
        out.push((name, m(tot), None, m(tot), def / tot, dce / tot, None));
        if p == "delta" || p == "aslr" {
            let t = (stripped + pool) as f64;
            out.push((format!("{p}+pool"), m(*stripped as f64), Some(m(*pool as f64)), m(t), def / t, dce / t, Some(tot / t)));
        }
    }
    out
}

/// Writes `size.csv` (the printed table's rows) and `size.svg` (the total
/// MiB per configuration) into `out`.
fn write_size_csv_and_plot(out: &Path, rows: &[SizeRow]) {
    let table = size_table(rows);
    let opt = |x: &Option<f64>| x.map(|x| format!("{x:.2}")).unwrap_or_default();
    let lines: Vec<String> = table.iter().map(|(n, img, pool, tot, d, c, k)| format!("{n},{img:.2},{},{tot:.2},{d:.2},{c:.2},{}", opt(pool), opt(k))).collect();
    let header = "config,images_mib,pool_mib,total_mib,default_over_this,dce_over_this,ksm_over_pool";
    let cats: Vec<String> = table.iter().map(|r| r.0.clone()).collect();
    let series = vec![plot::BarSeries { name: "images + pool".into(), values: table.iter().map(|r| Some((r.3, 0.0))).collect() }];
    let frame = Frame { title: "Disk use of the 8 idle images", x_desc: "configuration", y_desc: "MiB", log_x: false, log_y: false };
    crate::write_csv_and_bars("size", out, header, &lines, &frame, &cats, &series);
}

/// `shoal bench size`: image sizes per configuration (Fig. 9).
pub fn size(json_out: bool, out: PathBuf) -> Result<()> {
    let configs: Vec<Config> = ["default", "dce", "delta", "default-aslr", "dce-aslr", "aslr"]
        .iter()
        .map(|p| Config { name: p, policy: p, mode: "copy", paper_vs_default: None, baseline: "default" })
        .collect();
    let built = build_all(json_out, &out.join("images"), &configs)?;
    if built.images.is_empty() {
        return Err(crate::BenchError::nothing_measured("size", &built.failures).into());
    }
    let mut rows = Vec::new();
    for (policy, images) in &built.images {
        let mut total = 0u64;
        let mut stripped = 0u64;
        let mut pool_files = std::collections::BTreeMap::new();
        for img in images {
            let size = std::fs::metadata(img)?.len();
            total += size;
            let m = shoal_manifest::Manifest::read(&shoal_manifest::Manifest::path_for(img))?;
            let libs = pool_libs(&m);
            let pooled: u64 = libs.iter().map(|l| l.size()).sum();
            stripped += size.saturating_sub(pooled);
            for l in libs {
                pool_files.insert(l.file_name.clone(), l.size());
            }
        }
        let pool: u64 = pool_files.values().sum();
        rows.push((policy.clone(), total, stripped, pool, pool_files.len()));
    }
    let get = |p: &str| rows.iter().find(|r| r.0 == p).map(|r| r.1 as f64).unwrap_or(f64::NAN);
    let (def, dce) = (get("default"), get("dce"));
    let m = |b: u64| b as f64 / 1048576.0;
    write_size_csv_and_plot(&out, &rows);
    if json_out {
        let mut js = serde_json::Map::new();
        for (p, total, stripped, pool, files) in &rows {
            let name = if matches!(p.as_str(), "default" | "dce" | "default-aslr" | "dce-aslr") { p.clone() } else { format!("{p}+ksm") };
            js.insert(name, json!({"images_mib": m(*total)}));
            if p == "delta" || p == "aslr" {
                js.insert(format!("{p}+pool"), json!({"images_mib": m(*stripped), "pool_mib": m(*pool), "pool_files": files, "images_plus_pool_mib": m(stripped + pool),
                    "default_over_this": def / (stripped + pool) as f64, "dce_over_this": dce / (stripped + pool) as f64, "ksm_over_this": *total as f64 / (stripped + pool) as f64}));
            }
        }
        let failed: Vec<&String> = built.failures.iter().collect();
        println!("{}", serde_json::to_string_pretty(&json!({"configs": js, "failed": failed}))?);
        return Ok(());
    }
    println!("shoal bench size: 8 idle images (one per SQLite version), disk use per configuration (the Spacer paper's Fig. 9)");
    let mut table = Table::new(["config", "images MiB", "pool MiB", "total MiB", "default/this", "dce/this", "ksm/pool"]);
    for (p, total, stripped, pool, _) in &rows {
        let name = if matches!(p.as_str(), "default" | "dce" | "default-aslr" | "dce-aslr") { p.clone() } else { format!("{p}+ksm") };
        let tot = *total as f64;
        table.row([
            name,
            format!("{:.2}", m(*total)),
            "-".into(),
            format!("{:.2}", m(*total)),
            format!("{:.2}", def / tot),
            format!("{:.2}", dce / tot),
            String::new(),
        ]);
        if p == "delta" || p == "aslr" {
            let t = (stripped + pool) as f64;
            table.row([
                format!("{p}+pool"),
                format!("{:.2}", m(*stripped)),
                format!("{:.2}", m(*pool)),
                format!("{:.2}", t / 1048576.0),
                format!("{:.2}", def / t),
                format!("{:.2}", dce / t),
                format!("{:.2}", tot / t),
            ]);
        }
    }
    print!("{}", table.text());
    for why in &built.failures {
        println!("FAILED: {why}");
    }
    println!("pool: images without their pooled pages (what a pool-aware build would ship) plus the distinct pool files.");
    println!("Spacer paper Fig. 9: Spacer-Δ(+KSM) 1.3× above Default, 1.6× above DCE; with the pool 3.6× below Default, 3× below DCE, 4.8× below Spacer-Δ+KSM (ASLR: 2.6×, 2.2×, 3.9×).");
    Ok(())
}

#[cfg(test)]
mod size_tests {
    use super::*;

    #[test]
    fn writes_size_csv_and_plot() {
        let dir = tempfile::tempdir().unwrap();
        let mib = 1048576;
        let rows = vec![
            ("default".to_string(), 8 * mib, 8 * mib, 0, 0),
            ("dce".to_string(), 4 * mib, 4 * mib, 0, 0),
            ("delta".to_string(), 16 * mib, 2 * mib, 2 * mib, 3),
        ];
        write_size_csv_and_plot(dir.path(), &rows);
        let csv = std::fs::read_to_string(dir.path().join("size.csv")).unwrap();
        assert_eq!(
            csv,
            "config,images_mib,pool_mib,total_mib,default_over_this,dce_over_this,ksm_over_pool\n\
             default,8.00,,8.00,1.00,0.50,\n\
             dce,4.00,,4.00,2.00,1.00,\n\
             delta+ksm,16.00,,16.00,0.50,0.25,\n\
             delta+pool,2.00,2.00,4.00,2.00,1.00,4.00\n"
        );
        assert!(dir.path().join("size.svg").is_file());
    }
}
