//! Starting and stopping one instance of a function on its backend.
//!
//! spt, hvt and process instances get their port as a listening socket
//! the gateway opens on 127.0.0.1:0 and hands over (descriptor 3): a
//! connection made right after the spawn waits in the host's backlog
//! until the function accepts, so a cold start needs no polling. runc and
//! runsc instances run in an OCI bundle in a network namespace of their
//! own ([`super::netns`]) with `PORT` in their environment; for them the
//! gateway connects, from inside that namespace, with retries until the
//! function listens.
//!
//! Every instance's process is started without copying the gateway
//! ([`super::spawn`]: `posix_spawn`-style, no `fork`) and gets
//! `PR_SET_PDEATHSIG` (SIGKILL): if the
//! gateway dies, so do its instances (the spt tender's guest dies with the
//! tender; hvt is one process). A container's init is not runc's child,
//! so runc/runsc containers are also removed by name at the gateway's next
//! start ([`remove_stale_containers`]).

use super::bundle::{self, Network, Process};
use super::netns::NetNs;
use super::spawn::{Proc, Spec};
use super::spec::{Backend, Function, Runtime, RUNTIME_GUEST_DIR, SYSTEM_DIRS};
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// The descriptor number an instance inherits its listening socket at.
const LISTEN_FD: i32 = 3;

/// Prefix of the container ids the gateway creates.
pub const CONTAINER_PREFIX: &str = "shoal-fn-";

/// What the gateway needs to start instances: the lean tender and a
/// scratch directory for OCI bundles.
pub struct Launcher {
    /// `shoal-tender` (for spt and hvt).
    pub tender: PathBuf,
    /// Where OCI bundles are made (removed with the gateway).
    pub scratch: PathBuf,
    /// `--uid-range`: each spt instance runs as a uid of its own from it.
    pub uid_range: Option<shoal_loader::uids::UidRange>,
}

/// A started instance's process and how to reach it.
pub struct Started {
    /// The process the gateway waits on (tender, program or runtime).
    pub child: Proc,
    /// Where the function listens.
    pub addr: SocketAddr,
    /// The container id, for runc/runsc.
    pub container: Option<(PathBuf, String)>,
    /// Whether the port accepts from the start (a handed-over socket).
    pub listening: bool,
    /// How long the spawn itself took (`clone` to the child's `exec`),
    /// for the gateway's trace (`SHOAL_SERVE_TRACE`).
    pub spawn_time: Duration,
    /// runc/runsc: the instance's network namespace (`addr` is in it).
    pub netns: Option<Arc<NetNs>>,
    /// A prepared spt instance's uid (`--uid-range`), held until the
    /// instance is reaped (dropped with this).
    pub uid: Option<shoal_loader::uids::UidClaim>,
    /// The first request's connection, made before the instance runs
    /// ([`first_connection`]).
    pub conn: Option<std::net::TcpStream>,
}

/// Connects to a listening socket the gateway is about to hand over, before
/// the instance exists: on loopback the handshake completes inside
/// `connect` and the connection waits in the socket's backlog, so the
/// instance finds it at its first wait, and the gateway skips the
/// asynchronous connect (a wait for the I/O driver to report the
/// connection writable: a cross-thread wake-up on a cold start's path).
/// `None` if it fails: the first request then connects as any other.
fn first_connection(sock: &TcpListener) -> Option<std::net::TcpStream> {
    let s = std::net::TcpStream::connect(sock.local_addr().ok()?).ok()?;
    s.set_nonblocking(true).ok()?;
    Some(s)
}

/// The runtime binary of a container backend.
fn runtime(backend: Backend) -> Result<PathBuf> {
    let name = if backend == Backend::Runc { "runc" } else { "runsc" };
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin", "/sbin", "/bin"] {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!("{name} is not installed (scripts/setup installs it)")
}

/// The tender options that run `f` (spt and hvt), without the
/// per-instance ones (the listening socket and `PORT`) and the image.
fn tender_options(f: &Function) -> shoal_tender::RunOpts {
    let mut o = shoal_tender::RunOpts {
        tender: Some(f.backend.name().into()),
        mem: Some(f.memory.clone().into()),
        mem_mode: Some(f.mem_mode.clone().into()),
        fs: f.fs.clone().map(Into::into),
        // An executable's argv[0] is its own path, not its instance image's.
        argv0: f.executable.clone().map(Into::into),
        ..Default::default()
    };
    o.env = f.env.iter().map(|(k, v)| format!("{k}={v}").into()).collect();
    o.mount = f.mounts.iter().map(Into::into).collect();
    if let Some(dir) = &f.runtime_dir {
        // The host's interpreter, its ld.so and libraries, read-only where
        // they are; the bootstrap and the handler at RUNTIME_GUEST_DIR.
        o.mount.extend(SYSTEM_DIRS.iter().map(|d| format!("{d}:{d}:ro").into()));
        o.mount.push(format!("{}:{RUNTIME_GUEST_DIR}:ro", dir.display()).into());
    }
    o
}

/// A runtime function's bootstrap as the instance sees it (`dir`: where
/// the function's runtime directory is, in the instance's file system).
fn bootstrap_path(rt: Runtime, dir: &Path) -> PathBuf {
    dir.join(rt.bootstrap().0)
}

/// The program's arguments after argv[0] on spt/hvt: a runtime function's
/// bootstrap, nothing for an image.
fn guest_args(f: &Function) -> Vec<std::ffi::OsString> {
    match f.runtime {
        Some(rt) => vec![bootstrap_path(rt, Path::new(RUNTIME_GUEST_DIR)).into_os_string()],
        None => Vec::new(),
    }
}

/// The address-space limit (`RLIMIT_AS`) a `process` instance of `f` gets:
/// its memory, and for Node 2 GiB more. Node reserves address space it
/// never touches: V8 ~700 MB at start, and glibc a 64 MiB malloc arena for
/// each thread that allocates at once (libuv's pool, V8's compiler
/// threads). Measured natively: the static-file function serving 4
/// downloads at once peaks at 1.07 GB of address space with 89 MB
/// resident, so a 1 GiB limit killed it (V8 "Zone Allocation failed")
/// whenever enough of its threads allocated together, which a loaded host
/// makes likely. spt/hvt count memory used, not reserved.
fn address_space(f: &Function) -> u64 {
    match f.runtime {
        Some(Runtime::Node) => f.memory_bytes().saturating_add(2 << 30),
        _ => f.memory_bytes(),
    }
}

/// `f`'s options checked as `shoal-tender` checks them.
fn run_args(f: &Function) -> Result<shoal_tender::RunArgs> {
    shoal_tender::RunArgs::from_opts(&tender_options(f), f.image.clone(), guest_args(f)).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Checks and prepares an spt function once for all its instances
/// (`shoal_spt::Prepared`: the image checked, the layout planned, the
/// root file system packed into a sealed memory file, the pool files
/// verified), from the same options `shoal-tender` would be given, so an
/// instance runs as it would from `shoal run` with those options.
pub fn prepare(f: &Function) -> Result<shoal_spt::Prepared> {
    let parsed = run_args(f)?;
    let p = shoal_spt::Prepared::new(&parsed.config()).map_err(|e| anyhow::anyhow!("{}: {e}", f.image.display()))?;
    Ok(p)
}

/// A function's template: spt's (copies are forks of it) or hvt's
/// (copies are new VMs of its memory, from empty VMs made ahead).
pub enum TemplateHandle {
    /// spt's control channel.
    Spt(shoal_spt::Template),
    /// hvt's control channel and its empty VMs.
    Hvt(Arc<HvtTemplate>),
}

impl TemplateHandle {
    /// The template's process id.
    pub fn pid(&self) -> libc::pid_t {
        match self {
            TemplateHandle::Spt(t) => t.pid(),
            TemplateHandle::Hvt(t) => t.template.pid(),
        }
    }

    /// Kills what an spt template's program forked itself that is not in
    /// `keep` (`shoal_spt::Template::kill_strays`); how many. An hvt
    /// template's program forks nothing on the host (its guest's `fork`
    /// is the kernel's ENOSYS), so there is nothing to kill.
    pub fn kill_strays(&self, keep: &[libc::pid_t]) -> usize {
        match self {
            TemplateHandle::Spt(t) => t.kill_strays(keep),
            TemplateHandle::Hvt(_) => 0,
        }
    }
}

/// How many empty VMs an hvt template keeps made ahead: a cold start takes
/// one and the gateway makes the next while the copy answers.
const HVT_SPARES: usize = 2;

/// An hvt template and the empty VMs made ahead of cold starts (each a
/// VM and vCPU with no guest state: not spare instances).
pub struct HvtTemplate {
    template: shoal_hvt::template::Template,
    spares: std::sync::Mutex<Vec<super::spawn::HvtSpare>>,
    /// Empty VMs being made now.
    making: std::sync::atomic::AtomicUsize,
}

impl HvtTemplate {
    /// Makes empty VMs until [`HVT_SPARES`] are ready (on a blocking
    /// thread; the first failure stops it: the next cold start makes its
    /// own and says why).
    pub fn refill(self: &Arc<Self>) {
        let want = HVT_SPARES.saturating_sub(self.spares.lock().unwrap_or_else(|e| e.into_inner()).len());
        let making = self.making.load(Ordering::SeqCst);
        if want <= making {
            return;
        }
        self.making.fetch_add(1, Ordering::SeqCst);
        let t = self.clone();
        tokio::task::spawn_blocking(move || {
            let made = super::spawn::hvt_spare(&t.template, COPY_WAIT);
            t.making.fetch_sub(1, Ordering::SeqCst);
            if let Ok(s) = made {
                t.spares.lock().unwrap_or_else(|e| e.into_inner()).push(s);
                t.refill();
            }
        });
    }
}

/// A template booted to its ready point (`super::spawn::spawn_template`)
/// and its process (a child of the gateway).
pub struct BuiltTemplate {
    /// Its control channel.
    pub template: TemplateHandle,
    /// Its process, waited on like an instance's.
    pub child: Proc,
    /// What it was built from: a template answers only for this image
    /// and these settings.
    pub built_for: Function,
}

/// Boots `f`'s template from `prepared` and waits for its ready point
/// (up to the function's timeout): what a deploy does for an spt function
/// with `template` on, and a cold start when the template died. The
/// error says why, with the template's last line on stderr.
pub fn build_template(f: &Function, prepared: &shoal_spt::Prepared) -> Result<BuiltTemplate> {
    // The template's own port: nobody ever connects to it.
    let sock = TcpListener::bind("127.0.0.1:0").context("cannot open a listening socket for the template")?;
    let env = [std::ffi::OsString::from(format!("PORT={}", sock.local_addr()?.port()))];
    let (template, child) = super::spawn::spawn_template(prepared, &sock.into(), &env, Duration::from_millis(f.timeout_ms), f.ready.point())
        .map_err(|e| anyhow::anyhow!("the template of {} ({}) failed: {e}", f.name, f.ready.describe()))?;
    // The template, its copies (at most max_instances at once) and as many
    // again that have ended and are not yet reaped: more processes than
    // that in its pids cgroup are none the gateway asked for.
    template.allow_copies(1 + 2 * u64::from(f.max_instances)).with_context(|| format!("the template of {}", f.name))?;
    Ok(BuiltTemplate { template: TemplateHandle::Spt(template), child, built_for: f.clone() })
}

/// Boots `f`'s hvt template (the tender with the function's options, made
/// a template: `shoal_hvt::template`) and waits for its ready point (up to
/// the function's timeout); then starts making empty VMs. The error says
/// why, with the template's last line on stderr.
pub fn build_hvt_template(l: &Launcher, f: &Function) -> Result<BuiltTemplate> {
    let sock = TcpListener::bind("127.0.0.1:0").context("cannot open a listening socket for the template")?;
    let mut cmd = hvt_spec(l, f, &sock)?;
    cmd.listen = Some(sock.as_raw_fd());
    cmd.listen_at = LISTEN_FD;
    let (template, child) = super::spawn::spawn_hvt_template(cmd, Duration::from_millis(f.timeout_ms), f.ready.point())
        .map_err(|e| anyhow::anyhow!("the template of {} ({}) failed: {e}", f.name, f.ready.describe()))?;
    drop(sock);
    let t = Arc::new(HvtTemplate { template, spares: std::sync::Mutex::new(Vec::new()), making: std::sync::atomic::AtomicUsize::new(0) });
    t.refill();
    Ok(BuiltTemplate { template: TemplateHandle::Hvt(t), child, built_for: f.clone() })
}

/// The tender command line that runs `f` on hvt with the listening socket
/// `sock` (handed over at [`LISTEN_FD`] by the caller).
fn hvt_spec(l: &Launcher, f: &Function, sock: &TcpListener) -> Result<Spec> {
    let mut cmd = Spec::new(&l.tender)?;
    if let Some(dir) = std::env::var_os("SHOAL_POOL_DIR") {
        cmd.env("SHOAL_POOL_DIR", dir)?;
    }
    cmd.arg("--listen-fd")?.arg(LISTEN_FD.to_string())?.arg("-e")?.arg(format!("PORT={}", sock.local_addr()?.port()))?;
    for a in tender_options(f).to_args() {
        cmd.arg(a)?;
    }
    cmd.arg(&f.image)?;
    let args = guest_args(f);
    if !args.is_empty() {
        cmd.arg("--")?;
        for a in args {
            cmd.arg(a)?;
        }
    }
    Ok(cmd)
}

/// How long the gateway waits for a template to answer a copy request:
/// a fork of a small process takes well under a millisecond; this bounds
/// a template that stopped answering.
const COPY_WAIT: Duration = Duration::from_secs(2);

/// Starts an instance of `f` as a copy of `template`, which must have
/// been built for `f` exactly (same image and settings): a template built
/// from one image is refused for another.
pub fn start_copy(template: &TemplateHandle, built_for: &Function, f: &Function) -> Result<Started> {
    if built_for != f {
        bail!("the template of {} was built for another image or other settings; it is rebuilt", f.name);
    }
    let sock = TcpListener::bind("127.0.0.1:0").context("cannot open a listening socket for the instance")?;
    let addr = sock.local_addr()?;
    let conn = first_connection(&sock);
    let t = Instant::now();
    let child = match template {
        TemplateHandle::Spt(template) => super::spawn::copy_spt(template, sock.into(), COPY_WAIT),
        TemplateHandle::Hvt(h) => {
            let spare = h.spares.lock().unwrap_or_else(|e| e.into_inner()).pop();
            // None made ahead (a burst took them): one now, on this request's path.
            let spare = match spare {
                Some(s) => Ok(s),
                None => super::spawn::hvt_spare(&h.template, COPY_WAIT),
            };
            let r = spare.and_then(|s| super::spawn::start_hvt_copy(s, sock.into()));
            h.refill();
            r
        }
    }
    .with_context(|| format!("cannot copy the template of {}", f.name))?;
    Ok(Started { child, addr, container: None, listening: true, spawn_time: t.elapsed(), netns: None, uid: None, conn })
}

/// Checks an hvt function as the hvt tender checks it before it creates
/// a VM ([`shoal_hvt::check`]), from the same options an instance is
/// given: what it would refuse is refused at deploy.
pub fn check_hvt(f: &Function) -> Result<()> {
    let parsed = run_args(f)?;
    shoal_hvt::check(&parsed.config()).map_err(|e| anyhow::anyhow!("{}: {e}", f.image.display()))
}

/// Starts instance `id` of `f`; an spt function starts from `prepared`
/// (see [`prepare`]), the instance program spawned directly.
pub fn start(l: &Launcher, f: &Function, prepared: Option<&shoal_spt::Prepared>, id: u64) -> Result<Started> {
    let mut cmd;
    let mut container = None;
    let mut netns = None;
    let listener;
    let addr;
    match f.backend {
        Backend::Spt | Backend::Hvt | Backend::Process => {
            let sock = TcpListener::bind("127.0.0.1:0").context("cannot open a listening socket for the instance")?;
            addr = sock.local_addr()?;
            if let (Backend::Spt, Some(p)) = (f.backend, prepared) {
                let t = Instant::now();
                let env = [std::ffi::OsString::from(format!("PORT={}", addr.port()))];
                let uid = l.uid_range.map(shoal_loader::uids::claim).transpose()?;
                let conn = first_connection(&sock);
                let child = super::spawn::spawn_spt(p, &sock.into(), &env, uid.as_ref().map(shoal_loader::uids::UidClaim::uid))
                    .with_context(|| format!("cannot start an instance of {}", f.name))?;
                // The gateway's copy of the socket was closed by the call:
                // once the instance exits, a waiting connection is refused.
                return Ok(Started { child, addr, container: None, listening: true, spawn_time: t.elapsed(), netns: None, uid, conn });
            }
            if f.backend == Backend::Process {
                cmd = Spec::new(&f.image)?;
                if let (Some(rt), Some(dir)) = (f.runtime, &f.runtime_dir) {
                    cmd.arg(bootstrap_path(rt, dir))?;
                }
                cmd.env("LISTEN_FD", LISTEN_FD.to_string())?.env("PORT", addr.port().to_string())?;
                if let Some(fs) = &f.fs {
                    cmd.env("FN_ROOT", fs)?;
                }
                for (k, v) in &f.env {
                    cmd.env(k, v)?;
                }
                // The counterpart of a guest's memory size.
                cmd.address_space = Some(address_space(f));
            } else if f.backend == Backend::Hvt {
                cmd = hvt_spec(l, f, &sock)?;
            } else {
                cmd = Spec::new(&l.tender)?;
                // The pool the gateway added the image to at deploy.
                if let Some(dir) = std::env::var_os("SHOAL_POOL_DIR") {
                    cmd.env("SHOAL_POOL_DIR", dir)?;
                }
                cmd.arg("--listen-fd")?.arg(LISTEN_FD.to_string())?.arg("-e")?.arg(format!("PORT={}", addr.port()))?;
                for a in tender_options(f).to_args() {
                    cmd.arg(a)?;
                }
                // shoal-tender claims and holds the uid itself.
                if let (Backend::Spt, Some(r)) = (f.backend, l.uid_range) {
                    cmd.arg("--uid-range")?.arg(r.spec())?;
                }
                cmd.arg(&f.image)?;
                let args = guest_args(f);
                if !args.is_empty() {
                    cmd.arg("--")?;
                    for a in args {
                        cmd.arg(a)?;
                    }
                }
            }
            cmd.listen = Some(sock.as_raw_fd());
            cmd.listen_at = LISTEN_FD;
            listener = Some(sock);
        }
        Backend::Runc | Backend::Runsc => {
            let rt = runtime(f.backend)?;
            // The namespace is the instance's alone: any port is free in it.
            let ns = NetNs::new().context("cannot make a network namespace for the instance")?;
            addr = SocketAddr::from(([127, 0, 0, 1], container_port(id)));
            let bundle = l.scratch.join(format!("{}-{id}", f.name));
            make_bundle(&rt, &bundle, f, addr.port(), &ns.path())?;
            netns = Some(Arc::new(ns));
            let cid = format!("{CONTAINER_PREFIX}{}-{}-{id}", std::process::id(), f.name);
            cmd = Spec::new(&rt)?;
            // The gateway's environment, but not its own allocator
            // settings (see serve::MALLOC_TUNABLES): they are not the runtime's.
            for (k, v) in std::env::vars_os().filter(|(k, _)| k != "GLIBC_TUNABLES") {
                cmd.env(k, v)?;
            }
            if f.backend == Backend::Runsc {
                // Host networking inside the instance's own namespace (see
                // serve::netns): the sandbox's sockets are that namespace's.
                cmd.arg("--network=host")?;
            }
            cmd.arg("run")?.arg("--bundle")?.arg(&bundle)?.arg(&cid)?;
            container = Some((rt, cid));
            listener = None;
        }
    }
    let t = Instant::now();
    let child = cmd.spawn().with_context(|| format!("cannot start an instance of {}", f.name))?;
    let spawn_time = t.elapsed();
    // The gateway's copy is closed now: once the instance exits, the
    // socket is gone and a waiting connection is refused, not left hanging.
    let listening = listener.is_some();
    drop(listener);
    Ok(Started { child, addr, container, listening, spawn_time, netns, uid: None, conn: None })
}

/// The port a container instance listens on, in its own namespace: any
/// would do; a different one per instance keeps `/instances` unambiguous.
fn container_port(id: u64) -> u16 {
    (20000 + id % 40000) as u16
}

/// An OCI bundle in `dir` that runs `f`'s native build in the network
/// namespace at `netns` with `PORT` (and `FN_ROOT=/fs`, the function's
/// `fs` mounted read-only).
fn make_bundle(rt: &Path, dir: &Path, f: &Function, port: u16, netns: &str) -> Result<()> {
    let mut env = vec![format!("PORT={port}")];
    if f.fs.is_some() {
        env.push("FN_ROOT=/fs".into());
    }
    env.extend(f.env.iter().map(|(k, v)| format!("{k}={v}")));
    std::fs::create_dir_all(dir.join("rootfs/fs"))?;
    // A runtime function: the host's interpreter from the host's /usr,
    // /lib and /lib64 (bind-mounted read-only), the bootstrap and handler
    // at RUNTIME_GUEST_DIR; an image: the native build copied in as /fn.
    let (args, files) = match (f.runtime, &f.runtime_dir) {
        (Some(r), Some(_)) => {
            for d in SYSTEM_DIRS.iter().chain([&RUNTIME_GUEST_DIR]) {
                std::fs::create_dir_all(dir.join("rootfs").join(d.trim_start_matches('/')))?;
            }
            let boot = bootstrap_path(r, Path::new(RUNTIME_GUEST_DIR)).display().to_string();
            (vec![r.interpreter().display().to_string(), boot], vec![])
        }
        _ => (vec!["/fn".to_string()], vec![(f.image.as_path(), "fn")]),
    };
    let process = Process { args, env, files, readonly_root: true, hostname: &f.name, network: Network::Join(netns) };
    bundle::make_bundle(rt, dir, &process, |c| {
        c["linux"]["resources"]["memory"] = json!({ "limit": f.memory_bytes() });
        if let Some(mounts) = c["mounts"].as_array_mut() {
            if let Some(fs) = &f.fs {
                mounts.push(json!({"destination": "/fs", "type": "bind", "source": fs, "options": ["rbind", "ro"]}));
            }
            if let Some(rd) = &f.runtime_dir {
                for d in SYSTEM_DIRS {
                    mounts.push(json!({"destination": d, "type": "bind", "source": d, "options": ["rbind", "ro"]}));
                }
                mounts.push(json!({"destination": RUNTIME_GUEST_DIR, "type": "bind", "source": rd, "options": ["rbind", "ro"]}));
            }
        }
    })?;
    Ok(())
}

/// One connection to `addr`, made from inside `netns` if given.
async fn connect_once(addr: SocketAddr, netns: Option<&NetNs>) -> std::io::Result<tokio::net::TcpStream> {
    match netns {
        None => tokio::net::TcpStream::connect(addr).await,
        Some(ns) => {
            let fd = ns.tcp_socket()?;
            tokio::net::TcpSocket::from_std_stream(std::net::TcpStream::from(fd)).connect(addr).await
        }
    }
}

/// Connects to an instance (from inside its network namespace if it has
/// one); for one without a handed-over socket, retries until it listens,
/// exits (`exited`: a container whose runtime failed must not be waited
/// for until the request's timeout) or `deadline` passes.
pub async fn connect(
    addr: SocketAddr,
    netns: Option<&NetNs>,
    listening: bool,
    exited: &AtomicBool,
    deadline: Instant,
) -> std::io::Result<tokio::net::TcpStream> {
    loop {
        match connect_once(addr, netns).await {
            // TCP_NODELAY and TCP_QUICKACK: super::upstream::Upstream.
            Ok(s) => return Ok(s),
            Err(e) if !listening && e.kind() == std::io::ErrorKind::ConnectionRefused && exited.load(Ordering::SeqCst) => {
                return Err(std::io::Error::new(e.kind(), "the instance exited before it listened"));
            }
            Err(e) if !listening && e.kind() == std::io::ErrorKind::ConnectionRefused && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Sends SIGKILL to what runs in a container (`RUNTIME kill ID KILL`).
///
/// This comes before [`remove_container`] when the gateway stops a
/// container: `runsc delete --force` of a running container waits for it to
/// stop and gives up after 5 s ("destroying container: stopping container:
/// context deadline exceeded", runsc here, measured 5.1–5.2 s each time),
/// while `runsc kill ID KILL` ends it and its `runsc run` in tens of
/// milliseconds, after which `delete --force` only removes the state.
pub async fn kill_container(rt: &Path, id: &str) {
    let _ = Command::new(rt).args(["kill", id, "KILL"]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status().await;
}

/// Removes a container (killing what runs in it).
pub async fn remove_container(rt: &Path, id: &str) {
    let _ = Command::new(rt).args(["delete", "--force", id]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status().await;
}

/// Whether the gateway that made container `id` (`shoal-fn-PID-…`) is
/// still running: its containers are its own, not stale. (Every gateway
/// used to remove every `shoal-fn-` container at its start, so a test's
/// gateway stopped a running bench's containers.) A pid reused by another
/// process keeps a stale container until the next start after it.
fn owner_alive(id: &str) -> bool {
    let Some(pid) = id.strip_prefix(CONTAINER_PREFIX).and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    pid != std::process::id() && Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes the containers a gateway that crashed left behind (their ids
/// start with [`CONTAINER_PREFIX`] and name a gateway no longer running). `--quiet`: runsc has no `-q`.
pub async fn remove_stale_containers() {
    for backend in [Backend::Runc, Backend::Runsc] {
        let Ok(rt) = runtime(backend) else { continue };
        let Ok(out) = Command::new(&rt).args(["list", "--quiet"]).stdin(Stdio::null()).stderr(Stdio::null()).output().await else { continue };
        for id in String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with(CONTAINER_PREFIX)) {
            if owner_alive(id) {
                continue;
            }
            remove_container(&rt, id).await;
        }
    }
}
