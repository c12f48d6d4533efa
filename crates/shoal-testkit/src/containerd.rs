//! A containerd of a caller's own for Kubernetes' path into shoal (the CRI
//! tests in crates/shoal-oci/tests/cri.rs and `shoal bench cri`): a
//! private root, state, socket and CNI directory, the CRI runtime handler
//! `shoal` as docs/kubernetes.md configures it (containerd's runc shim
//! calling shoal-oci) and `shoal-hvt` (the same through a link named
//! `shoal-oci-hvt`, which picks hvt), runc as the default handler, a sandbox image built
//! by the caller (nothing is pulled), and the caller's images imported into
//! the CRI's `k8s.io` namespace. Dropping it removes every pod (and so every
//! shim, which would outlive containerd), stops containerd and unmounts
//! what it left mounted beneath its root.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long containerd's CRI may take to answer, and the imported images
/// to be listed.
const UP: Duration = Duration::from_secs(60);

/// What a containerd is started with.
pub struct Setup<'a> {
    /// The runtime handler `shoal`'s binary (shoal-oci).
    pub oci: &'a Path,
    /// The sandbox (pause) image, already among `images`.
    pub sandbox_image: &'a str,
    /// A CNI configuration list for the pods' networks, if any.
    pub cni_conflist: Option<&'a str>,
    /// OCI archives to import.
    pub images: &'a [&'a Path],
}

/// A running containerd (module docs).
pub struct Containerd {
    dir: PathBuf,
    daemon: Child,
    crictl: PathBuf,
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)).trim().to_string()
}

/// The configuration docs/kubernetes.md shows, with the state beneath
/// `dir`. `restrict_oom_score_adj`: a root without CAP_SYS_RESOURCE (as
/// here) cannot lower a sandbox's OOM score below containerd's own.
/// `oci_hvt` is a link to shoal-oci named `shoal-oci-hvt`.
pub fn config(dir: &Path, oci: &Path, oci_hvt: &Path, sandbox_image: &str) -> String {
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
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
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.shoal-hvt]
    runtime_type = "io.containerd.runc.v2"
    pod_annotations = ["org.shoal.*"]
    container_annotations = ["org.shoal.*"]
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.shoal-hvt.options]
      BinaryName = "{oci_hvt}"
"#,
        d = dir.display(),
        oci = oci.display(),
        oci_hvt = oci_hvt.display()
    )
}

impl Containerd {
    /// Starts containerd in `dir` (made if missing), waits for its CRI and
    /// imports the images; the reason as one line if any step fails.
    pub fn start(dir: &Path, s: &Setup) -> Result<Containerd, String> {
        let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
        for sub in ["cni", "logs"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(|e| io("cannot make the containerd directory", e))?;
        }
        if let Some(c) = s.cni_conflist {
            std::fs::write(dir.join("cni/10-shoal.conflist"), c).map_err(|e| io("cannot write the CNI configuration", e))?;
        }
        // The handler `shoal-hvt`'s binary: shoal-oci under the name
        // that picks hvt.
        let oci_hvt = dir.join("bin/shoal-oci-hvt");
        std::fs::create_dir_all(dir.join("bin")).map_err(|e| io("cannot make the containerd directory", e))?;
        let _ = std::fs::remove_file(&oci_hvt);
        std::os::unix::fs::symlink(s.oci, &oci_hvt).map_err(|e| io("cannot link shoal-oci-hvt", e))?;
        std::fs::write(dir.join("config.toml"), config(dir, s.oci, &oci_hvt, s.sandbox_image)).map_err(|e| io("cannot write config.toml", e))?;
        let d = dir.display();
        std::fs::write(
            dir.join("crictl.yaml"),
            format!("runtime-endpoint: unix://{d}/containerd.sock\nimage-endpoint: unix://{d}/containerd.sock\ntimeout: 60\n"),
        )
        .map_err(|e| io("cannot write crictl.yaml", e))?;
        let crictl = crate::cri_tool("crictl").ok_or("crictl is not built into ~/.cache/shoal/cri-tools-* (scripts/setup builds it with go)")?;
        let log = std::fs::File::create(dir.join("containerd.log")).map_err(|e| io("cannot make containerd.log", e))?;
        let daemon = Command::new("containerd")
            .arg("--config")
            .arg(dir.join("config.toml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| io("cannot start containerd", e))?;
        let c = Containerd { dir: dir.into(), daemon, crictl };
        let t0 = Instant::now();
        while !c.crictl(&["info"]).is_ok_and(|o| o.status.success()) {
            if t0.elapsed() > UP {
                return Err(format!("containerd's CRI did not come up within {} s: {}", UP.as_secs(), c.log()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        for a in s.images {
            let o = Command::new("ctr").arg("--address").arg(c.sock()).args(["-n", "k8s.io", "images", "import"]).arg(a).output();
            match o {
                Ok(o) if o.status.success() => {}
                Ok(o) => return Err(format!("ctr images import {}: {}", a.display(), text(&o))),
                Err(e) => return Err(io("cannot run ctr", e)),
            }
        }
        // The CRI plugin sees images imported by ctr through containerd's
        // events: wait until it lists them.
        let t0 = Instant::now();
        loop {
            let listed = c.crictl(&["images", "-q"]).map(|o| String::from_utf8_lossy(&o.stdout).lines().count()).unwrap_or(0);
            if listed >= s.images.len() {
                return Ok(c);
            }
            if t0.elapsed() > UP {
                return Err(format!("the CRI lists {listed} of the {} imported images", s.images.len()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its socket.
    pub fn sock(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// What containerd has logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    /// Runs `crictl ARGS` against it (with a config file of its own:
    /// crictl otherwise reads /etc/crictl.yaml and warns without one).
    pub fn crictl(&self, args: &[&str]) -> std::io::Result<Output> {
        Command::new(&self.crictl).arg("--config").arg(self.dir.join("crictl.yaml")).args(args).stdin(Stdio::null()).output()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.crictl(&["rmp", "-fa"]);
        let _ = Command::new("kill").args(["-TERM", &self.daemon.id().to_string()]).output();
        let t0 = Instant::now();
        while self.daemon.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        // containerd leaves its snapshots mounted beneath its root.
        let root = self.dir.to_string_lossy().into_owned();
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mut mine: Vec<&str> = mounts.lines().filter_map(|l| l.split_whitespace().nth(1)).filter(|m| m.starts_with(&root)).collect();
        mine.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mine {
            let _ = Command::new("umount").arg("-l").arg(m).output();
        }
    }
}
