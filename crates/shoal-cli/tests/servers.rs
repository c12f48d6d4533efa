//! Servers from Debian source packages on shoal (issue "Nginx and Redis on
//! shoal"): the `redis` recipe (recipes/redis.json) serving on 127.0.0.1
//! through a published port, talked to by Debian's own `redis-benchmark`
//! and `redis-cli` (package redis-tools, installed by scripts/setup), and
//! compared with the native static musl `redis-server` built from the same
//! sources. Each test runs on every tender `common::tenders()` finds (hvt
//! when /dev/kvm is usable, with a visible skip otherwise). Request counts
//! and waits are bounded; nothing here measures time.

mod common;
use common::*;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to answer its first PING or to exit.
const DEADLINE: Duration = Duration::from_secs(60);

/// Fails with a clear message when a client program the tests drive is
/// missing (scripts/setup installs it).
fn need(program: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "this test needs `{program}` (Debian package {package}; scripts/setup installs it)"
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Builds the `redis` recipe into `dir`: (image, native program).
fn build_redis(dir: &Path) -> (PathBuf, PathBuf) {
    let image = dir.join("redis.img");
    let native = dir.join("redis.native");
    let o = output(
        shoal()
            .args(["recipe", "build", "redis", "-o"])
            .arg(&image)
            .arg("--native")
            .arg(&native),
    );
    assert!(
        o.status.success(),
        "shoal recipe build redis failed: {}",
        stderr(&o)
    );
    (image, native)
}

fn conf_dir() -> PathBuf {
    home().join("apps/recipes/redis")
}

/// A running redis-server (native or on a tender) on a host port, its log
/// in a file. Killed if a test fails before it exits.
struct Redis {
    child: Child,
    port: u16,
    log: PathBuf,
    what: String,
}

impl Redis {
    /// The native program, with its files in `data`.
    fn native(native: &Path, data: &Path, log_dir: &Path) -> Redis {
        let port = free_port();
        let mut cmd = Command::new(native);
        cmd.arg(conf_dir().join("redis.conf"))
            .args(["--port", &port.to_string(), "--dir"])
            .arg(data);
        Redis::start(cmd, port, log_dir, "native")
    }

    /// The image on `tender`, its port published on 127.0.0.1.
    fn shoal(tender: &str, image: &Path, log_dir: &Path) -> Redis {
        let port = free_port();
        let mut cmd = shoal_run(tender);
        cmd.arg("--fs")
            .arg(conf_dir())
            .args(["--mem", "512M", "-p", &format!("{port}:6379")])
            .arg(image);
        cmd.args(["--", "/redis.conf", "--port", "6379", "--dir", "/tmp"]);
        Redis::start(cmd, port, log_dir, tender)
    }

    fn start(mut cmd: Command, port: u16, log_dir: &Path, what: &str) -> Redis {
        let log = log_dir.join(format!("redis-{what}.log"));
        let f = File::create(&log).unwrap();
        cmd.stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f);
        let child = cmd.spawn().unwrap();
        let mut r = Redis {
            child,
            port,
            log,
            what: what.to_string(),
        };
        r.wait_ready();
        r
    }

    fn cli(&self) -> Command {
        let mut c = Command::new("redis-cli");
        c.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        c
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until the server answers PING.
    fn wait_ready(&mut self) {
        let t0 = Instant::now();
        loop {
            let o = output(self.cli().arg("ping"));
            if stdout(&o) == "PONG\n" {
                return;
            }
            if let Some(st) = self.child.try_wait().unwrap() {
                panic!(
                    "{}: redis-server exited ({st}) before answering PING; log:\n{}",
                    self.what,
                    self.log()
                );
            }
            assert!(
                t0.elapsed() < DEADLINE,
                "{}: no PONG within {DEADLINE:?}; log:\n{}",
                self.what,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (bounded) for the server to exit; its exit code.
    fn wait_exit(&mut self) -> Option<i32> {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            assert!(
                t0.elapsed() < DEADLINE,
                "{}: still running {DEADLINE:?} after SHUTDOWN; log:\n{}",
                self.what,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `SHUTDOWN` through redis-cli; asserts a clean exit (status 0).
    fn shutdown(mut self) {
        let _ = output(self.cli().arg("shutdown"));
        let code = self.wait_exit();
        assert_eq!(
            code,
            Some(0),
            "{}: status after SHUTDOWN; log:\n{}",
            self.what,
            self.log()
        );
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Item 1: redis-benchmark's GET, SET, INCR, LPUSH and LRANGE workloads,
/// 10 000 requests each, all answered, on every tender; then SHUTDOWN
/// ends the instance with status 0.
#[test]
fn redis_answers_redis_benchmark() {
    need("redis-benchmark", "redis-tools");
    need("redis-cli", "redis-tools");
    let dir = scratch();
    let (image, _) = build_redis(dir.path());
    for tender in tenders() {
        let r = Redis::shoal(tender, &image, dir.path());
        let o = output(
            Command::new("redis-benchmark")
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &r.port.to_string(),
                    "-n",
                    "10000",
                    "-t",
                    "get,set,incr,lpush,lrange",
                    "--csv",
                ])
                .stdin(Stdio::null()),
        );
        assert!(
            o.status.success(),
            "{tender}: redis-benchmark failed: {}; log:\n{}",
            stderr(&o),
            r.log()
        );
        let csv = stdout(&o);
        for test in [
            "SET",
            "GET",
            "INCR",
            "LPUSH",
            "LRANGE_100 (first 100 elements)",
            "LRANGE_600 (first 600 elements)",
        ] {
            let row = csv.lines().find(|l| l.starts_with(&format!("\"{test}\",")));
            let rps: f64 = row
                .and_then(|l| l.split(',').nth(1))
                .and_then(|v| v.trim_matches('"').parse().ok())
                .unwrap_or_else(|| {
                    panic!("{tender}: no {test} row in redis-benchmark's output:\n{csv}")
                });
            assert!(rps > 0.0, "{tender}: {test}: {rps} requests per second");
        }
        // The workload really reached the server: the counter INCR raised.
        assert_eq!(
            stdout(&output(r.cli().args(["get", "counter:__rand_int__"]))),
            "10000\n",
            "{tender}"
        );
        r.shutdown();
    }
}

/// Parity: `redis-cli` fed a fixed script of 50 commands (strings,
/// counters, lists, hashes, sets, sorted sets, expiry, Lua) prints exactly
/// what it prints against the native redis-server from the same recipe.
#[test]
fn redis_cli_script_output_is_identical_to_native() {
    need("redis-cli", "redis-tools");
    let dir = scratch();
    let (image, native) = build_redis(dir.path());
    let script = conf_dir().join("script.redis");
    assert_eq!(
        std::fs::read_to_string(&script).unwrap().lines().count(),
        50
    );
    let run_script = |r: &Redis| {
        let o = output(r.cli().stdin(File::open(&script).unwrap()));
        assert!(
            o.status.success(),
            "{}: redis-cli failed: {}",
            r.what,
            stderr(&o)
        );
        stdout(&o)
    };
    let data = dir.path().join("native-data");
    std::fs::create_dir(&data).unwrap();
    let n = Redis::native(&native, &data, dir.path());
    let want = run_script(&n);
    n.shutdown();
    assert!(
        want.contains("hello world\n") && want.contains("quicklist\n"),
        "native output:\n{want}"
    );
    for tender in tenders() {
        let r = Redis::shoal(tender, &image, dir.path());
        let got = run_script(&r);
        assert_eq!(got, want, "{tender}: redis-cli output differs from native");
        r.shutdown();
    }
}
