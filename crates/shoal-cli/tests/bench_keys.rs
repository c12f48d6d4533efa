//! `shoal bench … --json` keeps its keys: the key paths of one quick run of
//! each experiment, saved in `tests/bench_keys/NAME.txt` from the build
//! before the experiments moved into the crate shoal-bench, are compared
//! with those of this build.
//!
//! A key path is the chain of object keys from the top, `/`-separated, with
//! every array element written `[]`. A system or configuration that is
//! `{"unavailable": …}` or `{"failed": …}` in either run is compared only up
//! to that point (what was measured below it depends on the machine's day,
//! not on the code). `SHOAL_BLESS_BENCH_KEYS=1` writes the files anew
//! instead of comparing, from the `shoal` binary named by
//! `SHOAL_BENCH_KEYS_SHOAL` when set (a copy of an older build, so that a
//! build running meanwhile cannot replace it), else from this build (see
//! tests/bench_keys/README.md).

mod common;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Mutex;

/// One bench at a time: they measure the machine and share caches.
static SERIAL: Mutex<()> = Mutex::new(());

/// The marker a missing system leaves in a key set.
const MISSING: &str = "{missing}";

fn key_paths(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if m.len() == 1 && (m.contains_key("unavailable") || m.contains_key("failed")) {
                out.insert(format!("{prefix}{MISSING}"));
                return;
            }
            for (k, x) in m {
                let p = format!("{prefix}/{k}");
                out.insert(p.clone());
                key_paths(x, &p, out);
            }
        }
        Value::Array(xs) => {
            for x in xs {
                key_paths(x, &format!("{prefix}/[]"), out);
            }
        }
        _ => {}
    }
}

fn fixture(name: &str) -> PathBuf {
    home().join("crates/shoal-cli/tests/bench_keys").join(format!("{name}.txt"))
}

/// Runs `shoal bench ARGS…` in a fresh directory and compares its key set
/// with the fixture `name`.
fn check(name: &str, args: &[&str]) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let mut cmd = match std::env::var_os("SHOAL_BENCH_KEYS_SHOAL") {
        Some(bin) => std::process::Command::new(bin),
        None => shoal(),
    };
    let o = output(cmd.current_dir(tmp.path()).arg("bench").args(args));
    assert_eq!(o.status.code(), Some(0), "shoal bench {name} failed: {}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("shoal bench {name}: stdout is not JSON ({e}): {}", stdout(&o)));
    let mut now = BTreeSet::new();
    key_paths(&v, "", &mut now);
    let path = fixture(name);
    if std::env::var_os("SHOAL_BLESS_BENCH_KEYS").is_some() {
        let text: String = now.iter().map(|p| format!("{p}\n")).collect();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let before: BTreeSet<String> = text.lines().map(str::to_string).collect();
    let missing_at: Vec<String> = before.iter().chain(&now).filter_map(|p| p.strip_suffix(MISSING)).map(str::to_string).collect();
    let compared = |p: &&String| !missing_at.iter().any(|m| p.starts_with(m.as_str()));
    let gone: Vec<&String> = before.difference(&now).filter(compared).collect();
    let new: Vec<&String> = now.difference(&before).filter(compared).collect();
    assert!(gone.is_empty() && new.is_empty(), "shoal bench {name}: keys gone {gone:#?}, keys new {new:#?}");
}

#[test]
fn keys_memory() {
    check("memory", &["memory", "--only", "default+copy", "--interval", "0.1", "--settle", "0.5", "--json"]);
}

#[test]
fn keys_size() {
    check("size", &["size", "--json"]);
}

#[test]
fn keys_pages() {
    check("pages", &["pages", "--json"]);
}

#[test]
fn keys_boot() {
    check("boot", &["boot", "--runs", "1", "--json"]);
}

#[test]
fn keys_syscall() {
    check("syscall", &["syscall", "--iterations", "1000", "--repeat", "1", "--json"]);
}

#[test]
fn keys_exec() {
    check("exec", &["exec", "--quick", "--json"]);
}

#[test]
fn keys_dyn() {
    check("dyn", &["dyn", "--repeat", "1", "--instances", "2", "--duration", "1", "--json"]);
}

#[test]
fn keys_recover() {
    check("recover", &["recover", "--iterations", "500", "--repeat", "2", "--only", "syscalls,reboot,sqlite", "--json"]);
}

#[test]
fn keys_recover_servers() {
    let args = ["recover", "--repeat", "2", "--only", "servers,nginx-reboot,rejuvenation,redis-latency", "--duration", "1", "--requests", "2000", "--json"];
    check("recover_servers", &args);
}

#[test]
fn keys_density() {
    check("density", &["density", "--count", "2", "--json"]);
}

#[test]
fn keys_apps() {
    check("apps", &["apps", "--only", "lua", "--repeat", "2", "--json"]);
}

#[test]
fn keys_echo() {
    check("echo", &["echo", "--round-trips", "200", "--repeat", "1", "--json"]);
}

#[test]
fn keys_faas() {
    let args = ["faas", "--backends", "spt,process", "--repeat", "2", "--requests", "64", "--max-clients", "2", "--bursts", "2", "--instances", "1", "--json"];
    check("faas", &args);
}

#[test]
fn keys_http() {
    check("http", &["http", "--repeat", "1", "--clients", "1,10", "--systems", "native,spt", "--duration", "1", "--json"]);
}

#[test]
fn keys_kv() {
    check("kv", &["kv", "--repeat", "1", "--clients", "1,10", "--systems", "native,spt", "--requests", "2000", "--json"]);
}
