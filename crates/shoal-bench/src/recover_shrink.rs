//! `shoal bench recover --only shrink-threshold`: VampOS's Table IV (seed
//! 003) on shoal — the log-shrink threshold against the log's memory and
//! the cost of the calls that feed it.
//!
//! VampOS appends a log entry per call and shrinks the entries of closed
//! sessions when the log reaches a threshold (default 100; its Table IV:
//! SQLite 138.57 / 143.57 / 144.28 req/s at 20 / 100 / 1000). shoal's log
//! holds the live state instead and drops a closed session at its close
//! (threshold 1); `shoal run --log-shrink N|never` keeps closed sessions'
//! records until N are pending, as VampOS does. Per tender and threshold
//! (1, 20, 100, 1000, never) this runs, with `--log-report` (the log's
//! size when the instance ends):
//! - `apps/bench/recover.c` (its open and close loops open and close a
//!   file 5 × `--iterations` times: a workload that opens many
//!   descriptors): cycles per open and per close (lowest of 5 loops), and
//!   the log's bytes and entries at exit;
//! - SQLite's 10,000 autocommit inserts (each opens and closes its
//!   journal): CPU seconds of the whole run and the log at exit.

use crate::stats::{fmt, mean_sd};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

/// The thresholds measured (`--log-shrink` values).
const THRESHOLDS: [&str; 5] = ["1", "20", "100", "1000", "never"];

/// VampOS's Table IV, SQLite req/s, by threshold.
fn vampos_sqlite(t: &str) -> Option<f64> {
    match t {
        "20" => Some(138.57),
        "100" => Some(143.57),
        "1000" => Some(144.28),
        _ => None,
    }
}

/// What the part needs.
pub struct Opts<'a> {
    pub repeat: usize,
    pub iterations: u64,
    pub shoal: &'a Path,
    pub tenders: &'a [&'static str],
    pub quiet: bool,
    /// `apps/bench/recover.c` built as an image.
    pub bench_image: &'a Path,
    /// The `sqlite-shell` image and the statements it reads, if built.
    pub sqlite: Option<(&'a Path, &'a Path)>,
}

/// Results: JSON fields, CSV rows (`experiment,system,measure,run,value`)
/// and the text table.
pub struct Report {
    pub json: serde_json::Map<String, Value>,
    pub csv: String,
    pub text: String,
}

/// One measured configuration's samples.
#[derive(Default)]
struct Cell {
    open: Vec<f64>,
    close: Vec<f64>,
    log_bytes: Vec<f64>,
    log_entries: Vec<f64>,
    sqlite_cpu: Vec<f64>,
    sqlite_log: Vec<f64>,
    failed: Option<String>,
}

/// The bytes and entries of the last `shoal: recovery log at exit:
/// vfs+ramfs B bytes, E entries …` line in `err`.
pub(super) fn log_at_exit(err: &str) -> Option<(f64, f64)> {
    let line = err.lines().rev().find_map(|l| l.strip_prefix("shoal: recovery log at exit: vfs+ramfs "))?;
    let mut w = line.split_whitespace();
    let bytes = w.next()?.parse().ok()?;
    w.next()?;
    let entries = w.next()?.parse().ok()?;
    Some((bytes, entries))
}

fn measure(o: &Opts, tender: &str, threshold: &str, c: &mut Cell) -> Result<()> {
    let flags = ["run", "--tender", tender, "--log-shrink", threshold, "--log-report"];
    let out = Command::new(o.shoal)
        .args(flags)
        .arg(o.bench_image)
        .arg("--")
        .arg(o.iterations.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("cannot start shoal run")?;
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("recover.c failed ({}): {}", out.status, err.trim());
    }
    // The program's line (the log's report follows it).
    let kv = crate::syscall::parse_kv(err.lines().find(|l| l.contains("open_cyc=")).unwrap_or(""));
    let get = |k: &str| kv.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let (Some(open), Some(close), Some((bytes, entries))) = (get("open_cyc"), get("close_cyc"), log_at_exit(&err)) else {
        bail!("recover.c's output lacks open, close or the log's size: {}", err.trim());
    };
    c.open.push(open);
    c.close.push(close);
    c.log_bytes.push(bytes);
    c.log_entries.push(entries);
    if let Some((image, script)) = o.sqlite {
        let input = fs::File::open(script).with_context(|| format!("cannot open {}", script.display()))?;
        let cpu0 = crate::sample::children_cpu();
        let out = Command::new(o.shoal)
            .args(flags)
            .arg(image)
            .args(["--", "/tmp/bench.db"])
            .stdin(Stdio::from(input))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .context("cannot start sqlite3")?;
        let cpu = crate::sample::children_cpu() - cpu0;
        let err = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || String::from_utf8_lossy(&out.stdout).trim() != "10000" {
            bail!("sqlite3 failed ({}): {}", out.status, err.trim());
        }
        let Some((bytes, _)) = log_at_exit(&err) else { bail!("sqlite3's run did not report its log: {}", err.trim()) };
        c.sqlite_cpu.push(cpu);
        c.sqlite_log.push(bytes);
    }
    Ok(())
}

/// Runs the part.
pub fn run(o: &Opts) -> Report {
    let mut cells: Vec<Vec<Cell>> = o.tenders.iter().map(|_| THRESHOLDS.iter().map(|_| Cell::default()).collect()).collect();
    for rep in 0..o.repeat {
        if !o.quiet {
            eprintln!("shoal bench recover: log-shrink thresholds, run {}/{}", rep + 1, o.repeat);
        }
        for (ti, t) in o.tenders.iter().enumerate() {
            for (hi, h) in THRESHOLDS.iter().enumerate() {
                let c = &mut cells[ti][hi];
                if c.failed.is_some() {
                    continue;
                }
                if let Err(e) = measure(o, t, h, c) {
                    c.failed = Some(format!("{e:#}"));
                }
            }
        }
    }
    let mut csv = String::new();
    let mut js = serde_json::Map::new();
    let mut text = format!(
        "Table IV, log-shrink threshold (shoal run --log-shrink N; shoal's default 1 drops a closed session at close, VampOS's 100): per call of recover.c's open/close loops ({} × 5 opens; cycles, lowest of 5 loops), its log at exit, SQLite 10,000 inserts (CPU s, log at exit); mean ± SD of {} runs\n",
        o.iterations, o.repeat
    );
    text.push_str(&format!(
        "  {:<4} {:>9} {:>16} {:>16} {:>20} {:>14} {:>18} {:>20} {:>14}\n",
        "", "threshold", "open (cycles)", "close (cycles)", "log (bytes)", "log (entries)", "SQLite CPU (s)", "SQLite log (bytes)", "VampOS req/s"
    ));
    for (ti, t) in o.tenders.iter().enumerate() {
        let mut per = serde_json::Map::new();
        for (hi, h) in THRESHOLDS.iter().enumerate() {
            let c = &cells[ti][hi];
            let sys = format!("{t} shrink {h}");
            for (measure, v) in [
                ("open_cycles", &c.open),
                ("close_cycles", &c.close),
                ("log_bytes", &c.log_bytes),
                ("log_entries", &c.log_entries),
                ("sqlite_cpu_s", &c.sqlite_cpu),
                ("sqlite_log_bytes", &c.sqlite_log),
            ] {
                for (r, x) in v.iter().enumerate() {
                    csv.push_str(&format!("shrink_threshold,{sys},{measure},{},{x}\n", r + 1));
                }
            }
            let vampos = vampos_sqlite(h).map_or("-".to_string(), |v| format!("{v:.2}"));
            if let Some(why) = &c.failed {
                text.push_str(&format!("  {t:<4} {h:>9} FAILED: {why}\n"));
                per.insert(h.to_string(), json!({"failed": why}));
                continue;
            }
            text.push_str(&format!(
                "  {t:<4} {h:>9} {:>16} {:>16} {:>20} {:>14} {:>18} {:>20} {:>14}\n",
                fmt(&c.open, 1),
                fmt(&c.close, 1),
                fmt(&c.log_bytes, 0),
                fmt(&c.log_entries, 0),
                fmt(&c.sqlite_cpu, 4),
                fmt(&c.sqlite_log, 0),
                vampos
            ));
            let mj = |v: &Vec<f64>| {
                let (m, sd) = mean_sd(v);
                json!({"mean": m, "sd": sd, "runs": v})
            };
            per.insert(
                h.to_string(),
                json!({"open_cycles": mj(&c.open), "close_cycles": mj(&c.close), "log_bytes": mj(&c.log_bytes), "log_entries": mj(&c.log_entries), "sqlite_cpu_s": mj(&c.sqlite_cpu), "sqlite_log_bytes": mj(&c.sqlite_log), "vampos_sqlite_req_s": vampos_sqlite(h)}),
            );
        }
        js.insert(t.to_string(), Value::Object(per));
    }
    if o.sqlite.is_none() {
        text.push_str("  (SQLite: not built, see the SQLite part's message)\n");
    }
    let mut json = serde_json::Map::new();
    json.insert("shrink_threshold".into(), Value::Object(js));
    Report { json, csv, text }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_log_report() {
        let err = "x\nshoal: recovery log at exit: vfs+ramfs 7488 bytes, 17 entries (319531 calls logged, 4 closed sessions pending, 200 shrinks)\n";
        assert_eq!(log_at_exit(err), Some((7488.0, 17.0)));
        assert_eq!(log_at_exit("shoal: recovery log at exit: vfs+ramfs x"), None);
        assert_eq!(log_at_exit(""), None);
    }
}
