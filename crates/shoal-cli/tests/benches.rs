//! Every `shoal bench` works as documented from any working
//! directory, and a bench in which every configuration fails exits non-zero.
//!
//! Each test runs one bench's quickest mode (fewest runs, one configuration,
//! short intervals) with `--json` from a fresh temporary directory that has
//! nothing of the repository in it, and checks that the JSON holds real
//! measurements. `bench memory` and `bench size` use their default, relative
//! `--out`; `bench pages` a relative `--keep`: a relative directory used to
//! be resolved twice (once here, once against the workspace file inside it),
//! so nothing was built and the benches printed empty results with status 0.
//!
//! The benches use what `scripts/setup` prepares (the recipes' sources) and
//! the SQLite versions `tests/versions.rs` compiles too; with those cached
//! the whole file takes well under a minute. A bench reports a system it
//! cannot run here (hvt without KVM, runc and runsc without root or
//! installed) as unavailable and one that failed as failed: here a failed
//! system fails the test, and an unavailable one is a skip through
//! shoal_testkit with the feature it lacks (so a failure too when
//! SHOAL_REQUIRE says the machine has that feature).
//!
//! Each run also checks that `--json` keeps its keys: the key paths of the
//! JSON are compared with those saved in `tests/bench_keys/NAME.txt` (see
//! its README). A key path is the chain of object keys from the top,
//! `/`-separated, with every array element written `[]`; a system or
//! configuration that is `{"unavailable": …}` or `{"failed": …}` in either
//! is compared only up to that point (what was measured below it depends on
//! the machine's day, not on the code). One run serves both checks: the
//! benches are the longest part of the suite.

mod common;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Mutex;

/// One bench at a time: the SQLite-based benches fill the same cache (a
/// first run compiles it), and they all measure the machine.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `shoal bench ARGS…` in `dir`: with the `shoal` binary named by
/// `SHOAL_BENCH_KEYS_SHOAL` when set (a copy of an older build whose keys
/// are being recorded, so that a build running meanwhile cannot replace
/// it), else this build's.
fn bench(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = match std::env::var_os("SHOAL_BENCH_KEYS_SHOAL") {
        Some(bin) => std::process::Command::new(bin),
        None => shoal(),
    };
    let t0 = std::time::Instant::now();
    let out = output(cmd.current_dir(dir).arg("bench").args(args));
    // Seen with --nocapture: what each bench costs the suite's budget.
    eprintln!("bench {} took {:.1} s", args.join(" "), t0.elapsed().as_secs_f64());
    out
}

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

/// Compares the key set of `v` with the fixture `name`, or writes the
/// fixture anew when `SHOAL_BLESS_BENCH_KEYS` is set.
fn keys_kept(name: &str, v: &Value) {
    let mut now = BTreeSet::new();
    key_paths(v, "", &mut now);
    let path: PathBuf = home().join("crates/shoal-cli/tests/bench_keys").join(format!("{name}.txt"));
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

/// The JSON a successful bench printed.
fn json_of(what: &str, o: &Output) -> Value {
    assert_eq!(o.status.code(), Some(0), "shoal bench {what} failed: {}", stderr(o));
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("shoal bench {what}: stdout is not JSON ({e}): {}", stdout(o)))
}

/// Whether the system (or configuration) at `path` in `v` was measured:
/// a failed one fails the test; an unavailable one is a skip for the first
/// of `needs` this machine lacks (a failure if it lacks none, or if
/// SHOAL_REQUIRE names it).
fn measured(v: &Value, path: &str, needs: &[&str]) -> bool {
    let sys = v.pointer(path).unwrap_or_else(|| panic!("nothing at {path} in {v:#}"));
    if let Some(why) = sys.get("failed") {
        panic!("{path} failed: {why}");
    }
    let Some(why) = sys.get("unavailable") else {
        return true;
    };
    match needs.iter().find(|f| shoal_testkit::probe(f).is_err()) {
        Some(f) => {
            shoal_testkit::skip(f, &format!("{path} is unavailable here: {why}"));
            false
        }
        None => panic!("{path} is unavailable ({why}), yet this machine has all it needs ({needs:?})"),
    }
}

/// A number in `v` at `path` that is a real measurement: finite and above 0.
fn positive(v: &Value, path: &str) -> f64 {
    let x = v.pointer(path).and_then(Value::as_f64).unwrap_or_else(|| panic!("no number at {path} in {v:#}"));
    assert!(x.is_finite() && x > 0.0, "{path} = {x} is not a measurement in {v:#}");
    x
}

#[test]
fn bench_memory_default_out_from_any_directory() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let o = bench(tmp.path(), &["memory", "--only", "default+copy", "--interval", "0.1", "--settle", "0.5", "--json"]);
    let v = json_of("memory", &o);
    keys_kept("memory", &v);
    positive(&v, "/configs/default+copy/final_mib");
    positive(&v, "/configs/default+copy/pss_mib");
    assert_eq!(v.pointer("/configs/default+copy/instances_alive_at_end").and_then(Value::as_u64), Some(8), "{v:#}");
    // The default --out is relative to where shoal was started, once.
    let out = tmp.path().join("shoal-bench-memory");
    assert!(out.join("memory.csv").is_file() && out.join("memory.svg").is_file(), "no CSV or plot in {}", out.display());
    assert!(out.join("images/default/idle-3.35.4").is_file(), "no images in {}", out.display());
    assert_eq!(v["csv"].as_str().map(Path::new), Some(out.join("memory.csv").as_path()));
    assert_eq!(v["failed"].as_object().map(|f| f.len()), Some(0), "{v:#}");
}

#[test]
fn bench_memory_where_every_configuration_fails_exits_non_zero() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    // 1 KiB of guest memory: every instance refuses to start.
    let o = bench(tmp.path(), &["memory", "--only", "default+copy", "--interval", "0.1", "--settle", "0.3", "--mem", "1K", "--json"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(125), "expected shoal's error status; stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(stdout(&o).trim().is_empty(), "a failed bench printed a result: {}", stdout(&o));
    // Warnings may come first; the error is one `shoal:` line, the last.
    let shoal_lines: Vec<&str> = err.lines().filter(|l| l.starts_with("shoal: ")).collect();
    assert_eq!(shoal_lines.len(), 1, "expected one error line: {err}");
    assert_eq!(err.lines().last(), Some(shoal_lines[0]));
    assert!(shoal_lines[0].contains("bench memory: nothing could be measured") && shoal_lines[0].contains("too small"), "{err}");
}

#[test]
fn bench_size_default_out_from_any_directory() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let v = json_of("size", &bench(tmp.path(), &["size", "--json"]));
    keys_kept("size", &v);
    for c in ["default", "dce", "delta+ksm", "delta+pool", "default-aslr", "dce-aslr", "aslr+ksm", "aslr+pool"] {
        positive(&v, &format!("/configs/{c}/images_mib"));
    }
    positive(&v, "/configs/delta+pool/pool_mib");
    assert_eq!(v["failed"].as_array().map(Vec::len), Some(0), "{v:#}");
    assert!(tmp.path().join("shoal-bench-size/images/default").is_dir());
}

/// `bench pages` has no configuration to pick: its quickest mode is the
/// whole bench (7 policies × 8 images from the cached SQLite objects, about
/// 20 s), which is short enough to run here.
#[test]
fn bench_pages_relative_keep_from_any_directory() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let v = json_of("pages", &bench(tmp.path(), &["pages", "--json", "--keep", "kept"]));
    keys_kept("pages", &v);
    for p in ["default", "dce", "aligned", "delta", "aslr", "default-aslr", "dce-aslr"] {
        positive(&v, &format!("/policies/{p}/frames"));
    }
    positive(&v, "/delta_floor/frames");
    assert!(tmp.path().join("kept/delta/workspace.toml").is_file(), "--keep kept was not kept in the working directory");
}

#[test]
fn bench_boot_from_any_directory() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let v = json_of("boot", &bench(tmp.path(), &["boot", "--runs", "1", "--json"]));
    keys_kept("boot", &v);
    for s in ["spt", "native"] {
        positive(&v, &format!("/systems/{s}/first_byte_ms/median"));
        positive(&v, &format!("/systems/{s}/exit_ms/median"));
    }
    // The others run only with KVM, root and the runtimes.
    let needs: &[(&str, &[&str])] = &[
        ("tender-spt", &[]),
        ("floor", &[]),
        ("hvt", &["kvm"]),
        ("tender-hvt", &["kvm"]),
        ("tender-spt-user", &["root"]),
        ("floor-ns", &["root"]),
        ("runc", &["runc", "root"]),
        ("runsc", &["runsc", "root"]),
    ];
    for (s, features) in needs {
        if measured(&v, &format!("/systems/{s}"), features) {
            positive(&v, &format!("/systems/{s}/first_byte_ms/median"));
        }
    }
    assert_eq!(v["systems"].as_object().map(|m| m.len()), Some(needs.len() + 2), "a system this test does not know: {v:#}");
}

#[test]
fn bench_syscall_from_any_directory() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let v = json_of("syscall", &bench(tmp.path(), &["syscall", "--iterations", "1000", "--repeat", "1", "--json"]));
    keys_kept("syscall", &v);
    for op in ["getpid", "write", "filewrite"] {
        positive(&v, &format!("/results/{op}/native_ns/mean"));
        positive(&v, &format!("/results/{op}/spt_ns/mean"));
    }
    for system in ["native", "spt"] {
        positive(&v, &format!("/console_20000_writes/{system}/mean_ms"));
    }
    if measured(&v, "/console_20000_writes/hvt", &["kvm"]) {
        positive(&v, "/console_20000_writes/hvt/mean_ms");
    }
}

/// The quick `bench exec`: getpid through a rewritten site, the trap path
/// and natively, clock_gettime through the vDSO and the system call, and (with Go) the Go server's throughput, first byte
/// and idle memory on spt, spt with only pairs rewritten, and natively;
/// its CSV written to the default relative `--out`.
#[test]
fn bench_exec_quick() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let v = json_of("exec", &bench(tmp.path(), &["exec", "--quick", "--json"]));
    keys_kept("exec", &v);
    for k in ["rewritten_ns", "trap_ns", "native_ns"] {
        positive(&v, &format!("/getpid/{k}/mean"));
    }
    for k in ["vdso_ns", "syscall_ns", "native_vdso_ns", "native_syscall_ns"] {
        positive(&v, &format!("/clock_gettime/{k}/mean"));
    }
    assert!(tmp.path().join("shoal-bench-exec/exec.csv").is_file(), "no CSV written");
    if measured(&v, "/go_http", &["go"]) {
        for c in ["1", "50"] {
            for k in ["spt_rps", "spt_pairs_rps", "native_rps"] {
                positive(&v, &format!("/go_http/rps/{c}/{k}/mean"));
            }
        }
        for s in ["spt", "spt-pairs", "native"] {
            positive(&v, &format!("/go_http/first_byte/{s}/median_ms"));
            positive(&v, &format!("/go_http/idle_pss/{s}/median_kib"));
        }
        let rewritten = v.pointer("/go_http/sites/rewritten").and_then(Value::as_u64).unwrap_or(0);
        let pairs = v.pointer("/go_http/sites/rewritten_pairs_only").and_then(Value::as_u64).unwrap_or(0);
        assert!(rewritten > pairs, "moving instructions rewrites more of Go's sites: {v:#}");
    }
}

/// The smallest `bench dyn`: node and python3.11 start → exit, their HTTP
/// hellos and idle memory measured on spt, spt-pool, hvt (where KVM is)
/// and natively, with the default relative `--out` (its CSV written
/// there). One run, two idle Node instances, 1-second wrk runs: about 40
/// seconds here.
#[test]
fn bench_dyn_smallest() {
    if !shoal_testkit::need(&["root", "node", "python3.11"]) {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let v = json_of("dyn", &bench(tmp.path(), &["dyn", "--repeat", "1", "--instances", "2", "--duration", "1", "--json"]));
    keys_kept("dyn", &v);
    for (sys, needs) in [("spt", &[][..]), ("spt-pool", &[][..]), ("hvt", &["kvm"][..]), ("native", &[][..])] {
        for rt in ["node", "python"] {
            if measured(&v, &format!("/start_exit/{rt}/{sys}"), needs) {
                positive(&v, &format!("/start_exit/{rt}/{sys}/median_ms"));
                positive(&v, &format!("/idle_pss/{rt}/{sys}/median_kib"));
            }
            if sys != "spt-pool" && measured(&v, &format!("/http/{rt}/1/{sys}"), needs) {
                positive(&v, &format!("/http/{rt}/1/{sys}/mean"));
                positive(&v, &format!("/http/{rt}/50/{sys}/mean"));
            }
        }
    }
    for sys in ["spt", "spt-pool", "native"] {
        if measured(&v, &format!("/node_idle_instances/{sys}"), &[]) {
            positive(&v, &format!("/node_idle_instances/{sys}/pss_sum_kib"));
        }
    }
    assert!(tmp.path().join("shoal-bench-dyn/dyn.csv").is_file(), "no CSV written");
}

/// The quickest `bench cri`: pod ready and first answer through
/// containerd's CRI measured for runc and the shoal handler (spt; hvt where
/// KVM is), CSV written.
#[test]
fn bench_cri_quick() {
    if !shoal_testkit::need(&["root", "containerd", "crictl", "podman", "go-toolchain"]) {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    // The fewest rounds (2) and the systems checked below: spt-image, a
    // shoal image's C server, is the bench's extra (the suite's time).
    let v = json_of("cri", &bench(tmp.path(), &["cri", "--repeat", "2", "--systems", "runc,spt,hvt", "--json"]));
    for (sys, needs) in [("runc", &["runc"][..]), ("spt", &[][..]), ("hvt", &["kvm"][..])] {
        if measured(&v, &format!("/{sys}"), needs) {
            positive(&v, &format!("/{sys}/pod_ready/median_ms"));
            positive(&v, &format!("/{sys}/first_answer/median_ms"));
        }
    }
    assert!(tmp.path().join("shoal-bench-cri/cri.csv").is_file(), "no CSV written");
}

/// The quickest `bench recover`: every system's system calls,
/// the gate's cost, reboot times from rejuvenation and the SQLite inserts
/// measured, with the default relative `--out` (its CSV written there).
#[test]
fn bench_recover_from_any_directory() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let v = json_of("recover", &bench(tmp.path(), &["recover", "--iterations", "500", "--repeat", "2", "--only", "syscalls,reboot,sqlite", "--json"]));
    keys_kept("recover", &v);
    for system in ["native", "spt no gates", "spt gates"] {
        for op in ["getuid", "getpid", "open", "write", "read", "close", "sock", "tcp"] {
            positive(&v, &format!("/systems/{system}/syscalls/{op}/ns/mean"));
        }
        positive(&v, &format!("/systems/{system}/sqlite_10000_inserts_s/mean"));
    }
    assert!(v.pointer("/gate_cycles/spt").and_then(Value::as_f64).is_some_and(f64::is_finite), "{v:#}");
    for c in ["time", "sysinfo", "user"] {
        // A reboot may print 0.0 µs (its resolution is 0.1): samples count.
        positive(&v, &format!("/reboot_us/spt/{c}/samples"));
        assert!(v.pointer(&format!("/reboot_us/spt/{c}/mean_us")).and_then(Value::as_f64).is_some_and(|x| x >= 0.0), "{v:#}");
    }
    // hvt's systems run when KVM is usable; none may have failed.
    if let Some(why) = v["hvt_unavailable"].as_str() {
        shoal_testkit::skip("kvm", &format!("the hvt systems: {why}"));
    }
    for (name, sys) in v["systems"].as_object().unwrap_or_else(|| panic!("{v:#}")) {
        assert!(sys.get("failed").is_none() && sys["sqlite_10000_inserts_s"].get("failed").is_none(), "{name} failed: {v:#}");
    }
    for (t, r) in v["reboot_us"].as_object().unwrap_or_else(|| panic!("{v:#}")) {
        assert!(r.get("failed").is_none(), "{t}'s reboots failed: {v:#}");
    }
    assert!(v["sqlite_failed"].is_null(), "{v:#}");
    assert!(tmp.path().join("shoal-bench-recover/recover.csv").is_file());
}

/// `bench recover`'s server parts, at their shortest: nginx and
/// Redis throughput without gates, with gates and with gates and logs
/// (Fig. 7), nginx's component reboot times after 1,000 GETs (Fig. 6), and
/// nginx under wrk while every component is rebooted in turn, which loses
/// no request, vs restarted whole (Table V); Redis across a ramfs panic
/// (no failed request, its keys kept) vs restarted whole (its keys, in
/// the instance's ramfs, gone) (Fig. 8); a bad --only is one line.
#[test]
fn bench_recover_servers() {
    if !shoal_testkit::need(&["wrk", "redis-benchmark"]) {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let args = ["recover", "--repeat", "2", "--only", "servers,nginx-reboot,rejuvenation,redis-latency", "--duration", "1", "--requests", "2000", "--json"];
    let v = json_of("recover", &bench(tmp.path(), &args));
    keys_kept("recover_servers", &v);
    for config in ["no gates", "gates", "gates+logs"] {
        positive(&v, &format!("/fig7_servers/spt/nginx_wrk40/{config}/mean"));
        positive(&v, &format!("/fig7_servers/spt/redis_set/{config}/mean"));
    }
    for c in ["vfs", "ramfs", "time", "process", "sysinfo", "user"] {
        positive(&v, &format!("/fig6_nginx_reboot_us/spt/{c}/samples"));
    }
    let failed = v.pointer("/table5_rejuvenation/spt/components/failed_requests").and_then(Value::as_array).unwrap_or_else(|| panic!("{v:#}"));
    assert!(failed.len() == 2 && failed.iter().all(|f| f.as_f64() == Some(0.0)), "requests failed during rejuvenation: {v:#}");
    positive(&v, "/table5_rejuvenation/spt/components/reboots_or_restarts/0");
    positive(&v, "/table5_rejuvenation/spt/restart/reboots_or_restarts/0");
    let fig8 = |p: &str| v.pointer(&format!("/fig8_redis_latency/spt/{p}")).cloned().unwrap_or_else(|| panic!("no {p}: {v:#}"));
    assert_eq!(fig8("component/failed_requests"), serde_json::json!([0.0, 0.0]), "{v:#}");
    assert_eq!(fig8("component/first_key_kept_runs"), 2, "{v:#}");
    assert!(fig8("component/failure_at_s").as_array().is_some_and(|a| a.iter().all(Value::is_number)), "no ramfs reboot seen: {v:#}");
    assert_eq!(fig8("restart/first_key_kept_runs"), 0, "{v:#}");
    let o = bench(tmp.path(), &["recover", "--only", "nonsense"]);
    assert_clean_error(&o, "unknown part `nonsense`");
}

/// The quickest density run: two instances of each configuration, PSS
/// measured for every one that ran (hvt unavailable, with its reason, only
/// without /dev/kvm; none failed); a bad --only is one line and non-zero.
#[test]
fn bench_density_from_any_directory() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let v = json_of("density", &bench(tmp.path(), &["density", "--count", "2", "--json"]));
    keys_kept("density", &v);
    let results = v["results"].as_array().unwrap();
    let configs: Vec<&str> = results.iter().filter_map(|r| r["config"].as_str()).collect();
    for c in ["process", "spt+copy", "spt+pool"] {
        assert!(configs.contains(&c), "{c} missing: {v:#}");
    }
    for (i, _) in results.iter().enumerate() {
        positive(&v, &format!("/results/{i}/pss_kib_per_instance"));
    }
    assert_eq!(v["failed"].as_array().map(Vec::len), Some(0), "{v:#}");
    let unavailable = v["unavailable"].as_array().unwrap_or_else(|| panic!("{v:#}"));
    for why in unavailable {
        let why = why.as_str().unwrap_or_default();
        assert!(why.starts_with("hvt"), "only hvt's configurations may be unavailable: {v:#}");
        shoal_testkit::skip("kvm", &format!("density configuration {why}"));
    }
    assert_eq!(configs.len() + unavailable.len(), 5, "{v:#}");
    let o = bench(tmp.path(), &["density", "--only", "nonsense"]);
    assert_clean_error(&o, "--only nonsense: no such configuration");
}

#[test]
fn bench_apps_from_any_directory() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    // Lua's run is the shortest of the recipes'.
    let v = json_of("apps", &bench(tmp.path(), &["apps", "--only", "lua", "--repeat", "2", "--json"]));
    keys_kept("apps", &v);
    assert!(v.pointer("/results/lua/failure").is_some_and(Value::is_null), "{v:#}");
    assert_eq!(v.pointer("/results/lua/same_output").and_then(Value::as_bool), Some(true), "{v:#}");
    positive(&v, "/results/lua/native_s/mean");
    positive(&v, "/results/lua/spt_s/mean");
    assert_eq!(v.pointer("/results/lua/spt_s/runs").and_then(Value::as_array).map(Vec::len), Some(2));
    if measured(&v, "/results/lua/hvt_s", &["kvm"]) {
        positive(&v, "/results/lua/hvt_s/mean");
    }
}

#[test]
fn bench_echo_from_any_directory() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let v = json_of("echo", &bench(tmp.path(), &["echo", "--round-trips", "200", "--repeat", "1", "--json"]));
    keys_kept("echo", &v);
    for mode in ["persistent", "per_connection"] {
        for s in ["native", "spt"] {
            for stat in ["average_ms", "p50_ms", "p99_ms"] {
                positive(&v, &format!("/modes/{mode}/systems/{s}/{stat}"));
            }
        }
        positive(&v, &format!("/modes/{mode}/systems/spt/ratio_over_native/average"));
        if measured(&v, &format!("/modes/{mode}/systems/hvt"), &["kvm"]) {
            positive(&v, &format!("/modes/{mode}/systems/hvt/average_ms"));
        }
    }
    assert_eq!(v.pointer("/modes/persistent/systems/spt/samples").and_then(Value::as_u64), Some(200), "{v:#}");
    assert_eq!(v.pointer("/modes/per_connection/systems/spt/samples").and_then(Value::as_u64), Some(20), "{v:#}");
}

/// Every experiment of `bench faas` in one quick run on spt and process
/// (a real `shoal serve`, the default relative `--out`), which also keeps
/// the JSON's keys: cold starts are measured twice per backend; each warm
/// workload call is timed after the warm instances went quiet, with the
/// instance's own CPU time beside the wall-clock time; the two-write
/// experiment reports both functions with their gap (the numbers are not
/// judged here).
#[test]
fn bench_faas_every_experiment_from_any_directory() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let args = ["faas", "--backends", "spt,process", "--repeat", "2", "--requests", "64", "--max-clients", "2", "--bursts", "2", "--instances", "1", "--json"];
    let v = json_of("faas", &bench(tmp.path(), &args));
    keys_kept("faas", &v);
    let lua = v.pointer("/experiments/cold-start/lua_missing").is_some_and(Value::is_null);
    for b in ["spt", "process"] {
        positive(&v, &format!("/experiments/cold-start/results/noop/{b}/mean"));
        assert_eq!(v.pointer(&format!("/experiments/cold-start/results/noop/{b}/n")).and_then(Value::as_u64), Some(2), "{v:#}");
        if lua {
            positive(&v, &format!("/experiments/cold-start/results/lua/{b}/mean"));
        }
    }
    assert_eq!(v["unavailable"].as_object().map(|s| s.len()), Some(0), "{v:#}");
    assert_eq!(v["failed"].as_object().map(|s| s.len()), Some(0), "{v:#}");
    let out = tmp.path().join("shoal-bench-faas");
    for f in ["cold-start.csv", "cold-start.svg", "cold-start.md", "summary.md"] {
        assert!(out.join(f).is_file(), "no {f} in {}", out.display());
    }
    let csv = std::fs::read_to_string(out.join("cold-start.csv")).unwrap();
    assert!(csv.lines().count() > 4, "{csv}");

    for w in ["fib", "matmul", "alloc", "fileread"] {
        for b in ["spt", "process"] {
            positive(&v, &format!("/experiments/workloads/results/{w}/{b}/mean"));
            // fib and matmul compute inside the instance: its CPU time is
            // most of the call.
            if w == "fib" || w == "matmul" {
                positive(&v, &format!("/experiments/workloads/results/{w}/{b}/instance_cpu_ms"));
            }
            assert!(v.pointer(&format!("/experiments/workloads/results/{w}/{b}/quiet_wait_ms")).and_then(Value::as_f64).is_some(), "{v:#}");
        }
    }
    assert!(v.pointer("/experiments/workloads/calls_timed_without_quiet").and_then(Value::as_u64).is_some(), "{v:#}");
    let csv = std::fs::read_to_string(out.join("workloads.csv")).unwrap();
    assert!(csv.lines().next().is_some_and(|h| h.ends_with(",quiet_wait_ms")), "{csv}");
    assert_eq!(csv.lines().filter(|l| l.starts_with("fib,")).count(), 4, "two backends, two rounds: {csv}");

    for f in ["one_write", "two_writes"] {
        positive(&v, &format!("/experiments/two-write/results/spt/{f}/median"));
        positive(&v, &format!("/experiments/two-write/results/spt/{f}/p95"));
        assert_eq!(v.pointer(&format!("/experiments/two-write/results/spt/{f}/n")).and_then(Value::as_u64), Some(40), "{v:#}");
    }
    assert!(v.pointer("/experiments/two-write/results/spt/median_gap_ms").and_then(Value::as_f64).is_some(), "{v:#}");
    assert_eq!(v.pointer("/experiments/two-write/failures").and_then(Value::as_array).map(Vec::len), Some(0), "{v:#}");
    let csv = std::fs::read_to_string(out.join("two-write.csv")).unwrap();
    assert_eq!(csv.lines().filter(|l| l.starts_with("spt,two-writes,")).count(), 40, "{csv}");
}

#[test]
fn bench_faas_bad_options_are_one_line_errors() {
    let tmp = scratch();
    for args in [&["faas", "--repeat", "0"][..], &["faas", "--bursts", "0"], &["faas", "--only", "everything"]] {
        let o = bench(tmp.path(), args);
        let err = stderr(&o);
        assert_ne!(o.status.code(), Some(0), "{args:?} succeeded");
        assert!(!err.contains("panicked"), "{err}");
        assert!(stdout(&o).trim().is_empty(), "{args:?} printed a result");
        assert!(!tmp.path().join("shoal-bench-faas").exists(), "{args:?} started the bench");
    }
}

/// `bench http` and `bench kv`'s quickest mode: one run at 1 and 10
/// clients on a native process and spt (neither needs root or KVM), with
/// the default, relative `--out`: throughputs and footprints are real
/// positive numbers, the CSVs and plots are written.
#[test]
fn bench_http_and_kv_from_any_directory() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    for (which, ops) in [("http", &["GET"][..]), ("kv", &["GET", "SET"])] {
        let mut args = vec![which, "--repeat", "1", "--clients", "1,10", "--systems", "native,spt", "--json"];
        if which == "http" {
            args.extend(["--duration", "1"]);
        } else {
            args.extend(["--requests", "10000"]);
        }
        let v = json_of(which, &bench(tmp.path(), &args));
        keys_kept(which, &v);
        for s in ["native", "spt"] {
            assert!(v["systems"][s]["unavailable"].is_null() && v["systems"][s]["failed"].is_null(), "{which}: {s} not measured: {v:#}");
            for op in ops {
                for i in 0..2 {
                    positive(&v, &format!("/systems/{s}/requests_per_s/{op}/{i}/mean"));
                }
            }
            positive(&v, &format!("/systems/{s}/memory_kib/idle_pss/mean"));
            positive(&v, &format!("/systems/{s}/memory_kib/load_pss/mean"));
        }
        positive(&v, "/ratios/0/spt_over_native");
        let out = tmp.path().join(format!("shoal-bench-{which}"));
        for f in [format!("{which}.csv"), format!("{which}-memory.csv")] {
            assert!(out.join(&f).is_file(), "no {f} in {}", out.display());
        }
        let csv = std::fs::read_to_string(out.join(format!("{which}.csv"))).unwrap();
        assert_eq!(csv.lines().count(), 1 + 2 * 2 * ops.len(), "{csv}");
    }
    let o = bench(tmp.path(), &["kv", "--systems", "docker"]);
    assert_clean_error(&o, "unknown system `docker`");
}

/// `bench kv --pin` and `bench http --pin`: every server's processes (the
/// native program; `shoal run`, the tender and the instance on spt) may run
/// on one CPU only, the report says which and that the client has another.
#[test]
fn bench_http_and_kv_pinned() {
    if !shoal_testkit::need(&["two-cpus"]) {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    for which in ["http", "kv"] {
        let mut args = vec![which, "--pin", "--repeat", "1", "--clients", "1", "--systems", "native,spt", "--json"];
        if which == "http" {
            args.extend(["--duration", "1"]);
        } else {
            args.extend(["--requests", "5000"]);
        }
        let v = json_of(which, &bench(tmp.path(), &args));
        let server = v.pointer("/pinned/server_cpu").and_then(Value::as_u64).unwrap_or_else(|| panic!("{which}: not pinned: {v:#}"));
        let client = v.pointer("/pinned/client_cpu").and_then(Value::as_u64).unwrap_or_else(|| panic!("{which}: not pinned: {v:#}"));
        assert_ne!(server, client, "{v:#}");
        for s in ["native", "spt"] {
            assert!(v["systems"][s]["unavailable"].is_null() && v["systems"][s]["failed"].is_null(), "{which}: {s} not measured: {v:#}");
            positive(&v, &format!("/systems/{s}/requests_per_s/GET/0/mean"));
            assert_eq!(v["systems"][s]["server_cpus"], serde_json::json!([server.to_string()]), "{which}: {s}: {v:#}");
        }
    }
    // Unpinned runs say so too (null), and the servers may use every CPU.
    let v = json_of("kv", &bench(tmp.path(), &["kv", "--repeat", "1", "--clients", "1", "--systems", "native", "--requests", "2000", "--json"]));
    assert!(v["pinned"].is_null(), "{v:#}");
}

/// The GNU build id of the ELF file at `path`, as `readelf -n` prints it.
fn build_id(path: &Path) -> String {
    let o = output(std::process::Command::new("readelf").arg("-n").arg(path));
    let text = stdout(&o);
    let line = text.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).unwrap_or_else(|| panic!("no build id in {}: {text}", path.display()));
    line.to_string()
}

/// One build: what `cargo build` (scripts/test's, through the workspace's
/// linker scripts/rust-link) put beside `shoal` is the fast static pair,
/// and the bench says so, naming the files it measured: shoal-tender
/// static-pie, shoal-spt built against musl at a fixed address.
#[test]
fn bench_density_names_the_static_binaries_cargo_built() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = scratch();
    let o = bench(tmp.path(), &["density", "--count", "2", "--only", "spt+pool"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let dir = std::path::PathBuf::from(env!("CARGO_BIN_EXE_shoal")).parent().unwrap().to_path_buf();
    let (tender, spt) = (dir.join("shoal-tender"), dir.join("shoal-spt"));
    let expected = format!(
        "binaries: shoal-tender static-pie ({}, build id {}); shoal-spt static at a fixed address, musl ({}, build id {})",
        tender.display(),
        build_id(&tender),
        spt.display(),
        build_id(&spt)
    );
    let text = stdout(&o);
    assert!(text.lines().any(|l| l == expected), "expected the line\n{expected}\nin\n{text}");
    // The CSV and the plot beside it.
    let csv = std::fs::read_to_string(tmp.path().join("shoal-bench-density/density.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("config,instances,host_kib_per_instance,pss_kib_per_instance,page_tables_kib_per_instance,pool_kib,start_ms_per_instance"));
    assert!(lines.next().is_some_and(|l| l.starts_with("spt+pool,2,")), "{csv}");
    assert!(tmp.path().join("shoal-bench-density/density.svg").is_file());
}
