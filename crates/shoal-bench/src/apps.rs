//! `shoal bench apps`: total execution time of the recipes' applications
//! (SQLite speedtest1, Lua sort, PCRE2 grep, matmul) on shoal spt, on shoal
//! hvt (when /dev/kvm is usable) and as native static musl programs built
//! from the same sources (the Spacer paper's Fig. 10–12).

use crate::progress::Progress;
use crate::stats::mean_sd;
use anyhow::{bail, Context, Result};
use serde_json::json;
use shoal_toolchain::recipe::{self, Side};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// Runs `cmd` with stdout captured; returns (wall seconds, stdout).
fn timed(cmd: &mut Command) -> Result<(f64, String)> {
    let t = Instant::now();
    let out = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).output().context("cannot start the program")?;
    let secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
        bail!("{} ({})", out.status, last.trim());
    }
    Ok((secs, String::from_utf8_lossy(&out.stdout).to_string()))
}

struct Row {
    name: String,
    native: Vec<f64>,
    /// Per memory mode, the spt runs.
    spt: Vec<(String, Vec<f64>)>,
    hvt: Vec<f64>,
    failure: Option<String>,
    same_output: bool,
}

/// Writes `apps.csv` (one row per application that ran: mean and SD in
/// seconds of native, spt per memory mode and hvt, each side over native)
/// and `apps.svg` (the means with their SD) into `out`.
fn write_csv_and_plot(out: &Path, modes: &[String], rows: &[Row]) {
    let measured: Vec<&Row> = rows.iter().filter(|r| r.failure.is_none()).collect();
    let mut header = "application,native_mean_s,native_sd_s".to_string();
    for m in modes {
        header.push_str(&format!(",spt_{m}_mean_s,spt_{m}_sd_s,spt_{m}_over_native"));
    }
    header.push_str(",hvt_mean_s,hvt_sd_s,hvt_over_native,same_output");
    let lines: Vec<String> = measured
        .iter()
        .map(|r| {
            let (nm, nsd) = mean_sd(&r.native);
            let mut line = format!("{},{nm:.3},{nsd:.3}", r.name);
            for (_, v) in &r.spt {
                let (sm, ssd) = mean_sd(v);
                line.push_str(&format!(",{sm:.3},{ssd:.3},{:.3}", sm / nm));
            }
            if r.hvt.is_empty() {
                line.push_str(",,,");
            } else {
                let (hm, hsd) = mean_sd(&r.hvt);
                line.push_str(&format!(",{hm:.3},{hsd:.3},{:.3}", hm / nm));
            }
            line.push_str(&format!(",{}", r.same_output));
            line
        })
        .collect();
    let cats: Vec<String> = measured.iter().map(|r| r.name.clone()).collect();
    let bar = |xs: &Vec<f64>| (!xs.is_empty()).then(|| mean_sd(xs));
    let mut series = vec![crate::plot::BarSeries { name: "native process".into(), values: measured.iter().map(|r| bar(&r.native)).collect() }];
    for (k, m) in modes.iter().enumerate() {
        series.push(crate::plot::BarSeries { name: format!("spt {m}"), values: measured.iter().map(|r| r.spt.get(k).and_then(|(_, v)| bar(v))).collect() });
    }
    if measured.iter().any(|r| !r.hvt.is_empty()) {
        series.push(crate::plot::BarSeries { name: "hvt copy".into(), values: measured.iter().map(|r| bar(&r.hvt)).collect() });
    }
    let frame = crate::plot::Frame { title: "Total execution time (mean ± SD)", x_desc: "application", y_desc: "seconds", log_x: false, log_y: false };
    crate::write_csv_and_bars("apps", out, &header, &lines, &frame, &cats, &series);
}

/// Builds recipe `r`'s image at `image` (and its native twin) and, if a
/// `pool` column is measured, adds the image to the library pool.
fn prepare(paths: &shoal_toolchain::Paths, r: &recipe::Recipe, image: &Path, shoal: &Path, modes: &[String]) -> Result<recipe::Built> {
    let built = recipe::build(paths, r, image)?;
    if modes.iter().any(|m| m == "pool") {
        let st = Command::new(shoal)
            .args(["pool", "add"])
            .arg(&built.image)
            .stdout(Stdio::null())
            .status()
            .with_context(|| format!("cannot run {} pool add", shoal.display()))?;
        if !st.success() {
            bail!("shoal pool add {} failed", built.image.display());
        }
    }
    Ok(built)
}

pub fn apps(repeat: usize, only: Vec<String>, mem_modes: Vec<String>, out: &Path, as_json: bool) -> Result<()> {
    let modes = if mem_modes.is_empty() { vec!["copy".to_string()] } else { mem_modes };
    if repeat < 2 {
        bail!("--repeat must be at least 2 (mean ± SD needs repeated runs; 5 or more is the default)");
    }
    let paths = shoal_toolchain::Paths::discover()?;
    let recipes = if only.is_empty() {
        // A recipe without benchmark arguments is an interactive program
        // (the SQLite shell reads its standard input): nothing to time.
        recipe::list(&paths)?.into_iter().filter(|r| !r.run.bench_args.is_empty()).collect()
    } else {
        only.iter().map(|n| recipe::load(&paths, n)).collect::<Result<Vec<_>, _>>()?
    };
    let shoal = std::env::current_exe()?;
    let work = tempfile::tempdir()?;
    // The native side's files live in memory too (tmpfs), as the instance's do (ramfs).
    let shm = Path::new("/dev/shm");
    let native_tmp = if shm.is_dir() { tempfile::tempdir_in(shm)? } else { tempfile::tempdir()? };
    let hvt = crate::host::kvm_usable();
    let mut rows = Vec::new();
    // Builds and timed runs of every recipe on every side.
    let progress = Progress::new("bench apps", recipes.len() as u64, as_json);
    for r in &recipes {
        progress.step();
        if !as_json {
            eprintln!("shoal bench apps: building {}", r.name);
        }
        let image = work.path().join(format!("{}.img", r.name));
        // A recipe that cannot be built or pooled is a failed row, as a
        // failed run is: the other recipes still give their results.
        let built = match prepare(&paths, r, &image, &shoal, &modes) {
            Ok(b) => b,
            Err(e) => {
                if !as_json {
                    eprintln!("shoal bench apps: warning: {} failed: {e:#}", r.name);
                }
                let spt = modes.iter().map(|m| (m.clone(), vec![])).collect();
                rows.push(Row { name: r.name.clone(), native: vec![], spt, hvt: vec![], failure: Some(format!("{e:#}")), same_output: true });
                continue;
            }
        };
        let n_inv = recipe::invocation(&paths, r, Side::Native, true, native_tmp.path());
        let s_inv = recipe::invocation(&paths, r, Side::Shoal, true, native_tmp.path());
        let mut row = Row {
            name: r.name.clone(),
            native: vec![],
            spt: modes.iter().map(|m| (m.clone(), vec![])).collect(),
            hvt: vec![],
            failure: None,
            same_output: true,
        };
        for i in 0..repeat {
            if !as_json {
                eprintln!("shoal bench apps: {} run {}/{repeat}", r.name, i + 1);
            }
            let n = timed(Command::new(&built.native).args(&n_inv.args).env_clear());
            let shoal_cmd = |tender: &str, mode: &str| {
                let mut cmd = Command::new(&shoal);
                cmd.args(["run", "--tender", tender, "--mem-mode", mode]).arg("--mem").arg(&s_inv.mem);
                if let Some(fs) = &s_inv.fs {
                    cmd.arg("--fs").arg(fs);
                }
                cmd.arg(&built.image).arg("--").args(&s_inv.args);
                cmd
            };
            let nout = match n {
                Ok((nt, nout)) => {
                    row.native.push(nt);
                    recipe::mask_timings(&nout)
                }
                Err(e) => {
                    row.failure = Some(format!("native run failed: {e}"));
                    break;
                }
            };
            let mut runs: Vec<(usize, &str, &str)> = modes.iter().enumerate().map(|(k, m)| (k, "spt", m.as_str())).collect();
            if hvt.is_ok() {
                runs.push((usize::MAX, "hvt", "copy"));
            }
            for (k, tender, mode) in runs {
                match timed(&mut shoal_cmd(tender, mode)) {
                    Ok((t, out)) => {
                        if k == usize::MAX {
                            row.hvt.push(t);
                        } else {
                            row.spt[k].1.push(t);
                        }
                        if recipe::mask_timings(&out) != nout {
                            row.same_output = false;
                        }
                    }
                    Err(e) => {
                        row.failure = Some(format!("shoal run --tender {tender} --mem-mode {mode} failed: {e}"));
                        break;
                    }
                }
            }
            if row.failure.is_some() {
                break;
            }
        }
        rows.push(row);
    }
    drop(progress);
    if rows.iter().all(|r| r.failure.is_some()) {
        let reasons: Vec<String> = rows.iter().map(|r| format!("{}: {}", r.name, r.failure.as_deref().unwrap_or(""))).collect();
        return Err(crate::BenchError::nothing_measured("apps", &reasons).into());
    }
    write_csv_and_plot(out, &modes, &rows);
    if as_json {
        let mut results = serde_json::Map::new();
        for r in &rows {
            let (nm, nsd) = mean_sd(&r.native);
            let hvt_json = match &hvt {
                Ok(()) => {
                    let (hm, hsd) = mean_sd(&r.hvt);
                    json!({"mean": hm, "sd": hsd, "runs": r.hvt, "ratio_over_native": hm / nm})
                }
                Err(why) => json!({"unavailable": why}),
            };
            let mut spt = serde_json::Map::new();
            for (m, v) in &r.spt {
                let (sm, ssd) = mean_sd(v);
                spt.insert(m.clone(), json!({"mean": sm, "sd": ssd, "runs": v, "ratio_over_native": sm / nm}));
            }
            let (sm, ssd) = mean_sd(&r.spt[0].1);
            results.insert(
                r.name.clone(),
                json!({
                    "native_s": {"mean": nm, "sd": nsd, "runs": r.native},
                    "spt_s": {"mean": sm, "sd": ssd, "runs": r.spt[0].1, "mem_mode": r.spt[0].0},
                    "spt_by_mem_mode_s": spt,
                    "hvt_s": hvt_json,
                    "ratio_spt_over_native": sm / nm,
                    "same_output": r.same_output,
                    "failure": r.failure,
                }),
            );
        }
        println!("{}", serde_json::to_string_pretty(&json!({"repeat": repeat, "results": results}))?);
        return Ok(());
    }
    println!("shoal bench apps: total execution time in seconds, {repeat} runs of each, all sides alternating, full sizes");
    if let Err(why) = &hvt {
        println!("hvt: unavailable here: {why}");
    }
    let mut header = format!("{:<20} {:>18}", "application", "native process");
    for m in &modes {
        header.push_str(&format!(" {:>18} {:>8}", format!("spt {m}"), "/native"));
    }
    header.push_str(&format!(" {:>18} {:>8}", "hvt copy", "/native"));
    println!("{header}");
    for r in &rows {
        if let Some(f) = &r.failure {
            println!("{:<20} {f}", r.name);
            continue;
        }
        let (nm, nsd) = mean_sd(&r.native);
        let mut line = format!("{:<20} {:>18}", r.name, format!("{nm:.3} ± {nsd:.3}"));
        for (_, v) in &r.spt {
            let (sm, ssd) = mean_sd(v);
            line.push_str(&format!(" {:>18} {:>8.3}", format!("{sm:.3} ± {ssd:.3}"), sm / nm));
        }
        if r.hvt.is_empty() {
            line.push_str(&format!(" {:>18} {:>8}", "-", "-"));
        } else {
            let (hm, hsd) = mean_sd(&r.hvt);
            line.push_str(&format!(" {:>18} {:>8.3}", format!("{hm:.3} ± {hsd:.3}"), hm / nm));
        }
        if !r.same_output {
            line.push_str("  (outputs differ!)");
        }
        println!("{line}");
    }
    println!("(wall time of the whole run: `shoal run` including the tender's start, vs. the native process; files in ramfs vs. tmpfs.)");
    println!("(target: ratio ≤ 1.05. matmul uses 2 threads natively on 2 cores but shoal schedules its threads on one vCPU; short runs such as lua's are dominated by the tender's start-up.)");
    if modes.len() > 1 {
        println!("(the Spacer paper: its loader with the library pool ran 7–12% faster than KSM-based configurations; ksm here only marks memory mergeable: whether ksmd runs is /sys/kernel/mm/ksm/run.)");
    }
    Ok(())
}

#[cfg(test)]
mod csv_tests {
    use super::*;

    #[test]
    fn writes_csv_and_plot() {
        let dir = tempfile::tempdir().unwrap();
        let row = |name: &str, hvt: Vec<f64>, failure: Option<String>| Row {
            name: name.into(),
            native: vec![1.0, 3.0],
            spt: vec![("copy".into(), vec![2.0, 2.0])],
            hvt,
            failure,
            same_output: true,
        };
        let rows = [row("sqlite", vec![4.0, 4.0], None), row("lua", vec![], None), row("pcre2", vec![], Some("failed".into()))];
        write_csv_and_plot(dir.path(), &["copy".to_string()], &rows);
        let csv = std::fs::read_to_string(dir.path().join("apps.csv")).unwrap();
        assert_eq!(
            csv,
            "application,native_mean_s,native_sd_s,spt_copy_mean_s,spt_copy_sd_s,spt_copy_over_native,hvt_mean_s,hvt_sd_s,hvt_over_native,same_output\n\
             sqlite,2.000,1.414,2.000,0.000,1.000,4.000,0.000,2.000,true\n\
             lua,2.000,1.414,2.000,0.000,1.000,,,,true\n"
        );
        assert!(dir.path().join("apps.svg").is_file());
    }
}
