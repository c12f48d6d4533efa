//! What shoal's integration tests share about the machine they run on.
//!
//! A test that needs something the machine may lack (KVM, root, a container
//! runtime, a load generator) asks for it by its feature name with [`need`]
//! or, when it probed by itself, reports the skip with [`skip`]. Either way
//! the skip is one visible line, `skipped: TEST: WHY (needs FEATURE)`,
//! written to the stderr handle (the test harness captures the print
//! macros of passing tests, so `eprintln!` would hide it).
//!
//! `SHOAL_REQUIRE` (comma-separated feature names, set by `scripts/test`
//! from what the machine has) turns a skip into a failure: when a feature
//! is present (the device node exists, the program is installed) a test
//! that finds it unusable has found a fault, not a gap.
//!
//! Module [`containerd`] is the containerd of the CRI tests, which `shoal
//! bench cri` starts the same way.

use std::io::Write;
use std::path::{Path, PathBuf};

pub mod containerd;

/// The features a test can need, with what makes each present.
pub const FEATURES: &[(&str, &str)] = &[
    ("kvm", "/dev/kvm opens read-write (the hvt tender)"),
    ("root", "the tests run as uid 0"),
    ("runc", "runc is installed"),
    ("runsc", "runsc (gVisor) is installed"),
    ("podman", "podman is installed"),
    ("busybox", "busybox is installed (Debian's busybox-static, a static executable)"),
    ("containerd", "containerd and ctr are installed"),
    ("go", "a Go 1.22 or newer is installed and scripts/setup fetched runtime-tools with it"),
    ("go-toolchain", "a Go 1.22 or newer is installed (on PATH or in /usr/local/go/bin)"),
    ("crictl", "scripts/setup built crictl and critest (cri-tools) into ~/.cache/shoal with go"),
    ("hey", "hey (HTTP load generator) is installed"),
    ("wrk", "wrk (HTTP load generator) is installed"),
    ("redis-benchmark", "redis-benchmark is installed"),
    ("setpriv", "setpriv is installed"),
    ("curl", "curl is installed"),
    ("unshare", "unshare (util-linux) is installed"),
    ("ip", "ip (iproute2) is installed"),
    ("strace", "strace is installed (counting a tender's host system calls)"),
    ("two-cpus", "at least two CPUs are available"),
    ("shm", "/dev/shm is a directory"),
    ("python3.11", "Debian's python3.11 is installed as /usr/bin/python3.11"),
    ("node", "Node.js is installed as /usr/bin/node"),
    ("python3.11-tests", "Debian's libpython3.11-testsuite (CPython's own tests) is installed in /usr/lib/python3.11/test"),
    ("nodesuite", "scripts/setup installed apps/nodesuite's npm packages (with their test suites) into ~/.cache/shoal/nodesuite"),
];

/// Whether `SHOAL_REQUIRE` names `feature`.
pub fn required(feature: &str) -> bool {
    std::env::var("SHOAL_REQUIRE").is_ok_and(|r| names(&r, feature))
}

/// Whether the comma-separated `list` names `feature`.
fn names(list: &str, feature: &str) -> bool {
    list.split(',').any(|f| f.trim() == feature)
}

/// The name of the running test (libtest names each test's thread after it).
fn test_name() -> String {
    std::thread::current().name().unwrap_or("a test").to_string()
}

/// Skips (part of) the running test that needs `feature`, for `why`: one
/// visible line on stderr, or, when `SHOAL_REQUIRE` names the feature, a
/// panic that fails the test.
#[track_caller]
pub fn skip(feature: &str, why: &str) {
    assert!(FEATURES.iter().any(|(f, _)| *f == feature), "shoal-testkit: unknown feature `{feature}`");
    let test = test_name();
    if required(feature) {
        panic!("{test}: {why}; SHOAL_REQUIRE names `{feature}` (present on this machine), so this is a failure, not a skip");
    }
    let _ = writeln!(std::io::stderr().lock(), "skipped: {test}: {why} (needs {feature})");
}

/// Whether `feature` is usable here, or why not.
pub fn probe(feature: &str) -> Result<(), String> {
    match feature {
        "kvm" => std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").map(|_| ()).map_err(|e| format!("/dev/kvm is not usable: {e}")),
        "root" => match effective_uid() {
            Some(0) => Ok(()),
            Some(uid) => Err(format!("the tests run as uid {uid}, not root")),
            None => Err("the effective uid cannot be read from /proc/self/status".into()),
        },
        "containerd" => ["containerd", "ctr"].iter().try_for_each(|p| program(p).map(|_| ())),
        "go-toolchain" => go_toolchain().map(|_| ()),
        "go" => {
            go_toolchain()?;
            runtime_tools().map(|_| ()).ok_or_else(|| "runtime-tools is not fetched into ~/.cache/shoal (scripts/setup fetches it with go)".into())
        }
        "crictl" => {
            cri_tool("crictl").map(|_| ()).ok_or_else(|| "crictl is not built into ~/.cache/shoal/cri-tools-* (scripts/setup builds it with go)".into())
        }
        "two-cpus" => match std::thread::available_parallelism().map_or(1, |n| n.get()) {
            n if n >= 2 => Ok(()),
            n => Err(format!("this machine has {n} CPU")),
        },
        "shm" => Path::new("/dev/shm").is_dir().then_some(()).ok_or_else(|| "/dev/shm is not a directory".into()),
        // The distribution's interpreters at their own paths, not a
        // python3 or node that comes first on PATH (pyenv, nvm).
        "python3.11" | "node" => {
            let p = Path::new("/usr/bin").join(feature);
            p.is_file().then_some(()).ok_or_else(|| format!("{} is not installed", p.display()))
        }
        "python3.11-tests" => {
            let p = Path::new("/usr/lib/python3.11/test/test_json");
            p.is_dir().then_some(()).ok_or_else(|| format!("{} is missing: install libpython3.11-testsuite (scripts/setup does)", p.display()))
        }
        "nodesuite" => nodesuite().map(|_| ()),
        "runc" | "runsc" | "podman" | "busybox" | "hey" | "wrk" | "redis-benchmark" | "setpriv" | "curl" | "unshare" | "ip" | "strace" => {
            program(feature).map(|_| ())
        }
        other => panic!("shoal-testkit: unknown feature `{other}`"),
    }
}

/// Whether every one of `features` is usable; for the first that is not,
/// [`skip`] (which fails the test when `SHOAL_REQUIRE` names it).
#[track_caller]
pub fn need(features: &[&str]) -> bool {
    for f in features {
        if let Err(why) = probe(f) {
            skip(f, &why);
            return false;
        }
    }
    true
}

/// `name` in PATH or in the sbin directories (runc lives in /usr/sbin), or
/// why not.
pub fn program(name: &str) -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{name} is not installed (scripts/setup installs it)"))
}

/// A Go toolchain 1.22 or newer (Debian's golang-go 1.19 is too old): `go`
/// on PATH, then the Go distribution's /usr/local/go/bin/go, which is not
/// on the default PATH; or why there is none. scripts/find-go looks the
/// same way for the scripts.
pub fn go_toolchain() -> Result<PathBuf, String> {
    let mut seen = Vec::new();
    for go in program("go").into_iter().chain(Some(PathBuf::from("/usr/local/go/bin/go")).filter(|p| p.is_file())) {
        let v = std::process::Command::new(&go)
            .args(["env", "GOVERSION"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        if go_minor(&v).is_some_and(|m| m >= 22) {
            return Ok(go);
        }
        seen.push(format!("{} ({v})", go.display()));
    }
    let old = if seen.is_empty() { String::new() } else { format!("; too old: {}", seen.join(", ")) };
    Err(format!("no Go 1.22 or newer on PATH or in /usr/local/go/bin{old}"))
}

/// `go build` of one static program (no cgo, no module) with Go's own
/// build cache, shared by every test, bench and scripts/setup: a fresh
/// cache compiles the standard library again (~40 s of CPU for
/// `net/http` here, against ~0.6 s warm), which the suite used to pay once
/// per test that built Go. Only a user without a cache directory (no
/// $HOME, no $XDG_CACHE_HOME) gets one in the temporary directory.
pub fn go_build(go: &std::path::Path) -> std::process::Command {
    let mut c = std::process::Command::new(go);
    c.arg("build").env("CGO_ENABLED", "0").env("GO111MODULE", "off");
    if ["GOCACHE", "XDG_CACHE_HOME", "HOME"].iter().all(|v| std::env::var_os(v).is_none()) {
        c.env("GOCACHE", std::env::temp_dir().join("shoal-go-build"));
    }
    c
}

/// The minor version of a `go1.N[.P…]` version string.
fn go_minor(version: &str) -> Option<u32> {
    let rest = version.strip_prefix("go1.")?;
    rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len())].parse().ok()
}

/// The directory scripts/setup installed apps/nodesuite's npm packages
/// into (~/.cache/shoal/nodesuite), when it holds the packages of the
/// lock file in this checkout; or why not.
pub fn nodesuite() -> Result<PathBuf, String> {
    let dir = PathBuf::from(std::env::var_os("HOME").ok_or("HOME is not set")?).join(".cache/shoal/nodesuite");
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../apps/nodesuite/package-lock.json");
    let want = std::fs::read(&lock).map_err(|e| format!("{}: {e}", lock.display()))?;
    match std::fs::read(dir.join("package-lock.json")) {
        Ok(have) if have == want && dir.join("node_modules/tape").is_dir() => Ok(dir),
        Ok(_) => Err(format!("{} was installed from another apps/nodesuite/package-lock.json (scripts/setup installs it again)", dir.display())),
        Err(e) => Err(format!("{} is not installed ({e}; scripts/setup installs it with npm)", dir.display())),
    }
}

/// The runtime-tools source scripts/setup fetched into ~/.cache/shoal, if
/// it did.
pub fn runtime_tools() -> Option<PathBuf> {
    let cache = PathBuf::from(std::env::var_os("HOME")?).join(".cache/shoal");
    std::fs::read_dir(cache)
        .ok()?
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with("runtime-tools-") && e.path().is_dir())
        .map(|e| e.path())
}

/// `name` (`crictl` or `critest`) as scripts/setup built it into
/// ~/.cache/shoal/cri-tools-VERSION, if it did.
pub fn cri_tool(name: &str) -> Option<PathBuf> {
    let cache = PathBuf::from(std::env::var_os("HOME")?).join(".cache/shoal");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(cache)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("cri-tools-"))
        .map(|e| e.path().join(name))
        .filter(|p| p.is_file())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// The effective uid, from /proc/self/status.
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find(|l| l.starts_with("Uid:"))?.split_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_feature_can_be_probed() {
        for (f, _) in FEATURES {
            // Either answer is fine; an unknown name would panic.
            let _ = probe(f);
        }
    }

    #[test]
    fn the_require_list_names_whole_features() {
        assert!(names("kvm,root,runc", "root"));
        assert!(names(" kvm , runsc", "runsc"));
        assert!(!names("runsc", "runc"));
        assert!(!names("", "kvm"));
    }

    #[test]
    fn go_versions_are_read() {
        assert_eq!(go_minor("go1.26.8"), Some(26));
        assert_eq!(go_minor("go1.22"), Some(22));
        assert_eq!(go_minor("go1.19.8"), Some(19));
        assert_eq!(go_minor("devel +abc"), None);
    }

    #[test]
    fn a_missing_program_says_so() {
        assert_eq!(program("shoal-no-such-program"), Err("shoal-no-such-program is not installed (scripts/setup installs it)".to_string()));
    }
}
