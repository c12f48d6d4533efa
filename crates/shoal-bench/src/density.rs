//! `shoal bench density`: how many idle instances fit on the host (the
//! FaaS paper's Fig. 7 measures the same per sandbox through its FaaS
//! harness). N instances of one small server — the `noop` function of
//! apps/functions, each with its own listening socket handed over as
//! descriptor 3, answered once so it is warm — are started on spt and hvt,
//! with memory modes `copy` and `pool`, beside N native processes of the
//! same source; then the host memory they take is read two ways: the drop
//! of MemAvailable (everything the host spends, page tables and KVM's
//! structures included) and the sum of the instances' PSS (pool pages
//! counted once, as the pool files occupy RAM in /dev/shm whether mapped
//! or not). Each is shown per instance.

use crate::progress::Progress;
use crate::sample::{meminfo_used_kib, pss_split_kib, tree};
use crate::BenchError;
use anyhow::{bail, Context, Result};
use serde_json::json;
use shoal_loader::pool::Pool;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The configurations, in the order they run.
const CONFIGS: [&str; 5] = ["process", "spt+copy", "spt+pool", "hvt+copy", "hvt+pool"];

/// The goal for an idle spt instance with `pool`, in KiB.
const GOAL_KIB: f64 = 256.0;

/// What one configuration measured.
struct Row {
    config: &'static str,
    count: usize,
    host_kib: u64,
    pss_kib: u64,
    pte_kib: u64,
    pool_kib: u64,
    start_ms: f64,
}

/// Writes `density.csv` (one row per configuration, per-instance KiB) and
/// `density.svg`/`.png` (PSS and page tables per instance) into `o.out`;
/// a failure is a warning, the table is still printed.
fn write_csv_and_plot(o: &DensityOpts, rows: &[Row]) {
    let per = |kib: u64, n: usize| kib as f64 / n as f64;
    let warn = |what: &str, e: &dyn std::fmt::Display| eprintln!("bench density: no {what}: {e}");
    if let Err(e) = std::fs::create_dir_all(&o.out) {
        return warn("CSV or plot", &e);
    }
    let lines: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{},{},{:.1},{:.1},{:.1},{},{:.2}",
                r.config,
                r.count,
                per(r.host_kib, r.count),
                per(r.pss_kib, r.count),
                per(r.pte_kib, r.count),
                r.pool_kib,
                r.start_ms
            )
        })
        .collect();
    let header = "config,instances,host_kib_per_instance,pss_kib_per_instance,page_tables_kib_per_instance,pool_kib,start_ms_per_instance";
    if let Err(e) = crate::table::write_csv_lines(&o.out.join("density.csv"), header, &lines) {
        warn("CSV", &e);
    }
    let cats: Vec<String> = rows.iter().map(|r| r.config.to_string()).collect();
    let series = vec![
        crate::plot::BarSeries { name: "PSS".into(), values: rows.iter().map(|r| Some((per(r.pss_kib, r.count), 0.0))).collect() },
        crate::plot::BarSeries { name: "page tables".into(), values: rows.iter().map(|r| Some((per(r.pte_kib, r.count), 0.0))).collect() },
    ];
    let title = format!("Host memory per idle instance ({} instances each)", o.count);
    let frame = crate::plot::Frame { title: &title, x_desc: "configuration", y_desc: "KiB per instance", log_x: false, log_y: false };
    if let Err(e) = crate::plot::bars(&o.out.join("density.svg"), &frame, &cats, &series) {
        warn("plot", &e);
    }
}

/// Options of `shoal bench density`.
pub struct DensityOpts {
    /// Instances per configuration.
    pub count: usize,
    /// Guest memory of each instance.
    pub mem: String,
    /// Only these configurations.
    pub only: Vec<String>,
    /// JSON instead of a table.
    pub json: bool,
    /// Directory for the CSV and the plot.
    pub out: std::path::PathBuf,
}

/// One GET / on `addr`; the instance is ready (and warm) when it answers 200.
fn get(addr: SocketAddr) -> Result<()> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)?;
    if !answer.starts_with(b"HTTP/1.1 200") {
        bail!("the instance on {addr} answered {:?}", String::from_utf8_lossy(&answer[..answer.len().min(60)]));
    }
    Ok(())
}

/// Puts `listener` at descriptor 3 of the child and kills the child with the bench.
fn hand_over(cmd: &mut Command, listener: &TcpListener) {
    let fd = listener.as_raw_fd();
    // SAFETY: only async-signal-safe calls (prctl, dup2, fcntl) run between
    // fork and exec; nothing is allocated.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let r = if fd == 3 { libc::fcntl(3, libc::F_SETFD, 0) } else { libc::dup2(fd, 3) };
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Kills and reaps every child.
fn stop_all(children: &mut Vec<Child>) {
    for c in children.iter_mut() {
        let _ = c.kill();
    }
    for c in children.iter_mut() {
        let _ = c.wait();
    }
    children.clear();
}

fn run_config(config: &'static str, o: &DensityOpts, image: &Path, native: &Path, tender: &Path) -> Result<Row> {
    let (tender_kind, mode) = config.split_once('+').unwrap_or((config, ""));
    let scratch = tempfile::Builder::new().prefix("shoal-density-").tempdir_in(if Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" })?;
    let mut pool_kib = 0;
    if mode == "pool" {
        let pool = Pool::new(scratch.path());
        pool.add(image).context("cannot add the image to the bench's pool")?;
        pool_kib = pool.list()?.iter().map(|e| e.bytes).sum::<u64>() / 1024;
    }
    let pool_dir = scratch.path().to_string_lossy().to_string();
    std::thread::sleep(Duration::from_millis(500));
    let baseline = meminfo_used_kib();
    let mut children = Vec::with_capacity(o.count);
    let t0 = Instant::now();
    let started = (|| -> Result<()> {
        for i in 0..o.count {
            let listener = TcpListener::bind("127.0.0.1:0").context("cannot open a listening socket")?;
            let addr = listener.local_addr()?;
            let mut cmd = if tender_kind == "process" {
                let mut c = Command::new(native);
                c.env_clear().env("LISTEN_FD", "3");
                c
            } else {
                let mut c = Command::new(tender);
                c.env_clear().args(["--tender", tender_kind, "--mem", &o.mem, "--mem-mode", mode, "--single-process", "--listen-fd", "3"]);
                c.arg("-e").arg(format!("PORT={}", addr.port())).arg(image);
                if mode == "pool" {
                    c.env("SHOAL_POOL_DIR", scratch.path());
                }
                c
            };
            hand_over(&mut cmd, &listener);
            let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().with_context(|| format!("cannot start instance {i}"))?;
            children.push(child);
            drop(listener);
            if let Err(e) = get(addr) {
                let mut err = String::new();
                if let Some(mut s) = children.last_mut().and_then(|c| c.stderr.take()) {
                    let _ = children.last_mut().map(|c| c.kill());
                    let _ = s.read_to_string(&mut err);
                }
                bail!("instance {i} did not answer: {e:#} {}", err.trim());
            }
        }
        Ok(())
    })();
    let start_ms = t0.elapsed().as_secs_f64() * 1e3 / o.count.max(1) as f64;
    if let Err(e) = started {
        stop_all(&mut children);
        return Err(e);
    }
    // Let the instances settle into their idle wait (and the page cache).
    std::thread::sleep(Duration::from_secs(2));
    let host_kib = meminfo_used_kib().saturating_sub(baseline);
    let (mut pss, mut pool_pss, mut pte_kib) = (0, 0, 0);
    for c in &children {
        for p in tree(c.id()) {
            let (a, b) = pss_split_kib(p, (mode == "pool").then_some(pool_dir.as_str()));
            pss += a;
            pool_pss += b;
            pte_kib += vm_pte_kib(p);
        }
    }
    stop_all(&mut children);
    let pss_kib = pss - pool_pss + pool_kib;
    Ok(Row { config, count: o.count, host_kib, pss_kib, pte_kib, pool_kib, start_ms })
}

/// A process's page tables (`VmPTE`), which PSS does not count, in KiB.
fn vm_pte_kib(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix("VmPTE:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0)
}

/// Runs `shoal bench density`.
pub fn density(o: DensityOpts) -> Result<()> {
    if o.count == 0 {
        bail!("--count must be at least 1");
    }
    shoal_tender::parse_size(&o.mem).map_err(|e| anyhow::anyhow!("--mem {}: {e}", o.mem))?;
    for c in &o.only {
        if !CONFIGS.contains(&c.as_str()) {
            bail!("--only {c}: no such configuration (there are {})", CONFIGS.join(", "));
        }
    }
    let paths = shoal_toolchain::Paths::discover()?;
    let tmp = tempfile::tempdir()?;
    let fns = paths.home.join("apps/functions");
    let http = fns.join("fn_http.c").display().to_string();
    let (image, native) = crate::host::build_pair(&fns.join("noop.c"), tmp.path(), &["-O2", &http, "-lpthread"])?;
    let tender = crate::host::tender_binary()?;
    let kvm = crate::host::kvm_usable();
    let mut rows = Vec::new();
    // Configurations this machine cannot run, and those that failed.
    let (mut unavailable, mut failed) = (Vec::new(), Vec::new());
    // Starting and sampling --count instances per configuration.
    let progress = Progress::new("bench density", CONFIGS.len() as u64, o.json);
    for config in CONFIGS {
        progress.step();
        if !o.only.is_empty() && !o.only.iter().any(|c| c == config) {
            continue;
        }
        progress.doing(config);
        if config.starts_with("hvt") {
            if let Err(why) = &kvm {
                unavailable.push(format!("{config}: {why}"));
                continue;
            }
        }
        if !o.json {
            eprintln!("bench density: {config}: starting {} instances", o.count);
        }
        match run_config(config, &o, &image, &native, &tender) {
            Ok(r) => rows.push(r),
            Err(e) => failed.push(format!("{config}: {e:#}")),
        }
    }
    drop(progress);
    for s in &unavailable {
        eprintln!("bench density: unavailable here: {s}");
    }
    for s in &failed {
        eprintln!("bench density: FAILED: {s}");
    }
    if rows.is_empty() {
        return Err(BenchError::nothing_measured("density", &[failed, unavailable].concat()).into());
    }
    let per = |kib: u64, n: usize| kib as f64 / n as f64;
    write_csv_and_plot(&o, &rows);
    if o.json {
        let results: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({
                    "config": r.config, "instances": r.count,
                    "host_kib": r.host_kib, "pss_kib": r.pss_kib, "page_tables_kib": r.pte_kib, "pool_kib": r.pool_kib,
                    "host_kib_per_instance": per(r.host_kib, r.count),
                    "pss_kib_per_instance": per(r.pss_kib, r.count),
                    "pss_and_page_tables_kib_per_instance": per(r.pss_kib + r.pte_kib, r.count),
                    "start_ms_per_instance": r.start_ms,
                })
            })
            .collect();
        let doc = json!({"count": o.count, "mem": o.mem, "goal_spt_pool_kib": GOAL_KIB, "binaries": crate::host::tender_linking(), "results": results, "unavailable": unavailable, "failed": failed});
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!("shoal bench density: {} idle instances of apps/functions/noop each (guest memory {}), warm (answered once)", o.count, o.mem);
    println!("binaries: {}", crate::host::tender_linking());
    println!(
        "{:<10} {:>14} {:>14} {:>14} {:>18} {:>10} {:>14}",
        "config", "host KiB/inst", "PSS KiB/inst", "PTE KiB/inst", "PSS+PTE KiB/inst", "pool KiB", "start ms/inst"
    );
    for r in &rows {
        println!(
            "{:<10} {:>14.0} {:>14.0} {:>14.0} {:>18.0} {:>10} {:>14.2}",
            r.config,
            per(r.host_kib, r.count),
            per(r.pss_kib, r.count),
            per(r.pte_kib, r.count),
            per(r.pss_kib + r.pte_kib, r.count),
            r.pool_kib,
            r.start_ms
        );
    }
    if let Some(r) = rows.iter().find(|r| r.config == "spt+pool") {
        let v = per(r.pss_kib + r.pte_kib, r.count);
        println!(
            "target: an idle spt instance with pool in at most {GOAL_KIB:.0} KiB (PSS + page tables): {v:.0} KiB measured ({})",
            if v <= GOAL_KIB { "met" } else { "not met" }
        );
    }
    println!("(host: the drop of MemAvailable, which anything else running on the machine disturbs; PSS: summed over the instances' processes, pool pages once; PTE: their page tables, which PSS leaves out. The FaaS paper's Fig. 7: runc 3.9 MiB, gVisor 24.7, Nanos 23.8, OSv 31.4, Linux microVM 59.9 MiB per idle function.)");
    Ok(())
}
