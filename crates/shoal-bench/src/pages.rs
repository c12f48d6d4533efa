//! `shoal bench pages`: the Spacer paper's memory comparison, statically. Builds
//! speedtest1 against 8 real SQLite versions under every layout policy and
//! counts the distinct code + rodata frames the 8 images need.

use crate::table::Table;
use anyhow::Result;
use serde_json::json;
use shoal_toolchain::pages::{analyse, PagesReport};
use shoal_toolchain::sqlite_versions::{build_policies, prepare_all, speedtest1_object};
use shoal_toolchain::Paths;
use std::path::{Path, PathBuf};

/// The policies compared, in table order.
pub const POLICIES: &[&str] = &["default", "dce", "aligned", "delta", "aslr", "default-aslr", "dce-aslr"];

/// Libraries whose pages change with the SQLite version by design.
fn versioned(lib: &str) -> bool {
    lib == "sqlite" || lib.starts_with("sqlite-delta") || lib == "tpl" || lib.starts_with("tpl-")
}

/// Whether every library that does not change with the version is fully
/// shared in `r`.
pub fn unchanged_fully_shared(r: &PagesReport) -> bool {
    r.libraries.iter().filter(|(n, _)| !versioned(n)).all(|(_, s)| s.fully_shared())
}

/// What whole-function deltas cannot go below on these versions.
struct DeltaFloor {
    /// Code + read-only data of base and every delta (from `delta.json`).
    bytes: u64,
    /// `bytes` in whole pages, as if packed without any gap.
    pages: u64,
    /// The delta policy's frames with the SQLite regions replaced by `pages`.
    frames: u64,
}

/// Reads the delta workspace's statistics: however the changed functions
/// are laid out, their bytes need at least this many pages.
fn delta_floor(root: &std::path::Path, reports: &[(&str, PagesReport)]) -> Result<DeltaFloor> {
    let file = shoal_toolchain::workspace::delta_dir(&root.join("delta").join("workspace.toml"), "sqlite").join("delta.json");
    let text = std::fs::read_to_string(&file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let objects = std::iter::once(&v["base"]).chain(v["deltas"].as_array().into_iter().flatten());
    let bytes: u64 = objects.map(|o| o["stats"]["text_bytes"].as_u64().unwrap_or(0) + o["stats"]["rodata_bytes"].as_u64().unwrap_or(0)).sum();
    let pages = bytes.div_ceil(4096);
    let delta = reports.iter().find(|(p, _)| *p == "delta").map(|(_, r)| r).ok_or_else(|| anyhow::anyhow!("no delta report"))?;
    let sqlite: u64 = delta.libraries.iter().filter(|(n, _)| *n == "sqlite" || n.starts_with("sqlite-delta")).map(|(_, s)| s.frames as u64).sum();
    Ok(DeltaFloor { bytes, pages, frames: (delta.total.frames as u64).saturating_sub(sqlite) + pages })
}

/// Writes `pages.csv` (one row per policy: pages, frames, default's and
/// dce's frames over its, whether the unchanged libraries are fully shared)
/// and `pages.svg` (the frames per policy) into `out`.
fn write_csv_and_plot(out: &Path, reports: &[(&str, PagesReport)]) {
    let frames = |name: &str| reports.iter().find(|(p, _)| *p == name).map(|(_, r)| r.total.frames as f64).unwrap_or(f64::NAN);
    let (def, dce) = (frames("default"), frames("dce"));
    let lines: Vec<String> = reports
        .iter()
        .map(|(p, r)| {
            let f = r.total.frames as f64;
            format!("{p},{},{},{:.2},{:.2},{}", r.total.pages, r.total.frames, def / f, dce / f, unchanged_fully_shared(r))
        })
        .collect();
    let header = "policy,pages,frames,default_over_this,dce_over_this,unchanged_libraries_fully_shared";
    let cats: Vec<String> = reports.iter().map(|(p, _)| p.to_string()).collect();
    let series = vec![crate::plot::BarSeries { name: "frames".into(), values: reports.iter().map(|(_, r)| Some((r.total.frames as f64, 0.0))).collect() }];
    let frame =
        crate::plot::Frame { title: "Distinct code + rodata frames of 8 images", x_desc: "layout policy", y_desc: "4 KiB frames", log_x: false, log_y: false };
    crate::write_csv_and_bars("pages", out, header, &lines, &frame, &cats, &series);
}

pub fn run(json_out: bool, out: &Path, keep: Option<PathBuf>) -> Result<()> {
    let paths = Paths::discover()?;
    let shoal = std::env::current_exe()?;
    if !json_out {
        eprintln!("shoal bench pages: fetching and compiling 8 SQLite versions (cached after the first run)…");
    }
    let versions = prepare_all(&paths, &shoal)?;
    let app = speedtest1_object(&paths, &shoal, &versions[0])?;
    let tmp = tempfile::tempdir()?;
    let root = keep.unwrap_or_else(|| tmp.path().to_path_buf());
    let mut reports = Vec::new();
    let started = |p: &str| {
        if !json_out {
            eprintln!("shoal bench pages: building 8 images with policy {p}…");
        }
    };
    for (p, images) in POLICIES.iter().zip(build_policies(&paths, &root, POLICIES, &versions, &app, &started)) {
        reports.push((*p, analyse(&images?)?));
    }
    let frames = |name: &str| reports.iter().find(|(p, _)| *p == name).map(|(_, r)| r.total.frames).unwrap_or(0);
    let (def, dce) = (frames("default") as f64, frames("dce") as f64);
    let floor = delta_floor(&root, &reports)?;
    write_csv_and_plot(out, &reports);
    if json_out {
        let mut pol = serde_json::Map::new();
        for (p, r) in &reports {
            let libs: serde_json::Map<_, _> =
                r.libraries.iter().map(|(k, v)| (k.clone(), json!({"pages": v.pages, "frames": v.frames, "fully_shared": v.fully_shared()}))).collect();
            pol.insert(
                p.to_string(),
                json!({
                    "frames": r.total.frames,
                    "pages": r.total.pages,
                    "frames_per_image_max": r.total.max_distinct_per_image,
                    "default_over_this": def / r.total.frames as f64,
                    "dce_over_this": dce / r.total.frames as f64,
                    "unchanged_libraries_fully_shared": unchanged_fully_shared(r),
                    "libraries": libs,
                }),
            );
        }
        let versions: Vec<&str> = versions.iter().map(|v| v.version.as_str()).collect();
        let floor =
            json!({"versioned_bytes": floor.bytes, "versioned_pages": floor.pages, "frames": floor.frames, "default_over_floor": def / floor.frames as f64});
        println!("{}", serde_json::to_string_pretty(&json!({"images": 8, "sqlite_versions": versions, "policies": pol, "delta_floor": floor}))?);
        return Ok(());
    }
    println!("shoal bench pages: speedtest1 linked against SQLite {}", versions.iter().map(|v| v.version.as_str()).collect::<Vec<_>>().join(", "));
    println!("distinct 4 KiB frames of code + rodata the 8 images need when identical pages are shared");
    let mut table = Table::new(["policy", "pages", "frames", "default/this", "dce/this", "unchanged libs shared"]);
    for (p, r) in &reports {
        table.row([
            p.to_string(),
            r.total.pages.to_string(),
            r.total.frames.to_string(),
            format!("{:.2}", def / r.total.frames as f64),
            format!("{:.2}", dce / r.total.frames as f64),
            (if unchanged_fully_shared(r) { "100%" } else { "no" }).to_string(),
        ]);
    }
    print!("{}", table.text());
    println!("the Spacer paper (memory of 8 versioned instances): Spacer-Δ needs 2.8× less than default and 2.5× less than DCE; with ASLR (aslr vs default-aslr, dce-aslr) 2× and 1.8×.");
    println!(
        "delta's floor: the code and read-only data of base and deltas (every function that differs, whole) fill {} KiB, {} pages if packed perfectly; \
         with the other libraries and tables as measured, no layout of whole-function deltas needs fewer than {} frames ({:.2}× below default; 3× would be {}).",
        floor.bytes / 1024,
        floor.pages,
        floor.frames,
        def / floor.frames as f64,
        (def / 3.0).floor()
    );
    let (da, ca) = (frames("default-aslr") as f64, frames("dce-aslr") as f64);
    if da > 0.0 && ca > 0.0 {
        let a = frames("aslr") as f64;
        println!("shoal, ASLR variants: aslr needs {:.2}× fewer frames than default-aslr and {:.2}× fewer than dce-aslr.", da / a, ca / a);
    }
    for policy in ["delta", "aslr"] {
        if let Some((_, r)) = reports.iter().find(|(p, _)| *p == policy) {
            println!("\nper library under {policy}:");
            print!("{}", r.table());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_toolchain::pages::Sharing;

    #[test]
    fn writes_csv_and_plot() {
        let dir = tempfile::tempdir().unwrap();
        let report =
            |pages, frames| PagesReport { images: 8, libraries: Default::default(), total: Sharing { images: 8, pages, frames, ..Default::default() } };
        let reports = [("default", report(800, 400)), ("dce", report(600, 300)), ("delta", report(500, 100))];
        write_csv_and_plot(dir.path(), &reports);
        let csv = std::fs::read_to_string(dir.path().join("pages.csv")).unwrap();
        assert_eq!(
            csv,
            "policy,pages,frames,default_over_this,dce_over_this,unchanged_libraries_fully_shared\n\
             default,800,400,1.00,0.75,true\n\
             dce,600,300,1.33,1.00,true\n\
             delta,500,100,4.00,3.00,true\n"
        );
        assert!(dir.path().join("pages.svg").is_file());
    }
}
