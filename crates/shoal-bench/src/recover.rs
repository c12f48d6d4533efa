//! `shoal bench recover`: VampOS's experiments that shoal can
//! run now, beside the paper's numbers:
//!
//! - **gate cost** in cycles: `getuid` (a call into `user`, a rebootable
//!   component: the whole gate — return context, armed word, watchdog
//!   words) with the gates and with `shoal run --no-recover`; the
//!   difference is the gate. FlexOS's MPK gate costs 62–74 cycles, a
//!   function call 2–5 (the app measures one too).
//! - **Fig. 5**: getpid, open, 1-byte write and read, close of a file, and a
//!   222-byte write + read on an `AF_UNIX` socket pair and on a TCP
//!   connection over 127.0.0.1 (host sockets through the tender:
//!   `--net-bind-any --net-outbound`), per call, native, and on spt and
//!   hvt without and with the gates (`apps/bench/recover.c`, the lowest of
//!   5 loops per run, as the machine is shared).
//! - **reboot time** of each rebootable component (vfs, ramfs, process and net rebuilt from their logs), from the
//!   reboot lines of `--rejuvenate-every` runs of `apps/tests/recover.c`
//!   (VampOS: 7.4 µs for PROCESS; goal ≤ 10 µs).
//! - **Fig. 7 SQLite**: 10,000 single-row inserts (autocommit, so each one
//!   writes and deletes its journal) into a database file, by the
//!   `sqlite-shell` recipe reading the statements on standard input: wall
//!   time of the whole run natively and on spt and hvt without and with
//!   the gates (VampOS: 1.24×; goal ≤ 1.10×).
//!
//! - **the server experiments** (Fig. 7 nginx and Redis, Fig. 6, Table V,
//!   Fig. 8): `recover_servers.rs`.
//! - **Table IV**, the log-shrink threshold: `recover_shrink.rs`.
//!
//! `--only` runs some of these parts (see `PARTS`).
//! Writes `recover.csv` and `recover-syscalls.svg` (via `crate::plot`) in
//! `--out`; `--json` prints the numbers as JSON.

use crate::host::build_pair;
use crate::plot::{self, BarSeries, Frame};
use crate::progress::Progress;
use crate::sample::children_cpu;
use crate::stats::{fmt, mean_sd, median};
use crate::syscall::parse_kv;
use crate::{recover_servers, recover_shrink};
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Options of `shoal bench recover`.
pub struct RecoverOpts {
    pub repeat: usize,
    pub iterations: u64,
    pub out: PathBuf,
    pub json: bool,
    /// The parts to run (`--only`; empty: all).
    pub only: Vec<String>,
    /// Seconds of each Fig. 7 wrk run.
    pub duration: f64,
    /// SET requests of each Fig. 7 redis-benchmark run.
    pub requests: u64,
}

/// The parts `--only` selects from.
const PARTS: [&str; 8] = ["syscalls", "reboot", "sqlite", "servers", "nginx-reboot", "rejuvenation", "redis-latency", "shrink-threshold"];

/// The bench's bad options.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error("--repeat must be at least 2 (mean ± SD) and --iterations at least 1")]
    Counts,
    #[error("unknown part `{0}` for --only (the parts are syscalls, reboot, sqlite, servers, nginx-reboot, rejuvenation, redis-latency, shrink-threshold)")]
    Part(String),
    #[error("--duration must be between 0.5 and 60 seconds and --requests between 1 and 10,000,000")]
    Load,
}

/// The operations `apps/bench/recover.c` reports, with their labels.
const OPS: [(&str, &str); 9] = [
    ("call", "function call"),
    ("getuid", "getuid (user: whole gate)"),
    ("getpid", "getpid"),
    ("open", "open"),
    ("write", "write 1 byte"),
    ("read", "read 1 byte"),
    ("close", "close"),
    ("sock", "socketpair write+read 222 B"),
    ("tcp", "TCP write+read 222 B"),
];

/// The rebootable components.
const COMPONENTS: [&str; 7] = ["vfs", "ramfs", "time", "process", "sysinfo", "user", "net"];

/// The systems measured: a name and the `shoal run` flags (None: native).
fn systems(hvt: bool) -> Vec<(&'static str, Option<Vec<&'static str>>)> {
    // The TCP case binds and connects on 127.0.0.1 through the tender.
    const NET: [&str; 2] = ["--net-bind-any", "--net-outbound"];
    let mut s = vec![
        ("native", None),
        ("spt no gates", Some([&["--tender", "spt", "--no-recover"][..], &NET].concat())),
        ("spt gates", Some([&["--tender", "spt"][..], &NET].concat())),
        ("spt gates+logs", Some([&["--tender", "spt", "--recover-stateful"][..], &NET].concat())),
    ];
    if hvt {
        s.push(("hvt no gates", Some([&["--tender", "hvt", "--no-recover"][..], &NET].concat())));
        s.push(("hvt gates", Some([&["--tender", "hvt"][..], &NET].concat())));
        s.push(("hvt gates+logs", Some([&["--tender", "hvt", "--recover-stateful"][..], &NET].concat())));
    }
    s
}

/// The reboot times (µs) in `err`'s `shoal: rebooted COMPONENT in T µs` lines, per component.
fn reboot_times(err: &str) -> Vec<(String, f64)> {
    err.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("shoal: rebooted ")?;
            let (c, rest) = rest.split_once(" in ")?;
            let (t, _) = rest.split_once(' ')?;
            Some((c.to_string(), t.parse().ok()?))
        })
        .collect()
}

fn say(quiet: bool, msg: &str) {
    if !quiet {
        crate::progress::say(&format!("shoal bench recover: {msg}"));
    }
}

/// One run of the SQLite workload: (wall seconds, CPU seconds). CPU time
/// is steadier than wall time on a loaded machine (waiting for a core
/// does not count).
fn sqlite_run(cmd: &mut Command, script: &Path) -> Result<(f64, f64)> {
    let input = fs::File::open(script).with_context(|| format!("cannot open {}", script.display()))?;
    let cpu0 = children_cpu();
    let t = Instant::now();
    let out = cmd.stdin(Stdio::from(input)).stdout(Stdio::piped()).stderr(Stdio::piped()).output().context("cannot start sqlite3")?;
    let secs = t.elapsed().as_secs_f64();
    let cpu = children_cpu() - cpu0;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || text.trim() != "10000" {
        bail!("sqlite3 failed ({}): {} {}", out.status, text.trim(), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok((secs, cpu))
}

pub fn recover(o: RecoverOpts) -> Result<()> {
    if o.repeat < 2 || o.iterations == 0 {
        return Err(RecoverError::Counts.into());
    }
    if let Some(p) = o.only.iter().find(|p| !PARTS.contains(&p.as_str())) {
        return Err(RecoverError::Part(p.clone()).into());
    }
    if !(0.5..=60.0).contains(&o.duration) || !(1..=10_000_000).contains(&o.requests) {
        return Err(RecoverError::Load.into());
    }
    let want = |part: &str| o.only.is_empty() || o.only.iter().any(|p| p == part);
    let quiet = o.json;
    let paths = shoal_toolchain::Paths::discover()?;
    fs::create_dir_all(&o.out).with_context(|| format!("cannot create {}", o.out.display()))?;
    let shoal = std::env::current_exe()?;
    let hvt = crate::host::kvm_usable();
    let sys = systems(hvt.is_ok());
    // Minutes: a bar of the parts (system calls, reboots, SQLite, the log
    // threshold, then the server parts as one step).
    let server_parts = ["servers", "nginx-reboot", "rejuvenation", "redis-latency"];
    let steps = ["syscalls", "reboot", "sqlite", "shrink-threshold"].iter().filter(|p| want(p)).count() + usize::from(server_parts.iter().any(|p| want(p)));
    let progress = Progress::new("bench recover", steps as u64, quiet);
    let part_done = |part: &str| {
        if want(part) {
            progress.step();
        }
    };

    // Fig. 5 and the gate: per system and operation, cycles and ns per call (one value per run).
    let mut cyc: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); OPS.len()]; sys.len()];
    let mut ns = cyc.clone();
    // A system that fails is reported as failed, with its reason, and not
    // run again; the others' results still count.
    let mut failed: Vec<Option<String>> = vec![None; sys.len()];
    let syscall_runs = if want("syscalls") { o.repeat } else { 0 };
    let (image, native) = if want("syscalls") || want("shrink-threshold") {
        say(quiet, "building apps/bench/recover.c (image and native)");
        build_pair(&paths.home.join("apps/bench/recover.c"), &o.out, &["-O2"])?
    } else {
        (PathBuf::new(), PathBuf::new())
    };
    for rep in 0..syscall_runs {
        say(quiet, &format!("system calls, run {}/{}", rep + 1, o.repeat));
        for (si, (name, flags)) in sys.iter().enumerate() {
            if failed[si].is_some() {
                continue;
            }
            let mut cmd = match flags {
                None => Command::new(&native),
                Some(f) => {
                    let mut c = Command::new(&shoal);
                    c.arg("run").args(f).arg(&image).arg("--");
                    c
                }
            };
            cmd.arg(o.iterations.to_string());
            let out = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).output().context("cannot start the benchmark program")?;
            let err = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() {
                let why = format!("the benchmark program failed ({}): {}", out.status, err.trim());
                say(quiet, &format!("warning: {name} failed: {why}"));
                failed[si] = Some(why);
                continue;
            }
            let kv = parse_kv(&err);
            for (oi, (op, _)) in OPS.iter().enumerate() {
                let get = |suffix: &str| kv.iter().find(|(k, _)| *k == format!("{op}_{suffix}")).map(|(_, v)| *v);
                if let (Some(c), Some(n)) = (get("cyc"), get("ns")) {
                    cyc[si][oi].push(c);
                    ns[si][oi].push(n);
                }
            }
        }
    }

    part_done("syscalls");

    // Reboot times, from rejuvenation (every 5 ms for 0.3 s per run).
    let tenders: Vec<&'static str> = if hvt.is_ok() { vec!["spt", "hvt"] } else { vec!["spt"] };
    let mut reboots: Vec<(&str, Vec<Vec<f64>>)> = tenders.iter().map(|t| (*t, vec![Vec::new(); COMPONENTS.len()])).collect();
    let mut reboot_failed: Vec<Option<String>> = vec![None; tenders.len()];
    let reboot_runs = if want("reboot") { o.repeat } else { 0 };
    let recover_image = if want("reboot") {
        say(quiet, "reboot times (--rejuvenate-every 0.005)");
        build_pair(&paths.home.join("apps/tests/recover.c"), &o.out, &["-O2"])?.0
    } else {
        PathBuf::new()
    };
    for _ in 0..reboot_runs {
        for (ti, (t, per)) in reboots.iter_mut().enumerate() {
            if reboot_failed[ti].is_some() {
                continue;
            }
            let out = Command::new(&shoal)
                .args(["run", "--tender", t, "--rejuvenate-every", "0.005"])
                .arg(&recover_image)
                .args(["--", "300", "0.3"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .context("cannot start shoal run")?;
            if !out.status.success() {
                reboot_failed[ti] = Some(format!("the rejuvenation run failed ({})", out.status));
                continue;
            }
            for (c, us) in reboot_times(&String::from_utf8_lossy(&out.stderr)) {
                if let Some(i) = COMPONENTS.iter().position(|x| *x == c) {
                    per[i].push(us);
                }
            }
        }
    }

    // Fig. 7 SQLite: 10,000 inserts.
    let mut sqlite: Vec<Vec<f64>> = vec![Vec::new(); sys.len()];
    let mut sqlite_cpu: Vec<Vec<f64>> = vec![Vec::new(); sys.len()];
    let mut sqlite_failed: Vec<Option<String>> = vec![None; sys.len()];
    // Why the SQLite shell could not be built, when it was wanted.
    let mut sqlite_build_failed = None;
    let script = o.out.join("inserts.sql");
    part_done("reboot");
    let mut sql = String::from("CREATE TABLE t(x);\n");
    for _ in 0..10_000 {
        sql.push_str("INSERT INTO t VALUES('a');\n");
    }
    sql.push_str("SELECT count(*) FROM t;\n");
    fs::write(&script, sql)?;
    let recipe = shoal_toolchain::recipe::load(&paths, "sqlite-shell")?;
    let built = if want("sqlite") || want("shrink-threshold") {
        say(quiet, "SQLite: building the sqlite-shell recipe");
        shoal_toolchain::recipe::build(&paths, &recipe, &o.out.join("sqlite3.img")).map_err(anyhow::Error::from)
    } else {
        Err(anyhow::anyhow!("not selected (--only)"))
    };
    let sqlite_image = built.as_ref().ok().map(|b| b.image.clone());
    match built {
        Err(e) if want("sqlite") || want("shrink-threshold") => sqlite_build_failed = Some(format!("{e:#}")),
        Err(_) => {}
        Ok(_) if !want("sqlite") => {}
        Ok(built) => {
            // The native side's database lives in memory too (tmpfs), as the instance's does (ramfs).
            let shm = Path::new("/dev/shm");
            let tmp = if shm.is_dir() { tempfile::tempdir_in(shm)? } else { tempfile::tempdir()? };
            for rep in 0..o.repeat {
                say(quiet, &format!("SQLite 10,000 inserts, run {}/{}", rep + 1, o.repeat));
                for (si, (_, flags)) in sys.iter().enumerate() {
                    if sqlite_failed[si].is_some() {
                        continue;
                    }
                    let db = tmp.path().join(format!("bench-{rep}-{si}.db"));
                    let mut cmd = match flags {
                        None => {
                            let mut c = Command::new(&built.native);
                            c.arg(&db);
                            c
                        }
                        Some(f) => {
                            let mut c = Command::new(&shoal);
                            c.arg("run").args(f).arg(&built.image).args(["--", "/tmp/bench.db"]);
                            c
                        }
                    };
                    match sqlite_run(&mut cmd, &script) {
                        Ok((s, c)) => {
                            sqlite[si].push(s);
                            sqlite_cpu[si].push(c);
                        }
                        Err(e) => sqlite_failed[si] = Some(format!("{e:#}")),
                    }
                }
            }
        }
    }

    part_done("sqlite");

    // Table IV: the log-shrink threshold.
    let shrink = want("shrink-threshold").then(|| {
        recover_shrink::run(&recover_shrink::Opts {
            repeat: o.repeat,
            iterations: o.iterations,
            shoal: &shoal,
            tenders: &tenders,
            quiet,
            bench_image: &image,
            sqlite: sqlite_image.as_deref().map(|i| (i, script.as_path())),
        })
    });

    part_done("shrink-threshold");

    // The server experiments (Fig. 7, Fig. 6, Table V).
    let sections = recover_servers::Sections { fig7: want("servers"), fig6: want("nginx-reboot"), table5: want("rejuvenation"), fig8: want("redis-latency") };
    let srv = if sections.fig7 || sections.fig6 || sections.table5 || sections.fig8 {
        let so = recover_servers::Opts {
            repeat: o.repeat,
            duration: o.duration,
            requests: o.requests,
            out: &o.out,
            shoal: &shoal,
            home: &paths.home,
            tenders: &tenders,
            quiet,
            sections,
        };
        Some(recover_servers::run(&so))
    } else {
        None
    };
    drop(progress);

    if want("syscalls") && failed.iter().all(Option::is_some) {
        let reasons: Vec<String> = sys.iter().zip(&failed).map(|((n, _), w)| format!("{n}: {}", w.as_deref().unwrap_or(""))).collect();
        return Err(crate::BenchError::nothing_measured("recover", &reasons).into());
    }

    // CSV and plot.
    let mut csv = String::from("experiment,system,measure,run,value\n");
    for (si, (name, _)) in sys.iter().enumerate() {
        for (oi, (op, _)) in OPS.iter().enumerate() {
            for (r, (c, n)) in cyc[si][oi].iter().zip(&ns[si][oi]).enumerate() {
                csv.push_str(&format!("syscall,{name},{op}_cycles,{},{c:.1}\nsyscall,{name},{op}_ns,{},{n:.1}\n", r + 1, r + 1));
            }
        }
        for (r, (s, c)) in sqlite[si].iter().zip(&sqlite_cpu[si]).enumerate() {
            csv.push_str(&format!("sqlite_10000_inserts,{name},seconds,{},{s:.4}\nsqlite_10000_inserts,{name},cpu_seconds,{},{c:.4}\n", r + 1, r + 1));
        }
    }
    for (t, per) in &reboots {
        for (ci, c) in COMPONENTS.iter().enumerate() {
            for (r, us) in per[ci].iter().enumerate() {
                csv.push_str(&format!("reboot,{t},{c}_us,{},{us:.1}\n", r + 1));
            }
        }
    }
    if let Some(srv) = &srv {
        csv.push_str(&srv.csv);
    }
    if let Some(s) = &shrink {
        csv.push_str(&s.csv);
    }
    let csv_path = o.out.join("recover.csv");
    fs::write(&csv_path, csv).with_context(|| format!("cannot write {}", csv_path.display()))?;
    let svg = o.out.join("recover-syscalls.svg");
    let categories: Vec<String> = OPS.iter().skip(1).map(|(op, _)| op.to_string()).collect();
    let series: Vec<BarSeries> = sys
        .iter()
        .enumerate()
        .map(|(si, (name, _))| BarSeries {
            name: name.to_string(),
            values: (1..OPS.len()).map(|oi| (!ns[si][oi].is_empty()).then(|| mean_sd(&ns[si][oi]))).collect(),
        })
        .collect();
    let frame = Frame {
        title: "VampOS Fig. 5 on shoal: ns per call",
        x_desc: "system call",
        y_desc: "ns per call (lowest of 5 loops, mean ± SD of runs)",
        log_x: false,
        log_y: true,
    };
    let plotted = if want("syscalls") {
        plot::bars(&svg, &frame, &categories, &series).map_err(anyhow::Error::from)
    } else {
        Err(anyhow::anyhow!("no system calls measured (--only)"))
    };
    if let (Err(e), true) = (&plotted, want("syscalls")) {
        say(quiet, &format!("warning: {e}"));
    }

    // The gate: getuid with minus without the gates.
    let col = |n: &str| sys.iter().position(|(s, _)| *s == n);
    let gate = |t: &str| -> Option<f64> {
        let (on, off) = (col(&format!("{t} gates"))?, col(&format!("{t} no gates"))?);
        (!cyc[on][1].is_empty() && !cyc[off][1].is_empty()).then(|| mean_sd(&cyc[on][1]).0 - mean_sd(&cyc[off][1]).0)
    };
    // `with`: "gates" (the default: stateless components rebootable) or
    // "gates+logs" (`--recover-stateful`: vfs, ramfs, process and net too).
    let ratio = |v: &[Vec<f64>], t: &str, with: &str| -> Option<f64> {
        let (on, off) = (col(&format!("{t} {with}"))?, col(&format!("{t} no gates"))?);
        (!v[on].is_empty() && !v[off].is_empty()).then(|| mean_sd(&v[on]).0 / mean_sd(&v[off]).0)
    };
    let sqlite_ratio = |t: &str, with: &str| ratio(&sqlite, t, with);
    let sqlite_cpu_ratio = |t: &str, with: &str| ratio(&sqlite_cpu, t, with);

    if o.json {
        let mut sc = serde_json::Map::new();
        for (si, (name, _)) in sys.iter().enumerate() {
            let mut m = serde_json::Map::new();
            for (oi, (op, _)) in OPS.iter().enumerate() {
                let (cm, csd) = mean_sd(&cyc[si][oi]);
                let (nm, nsd) = mean_sd(&ns[si][oi]);
                m.insert(op.to_string(), json!({"cycles": {"mean": cm, "sd": csd}, "ns": {"mean": nm, "sd": nsd}}));
            }
            let (qm, qsd) = mean_sd(&sqlite[si]);
            let (cm, csd) = mean_sd(&sqlite_cpu[si]);
            let q = match &sqlite_failed[si] {
                Some(why) => json!({"failed": why}),
                None => json!({"mean": qm, "sd": qsd, "runs": sqlite[si], "cpu": {"mean": cm, "sd": csd, "runs": sqlite_cpu[si]}}),
            };
            let v = match &failed[si] {
                Some(why) => json!({"failed": why, "sqlite_10000_inserts_s": q}),
                None => json!({"syscalls": m, "sqlite_10000_inserts_s": q}),
            };
            sc.insert(name.to_string(), v);
        }
        let rb: serde_json::Map<String, serde_json::Value> = reboots
            .iter()
            .zip(&reboot_failed)
            .map(|((t, per), failed)| {
                if let Some(why) = failed {
                    return (t.to_string(), json!({"failed": why}));
                }
                let m: serde_json::Map<String, serde_json::Value> = COMPONENTS
                    .iter()
                    .enumerate()
                    .map(|(ci, c)| {
                        let (m, sd) = mean_sd(&per[ci]);
                        (c.to_string(), json!({"mean_us": m, "sd_us": sd, "median_us": median(&per[ci]), "samples": per[ci].len()}))
                    })
                    .collect();
                (t.to_string(), serde_json::Value::Object(m))
            })
            .collect();
        let mut doc = json!({
            "iterations": o.iterations,
            "repeat": o.repeat,
            "systems": sc,
            "gate_cycles": {"spt": gate("spt"), "hvt": gate("hvt"), "flexos_mpk_gate": [62, 74], "function_call": [2, 5], "goal_max": 100},
            "reboot_us": rb,
            "reboot_goal_us": 10,
            "vampos_stateless_reboot_us": 7.428,
            "sqlite_ratio_gates_over_none": {"spt": sqlite_ratio("spt", "gates"), "hvt": sqlite_ratio("hvt", "gates"), "goal_max": 1.10, "vampos_fsm": 1.24},
            "sqlite_cpu_ratio_gates_over_none": {"spt": sqlite_cpu_ratio("spt", "gates"), "hvt": sqlite_cpu_ratio("hvt", "gates")},
            "sqlite_ratio_gates_logs_over_none": {"spt": sqlite_ratio("spt", "gates+logs"), "hvt": sqlite_ratio("hvt", "gates+logs"), "goal_max": 1.10, "vampos_fsm": 1.24},
            "sqlite_cpu_ratio_gates_logs_over_none": {"spt": sqlite_cpu_ratio("spt", "gates+logs"), "hvt": sqlite_cpu_ratio("hvt", "gates+logs")},
            "sqlite_failed": sqlite_build_failed,
            "hvt_unavailable": hvt.as_ref().err(),
            "csv": csv_path,
            "plot": plotted.is_ok().then_some(&svg),
        });
        if let (Some(srv), Some(m)) = (&srv, doc.as_object_mut()) {
            m.extend(srv.json.clone());
        }
        if let (Some(s), Some(m)) = (&shrink, doc.as_object_mut()) {
            m.extend(s.json.clone());
        }
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }

    println!("shoal bench recover: VampOS experiments, {} runs of each system, interleaved", o.repeat);
    if let Err(why) = &hvt {
        println!("hvt: unavailable here: {why}");
    }
    for ((name, _), why) in sys.iter().zip(&failed) {
        if let Some(why) = why {
            println!("{name}: FAILED: {why}");
        }
    }
    if want("syscalls") {
        println!();
        println!("Gate cost (cycles per call; rdtsc around {} calls, lowest of 5 loops per run, mean ± SD of runs)", o.iterations);
        let mut head = format!("{:<28}", "operation");
        for (name, _) in &sys {
            head.push_str(&format!(" {:>16}", name));
        }
        println!("{head}");
        for (oi, (_, label)) in OPS.iter().enumerate() {
            let mut line = format!("{label:<28}");
            for per_op in &cyc {
                line.push_str(&format!(" {:>16}", fmt(&per_op[oi], 1)));
            }
            println!("{line}");
        }
        for t in &tenders {
            if let Some(g) = gate(t) {
                println!("{t}: the gate of a rebootable component costs {g:.1} cycles (getuid with − without gates); target ≤ 100; FlexOS MPK gate 62–74, function call 2–5");
            }
        }
        println!();
        println!("Fig. 5 system calls (ns per call, same runs)");
        println!("{head}");
        for (oi, (_, label)) in OPS.iter().enumerate().skip(2) {
            let mut line = format!("{label:<28}");
            for per_op in &ns {
                line.push_str(&format!(" {:>16}", fmt(&per_op[oi], 1)));
            }
            println!("{line}");
        }
        println!("(VampOS over Unikraft: getpid +21.0 µs (Noop), open 1.32×, read 1.23×; its gates are message passing between component threads. With `gates` (the default) only time, sysinfo and user are rebootable and every other gate only counts; with `gates+logs` (--recover-stateful) open, read, write and close cross vfs's armed gate and update its call log, getpid process's (its log of signal state, limits and IPC objects is brought up to date before each call), the sockets net's armed gate and its log (a copy of its live state after each call that touched it); the socket pair is AF_UNIX inside the kernel, the TCP connection the host's loopback through the tender.)");
    }
    if want("reboot") {
        println!();
        println!("Reboot time of each rebootable component (µs; from the reboot lines of --rejuvenate-every 0.005 runs of recover.c; mean ± SD, median, samples; vfs, ramfs, process and net rebuild their state from their log)");
        for ((t, per), failed) in reboots.iter().zip(&reboot_failed) {
            if let Some(why) = failed {
                println!("  {t:<4} FAILED: {why}");
                continue;
            }
            let cells: Vec<String> = COMPONENTS
                .iter()
                .enumerate()
                .map(|(ci, c)| format!("{c} {} (median {:.2}, n={})", fmt(&per[ci], 2), median(&per[ci]), per[ci].len()))
                .collect();
            println!("  {t:<4} {}", cells.join("   "));
        }
        println!("(goals: stateless ≤ 10 µs, stateful ≤ 1 ms; VampOS: PROCESS, stateless, 7.4 µs; its stateful components up to 48 ms)");
    }
    if want("sqlite") {
        println!();
        match &sqlite_build_failed {
            Some(why) => println!("SQLite 10,000 inserts: FAILED: {why}"),
            None => {
                println!("Fig. 7 SQLite, 10,000 inserts (autocommit, database file in memory: ramfs / tmpfs), whole run: wall and CPU seconds");
                for (si, (name, _)) in sys.iter().enumerate() {
                    match &sqlite_failed[si] {
                        Some(why) => println!("  {name:<15} FAILED: {why}"),
                        None => println!("  {name:<15} wall {:>18}   CPU {:>18}", fmt(&sqlite[si], 4), fmt(&sqlite_cpu[si], 4)),
                    }
                }
                for t in &tenders {
                    for (with, what) in [("gates", "gates (stateless components rebootable)"), ("gates+logs", "gates and logs (--recover-stateful)")] {
                        if let (Some(r), Some(c)) = (sqlite_ratio(t, with), sqlite_cpu_ratio(t, with)) {
                            println!("  {t}: with {what} / without = {r:.3} wall, {c:.3} CPU (target ≤ 1.10; VampOS-FSm 1.24, up to 1.46)");
                        }
                    }
                }
            }
        }
    }
    if let Some(srv) = &srv {
        println!();
        print!("{}", srv.text);
    }
    if let Some(sh) = &shrink {
        println!();
        print!("{}", sh.text);
    }
    println!();
    println!("CSV: {}{}", csv_path.display(), if plotted.is_ok() { format!("; plot: {}", svg.display()) } else { String::new() });
    println!("(a shared machine: timings are noisy; the cycle counts and the minimum-of-5 loops are the steadier numbers)");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_reboot_lines() {
        let err = "shoal: rebooted time in 0.4 µs (replayed 0 calls)\nother\nshoal: rebooted user in 12.5 µs (replayed 0 calls)\n";
        assert_eq!(super::reboot_times(err), vec![("time".to_string(), 0.4), ("user".to_string(), 12.5)]);
    }
}
