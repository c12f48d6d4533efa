//! `shoal bench syscall`: the cost of a system call through shoal (spt)
//! against a native process, and of many small console writes on spt, hvt
//! and natively.

use crate::host::{build_pair, kvm_usable};
use crate::stats::mean_sd;
use crate::table::Table;
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::path::Path;
use std::process::{Command, Stdio};

pub fn parse_kv(text: &str) -> Vec<(String, f64)> {
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

pub fn run_measure(cmd: &mut Command) -> Result<Vec<(String, f64)>> {
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

pub fn syscall(iterations: u64, repeat: usize, out: &Path, as_json: bool) -> Result<()> {
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
    write_csv_and_plot(out, &rows, &console);
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
    let mut table = Table::new(["operation (ns per call)", "native process", "shoal spt", "spt/native"]);
    for (l, nm, nsd, sm, ssd, r) in rows {
        table.row([l.to_string(), format!("{nm:.1} ± {nsd:.1}"), format!("{sm:.1} ± {ssd:.1}"), format!("{r:.3}")]);
    }
    print!("{}", table.text());
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
                    "hvt" => format!("{}  (target: at most 2× spt)", vs("spt")),
                    _ => String::new(),
                };
                println!("  {name:<8} {:>16}  {note}", format!("{m:.1} ± {sd:.1}"));
            }
            Err(why) => println!("  {name:<8} unavailable here: {why}"),
        }
    }
    println!("UKL replaces the syscall instruction by a function call; its echo server halves average latency.");
    Ok(())
}

/// One operation's row as printed: label, native mean and SD, spt mean and SD (ns per call), spt/native.
type OpRow = (&'static str, f64, f64, f64, f64, f64);

/// Writes `syscall.csv` and `syscall.svg` (ns per call per operation,
/// native beside spt) and `syscall-console.csv` and `.svg` (ms of the
/// console run per system; an unavailable system is left out) into `out`.
fn write_csv_and_plot(out: &Path, rows: &[OpRow], console: &[(&'static str, Runs)]) {
    use crate::plot::{BarSeries, Frame};
    let lines: Vec<String> = rows.iter().map(|(l, nm, nsd, sm, ssd, r)| format!("\"{l}\",{nm:.1},{nsd:.1},{sm:.1},{ssd:.1},{r:.3}")).collect();
    let header = "operation,native_mean_ns,native_sd_ns,spt_mean_ns,spt_sd_ns,spt_over_native";
    let cats: Vec<String> = rows.iter().map(|r| r.0.to_string()).collect();
    let series = vec![
        BarSeries { name: "native process".into(), values: rows.iter().map(|r| Some((r.1, r.2))).collect() },
        BarSeries { name: "shoal spt".into(), values: rows.iter().map(|r| Some((r.3, r.4))).collect() },
    ];
    let frame = Frame { title: "System call cost (mean ± SD)", x_desc: "operation", y_desc: "ns per call", log_x: false, log_y: false };
    crate::write_csv_and_bars("syscall", out, header, &lines, &frame, &cats, &series);
    let measured: Vec<(&str, f64, f64)> =
        console.iter().filter_map(|(n, r)| r.as_ref().ok().map(|xs| (*n, mean_sd(xs)))).map(|(n, (m, sd))| (n, m, sd)).collect();
    let lines: Vec<String> = measured.iter().map(|(n, m, sd)| format!("{n},{m:.2},{sd:.2}")).collect();
    let cats: Vec<String> = measured.iter().map(|r| r.0.to_string()).collect();
    let series = vec![BarSeries { name: "start to exit".into(), values: measured.iter().map(|r| Some((r.1, r.2))).collect() }];
    let title = format!("{CONSOLE_WRITES} console writes, start to exit (mean ± SD)");
    let frame = Frame { title: &title, x_desc: "system", y_desc: "ms", log_x: false, log_y: false };
    crate::write_csv_and_bars("syscall-console", out, "system,mean_ms,sd_ms", &lines, &frame, &cats, &series);
}

/// Console writes per run in `bench syscall`'s console section (the
/// measure of console cost: a program printing 20,000 short lines).
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
    fn parses_results() {
        let kv = parse_kv("noise\ngetpid=1.5 write=20.0");
        assert_eq!(kv, vec![("getpid".to_string(), 1.5), ("write".to_string(), 20.0)]);
    }

    #[test]
    fn writes_csv_and_plot() {
        let dir = tempfile::tempdir().unwrap();
        let rows = [("getpid()", 50.0, 1.5, 60.0, 2.0, 1.2), ("write(1 byte, file)", 400.0, 10.0, 200.0, 5.0, 0.5)];
        let console = [("native", Ok(vec![10.0, 12.0])), ("spt", Ok(vec![20.0, 20.0])), ("hvt", Err("no /dev/kvm".to_string()))];
        write_csv_and_plot(dir.path(), &rows, &console);
        let csv = std::fs::read_to_string(dir.path().join("syscall.csv")).unwrap();
        assert_eq!(
            csv,
            "operation,native_mean_ns,native_sd_ns,spt_mean_ns,spt_sd_ns,spt_over_native\n\"getpid()\",50.0,1.5,60.0,2.0,1.200\n\"write(1 byte, file)\",400.0,10.0,200.0,5.0,0.500\n"
        );
        let csv = std::fs::read_to_string(dir.path().join("syscall-console.csv")).unwrap();
        assert_eq!(csv, "system,mean_ms,sd_ms\nnative,11.00,1.41\nspt,20.00,0.00\n");
        assert!(dir.path().join("syscall.svg").is_file());
        assert!(dir.path().join("syscall-console.svg").is_file());
    }
}
