//! What a deployed function is (its settings), how a deploy request is
//! checked, and how the set of functions is kept on disk under `--state`.
//!
//! Everything a request can get wrong is found here, before anything is
//! written: a deploy either passes every check and is persisted with one
//! atomic rename, or it is refused with an [`ApiError`] and the state
//! directory is untouched.

use super::error::ApiError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Which sandbox runs a function's instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// shoal's seccomp-sandboxed process tender.
    Spt,
    /// shoal's KVM tender.
    Hvt,
    /// The function's native static build as a plain Linux process.
    Process,
    /// The native build in an OCI bundle run by runc.
    Runc,
    /// The native build in an OCI bundle run by gVisor's runsc.
    Runsc,
}

impl Backend {
    /// The backend named `s`, or a 422 naming the ones there are.
    pub fn parse(s: &str) -> Result<Backend, ApiError> {
        Ok(match s {
            "spt" => Backend::Spt,
            "hvt" => Backend::Hvt,
            "process" => Backend::Process,
            "runc" => Backend::Runc,
            "runsc" => Backend::Runsc,
            _ => return Err(ApiError::Unprocessable(format!("unknown backend `{s}`: expected spt, hvt, process, runc or runsc"))),
        })
    }

    /// The name used in the API and the metrics.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Spt => "spt",
            Backend::Hvt => "hvt",
            Backend::Process => "process",
            Backend::Runc => "runc",
            Backend::Runsc => "runsc",
        }
    }

    /// Whether the image is a shoal image (otherwise a native executable).
    pub fn is_shoal(self) -> bool {
        matches!(self, Backend::Spt | Backend::Hvt)
    }
}

/// A function runtime: the host's own interpreter (Debian's, by absolute
/// path, never looked up in `PATH`) running a bootstrap shipped with
/// shoal (apps/functions/runtime/) that serves the deployed handler file's
/// `handle(req)` on the instance's port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// `/usr/bin/node` (Node 20) with bootstrap.js.
    Node,
    /// `/usr/bin/python3.11` with bootstrap.py.
    Python,
}

/// The largest handler file a runtime function may deploy: a handler is
/// source code, and the gateway copies it into its state directory.
pub const MAX_HANDLER: u64 = 4 << 20;

impl Runtime {
    /// The runtime named `s`, or a 422 naming the ones there are.
    pub fn parse(s: &str) -> Result<Runtime, ApiError> {
        match s {
            "node" => Ok(Runtime::Node),
            "python" => Ok(Runtime::Python),
            _ => Err(ApiError::Unprocessable(format!("unknown runtime `{s}`: expected node or python"))),
        }
    }

    /// The name used in the API.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Node => "node",
            Runtime::Python => "python",
        }
    }

    /// The host's interpreter it runs.
    pub fn interpreter(self) -> &'static Path {
        Path::new(match self {
            Runtime::Node => "/usr/bin/node",
            Runtime::Python => "/usr/bin/python3.11",
        })
    }

    /// The handler file's extension.
    pub fn extension(self) -> &'static str {
        match self {
            Runtime::Node => "js",
            Runtime::Python => "py",
        }
    }

    /// The bootstrap's file name and contents (built into shoal, so the
    /// gateway needs no source tree).
    pub fn bootstrap(self) -> (&'static str, &'static str) {
        match self {
            Runtime::Node => ("bootstrap.js", include_str!("../../../apps/functions/runtime/bootstrap.js")),
            Runtime::Python => ("bootstrap.py", include_str!("../../../apps/functions/runtime/bootstrap.py")),
        }
    }
}

/// Where a runtime function's directory (bootstrap + handler) appears in
/// its instances: in the guest on spt/hvt (a read-only mount), in the
/// container on runc/runsc (a read-only bind mount).
pub const RUNTIME_GUEST_DIR: &str = "/fn-runtime";

/// The host directories a runtime's interpreter needs, mounted read-only
/// at the same place in the instance: the interpreter, `ld.so`, the shared
/// libraries and Python's standard library.
pub const SYSTEM_DIRS: [&str; 3] = ["/usr", "/lib", "/lib64"];

/// Checks a runtime function's handler file and copies it with the
/// runtime's bootstrap into a directory of their own under `root` (named
/// by the SHA-256 of both, so an unchanged redeploy reuses it and a
/// changed handler is a new directory: the instances of the old
/// deployment keep theirs). Returns the directory.
fn runtime_dir(rt: Runtime, handler: &Path, root: &Path) -> Result<PathBuf, ApiError> {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let bad = |why: String| unprocessable(format!("handler {}: {why}", handler.display()));
    if handler.extension().and_then(|e| e.to_str()) != Some(rt.extension()) {
        return Err(bad(format!("a {} handler is a .{} file", rt.name(), rt.extension())));
    }
    let meta = std::fs::metadata(handler).map_err(|e| bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(bad("not a regular file".into()));
    }
    if meta.len() > MAX_HANDLER {
        return Err(bad(format!("{} bytes; at most {MAX_HANDLER} are accepted", meta.len())));
    }
    let code = std::fs::read(handler).map_err(|e| bad(e.to_string()))?;
    if !rt.interpreter().is_file() {
        return Err(unprocessable(format!("the {} runtime runs {}, which is not on this machine", rt.name(), rt.interpreter().display())));
    }
    let (boot_name, boot) = rt.bootstrap();
    let mut h = Sha256::new();
    h.update(rt.name().as_bytes());
    h.update([0]);
    h.update(boot.as_bytes());
    h.update([0]);
    h.update(&code);
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let dir = root.join(&hex);
    if dir.join(boot_name).is_file() {
        return Ok(dir);
    }
    let internal = |what: &str, e: std::io::Error| ApiError::Internal(format!("cannot {what} {}: {e}", root.display()));
    // The instances read it as their own user (spt: nobody): world-readable,
    // beneath a state directory that only the gateway's user can list.
    std::fs::DirBuilder::new().recursive(true).mode(0o711).create(root).map_err(|e| internal("make the runtimes directory", e))?;
    let tmp = root.join(format!(".{hex}.tmp"));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::DirBuilder::new().mode(0o755).create(&tmp).map_err(|e| internal("make a directory in", e))?;
    let write = |name: &str, bytes: &[u8]| -> std::io::Result<()> {
        let p = tmp.join(name);
        std::fs::write(&p, bytes)?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644))
    };
    write(boot_name, boot.as_bytes()).and_then(|_| write(&format!("handler.{}", rt.extension()), &code)).map_err(|e| internal("write the handler into", e))?;
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        // Another deploy of the same handler made it meanwhile.
        Err(_) if dir.join(boot_name).is_file() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => Err(internal("move the handler into", e)),
    }
}

/// Requests one instance serves at once when the deploy does not say.
pub const DEFAULT_CONCURRENCY: u32 = 1;

/// A deployed function: a name, an image and its settings.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Function {
    /// The function's name (letters, digits, `-`, `_`).
    pub name: String,
    /// The image: a shoal image for spt/hvt, a native static executable
    /// otherwise. An executable deployed on spt/hvt: the instance image
    /// built around it (in shoal's cache), the executable in [`Function::executable`].
    pub image: PathBuf,
    /// spt/hvt: the unmodified Linux executable deployed (path or upload),
    /// run as [`Function::image`] with it as argv[0].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable: Option<PathBuf>,
    /// The backend that runs it.
    pub backend: Backend,
    /// A runtime function: the runtime whose interpreter [`Function::image`]
    /// (or, on spt/hvt, [`Function::executable`]) is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
    /// A runtime function: the handler file deployed (as named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<PathBuf>,
    /// A runtime function: its directory under the state directory, the
    /// bootstrap and a copy of the handler (mounted at
    /// [`RUNTIME_GUEST_DIR`] in its instances).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_dir: Option<PathBuf>,
    /// The instance's memory, e.g. "256M": guest memory on spt/hvt
    /// (`--mem`), the container's memory limit on runc/runsc
    /// (`linux.resources.memory.limit`), the address-space limit
    /// (RLIMIT_AS) of a `process` instance.
    pub memory: String,
    /// Requests one instance serves at once (and so connections the
    /// gateway keeps open to it); [`DEFAULT_CONCURRENCY`] unless given.
    pub concurrency: u32,
    /// The most instances running at once.
    pub max_instances: u32,
    /// Requests that may wait for a free instance; beyond that, 429.
    pub queue: u32,
    /// Time for an instance to answer (response head) before 504, in ms.
    pub timeout_ms: u64,
    /// How long an idle instance is kept before it is stopped, in ms.
    pub keep_warm_ms: u64,
    /// How spt/hvt instances get their image's pages (`--mem-mode`):
    /// `copy` (default; `pool` for a large executable on spt:
    /// `default_mem_mode_for`), `ksm` or `pool` (read-only pages shared from the
    /// library pool; the gateway adds the image to the pool at deploy).
    #[serde(default = "default_mem_mode")]
    pub mem_mode: String,
    /// The root file system of the instances (spt/hvt `--fs`; `FN_ROOT` natively).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs: Option<PathBuf>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Host directories and files (spt/hvt `--mount HOSTDIR:GUESTDIR:ro`
    /// or `:rw`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<String>,
    /// spt and hvt: cold starts are copies of a template booted at deploy
    /// (docs/serve.md "Templates"); on by default for spt and hvt (also
    /// for a function saved before templates existed), off elsewhere.
    #[serde(default = "default_template")]
    pub template: bool,
    /// Where the template stops (docs/serve.md "The explicit ready point").
    #[serde(default)]
    pub ready: Ready,
    /// Requests one instance serves in all before it is stopped (0: no
    /// limit). 1 makes every request a cold start on a fresh instance
    /// (`shoal bench faas`, the template tests).
    #[serde(default)]
    pub requests_per_instance: u64,
}

/// The body of `PUT /functions/NAME`. Unknown fields are refused, so that
/// a misspelt setting is not silently ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployRequest {
    /// If given, must be the name in the URL.
    pub name: Option<String>,
    /// Absolute path of the image on the gateway's machine, or
    /// `sha256:HEX` naming an image uploaded with `POST /images`.
    pub image: Option<PathBuf>,
    /// spt (default), hvt, process, runc or runsc.
    pub backend: Option<String>,
    /// `node` or `python`: a runtime function (then `handler`, not `image`).
    pub runtime: Option<String>,
    /// A runtime function's handler file (absolute path).
    pub handler: Option<PathBuf>,
    /// The instance's memory (see [`Function::memory`]), default 256M.
    pub memory: Option<String>,
    /// Default 8.
    pub concurrency: Option<u32>,
    /// Default 4.
    pub max_instances: Option<u32>,
    /// Default 256.
    pub queue: Option<u32>,
    /// Default 30,000.
    pub timeout_ms: Option<u64>,
    /// Default 60,000.
    pub keep_warm_ms: Option<u64>,
    /// copy (default; pool for an executable of 32 MiB or more on spt), ksm or pool: spt and hvt only.
    pub mem_mode: Option<String>,
    /// Root file system directory.
    pub fs: Option<PathBuf>,
    /// Extra environment.
    pub env: Option<BTreeMap<String, String>>,
    /// `HOSTDIR:GUESTDIR:ro` (or `:rw`), or `{"host": HOSTDIR, "guest":
    /// GUESTDIR, "rw": true}`, each HOSTDIR (a directory or a regular
    /// file) beneath an allowed path; spt and hvt only.
    pub mounts: Option<Vec<MountRequest>>,
    /// Cold starts by copying a template: default true on spt and hvt;
    /// spt and hvt only.
    pub template: Option<bool>,
    /// `listen` (default) or `explicit`: a template's ready point.
    pub ready: Option<String>,
    /// Requests per instance before it is stopped; default 0 (no limit).
    pub requests_per_instance: Option<u64>,
}

/// One of a deploy's `mounts`: the CLI's `HOSTDIR:GUESTDIR:ro|rw`, or
/// the same as an object `{"host": HOSTDIR, "guest": GUESTDIR, "rw":
/// BOOL}` (`rw` false if left out); kept as the CLI's text.
#[derive(Debug, Deserialize)]
#[serde(try_from = "serde_json::Value")]
pub struct MountRequest(String);

impl TryFrom<serde_json::Value> for MountRequest {
    type Error = String;

    fn try_from(v: serde_json::Value) -> Result<MountRequest, String> {
        let shape = || format!("mounts: {v}: give \"HOSTDIR:GUESTDIR:ro\" (or :rw) or {{\"host\": HOSTDIR, \"guest\": GUESTDIR, \"rw\": true|false}}");
        match &v {
            serde_json::Value::String(t) => Ok(MountRequest(t.clone())),
            serde_json::Value::Object(o) if o.keys().all(|k| ["host", "guest", "rw"].contains(&k.as_str())) => {
                let (Some(host), Some(guest)) = (o.get("host").and_then(|h| h.as_str()), o.get("guest").and_then(|g| g.as_str())) else {
                    return Err(shape());
                };
                let rw = match o.get("rw") {
                    None => false,
                    Some(b) => b.as_bool().ok_or_else(shape)?,
                };
                Ok(MountRequest(format!("{host}:{guest}:{}", if rw { "rw" } else { "ro" })))
            }
            _ => Err(shape()),
        }
    }
}

/// Where a function's template is stopped and kept.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Ready {
    /// The program's first wait for a connection with nothing pending.
    #[default]
    Listen,
    /// The program's first write to `/dev/shoal/ready`.
    Explicit,
}

impl Ready {
    /// The tenders' name for it.
    pub fn point(self) -> shoal_spt::ReadyPoint {
        match self {
            Ready::Listen => shoal_spt::ReadyPoint::Listen,
            Ready::Explicit => shoal_spt::ReadyPoint::Explicit,
        }
    }

    /// Where the template stops, in words (deploy errors).
    pub fn describe(self) -> &'static str {
        match self {
            Ready::Listen => "its instance stopped where the program first waits for a connection",
            Ready::Explicit => "its instance stopped where the program first writes to /dev/shoal/ready",
        }
    }
}

fn default_template() -> bool {
    true
}

fn default_mem_mode() -> String {
    "copy".into()
}

/// The memory mode of a function that names none: `pool` for an
/// executable of [`shoal_tender::POOL_DEFAULT_MIN`] or more on spt (Node's
/// 99 MB: copied into every instance it was most of an exec start), as
/// `shoal run` chooses; `copy` otherwise.
fn default_mem_mode_for(backend: Backend, executable: Option<&Path>) -> String {
    let large = executable.is_some_and(|e| std::fs::metadata(e).is_ok_and(|m| m.len() >= shoal_tender::POOL_DEFAULT_MIN));
    if backend == Backend::Spt && large {
        "pool".into()
    } else {
        default_mem_mode()
    }
}

/// Checks a function name: 1–64 letters, digits, `-` or `_`, starting
/// with a letter or digit — so it is safe in a URL, a file name and a
/// container id. A 400 otherwise.
pub fn check_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(ApiError::BadRequest(format!(
            "invalid function name {name:?}: use 1 to 64 letters, digits, '-' or '_', starting with a letter or digit (no '/' or '..')"
        )))
    }
}

fn unprocessable(msg: String) -> ApiError {
    ApiError::Unprocessable(msg)
}

fn range<T: PartialOrd + std::fmt::Display + Copy>(what: &str, v: T, lo: T, hi: T) -> Result<T, ApiError> {
    if v < lo || v > hi {
        return Err(unprocessable(format!("{what} {v} is out of range: expected {lo} to {hi}")));
    }
    Ok(v)
}

/// Checks that `image` can run on `backend`: an existing regular file,
/// a shoal image the loader accepts for spt/hvt, an ELF executable
/// otherwise. 422 with the reason if not.
fn check_image(image: &Path, backend: Backend) -> Result<(), ApiError> {
    if !image.is_absolute() {
        return Err(unprocessable(format!("image {}: give an absolute path (the gateway may run in another directory)", image.display())));
    }
    let meta = std::fs::metadata(image).map_err(|e| unprocessable(format!("image {}: {e}", image.display())))?;
    if !meta.is_file() {
        return Err(unprocessable(format!("image {} is not a regular file", image.display())));
    }
    if backend.is_shoal() && shoal_tender::is_executable(image) {
        // An executable: checked whole when its instance image is built.
    } else if backend.is_shoal() {
        shoal_loader::Image::open(image).map_err(|e| unprocessable(format!("image {} is not a usable shoal image: {e}", image.display())))?;
    } else {
        let mut head = [0u8; 4];
        let ok = std::fs::File::open(image).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head)).is_ok();
        if !ok || head != *b"\x7fELF" {
            return Err(unprocessable(format!("image {} is not an ELF executable (the {} backend runs the native build)", image.display(), backend.name())));
        }
    }
    Ok(())
}

impl Function {
    /// 403 if `policy` (the gateway's options now) no longer allows this
    /// function: a deployment loaded from the state file at start.
    pub fn check_policy(&self, policy: &super::auth::Policy) -> Result<(), ApiError> {
        policy.check_backend(self.backend)?;
        // A runtime function's image is the host's interpreter, chosen by
        // the gateway: its handler is what the deploy named.
        match &self.handler {
            Some(h) => policy.check_path("handler", h)?,
            None => policy.check_path("image", self.executable.as_ref().unwrap_or(&self.image))?,
        }
        if let Some(fs) = &self.fs {
            policy.check_path("fs", fs)?;
        }
        for m in &self.mounts {
            let (host, _) = m.split_once(':').unwrap_or((m, ""));
            policy.check_path("mount", Path::new(host))?;
        }
        Ok(())
    }

    /// [`Function::memory`] in bytes (checked when the function was deployed).
    pub fn memory_bytes(&self) -> u64 {
        shoal_tender::parse_size(&self.memory).unwrap_or(256 << 20)
    }

    /// The function a deploy request describes, after every check; an
    /// uploaded image (`sha256:HEX`) is looked up in `images`; what the
    /// operator's `policy` does not allow is refused (403) before any
    /// named path is opened.
    pub fn from_request(name: &str, req: DeployRequest, images: &super::images::ImageStore, policy: &super::auth::Policy) -> Result<Function, ApiError> {
        check_name(name)?;
        if let Some(n) = &req.name {
            if n != name {
                return Err(ApiError::Conflict(format!("the body names function {n:?} but the URL names {name:?}")));
            }
        }
        let backend = Backend::parse(req.backend.as_deref().unwrap_or("spt"))?;
        policy.check_backend(backend)?;
        let runtime = req.runtime.as_deref().map(Runtime::parse).transpose()?;
        let (mut image, handler, runtime_dir) = match runtime {
            Some(rt) => {
                if req.image.is_some() {
                    return Err(unprocessable(format!(
                        "a {} runtime function has a \"handler\", not an \"image\" (its image is {})",
                        rt.name(),
                        rt.interpreter().display()
                    )));
                }
                let h = req.handler.ok_or_else(|| {
                    unprocessable(format!(
                        "runtime {}: the body has no \"handler\": give the absolute path of the handler file (HANDLER.{})",
                        rt.name(),
                        rt.extension()
                    ))
                })?;
                if !h.is_absolute() {
                    return Err(unprocessable(format!("handler {}: give an absolute path (the gateway may run in another directory)", h.display())));
                }
                policy.check_path("handler", &h)?;
                let dir = runtime_dir(rt, &h, &images.runtimes_dir())?;
                (rt.interpreter().to_path_buf(), Some(h), Some(dir))
            }
            None => {
                if req.handler.is_some() {
                    return Err(unprocessable("handler: only a runtime function has one (give \"runtime\": \"node\" or \"python\")".into()));
                }
                let mut image = req
                    .image
                    .ok_or_else(|| unprocessable("the body has no \"image\": give the image's absolute path or the sha256: name of an uploaded one".into()))?;
                if let Some(r) = image.to_str().filter(|s| s.starts_with(super::images::REF_PREFIX)) {
                    image = images.resolve(r)?;
                } else if image.is_absolute() {
                    policy.check_path("image", &image)?;
                }
                (image, None, None)
            }
        };
        check_image(&image, backend)?;
        let mut executable = None;
        if backend.is_shoal() {
            // An unmodified Linux executable runs as the instance image
            // built around it, here once, as shoal-tender would build it.
            if let Some(built) = shoal_tender::executable_image(&image).map_err(|e| unprocessable(format!("image {}: {e}", image.display())))? {
                executable = Some(std::mem::replace(&mut image, built));
            }
        }
        let memory = req.memory.unwrap_or_else(|| "256M".into());
        let bytes = shoal_tender::parse_size(&memory).map_err(|e| unprocessable(format!("memory: {e}")))?;
        range("memory (bytes)", bytes, 4 << 20, 64 << 30)?;
        if let Some(fs) = &req.fs {
            if fs.is_absolute() {
                policy.check_path("fs", fs)?;
            }
            if !fs.is_absolute() || !fs.is_dir() {
                return Err(unprocessable(format!("fs {}: give the absolute path of an existing directory", fs.display())));
            }
        }
        let mem_mode = req.mem_mode.unwrap_or_else(|| default_mem_mode_for(backend, executable.as_deref()));
        if !["copy", "ksm", "pool"].contains(&mem_mode.as_str()) {
            return Err(unprocessable(format!("mem_mode {mem_mode:?}: expected copy, ksm or pool")));
        }
        if mem_mode != "copy" && !backend.is_shoal() {
            return Err(unprocessable(format!("mem_mode {mem_mode}: only the spt and hvt backends have memory modes")));
        }
        let mounts: Vec<String> = req.mounts.unwrap_or_default().into_iter().map(|m| m.0).collect();
        if !mounts.is_empty() && !backend.is_shoal() {
            return Err(unprocessable("mounts: only the spt and hvt backends have host directories".into()));
        }
        let mut parsed = Vec::new();
        for m in &mounts {
            let (host, _) = m.split_once(':').unwrap_or((m, ""));
            let host = Path::new(host);
            if !host.is_absolute() {
                return Err(unprocessable(format!("mounts {m:?}: give HOSTDIR:GUESTDIR:ro or HOSTDIR:GUESTDIR:rw with HOSTDIR absolute")));
            }
            policy.check_path("mount", host)?;
            parsed.push(shoal_tender::Mount::parse(m).map_err(|e| unprocessable(e.to_string()))?);
        }
        shoal_tender::check_mounts(&parsed).map_err(|e| unprocessable(e.to_string()))?;
        let env = req.env.unwrap_or_default();
        for k in env.keys() {
            if k.is_empty() || k.contains('=') || k.contains('\0') || ["PORT", "LISTEN_FD", "FN_ROOT"].contains(&k.as_str()) {
                return Err(unprocessable(format!("env {k:?}: not a name the function may set (PORT, LISTEN_FD and FN_ROOT belong to the gateway)")));
            }
        }
        if env.values().any(|v| v.contains('\0')) {
            return Err(unprocessable("env: a value contains a NUL byte".into()));
        }
        if req.template == Some(true) && !backend.is_shoal() {
            return Err(unprocessable(format!("template: only the spt and hvt backends start instances from a template, not {}", backend.name())));
        }
        // Templates are the default where instances can be copies.
        let template_default = backend.is_shoal();
        let template = req.template.unwrap_or(template_default);
        let ready = match req.ready.as_deref() {
            None | Some("listen") => Ready::Listen,
            Some("explicit") if template => Ready::Explicit,
            Some("explicit") => {
                return Err(unprocessable(format!(
                    "ready: explicit is where a template stops, and this function has none ({}); deploy it with \"template\": true on spt or hvt",
                    if backend.is_shoal() { "template off" } else { "only spt and hvt have templates" }
                )))
            }
            Some(other) => return Err(unprocessable(format!("ready {other:?}: expected listen or explicit"))),
        };
        Ok(Function {
            name: name.to_string(),
            image,
            executable,
            backend,
            runtime,
            handler,
            runtime_dir,
            memory,
            // One request at a time per instance unless the function says
            // it serves more (as Lambda does): a server that handles one
            // connection until its client closes it (a common shape) would
            // otherwise keep the gateway's first kept-alive connection and
            // leave the others waiting in its backlog until they time out.
            concurrency: range("concurrency", req.concurrency.unwrap_or(DEFAULT_CONCURRENCY), 1, 1024)?,
            max_instances: range("max_instances", req.max_instances.unwrap_or(4), 1, 1024)?,
            queue: range("queue", req.queue.unwrap_or(256), 0, 100_000)?,
            timeout_ms: range("timeout_ms", req.timeout_ms.unwrap_or(30_000), 1, 3_600_000)?,
            keep_warm_ms: range("keep_warm_ms", req.keep_warm_ms.unwrap_or(60_000), 0, 86_400_000)?,
            mem_mode,
            fs: req.fs,
            env,
            mounts,
            template,
            ready,
            requests_per_instance: req.requests_per_instance.unwrap_or(0),
        })
    }
}

/// The state file's contents.
#[derive(Default, Serialize, Deserialize)]
struct StateFile {
    functions: Vec<Function>,
}

/// The functions file under the state directory.
pub struct Store {
    dir: PathBuf,
    /// The state directory's lock ([`LOCK_FILE`]), held while the store is.
    _lock: std::fs::File,
}

/// The file a gateway holds an exclusive `flock` on for as long as it
/// runs: two gateways on one state directory would overwrite each
/// other's `functions.json` and collect each other's uploads.
pub const LOCK_FILE: &str = "lock";

/// Opens `path` (created, 0600) and takes an exclusive `flock` on it
/// without waiting: `Ok(None)` when another process holds it. The lock
/// lasts as long as the file stays open (and is not inherited by the
/// instances: the descriptor is close-on-exec).
fn lock_exclusive(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(path)?;
    // SAFETY: flock on a descriptor this function owns; no memory is
    // passed.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Some(f));
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(None)
    } else {
        Err(e)
    }
}

impl Store {
    /// Opens (creating it, mode 0700, if needed) the state directory and
    /// locks it for this gateway (a second one on it is refused).
    pub fn open(dir: &Path) -> anyhow::Result<Store> {
        use anyhow::Context;
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .with_context(|| format!("cannot create the state directory {}", dir.display()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        anyhow::ensure!(dir.is_dir(), "the state directory {} is not a directory", dir.display());
        let lock = lock_exclusive(&dir.join(LOCK_FILE))
            .with_context(|| format!("cannot lock the state directory {}", dir.display()))?
            .with_context(|| format!("the state directory {} is in use by another shoal serve; give each gateway its own --state", dir.display()))?;
        Ok(Store { dir: dir.to_path_buf(), _lock: lock })
    }

    fn file(&self) -> PathBuf {
        self.dir.join("functions.json")
    }

    /// The functions saved by the last [`Store::save`] (none at first).
    pub fn load(&self) -> anyhow::Result<Vec<Function>> {
        use anyhow::Context;
        match std::fs::read(self.file()) {
            Ok(b) => Ok(serde_json::from_slice::<StateFile>(&b).with_context(|| format!("the state file {} is not valid", self.file().display()))?.functions),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", self.file().display())),
        }
    }

    /// Writes the whole set atomically: a temporary file, fsync, rename
    /// over the old one, fsync of the directory — a crash leaves the old
    /// set or the new one, never half of either.
    pub fn save(&self, functions: &[Function]) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let tmp = self.dir.join(".functions.json.tmp");
        let body = serde_json::to_vec_pretty(&StateFile { functions: functions.to_vec() }).map_err(std::io::Error::other)?;
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        f.write_all(&body)?;
        f.sync_all()?;
        std::fs::rename(&tmp, self.file())?;
        std::fs::File::open(&self.dir)?.sync_all()
    }
}

/// The default state directory: `$XDG_STATE_HOME/shoal/serve`, else
/// `~/.local/state/shoal/serve`.
pub fn default_state_dir() -> anyhow::Result<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|x| !x.is_empty()) {
        return Ok(PathBuf::from(x).join("shoal/serve"));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).ok_or_else(|| anyhow::anyhow!("neither XDG_STATE_HOME nor HOME is set: give --state DIR"))?;
    Ok(PathBuf::from(home).join(".local/state/shoal/serve"))
}
