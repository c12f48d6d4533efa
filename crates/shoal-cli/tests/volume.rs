//! `shoal run --volume HOSTDIR:GUESTDIR` (a server's state kept
//! across a restart): what a program leaves in GUESTDIR is in HOSTDIR
//! after it exits, and in GUESTDIR again at the next run; a crash leaves
//! HOSTDIR unchanged; a hostile guest's own archive cannot write outside
//! HOSTDIR (or anything at all, when invalid); bad flags are one line and
//! 125. The program is `apps/tests/volume.c`. Every test runs on each
//! tender `common::tenders()` finds (hvt with a visible skip otherwise).

mod common;
use common::*;
use std::path::Path;

fn build(dir: &Path) -> std::path::PathBuf {
    build_image(&test_app("volume.c"), dir, &[])
}

/// Every path below `dir`, relative, sorted (symlinks not followed).
fn tree(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, d: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(root).unwrap().display().to_string());
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut v = Vec::new();
    walk(dir, dir, &mut v);
    v.sort();
    v
}

#[test]
fn a_counter_in_a_volume_counts_across_runs() {
    let dir = scratch();
    let image = build(dir.path());
    for t in tenders() {
        let host = dir.path().join(format!("vol-{t}"));
        std::fs::create_dir(&host).unwrap();
        std::fs::write(host.join("seed"), "from the host\n").unwrap();
        // With --fs too: the root's own files stay, the volume is beside them.
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/motd"), "hi\n").unwrap();
        for n in 1..=3 {
            let o = output(shoal_run(t).arg("--fs").arg(&root).arg("--volume").arg(format!("{}:/var/lib/app", host.display())).arg(&image).args([
                "--",
                "count",
                "/var/lib/app",
            ]));
            assert_eq!(o.status.code(), Some(0), "{t} run {n}: {}", stderr(&o));
            assert_eq!(stdout(&o), format!("seed from the host\ncount {n}\n"), "{t} run {n}");
            assert_eq!(std::fs::read_to_string(host.join("count")).unwrap(), format!("{n}\n"), "{t} run {n}");
        }
        assert_eq!(tree(&host), ["count", "runs", "runs/3", "seed"], "{t}: files, directories and deletes reflected");
        assert_eq!(std::fs::read_to_string(host.join("runs/3")).unwrap(), "run 3\n");
        assert_eq!(tree(&root), ["etc", "etc/motd"], "{t}: --fs stays read-only");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert!(!names.iter().any(|n| n.contains("shoal-new")), "{t}: no temporary directory left: {names:?}");
    }
}

#[test]
fn a_crash_leaves_the_volume_as_it_was() {
    let dir = scratch();
    let image = build(dir.path());
    for t in tenders() {
        let host = dir.path().join(format!("vol-{t}"));
        std::fs::create_dir(&host).unwrap();
        std::fs::write(host.join("count"), "7\n").unwrap();
        let o = output(shoal_run(t).arg("--volume").arg(format!("{}:/data", host.display())).arg(&image).args(["--", "crash", "/data"]));
        assert_eq!(o.status.code(), Some(139), "{t}: {}", stderr(&o));
        assert_eq!(std::fs::read_to_string(host.join("count")).unwrap(), "7\n", "{t}");
        assert_eq!(tree(&host), ["count"], "{t}");
    }
}

#[test]
fn a_hostile_guest_cannot_write_outside_the_volume() {
    let dir = scratch();
    let image = build(dir.path());
    for t in tenders() {
        let base = dir.path().join(format!("hostile-{t}"));
        let host = base.join("vol");
        std::fs::create_dir_all(&host).unwrap();
        std::fs::write(host.join("keep"), "k\n").unwrap();
        let run = |case: &str| output(shoal_run(t).arg("--volume").arg(format!("{}:/data", host.display())).arg(&image).args(["--", "hostile", case]));
        // Invalid archives: refused whole, nothing written anywhere.
        for case in ["slash", "dotdot", "below-link"] {
            let o = run(case);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(125), "{t} {case}: {err}");
            assert!(err.contains("volume save: 0\n"), "{t} {case}: {err}");
            assert!(err.contains("was not saved: the guest's archive is invalid"), "{t} {case}: {err}");
            assert_eq!(tree(&base), ["vol", "vol/keep"], "{t} {case}");
        }
        // Larger than guest memory: refused by the hypercall, nothing kept.
        let o = run("huge");
        assert_eq!(o.status.code(), Some(0), "{t} huge: {}", stderr(&o));
        assert_eq!(stderr(&o), "volume save: -27\n", "{t} huge");
        assert_eq!(tree(&base), ["vol", "vol/keep"], "{t} huge");
        // Valid: a symlink pointing out is stored as a link, never followed.
        let o = run("escape-link");
        assert_eq!(o.status.code(), Some(0), "{t} escape-link: {}", stderr(&o));
        assert_eq!(tree(&base), ["vol", "vol/esc", "vol/f"], "{t} escape-link");
        assert_eq!(std::fs::read_link(host.join("esc")).unwrap(), Path::new(".."));
        assert_eq!(std::fs::read_to_string(host.join("f")).unwrap(), "kept\n");
    }
}

#[test]
fn bad_volume_flags_are_one_line_and_125() {
    let dir = scratch();
    let image = dir.path().join("none.img");
    let d = dir.path().display().to_string();
    let cases: [(Vec<String>, &str); 5] = [
        (vec!["--volume".into(), "nocolon".into()], "--volume nocolon: expected HOSTDIR:GUESTDIR"),
        (vec!["--volume".into(), "/nonexistent-shoal-vol:/d".into()], "--volume /nonexistent-shoal-vol: no such directory"),
        (vec!["--volume".into(), format!("{d}:relative")], "must be an absolute path of ordinary names"),
        (vec!["--volume".into(), format!("{d}:/a/../b")], "must be an absolute path of ordinary names"),
        (vec!["--volume".into(), format!("{d}:/data"), "--single-process".into()], "--volume cannot be used with --single-process on spt"),
    ];
    for (args, needle) in cases {
        let o = output(shoal().arg("run").args(&args).arg(&image));
        assert_eq!(o.status.code(), Some(125), "{args:?}: {}", stderr(&o));
        assert_clean_error(&o, needle);
        let o = output(std::process::Command::new(env!("CARGO_BIN_EXE_shoal-tender")).args(&args).arg(&image));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(125), "shoal-tender {args:?}: {err}");
        assert!(!err.contains("panicked") && err.lines().count() == 1, "{args:?}: {err}");
        assert!(err.starts_with("shoal-tender: ") && err.contains(needle), "{args:?}: `{err}` lacks `{needle}`");
    }
}

/// The case: Redis with its `dir` in a volume keeps its keys across
/// SIGTERM and a restart from the same host directory (RDB at shutdown and
/// the AOF, both written back), on every tender.
#[test]
fn redis_keeps_its_keys_across_sigterm_and_a_restart() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let found = std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("redis-cli").is_file()));
    assert!(found, "this test needs `redis-cli` (Debian package redis-tools; scripts/setup installs it)");
    let dir = scratch();
    let image = dir.path().join("redis.img");
    let o = output(shoal().args(["recipe", "build", "redis", "-o"]).arg(&image));
    assert!(o.status.success(), "shoal recipe build redis failed: {}", stderr(&o));
    let conf = home().join("apps/recipes/redis");
    let deadline = Duration::from_secs(60);
    for t in tenders() {
        let host = dir.path().join(format!("redis-{t}"));
        std::fs::create_dir(&host).unwrap();
        let cli = |port: u16, args: &[&str]| stdout(&output(Command::new("redis-cli").args(["-h", "127.0.0.1", "-p", &port.to_string()]).args(args)));
        // One run: start, wait for PING, do `f`, SIGTERM, expect status 0.
        let run = |n: u32, f: &dyn Fn(u16)| {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let log = dir.path().join(format!("redis-{t}-{n}.log"));
            let file = std::fs::File::create(&log).unwrap();
            let mut child = shoal_run(t)
                .arg("--fs")
                .arg(&conf)
                .arg("--volume")
                .arg(format!("{}:/data", host.display()))
                .args(["--mem", "512M", "-p", &format!("{port}:6379")])
                .arg(&image)
                .args(["--", "/redis.conf", "--port", "6379", "--dir", "/data"])
                .stdin(Stdio::null())
                .stdout(file.try_clone().unwrap())
                .stderr(file)
                .spawn()
                .unwrap();
            let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
            let t0 = Instant::now();
            while cli(port, &["ping"]) != "PONG\n" {
                if child.try_wait().unwrap().is_some() || t0.elapsed() > deadline {
                    let _ = child.kill();
                    panic!("{t} run {n}: no PONG; log:\n{}", log_text());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            f(port);
            // SAFETY: kill on our own child's pid.
            assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
            let t0 = Instant::now();
            let status = loop {
                if let Some(st) = child.try_wait().unwrap() {
                    break st;
                }
                if t0.elapsed() > deadline {
                    let _ = child.kill();
                    panic!("{t} run {n}: still running after SIGTERM; log:\n{}", log_text());
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            assert_eq!(status.code(), Some(0), "{t} run {n}; log:\n{}", log_text());
        };
        run(1, &|port| {
            assert_eq!(cli(port, &["set", "kept", "yes"]), "OK\n");
            assert_eq!(cli(port, &["rpush", "list", "a", "b", "c"]), "3\n");
        });
        assert!(host.join("dump.rdb").is_file(), "{t}: no dump.rdb in the volume: {:?}", tree(&host));
        assert!(host.join("appendonlydir").is_dir(), "{t}: no AOF directory in the volume: {:?}", tree(&host));
        run(2, &|port| {
            assert_eq!(cli(port, &["get", "kept"]), "yes\n", "{t}: the key after a restart");
            assert_eq!(cli(port, &["lrange", "list", "0", "-1"]), "a\nb\nc\n", "{t}: the list after a restart");
            assert_eq!(cli(port, &["incr", "restarts"]), "1\n");
        });
        run(3, &|port| assert_eq!(cli(port, &["get", "restarts"]), "1\n", "{t}: a key of the second run"));
    }
}
