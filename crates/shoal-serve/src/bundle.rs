//! OCI bundles for runc and runsc: the gateway's container instances and
//! the benches' container runs. A bundle starts from what `RUNTIME spec`
//! writes (its namespaces, mounts and capabilities), with the process,
//! root, hostname and network set here; a caller adjusts the rest of the
//! config (limits, mounts, cpusets) before it is written.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A bundle could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The runtime could not be started.
    #[error("cannot run {} spec: {source}", runtime.display())]
    Spawn { runtime: PathBuf, source: std::io::Error },
    /// `RUNTIME spec` failed.
    #[error("{} spec failed: {stderr}", runtime.display())]
    Spec { runtime: PathBuf, stderr: String },
    /// The config the runtime wrote is not JSON.
    #[error("the config.json {} spec wrote is not JSON: {source}", runtime.display())]
    Config { runtime: PathBuf, source: serde_json::Error },
    /// A file of the bundle could not be read, copied or written.
    #[error("cannot write the bundle's {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// The network a bundle's container gets.
pub enum Network<'a> {
    /// A namespace of its own with only loopback (the spec's default).
    Own,
    /// The host's network namespace.
    Host,
    /// The network namespace at this path (made by the caller).
    Join(&'a str),
}

/// What the container runs and how its root looks.
pub struct Process<'a> {
    /// The program and its arguments, as paths inside the root.
    pub args: Vec<String>,
    /// Its whole environment, KEY=VALUE.
    pub env: Vec<String>,
    /// Files copied into the root: (host file, path relative to the root).
    pub files: Vec<(&'a Path, &'a str)>,
    /// Whether the root is mounted read-only.
    pub readonly_root: bool,
    pub hostname: &'a str,
    pub network: Network<'a>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BundleError + '_ {
    move |source| BundleError::Io { path: path.to_path_buf(), source }
}

/// Makes an OCI bundle in `dir` (its root `dir/rootfs`) for `runtime`;
/// `adjust` may change the config before it is written.
pub fn make_bundle(runtime: &Path, dir: &Path, p: &Process, adjust: impl FnOnce(&mut Value)) -> Result<(), BundleError> {
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).map_err(io(&rootfs))?;
    for (from, to) in &p.files {
        let dest = rootfs.join(to);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::copy(from, &dest).map_err(io(&dest))?;
    }
    let out = Command::new(runtime)
        .arg("spec")
        .arg("--bundle")
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| BundleError::Spawn { runtime: runtime.to_path_buf(), source })?;
    if !out.status.success() {
        return Err(BundleError::Spec { runtime: runtime.to_path_buf(), stderr: String::from_utf8_lossy(&out.stderr).trim().to_string() });
    }
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
    let mut c: Value = serde_json::from_str(&text).map_err(|source| BundleError::Config { runtime: runtime.to_path_buf(), source })?;
    c["process"]["terminal"] = json!(false);
    c["process"]["args"] = json!(p.args);
    c["process"]["env"] = json!(p.env);
    c["root"] = json!({"path": "rootfs", "readonly": p.readonly_root});
    c["hostname"] = json!(p.hostname);
    match p.network {
        Network::Own => {}
        Network::Host | Network::Join(_) => {
            if let Some(ns) = c["linux"]["namespaces"].as_array_mut() {
                ns.retain(|n| n["type"] != "network");
                if let Network::Join(at) = p.network {
                    ns.push(json!({"type": "network", "path": at}));
                }
            }
        }
    }
    adjust(&mut c);
    // A Value always serialises.
    let text = serde_json::to_string_pretty(&c).unwrap_or_default();
    std::fs::write(&path, text).map_err(io(&path))
}
