//! `shoal bench cri`: start latency through Kubernetes' container runtime
//! interface, as the kubelet drives it (docs/kubernetes.md), for containerd's
//! runc handler beside the `shoal` handler (the runc shim calling
//! `shoal-oci`) on spt and on hvt. Each system gets a containerd of its own
//! (containerd 1.6 has one sandbox image for all handlers: runc's pods a
//! static Linux `apps/pause.c`, shoal's the same file built as a shoal
//! image) and the same container image: apps/exec/go/httpd.go built static
//! in a `FROM scratch` image, an ordinary image that shoal runs as an
//! unmodified executable; `spt-image` is apps/net/http.c built as a shoal
//! image, on spt (what an executable and Go's start add). Per run: `crictl runp` of a host-network pod
//! (pod sandbox start to ready: the call returns when the sandbox is
//! ready), then `crictl create` + `crictl start` of the server and GETs
//! until the first answer byte. Systems alternate within each round, one
//! warm-up round first (snapshots unpacked, the executable's instance
//! image built and cached), pods removed after each run, not timed.
//! Every `crictl` call is a process of its own (about as much for each
//! system), as `crictl` is used by hand.

use crate::host::{find_program, go, go_build, kvm_usable, pin_binaries};
use crate::load::free_port;
use crate::stats::{mean_sd, median, p95};
use crate::table::Table;
use crate::Missing;
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Options of `shoal bench cri`.
pub struct CriOpts {
    /// Measured rounds (each system once per round).
    pub repeat: usize,
    /// Fewer rounds (a smoke run, not a measurement).
    pub quick: bool,
    /// Systems: runc, spt, hvt, spt-image (default all).
    pub systems: Vec<String>,
    /// Where the images, logs, CSVs, the plot and the Markdown table go.
    pub out: PathBuf,
    /// Print JSON instead of a table.
    pub json: bool,
}

/// The systems, in the order they run within a round.
/// `spt-image` runs apps/net/http.c built as a shoal image instead of the
/// Go executable: what is the executable's (and Go's) share of a start.
const ALL: [&str; 4] = ["runc", "spt", "hvt", "spt-image"];

/// How long a server may take to answer its first request.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

const GOHTTP: &str = "localhost/shoal-bench/gohttp:latest";
const PAUSE_LINUX: &str = "localhost/shoal-bench/pause-linux:latest";
const PAUSE_SHOAL: &str = "localhost/shoal-bench/pause:latest";
const HTTP_SHOAL: &str = "localhost/shoal-bench/http:latest";

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)).trim().to_string()
}

/// Runs `cmd`, which must succeed; what it printed.
fn run(cmd: &mut Command, what: &str) -> Result<String> {
    let o = cmd.stdin(Stdio::null()).output().with_context(|| format!("cannot run {what}"))?;
    if !o.status.success() {
        bail!("{what} failed ({}): {}", o.status, text(&o));
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// Why this machine cannot run the bench at all, if it cannot.
fn unavailable() -> Option<String> {
    if crate::host::effective_uid() != Some(0) {
        return Some("needs root (containerd and its runtimes)".into());
    }
    for p in ["containerd", "ctr", "podman", "runc", "musl-gcc"] {
        if find_program(p).is_none() {
            return Some(format!("{p} is not installed (scripts/setup installs it)"));
        }
    }
    if shoal_testkit::cri_tool("crictl").is_none() {
        return Some("crictl is not built into ~/.cache/shoal/cri-tools-* (scripts/setup builds it with go)".into());
    }
    if go().is_none() {
        return Some("no Go toolchain (not on PATH, not in /usr/local/go)".into());
    }
    None
}

/// Builds the four images as OCI archives in `dir`: the Go server and the
/// Linux pause with podman (`FROM scratch`), the shoal pause and
/// apps/net/http.c with `shoal cc` + `shoal oci-image`; and shoal's kernel
/// image for executables (through `shoal run` of the server, which exits
/// at once on a bad address).
fn build(home: &Path, shoal: &Path, dir: &Path) -> Result<[PathBuf; 4]> {
    let go_dir = dir.join("gohttp");
    std::fs::create_dir_all(&go_dir)?;
    let go = go().context("no Go toolchain")?;
    run(go_build(&go).arg("-o").arg(go_dir.join("httpd")).arg(home.join("apps/exec/go/httpd.go")), "go build apps/exec/go/httpd.go")?;
    std::fs::write(go_dir.join("Containerfile"), "FROM scratch\nCOPY httpd /httpd\nENTRYPOINT [\"/httpd\"]\n")?;
    let pause_dir = dir.join("pause-linux");
    std::fs::create_dir_all(&pause_dir)?;
    run(Command::new("musl-gcc").args(["-static", "-O2", "-o"]).arg(pause_dir.join("pause")).arg(home.join("apps/pause.c")), "musl-gcc -static apps/pause.c")?;
    std::fs::write(pause_dir.join("Containerfile"), "FROM scratch\nCOPY pause /pause\nENTRYPOINT [\"/pause\"]\n")?;
    let mut out = Vec::new();
    for (ctx, tag, name) in [(&go_dir, GOHTTP, "gohttp"), (&pause_dir, PAUSE_LINUX, "pause-linux")] {
        run(Command::new("podman").args(["build", "-q", "-t", tag]).arg(ctx), &format!("podman build {tag}"))?;
        let tar = dir.join(format!("{name}.oci.tar"));
        let _ = std::fs::remove_file(&tar);
        run(Command::new("podman").args(["save", "--format", "oci-archive", "-o"]).arg(&tar).arg(tag), &format!("podman save {tag}"))?;
        out.push(tar);
    }
    for (src, name) in [("apps/pause.c", "pause"), ("apps/net/http.c", "http")] {
        let img = dir.join(format!("{name}.img"));
        run(Command::new(shoal).args(["cc", "-O2"]).arg(home.join(src)).arg("-o").arg(&img), &format!("shoal cc {src}"))?;
        let tar = dir.join(format!("{name}.oci.tar"));
        run(Command::new(shoal).arg("oci-image").arg(&img).args(["-t", &format!("shoal-bench/{name}"), "-o"]).arg(&tar), &format!("shoal oci-image {name}"))?;
        out.push(tar);
    }
    let _ = Command::new(shoal).arg("run").arg(go_dir.join("httpd")).args(["--", "no:such:address"]).stdin(Stdio::null()).output();
    match shoal_tender::exec_kernel_image() {
        Some(k) if k.is_file() => {}
        k => bail!("shoal run did not build the kernel image executables run on ({k:?})"),
    }
    let [a, b, c, d] = <[PathBuf; 4]>::try_from(out).map_err(|_| anyhow::anyhow!("four images"))?;
    Ok([a, b, c, d])
}

/// A containerd of the bench's own (private root, state and socket) for
/// one system's pods: the one the CRI tests start
/// (`shoal_testkit::containerd`). Dropping it removes every pod, then
/// stops it.
struct Containerd(shoal_testkit::containerd::Containerd);

impl Containerd {
    fn start(dir: &Path, oci: &Path, sandbox_image: &str, images: &[&Path]) -> Result<Containerd> {
        let setup = shoal_testkit::containerd::Setup { oci, sandbox_image, cni_conflist: None, images };
        shoal_testkit::containerd::Containerd::start(dir, &setup).map(Containerd).map_err(|e| anyhow::anyhow!(e))
    }

    fn dir(&self) -> &Path {
        self.0.dir()
    }

    fn crictl(&self, args: &[&str]) -> std::io::Result<Output> {
        self.0.crictl(args)
    }

    fn ok(&self, args: &[&str]) -> Result<String> {
        let o = self.crictl(args).context("cannot run crictl")?;
        if !o.status.success() {
            bail!("crictl {}: {}", args.first().copied().unwrap_or_default(), text(&o));
        }
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    }
}

/// One GET to 127.0.0.1:`port`: whether an answer's first byte came.
fn answers(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(1))
}

/// One run's times in milliseconds.
#[derive(Clone, Copy)]
struct Times {
    /// `crictl runp` → the pod is ready.
    pod: f64,
    /// `crictl create` + `crictl start` → the first answer byte.
    first: f64,
    /// Of which `crictl create`.
    create: f64,
}

/// One run on `sys`. The pod is removed afterwards.
fn once(c: &Containerd, sys: &str, n: usize) -> Result<Times> {
    let port = free_port()?;
    let name = format!("bench-{sys}-{n}");
    let mut pod = json!({
        "metadata": {"name": name, "namespace": "shoal-bench", "uid": format!("{name}-{}", std::process::id()), "attempt": 0},
        "log_directory": c.dir().join("logs").join(&name),
        "linux": {"security_context": {"namespace_options": {"network": 2}}}
    });
    let mut ctr = json!({
        "metadata": {"name": "http", "attempt": 0},
        "image": {"image": GOHTTP},
        "args": [format!("{port}")],
        "log_path": "http.log",
    });
    if sys == "spt-image" {
        ctr["image"] = json!({"image": HTTP_SHOAL});
        ctr["args"] = json!([format!("{port}"), "/"]);
    }
    if sys != "runc" {
        pod["annotations"] = json!({"org.shoal.tender": if sys == "hvt" { "hvt" } else { "spt" }});
        // On the host's network the guest binds only the ports named.
        ctr["annotations"] = json!({"org.shoal.publish": port.to_string()});
    }
    let pod_json = c.dir().join(format!("{name}.pod.json"));
    let ctr_json = c.dir().join(format!("{name}.ctr.json"));
    std::fs::write(&pod_json, pod.to_string())?;
    std::fs::write(&ctr_json, ctr.to_string())?;
    let (pj, cj) = (pod_json.to_string_lossy().into_owned(), ctr_json.to_string_lossy().into_owned());
    let handler = if sys == "runc" { "runc" } else { "shoal" };
    let t0 = Instant::now();
    let pod_id = c.ok(&["runp", "--runtime", handler, &pj])?;
    let pod_ms = t0.elapsed().as_secs_f64() * 1e3;
    let result = (|| {
        let t1 = Instant::now();
        let id = c.ok(&["create", &pod_id, &cj, &pj])?;
        let create = t1.elapsed().as_secs_f64() * 1e3;
        c.ok(&["start", &id])?;
        loop {
            if answers(port) {
                return Ok((t1.elapsed().as_secs_f64() * 1e3, create));
            }
            if t1.elapsed() > READY_TIMEOUT {
                let logs = c.crictl(&["logs", &id]).map(|o| text(&o)).unwrap_or_default();
                bail!("the server did not answer within {} s: {logs}", READY_TIMEOUT.as_secs());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    })();
    let _ = c.ok(&["stopp", &pod_id]);
    let _ = c.ok(&["rmp", &pod_id]);
    let (first, create) = result?;
    Ok(Times { pod: pod_ms, first, create })
}

/// Why `sys` cannot run here.
fn system_unavailable(sys: &str) -> Option<String> {
    (sys == "hvt").then(kvm_usable).and_then(Result::err)
}

pub fn cri(o: CriOpts) -> Result<()> {
    let systems: Vec<&str> = if o.systems.is_empty() { ALL.to_vec() } else { ALL.iter().copied().filter(|s| o.systems.iter().any(|w| w == s)).collect() };
    if let Some(bad) = o.systems.iter().find(|s| !ALL.contains(&s.as_str())) {
        bail!("--systems {bad}: expected runc, spt, hvt or spt-image");
    }
    if let Some(why) = unavailable() {
        return Err(crate::BenchError::nothing_measured("cri", &[format!("unavailable here: {why}")]).into());
    }
    let repeat = if o.quick { 3 } else { o.repeat.max(2) };
    std::fs::create_dir_all(&o.out).with_context(|| format!("cannot create {}", o.out.display()))?;
    let shoal = pin_binaries(&o.out.join("bin"))?;
    // shoal-oci beside the pinned tenders: it runs the shoal-tender beside it.
    let oci = o.out.join("bin/shoal-oci");
    let _ = std::fs::remove_file(&oci);
    std::fs::copy(std::env::current_exe()?.with_file_name("shoal-oci"), &oci).context("cannot copy shoal-oci (build it: cargo build --release)")?;
    let paths = shoal_toolchain::Paths::discover()?;
    let work = tempfile::Builder::new().prefix("shoal-bench-cri-").tempdir()?;
    let [gohttp, pause_linux, pause_shoal, http_shoal] = build(&paths.home, &shoal, work.path())?;

    let mut missing: Vec<(String, Missing)> = Vec::new();
    let mut daemons: Vec<(&str, Containerd)> = Vec::new();
    for sys in &systems {
        if let Some(why) = system_unavailable(sys) {
            missing.push((sys.to_string(), Missing::Unavailable(why)));
            continue;
        }
        let (sandbox, pause) = if *sys == "runc" { (PAUSE_LINUX, &pause_linux) } else { (PAUSE_SHOAL, &pause_shoal) };
        let server = if *sys == "spt-image" { &http_shoal } else { &gohttp };
        match Containerd::start(&work.path().join(sys), &oci, sandbox, &[server, pause]) {
            Ok(c) => daemons.push((sys, c)),
            Err(e) => missing.push((sys.to_string(), Missing::Failed(format!("{e:#}")))),
        }
    }
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut pod: Vec<Vec<f64>> = vec![Vec::new(); daemons.len()];
    let mut first: Vec<Vec<f64>> = vec![Vec::new(); daemons.len()];
    let mut create: Vec<Vec<f64>> = vec![Vec::new(); daemons.len()];
    let mut failed: Vec<Option<String>> = vec![None; daemons.len()];
    let bar = crate::progress::Progress::new("bench cri", ((repeat + 1) * daemons.len()) as u64, o.json);
    for round in 0..=repeat {
        for (i, (sys, c)) in daemons.iter().enumerate() {
            bar.doing(&format!("round {round}, {sys}"));
            bar.step();
            if failed[i].is_some() {
                continue;
            }
            match once(c, sys, round) {
                // Round 0 is the warm-up.
                Ok(t) if round > 0 => {
                    pod[i].push(t.pod);
                    first[i].push(t.first);
                    create[i].push(t.create);
                }
                Ok(_) => {}
                Err(e) => failed[i] = Some(format!("{e:#}")),
            }
        }
    }
    drop(bar);
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let names: Vec<&str> = daemons.iter().map(|(s, _)| *s).collect();
    drop(daemons);
    for (i, f) in failed.iter().enumerate() {
        if let Some(why) = f {
            missing.push((names[i].to_string(), Missing::Failed(why.clone())));
        }
    }
    let measured: Vec<usize> = (0..names.len()).filter(|&i| failed[i].is_none() && !pod[i].is_empty()).collect();
    if measured.is_empty() {
        let reasons: Vec<String> = missing.iter().map(|(s, m)| format!("{s}: {m}")).collect();
        return Err(crate::BenchError::nothing_measured("cri", &reasons).into());
    }
    let runc = measured.iter().copied().find(|&i| names[i] == "runc");
    let ratio = |v: &[Vec<f64>], i: usize| runc.map(|r| median(&v[i]) / median(&v[r]));

    let mut res = serde_json::Map::new();
    for &i in &measured {
        let m = |v: &[f64]| {
            let (mean, sd) = mean_sd(v);
            json!({"median_ms": median(v), "p95_ms": p95(v), "mean_ms": mean, "sd_ms": sd, "n": v.len()})
        };
        res.insert(
            names[i].to_string(),
            json!({"pod_ready": m(&pod[i]), "first_answer": m(&first[i]), "create": m(&create[i]), "pod_ready_over_runc": ratio(&pod, i), "first_answer_over_runc": ratio(&first, i)}),
        );
    }
    for (s, m) in &missing {
        res.insert(s.clone(), m.json());
    }
    res.insert(
        "conditions".into(),
        json!({"rounds": repeat, "warm_up_rounds": 1, "loadavg_before": load_before.trim(), "loadavg_after": load_after.trim(), "network": "host"}),
    );

    let mut t = Table::new([
        "system",
        "runp → pod ready, median / p95 (ms)",
        "create + start → first answer, median / p95 (ms)",
        "of which create, median (ms)",
        "mean ± SD (ms)",
        "ratio to runc (medians)",
    ]);
    let mp = |v: &[f64]| format!("{:.0} / {:.0}", median(v), p95(v));
    for &i in &measured {
        let (pm, ps) = mean_sd(&pod[i]);
        let (fm, fs) = mean_sd(&first[i]);
        let r = match (ratio(&pod, i), ratio(&first, i)) {
            (Some(a), Some(b)) => format!("{a:.2}× / {b:.2}×"),
            _ => "–".into(),
        };
        let label = match names[i] {
            "runc" => "runc (Go executable)".to_string(),
            "spt-image" => "shoal spt (shoal image, apps/net/http.c)".to_string(),
            s => format!("shoal {s} (Go executable)"),
        };
        t.row([label, mp(&pod[i]), mp(&first[i]), format!("{:.0}", median(&create[i])), format!("{pm:.0} ± {ps:.0} / {fm:.0} ± {fs:.0}"), r]);
    }
    for (s, m) in &missing {
        t.note(s.clone(), m.to_string());
    }
    t.note(
        "conditions",
        format!(
            "{repeat} rounds after one warm-up round, systems alternating; host-network pods; the same FROM-scratch Go image (apps/exec/go/httpd.go) on runc, spt and hvt; load average before {} and after {}",
            load_before.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
            load_after.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
        ),
    );
    t.write_csv(&o.out.join("cri.csv"))?;
    crate::table::write(&o.out.join("cri.md"), &t.markdown())?;
    let mut raw = Vec::new();
    for &i in &measured {
        for ((p, f), c) in pod[i].iter().zip(&first[i]).zip(&create[i]) {
            raw.push(format!("{},{p:.2},{f:.2},{c:.2}", names[i]));
        }
    }
    crate::table::write_csv_lines(&o.out.join("cri-samples.csv"), "system,pod_ready_ms,first_answer_ms,create_ms", &raw)?;
    let cats = vec!["runp → pod ready".to_string(), "create + start → first answer".to_string()];
    let series: Vec<crate::plot::BarSeries> = measured
        .iter()
        .map(|&i| crate::plot::BarSeries { name: names[i].to_string(), values: vec![Some(mean_sd(&pod[i])), Some(mean_sd(&first[i]))] })
        .collect();
    let frame = crate::plot::Frame { title: "Start through containerd's CRI (crictl)", x_desc: "", y_desc: "ms (mean ± SD)", log_x: false, log_y: false };
    if let Err(e) = crate::plot::bars(&o.out.join("cri.svg"), &frame, &cats, &series) {
        eprintln!("shoal bench cri: no plot: {e}");
    }
    if o.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::Value::Object(res))?);
    } else {
        print!("{}", t.text());
        println!("(written to {})", o.out.display());
    }
    Ok(())
}
