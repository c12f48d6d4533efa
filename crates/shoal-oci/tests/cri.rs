//! Kubernetes' path into shoal: containerd's CRI plugin driven with
//! `crictl` exactly as the kubelet drives it (pod sandboxes, container
//! configs, logs, stats, resource updates, a RuntimeClass handler), on spt
//! and on hvt. Each test starts its own containerd (a private root, state
//! and socket) whose CRI runtime handler `shoal` is the runc shim calling
//! shoal-oci (docs/kubernetes.md), with a pause image built here as a shoal
//! image (apps/pause.c): nothing is pulled. The shoal images' pods use the
//! host's network; the ordinary images' pod has a network namespace of its
//! own on a CNI bridge of the test's own (Debian's plugins in /usr/lib/cni),
//! reached from the host only through a port mapping on 127.0.0.1 (CNI's
//! `portmap`, as the kubelet's `hostPort` with `hostIP`): every request a
//! test makes goes to a loopback address.
//!
//! Needs root, containerd and crictl (scripts/setup builds it with go);
//! the ordinary images also podman, Go and busybox (Debian's
//! busybox-static); skips through shoal_testkit otherwise (hvt also needs
//! /dev/kvm).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
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

/// A CNI network of a test's own: a bridge (named after the test process
/// and tender, at most 15 characters) with a /24 of 10.238.0.0/16 and no
/// uplink, and `portmap` chained after it, which turns a pod's
/// `port_mappings` into DNAT rules: a mapping with `host_ip` 127.0.0.1
/// reaches the pod from the host's loopback. For that, portmap itself sets
/// `net.ipv4.conf.BRIDGE.route_localnet=1` (127/8 may then be routed to the
/// bridge; the bridge and its setting go with the test) and masquerades the
/// connection's 127.0.0.1 source.
struct Cni {
    name: String,
    subnet: String,
}

impl Cni {
    fn new(tender: &str) -> Cni {
        Cni { name: format!("shoalt{}{}", std::process::id() % 100_000, &tender[..1]), subnet: format!("{}.0/24", Cni::prefix(tender)) }
    }

    /// The first three octets of the network's addresses.
    fn prefix(tender: &str) -> String {
        format!("10.238.{}", (std::process::id() % 120) * 2 + u32::from(tender == "hvt"))
    }

    /// The network's configuration list, as scripts/critest writes its own.
    fn conflist(&self) -> String {
        format!(
            r#"{{"cniVersion": "1.0.0", "name": "{n}", "plugins": [
  {{"type": "bridge", "bridge": "{n}", "isGateway": true, "ipMasq": false,
   "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "{s}"}}]]}}}},
  {{"type": "portmap", "capabilities": {{"portMappings": true}}}},
  {{"type": "loopback"}}]}}"#,
            n = self.name,
            s = self.subnet
        )
    }
}

impl Drop for Cni {
    fn drop(&mut self) {
        // The pods' interfaces went with them (CNI DEL at stopp/rmp); the
        // bridge and the address book of host-local stay otherwise.
        let _ = Command::new("ip").args(["link", "del", &self.name]).output();
        let _ = std::fs::remove_dir_all(Path::new("/var/lib/cni/networks").join(&self.name));
    }
}

/// A containerd of this test's own (shoal_testkit::containerd: the one
/// the bench starts too), with the test images imported into the CRI's
/// `k8s.io` namespace and pods on `cni` if any. Dropping it removes every
/// pod and stops containerd, then the bridge goes, then the directory.
struct Cri {
    c: shoal_testkit::containerd::Containerd,
    _cni: Option<Cni>,
    dir: tempfile::TempDir,
}

impl Cri {
    fn start() -> Cri {
        Cri::start_with(None, &[])
    }

    /// A containerd with pods on `cni` (if any) and `more` images imported
    /// beside the shoal test images.
    fn start_with(cni: Option<Cni>, more: &[PathBuf]) -> Cri {
        let dir = tempfile::Builder::new().prefix("shoal-cri-test-").tempdir().unwrap();
        let images: Vec<&Path> = archives().iter().chain(more).map(PathBuf::as_path).collect();
        let conflist = cni.as_ref().map(Cni::conflist);
        let oci = bin("shoal-oci");
        let setup = shoal_testkit::containerd::Setup { oci: &oci, sandbox_image: PAUSE, cni_conflist: conflist.as_deref(), images: &images };
        let c = shoal_testkit::containerd::Containerd::start(dir.path(), &setup).unwrap_or_else(|e| panic!("{e}"));
        Cri { c, _cni: cni, dir }
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn daemon_log(&self) -> String {
        self.c.log()
    }

    fn crictl(&self, args: &[&str]) -> Output {
        self.c.crictl(args).unwrap()
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
    // Under 1 MiB since the image's read-only pages are mapped from its file.
    assert!(mem > 256 << 10 && mem <= limit, "working set {mem} of a running instance under its {limit}-byte limit: {stats}");
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

const GOHTTP: &str = "localhost/shoal-cri-test/gohttp:latest";
const BUSYBOX: &str = "localhost/shoal-cri-test/busybox:latest";

/// Ordinary images, as their users have them, built offline with podman
/// from local files and saved as OCI archives (once per test process):
/// `FROM scratch` holding apps/exec/go/httpd.go built static, and
/// Debian's busybox-static with a few applets' links and a shell script.
/// Builds shoal's kernel image for executables too (`shoal run` of
/// busybox), which `shoal-oci create` needs and does not build itself.
fn ordinary_archives() -> &'static Vec<PathBuf> {
    static ARCHIVES: OnceLock<Vec<PathBuf>> = OnceLock::new();
    ARCHIVES.get_or_init(|| {
        let dir = archives()[0].parent().unwrap().join("ordinary");
        std::fs::create_dir_all(dir.join("go")).unwrap();
        let go = shoal_testkit::go_toolchain().unwrap();
        let o = shoal_testkit::go_build(&go).arg("-o").arg(dir.join("go/httpd")).arg(home().join("apps/exec/go/httpd.go")).output().unwrap();
        assert!(o.status.success(), "go build httpd.go: {}", text(&o));
        std::fs::write(dir.join("go/Containerfile"), "FROM scratch\nCOPY httpd /httpd\nENTRYPOINT [\"/httpd\"]\n").unwrap();

        let bb = dir.join("bb");
        std::fs::create_dir_all(bb.join("root/bin")).unwrap();
        let busybox = shoal_testkit::program("busybox").unwrap();
        std::fs::copy(&busybox, bb.join("root/bin/busybox")).unwrap();
        for applet in ["sh", "echo", "true", "sleep", "cat", "id", "hostname", "grep", "chmod"] {
            std::os::unix::fs::symlink("busybox", bb.join("root/bin").join(applet)).unwrap();
        }
        std::fs::write(bb.join("root/bin/hello.sh"), "#!/bin/sh\necho hello\n").unwrap();
        std::fs::set_permissions(bb.join("root/bin/hello.sh"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::write(bb.join("Containerfile"), "FROM scratch\nCOPY root/ /\nENV PATH=/bin\nCMD [\"sh\"]\n").unwrap();

        // The kernel image executables run on, built by `shoal run` (the
        // runtime only finds it): also a check that busybox runs at all.
        let o = Command::new(bin("shoal")).arg("run").arg(&busybox).args(["--", "echo", "kernel image ready"]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout), "kernel image ready\n", "shoal run busybox echo: {}", text(&o));

        [("gohttp", GOHTTP, dir.join("go")), ("busybox", BUSYBOX, bb)]
            .into_iter()
            .map(|(name, tag, ctx)| {
                let o = Command::new("podman").args(["build", "-q", "-t", tag]).arg(&ctx).output().unwrap();
                assert!(o.status.success(), "podman build {tag}: {}", text(&o));
                let out = dir.join(format!("{name}.oci.tar"));
                let _ = std::fs::remove_file(&out);
                let o = Command::new("podman").args(["save", "--format", "oci-archive", "-o"]).arg(&out).arg(tag).output().unwrap();
                assert!(o.status.success(), "podman save {tag}: {}", text(&o));
                out
            })
            .collect()
    })
}

/// A TCP port free on 127.0.0.1 now, for a pod's port mapping.
fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap().local_addr().unwrap().port()
}

/// Ordinary images under handler `shoal` on `tender`, in a pod with a
/// network namespace of its own on a CNI bridge: busybox's applets
/// (`echo`; `sh -c` running builtins, which needs no fork; `cat` of a
/// read-only volume, a writable emptyDir written through to the host), a shell script
/// refused at create with the reason, the static Go server reached from
/// the host through the pod's port mapping on 127.0.0.1, and its stop;
/// `exec` into a running busybox container (ExecSync and streaming: exit
/// status, output, a writable volume's files seen both ways).
fn ordinary_images(tender: &str) {
    let cri = Cri::start_with(Some(Cni::new(tender)), ordinary_archives());
    let name = format!("ordinary-{tender}");
    // The kubelet's hostPort with hostIP: the server's port 8080 in the
    // pod's namespace, on 127.0.0.1:HOSTPORT of the host (CNI's portmap).
    let host_port = free_port();
    // hvt through the runtime handler `shoal-hvt` (shoal-oci as
    // shoal-oci-hvt), with no annotation: what critest and a RuntimeClass
    // can choose. The pod's host name and a sysctl reach every container.
    let (handler, annotations) =
        if tender == "hvt" { ("shoal-hvt", serde_json::json!({})) } else { ("shoal", serde_json::json!({"org.shoal.tender": tender})) };
    let pod_json = cri.file(
        &format!("pod-{name}"),
        &serde_json::json!({
            "metadata": {"name": name, "namespace": "shoal-test", "uid": format!("{name}-{}", std::process::id()), "attempt": 0},
            "hostname": format!("pod-{tender}"),
            "log_directory": cri.dir().join("logs").join(&name),
            "annotations": annotations,
            "port_mappings": [{"protocol": 0, "container_port": 8080, "host_port": host_port, "host_ip": "127.0.0.1"}],
            "linux": {"sysctls": {"kernel.shm_rmid_forced": "1"}},
        }),
    );
    let pod = cri.ok(&["runp", "--runtime", handler, &pod_json]);
    let p: serde_json::Value = serde_json::from_str(&cri.ok(&["inspectp", &pod])).unwrap();
    assert_eq!(p["status"]["state"], "SANDBOX_READY", "{p}");
    let ip: std::net::Ipv4Addr =
        p["status"]["network"]["ip"].as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("the pod has no IPv4 address: {}", p["status"]));
    assert!(ip.to_string().starts_with(&format!("{}.", Cni::prefix(tender))), "{ip} is on the test's bridge ({}.0/24)", Cni::prefix(tender));

    // busybox: an applet by its link's name, as critest's specs run it.
    let echo =
        cri.ok(&["create", &pod, &container_config(&cri, "echo", 0, BUSYBOX, &["echo", "hello from busybox"], serde_json::json!({"command": []})), &pod_json]);
    cri.ok(&["start", &echo]);
    let st = cri.wait_exited(&echo);
    assert_eq!((st["exitCode"].as_i64(), st["reason"].as_str()), (Some(0), Some("Completed")), "{st}");
    assert_eq!(cri.wait_logs(&echo, "hello from busybox").trim(), "hello from busybox");
    // The shell running builtins only (a command it would fork for is
    // ENOSYS: one program per instance).
    let sh = cri.ok(&["create", &pod, &container_config(&cri, "sh", 0, BUSYBOX, &["sh", "-c", "echo in sh; exit 7"], serde_json::json!({})), &pod_json]);
    cri.ok(&["start", &sh]);
    let st = cri.wait_exited(&sh);
    assert_eq!((st["exitCode"].as_i64(), st["reason"].as_str()), (Some(7), Some("Error")), "{st}");
    assert_eq!(cri.wait_logs(&sh, "in sh").trim(), "in sh");
    // The image is the root file system, read-only through the root mount;
    // /tmp is the guest's own, in its memory. The working directory is
    // made in the image as runc makes it.
    let script = "pwd; echo written > /tmp/f; read l < /tmp/f; echo \"read back: $l\"; echo x > /bin/new; echo \"status $?\"";
    let tmpw = cri.ok(&[
        "create",
        &pod,
        &container_config(&cri, "tmpw", 0, BUSYBOX, &["sh", "-c", script], serde_json::json!({"working_dir": "/var/app"})),
        &pod_json,
    ]);
    cri.ok(&["start", &tmpw]);
    let st = cri.wait_exited(&tmpw);
    assert_eq!((st["exitCode"].as_i64(), st["reason"].as_str()), (Some(0), Some("Completed")), "{st}");
    cri.wait_logs(&tmpw, "status");
    // crictl prints the container's stdout on its stdout and its stderr on
    // its stderr.
    let o = cri.crictl(&["logs", &tmpw]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "/var/app\nread back: written\nstatus 1\n");
    assert_eq!(String::from_utf8_lossy(&o.stderr), "sh: can't create /bin/new: Read-only file system\n");
    // process.user: the ids the program sees.
    let user = serde_json::json!({"linux": {"security_context": {"run_as_user": {"value": 1000}, "run_as_group": {"value": 100}}}});
    let id = cri.ok(&["create", &pod, &container_config(&cri, "id", 0, BUSYBOX, &["id"], user), &pod_json]);
    cri.ok(&["start", &id]);
    let st = cri.wait_exited(&id);
    assert_eq!((st["exitCode"].as_i64(), st["reason"].as_str()), (Some(0), Some("Completed")), "{st}");
    assert_eq!(cri.wait_logs(&id, "uid").trim(), "uid=1000 gid=100", "the ids busybox's id reads (no supplementary groups)");
    cri.ok(&["rm", &tmpw, &id]);
    // A read-only volume (the kubelet's ConfigMaps and service-account
    // token are such): the directory read live through --mount; a
    // writable one (an emptyDir: mode 0777, as the kubelet makes it) takes
    // the container's writes on the host.
    let vol = cri.dir().join("config-volume");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("greeting"), "hello from a read-only volume\n").unwrap();
    let mounts = |readonly: bool| serde_json::json!({"mounts": [{"container_path": "/config", "host_path": vol, "readonly": readonly}]});
    // The files containerd gives every container (/etc/hosts,
    // /etc/hostname, /etc/resolv.conf: single-file bind mounts) are the
    // guest's, read live from the pod's files.
    const ETC: [&str; 3] = ["/etc/hosts", "/etc/hostname", "/etc/resolv.conf"];
    let cat_args = [&["cat", "/config/greeting"][..], &ETC].concat();
    let cat = cri.ok(&["create", &pod, &container_config(&cri, "cat", 0, BUSYBOX, &cat_args, mounts(true)), &pod_json]);
    cri.ok(&["start", &cat]);
    let st = cri.wait_exited(&cat);
    assert_eq!((st["exitCode"].as_i64(), st["reason"].as_str()), (Some(0), Some("Completed")), "{st}; logs: {}", text(&cri.crictl(&["logs", &cat])));
    cri.wait_logs(&cat, "volume");
    let spec = &cri.inspect(&cat)["info"]["runtimeSpec"];
    let source = |dest: &str| -> String {
        let m = spec["mounts"].as_array().and_then(|v| v.iter().find(|m| m["destination"] == dest)).unwrap_or_else(|| panic!("no mount of {dest}: {spec}"));
        std::fs::read_to_string(m["source"].as_str().unwrap()).unwrap()
    };
    let want = ETC.iter().fold("hello from a read-only volume\n".to_string(), |acc, d| acc + &source(d));
    assert_eq!(String::from_utf8_lossy(&cri.crictl(&["logs", &cat]).stdout), want);
    let empty = cri.dir().join("empty-dir");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::set_permissions(&empty, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let writable = serde_json::json!({"mounts": [{"container_path": "/data", "host_path": empty, "readonly": false}]});
    let script = "echo from the pod > /data/out; read line < /data/out; echo read back: $line";
    let rw = cri.ok(&["create", &pod, &container_config(&cri, "rw", 0, BUSYBOX, &["sh", "-c", script], writable), &pod_json]);
    cri.ok(&["start", &rw]);
    let st = cri.wait_exited(&rw);
    assert_eq!((st["exitCode"].as_i64(), st["reason"].as_str()), (Some(0), Some("Completed")), "{st}; logs: {}", text(&cri.crictl(&["logs", &rw])));
    assert_eq!(cri.wait_logs(&rw, "read back").trim(), "read back: from the pod");
    assert_eq!(std::fs::read_to_string(empty.join("out")).unwrap(), "from the pod\n", "the write reached the host directory");
    cri.ok(&["rm", &cat, &rw]);

    // exec: a sibling instance in the container's context. The container
    // writes a file in its writable volume and waits (with its stdin
    // open, `read -t` sleeps) until an exec's file appears there (shell
    // builtins only: a command it would run forks or execs).
    let shared = cri.dir().join("exec-dir");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let script =
        "echo from the container > /data/c; n=0; while [ ! -e /data/e ] && [ $n -lt 60 ]; do read -t 1 x; n=$((n+1)); done; read l < /data/e; echo \"$l\"";
    // critest's Localhost seccomp profile that blocks chmod: the guest's
    // kernel applies it to the container's program (and its execs).
    let profile = cri.dir().join("block-chmod.json");
    std::fs::write(&profile, r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["chmod", "fchmodat"], "action": "SCMP_ACT_ERRNO"}]}"#).unwrap();
    let cfg = serde_json::json!({"stdin": true, "envs": [{"key": "GREETING", "value": "hello"}],
                                 "mounts": [{"container_path": "/data", "host_path": shared, "readonly": false}],
                                 "linux": {"security_context": {"seccomp": {"profile_type": 2, "localhost_ref": profile}}}});
    let waiter = cri.ok(&["create", &pod, &container_config(&cri, "waiter", 0, BUSYBOX, &["sh", "-c", script], cfg), &pod_json]);
    cri.ok(&["start", &waiter]);
    let t0 = Instant::now();
    while !shared.join("c").exists() {
        assert!(t0.elapsed() < Duration::from_secs(30), "the container wrote nothing: {}", text(&cri.crictl(&["logs", &waiter])));
        std::thread::sleep(Duration::from_millis(50));
    }
    // ExecSync (what the kubelet's exec probes use): the container's file
    // (crictl prints the exec's stdout, then its stderr, each with a
    // newline), its environment, an exit status (the CRI client's error
    // names it, with the exec's stderr).
    let o = cri.crictl(&["exec", "-s", &waiter, "cat", "/data/c"]);
    assert_eq!((o.status.code(), String::from_utf8_lossy(&o.stdout).as_ref()), (Some(0), "from the container\n\n\n"), "{}", text(&o));
    // (Before the exec that writes /data/e, which ends the container.)
    // What critest reads: the pod's host name (busybox `hostname`, uname's
    // node name), its sysctl under /proc/sys, /proc/self/status's Seccomp
    // field (2: a profile is applied); `hostname NAME` (sethostname) works
    // for root; the profile refuses chmod.
    for (cmd, status, want) in [
        (&["hostname"][..], 0, format!("pod-{tender}")),
        (&["cat", "/proc/sys/kernel/shm_rmid_forced"], 0, "1".into()),
        (&["grep", "Seccomp:", "/proc/self/status"], 0, "Seccomp:\t2".into()),
        (&["hostname", "renamed"], 0, String::new()),
        (&["chmod", "400", "/data/c"], 1, String::new()),
    ] {
        let o = cri.crictl(&[&["exec", &waiter][..], cmd].concat());
        assert_eq!((o.status.code(), String::from_utf8_lossy(&o.stdout).trim_end()), (Some(status), want.as_str()), "{cmd:?}: {}", text(&o));
        if status != 0 {
            assert!(String::from_utf8_lossy(&o.stderr).contains("chmod: /data/c: Operation not permitted"), "{}", text(&o));
        }
    }
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(shared.join("c")).unwrap().permissions()) & 0o777,
        0o644,
        "the refused chmod changed nothing"
    );
    let o = cri.crictl(&["exec", "-s", &waiter, "sh", "-c", "echo $GREETING from exec > /data/e; echo to stderr >&2; exit 3"]);
    assert!(!o.status.success() && text(&o).contains("exited with 3: to stderr"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(shared.join("e")).unwrap(), "hello from exec\n", "the exec's write reached the volume");
    // The streaming exec (`crictl exec` without -s) answers the same way.
    let o = cri.crictl(&["exec", &waiter, "echo", "streamed"]);
    assert_eq!((o.status.code(), String::from_utf8_lossy(&o.stdout).as_ref()), (Some(0), "streamed\n"), "{}", text(&o));
    // The container saw the exec's file and ended.
    let st = cri.wait_exited(&waiter);
    assert_eq!((st["exitCode"].as_i64(), st["reason"].as_str()), (Some(0), Some("Completed")), "{st}; logs: {}", text(&cri.crictl(&["logs", &waiter])));
    assert_eq!(cri.wait_logs(&waiter, "from exec").trim(), "hello from exec");
    let o = cri.crictl(&["exec", "-s", &waiter, "true"]);
    assert!(!o.status.success(), "exec into an exited container: {}", text(&o));
    cri.ok(&["rm", &waiter]);

    // A script: refused by the runtime's create (which containerd calls
    // at the CRI's StartContainer) with the reason, not a container that
    // starts and then exits 125.
    let script = cri.ok(&["create", &pod, &container_config(&cri, "script", 0, BUSYBOX, &["hello.sh"], serde_json::json!({})), &pod_json]);
    let o = cri.crictl(&["start", &script]);
    let refusal = "process.args[0] hello.sh is not an ELF file (a script or data?): shoal runs a shoal image or a static Linux executable, and starts no interpreter for a script; name the program itself";
    assert!(!o.status.success() && text(&o).contains(refusal), "{}", text(&o));
    let st = cri.inspect(&script)["status"].clone();
    assert_eq!((st["state"].as_str(), st["exitCode"].as_i64(), st["reason"].as_str()), (Some("CONTAINER_EXITED"), Some(128), Some("StartError")), "{st}");
    assert!(st["message"].as_str().is_some_and(|m| m.contains(refusal)), "{st}");
    cri.ok(&["rm", &script]);

    // The static Go server from a FROM-scratch image (its own entrypoint),
    // on the pod's network, reached from the host only through the pod's
    // port mapping on 127.0.0.1.
    let as_user = serde_json::json!({"working_dir": "/srv", "linux": {"security_context": {"run_as_user": {"value": 1000}}}});
    let web = cri.ok(&["create", &pod, &container_config(&cri, "gohttp", 0, GOHTTP, &["8080"], as_user), &pod_json]);
    cri.ok(&["start", &web]);
    let t0 = Instant::now();
    let answer = loop {
        match get(host_port, "/k8s") {
            Some(s) if s.contains("hello from go") => break s,
            other => {
                assert!(t0.elapsed() < Duration::from_secs(60), "no answer at 127.0.0.1:{host_port}: {other:?}; logs: {}", text(&cri.crictl(&["logs", &web])))
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nhello from go /k8s (cwd /srv, uid 1000)\n"), "{answer}");
    assert_eq!(cri.wait_logs(&web, "listening").trim(), "listening on 8080");
    assert!(get(8080, "/").is_none_or(|s| !s.contains("hello from go")), "the server is in the pod's namespace, not on the host's loopback");
    cri.ok(&["stop", "--timeout", "20", &web]);
    let st = cri.inspect(&web)["status"].clone();
    assert_eq!((st["state"].as_str(), st["exitCode"].as_i64(), st["reason"].as_str()), (Some("CONTAINER_EXITED"), Some(143), Some("Error")), "{st}");
    assert!(get(host_port, "/k8s").is_none(), "the mapped port answers nothing once the server stopped");

    cri.ok(&["stopp", &pod]);
    cri.ok(&["rmp", &pod]);
    assert_eq!(cri.ok(&["pods", "-q"]), "", "pods left behind");
}

/// Whether the ordinary-image test can run with `tender`.
fn ready_ordinary(tender: &str) -> bool {
    ready(tender) && shoal_testkit::need(&["podman", "go-toolchain", "busybox"])
}

#[test]
fn crictl_ordinary_images_on_spt() {
    if ready_ordinary("spt") {
        ordinary_images("spt");
    }
}

#[test]
fn crictl_ordinary_images_on_hvt() {
    if ready_ordinary("hvt") {
        ordinary_images("hvt");
    }
}
