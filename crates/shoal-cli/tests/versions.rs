//! Spacer-Δ on real software: speedtest1 against 8 SQLite versions under
//! every layout policy gives the same output per version, the unchanged
//! libraries are fully shared under `aligned` and `delta`, and the `aslr`
//! layout keeps most code shared while the shuffled plain links share
//! nothing.
//!
//! The first run fetches the 8 `libsqlite3-sys` crates and compiles their
//! amalgamations (a few minutes on 2 cores); later runs use the cache.

mod common;
use common::*;
use shoal_toolchain::pages::analyse;
use shoal_toolchain::sqlite_versions::{build_policy, prepare_all, speedtest1_object};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// speedtest1's output with the timings (and the line naming the compiler)
/// masked.
fn mask(text: &str) -> String {
    text.lines()
        .map(|l| match l.rfind("...") {
            Some(i) if l.trim_end().ends_with('s') => l[..i].to_string(),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn speedtest1_runs_alike_under_every_version_and_policy() {
    let paths = shoal_toolchain::Paths::discover().unwrap();
    let shoal = PathBuf::from(env!("CARGO_BIN_EXE_shoal"));
    let versions = prepare_all(&paths, &shoal).unwrap();
    assert_eq!(versions.len(), 8);
    let app = speedtest1_object(&paths, &shoal, &versions[0]).unwrap();
    let dir = scratch();
    let mut outputs: BTreeMap<String, String> = BTreeMap::new();
    let mut reports = BTreeMap::new();
    for policy in ["default", "dce", "aligned", "delta", "aslr", "default-aslr", "dce-aslr"] {
        let images = build_policy(&paths, &dir.path().join(policy), policy, &versions, &app).unwrap();
        assert_eq!(images.len(), 8);
        for (v, img) in versions.iter().zip(&images) {
            let o = output(shoal_run("spt").args(["--mem", "128M"]).arg(img).args(["--", "--size", "3"]));
            assert_eq!(o.status.code(), Some(0), "{policy} {}: {}", v.version, stderr(&o));
            let out = mask(&stdout(&o));
            assert!(out.contains(&v.version), "{policy}: speedtest1 does not report SQLite {}: {out}", v.version);
            match outputs.get(&v.version) {
                None => {
                    outputs.insert(v.version.clone(), out);
                }
                Some(first) => assert_eq!(&out, first, "{policy} {}: output differs from the default policy's", v.version),
            }
        }
        reports.insert(policy, analyse(&images).unwrap());
    }
    for policy in ["aligned", "delta"] {
        let r = &reports[policy];
        for (lib, s) in &r.libraries {
            if lib == "sqlite" || lib.starts_with("sqlite-delta") || lib == "tpl" || lib.starts_with("tpl-") {
                continue;
            }
            assert!(s.fully_shared(), "{policy}: library {lib} is not fully shared: {s:?}");
        }
    }
    // Delta needs fewer frames than aligned, which needs fewer than default.
    let frames = |p: &str| reports[p].total.frames;
    assert!(frames("delta") < frames("aligned"), "delta {} vs aligned {}", frames("delta"), frames("aligned"));
    assert!(frames("aligned") < frames("default"), "aligned {} vs default {}", frames("aligned"), frames("default"));
    // ASLR: every image has its own layout, yet with a trampoline table per
    // library and position-independent code, SQLite's base (in all 8
    // images), the kernel and its runtime mostly keep their pages: far fewer frames than the
    // shuffled plain link, whose libraries share nothing.
    assert!(frames("aslr") < frames("default-aslr"), "aslr {} vs default-aslr {}", frames("aslr"), frames("default-aslr"));
    let aslr = &reports["aslr"];
    for lib in ["sqlite", "krt", "vfs"] {
        let s = &aslr.libraries[lib];
        assert!(s.frames * 2 < s.pages, "aslr: library {lib} shares less than half its pages: {s:?}");
    }
}
