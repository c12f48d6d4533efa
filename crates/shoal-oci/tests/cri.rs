//! Kubernetes' path into shoal: containerd's CRI plugin driven with
//! `crictl` exactly as the kubelet drives it (pod sandboxes, container
//! configs, logs, stats, resource updates, a RuntimeClass handler), on spt
//! and on hvt. Each test starts its own containerd (a private root, state
//! and socket) whose CRI runtime handler `shoal` is the runc shim calling
//! shoal-oci (docs/kubernetes.md), with a pause image built here as a shoal
//! image (apps/pause.c): nothing is pulled. Pods use the host's network.
//!
//! Needs root, containerd and crictl (scripts/setup builds it with go);
//! skips through shoal_testkit otherwise (hvt also needs /dev/kvm).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The binaries under test: shoal-oci and, beside it, shoal.
fn bin(name: &str) -> PathBuf {
    let oci = PathBuf::from(env!("CARGO_BIN_EXE_shoal-oci"));
    let p = oci.parent().unwrap().join(name);
    assert!(p.is_file(), "{} is missing: run cargo build --release first", p.display());
    p
}

fn home() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The test images as OCI archives (built once per test process): the
/// pause image, tests/app.c and apps/net/http.c.
fn archives() -> &'static Vec<PathBuf> {
    static ARCHIVES: OnceLock<Vec<PathBuf>> = OnceLock::new();
    ARCHIVES.get_or_init(|| {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("shoal-cri-images");
        for e in std::fs::read_dir(&base).into_iter().flatten().filter_map(Result::ok) {
            let gone = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()).is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists());
            if gone {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = base.join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let sources = [
            ("pause", home().join("apps/pause.c")),
            ("app", PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/app.c")),
            ("http", home().join("apps/net/http.c")),
        ];
        sources
            .iter()
            .map(|(name, src)| {
                let img = dir.join(name);
                let o = Command::new(bin("shoal")).arg("cc").arg("-O2").arg(src).arg("-o").arg(&img).output().unwrap();
                assert!(o.status.success(), "shoal cc {}: {}", src.display(), text(&o));
                let out = dir.join(format!("{name}.oci.tar"));
                let o = Command::new(bin("shoal")).arg("oci-image").arg(&img).args(["-t", &format!("shoal-cri-test/{name}"), "-o"]).arg(&out).output().unwrap();
                assert!(o.status.success(), "shoal oci-image {name}: {}", text(&o));
                out
            })
            .collect()
    })
}

const PAUSE: &str = "localhost/shoal-cri-test/pause:latest";
const APP: &str = "localhost/shoal-cri-test/app:latest";
const HTTP: &str = "localhost/shoal-cri-test/http:latest";

/// The containerd configuration docs/kubernetes.md shows: the runc shim
/// calling shoal-oci as the CRI runtime `shoal` (the `org.shoal.*`
/// annotations of pods and containers reach it), runc as the default
/// runtime, the pause image built here, and this test's own root, state
/// and socket.
fn containerd_config(dir: &Path) -> String {
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.shoal]
    runtime_type = "io.containerd.runc.v2"
    pod_annotations = ["org.shoal.*"]
    container_annotations = ["org.shoal.*"]
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.shoal.options]
      BinaryName = "{oci}"
"#,
        d = dir.display(),
        oci = bin("shoal-oci").display()
    )
}

/// A containerd of this test's own, with the test images imported into
/// the CRI's `k8s.io` namespace. Dropping it removes every pod (and so
/// every shim, which would outlive containerd), then stops containerd.
struct Cri {
    dir: tempfile::TempDir,
    daemon: Child,
    crictl: PathBuf,
}

impl Cri {
    fn start() -> Cri {
        let dir = tempfile::Builder::new().prefix("shoal-cri-test-").tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("cni")).unwrap();
        std::fs::create_dir_all(d.join("logs")).unwrap();
        std::fs::write(d.join("config.toml"), containerd_config(d)).unwrap();
        let daemon = Command::new("containerd")
            .arg("--config")
            .arg(d.join("config.toml"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("containerd.log")).unwrap())
            .spawn()
            .unwrap();
        let cri = Cri { dir, daemon, crictl: shoal_testkit::cri_tool("crictl").unwrap() };
        let t0 = Instant::now();
        while !cri.crictl(&["info"]).status.success() {
            assert!(t0.elapsed() < Duration::from_secs(60), "containerd's CRI did not come up: {}", cri.daemon_log());
            std::thread::sleep(Duration::from_millis(100));
        }
        for a in archives() {
            let o = Command::new("ctr").arg("--address").arg(cri.sock()).args(["-n", "k8s.io", "images", "import"]).arg(a).output().unwrap();
            assert!(o.status.success(), "ctr images import {}: {}", a.display(), text(&o));
        }
        // The CRI plugin sees images imported by ctr through containerd's
        // events: wait until it lists them.
        let t0 = Instant::now();
        loop {
            let imgs = String::from_utf8_lossy(&cri.crictl(&["images", "-q"]).stdout).lines().count();
            if imgs >= archives().len() {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "the CRI does not list the imported images: {}", text(&cri.crictl(&["images"])));
            std::thread::sleep(Duration::from_millis(100));
        }
        cri
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn sock(&self) -> PathBuf {
        self.dir().join("containerd.sock")
    }

    fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.dir().join("containerd.log")).unwrap_or_default()
    }

    fn crictl(&self, args: &[&str]) -> Output {
        // A config file of its own: crictl otherwise looks for
        // /etc/crictl.yaml and warns on stderr when there is none.
        let conf = self.dir().join("crictl.yaml");
        if !conf.exists() {
            let ep = format!("unix://{}", self.sock().display());
            std::fs::write(&conf, format!("runtime-endpoint: {ep}\nimage-endpoint: {ep}\ntimeout: 60\n")).unwrap();
        }
        Command::new(&self.crictl).arg("--config").arg(&conf).args(args).stdin(Stdio::null()).output().unwrap()
    }

    /// `crictl ARGS`, which must succeed; its stdout, trimmed.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.crictl(args);
        assert!(o.status.success(), "crictl {args:?}: {}\ncontainerd log tail:\n{}", text(&o), tail(&self.daemon_log(), 30));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// Writes `value` as `NAME.json` in the test's directory.
    fn file(&self, name: &str, value: &serde_json::Value) -> String {
        let p = self.dir().join(format!("{name}.json"));
        std::fs::write(&p, serde_json::to_vec_pretty(value).unwrap()).unwrap();
        p.to_string_lossy().into_owned()
    }

    /// `crictl inspect ID` as JSON.
    fn inspect(&self, id: &str) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["inspect", id])).unwrap()
    }

    /// Waits (bounded) until container `id` has exited; its status.
    fn wait_exited(&self, id: &str) -> serde_json::Value {
        let t0 = Instant::now();
        loop {
            let s = self.inspect(id);
            if s["status"]["state"] == "CONTAINER_EXITED" {
                return s["status"].clone();
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "{id} did not exit: {}", s["status"]);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits (bounded) until `crictl logs ID` holds `want`; the logs.
    fn wait_logs(&self, id: &str, want: &str) -> String {
        let t0 = Instant::now();
        loop {
            let logs = text(&self.crictl(&["logs", id]));
            if logs.contains(want) {
                return logs;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "{id} never logged {want:?}: {logs}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Cri {
    fn drop(&mut self) {
        let _ = self.crictl(&["rmp", "-fa"]);
        // SAFETY: SIGTERM to the containerd this test started.
        unsafe { libc::kill(self.daemon.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        while self.daemon.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        // containerd leaves its snapshots mounted under the private root.
        if let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") {
            let root = self.dir().to_string_lossy().into_owned();
            let mut mine: Vec<&str> = mounts.lines().filter_map(|l| l.split_whitespace().nth(1)).filter(|m| m.starts_with(&root)).collect();
            mine.sort_by_key(|m| std::cmp::Reverse(m.len()));
            for m in mine {
                let _ = Command::new("umount").arg("-l").arg(m).output();
            }
        }
    }
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Whether the test can run with `tender`; skips through shoal_testkit
/// otherwise.
fn ready(tender: &str) -> bool {
    if !shoal_testkit::need(&["root", "containerd", "crictl"]) {
        return false;
    }
    tender == "spt" || shoal_testkit::need(&["kvm"])
}

/// A pod on the host's network run with handler `shoal`, its tender chosen
/// by the pod's annotation (which reaches the pause container and every
/// container of the pod).
fn pod_config(cri: &Cri, name: &str, tender: &str) -> String {
    cri.file(
        &format!("pod-{name}"),
        &serde_json::json!({
            "metadata": {"name": name, "namespace": "shoal-test", "uid": format!("{name}-{}", std::process::id()), "attempt": 0},
            "log_directory": cri.dir().join("logs").join(name),
            "annotations": {"org.shoal.tender": tender},
            "linux": {"security_context": {"namespace_options": {"network": 2}}}
        }),
    )
}

/// A container config: `image` running `args` (the image's own entrypoint),
/// `attempt` as the kubelet counts restarts, `extra` merged in.
fn container_config(cri: &Cri, name: &str, attempt: u32, image: &str, args: &[&str], extra: serde_json::Value) -> String {
    let mut c = serde_json::json!({
        "metadata": {"name": name, "attempt": attempt},
        "image": {"image": image},
        "args": args,
        "log_path": format!("{name}-{attempt}.log"),
    });
    if let (Some(c), Some(e)) = (c.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            c.insert(k.clone(), v.clone());
        }
    }
    cri.file(&format!("ctr-{name}-{attempt}"), &c)
}

/// A u64 field of crictl's JSON, which prints protobuf's 64-bit values as
/// strings.
fn num(v: &serde_json::Value) -> u64 {
    v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok())).unwrap_or(0)
}

/// The memory cgroup of process `pid` (v1's memory controller, else v2's
/// unified hierarchy), as containerd's shim finds it for its stats.
fn memory_cgroup(pid: u64) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let v1 = text.lines().find_map(|l| l.split_once(":memory:").map(|(_, p)| Path::new("/sys/fs/cgroup/memory").join(p.trim_start_matches('/'))));
    v1.or_else(|| text.lines().find_map(|l| l.strip_prefix("0::").map(|p| Path::new("/sys/fs/cgroup").join(p.trim_start_matches('/')))))
}

/// The memory limit written in cgroup `dir`.
fn memory_limit(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join("memory.limit_in_bytes")).or_else(|_| std::fs::read_to_string(dir.join("memory.max"))).ok()?.trim().parse().ok()
}

/// HTTP GET of `path` on 127.0.0.1:`port`; the whole answer.
fn get(port: u16, path: &str) -> Option<String> {
    let mut c = std::net::TcpStream::connect_timeout(&std::net::SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_secs(2)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut s = String::new();
    c.read_to_string(&mut s).ok()?;
    Some(s)
}

/// The kubelet's flow for one pod with handler `shoal` on `tender`:
/// run the pod, a container that exits 42 (logs, inspect), a restart of a
/// container inside the running pod, an HTTP server reached from the host
/// (stats from its cgroup, a resource update, stop → reason), a container
/// over its memory limit (OOMKilled), then stop and remove the pod.
fn pod_lifecycle(tender: &str) {
    let cri = Cri::start();
    let pod_json = pod_config(&cri, "web", tender);
    let pod = cri.ok(&["runp", "--runtime", "shoal", &pod_json]);
    let p = serde_json::from_str::<serde_json::Value>(&cri.ok(&["inspectp", &pod])).unwrap();
    assert_eq!(p["status"]["state"], "SANDBOX_READY", "{p}");
    assert_eq!(p["info"]["runtimeHandler"], "shoal", "{}", p["info"]);
    // The pause container is a shoal instance under the chosen tender.
    assert_eq!(p["info"]["runtimeSpec"]["annotations"]["org.shoal.tender"], tender, "{}", p["info"]["runtimeSpec"]["annotations"]);

    // exit 42: the exit code, the reason and the logs as the kubelet reads them.
    let c42 = cri.ok(&["create", &pod, &container_config(&cri, "exit42", 0, APP, &["exit", "42"], serde_json::json!({})), &pod_json]);
    cri.ok(&["start", &c42]);
    let st = cri.wait_exited(&c42);
    assert_eq!((st["exitCode"].as_i64(), st["reason"].as_str()), (Some(42), Some("Error")), "{st}");
    let logs = cri.wait_logs(&c42, "exiting with 42");
    assert_eq!(logs.trim(), "exiting with 42", "{logs}");
    cri.ok(&["rm", &c42]);

    // A restart inside the running pod, as the kubelet does it: the
    // container ended, a new one with the next attempt number runs in the
    // same sandbox.
    let first = cri.ok(&["create", &pod, &container_config(&cri, "hello", 0, APP, &[], serde_json::json!({})), &pod_json]);
    cri.ok(&["start", &first]);
    let st = cri.wait_exited(&first);
    assert_eq!((st["exitCode"].as_i64(), st["reason"].as_str()), (Some(0), Some("Completed")), "{st}");
    let again = cri.ok(&["create", &pod, &container_config(&cri, "hello", 1, APP, &["exit", "3"], serde_json::json!({})), &pod_json]);
    cri.ok(&["start", &again]);
    let st = cri.wait_exited(&again);
    assert_eq!(st["exitCode"].as_i64(), Some(3), "{st}");
    assert_eq!(st["metadata"]["attempt"].as_u64(), Some(1), "{st}");
    assert_eq!(cri.wait_logs(&again, "exiting with 3").trim(), "exiting with 3");
    assert_eq!(cri.wait_logs(&first, "hello from a shoal container").trim(), "hello from a shoal container", "the first attempt's log is kept");
    let ps = cri.ok(&["ps", "-a", "-q", "-p", &pod]);
    assert_eq!(ps.lines().count(), 2, "{ps}");
    cri.ok(&["rm", &first, &again]);

    // An HTTP server on the pod's (the host's) network: the port is named
    // by the container's annotation, so the guest may bind it there.
    let port = 20000 + (std::process::id() % 20000) as u16 + if tender == "hvt" { 1 } else { 0 };
    let limit: u64 = 96 << 20;
    let web_cfg = container_config(
        &cri,
        "http",
        0,
        HTTP,
        &[&port.to_string(), "/"],
        serde_json::json!({"annotations": {"org.shoal.publish": port.to_string()}, "linux": {"resources": {"memory_limit_in_bytes": limit}}}),
    );
    let web = cri.ok(&["create", &pod, &web_cfg, &pod_json]);
    cri.ok(&["start", &web]);
    let t0 = Instant::now();
    let answer = loop {
        match get(port, "/hello") {
            Some(s) if s.contains("hello from http") => break s,
            other => assert!(t0.elapsed() < Duration::from_secs(60), "no answer on port {port}: {other:?}; logs: {}", text(&cri.crictl(&["logs", &web]))),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let s = cri.inspect(&web);
    assert_eq!(s["status"]["state"], "CONTAINER_RUNNING", "{}", s["status"]);
    assert_eq!(s["info"]["runtimeSpec"]["linux"]["resources"]["memory"]["limit"].as_u64(), Some(limit));
    let pid = s["info"]["pid"].as_u64().unwrap_or(0);
    let cg = memory_cgroup(pid).unwrap_or_else(|| panic!("no memory cgroup for the container's pid {pid}"));
    assert!(cg.ends_with(&web), "the container's own cgroup: {}", cg.display());
    assert_eq!(memory_limit(&cg), Some(limit), "the container's memory limit reaches its cgroup {}", cg.display());
    // Stats from the container's cgroup (the tender and its instance).
    let stats: serde_json::Value = serde_json::from_str(&cri.ok(&["stats", "-o", "json", &web])).unwrap();
    let s0 = &stats["stats"][0];
    assert_eq!(s0["attributes"]["id"], web.as_str(), "{stats}");
    let mem = num(&s0["memory"]["workingSetBytes"]["value"]);
    assert!(mem > 1 << 20 && mem <= limit, "working set {mem} of a running instance under its {limit}-byte limit: {stats}");
    assert!(num(&s0["cpu"]["usageCoreNanoSeconds"]["value"]) > 0, "{stats}");
    // A resource update reaches the cgroup (UpdateContainerResources →
    // shoal-oci update).
    let raised: u64 = 128 << 20;
    cri.ok(&["update", "--memory", &raised.to_string(), &web]);
    assert_eq!(memory_limit(&cg), Some(raised));
    assert!(get(port, "/hello").unwrap_or_default().contains("hello from http"), "still serving after the update");
    // Stop: SIGTERM reaches the guest, which has no handler and dies of
    // it (143), reported as the kubelet shows a killed container.
    cri.ok(&["stop", "--timeout", "20", &web]);
    let st = cri.inspect(&web)["status"].clone();
    assert_eq!((st["state"].as_str(), st["exitCode"].as_i64(), st["reason"].as_str()), (Some("CONTAINER_EXITED"), Some(143), Some("Error")), "{st}");
    assert!(get(port, "/hello").is_none(), "the port is closed once the container stopped");
    cri.ok(&["rm", &web]);
    assert!(!cg.exists(), "the container's cgroup {} is removed", cg.display());

    // A container that touches more memory than its limit: the kernel's
    // OOM killer ends the instance inside its cgroup, and the CRI reports
    // it as the kubelet shows it (137, OOMKilled).
    let small: u64 = 32 << 20;
    let hog_cfg = container_config(&cri, "hog", 0, APP, &["alloc", "64"], serde_json::json!({"linux": {"resources": {"memory_limit_in_bytes": small}}}));
    let hog = cri.ok(&["create", &pod, &hog_cfg, &pod_json]);
    cri.ok(&["start", &hog]);
    let st = cri.wait_exited(&hog);
    assert_eq!((st["exitCode"].as_i64(), st["reason"].as_str()), (Some(137), Some("OOMKilled")), "{st}");
    let logs = cri.wait_logs(&hog, "touched 1 MiB");
    assert!(!logs.contains("touched 32 MiB"), "the guest used its whole limit and more: {logs}");
    cri.ok(&["rm", &hog]);

    cri.ok(&["stopp", &pod]);
    let p = serde_json::from_str::<serde_json::Value>(&cri.ok(&["inspectp", &pod])).unwrap();
    assert_eq!(p["status"]["state"], "SANDBOX_NOTREADY", "{p}");
    cri.ok(&["rmp", &pod]);
    assert_eq!(cri.ok(&["pods", "-q"]), "", "pods left behind");
    assert_eq!(cri.ok(&["ps", "-a", "-q"]), "", "containers left behind");
}

#[test]
fn crictl_pod_lifecycle_on_spt() {
    if ready("spt") {
        pod_lifecycle("spt");
    }
}

#[test]
fn crictl_pod_lifecycle_on_hvt() {
    if ready("hvt") {
        pod_lifecycle("hvt");
    }
}
