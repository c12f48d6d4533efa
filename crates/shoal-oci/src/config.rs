//! The bundle's `config.json` (OCI runtime spec, config.md) and how it maps
//! onto a shoal instance (docs/design.md "Serving functions"): which parts become `shoal-tender`
//! options, which are applied to the tender process as runc applies them
//! (network namespace, cgroups, rlimits, terminal), which are accepted and
//! ignored because a unikernel has no use for them, and which are refused
//! because ignoring them would run the container wrongly.
//!
//! Only the fields shoal reads are declared; serde skips the rest, and the
//! refusals below name every field whose presence changes the answer.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Annotation choosing the tender (`spt`, the default, or `hvt`).
pub const ANN_TENDER: &str = "org.shoal.tender";
/// Annotation choosing the memory mode (`copy`, `ksm`, `pool`).
pub const ANN_MEM_MODE: &str = "org.shoal.mem-mode";
/// Annotation listing guest ports to open before the guest starts
/// (`8080,5353/udp`), in the container's network namespace: the engine's
/// port forwarding (`podman run -p`) reaches the container's address, where
/// the tender listens for them. Optional: in a network namespace of its
/// own the guest may bind any port anyway (`--net-bind-any`); the listed
/// ports are open from the start (a connection during boot waits in the
/// backlog), and they are the only ones on the host's namespace.
pub const ANN_PUBLISH: &str = "org.shoal.publish";

/// containerd's CRI annotation naming a container's pod sandbox.
const ANN_CRI_SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";
/// containerd's CRI annotation: `sandbox` or `container`.
const ANN_CRI_TYPE: &str = "io.kubernetes.cri.container-type";

/// Why a bundle cannot run as a shoal instance.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// runc's wording for a bundle without config.json.
    #[error("JSON specification file config.json not found")]
    NotFound,
    /// config.json could not be read.
    #[error("cannot read {0}: {1}")]
    Read(PathBuf, std::io::Error),
    /// config.json is not a valid runtime configuration.
    #[error("config.json is not a valid runtime configuration: {0}")]
    Parse(serde_json::Error),
    /// No process to run.
    #[error("config.json has no process (process.args names the shoal image to run)")]
    NoProcess,
    /// No args.
    #[error("process.args is empty: its first element must name the shoal image inside the root file system")]
    NoArgs,
    /// No root.
    #[error("config.json has no root: shoal needs root.path, the directory that holds the image and becomes the guest's file system")]
    NoRoot,
    /// The root directory is missing.
    #[error("root.path {0}: no such directory")]
    NoRootDir(PathBuf),
    /// The image is not in the root.
    #[error("process.args[0] {0}: no such file in the root file system ({1}; symlinks resolve inside it)")]
    NoImage(String, PathBuf),
    /// The root directory could not be opened.
    #[error("root.path {0}: cannot open it: {1}")]
    OpenRoot(PathBuf, std::io::Error),
    /// args[0] is neither an ELF file (a shoal image or a Linux
    /// executable) nor anything else the tender runs.
    #[error("process.args[0] {0} is not an ELF file (a script or data?): shoal runs a shoal image or a static Linux executable, and starts no interpreter for a script; name the program itself")]
    NotElf(String),
    /// args[0] is a Linux executable, and the kernel image it runs on is
    /// not built on this node.
    #[error("process.args[0] {0} is a Linux executable, which runs on shoal's kernel image {1}: it is not built on this node (run `shoal run` of any static executable once, as the user and with the HOME or SHOAL_CACHE the container engine has)")]
    NoExecKernel(String, String),
    /// args[0] is a Linux executable that cannot run as an instance.
    #[error("process.args[0] {0}: {1}")]
    Executable(String, String),
    /// The kernel lacks openat2, which finds the image safely.
    #[error("this kernel has no openat2 (Linux 5.6 or later), which shoal-oci needs to find process.args[0] inside the root file system safely")]
    NoOpenat2,
    /// An image path that leaves the root.
    #[error("process.args[0] {0}: the image path must stay inside the root file system (no ..)")]
    ImageEscapes(String),
    /// A working directory that cannot be made or found.
    #[error("process.cwd {0}: {1}")]
    Cwd(String, String),
    /// A bind mount of something neither a directory nor a regular file.
    #[error("mount of {host} on {destination}: a shoal guest sees its root file system, directories and regular files (bind mounts of one, read-only or writable, as `--mount`); not sockets, FIFOs or devices")]
    Volume {
        /// The host path.
        host: String,
        /// Where it would appear.
        destination: String,
    },
    /// A read-only bind mount that cannot be served.
    #[error("mount of {host} on {destination}: {why}")]
    Mount {
        /// The host path.
        host: String,
        /// Where it would appear.
        destination: String,
        /// What is wrong with it.
        why: String,
    },
    /// The mounts together cannot be served.
    #[error("mounts: {0}")]
    Mounts(String),
    /// A user namespace.
    #[error("linux.namespaces: a user namespace is not supported (the tender makes its own; run without --userns)")]
    UserNamespace,
    /// An unknown annotation value.
    #[error("annotation {key}={value}: expected one of {allowed}")]
    Annotation {
        /// The annotation.
        key: &'static str,
        /// Its value.
        value: String,
        /// The allowed values.
        allowed: &'static str,
    },
    /// A memory limit too small to boot.
    #[error("linux.resources.memory.limit {0}: a shoal guest needs at least 4 MiB")]
    TooLittleMemory(i64),
    /// A hook with a relative path.
    #[error("hook path {0}: must be absolute")]
    HookPath(PathBuf),
    /// An rlimit name shoal does not know.
    #[error("process.rlimits: unknown limit {0}")]
    Rlimit(String),
    /// A seccomp profile the guest's kernel cannot apply.
    #[error(transparent)]
    Seccomp(#[from] crate::seccomp::SeccompError),
    /// A host name Linux would refuse.
    #[error("hostname {0:?}: expected 1 to 63 bytes without NUL or '/'")]
    Hostname(String),
    /// A sysctl name that names no file under /proc/sys.
    #[error("linux.sysctl {0:?}: expected a kernel parameter name (letters, digits, '_', '-', separated by '.' or '/')")]
    Sysctl(String),
    /// A sysctl's file could not be written for the guest.
    #[error("linux.sysctl {0}: cannot write its file for the guest in {1}: {2}")]
    SysctlFile(String, PathBuf, std::io::Error),
}

/// The tender a container runs on when no [`ANN_TENDER`] annotation
/// names one: `hvt` when this program was started as `shoal-oci-hvt` (a
/// link to it, so that a second CRI runtime handler, whose only setting
/// is the binary, picks hvt: docs/kubernetes.md), `spt` otherwise.
pub fn default_tender() -> &'static str {
    let me = std::env::args_os().next().unwrap_or_default();
    if Path::new(&me).file_name().is_some_and(|n| n == "shoal-oci-hvt") {
        "hvt"
    } else {
        "spt"
    }
}

/// The host name a container of this config gets: `hostname`, or else the
/// one in the file containerd mounts at `/etc/hostname` (containerd 1.6
/// puts the pod's host name there and in the sandbox's UTS namespace,
/// which the pod's other containers join, rather than in each container's
/// `hostname`). `None`: neither (the guest's default).
fn container_hostname(spec: &Spec) -> Result<Option<String>, ConfigError> {
    let name = match &spec.hostname {
        Some(h) if !h.is_empty() => h.clone(),
        _ => {
            let file = spec.mounts.iter().find(|m| m.destination.trim_end_matches('/') == "/etc/hostname");
            // At most a line of a host name: a larger file is no host name.
            let text = file.and_then(|m| std::fs::read(&m.source).ok()).filter(|t| t.len() <= 256).unwrap_or_default();
            match String::from_utf8_lossy(&text).lines().next().map(str::trim) {
                Some(h) if !h.is_empty() => h.to_string(),
                _ => return Ok(None),
            }
        }
    };
    if name.len() > HOSTNAME_MAX || name.contains(['\0', '/']) {
        return Err(ConfigError::Hostname(name));
    }
    Ok(Some(name))
}

/// Linux's `HOST_NAME_MAX`, the longest host name the tender takes
/// (`--hostname`).
const HOSTNAME_MAX: usize = 63;

/// The directory in the bundle where `linux.sysctl`'s files are written
/// for the guest to read under `/proc/sys`.
const SYSCTL_DIR: &str = "shoal-sysctl";

/// `linux.sysctl` as single-file mounts (`HOSTFILE:/proc/sys/…:ro`): each
/// value in a file of its own in the bundle, read-only in the guest at its
/// `/proc/sys` path, as a container's `/proc/sys` is read-only under runc.
/// The guest has no kernel parameters to set: the files tell the program
/// what the pod asked for (the kubelet's safe sysctls are SysV IPC and
/// network ones; the guest has no SysV IPC, and its sockets are the
/// tender's host sockets in the pod's network namespace).
fn sysctl_mounts(bundle: &Path, sysctl: &BTreeMap<String, String>) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    if sysctl.is_empty() {
        return Ok(out);
    }
    let dir = bundle.join(SYSCTL_DIR);
    for (key, value) in sysctl {
        let parts: Vec<&str> = key.split(['.', '/']).collect();
        let ok_part = |p: &&str| !p.is_empty() && p.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
        if parts.len() < 2 || !parts.iter().all(ok_part) || key.len() > 200 {
            return Err(ConfigError::Sysctl(key.clone()));
        }
        let file = dir.join(parts.join("."));
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&file, format!("{}\n", value.trim_end())))
            .map_err(|e| ConfigError::SysctlFile(key.clone(), dir.clone(), e))?;
        out.push(format!("{}:/proc/sys/{}:ro", file.display(), parts.join("/")));
    }
    Ok(out)
}

/// The parts of config.json that shoal reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// What to run.
    pub process: Option<Process>,
    /// The root file system.
    pub root: Option<Root>,
    /// Mounts (see [`Spec::mounts`]).
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// Lifecycle hooks.
    #[serde(default)]
    pub hooks: Hooks,
    /// Free-form annotations (shoal reads the `org.shoal.*` ones).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// The container's host name (in the UTS namespace runc would make).
    pub hostname: Option<String>,
    /// Linux-specific settings.
    #[serde(default)]
    pub linux: Linux,
}

/// `process`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    /// Whether the container gets a pseudo-terminal.
    #[serde(default)]
    pub terminal: bool,
    /// The terminal's size.
    pub console_size: Option<ConsoleSize>,
    /// The user.
    #[serde(default)]
    pub user: User,
    /// argv; `args[0]` names the image.
    #[serde(default)]
    pub args: Vec<String>,
    /// The environment.
    #[serde(default)]
    pub env: Vec<String>,
    /// The working directory.
    #[serde(default)]
    pub cwd: String,
    /// Resource limits, applied to the tender process.
    #[serde(default)]
    pub rlimits: Vec<Rlimit>,
}

/// `process.consoleSize`.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct ConsoleSize {
    /// Rows.
    pub height: u16,
    /// Columns.
    pub width: u16,
}

/// `process.user`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct User {
    /// uid.
    #[serde(default)]
    pub uid: u32,
    /// gid.
    #[serde(default)]
    pub gid: u32,
}

/// One of `process.rlimits`.
#[derive(Debug, Clone, Deserialize)]
pub struct Rlimit {
    /// `RLIMIT_…`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Hard limit.
    pub hard: u64,
    /// Soft limit.
    pub soft: u64,
}

/// `root`.
#[derive(Debug, Clone, Deserialize)]
pub struct Root {
    /// The root file system, absolute or relative to the bundle.
    pub path: PathBuf,
}

/// One of `mounts`.
#[derive(Debug, Clone, Deserialize)]
pub struct Mount {
    /// Where it appears in the container.
    pub destination: String,
    /// `bind`, `proc`, `tmpfs`, …
    #[serde(rename = "type", default)]
    pub kind: String,
    /// What is mounted.
    #[serde(default)]
    pub source: String,
    /// Mount options (`bind`, `rbind`, `ro`, …).
    #[serde(default)]
    pub options: Vec<String>,
}

/// `hooks`.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hooks {
    /// Deprecated, run right before `createRuntime`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prestart: Vec<Hook>,
    /// During create, in the runtime's namespaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub create_runtime: Vec<Hook>,
    /// During create, in the container's namespaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub create_container: Vec<Hook>,
    /// During start, before the program, in the container's namespaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub start_container: Vec<Hook>,
    /// After the program started, before start returns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub poststart: Vec<Hook>,
    /// After delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub poststop: Vec<Hook>,
}

/// One hook.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub struct Hook {
    /// Absolute path of the program.
    pub path: PathBuf,
    /// argv (argv[0] included).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Its whole environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Seconds before it is killed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// `linux`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Linux {
    /// Namespaces.
    #[serde(default)]
    pub namespaces: Vec<Namespace>,
    /// Cgroup path (absolute, relative, or systemd's `slice:prefix:name`).
    pub cgroups_path: Option<String>,
    /// Resources.
    #[serde(default)]
    pub resources: Resources,
    /// Kernel parameters for the container (`/proc/sys`).
    #[serde(default)]
    pub sysctl: BTreeMap<String, String>,
    /// The program's seccomp profile (`crate::seccomp`).
    pub seccomp: Option<crate::seccomp::Profile>,
}

/// One of `linux.namespaces`.
#[derive(Debug, Clone, Deserialize)]
pub struct Namespace {
    /// `network`, `pid`, `mount`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// A namespace to join rather than create.
    pub path: Option<PathBuf>,
}

/// `linux.resources`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Resources {
    /// Memory.
    pub memory: Option<Memory>,
    /// CPU.
    pub cpu: Option<Cpu>,
    /// Pids.
    pub pids: Option<Pids>,
}

/// `linux.resources.memory`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Memory {
    /// Bytes.
    pub limit: Option<i64>,
}

/// `linux.resources.cpu`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Cpu {
    /// Relative weight (cgroup v1 shares).
    pub shares: Option<u64>,
    /// CFS quota in microseconds per period.
    pub quota: Option<i64>,
    /// CFS period in microseconds.
    pub period: Option<u64>,
}

/// `linux.resources.pids`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Pids {
    /// Most tasks.
    pub limit: i64,
}

/// The most guest memory given beyond `linux.resources.memory.limit`.
const GUEST_HEADROOM: i64 = 256 << 20;

/// Mount destinations an engine adds to every container which the guest
/// does not need: it has its own /proc, /dev, /sys and /dev/shm, and no
/// resolver files of the host (names are resolved from the host's answers,
/// docs/design.md "Networking").
const IGNORED_MOUNTS: &[&str] = &[
    "/proc",
    "/dev",
    "/dev/pts",
    "/dev/shm",
    "/dev/mqueue",
    "/sys",
    "/sys/fs/cgroup",
    "/run/.containerenv",
    "/run/secrets",
    "/dev/termination-log",
    "/run",
    "/tmp",
];

/// What create does with a bundle: the checked, mapped configuration.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The root file system (absolute).
    pub rootfs: PathBuf,
    /// `shoal-tender` arguments (the program name not included).
    pub tender_args: Vec<String>,
    /// The image, opened inside the root file system: create hands the
    /// tender this descriptor (`/proc/self/fd/N` in place of
    /// `tender_args[image_arg]`, the path it was found at).
    pub image: std::sync::Arc<std::fs::File>,
    /// Where the image is in `tender_args`.
    pub image_arg: usize,
    /// A network namespace to join; `None` with `new_netns` false: stay.
    pub netns: Option<PathBuf>,
    /// Create a new, empty network namespace.
    pub new_netns: bool,
    /// Resource limits for the tender process: (name, resource, soft, hard).
    pub rlimits: Vec<(String, libc::__rlimit_resource_t, u64, u64)>,
    /// Whether the container gets a terminal.
    pub terminal: bool,
    /// Its size.
    pub console_size: Option<ConsoleSize>,
    /// The hooks, kept with the state (config.json may change later).
    pub hooks: Hooks,
    /// Annotations, reported by `state`.
    pub annotations: BTreeMap<String, String>,
    /// The cgroup path asked for.
    pub cgroups_path: Option<String>,
    /// Limits for the cgroup.
    pub resources: Resources,
}

/// Reads `BUNDLE/config.json`.
pub fn load(bundle: &Path) -> Result<Spec, ConfigError> {
    let path = bundle.join("config.json");
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ConfigError::NotFound),
        Err(e) => return Err(ConfigError::Read(path, e)),
    };
    serde_json::from_slice(&text).map_err(ConfigError::Parse)
}

/// The resource number of an `RLIMIT_…` name.
fn rlimit_resource(name: &str) -> Option<libc::__rlimit_resource_t> {
    Some(match name {
        "RLIMIT_AS" => libc::RLIMIT_AS,
        "RLIMIT_CORE" => libc::RLIMIT_CORE,
        "RLIMIT_CPU" => libc::RLIMIT_CPU,
        "RLIMIT_DATA" => libc::RLIMIT_DATA,
        "RLIMIT_FSIZE" => libc::RLIMIT_FSIZE,
        "RLIMIT_LOCKS" => libc::RLIMIT_LOCKS,
        "RLIMIT_MEMLOCK" => libc::RLIMIT_MEMLOCK,
        "RLIMIT_MSGQUEUE" => libc::RLIMIT_MSGQUEUE,
        "RLIMIT_NICE" => libc::RLIMIT_NICE,
        "RLIMIT_NOFILE" => libc::RLIMIT_NOFILE,
        "RLIMIT_NPROC" => libc::RLIMIT_NPROC,
        "RLIMIT_RSS" => libc::RLIMIT_RSS,
        "RLIMIT_RTPRIO" => libc::RLIMIT_RTPRIO,
        "RLIMIT_RTTIME" => libc::RLIMIT_RTTIME,
        "RLIMIT_SIGPENDING" => libc::RLIMIT_SIGPENDING,
        "RLIMIT_STACK" => libc::RLIMIT_STACK,
        _ => return None,
    })
}

/// Finds and opens the image named by `args[0]` inside `rootfs`: a path
/// (absolute or relative to /, the guest's working directory), or a bare
/// name looked up in the container's `PATH`, as runc looks up the program.
/// Symlinks on the way resolve inside the root file system, as they do in
/// the guest (`sys::open_beneath`): one naming a host file outside it
/// finds nothing there. Returns the path shown for it and the opened file,
/// which the tender reads (a symlink swapped in later changes nothing).
fn find_image(rootfs: &Path, name: &str, env: &[String]) -> Result<(PathBuf, std::fs::File), ConfigError> {
    let root = std::fs::File::open(rootfs).map_err(|e| ConfigError::OpenRoot(rootfs.into(), e))?;
    let open = |p: &str| -> Result<Option<(PathBuf, std::fs::File)>, ConfigError> {
        let rel = Path::new(p.trim_start_matches('/'));
        if rel.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(ConfigError::ImageEscapes(name.into()));
        }
        match crate::sys::open_beneath(&root, rel) {
            Ok(f) if f.metadata().is_ok_and(|m| m.is_file()) => Ok(Some((rootfs.join(rel), f))),
            Ok(_) => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Err(ConfigError::NoOpenat2),
            Err(_) => Ok(None),
        }
    };
    if name.contains('/') {
        return open(name)?.ok_or_else(|| ConfigError::NoImage(name.into(), rootfs.into()));
    }
    let path = env.iter().find_map(|e| e.strip_prefix("PATH=")).unwrap_or("/usr/local/bin:/usr/bin:/bin");
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        if let Some(found) = open(&format!("{dir}/{name}"))? {
            return Ok(found);
        }
    }
    Err(ConfigError::NoImage(name.into(), rootfs.into()))
}

/// The mount point of a single file `dest` (absolute, in the container)
/// inside `rootfs`: its directory made and resolved as [`mount_point`]
/// does, and the file made empty there if missing, as runc makes it (if
/// the root file system cannot take it, the guest's kernel shows the
/// mount there all the same); a directory there is refused.
fn file_point(rootfs: &Path, dest: &str) -> Result<String, String> {
    let (up, name) = dest.rsplit_once('/').ok_or("its destination must be an absolute path")?;
    if name.is_empty() || name == "." || name == ".." {
        return Err("its destination must name a file".into());
    }
    let dir = if up.is_empty() { "/".to_string() } else { mount_point(rootfs, up)? };
    let root = std::fs::File::open(rootfs).map_err(|e| format!("cannot open the root file system {}: {e}", rootfs.display()))?;
    let rel = Path::new(dir.trim_start_matches('/'));
    match crate::sys::open_beneath(&root, &rel.join(name)) {
        Ok(f) if f.metadata().is_ok_and(|m| m.is_dir()) => Err("its destination in the root file system is a directory".into()),
        Ok(_) => Ok(format!("{}/{name}", dir.trim_end_matches('/'))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = crate::sys::open_beneath(&root, if rel.as_os_str().is_empty() { Path::new(".") } else { rel })
                .map_err(|e| format!("cannot open {dir} in the root file system: {e}"))?;
            let _ = crate::sys::create_in(&parent, std::ffi::OsStr::new(name), 0o755);
            Ok(format!("{}/{name}", dir.trim_end_matches('/')))
        }
        Err(e) => Err(format!("cannot open {dest} in the root file system: {e}")),
    }
}

/// Makes directory `dest` (absolute, in the container) inside `rootfs`
/// where it is missing, each name resolved inside the root file system
/// (`sys::open_beneath`), and returns where it is there: its path with
/// every symbolic link resolved.
fn mount_point(rootfs: &Path, dest: &str) -> Result<String, String> {
    let root = std::fs::File::open(rootfs).map_err(|e| format!("cannot open the root file system {}: {e}", rootfs.display()))?;
    let real_root = std::fs::canonicalize(rootfs).map_err(|e| format!("cannot resolve the root file system {}: {e}", rootfs.display()))?;
    let mut done = PathBuf::new();
    for part in Path::new(dest).components() {
        let Component::Normal(name) = part else { continue };
        let next = done.join(name);
        match crate::sys::open_beneath(&root, &next) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let parent = crate::sys::open_beneath(&root, if done.as_os_str().is_empty() { Path::new(".") } else { &done })
                    .map_err(|e| format!("cannot open /{} in the root file system: {e}", done.display()))?;
                match crate::sys::mkdir_in(&parent, name, 0o755) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(format!("cannot make its directory in the root file system: {e}")),
                }
            }
            Err(e) => return Err(format!("cannot open /{} in the root file system: {e}", next.display())),
        }
        done = next;
    }
    let dir = crate::sys::open_beneath(&root, &done).map_err(|e| format!("cannot open /{} in the root file system: {e}", done.display()))?;
    if !dir.metadata().is_ok_and(|m| m.is_dir()) {
        return Err("its destination in the root file system is not a directory".into());
    }
    use std::os::fd::AsRawFd;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())).map_err(|e| format!("cannot resolve its directory: {e}"))?;
    let rel = real.strip_prefix(&real_root).map_err(|_| format!("its directory {} is not inside the root file system", real.display()))?;
    Ok(format!("/{}", rel.display()))
}

/// Refuses at `create`, with the reason, a program the tender would
/// refuse at start (the container would exit 125 after `start` reported
/// success): a file that is not ELF, or a Linux executable shoal cannot
/// run (dynamically linked, not x86-64, …). A Linux executable's
/// instance image is built here, once per executable and kernel image
/// (then found in the cache by content), so `start` only boots it.
fn check_runnable(name: &str, image: &std::fs::File) -> Result<(), ConfigError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let mut head = [0u8; 4];
    if image.read_exact_at(&mut head, 0).is_err() || head != *b"\x7fELF" {
        return Err(ConfigError::NotElf(name.into()));
    }
    let path = PathBuf::from(format!("/proc/self/fd/{}", image.as_raw_fd()));
    match shoal_tender::executable_image(&path) {
        Ok(_) => Ok(()),
        Err(shoal_tender::ArgsError::NoExecKernel { kernel, .. }) => Err(ConfigError::NoExecKernel(name.into(), kernel)),
        // The checks name the file they read, here the descriptor: say
        // the container's name for it.
        Err(e) => Err(ConfigError::Executable(name.into(), e.to_string().replace(&path.display().to_string(), name))),
    }
}

impl Spec {
    /// Checks the configuration and maps it onto a shoal instance.
    pub fn plan(&self, bundle: &Path) -> Result<Plan, ConfigError> {
        let process = self.process.as_ref().ok_or(ConfigError::NoProcess)?;
        let first = process.args.first().ok_or(ConfigError::NoArgs)?;
        let root = self.root.as_ref().ok_or(ConfigError::NoRoot)?;
        let rootfs = if root.path.is_absolute() { root.path.clone() } else { bundle.join(&root.path) };
        if !rootfs.is_dir() {
            return Err(ConfigError::NoRootDir(rootfs));
        }
        let volumes = self.check_mounts(&rootfs)?;
        let (image_path, image) = find_image(&rootfs, first, &process.env)?;
        check_runnable(first, &image)?;

        // The tender's options, spelled by the one table `shoal run` and
        // `shoal-tender` share.
        let mut opts = shoal_tender::RunOpts::default();
        if let Some(v) = self.annotations.get(ANN_TENDER) {
            if !matches!(v.as_str(), "spt" | "hvt") {
                return Err(ConfigError::Annotation { key: ANN_TENDER, value: v.clone(), allowed: "spt, hvt" });
            }
            opts.tender = Some(v.into());
        } else if default_tender() != "spt" {
            opts.tender = Some(default_tender().into());
        }
        opts.hostname = container_hostname(self)?.map(Into::into);
        // The program's own seccomp profile, applied by the guest's kernel
        // (the instance's host filter stays as it is).
        if let Some(p) = &self.linux.seccomp {
            let deny = p.tender_arg()?;
            if !deny.is_empty() {
                opts.seccomp_deny = Some(deny.into());
            }
        }
        if let Some(v) = self.annotations.get(ANN_MEM_MODE) {
            if !matches!(v.as_str(), "copy" | "ksm" | "pool") {
                return Err(ConfigError::Annotation { key: ANN_MEM_MODE, value: v.clone(), allowed: "copy, ksm, pool" });
            }
            opts.mem_mode = Some(v.into());
        }
        if let Some(v) = self.annotations.get(ANN_PUBLISH) {
            for port in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let (num, proto) = port.split_once('/').unwrap_or((port, "tcp"));
                if num.parse::<u16>().map_or(true, |n| n == 0) || !matches!(proto, "tcp" | "udp") {
                    return Err(ConfigError::Annotation { key: ANN_PUBLISH, value: v.clone(), allowed: "GUESTPORT[/udp] separated by commas" });
                }
                opts.publish.push(format!("0.0.0.0:{num}:{num}/{proto}").into());
            }
        }
        let (mut netns, mut new_netns) = (None, false);
        for ns in &self.linux.namespaces {
            match ns.kind.as_str() {
                "network" => match &ns.path {
                    Some(p) => netns = Some(p.clone()),
                    None => new_netns = true,
                },
                "user" => return Err(ConfigError::UserNamespace),
                // pid, mount, ipc, uts, cgroup, time: the instance confines
                // itself in namespaces of its own (crates/shoal-spt confine,
                // or a VM), and the tender must stay signalable by its pid.
                _ => {}
            }
        }
        // A container with a network namespace of its own may bind any
        // port of it, as a process in a runc container may: the tender
        // binds the host socket when the guest binds (the engine's port
        // forwarding, `podman run -p`, reaches that namespace). On the
        // host's namespace (`--network host`) only the ports the
        // annotation lists are opened.
        if netns.is_some() || new_netns {
            opts.net_bind_any = true;
        }
        // The root file system is the root mount, served live and
        // read-only by the tender (nothing is packed or copied at start);
        // the guest's own /tmp, /dev/shm and new names in / take writes,
        // in guest memory. Bind mounts of directories are mounts too, on their
        // directories in it.
        let root_spec = format!("{}:/:ro", rootfs.display());
        let sysctl = self.pod_sysctl(bundle);
        let volumes: Vec<String> = volumes.into_iter().chain(sysctl_mounts(bundle, &sysctl)?).collect();
        let mounts: Vec<shoal_tender::Mount> = std::iter::once(&root_spec)
            .chain(&volumes)
            .map(|m| shoal_tender::Mount::parse(m))
            .collect::<Result<_, _>>()
            .map_err(|e| ConfigError::Mount { host: rootfs.display().to_string(), destination: "/".into(), why: e.to_string() })?;
        shoal_tender::check_mounts(&mounts).map_err(|e| ConfigError::Mounts(e.to_string()))?;
        opts.mount = std::iter::once(root_spec).chain(volumes).map(Into::into).collect();
        if let Some(limit) = self.linux.resources.memory.as_ref().and_then(|m| m.limit).filter(|l| *l > 0) {
            if limit < 4 << 20 {
                return Err(ConfigError::TooLittleMemory(limit));
            }
            // The cgroup's limit is the container's limit, as for a Linux
            // process: the guest gets room beyond it for address space it
            // reserves but never touches (stacks, heap arenas), which costs
            // the host nothing, so a program that uses too much is killed
            // by the kernel's OOM killer at the limit (the engine reports
            // OOMKilled) rather than failing an allocation somewhere below
            // it, depending on how much the tender itself took.
            opts.mem = Some((limit + limit.min(GUEST_HEADROOM)).to_string().into());
        }
        // The working directory is made if missing, as runc makes it, and
        // named as resolved inside the root file system; the uid and gid
        // are what the program sees (the instance's host identity is the
        // tender's, whatever the container asks).
        let cwd = process.cwd.trim_end_matches('/');
        if !cwd.is_empty() {
            if !cwd.starts_with('/') {
                return Err(ConfigError::Cwd(process.cwd.clone(), "must be an absolute path".into()));
            }
            let resolved = mount_point(&rootfs, cwd).map_err(|e| ConfigError::Cwd(process.cwd.clone(), e))?;
            if resolved != "/" {
                opts.cwd = Some(resolved.into());
            }
        }
        if (process.user.uid, process.user.gid) != (0, 0) {
            opts.user = Some(format!("{}:{}", process.user.uid, process.user.gid).into());
        }
        for e in process.env.iter().filter(|e| e.contains('=')) {
            opts.env.push(e.into());
        }
        // The guest's argv[0] is what the container asked for, as runc's
        // process gets it (the tender is handed the image as a descriptor).
        opts.argv0 = Some(first.into());
        let mut tender_args: Vec<String> = opts.to_args().into_iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let image_arg = tender_args.len();
        tender_args.push(image_path.to_string_lossy().into_owned());
        tender_args.push("--".into());
        tender_args.extend(process.args[1..].iter().cloned());

        let mut rlimits = Vec::new();
        for r in &process.rlimits {
            let res = rlimit_resource(&r.kind).ok_or_else(|| ConfigError::Rlimit(r.kind.clone()))?;
            rlimits.push((r.kind.clone(), res, r.soft, r.hard));
        }
        for h in self.hooks.all() {
            if !h.path.is_absolute() {
                return Err(ConfigError::HookPath(h.path.clone()));
            }
        }
        Ok(Plan {
            rootfs,
            tender_args,
            image: std::sync::Arc::new(image),
            image_arg,
            netns,
            new_netns,
            rlimits,
            terminal: process.terminal,
            console_size: process.console_size,
            hooks: self.hooks.clone(),
            annotations: self.annotations.clone(),
            cgroups_path: self.linux.cgroups_path.clone(),
            resources: self.linux.resources.clone(),
        })
    }

    /// The sysctls the container sees: its own, and under containerd's
    /// CRI those of its pod's sandbox, which containerd sets only in the
    /// sandbox's config (the pod's containers join the sandbox's IPC and
    /// network namespaces, where runc applied them). The sandbox's bundle
    /// is beside this one (containerd's shim v2 keeps each bundle as
    /// `…/NAMESPACE/ID`), named by containerd's `sandbox-id` annotation;
    /// an id that is not a plain name, or a sandbox bundle that cannot be
    /// read, adds nothing.
    fn pod_sysctl(&self, bundle: &Path) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let ours = self.annotations.get(ANN_CRI_SANDBOX_ID);
        let plain = |id: &&String| !id.is_empty() && id.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_');
        if let Some(id) = ours.filter(plain).filter(|_| self.annotations.get(ANN_CRI_TYPE).is_some_and(|t| t == "container")) {
            let sandbox = bundle.parent().map(|p| p.join(id).join("config.json"));
            if let Some(spec) = sandbox.and_then(|p| std::fs::read(p).ok()).and_then(|t| serde_json::from_slice::<Spec>(&t).ok()) {
                out.extend(spec.linux.sysctl);
            }
        }
        out.extend(self.linux.sysctl.clone());
        out
    }

    /// The bind mounts of directories and regular files, as `--mount`
    /// values (`ro` ones `:ro`, the others `:rw`): the engine's
    /// `/etc/hosts`, `/etc/resolv.conf` and `/etc/hostname` among them;
    /// the special file systems engines add to every container (/proc,
    /// /dev, /sys, /dev/shm, …) are ignored: the guest has its own.
    ///
    /// Each mount's directory is made in the root file system if missing
    /// (as runc makes a mount point), resolved there (symbolic links
    /// inside it, as the guest resolves them), and the mount is on that
    /// resolved directory: the guest finds it by that path.
    fn check_mounts(&self, rootfs: &Path) -> Result<Vec<String>, ConfigError> {
        let mut out = Vec::new();
        for m in &self.mounts {
            let dest = m.destination.trim_end_matches('/');
            let bind = m.kind == "bind" || m.options.iter().any(|o| o == "bind" || o == "rbind");
            if !bind || IGNORED_MOUNTS.contains(&dest) || dest.is_empty() {
                continue;
            }
            let how = if m.options.iter().any(|o| o == "ro") { "ro" } else { "rw" };
            let why = |e: String| ConfigError::Mount { host: m.source.clone(), destination: m.destination.clone(), why: e };
            let source = Path::new(&m.source);
            if source.exists() && !source.is_dir() && !source.is_file() {
                return Err(ConfigError::Volume { host: m.source.clone(), destination: m.destination.clone() });
            }
            let parsed = shoal_tender::Mount::parse(&format!("{}:{dest}:{how}", m.source)).map_err(|e| why(e.to_string()))?;
            // A single file (the engine's /etc/hosts, /etc/resolv.conf,
            // /etc/hostname, a file volume) lies on a file.
            let guest = if parsed.file { file_point(rootfs, dest) } else { mount_point(rootfs, dest) }.map_err(why)?;
            out.push(format!("{}:{guest}:{how}", m.source));
        }
        Ok(out)
    }
}

impl Hooks {
    /// Every hook, in lifecycle order.
    pub fn all(&self) -> impl Iterator<Item = &Hook> {
        self.prestart.iter().chain(&self.create_runtime).chain(&self.create_container).chain(&self.start_container).chain(&self.poststart).chain(&self.poststop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle() -> (PathBuf, Spec) {
        // One directory per call: the tests run in parallel, and rewriting a
        // shared `app` truncates it under another test's executable check.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("shoal-oci-config-{}-{n}", std::process::id()));
        std::fs::create_dir_all(dir.join("rootfs/bin")).unwrap();
        // An ELF header the executable check cannot parse: taken for a shoal
        // image (the tender reads it at start).
        std::fs::write(dir.join("rootfs/bin/app"), b"\x7fELF").unwrap();
        std::fs::write(dir.join("rootfs/bin/script"), b"#!/bin/sh\necho hi\n").unwrap();
        let spec: Spec = serde_json::from_str(
            r#"{"ociVersion":"1.0.2","process":{"args":["app","a","b"],"env":["PATH=/bin","X=1"],"cwd":"/",
                "user":{"uid":0,"gid":0},"rlimits":[{"type":"RLIMIT_NOFILE","hard":1024,"soft":512}]},
                "root":{"path":"rootfs"},
                "mounts":[{"destination":"/proc","type":"proc","source":"proc"},
                          {"destination":"/etc/hosts","type":"bind","source":"/x/hosts","options":["rbind"]}],
                "annotations":{"org.shoal.tender":"hvt","org.shoal.mem-mode":"pool"},
                "linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/run/netns/n"}],
                         "resources":{"memory":{"limit":67108864}}}}"#,
        )
        .unwrap();
        // The engine's /etc/hosts: a single file, served as a mount.
        std::fs::write(dir.join("hosts"), "127.0.0.1\tlocalhost\n").unwrap();
        let mut spec = spec;
        spec.mounts[1].source = dir.join("hosts").display().to_string();
        (dir, spec)
    }

    #[test]
    fn maps_config_onto_tender_options() {
        let (dir, spec) = bundle();
        let p = spec.plan(&dir).unwrap();
        let root = dir.join("rootfs");
        let want: Vec<String> = [
            "--tender",
            "hvt",
            "--argv0",
            "app",
            "--mem",
            "134217728",
            "--env",
            "PATH=/bin",
            "--env",
            "X=1",
            "--mem-mode",
            "pool",
            "--net-bind-any",
            "--mount",
            &format!("{}:/:ro", root.display()),
            // The engine's /etc/hosts (a writable bind mount of a file).
            "--mount",
            &format!("{}:/etc/hosts:rw", dir.join("hosts").display()),
            &root.join("bin/app").to_string_lossy(),
            "--",
            "a",
            "b",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(p.tender_args, want);
        assert_eq!(p.netns, Some(PathBuf::from("/run/netns/n")));
        // On the host's network namespace the guest binds only what the
        // annotation lists.
        let mut host = spec.clone();
        host.linux.namespaces.retain(|n| n.kind != "network");
        assert!(!host.plan(&dir).unwrap().tender_args.iter().any(|a| a == "--net-bind-any"));
        let mut own = spec.clone();
        own.linux.namespaces = vec![Namespace { kind: "network".into(), path: None }];
        assert!(own.plan(&dir).unwrap().tender_args.iter().any(|a| a == "--net-bind-any"), "a new network namespace");
        assert_eq!(p.rlimits, vec![("RLIMIT_NOFILE".to_string(), libc::RLIMIT_NOFILE, 512, 1024)]);
    }

    #[test]
    fn a_read_only_bind_mount_is_served_with_mount() {
        let (dir, mut spec) = bundle();
        let src = dir.join("rootfs/bin");
        spec.mounts.push(Mount {
            destination: "/opt/lib/".into(),
            kind: "bind".into(),
            source: src.display().to_string(),
            options: vec!["rbind".into(), "ro".into()],
        });
        let plan = spec.plan(&dir).unwrap();
        let want = format!("{}:/opt/lib:ro", src.display());
        assert!(plan.tender_args.windows(2).any(|w| w[0] == "--mount" && w[1] == want), "{:?}", plan.tender_args);
        assert!(dir.join("rootfs/opt/lib").is_dir(), "the mount point is made in the root file system, as runc makes it");
    }

    #[test]
    fn cwd_and_user_reach_the_guest() {
        let (dir, mut spec) = bundle();
        let root = dir.join("rootfs");
        std::fs::create_dir_all(root.join("srv/www")).unwrap();
        std::os::unix::fs::symlink("/srv/www", root.join("www")).unwrap();
        let p = spec.process.as_mut().unwrap();
        p.cwd = "/www/app".into();
        (p.user.uid, p.user.gid) = (1000, 100);
        let a = spec.plan(&dir).unwrap().tender_args;
        assert!(a.windows(2).any(|w| w == ["--cwd", "/srv/www/app"]), "made and resolved inside the root file system: {a:?}");
        assert!(root.join("srv/www/app").is_dir());
        assert!(a.windows(2).any(|w| w == ["--user", "1000:100"]), "{a:?}");
        // Root in /: neither option.
        let p = spec.process.as_mut().unwrap();
        p.cwd = "/".into();
        (p.user.uid, p.user.gid) = (0, 0);
        let a = spec.plan(&dir).unwrap().tender_args;
        assert!(!a.iter().any(|w| w == "--cwd" || w == "--user"), "{a:?}");
    }

    #[test]
    fn a_mount_point_resolves_inside_the_root() {
        let (dir, mut spec) = bundle();
        let root = dir.join("rootfs");
        // Debian's /var/run is a link to /run; an absolute link resolves in
        // the root file system, not on the host.
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::os::unix::fs::symlink("/run", root.join("var-run")).unwrap();
        let src = dir.join("rootfs/bin").display().to_string();
        spec.mounts.push(Mount {
            destination: "/var-run/secrets/token".into(),
            kind: "bind".into(),
            source: src.clone(),
            options: vec!["rbind".into(), "ro".into()],
        });
        let a = spec.plan(&dir).unwrap().tender_args;
        assert!(a.windows(2).any(|w| w[0] == "--mount" && w[1] == format!("{src}:/run/secrets/token:ro")), "{a:?}");
        assert!(root.join("run/secrets/token").is_dir());
        // A file in the way: refused with the reason.
        let mut s = spec.clone();
        s.mounts.last_mut().unwrap().destination = "/bin/app/x".into();
        let e = s.plan(&dir).unwrap_err().to_string();
        assert!(e.starts_with(&format!("mount of {src} on /bin/app/x: cannot ")), "{e}");
    }

    #[test]
    fn refuses_what_does_not_apply() {
        let (dir, spec) = bundle();
        let msg = |f: &dyn Fn(&mut Spec)| {
            let mut s = spec.clone();
            f(&mut s);
            s.plan(&dir).unwrap_err().to_string()
        };
        assert!(msg(&|s| s.process.as_mut().unwrap().cwd = "app".into()).starts_with("process.cwd app: must be an absolute path"));
        assert_eq!(
            msg(&|s| s.process.as_mut().unwrap().cwd = "/bin/app".into()),
            "process.cwd /bin/app: its destination in the root file system is not a directory"
        );
        assert!(msg(&|s| s.process.as_mut().unwrap().args[0] = "/nope".into()).starts_with("process.args[0] /nope: no such file"));
        assert!(msg(&|s| s.process.as_mut().unwrap().args[0] = "/../etc/passwd".into()).contains("must stay inside"));
        assert!(msg(&|s| s.process.as_mut().unwrap().args.clear()).starts_with("process.args is empty"));
        assert_eq!(
            msg(&|s| s.process.as_mut().unwrap().args[0] = "script".into()),
            "process.args[0] script is not an ELF file (a script or data?): shoal runs a shoal image or a static Linux executable, and starts no interpreter for a script; name the program itself"
        );
        // A writable directory volume is a writable mount.
        let vol = dir.join("vol");
        std::fs::create_dir_all(&vol).unwrap();
        let mut s = spec.clone();
        s.mounts.push(Mount {
            destination: "/data".into(),
            kind: "bind".into(),
            source: vol.display().to_string(),
            options: vec!["rbind".into(), "rw".into()],
        });
        let a = s.plan(&dir).unwrap().tender_args;
        assert!(a.windows(2).any(|w| w[0] == "--mount" && w[1] == format!("{}:/data:rw", vol.display())), "{a:?}");
        assert!(msg(&|s| s.mounts.push(Mount {
            destination: "/data".into(),
            kind: "bind".into(),
            source: "/nonexistent-shoal".into(),
            options: vec!["ro".into()]
        }))
        .starts_with("mount of /nonexistent-shoal on /data: --mount /nonexistent-shoal: no such directory"));
        let ro = dir.join("ro");
        std::fs::create_dir_all(&ro).unwrap();
        let src = ro.to_string_lossy().into_owned();
        let mut s = spec.clone();
        s.mounts.push(Mount { destination: "/etc/config/".into(), kind: "bind".into(), source: src.clone(), options: vec!["rbind".into(), "ro".into()] });
        let a = s.plan(&dir).unwrap().tender_args;
        assert!(a.windows(2).any(|w| w[0] == "--mount" && w[1] == format!("{src}:/etc/config:ro")), "{a:?}");
        // A single file is a single-file mount, on a file made in the
        // root file system as runc makes it; a FIFO is refused.
        let file = dir.join("rootfs/bin/app").to_string_lossy().into_owned();
        let mut s = spec.clone();
        s.mounts.push(Mount { destination: "/x".into(), kind: "bind".into(), source: file.clone(), options: vec!["ro".into()] });
        let a = s.plan(&dir).unwrap().tender_args;
        assert!(a.windows(2).any(|w| w[0] == "--mount" && w[1] == format!("{file}:/x:ro")), "{a:?}");
        assert!(dir.join("rootfs/x").is_file());
        let hosts = format!("{}:/etc/hosts:rw", dir.join("hosts").display());
        assert!(a.windows(2).any(|w| w[0] == "--mount" && w[1] == hosts), "the engine's /etc/hosts: {a:?}");
        let fifo = dir.join("fifo");
        crate::sys::mkfifo(&fifo).unwrap();
        let fifo = fifo.to_string_lossy().into_owned();
        assert!(msg(&|s| { s.mounts.push(Mount { destination: "/y".into(), kind: "bind".into(), source: fifo.clone(), options: vec!["ro".into()] }) })
            .starts_with(&format!("mount of {fifo} on /y: a shoal guest sees")));
        let d = dir.join("rootfs/adir");
        std::fs::create_dir_all(&d).unwrap();
        assert!(msg(&|s| { s.mounts.push(Mount { destination: "/adir".into(), kind: "bind".into(), source: file.clone(), options: vec!["ro".into()] }) })
            .ends_with("its destination in the root file system is a directory"));
        assert!(msg(&|s| s.linux.namespaces.push(Namespace { kind: "user".into(), path: None })).contains("user namespace"));
        assert!(msg(&|s| {
            s.annotations.insert(ANN_TENDER.into(), "xen".into());
        })
        .starts_with("annotation org.shoal.tender=xen"));
        assert!(msg(&|s| {
            s.annotations.insert(ANN_PUBLISH.into(), "80,x".into());
        })
        .starts_with("annotation org.shoal.publish=80,x"));
        let mut s = spec.clone();
        s.annotations.insert(ANN_PUBLISH.into(), "8080, 53/udp".into());
        let a = s.plan(&dir).unwrap().tender_args;
        assert!(a.windows(2).any(|w| w == ["--publish", "0.0.0.0:8080:8080/tcp"]) && a.windows(2).any(|w| w == ["--publish", "0.0.0.0:53:53/udp"]), "{a:?}");
    }

    #[test]
    fn hostname_sysctls_and_seccomp_reach_the_guest() {
        let (dir, spec) = bundle();
        let plan = |s: &Spec| s.plan(&dir).map(|p| p.tender_args);
        // The host name: the config's, else containerd's /etc/hostname.
        let mut s = spec.clone();
        s.hostname = Some("web-1".into());
        assert!(plan(&s).unwrap().windows(2).any(|w| w == ["--hostname", "web-1"]));
        std::fs::write(dir.join("hostname"), "pod-a\n").unwrap();
        let mut s = spec.clone();
        s.mounts.push(Mount { destination: "/etc/hostname".into(), kind: "bind".into(), source: dir.join("hostname").display().to_string(), options: vec![] });
        assert!(plan(&s).unwrap().windows(2).any(|w| w == ["--hostname", "pod-a"]));
        s.hostname = Some("a/b".into());
        assert_eq!(plan(&s).unwrap_err().to_string(), "hostname \"a/b\": expected 1 to 63 bytes without NUL or '/'");
        // Sysctls: files in the bundle, read-only under /proc/sys.
        let mut s = spec.clone();
        s.linux.sysctl.insert("kernel.shm_rmid_forced".into(), "1".into());
        s.linux.sysctl.insert("net/ipv4/ip_unprivileged_port_start".into(), "0".into());
        let a = plan(&s).unwrap();
        let file = dir.join("shoal-sysctl/kernel.shm_rmid_forced");
        assert!(a.windows(2).any(|w| w[0] == "--mount" && w[1] == format!("{}:/proc/sys/kernel/shm_rmid_forced:ro", file.display())), "{a:?}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "1\n");
        let port = dir.join("shoal-sysctl/net.ipv4.ip_unprivileged_port_start");
        assert!(a.windows(2).any(|w| w[0] == "--mount" && w[1] == format!("{}:/proc/sys/net/ipv4/ip_unprivileged_port_start:ro", port.display())), "{a:?}");
        // A CRI container gets its pod sandbox's sysctls (containerd
        // sets them only in the sandbox's config, beside this bundle).
        let pod = dir.parent().unwrap().join(format!("{}-sandbox", dir.file_name().unwrap().to_string_lossy()));
        std::fs::create_dir_all(&pod).unwrap();
        std::fs::write(pod.join("config.json"), r#"{"linux":{"sysctl":{"fs.mqueue.msg_max":"100"}}}"#).unwrap();
        let mut s = spec.clone();
        s.annotations.insert(ANN_CRI_SANDBOX_ID.into(), pod.file_name().unwrap().to_string_lossy().into_owned());
        s.annotations.insert(ANN_CRI_TYPE.into(), "container".into());
        let a = plan(&s).unwrap();
        assert!(a.iter().any(|m| m.ends_with(":/proc/sys/fs/mqueue/msg_max:ro")), "{a:?}");
        assert_eq!(std::fs::read_to_string(dir.join("shoal-sysctl/fs.mqueue.msg_max")).unwrap(), "100\n");
        s.annotations.insert(ANN_CRI_SANDBOX_ID.into(), "../x".into());
        assert!(!plan(&s).unwrap().iter().any(|m| m.contains("/proc/sys/")), "not a plain id: nothing read");
        for bad in ["kernel", "kernel..x", "../../etc/passwd", "kernel.a b"] {
            let mut s = spec.clone();
            s.linux.sysctl.insert(bad.into(), "1".into());
            assert!(plan(&s).unwrap_err().to_string().starts_with(&format!("linux.sysctl {bad:?}: expected a kernel parameter name")), "{bad}");
        }
        // A seccomp profile: the calls it refuses, as --seccomp-deny.
        let mut s = spec.clone();
        s.linux.seccomp =
            Some(serde_json::from_str(r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["sethostname"],"action":"SCMP_ACT_ERRNO"}]}"#).unwrap());
        assert!(plan(&s).unwrap().windows(2).any(|w| w == ["--seccomp-deny", "170=1"]));
        s.linux.seccomp = Some(serde_json::from_str(r#"{"defaultAction":"SCMP_ACT_KILL"}"#).unwrap());
        assert!(plan(&s).unwrap_err().to_string().starts_with("linux.seccomp: action SCMP_ACT_KILL is not supported"));
        s.linux.seccomp = Some(serde_json::from_str(r#"{"defaultAction":"SCMP_ACT_ALLOW"}"#).unwrap());
        assert!(!plan(&s).unwrap().iter().any(|a| a == "--seccomp-deny"), "nothing refused: no option");
    }
}
