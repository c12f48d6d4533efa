//! `shoal bench exec`: unmodified static Linux executables (`shoal run
//! EXECUTABLE`) on spt beside the same executable run natively. A getpid
//! through a rewritten site, through the trap path and natively
//! (apps/exec/getpid.c, `gcc -static`); `clock_gettime` through glibc
//! (the vDSO, shoal's on spt) and through the system call, on spt and
//! natively; a Go `net/http` hello server
//! (apps/exec/go/hello.go, `CGO_ENABLED=0`) under `wrk` at 1, 50 and 200
//! connections with the server on one CPU and wrk on another (as `bench
//! http --pin`), on spt with every rewritable site rewritten, on spt with
//! only `mov eax, imm32; syscall` pairs rewritten (`SHOAL_EXEC_REWRITE=pairs`,
//! how shoal rewrote at first: Go's `Syscall6` then takes the trap path)
//! and natively; the time from start to the server's first answer byte;
//! and its idle memory (PSS of the whole process tree).

use crate::host::{go, go_build, pin_binaries};
use crate::load::{free_port, wrk_errors, wrk_value};
use crate::sample::{pss_kib, tree};
use crate::servers::{pin_command, pin_cpus, Pin};
use crate::stats::{mean_sd, median, p95};
use crate::table::Table;
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Options of `shoal bench exec`.
pub struct ExecOpts {
    /// Fewer and shorter runs (a smoke run, not a measurement).
    pub quick: bool,
    /// Where CSVs, the plot and the Markdown table go.
    pub out: PathBuf,
    /// Print JSON instead of a table.
    pub json: bool,
}

/// How long a server may take to answer its first request.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The three ways the Go server runs.
const SYSTEMS: [&str; 3] = ["spt", "spt-pairs", "native"];

/// A running server and its port.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the Go server as `sys` on a free port (pinned to `pin`'s server
/// CPU if given) and waits for its first answer; returns it, the time
/// from spawn to the first byte of that answer and the CPU time its whole
/// process tree had used by then (load-independent, unlike the time).
fn start(sys: &str, shoal: &Path, exe: &Path, dir: &Path, pin: Option<Pin>) -> Result<(Server, Duration, Duration)> {
    let port = free_port()?;
    let mut cmd = match sys {
        "native" => {
            let mut c = Command::new(exe);
            c.arg(format!("127.0.0.1:{port}"));
            c
        }
        _ => {
            let mut c = Command::new(shoal);
            c.args(["run", "--tender", "spt", "-p", &format!("127.0.0.1:{port}:8080")]).arg(exe).args(["--", ":8080"]);
            if sys == "spt-pairs" {
                c.env("SHOAL_EXEC_REWRITE", "pairs");
            }
            c
        }
    };
    let log = dir.join(format!("hello-{sys}.log"));
    let f = std::fs::File::create(&log)?;
    cmd.stdin(Stdio::null()).stdout(f.try_clone()?).stderr(f);
    if let Some(p) = pin {
        pin_command(&mut cmd, p.server);
    }
    let t0 = Instant::now();
    let child = cmd.spawn().with_context(|| format!("cannot start the Go server ({sys})"))?;
    let mut server = Server { child, port };
    loop {
        if let Some(first) = first_byte(port) {
            let cpu = Duration::from_nanos(crate::sample::tree_cpu_ns(server.child.id()));
            return Ok((server, first.duration_since(t0), cpu));
        }
        if let Some(st) = server.child.try_wait()? {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            bail!("the Go server ({sys}) exited ({st}) before answering: {}", text.trim());
        }
        if t0.elapsed() > READY_TIMEOUT {
            bail!("the Go server ({sys}) did not answer within {} s", READY_TIMEOUT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One GET to 127.0.0.1:`port`: when its answer's first byte came, or
/// `None` if nothing answers yet.
fn first_byte(port: u16) -> Option<Instant> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(1) => Some(Instant::now()),
        _ => None,
    }
}

/// wrk against `port` with `conns` connections for `secs` seconds, on
/// `pin`'s client CPU: requests per second and errors.
fn wrk(port: u16, conns: usize, secs: u64, pin: Option<Pin>) -> Result<(f64, u64)> {
    let mut c = Command::new("wrk");
    c.args(["-t", &conns.min(2).to_string(), "-c", &conns.to_string(), "-d", &format!("{secs}s"), "--timeout", "30s"]);
    c.arg(format!("http://127.0.0.1:{port}/"));
    if let Some(p) = pin {
        pin_command(&mut c, p.client);
    }
    let out = c.stdin(Stdio::null()).output().context("cannot run wrk")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("wrk failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    let rps = wrk_value(&text, "Requests/sec:").ok_or_else(|| anyhow::anyhow!("no Requests/sec in wrk's output: {}", text.trim()))?;
    Ok((rps, wrk_errors(&text)))
}

/// Builds apps/exec/getpid.c (gcc -static) and apps/exec/go/hello.go.
fn build(home: &Path, dir: &Path) -> Result<(PathBuf, Option<PathBuf>)> {
    let getpid = dir.join("getpid");
    let o = Command::new("gcc").args(["-static", "-O2", "-o"]).arg(&getpid).arg(home.join("apps/exec/getpid.c")).output().context("cannot run gcc")?;
    if !o.status.success() {
        bail!("gcc -static apps/exec/getpid.c failed: {}", String::from_utf8_lossy(&o.stderr).trim());
    }
    let Some(go) = go() else { return Ok((getpid, None)) };
    let hello = dir.join("hello");
    let o = go_build(&go).arg("-o").arg(&hello).arg(home.join("apps/exec/go/hello.go")).output().context("cannot run go build")?;
    if !o.status.success() {
        bail!("go build apps/exec/go/hello.go failed: {}", String::from_utf8_lossy(&o.stderr).trim());
    }
    Ok((getpid, Some(hello)))
}

/// The rewritten and trap-path site counts `shoal inspect` gives.
fn sites(shoal: &Path, exe: &Path) -> Result<(u64, u64, u64)> {
    let o = Command::new(shoal).arg("inspect").arg(exe).output()?;
    let text = String::from_utf8_lossy(&o.stdout);
    let nums = |line: &str| -> Vec<u64> { line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect() };
    let total = text.lines().find(|l| l.starts_with("system-call sites")).map(nums).unwrap_or_default();
    let shapes = text.lines().find(|l| l.trim_start().starts_with("rewritten:")).map(nums).unwrap_or_default();
    match (&total[..], &shapes[..]) {
        ([found, _, _], [pairs, _, ..]) => Ok((*found, *pairs, total[1])),
        _ => bail!("unexpected output of shoal inspect: {}", text.trim()),
    }
}

pub fn exec(o: ExecOpts) -> Result<()> {
    let paths = shoal_toolchain::Paths::discover()?;
    std::fs::create_dir_all(&o.out).with_context(|| format!("cannot create {}", o.out.display()))?;
    let shoal = pin_binaries(&o.out.join("bin"))?;
    let tmp = tempfile::tempdir()?;
    let (getpid, hello) = build(&paths.home, tmp.path())?;
    let (repeat, iterations, secs, conns): (usize, u64, u64, &[usize]) = if o.quick { (2, 200_000, 1, &[1, 50]) } else { (3, 1_000_000, 5, &[1, 50, 200]) };

    // getpid: pair (rewritten on spt; the native system call natively)
    // and trap.
    // spt pair, spt trap, native.
    let mut g: [Vec<f64>; 3] = Default::default();
    // clock_gettime through libc (the vDSO) and through the system call:
    // spt vDSO, spt system call, native vDSO, native system call.
    let mut c: [Vec<f64>; 4] = Default::default();
    for _ in 0..repeat {
        let n = crate::syscall::run_measure(Command::new(&getpid).arg(iterations.to_string()))?;
        let s = crate::syscall::run_measure(Command::new(&shoal).args(["run", "--tender", "spt"]).arg(&getpid).arg("--").arg(iterations.to_string()))?;
        let get = |kv: &[(String, f64)], k: &str| kv.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
        g[0].extend(get(&s, "pair"));
        g[1].extend(get(&s, "trap"));
        g[2].extend(get(&n, "pair"));
        c[0].extend(get(&s, "clock_vdso"));
        c[1].extend(get(&s, "clock_syscall"));
        c[2].extend(get(&n, "clock_vdso"));
        c[3].extend(get(&n, "clock_syscall"));
    }
    let gs: Vec<(f64, f64)> = g.iter().map(|v| mean_sd(v)).collect();
    let cs: Vec<(f64, f64)> = c.iter().map(|v| mean_sd(v)).collect();

    // The Go server.
    let pin = pin_cpus()?;
    let mut rps: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); conns.len()]; SYSTEMS.len()];
    let mut errors = [0u64; 3];
    let mut first: Vec<Vec<f64>> = vec![Vec::new(); SYSTEMS.len()];
    let mut first_cpu: Vec<Vec<f64>> = vec![Vec::new(); SYSTEMS.len()];
    let mut pss: Vec<Vec<f64>> = vec![Vec::new(); SYSTEMS.len()];
    let mut site_counts = None;
    let mut start_failures: Vec<Vec<String>> = vec![Vec::new(); SYSTEMS.len()];
    if let Some(hello) = &hello {
        site_counts = Some(sites(&shoal, hello)?);
        // The first start of a new file builds its image or finds it by
        // content (reading and hashing both files): once per file, not
        // what a start costs. One start of each kind first, not counted.
        for sys in SYSTEMS.iter().filter(|s| **s != "native") {
            drop(start(sys, &shoal, hello, tmp.path(), Some(pin))?);
        }
        for _ in 0..repeat {
            for (si, sys) in SYSTEMS.iter().enumerate() {
                // A start that fails is counted and reported, and tried
                // again (at most five times), so that one failed start does
                // not lose the run, and no failure is hidden.
                let mut tries = 0;
                let (server, t, cpu) = loop {
                    match start(sys, &shoal, hello, tmp.path(), Some(pin)) {
                        Ok(s) => break s,
                        Err(e) if tries < 4 => {
                            tries += 1;
                            start_failures[si].push(e.to_string());
                        }
                        Err(e) => return Err(e),
                    }
                };
                first[si].push(t.as_secs_f64() * 1e3);
                first_cpu[si].push(cpu.as_secs_f64() * 1e3);
                std::thread::sleep(Duration::from_millis(500));
                pss[si].push(tree(server.child.id()).iter().map(|&p| pss_kib(p)).sum::<u64>() as f64);
                for (ci, &c) in conns.iter().enumerate() {
                    let (r, e) = wrk(server.port, c, secs, Some(pin))?;
                    rps[si][ci].push(r);
                    errors[si] += e;
                }
            }
        }
    }

    let ms = |v: &[f64]| mean_sd(v);
    let mut res = serde_json::Map::new();
    res.insert(
        "getpid".into(),
        json!({
            "rewritten_ns": {"mean": gs[0].0, "sd": gs[0].1},
            "trap_ns": {"mean": gs[1].0, "sd": gs[1].1},
            "native_ns": {"mean": gs[2].0, "sd": gs[2].1},
            "native_over_rewritten": gs[2].0 / gs[0].0,
        }),
    );
    res.insert(
        "clock_gettime".into(),
        json!({
            "vdso_ns": {"mean": cs[0].0, "sd": cs[0].1},
            "syscall_ns": {"mean": cs[1].0, "sd": cs[1].1},
            "native_vdso_ns": {"mean": cs[2].0, "sd": cs[2].1},
            "native_syscall_ns": {"mean": cs[3].0, "sd": cs[3].1},
        }),
    );
    if let Some((found, pairs, rewritten)) = site_counts {
        let mut http = serde_json::Map::new();
        for (ci, c) in conns.iter().enumerate() {
            let m: Vec<(f64, f64)> = (0..SYSTEMS.len()).map(|si| ms(&rps[si][ci])).collect();
            http.insert(
                c.to_string(),
                json!({
                    "spt_rps": {"mean": m[0].0, "sd": m[0].1},
                    "spt_pairs_rps": {"mean": m[1].0, "sd": m[1].1},
                    "native_rps": {"mean": m[2].0, "sd": m[2].1},
                    "spt_over_native": m[0].0 / m[2].0,
                    "spt_pairs_over_native": m[1].0 / m[2].0,
                }),
            );
        }
        let sys_json = |v: &[Vec<f64>], unit: &str| -> serde_json::Value {
            SYSTEMS
                .iter()
                .enumerate()
                .map(|(si, s)| (s.to_string(), json!({format!("median_{unit}"): median(&v[si]), format!("p95_{unit}"): p95(&v[si])})))
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        res.insert(
            "go_http".into(),
            json!({
                "sites": {"found": found, "rewritten_pairs_only": pairs, "rewritten": rewritten},
                "pinned": {"server_cpu": pin.server, "client_cpu": pin.client},
                "wrk_seconds": secs,
                "errors": {"spt": errors[0], "spt_pairs": errors[1], "native": errors[2]},
                "start_failures": {"spt": start_failures[0], "spt_pairs": start_failures[1], "native": start_failures[2]},
                "rps": http,
                "first_byte": sys_json(&first, "ms"),
                "first_byte_cpu": sys_json(&first_cpu, "ms"),
                "idle_pss": sys_json(&pss, "kib"),
            }),
        );
    } else {
        res.insert("go_http".into(), crate::Missing::Unavailable("Go is not installed (not on PATH, not in /usr/local/go)".into()).json());
    }

    // Tables, CSVs, the plot.
    let mut t = Table::new(["measure", "spt", "spt (pairs only)", "native", "ratio"]);
    let f1 = |(m, sd): (f64, f64)| format!("{m:.1} ± {sd:.1}");
    t.row(["getpid, rewritten site (ns)".to_string(), f1(gs[0]), "".into(), f1(gs[2]), format!("native {:.1}× dearer", gs[2].0 / gs[0].0)]);
    t.row(["getpid, trap path (ns)".to_string(), f1(gs[1]), "".into(), f1(gs[2]), format!("{:.1}× native", gs[1].0 / gs[2].0)]);
    t.row([
        "clock_gettime, vDSO (ns)".to_string(),
        f1(cs[0]),
        "".into(),
        f1(cs[2]),
        format!("{:.2}× native; {:.1}× cheaper than the call", cs[0].0 / cs[2].0, cs[1].0 / cs[0].0),
    ]);
    t.row(["clock_gettime, system call (ns)".to_string(), f1(cs[1]), "".into(), f1(cs[3]), format!("native {:.1}× dearer", cs[3].0 / cs[1].0)]);
    if let Some((found, pairs, rewritten)) = site_counts {
        t.row(["Go sites rewritten (of found)".to_string(), format!("{rewritten} of {found}"), format!("{pairs} of {found}"), "".into(), "".into()]);
        for (ci, c) in conns.iter().enumerate() {
            let m: Vec<(f64, f64)> = (0..SYSTEMS.len()).map(|si| ms(&rps[si][ci])).collect();
            let f0 = |(m, sd): (f64, f64)| format!("{m:.0} ± {sd:.0}");
            t.row([
                format!("Go hello, {c} conn. (req/s)"),
                f0(m[0]),
                f0(m[1]),
                f0(m[2]),
                format!("{:.2}× native ({:.2}× pairs only)", m[0].0 / m[2].0, m[1].0 / m[2].0),
            ]);
        }
        let mp = |v: &[f64]| format!("{:.1} / {:.1}", median(v), p95(v));
        t.row([
            "Go start → first byte, median / p95 (ms)".to_string(),
            mp(&first[0]),
            mp(&first[1]),
            mp(&first[2]),
            format!("{:.2}× native", median(&first[0]) / median(&first[2])),
        ]);
        t.row([
            "Go start → first byte, CPU of the process tree, median (ms)".to_string(),
            format!("{:.1}", median(&first_cpu[0])),
            format!("{:.1}", median(&first_cpu[1])),
            format!("{:.1}", median(&first_cpu[2])),
            format!("{:.2}× native", median(&first_cpu[0]) / median(&first_cpu[2])),
        ]);
        let mk = |v: &[f64]| format!("{:.0}", median(v));
        t.row(["Go idle PSS, median (KiB)".to_string(), mk(&pss[0]), mk(&pss[1]), mk(&pss[2]), format!("{:.2}× native", median(&pss[0]) / median(&pss[2]))]);
        for (si, sys) in SYSTEMS.iter().enumerate() {
            if let Some(last) = start_failures[si].last() {
                t.note(
                    format!("{sys} start failures"),
                    format!("{} (each tried again, at most five times in a row); the last: {last}", start_failures[si].len()),
                );
            }
        }
    } else {
        t.note("go", "Go is not installed (not on PATH, not in /usr/local/go): the Go server was not measured");
    }
    t.note(
        "conditions",
        format!(
            "{repeat} runs of each (after one uncounted start of each spt kind, which builds or finds its image by content); getpid {iterations} calls per run (the trap path a tenth); wrk {secs} s per run, server on CPU {}, wrk on CPU {}",
            pin.server, pin.client
        ),
    );
    t.write_csv(&o.out.join("exec.csv"))?;
    crate::table::write(&o.out.join("exec.md"), &t.markdown())?;
    let mut raw = Vec::new();
    for (si, sys) in SYSTEMS.iter().enumerate() {
        for (ci, c) in conns.iter().enumerate() {
            for r in &rps[si][ci] {
                raw.push(format!("{sys},{c},{r:.1}"));
            }
        }
    }
    crate::table::write_csv_lines(&o.out.join("exec-rps.csv"), "system,connections,rps", &raw)?;
    if site_counts.is_some() {
        let cats: Vec<String> = conns.iter().map(|c| format!("{c} conn.")).collect();
        let series: Vec<crate::plot::BarSeries> = SYSTEMS
            .iter()
            .enumerate()
            .map(|(si, s)| crate::plot::BarSeries { name: s.to_string(), values: (0..conns.len()).map(|ci| Some(ms(&rps[si][ci]))).collect() })
            .collect();
        let frame = crate::plot::Frame { title: "Go net/http hello, pinned", x_desc: "", y_desc: "req/s", log_x: false, log_y: false };
        if let Err(e) = crate::plot::bars(&o.out.join("exec-http.svg"), &frame, &cats, &series) {
            eprintln!("shoal bench exec: no plot: {e}");
        }
    }
    if o.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::Value::Object(res))?);
    } else {
        print!("{}", t.text());
        println!("(written to {})", o.out.display());
    }
    Ok(())
}
