//! `shoal bench boot`: start-up time of a hello-world program (the
//! FaaS paper's cold start): from the start of the command to the program's
//! first stdout byte and to its exit, on shoal spt, shoal hvt (both through
//! `shoal run` and through the lean `shoal-tender` command), a native
//! process, runc and runsc (gVisor, ptrace platform), side by side.
//!
//! The `floor` rows run `apps/bench/floor.c`, a static musl
//! program that does only what any spt-style sandbox must around the
//! program's first output — exec, reserve guest memory, read the image's
//! segments into it, install spt's own seccomp filter, write, exit — and
//! `floor + ns` the same in a forked child in new mount, IPC and PID
//! namespaces (root only): the cheapest sandboxed start this host allows,
//! beside which shoal's own rows show what shoal spends above it.
//!
//! Each round runs every available system once (the order rotates from round
//! to round); a system that cannot run here (no `/dev/kvm`, runtime missing,
//! not root) is reported as unavailable with the reason, a failing run as
//! failed with its error, and the others go on. Times are wall-clock (`Instant`) around spawning the command
//! with stdout piped: first byte = the first `read` that returns data, exit =
//! `wait` returning.

use crate::host::{build_pair, effective_uid, find_program};
use crate::progress::Progress;
use crate::stats::{median, p95};
use crate::table::Table;
use crate::Missing;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use shoal_serve::bundle::{self, BundleError, Network, Process};
use std::fs::{self, File};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A run that takes longer than this is killed (and its container deleted).
const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// What hello prints first (`apps/hello.c`).
const EXPECTED: &str = "hello, world\n";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Spt,
    Hvt,
    LeanSpt,
    LeanHvt,
    /// shoal-tender spt started as an unprivileged user: the clean exec
    /// and the filter, without what only a root start adds (namespaces,
    /// empty root, dropping to nobody): shows what that confinement costs.
    LeanSptUser,
    Native,
    /// apps/bench/floor.c: exec, load, filter, write, exit.
    Floor,
    /// The floor in new mount, IPC and PID namespaces (a forked child).
    FloorNs,
    Runc,
    Runsc,
}

impl Kind {
    const ALL: [Kind; 10] =
        [Kind::Spt, Kind::Hvt, Kind::LeanSpt, Kind::LeanHvt, Kind::LeanSptUser, Kind::Native, Kind::Floor, Kind::FloorNs, Kind::Runc, Kind::Runsc];

    fn key(self) -> &'static str {
        match self {
            Kind::Spt => "spt",
            Kind::Hvt => "hvt",
            Kind::LeanSpt => "tender-spt",
            Kind::LeanHvt => "tender-hvt",
            Kind::LeanSptUser => "tender-spt-user",
            Kind::Native => "native",
            Kind::Floor => "floor",
            Kind::FloorNs => "floor-ns",
            Kind::Runc => "runc",
            Kind::Runsc => "runsc",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Spt => "shoal spt",
            Kind::Hvt => "shoal hvt",
            Kind::LeanSpt => "shoal-tender spt",
            Kind::LeanHvt => "shoal-tender hvt",
            Kind::LeanSptUser => "  spt, not root",
            Kind::Native => "native process",
            Kind::Floor => "floor",
            Kind::FloorNs => "floor + ns",
            Kind::Runc => "runc",
            Kind::Runsc => "runsc (ptrace)",
        }
    }
}

struct System {
    kind: Kind,
    /// The runtime's absolute path (runc, runsc).
    runtime: Option<PathBuf>,
    /// Why it has no measurement, once it has none.
    missing: Option<Missing>,
    first_ms: Vec<f64>,
    exit_ms: Vec<f64>,
    /// Minor page faults of each run (the command and the processes it
    /// waited for): page faults are expensive on this nested host.
    faults: Vec<f64>,
}

/// Deletes a container when dropped, whatever happened to its run.
struct Container {
    kind: Kind,
    runtime: PathBuf,
    id: String,
}

fn delete_container(kind: Kind, runtime: &Path, id: &str) {
    let mut cmd = Command::new(runtime);
    match kind {
        Kind::Runsc => cmd.args(["delete", "-force", id]),
        _ => cmd.args(["delete", "-f", id]),
    };
    let _ = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status();
}

impl Drop for Container {
    fn drop(&mut self) {
        delete_container(self.kind, &self.runtime, &self.id);
    }
}

/// An OCI bundle in `dir`: `rootfs/hello` (the static binary), no
/// terminal, read-only root, empty environment. The spec's own namespaces
/// stay (the new network namespace has only loopback).
fn make_bundle(runtime: &Path, dir: &Path, native: &Path) -> Result<(), BundleError> {
    let process = Process {
        args: vec!["/hello".into()],
        env: Vec::new(),
        files: vec![(native, "hello")],
        readonly_root: true,
        hostname: "shoal-bench",
        network: Network::Own,
    };
    bundle::make_bundle(runtime, dir, &process, |_| {})
}

struct Setup {
    shoal: PathBuf,
    /// `shoal-tender`, if it was built.
    tender: Option<PathBuf>,
    image: PathBuf,
    native: PathBuf,
    /// apps/bench/floor.c built static, and spt's filter for the image.
    floor: Option<(PathBuf, PathBuf)>,
    bundle: PathBuf,
    stderr_file: PathBuf,
}

/// One run: (ms to first stdout byte, ms to exit, minor page faults).
fn measure(sys: &System, s: &Setup, tag: &str) -> Result<(f64, f64, u64)> {
    let mut container = None;
    let mut cmd = match sys.kind {
        Kind::Spt | Kind::Hvt => {
            let mut c = Command::new(&s.shoal);
            c.args(["run", "--tender", sys.kind.key()]).arg(&s.image);
            c
        }
        Kind::LeanSpt | Kind::LeanHvt => {
            let mut c = Command::new(s.tender.as_ref().ok_or_else(|| anyhow!("shoal-tender is missing"))?);
            c.args(["--tender", if sys.kind == Kind::LeanSpt { "spt" } else { "hvt" }]).arg(&s.image);
            c
        }
        Kind::LeanSptUser => {
            use std::os::unix::process::CommandExt;
            // std switches user and group (and drops supplementary groups)
            // in the child before its exec: no extra program in the timing.
            let mut c = Command::new(s.tender.as_ref().ok_or_else(|| anyhow!("shoal-tender is missing"))?);
            c.uid(65534).gid(65534).args(["--tender", "spt"]).arg(&s.image);
            c
        }
        Kind::Native => {
            let mut c = Command::new(&s.native);
            c.env_clear();
            c
        }
        Kind::Floor | Kind::FloorNs => {
            let (floor, filter) = s.floor.as_ref().ok_or_else(|| anyhow!("the floor program is missing"))?;
            let mut c = Command::new(floor);
            c.env_clear().arg(&s.image).arg(filter);
            if sys.kind == Kind::FloorNs {
                c.arg("ns");
            }
            c
        }
        Kind::Runc | Kind::Runsc => {
            let runtime = sys.runtime.clone().ok_or_else(|| anyhow!("no runtime"))?;
            let id = format!("shoal-bench-boot-{}-{}-{tag}", std::process::id(), sys.kind.key());
            let mut c = Command::new(&runtime);
            if sys.kind == Kind::Runsc {
                c.args(["--platform=ptrace", "--network=none"]);
            }
            c.arg("run").arg("--bundle").arg(&s.bundle).arg(&id);
            container = Some(Container { kind: sys.kind, runtime, id });
            c
        }
    };
    let err = File::create(&s.stderr_file)?;
    // Its own process group, so that a hung run is killed with all its processes.
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(err).process_group(0);

    // The watchdog exists before the clock starts; it kills a hung run.
    let (pid_tx, pid_rx) = mpsc::channel::<u32>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let cleanup = container.as_ref().map(|c| (c.kind, c.runtime.clone(), c.id.clone()));
    let dog = std::thread::spawn(move || {
        let Ok(pid) = pid_rx.recv() else { return false };
        if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(RUN_TIMEOUT) {
            let group = format!("-{pid}");
            let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
            if let Some((kind, runtime, id)) = cleanup {
                delete_container(kind, &runtime, &id);
            }
            return true;
        }
        false
    });

    let t0 = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("cannot start {}", sys.kind.label()))?;
    let _ = pid_tx.send(child.id());
    let mut stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout pipe"))?;
    let mut buf = [0u8; 4096];
    let mut out = Vec::new();
    let mut first = None;
    loop {
        match stdout.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if first.is_none() {
                    first = Some(t0.elapsed());
                }
                out.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let (status, faults) = wait_with_faults(&child)?;
    let exit = t0.elapsed();
    let _ = done_tx.send(());
    let timed_out = dog.join().unwrap_or(false);
    drop(container);

    if timed_out {
        bail!("no exit within {} s (killed)", RUN_TIMEOUT.as_secs());
    }
    if !status.success() || !out.starts_with(EXPECTED.as_bytes()) {
        let err = fs::read_to_string(&s.stderr_file).unwrap_or_default();
        let last = err.lines().rev().find(|l| !l.trim().is_empty() && !l.contains("hello on stderr"));
        let first_line = String::from_utf8_lossy(&out).lines().next().unwrap_or("").to_string();
        bail!("{status}, stdout {first_line:?}{}", last.map(|l| format!(": {}", l.trim())).unwrap_or_default());
    }
    let first = first.ok_or_else(|| anyhow!("no output"))?;
    Ok((first.as_secs_f64() * 1e3, exit.as_secs_f64() * 1e3, faults))
}

/// Reaps `child` with wait4, for its exit status and its minor page
/// faults (its own and those of the descendants it waited for).
fn wait_with_faults(child: &std::process::Child) -> Result<(std::process::ExitStatus, u64)> {
    use std::os::unix::process::ExitStatusExt;
    let pid = child.id() as libc::pid_t;
    loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value to be overwritten.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 writes only the status and the rusage given; `pid`
        // is our own child, not reaped yet (std's Child is not waited on).
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            return Ok((std::process::ExitStatus::from_raw(status), ru.ru_minflt as u64));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e.into());
        }
    }
}

/// Why `kind` cannot run here, if it cannot (checked before any run).
fn unavailable(kind: Kind, runtime: Option<&Path>) -> Option<String> {
    match kind {
        Kind::Hvt | Kind::LeanHvt => match fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
            Ok(_) if kind == Kind::LeanHvt => crate::host::tender_binary().err().map(|e| e.to_string()),
            Ok(_) => None,
            Err(e) => Some(format!("/dev/kvm is not usable ({e})")),
        },
        Kind::Runc | Kind::Runsc => {
            let name = kind.key();
            if runtime.is_none() {
                Some(format!("{name} is not installed (Debian package {name}; scripts/setup installs it)"))
            } else if effective_uid() != Some(0) {
                Some(format!("{name} needs root here and shoal bench boot is not running as root"))
            } else {
                None
            }
        }
        Kind::LeanSpt => crate::host::tender_binary().err().map(|e| e.to_string()),
        Kind::LeanSptUser => {
            if effective_uid() != Some(0) {
                Some("shoal bench boot is not running as root, so every spt row already runs without root's confinement".into())
            } else {
                crate::host::tender_binary().err().map(|e| e.to_string())
            }
        }
        Kind::FloorNs if effective_uid() != Some(0) => Some("new namespaces need root here and shoal bench boot is not running as root".into()),
        Kind::Spt | Kind::Native | Kind::Floor | Kind::FloorNs => None,
    }
}

/// Builds apps/bench/floor.c (static musl, linked at 1 GiB so that the
/// guest's addresses below stay free) and writes spt's filter for `image`
/// with the default guest memory beside it.
fn build_floor(home: &Path, dir: &Path, image: &Path) -> Result<(PathBuf, PathBuf)> {
    let floor = dir.join("floor");
    let status = Command::new("musl-gcc")
        .args(["-static", "-O2", "-Wl,-Ttext-segment=0x40000000"])
        .arg(home.join("apps/bench/floor.c"))
        .arg("-o")
        .arg(&floor)
        .status()
        .context("cannot run musl-gcc (install Debian's musl-tools)")?;
    if !status.success() {
        bail!("musl-gcc failed to build apps/bench/floor.c");
    }
    let mem = shoal_tender::parse_size(shoal_tender::DEFAULT_MEM).map_err(|e| anyhow!("the default --mem: {e}"))?;
    let img = shoal_loader::Image::open(image)?;
    let layout = shoal_loader::plan(&img, mem, 0, &["hello".into()], &[])?;
    let bytes = shoal_spt::filter::plain_instance_bytes(layout.heap_start, layout.mem_size).map_err(|e| anyhow!("cannot build spt's filter: {e}"))?;
    let filter = dir.join("filter.bpf");
    fs::write(&filter, bytes)?;
    Ok((floor, filter))
}

/// Writes `boot.csv` (one row per measured system: median and p95 to first
/// byte and to exit in ms, median minor faults, the medians over runc's) and
/// `boot.svg` (the medians to first byte and to exit) into `out`.
fn write_csv_and_plot(out: &Path, systems: &[System]) {
    let measured: Vec<&System> = systems.iter().filter(|s| s.missing.is_none()).collect();
    let runc = measured.iter().find(|s| s.kind == Kind::Runc).map(|s| (median(&s.first_ms), median(&s.exit_ms)));
    let cell = |r: Option<f64>| r.map(|r| format!("{r:.3}")).unwrap_or_default();
    let lines: Vec<String> = measured
        .iter()
        .map(|s| {
            let (fm, em) = (median(&s.first_ms), median(&s.exit_ms));
            format!(
                "{},{fm:.3},{:.3},{em:.3},{:.3},{:.0},{},{}",
                s.kind.key(),
                p95(&s.first_ms),
                p95(&s.exit_ms),
                median(&s.faults),
                cell(ratio(fm, runc.map(|r| r.0))),
                cell(ratio(em, runc.map(|r| r.1)))
            )
        })
        .collect();
    let header = "system,first_byte_median_ms,first_byte_p95_ms,exit_median_ms,exit_p95_ms,minor_faults_median,first_byte_over_runc,exit_over_runc";
    let cats: Vec<String> = measured.iter().map(|s| s.kind.key().to_string()).collect();
    let series = vec![
        crate::plot::BarSeries { name: "first stdout byte".into(), values: measured.iter().map(|s| Some((median(&s.first_ms), 0.0))).collect() },
        crate::plot::BarSeries { name: "exit".into(), values: measured.iter().map(|s| Some((median(&s.exit_ms), 0.0))).collect() },
    ];
    let frame =
        crate::plot::Frame { title: "hello world: start to first byte and to exit (median)", x_desc: "system", y_desc: "ms", log_x: false, log_y: false };
    crate::write_csv_and_bars("boot", out, header, &lines, &frame, &cats, &series);
}

fn ratio(x: f64, base: Option<f64>) -> Option<f64> {
    base.filter(|b| *b > 0.0 && x.is_finite()).map(|b| x / b)
}

pub fn boot(runs: usize, out: &Path, as_json: bool) -> Result<()> {
    if runs == 0 {
        bail!("--runs must be at least 1");
    }
    let paths = shoal_toolchain::Paths::discover()?;
    let tmp = tempfile::tempdir()?;
    // The unprivileged row runs the image as nobody: let it read it.
    std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let src = paths.home.join("apps/hello.c");
    let (image, native) = build_pair(&src, tmp.path(), &["-O2"])?;
    let mut systems: Vec<System> = Kind::ALL
        .iter()
        .map(|&kind| {
            let runtime = match kind {
                Kind::Runc | Kind::Runsc => find_program(kind.key()),
                _ => None,
            };
            let missing = unavailable(kind, runtime.as_deref()).map(Missing::Unavailable);
            System { kind, runtime, missing, first_ms: Vec::new(), exit_ms: Vec::new(), faults: Vec::new() }
        })
        .collect();

    // One bundle for both runtimes, its config.json from `runc spec` (or `runsc spec`).
    let bundle = tmp.path().join("bundle");
    let spec_from = systems.iter().filter(|s| s.missing.is_none()).find_map(|s| s.runtime.clone());
    if let Some(rt) = spec_from {
        if let Err(e) = make_bundle(&rt, &bundle, &native) {
            for s in systems.iter_mut().filter(|s| s.runtime.is_some() && s.missing.is_none()) {
                s.missing = Some(Missing::Failed(format!("cannot make the OCI bundle: {e:#}")));
            }
        }
    }
    let floor = match build_floor(&paths.home, tmp.path(), &image) {
        Ok(f) => Some(f),
        Err(e) => {
            for s in systems.iter_mut().filter(|s| matches!(s.kind, Kind::Floor | Kind::FloorNs) && s.missing.is_none()) {
                s.missing = Some(Missing::Failed(format!("{e:#}")));
            }
            None
        }
    };
    let setup = Setup {
        shoal: std::env::current_exe()?,
        tender: crate::host::tender_binary().ok(),
        image,
        native,
        floor,
        bundle,
        stderr_file: tmp.path().join("stderr"),
    };

    // An untimed warm-up run of each system checks that it works here.
    for s in systems.iter_mut().filter(|s| s.missing.is_none()) {
        if let Err(e) = measure(s, &setup, "warmup") {
            s.missing = Some(Missing::Failed(format!("the warm-up run failed: {e:#}")));
        }
    }
    if !as_json {
        eprintln!("shoal bench boot: {runs} rounds");
    }
    let n = systems.len();
    // Seconds to minutes: one step per round of all systems.
    let progress = Progress::new("bench boot", runs as u64, as_json);
    for round in 0..runs {
        progress.step();
        for k in 0..n {
            let s = &mut systems[(round + k) % n];
            if s.missing.is_some() {
                continue;
            }
            match measure(s, &setup, &round.to_string()) {
                Ok((f, e, pf)) => {
                    s.first_ms.push(f);
                    s.exit_ms.push(e);
                    s.faults.push(pf as f64);
                }
                Err(e) => s.missing = Some(Missing::Failed(format!("run {} failed: {e:#}", round + 1))),
            }
        }
    }
    drop(progress);

    // A system that cannot run here or failed is only reported, but with
    // none left there is no result at all.
    if systems.iter().all(|s| s.missing.is_some()) {
        let reasons: Vec<String> =
            systems.iter().map(|s| format!("{}: {}", s.kind.key(), s.missing.as_ref().map(Missing::to_string).unwrap_or_default())).collect();
        return Err(crate::BenchError::nothing_measured("boot", &reasons).into());
    }
    let runc_med = systems.iter().find(|s| s.kind == Kind::Runc && s.missing.is_none()).map(|s| (median(&s.first_ms), median(&s.exit_ms)));
    let med_first = |k: Kind| systems.iter().find(|s| s.kind == k && s.missing.is_none()).map(|s| median(&s.first_ms));
    let goal: Vec<(Kind, Option<bool>, Option<f64>)> = [Kind::Spt, Kind::Hvt]
        .iter()
        .map(|&k| {
            let r = med_first(k).and_then(|m| ratio(m, runc_med.map(|r| r.0)));
            (k, r.map(|r| r < 1.0), r)
        })
        .collect();
    let hvt_minus_spt = med_first(Kind::Hvt).zip(med_first(Kind::Spt)).map(|(h, s)| h - s);

    let native_exit = systems.iter().find(|s| s.kind == Kind::Native && s.missing.is_none()).map(|s| median(&s.exit_ms));
    // Every measured system's exit time over the native process's: the
    // floor rows beside shoal's show how much of the ratio the host alone costs.
    let exit_ratio_to_native: serde_json::Map<String, Value> =
        systems.iter().filter(|s| s.missing.is_none()).map(|s| (s.kind.key().to_string(), json!(ratio(median(&s.exit_ms), native_exit)))).collect();
    write_csv_and_plot(out, &systems);
    if as_json {
        let mut out = serde_json::Map::new();
        for s in &systems {
            let v = if let Some(m) = &s.missing {
                m.json()
            } else {
                let (fm, em) = (median(&s.first_ms), median(&s.exit_ms));
                json!({
                    "label": s.kind.label(),
                    "first_byte_ms": {"median": fm, "p95": p95(&s.first_ms), "samples": s.first_ms},
                    "exit_ms": {"median": em, "p95": p95(&s.exit_ms), "samples": s.exit_ms},
                    "minor_faults": {"median": median(&s.faults), "samples": s.faults},
                    "ratio_to_runc": {
                        "first_byte_median": ratio(fm, runc_med.map(|r| r.0)),
                        "exit_median": ratio(em, runc_med.map(|r| r.1)),
                    },
                })
            };
            out.insert(s.kind.key().to_string(), v);
        }
        let goal_json: serde_json::Map<String, Value> = goal.iter().map(|(k, ok, _)| (k.key().to_string(), json!(ok))).collect();
        let report = json!({
            "program": "apps/hello.c",
            "runs": runs,
            "unit": "ms",
            "systems": out,
            "goal_first_byte_faster_than_runc": goal_json,
            "hvt_minus_spt_first_byte_ms": hvt_minus_spt,
            "design_vm_creation_ms": 0.7,
            "exit_ratio_to_native": exit_ratio_to_native,
            "tender_linking": crate::host::tender_linking(),
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }

    println!(
        "shoal bench boot: apps/hello.c, {runs} runs of each, all systems alternating within each round; \
         ms from command start (median / p95)"
    );
    println!("binaries: {}", crate::host::tender_linking());
    let mut table = Table::new(["system", "first stdout byte", "exit", "first / runc", "exit / runc", "minor faults"]);
    let fmt_ratio = |r: Option<f64>| r.map(|r| format!("{r:.2}×")).unwrap_or_else(|| "—".into());
    for s in &systems {
        if let Some(m) = &s.missing {
            table.note(s.kind.label(), m.to_string());
            continue;
        }
        let (fm, em) = (median(&s.first_ms), median(&s.exit_ms));
        table.row([
            s.kind.label().to_string(),
            format!("{fm:.2} / {:.2}", p95(&s.first_ms)),
            format!("{em:.2} / {:.2}", p95(&s.exit_ms)),
            fmt_ratio(ratio(fm, runc_med.map(|r| r.0))),
            fmt_ratio(ratio(em, runc_med.map(|r| r.1))),
            format!("{:.0}", median(&s.faults)),
        ]);
    }
    print!("{}", table.text());
    let goal_text: Vec<String> = goal
        .iter()
        .map(|(k, ok, r)| match (ok, r) {
            (Some(ok), Some(r)) => format!("{} {} ({r:.2}×)", k.key(), if *ok { "yes" } else { "NO" }),
            _ => format!("{} not measured", k.key()),
        })
        .collect();
    println!("target: spt and hvt faster to first byte than runc: {}", goal_text.join(", "));
    let med_exit = |k: Kind| systems.iter().find(|s| s.kind == k && s.missing.is_none()).map(|s| median(&s.exit_ms));
    if let Some(native) = med_exit(Kind::Native) {
        let vs = |k: Kind, limit: f64| match med_exit(k) {
            Some(m) => format!("{} {:.2}× ({})", k.key(), m / native, if m / native <= limit { "met" } else { "not met" }),
            None => format!("{} not measured", k.key()),
        };
        println!(
            "target: start to exit at most 2× the native process on spt, 3× on hvt: {}, {}; the lean tender: {}, {}",
            vs(Kind::Spt, 2.0),
            vs(Kind::Hvt, 3.0),
            vs(Kind::LeanSpt, 2.0),
            vs(Kind::LeanHvt, 3.0)
        );
    }
    if let Some(native) = med_exit(Kind::Native) {
        let row =
            |k: Kind| med_exit(k).map(|m| format!("{} {m:.2} ms = {:.2}× native", k.key(), m / native)).unwrap_or_else(|| format!("{} not measured", k.key()));
        let above =
            |k: Kind, f: Kind| med_exit(k).zip(med_exit(f)).map(|(m, fl)| format!("{} spends {:.2} ms above {}", k.key(), m - fl, f.key())).unwrap_or_default();
        let mut parts = vec![row(Kind::Floor), row(Kind::FloorNs)];
        // Each tender row beside the floor that confines as much.
        let pairs = if med_exit(Kind::FloorNs).is_some() {
            [(Kind::LeanSptUser, Kind::Floor), (Kind::LeanSpt, Kind::FloorNs)]
        } else {
            [(Kind::LeanSpt, Kind::Floor), (Kind::LeanSptUser, Kind::Floor)]
        };
        parts.extend(pairs.iter().map(|&(k, f)| above(k, f)).filter(|t| !t.is_empty()));
        println!("floor: the cheapest sandboxed start here (exec, load, spt's filter, write, exit): {}", parts.join("; "));
    }
    println!(
        "context: creating a VM (1 vCPU, 4 MiB) takes ~0.7 ms on this nested KVM and a VM exit ~27 µs (the first ~150 µs); {}",
        match hvt_minus_spt {
            Some(d) => format!("hvt − spt to first byte here: {d:.2} ms."),
            None => "hvt − spt not measured.".into(),
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios() {
        assert_eq!(ratio(1.0, Some(4.0)), Some(0.25));
        assert_eq!(ratio(1.0, None), None);
        assert_eq!(ratio(1.0, Some(0.0)), None);
    }

    #[test]
    fn writes_csv_and_plot() {
        let dir = tempfile::tempdir().unwrap();
        let sys = |kind, missing, first: f64, exit: f64| System {
            kind,
            runtime: None,
            missing,
            first_ms: vec![first, first],
            exit_ms: vec![exit, exit],
            faults: vec![100.0, 100.0],
        };
        let systems =
            [sys(Kind::Spt, None, 1.0, 2.0), sys(Kind::Hvt, Some(Missing::Unavailable("no /dev/kvm".into())), 0.0, 0.0), sys(Kind::Runc, None, 4.0, 8.0)];
        write_csv_and_plot(dir.path(), &systems);
        let csv = std::fs::read_to_string(dir.path().join("boot.csv")).unwrap();
        assert_eq!(
            csv,
            "system,first_byte_median_ms,first_byte_p95_ms,exit_median_ms,exit_p95_ms,minor_faults_median,first_byte_over_runc,exit_over_runc\n\
             spt,1.000,1.000,2.000,2.000,100,0.250,0.250\n\
             runc,4.000,4.000,8.000,8.000,100,1.000,1.000\n"
        );
        assert!(dir.path().join("boot.svg").is_file());
    }
}
