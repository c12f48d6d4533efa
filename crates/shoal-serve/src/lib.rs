//! `shoal serve`: the FaaS gateway (in the manner of tinyFaaS, the gateway
//! of the FaaS comparison the benches reproduce), and `shoal fn`, its
//! client. One async HTTP server (tokio + hyper, routes with axum)
//! holds the management API and proxies invocations to function
//! instances, started on demand on a backend (spt, hvt, process, runc,
//! runsc) and stopped when idle.
//!
//! - [`spec`]: what a function is, how deploys are checked, the state file;
//! - [`dispatch`]: instances, slots, the queue, proxying, logs;
//! - [`images`]: uploaded images, stored by digest under `--state`;
//! - [`instance`]: starting and stopping one instance per backend;
//! - [`spawn`]: the instance's process, started without copying the gateway;
//! - [`api`]: the routes; [`metrics`]: `/metrics`; [`error`]: JSON errors;
//! - [`auth`]: the token and the operator's policy for deploys;
//! - [`netns`]: the network namespace of each runc/runsc instance;
//! - [`bundle`]: OCI bundles for runc and runsc (the benches' too);
//! - [`client`]: `shoal fn`, the management API's command-line client.

pub mod api;
pub mod auth;
pub mod bundle;
pub mod client;
pub mod dispatch;
pub mod error;
pub mod images;
pub mod instance;
pub mod metrics;
pub mod netns;
pub mod spawn;
pub mod spec;
pub mod upstream;

use anyhow::{Context, Result};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The address `shoal serve` listens on unless `--listen` says otherwise
/// (and that `shoal fn` talks to).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8640";

/// How long stopping instances may take on SIGTERM/SIGINT.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The lean `shoal-tender` command, which `cargo build` puts beside
/// `shoal`; an error saying so when it is not there.
pub fn tender_binary() -> Result<PathBuf> {
    let t = std::env::current_exe()?.with_file_name("shoal-tender");
    anyhow::ensure!(t.is_file(), "{} is missing: `cargo build --release` builds it beside shoal", t.display());
    Ok(t)
}

/// Raises the soft descriptor limit to the hard one: every client
/// connection and every instance connection is a descriptor (and the
/// benches' servers and clients, which inherit it, need more than 1024).
pub fn raise_nofile() {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit write or read only the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// glibc's allocator settings the gateway runs with: no per-thread caches
/// and one arena. A burst of thousands of connections spreads freed
/// buffers over the worker threads' caches and arenas, where they pin the
/// pages `malloc_trim` would give back: measured (hey, 10,000 requests at
/// 1/64/512/4,096 clients, then idle), RSS went 6.7 -> 8.6 MiB with the
/// defaults and 6.7 -> 6.8 MiB with these, at the same throughput.
const MALLOC_TUNABLES: &str = "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=1";

/// glibc reads its tunables only from the environment at start-up, so the
/// gateway re-executes itself once with them set (before any thread or
/// socket exists). If that fails it goes on with the defaults.
fn reexec_with_malloc_tunables() {
    let current = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if current.contains(MALLOC_TUNABLES) {
        return;
    }
    let tunables = if current.is_empty() { MALLOC_TUNABLES.to_string() } else { format!("{current}:{MALLOC_TUNABLES}") };
    let mut args = std::env::args_os();
    let Some(argv0) = args.next() else { return };
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new("/proc/self/exe").arg0(argv0).args(args).env("GLIBC_TUNABLES", tunables).exec();
    eprintln!("shoal: note: cannot re-execute with allocator settings ({err}); the gateway keeps glibc's defaults");
}

/// How `shoal serve` was started.
pub struct Options {
    /// `--listen ADDR:PORT`.
    pub listen: String,
    /// `--state DIR`.
    pub state: Option<PathBuf>,
    /// `--insecure-listen`: a listen address other than loopback is allowed.
    pub insecure_listen: bool,
    /// `--allow-process`: the `process` backend may be deployed.
    pub allow_process: bool,
    /// `--allow-path DIR`: where deploys' `image` and `fs` may lie.
    pub allow_paths: Vec<PathBuf>,
    /// `--auth-invoke`: invocations need the token too.
    pub auth_invoke: bool,
    /// `--upload-quota SIZE`: all uploads together, in bytes.
    pub upload_quota: u64,
    /// `--uid-range START:COUNT`: each spt instance runs as a uid of its
    /// own from the range (`shoal run --uid-range`).
    pub uid_range: Option<shoal_loader::uids::UidRange>,
}

/// `--listen ADDR:PORT` as an address; `localhost:PORT` is
/// 127.0.0.1:PORT (so it counts as loopback), no other name is looked up.
fn listen_addr(listen: &str) -> Result<SocketAddr> {
    let bad = || anyhow::anyhow!("--listen {listen}: expected ADDR:PORT or localhost:PORT, e.g. {DEFAULT_LISTEN}");
    if let Ok(a) = listen.parse() {
        return Ok(a);
    }
    let (host, port) = listen.rsplit_once(':').ok_or_else(bad)?;
    if !host.eq_ignore_ascii_case("localhost") {
        return Err(bad());
    }
    Ok(SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port.parse::<u16>().map_err(|_| bad())?)))
}

/// Runs the gateway until SIGTERM or SIGINT.
pub fn serve(o: Options) -> Result<()> {
    reexec_with_malloc_tunables();
    let listen = o.listen.as_str();
    let addr = listen_addr(listen)?;
    if !addr.ip().is_loopback() {
        anyhow::ensure!(
            o.insecure_listen,
            "--listen {listen}: the gateway speaks plain HTTP; listening beyond loopback sends the token and every request unencrypted \
             (give --insecure-listen to do it anyway, e.g. behind a TLS proxy on a private network)"
        );
        eprintln!("shoal serve: warning: listening on {addr} over plain HTTP: the token and requests cross the network unencrypted");
    }
    let state = match o.state {
        Some(s) => s,
        None => spec::default_state_dir()?,
    };
    // SAFETY: geteuid has no arguments and cannot fail.
    if o.uid_range.is_some() && unsafe { libc::geteuid() } != 0 {
        anyhow::bail!("{}", shoal_loader::uids::UidError::NotRoot);
    }
    let store = spec::Store::open(&state)?;
    let functions = store.load()?;
    let token = auth::load_or_create(&state)?;
    let real_state = state.canonicalize().with_context(|| format!("cannot resolve the state directory {}", state.display()))?;
    let policy = auth::Policy::new(o.allow_process, &o.allow_paths, real_state.join("images"))?;
    netns::init().context("cannot open the gateway's network namespace")?;
    let tender = tender_binary()?;
    raise_nofile();
    let scratch = tempfile::Builder::new().prefix("shoal-serve-").tempdir().context("cannot make a scratch directory for bundles")?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    let result = rt.block_on(async move {
        instance::remove_stale_containers().await;
        let dispatcher = Arc::new(dispatch::Dispatcher::new(instance::Launcher { tender, scratch: scratch.path().to_path_buf(), uid_range: o.uid_range }));
        let images = images::ImageStore::new(&state, scratch.path(), o.upload_quota);
        let strays = shoal_spt::end_orphaned_templates();
        if strays > 0 {
            eprintln!("shoal serve: killed {strays} process(es) that templates of a killed gateway made");
        }
        let gone = images.collect_garbage(&functions, Duration::ZERO);
        if gone > 0 {
            eprintln!("shoal serve: deleted {gone} uploaded image(s) no function uses");
        }
        for f in functions {
            // A deployment the options no longer allow stays, refused:
            // the operator restarts with the options it needs.
            if let Err(e) = f.check_policy(&policy) {
                eprintln!("shoal serve: warning: function {}: {e}", f.name);
                let name = f.name.clone();
                dispatcher.put(f, None, None);
                dispatcher.refuse(&name, e.to_string());
                continue;
            }
            // spt functions are prepared now, as at their deploy (off the
            // async threads: it reads the image and packs the fs); one that
            // cannot be any more (its image gone) is kept and its
            // invocations say why (500).
            let prepared = if f.backend == spec::Backend::Spt {
                let g = f.clone();
                match tokio::task::spawn_blocking(move || instance::prepare(&g)).await {
                    Ok(Ok(p)) => Some(p),
                    Ok(Err(e)) => {
                        eprintln!("shoal serve: warning: function {}: {e:#}", f.name);
                        None
                    }
                    Err(e) => {
                        eprintln!("shoal serve: warning: function {}: {e}", f.name);
                        None
                    }
                }
            } else {
                None
            };
            dispatcher.put(f, prepared, None);
        }
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr()?;
        let app = Arc::new(api::App { dispatcher: dispatcher.clone(), store: Mutex::new(store), images, policy });
        let guard = Arc::new(auth::Guard { token, invocations: o.auth_invoke });
        // Keep-warm: a tick well below any sensible keep-warm time.
        let reaper = dispatcher.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            let (mut seen, mut n, mut again) = ((0, 0), 0u32, false);
            loop {
                tick.tick().await;
                reaper.reap_idle();
                // After a burst, give the freed connection buffers back to
                // the system (glibc keeps freed heap otherwise), so the
                // gateway returns to its idle size: once a second, and
                // only if there were requests in that second or instances
                // stopped or started (a stopped instance frees the buffers
                // of its kept-alive connections, often long after the
                // last request).
                // One more trim a second after the last change: the
                // clients' connections of a burst often close after its
                // last request was counted, and their buffers are freed
                // only then.
                n += 1;
                let now = (reaper.metrics.requests(), reaper.instance_count());
                if n % 10 == 0 && (now != seen || again) {
                    again = now != seen;
                    seen = now;
                    // SAFETY: malloc_trim only releases free heap memory.
                    unsafe {
                        libc::malloc_trim(0);
                    }
                }
            }
        });
        // The handlers are in place before the address is announced: a
        // SIGTERM sent as soon as the line is read (a supervisor, a test)
        // must stop the gateway cleanly, not kill it by the default action.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        println!("listening on http://{local} (state {})", state.display());
        let _ = std::io::stdout().flush();
        // No Nagle: a streamed response goes out as head and body writes,
        // and the second would wait for the client's delayed ACK.
        use axum::serve::ListenerExt;
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        // On a worker, not on this thread (`block_on`'s, which is no
        // worker): there every accepted connection cost two cross-thread
        // wake-ups (futex), this thread woken by the worker holding the
        // I/O driver and a worker woken for the connection's task.
        // Measured (a warm no-op on spt, a new client connection each, 550
        // requests, strace -c): futex 2,200 -> 23 calls, eventfd writes
        // 806 -> 79, epoll_wait 2,969 -> 1,553; p50 over a direct request
        // 0.117-0.123 -> 0.072-0.084 ms (load average 13-15).
        use std::future::IntoFuture;
        let server = tokio::spawn(axum::serve(listener, api::router(app, guard)).into_future());
        tokio::select! {
            r = server => r.context("the gateway's server stopped")?.context("the gateway's server failed")?,
            _ = term.recv() => eprintln!("shoal: SIGTERM: stopping the instances"),
            _ = int.recv() => eprintln!("shoal: SIGINT: stopping the instances"),
        }
        dispatcher.shutdown(STOP_GRACE).await;
        drop(scratch);
        Ok::<(), anyhow::Error>(())
    });
    // Connections still open (log followers, keep-alive clients) are not
    // waited for: the instances are gone, the gateway is done.
    rt.shutdown_timeout(Duration::from_millis(100));
    result
}

#[cfg(test)]
mod tests {
    #[test]
    fn localhost_is_a_loopback_listen_address() {
        assert_eq!(super::listen_addr("localhost:18642").unwrap(), "127.0.0.1:18642".parse().unwrap());
        assert!(super::listen_addr("LOCALHOST:0").unwrap().ip().is_loopback());
        assert_eq!(super::listen_addr("[::1]:1").unwrap(), "[::1]:1".parse().unwrap());
        assert_eq!(
            super::listen_addr("example.com:1").unwrap_err().to_string(),
            "--listen example.com:1: expected ADDR:PORT or localhost:PORT, e.g. 127.0.0.1:8640"
        );
        assert!(super::listen_addr("localhost:x").is_err());
    }
}
