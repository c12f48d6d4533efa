//! npm packages' own test suites (tape), run with the host's
//! `/usr/bin/node` (Node 20) on shoal beside native: the packages in
//! [`PACKAGES`] (pinned by apps/nodesuite/package-lock.json, installed by
//! scripts/setup into ~/.cache/shoal/nodesuite) run in one node process
//! per tender through `apps/nodesuite/run.js`, which prints every test's
//! outcome; each test's outcome on spt and hvt must equal its native
//! outcome, except the differences [`KNOWN`] lists with their reasons
//! (each of which must still occur, so the list stays true). Node's own
//! test suite is not available from the registries here (Debian carries
//! Node 18's source); these suites cover what a function runtime uses:
//! Buffer and encodings, crypto (hashes, HMAC, PBKDF2, ciphers, ECDH,
//! RSA sign and encrypt, random bytes), zlib streams, streams and
//! events, timers and promises, the file system, querystrings, and a TCP
//! socket on the instance's loopback.

mod common;

use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

const NODE: &str = "/usr/bin/node";

/// The host's system directories, mounted read-only (as in dynexec.rs).
const SYSTEM: [&str; 6] = ["--mount", "/usr:/usr:ro", "--mount", "/lib:/lib:ro", "--mount", "/lib64:/lib64:ro"];

/// The packages whose suites run (run.js names each one's test files),
/// 2,092 tests and about 7 s of CPU natively (bl's 2 s, crypto-browserify's
/// 2 s); what each covers:
const PACKAGES: &[&str] = &[
    // querystrings, Buffer, iconv-lite encodings
    "qs",
    // SHA-1/224/256/384/512 over Buffers and typed arrays (test vectors)
    "sha.js",
    // node's crypto against pure-JS implementations: AES modes, HMAC,
    // PBKDF2, ECDH, RSA sign/verify and encrypt, randomBytes/Fill
    "crypto-browserify",
    // util.inspect-like printing of every value kind, Buffers
    "object-inspect",
    // the file system: stat, readdir, realpath, reading package.json,
    // directories made and removed under HOME
    "resolve",
    // Buffer reads and writes, streams
    "bl",
    // streams and a TCP server and client on 127.0.0.1 inside the instance
    "duplexify",
    // line-splitting transform streams
    "split2",
    // zlib gunzip and inflate streams, fs read streams
    "gunzip-maybe",
    // queues with callbacks, promises and timers
    "fastq",
    // EventEmitter semantics
    "events",
];

/// What hvt runs (the suite's time budget): the packages that use the
/// file system, sockets, zlib, timers and streams; the CPU-bound crypto,
/// hashing and Buffer suites run on spt only.
const HVT_PACKAGES: &[&str] = &["qs", "object-inspect", "resolve", "duplexify", "split2", "gunzip-maybe", "fastq", "events"];

/// The tests whose outcome on shoal differs from native, by
/// `PACKAGE NAME` prefix, with the outcome on shoal and why. (None today:
/// every test's outcome equals native on both tenders.)
const KNOWN: &[(&str, &str, &str)] = &[];

/// Each test's outcome (`ok`, `fail`, `skip`, `todo`) by `PACKAGE NAME`,
/// and each package's summary line, for the packages in `only`.
fn outcomes(out: &str, only: &[&str]) -> (BTreeMap<String, String>, Vec<String>) {
    let mut tests = BTreeMap::new();
    let mut summary = Vec::new();
    for line in out.lines() {
        let mut w = line.splitn(3, ' ');
        match (w.next(), w.next(), w.next()) {
            (Some(kind @ ("ok" | "fail" | "skip" | "todo")), Some(package), Some(name)) if only.contains(&package) => {
                let prev = tests.insert(format!("{package} {name}"), kind.to_string());
                assert!(prev.is_none(), "run.js printed {package} {name} twice");
            }
            (Some(package), Some(counts), _) if only.contains(&package) && counts.starts_with("tests=") => {
                summary.push(line.to_string());
            }
            _ => {}
        }
    }
    (tests, summary)
}

/// `node run.js ROOT PACKAGES` natively, with `env` and HOME in a scratch
/// directory (resolve's tests make and remove HOME/.node_modules).
fn native(driver: &std::path::Path, root: &std::path::Path, env: &[(&str, &str)], packages: &[&str]) -> String {
    let home = scratch();
    let n = output(Command::new(NODE).arg(driver.join("run.js")).arg(root).args(packages).env_clear().envs(env.iter().copied()).env("HOME", home.path()));
    assert_eq!(n.status.code(), Some(0), "native run: stdout: {}\nstderr: {}", stdout(&n), stderr(&n));
    stdout(&n)
}

#[test]
fn npm_package_suites_match_native() {
    if !shoal_testkit::need(&["root", "node", "nodesuite"]) {
        return;
    }
    let root = shoal_testkit::nodesuite().unwrap();
    let driver = home().join("apps/nodesuite");
    let env = [("PATH", "/usr/bin:/bin"), ("LANG", "C.UTF-8")];
    let native_out = native(&driver, &root, &env, PACKAGES);
    let mounts = [format!("{}:/nodesuite:ro", root.display()), format!("{}:/driver:ro", driver.display())];
    let mut used = vec![false; KNOWN.len()];
    for t in tenders() {
        let packages = if t == "hvt" { HVT_PACKAGES } else { PACKAGES };
        let (native, nsum) = outcomes(&native_out, packages);
        assert_eq!(nsum.len(), packages.len(), "native summaries: {nsum:?}");
        let mut cmd = shoal_run(t);
        cmd.args(SYSTEM).args(["--mount", &mounts[0], "--mount", &mounts[1], "--mem", "1G"]);
        for (k, v) in env.iter().chain(&[("HOME", "/tmp")]) {
            cmd.args(["-e", &format!("{k}={v}")]);
        }
        let s = output(cmd.args([NODE, "--", "/driver/run.js", "/nodesuite"]).args(packages));
        assert_eq!(s.status.code(), Some(0), "{t}: stdout: {}\nstderr: {}", stdout(&s), stderr(&s));
        let (shoal, ssum) = outcomes(&stdout(&s), packages);
        assert_eq!(ssum.len(), packages.len(), "{t}: summaries: {ssum:?}");
        let mut unexplained = Vec::new();
        let ids: BTreeSet<&String> = native.keys().chain(shoal.keys()).collect();
        for id in ids {
            let (nk, sk) = (native.get(id).map_or("absent", |k| k), shoal.get(id).map_or("absent", |k| k));
            if nk == sk {
                continue;
            }
            match KNOWN.iter().position(|(p, k, _)| id.starts_with(p) && *k == sk && nk == "ok") {
                Some(i) => used[i] = true,
                None => unexplained.push(format!("{id}: native {nk}, {t} {sk}")),
            }
        }
        assert!(unexplained.is_empty(), "{t}: unexplained differences:\n{}\nstderr: {}", unexplained.join("\n"), stderr(&s));
        // The counts table of the README, one line per package.
        for (a, b) in nsum.iter().zip(&ssum) {
            eprintln!("nodesuite {t}: native {a} | shoal {b}");
        }
    }
    let stale: Vec<_> = KNOWN.iter().zip(&used).filter(|(_, u)| !**u).map(|(k, _)| k.0).collect();
    assert!(stale.is_empty(), "listed differences that did not occur: {stale:?}");
}

/// Node's `process.memoryUsage()` (libuv reads the resident size from
/// `/proc/self/stat`: ENOENT before) and `/proc/self/stat` and `statm`
/// as Node reads them, against native.
#[test]
fn node_memory_usage_and_proc_self_stat_as_natively() {
    if !shoal_testkit::need(&["root", "node"]) {
        return;
    }
    let code = "const fs = require('fs');\n\
        const m = process.memoryUsage();\n\
        console.log('rss', m.rss > 4096, m.heapUsed > 0, m.rss % 4096);\n\
        const f = fs.readFileSync('/proc/self/stat', 'utf8').trim().split(' ');\n\
        console.log('stat', f.length, f[0] === String(process.pid), f[1], f[2].length, Number(f[23]) * 4096 <= Number(f[22]), Number(f[19]) >= 1);\n\
        const s = fs.readFileSync('/proc/self/statm', 'utf8').trim().split(' ').map(Number);\n\
        console.log('statm', s.length, s[1] > 0, s[1] <= s[0]);";
    let n = output(Command::new(NODE).args(["-e", code]).env_clear());
    assert_eq!(stdout(&n), "rss true true 0\nstat 52 true (node) 1 true true\nstatm 7 true true\n", "native: {}", stderr(&n));
    for t in tenders() {
        let s = output(shoal_run(t).args(SYSTEM).args(["--mem", "1G", NODE, "--", "-e", code]));
        assert_eq!(stdout(&s), stdout(&n), "{t}: stderr: {}", stderr(&s));
        assert_eq!((s.status.code(), stderr(&s)), (Some(0), String::new()), "{t}");
    }
}
