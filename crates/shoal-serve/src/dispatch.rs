//! The dispatcher: for each function, its running instances, which of
//! them has a free request slot, the bounded queue in front of them, and
//! the proxying of one invocation to an instance.
//!
//! Admission is a semaphore of `concurrency × max_instances` permits per
//! function: holding one guarantees (by counting) that some instance has
//! a free slot or another instance may be started. A request that finds
//! no permit waits in the queue if the queue has room (429 otherwise) and
//! gives up with 503 after the function's timeout. Slots, instances and
//! the keep-warm reaper share one mutex per function, so an instance is
//! never stopped for idleness while a request is being given to it.

use super::error::ApiError;
use super::instance::{self, Launcher};
use super::metrics::{Gauges, Metrics};
use super::spec::{Backend, Function};
use super::upstream::Upstream;
use axum::body::Body;
use axum::http::{header, HeaderName, HeaderValue, Request, Response};
use bytes::Bytes;
use hyper::client::conn::http1::SendRequest;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{broadcast, Notify, Semaphore};

/// Lines of instance output kept per function for `GET …/logs`.
const LOG_LINES: usize = 2000;

/// Bytes of instance output kept per function: the oldest lines go first.
/// Output is the function's to choose, so the gateway's memory must not
/// follow it (an spt function writing 768 MiB without a newline took the
/// gateway to 795 MB).
const LOG_BYTES: usize = 1 << 20;

/// The longest line kept; the rest of a longer one is dropped and a marker
/// says how much.
pub const LOG_LINE_MAX: usize = 16 << 10;

/// Lines the live feed (`logs -f`) holds for a follower that is behind;
/// beyond that it misses lines ("lagged") instead of the gateway keeping them.
const FEED_LINES: usize = 256;

/// How long a killed container's `runc run`/`runsc run` may take to exit
/// before the gateway kills it (it exits within tens of ms here).
const CONTAINER_EXIT: Duration = Duration::from_secs(10);

/// How long a kept-alive connection to an instance may stay unused before
/// the gateway closes it. Under load connections are reused at once; an
/// idle one costs the instance a thread (the example functions: a 256 KiB
/// stack) and, on spt and hvt, host CPU while it waits: with one idle
/// connection open a warm no-op used 6.3 ms of CPU per second on spt and
/// 18 ms on hvt (2026-11-26), against none without (see README, bench faas).
const POOL_IDLE: Duration = Duration::from_secs(2);

/// The most of an instance's last line a 502 repeats, in bytes.
const LAST_WORDS_MAX: usize = 300;

/// How long a 502 for an instance that exited waits for its last line
/// to reach the logs.
const LAST_WORDS_WAIT: Duration = Duration::from_millis(200);

/// How long after a failed request the gateway waits to see whether the
/// instance exited (crashed) before it decides it is still serving.
const EXIT_GRACE: Duration = Duration::from_secs(1);

/// One line an instance wrote.
#[derive(Clone, Debug, Serialize)]
pub struct LogLine {
    /// Seconds since the Unix epoch, with milliseconds.
    pub time: f64,
    /// The instance's id.
    pub instance: u64,
    /// "stdout", "stderr" or "gateway" (the gateway's note about the instance).
    pub stream: &'static str,
    /// The text, without its newline.
    pub line: String,
}

/// A function's recent output and its live feed (for `logs -f`).
pub struct Logs {
    /// The kept lines and their total size in bytes.
    lines: Mutex<(VecDeque<LogLine>, usize)>,
    /// Every new line, for followers.
    pub feed: broadcast::Sender<LogLine>,
}

impl Logs {
    fn new() -> Logs {
        Logs { lines: Mutex::new((VecDeque::new(), 0)), feed: broadcast::channel(FEED_LINES).0 }
    }

    /// Adds a line.
    pub fn push(&self, instance: u64, stream: &'static str, line: String) {
        let time = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as f64 / 1000.0).unwrap_or(0.0);
        let l = LogLine { time, instance, stream, line };
        let mut guard = lock(&self.lines);
        let (q, bytes) = &mut *guard;
        *bytes += l.line.len();
        q.push_back(l.clone());
        while q.len() > LOG_LINES || (*bytes > LOG_BYTES && q.len() > 1) {
            if let Some(old) = q.pop_front() {
                *bytes -= old.line.len();
            }
        }
        drop(guard);
        let _ = self.feed.send(l);
    }

    /// The last line instance `id` itself wrote (stderr before stdout:
    /// a program says why it failed there), cut to [`LAST_WORDS_MAX`]
    /// bytes, for a 502's body.
    pub fn last_words(&self, id: u64) -> Option<String> {
        let g = lock(&self.lines);
        let last = |stream: &str| g.0.iter().rev().find(|l| l.instance == id && l.stream == stream && !l.line.trim().is_empty());
        let l = last("stderr").or_else(|| last("stdout"))?;
        let mut w = l.line.trim().to_string();
        if w.len() > LAST_WORDS_MAX {
            let mut end = LAST_WORDS_MAX;
            while !w.is_char_boundary(end) {
                end -= 1;
            }
            w.truncate(end);
            w.push('…');
        }
        Some(w)
    }

    /// The kept lines, oldest first.
    pub fn snapshot(&self) -> Vec<LogLine> {
        lock(&self.lines).0.iter().cloned().collect()
    }
}

/// With this variable set in the gateway's environment, spt instances
/// start as before functions were prepared: through `shoal-tender`, which
/// checks the image and `exec`s the instance program (two `exec`s per cold
/// start). For comparisons (`shoal bench faas`, README); off by default.
pub const SPT_VIA_TENDER_ENV: &str = "SHOAL_SERVE_SPT_VIA_TENDER";

fn spt_via_tender() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(SPT_VIA_TENDER_ENV).is_some())
}

/// Locks a mutex, going on after a panic elsewhere (the data are counters
/// and lists that stay usable).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running instance.
pub struct Instance {
    /// Gateway-wide id.
    pub id: u64,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its process id (tender, program or runtime).
    pub pid: Option<u32>,
    /// Whether the port accepted from the start (no connect retries needed).
    listening: bool,
    /// When it was started.
    pub started: Instant,
    /// Told to stop (the wait task kills it).
    kill: Notify,
    /// Kept-alive connections to it, free for the next request.
    /// Each with the time it was put back.
    idle: Mutex<Vec<(SendRequest<Body>, Instant)>>,
    /// Set once it has exited.
    pub exited: AtomicBool,
    /// How long its spawn took (for the trace).
    spawn_time: Duration,
    /// runc/runsc: its own network namespace, where `addr` is.
    netns: Option<Arc<super::netns::NetNs>>,
    /// The connection made before it ran (`instance::Started::conn`),
    /// for its first request.
    first_conn: Mutex<Option<std::net::TcpStream>>,
}

impl Instance {
    /// Asks the instance to stop; its wait task kills and reaps it.
    pub fn stop(&self) {
        self.kill.notify_one();
    }
}

/// An instance's place in its function's list.
struct Slot {
    inst: Arc<Instance>,
    inflight: u32,
    /// Requests it was given in all (`requests_per_instance`).
    taken: u64,
    answered: bool,
    last_used: Instant,
}

/// A deployed function at run time.
pub struct FnRuntime {
    /// Its settings.
    pub spec: Function,
    permits: Arc<Semaphore>,
    queued: AtomicUsize,
    slots: Mutex<Vec<Slot>>,
    /// Instances being started (outside the slots lock), and the signal
    /// that one has started or failed: a request to a function whose
    /// instances take several requests each waits for them rather than
    /// start one more.
    starting: AtomicUsize,
    started: std::sync::Condvar,
    /// Held while a template is built on a cold start (the first to find
    /// none builds it; the others wait and copy it).
    building: Mutex<()>,
    /// Its instances' output.
    pub logs: Arc<Logs>,
    /// spt: the image and settings checked and prepared once
    /// (`shoal_spt::Prepared`), dropped with the function when it is
    /// removed or replaced; `None` until the first cold start when the
    /// function was loaded from the state file.
    prepared: Mutex<Option<Arc<shoal_spt::Prepared>>>,
    /// spt with `template` on: the template cold starts copy, while it
    /// lives (`None` before the first, and after one died or was refused:
    /// the next cold start builds a new one).
    template: Mutex<Option<Arc<LiveTemplate>>>,
    /// Why the gateway's policy no longer allows the function (one loaded
    /// from the state file after a restart with other options): its
    /// invocations answer 403 with this.
    refused: std::sync::OnceLock<String>,
}

impl FnRuntime {
    /// The prepared spt function, made now if not yet (a function loaded
    /// at the gateway's start is prepared at its first cold start).
    fn prepared(&self) -> Result<Arc<shoal_spt::Prepared>, ApiError> {
        let mut p = lock(&self.prepared);
        if let Some(p) = &*p {
            return Ok(p.clone());
        }
        let made = Arc::new(instance::prepare(&self.spec).map_err(|e| ApiError::Internal(format!("{e:#}")))?);
        *p = Some(made.clone());
        Ok(made)
    }
}

/// A function's running template (`shoal_spt::Template`).
struct LiveTemplate {
    template: instance::TemplateHandle,
    /// The settings it was built for (`instance::start_copy` refuses others).
    built_for: Function,
    /// Its id in the function's logs.
    id: u64,
    /// Set once it has exited.
    exited: AtomicBool,
    /// Told to stop (its wait task kills it).
    kill: Notify,
}

impl FnRuntime {
    /// Takes a built template as the function's, with its log readers and
    /// its wait task.
    fn adopt_template(self: &Arc<Self>, mut b: instance::BuiltTemplate, id: u64) -> Arc<LiveTemplate> {
        self.logs.push(id, "gateway", format!("template ready, pid {} (cold starts are copies of it)", b.template.pid()));
        for (stream, pipe) in [("stdout", b.child.stdout.take()), ("stderr", b.child.stderr.take())] {
            if let Some(p) = pipe {
                tokio::spawn(read_lines(p, self.logs.clone(), id, stream));
            }
        }
        let live = Arc::new(LiveTemplate { template: b.template, built_for: b.built_for, id, exited: AtomicBool::new(false), kill: Notify::new() });
        tokio::spawn(watch_template(b.child, live.clone(), Arc::downgrade(self)));
        if let Some(old) = lock(&self.template).replace(live.clone()) {
            old.kill.notify_one();
        }
        live
    }

    /// Stops the template `live` if it is still the function's.
    fn drop_template(&self, live: &Arc<LiveTemplate>) {
        let mut t = lock(&self.template);
        if t.as_ref().is_some_and(|t| Arc::ptr_eq(t, live)) {
            *t = None;
        }
        live.kill.notify_one();
    }
}

/// Waits for a template to exit (or kills it when told) and forgets it.
async fn watch_template(mut child: super::spawn::Proc, live: Arc<LiveTemplate>, f: std::sync::Weak<FnRuntime>) {
    let status = tokio::select! {
        s = child.wait() => s,
        _ = live.kill.notified() => {
            let _ = child.start_kill();
            child.wait().await
        }
    };
    // Whatever the template's program forked itself (after a forged ready
    // point; shoal_spt::Template::kill_strays) goes with it; its copies
    // still serving stay.
    let f = f.upgrade();
    let keep: Vec<i32> = f.as_ref().map(|f| lock(&f.slots).iter().filter_map(|s| s.inst.pid).map(|p| p as i32).collect()).unwrap_or_default();
    let strays = live.template.kill_strays(&keep);
    live.exited.store(true, Ordering::SeqCst);
    if let Some(f) = f {
        if strays > 0 {
            f.logs.push(live.id, "gateway", format!("killed {strays} process(es) the template made that the gateway did not ask for"));
        }
        let how = match status {
            Ok(s) => format!("template exited: {s}; the next cold start builds a new one"),
            Err(e) => format!("template exited; cannot read its status: {e}"),
        };
        f.logs.push(live.id, "gateway", how);
        let mut t = lock(&f.template);
        if t.as_ref().is_some_and(|t| Arc::ptr_eq(t, &live)) {
            *t = None;
        }
    }
}

/// What `GET /templates` shows of one template.
#[derive(Serialize)]
pub struct TemplateInfo {
    id: u64,
    function: String,
    pid: u32,
}

/// What `GET /instances` shows of one instance.
#[derive(Serialize)]
pub struct InstanceInfo {
    id: u64,
    function: String,
    backend: &'static str,
    pid: Option<u32>,
    address: String,
    /// runc/runsc: the instance's own network namespace, where `address`
    /// is (`nsenter --net=PATH` reaches it while the gateway runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    netns: Option<String>,
    state: &'static str,
    inflight: u32,
    age_seconds: f64,
    idle_seconds: f64,
}

/// The gateway's run-time state.
pub struct Dispatcher {
    functions: Mutex<BTreeMap<String, Arc<FnRuntime>>>,
    /// Counters for `/metrics`.
    pub metrics: Metrics,
    launcher: Launcher,
    next_id: AtomicU64,
    stopping: AtomicBool,
}

impl Dispatcher {
    /// A dispatcher with no functions yet.
    pub fn new(launcher: Launcher) -> Dispatcher {
        Dispatcher {
            functions: Mutex::new(BTreeMap::new()),
            metrics: Metrics::default(),
            launcher,
            next_id: AtomicU64::new(1),
            stopping: AtomicBool::new(false),
        }
    }

    /// Adds or replaces a function; a replaced function's instances are
    /// stopped (its output history is kept). Returns whether it existed.
    /// `prepared`: an spt function's prepared instance (see
    /// [`instance::prepare`]), if made at deploy.
    pub fn put(&self, spec: Function, prepared: Option<shoal_spt::Prepared>, template: Option<instance::BuiltTemplate>) -> bool {
        let mut fns = lock(&self.functions);
        let old = fns.remove(&spec.name);
        let logs = old.as_ref().map(|o| o.logs.clone()).unwrap_or_else(|| Arc::new(Logs::new()));
        // What shoal-tender printed at each start (the pool cannot serve
        // the image: mode copy instead) is said once, at the deploy.
        if let Some(w) = prepared.as_ref().and_then(|p| p.warning.as_ref()) {
            logs.push(0, "gateway", format!("warning: {w}"));
        }
        let permits = spec.concurrency as usize * spec.max_instances as usize;
        let name = spec.name.clone();
        let f = Arc::new(FnRuntime {
            spec,
            permits: Arc::new(Semaphore::new(permits)),
            queued: AtomicUsize::new(0),
            slots: Mutex::new(Vec::new()),
            starting: AtomicUsize::new(0),
            started: std::sync::Condvar::new(),
            building: Mutex::new(()),
            logs,
            prepared: Mutex::new(prepared.map(Arc::new)),
            template: Mutex::new(None),
            refused: std::sync::OnceLock::new(),
        });
        if let Some(b) = template {
            f.adopt_template(b, self.next_id.fetch_add(1, Ordering::SeqCst));
        }
        fns.insert(name, f);
        drop(fns);
        if let Some(o) = &old {
            o.stop_all();
        }
        old.is_some()
    }

    /// Marks function `name` as refused by the gateway's policy: its
    /// invocations answer 403 with `why` (it stays deployed, so the
    /// operator can restart the gateway with the options it needs).
    pub fn refuse(&self, name: &str, why: String) {
        if let Some(f) = self.get(name) {
            let _ = f.refused.set(why);
        }
    }

    /// Removes a function and stops its instances.
    pub fn remove(&self, name: &str) -> Option<Function> {
        let old = lock(&self.functions).remove(name)?;
        old.stop_all();
        Some(old.spec.clone())
    }

    /// A function by name.
    pub fn get(&self, name: &str) -> Option<Arc<FnRuntime>> {
        lock(&self.functions).get(name).cloned()
    }

    /// Every function's settings, by name.
    pub fn specs(&self) -> Vec<Function> {
        lock(&self.functions).values().map(|f| f.spec.clone()).collect()
    }

    /// Every running instance.
    pub fn instances(&self) -> Vec<InstanceInfo> {
        let now = Instant::now();
        let fns: Vec<_> = lock(&self.functions).values().cloned().collect();
        let mut out = Vec::new();
        for f in fns {
            for s in lock(&f.slots).iter() {
                out.push(InstanceInfo {
                    id: s.inst.id,
                    function: f.spec.name.clone(),
                    backend: f.spec.backend.name(),
                    pid: s.inst.pid,
                    address: s.inst.addr.to_string(),
                    netns: s.inst.netns.as_ref().map(|n| n.path()),
                    state: state_of(s),
                    inflight: s.inflight,
                    age_seconds: (now - s.inst.started).as_secs_f64(),
                    idle_seconds: if s.inflight == 0 { (now - s.last_used).as_secs_f64() } else { 0.0 },
                });
            }
        }
        out
    }

    /// Whether spt functions with `template` on start from templates: not
    /// with `--uid-range`, which gives each instance a uid of its own (a
    /// copy has its template's).
    pub fn templates_allowed(&self) -> bool {
        self.launcher.uid_range.is_none()
    }

    /// Boots an hvt function's template (a deploy's).
    pub fn build_hvt_template(&self, f: &Function) -> anyhow::Result<instance::BuiltTemplate> {
        instance::build_hvt_template(&self.launcher, f)
    }

    /// Every running template (`GET /templates`).
    pub fn templates(&self) -> Vec<TemplateInfo> {
        let fns: Vec<_> = lock(&self.functions).values().cloned().collect();
        fns.iter()
            .filter_map(|f| {
                let t = lock(&f.template).clone()?;
                Some(TemplateInfo { id: t.id, function: f.spec.name.clone(), pid: t.template.pid() as u32 })
            })
            .collect()
    }

    /// The gauges for `/metrics`.
    pub fn gauges(&self) -> Vec<Gauges> {
        let fns: Vec<_> = lock(&self.functions).values().cloned().collect();
        fns.iter()
            .map(|f| {
                let slots = lock(&f.slots);
                let count = |st: &str| slots.iter().filter(|s| state_of(s) == st).count();
                Gauges {
                    function: f.spec.name.clone(),
                    starting: count("starting"),
                    warm: count("warm"),
                    busy: count("busy"),
                    queued: f.queued.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// How many instances are running, over all functions.
    pub fn instance_count(&self) -> usize {
        let fns: Vec<_> = lock(&self.functions).values().cloned().collect();
        fns.iter().map(|f| lock(&f.slots).len()).sum()
    }

    /// Stops instances idle for longer than their function's keep-warm, and
    /// closes kept-alive connections unused for [`POOL_IDLE`].
    pub fn reap_idle(&self) {
        let now = Instant::now();
        let fns: Vec<_> = lock(&self.functions).values().cloned().collect();
        for f in fns {
            let keep = Duration::from_millis(f.spec.keep_warm_ms);
            let mut slots = lock(&f.slots);
            for s in slots.iter() {
                lock(&s.inst.idle).retain(|(_, put)| now.duration_since(*put) < POOL_IDLE);
            }
            slots.retain(|s| {
                let idle = s.inflight == 0 && now.duration_since(s.last_used) >= keep;
                if idle {
                    f.logs.push(s.inst.id, "gateway", format!("stopping: idle for {} ms (keep-warm)", now.duration_since(s.last_used).as_millis()));
                    s.inst.stop();
                }
                !idle
            });
        }
    }

    /// Stops every instance (the gateway is shutting down) and waits, up
    /// to `grace`, until they have all exited.
    pub async fn shutdown(&self, grace: Duration) {
        self.stopping.store(true, Ordering::SeqCst);
        let fns: Vec<_> = lock(&self.functions).values().cloned().collect();
        let mut all = Vec::new();
        let mut templates = Vec::new();
        for f in &fns {
            all.extend(lock(&f.slots).iter().map(|s| s.inst.clone()));
            templates.extend(lock(&f.template).clone());
            f.stop_all();
        }
        let t0 = Instant::now();
        // Templates too: their wait tasks kill what they made unasked.
        while (all.iter().any(|i| !i.exited.load(Ordering::SeqCst)) || templates.iter().any(|t| !t.exited.load(Ordering::SeqCst))) && t0.elapsed() < grace {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Proxies one invocation of `name` (`rest`: the path after
    /// `/fn/NAME`, with its query) to an instance.
    pub async fn invoke(self: &Arc<Self>, name: &str, rest: String, req: Request<Body>) -> Result<Response<Body>, ApiError> {
        let t0 = Instant::now();
        let f = self.get(name).ok_or_else(|| ApiError::NotFound(format!("no function named {name:?} is deployed")))?;
        let result = self.invoke_on(&f, rest, req, t0).await;
        let status = match &result {
            Ok(r) => r.status().as_u16(),
            Err(e) => e.status().as_u16(),
        };
        self.metrics.invocation(name, status, t0.elapsed().as_secs_f64());
        result
    }

    async fn invoke_on(self: &Arc<Self>, f: &Arc<FnRuntime>, rest: String, req: Request<Body>, t0: Instant) -> Result<Response<Body>, ApiError> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err(ApiError::Unavailable("the gateway is shutting down".into()));
        }
        if let Some(why) = f.refused.get() {
            return Err(ApiError::Forbidden(why.clone()));
        }
        let timeout = Duration::from_millis(f.spec.timeout_ms);
        let deadline = t0 + timeout;
        // Admission: a permit now, or a place in the queue.
        let permit = match f.permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if f.queued.fetch_add(1, Ordering::SeqCst) >= f.spec.queue as usize {
                    f.queued.fetch_sub(1, Ordering::SeqCst);
                    return Err(ApiError::QueueFull(f.spec.name.clone()));
                }
                let got = tokio::time::timeout(timeout, f.permits.clone().acquire_owned()).await;
                f.queued.fetch_sub(1, Ordering::SeqCst);
                match got {
                    Ok(Ok(p)) => p,
                    Ok(Err(_)) => return Err(ApiError::Unavailable(format!("function {} was removed or replaced", f.spec.name))),
                    Err(_) => {
                        return Err(ApiError::Unavailable(format!("no instance of {} became free within its timeout of {} ms", f.spec.name, f.spec.timeout_ms)))
                    }
                }
            }
        };
        let t_slot = Instant::now();
        let (inst, cold) = self.take_slot(f)?;
        let t_forward = Instant::now();
        let guard = SlotGuard { f: f.clone(), inst: inst.clone(), permit: Some(permit), sender: None, done: false };
        let answer = tokio::time::timeout_at(deadline.into(), self.forward(&inst, rest, req, deadline)).await;
        match answer {
            Ok(Ok((resp, sender, driver))) => {
                if cold {
                    self.metrics.cold_start_answered(&f.spec.name, inst.started.elapsed().as_secs_f64());
                    if *TRACE {
                        let us = |a: Instant, b: Instant| b.duration_since(a).as_micros();
                        let now = Instant::now();
                        f.logs.push(
                            inst.id,
                            "gateway",
                            format!(
                                "trace: cold start: admission {} µs, start (socket + spawn) {} µs (spawn {} µs), connect + request + answer head {} µs, in all {} µs",
                                us(t0, t_slot),
                                us(t_slot, t_forward),
                                inst.spawn_time.as_micros(),
                                us(t_forward, now),
                                us(t0, now)
                            ),
                        );
                    }
                }
                f.mark_answered(inst.id);
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                parts.headers.insert(HeaderName::from_static("x-shoal-instance"), HeaderValue::from(inst.id));
                parts.headers.insert(HeaderName::from_static("x-shoal-cold-start"), HeaderValue::from_static(if cold { "true" } else { "false" }));
                let mut guard = guard;
                guard.sender = Some(sender);
                // An empty body is never polled (hyper sees its end at
                // once): the connection is free for the next request now.
                guard.done = hyper::body::Body::is_end_stream(&body);
                let mut driver = driver;
                if guard.done {
                    if let Some(d) = driver.take() {
                        tokio::spawn(d);
                    }
                }
                let body = GuardedBody {
                    inner: body,
                    guard: (!guard.done).then_some(guard),
                    driver,
                    deadline: Box::pin(tokio::time::sleep_until(deadline.into())),
                    timeout_ms: f.spec.timeout_ms,
                };
                Ok(Response::from_parts(parts, Body::new(body)))
            }
            Ok(Err(e)) => {
                // A crashed instance exits: its watch task removes it, so
                // the next request starts a new one. One still running
                // after EXIT_GRACE closed this connection without an
                // answer but serves others (an overloaded instance: the
                // example functions close a connection they cannot start
                // a thread for): it is kept, since stopping it would fail
                // every request it is serving (at 1,024 clients it did).
                // The slot and the permit go back first: the wait must not
                // hold up the requests behind this one.
                drop(guard);
                let t = Instant::now();
                while !inst.exited.load(Ordering::SeqCst) && t.elapsed() < EXIT_GRACE {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                if !inst.exited.load(Ordering::SeqCst) {
                    f.logs.push(inst.id, "gateway", format!("a request failed ({e}); the instance is still running and is kept"));
                }
                let words = match f.logs.last_words(inst.id) {
                    Some(w) => format!("; its last words: {w}"),
                    None if inst.exited.load(Ordering::SeqCst) => {
                        // Its pipes are read by other tasks: the line
                        // written just before the exit may still be on
                        // its way.
                        let t = Instant::now();
                        let mut w = None;
                        while w.is_none() && t.elapsed() < LAST_WORDS_WAIT {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            w = f.logs.last_words(inst.id);
                        }
                        w.map(|w| format!("; its last words: {w}")).unwrap_or_default()
                    }
                    None => String::new(),
                };
                Err(ApiError::BadGateway(format!("the instance of {} failed to answer: {e}{words}", f.spec.name)))
            }
            Err(_) => {
                f.logs.push(inst.id, "gateway", format!("stopping: no answer within the timeout of {} ms", f.spec.timeout_ms));
                f.drop_instance(inst.id);
                Err(ApiError::Timeout(format!(
                    "function {} did not answer within its timeout of {} ms; its instance was stopped",
                    f.spec.name, f.spec.timeout_ms
                )))
            }
        }
    }

    /// A free slot on a running instance (warm), or a new instance (cold).
    fn take_slot(self: &Arc<Self>, f: &Arc<FnRuntime>) -> Result<(Arc<Instance>, bool), ApiError> {
        let mut slots = lock(&f.slots);
        loop {
            // The instance that answered most recently first: it is warm.
            let best = slots
                .iter_mut()
                .filter(|s| {
                    s.inflight < f.spec.concurrency
                        && !s.inst.exited.load(Ordering::SeqCst)
                        && (f.spec.requests_per_instance == 0 || s.taken < f.spec.requests_per_instance)
                })
                .max_by_key(|s| (s.answered, s.inflight, s.last_used));
            if let Some(s) = best {
                s.inflight += 1;
                s.taken += 1;
                return Ok((s.inst.clone(), false));
            }
            // An instance that takes several requests and is starting now
            // takes this one too once it is in the list.
            if f.spec.concurrency == 1 || f.starting.load(Ordering::SeqCst) == 0 {
                break;
            }
            slots = f.started.wait(slots).unwrap_or_else(|e| e.into_inner());
        }
        // The permit guarantees room for one more instance. It is started
        // without the slots lock: cold starts of one function overlap (and
        // warm requests and releases are not held up behind them).
        f.starting.fetch_add(1, Ordering::SeqCst);
        drop(slots);
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let made = (|| {
            let prepared = if f.spec.backend == Backend::Spt && !spt_via_tender() { Some(f.prepared()?) } else { None };
            Ok::<_, ApiError>(match &prepared {
                Some(p) if f.spec.template && self.templates_allowed() => self.start_copy(f, Some(p))?,
                None if f.spec.backend == Backend::Hvt && f.spec.template => self.start_copy(f, None)?,
                _ => instance::start(&self.launcher, &f.spec, prepared.as_deref(), id).map_err(|e| ApiError::Internal(format!("{e:#}")))?,
            })
        })();
        let mut slots = lock(&f.slots);
        f.starting.fetch_sub(1, Ordering::SeqCst);
        // Only requests to such functions wait (a notify is a system call).
        if f.spec.concurrency > 1 {
            f.started.notify_all();
        }
        let mut started = made?;
        let inst = Arc::new(Instance {
            id,
            addr: started.addr,
            pid: started.child.id(),
            listening: started.listening,
            started: Instant::now(),
            kill: Notify::new(),
            idle: Mutex::new(Vec::new()),
            exited: AtomicBool::new(false),
            spawn_time: started.spawn_time,
            netns: started.netns.clone(),
            first_conn: Mutex::new(started.conn.take()),
        });
        self.metrics.cold_start(&f.spec.name);
        f.logs.push(id, "gateway", format!("started on {} ({}), pid {}", inst.addr, f.spec.backend.name(), inst.pid.unwrap_or(0)));
        // One task for the instance's output and its exit: each task
        // spawned beyond the first on a worker wakes the other (idle)
        // worker to steal it, a cross-CPU wake-up on the cold start's path.
        let (out, err) = (started.child.stdout.take(), started.child.stderr.take());
        let (logs, watched, weak) = (f.logs.clone(), inst.clone(), Arc::downgrade(f));
        tokio::spawn(async move {
            let out = async {
                if let Some(p) = out {
                    read_lines(p, logs.clone(), id, "stdout").await;
                }
            };
            let err = async {
                if let Some(p) = err {
                    read_lines(p, logs.clone(), id, "stderr").await;
                }
            };
            // The output first: a line written before the exit is in the
            // logs when the exit is noted (a 502 quotes the last one).
            tokio::join!(biased; out, err, watch(started, watched, weak));
        });
        // Removed or replaced while it started (`stop_all` has emptied the
        // list): stopped now, its wait task reaps it.
        if f.permits.is_closed() {
            inst.stop();
            return Err(ApiError::Unavailable(format!("function {} was removed or replaced", f.spec.name)));
        }
        slots.push(Slot { inst: inst.clone(), inflight: 1, taken: 1, answered: false, last_used: Instant::now() });
        Ok((inst, true))
    }

    /// A new instance of `f` as a copy of its template, built first if the
    /// function has none running (it died, or was refused). A template
    /// that cannot make the copy is stopped and built again, once.
    fn start_copy(self: &Arc<Self>, f: &Arc<FnRuntime>, prepared: Option<&shoal_spt::Prepared>) -> Result<instance::Started, ApiError> {
        let mut failure = String::new();
        for _ in 0..2 {
            let mut live = lock(&f.template).clone().filter(|t| !t.exited.load(Ordering::SeqCst));
            // One cold start builds a missing template; those behind it
            // wait for it and copy it.
            let building = if live.is_none() { Some(lock(&f.building)) } else { None };
            if building.is_some() {
                live = lock(&f.template).clone().filter(|t| !t.exited.load(Ordering::SeqCst));
            }
            let live = match live {
                Some(t) => t,
                None => {
                    let built = match prepared {
                        Some(p) => instance::build_template(&f.spec, p),
                        None => instance::build_hvt_template(&self.launcher, &f.spec),
                    }
                    .map_err(|e| ApiError::Internal(format!("{e:#}")))?;
                    f.adopt_template(built, self.next_id.fetch_add(1, Ordering::SeqCst))
                }
            };
            drop(building);
            match instance::start_copy(&live.template, &live.built_for, &f.spec) {
                Ok(s) => return Ok(s),
                Err(e) => {
                    failure = format!("{e:#}");
                    f.logs.push(live.id, "gateway", format!("template stopped: {failure}"));
                    f.drop_template(&live);
                }
            }
        }
        Err(ApiError::Internal(failure))
    }

    /// Sends the request on a kept-alive connection or a new one.
    ///
    /// A kept-alive connection the instance closed meanwhile (the close
    /// not yet seen when the connection was taken from the pool) gives the
    /// request back unsent: it then goes on a new connection, as any proxy
    /// retries a request that never reached the server, instead of being
    /// answered 502 and the instance stopped as failed.
    async fn forward(
        &self,
        inst: &Instance,
        rest: String,
        req: Request<Body>,
        deadline: Instant,
    ) -> Result<(Response<hyper::body::Incoming>, SendRequest<Body>, Option<Driver>), String> {
        let (mut parts, body) = req.into_parts();
        parts.uri = rest.parse().map_err(|e| format!("bad path {rest:?}: {e}"))?;
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.insert(header::HOST, HeaderValue::from_str(&inst.addr.to_string()).map_err(|e| e.to_string())?);
        let mut req = Request::from_parts(parts, body);
        loop {
            let Some((mut s, _)) = lock(&inst.idle).pop() else { break };
            if s.is_closed() || s.ready().await.is_err() {
                continue;
            }
            match s.try_send_request(req).await {
                Ok(resp) => return Ok((resp, s, None)),
                Err(mut e) => match e.take_message() {
                    Some(back) => req = back,
                    None => return Err(e.into_error().to_string()),
                },
            }
        }
        let first = lock(&inst.first_conn).take().and_then(|s| tokio::net::TcpStream::from_std(s).ok());
        let stream = match first {
            Some(s) => s,
            None => instance::connect(inst.addr, inst.netns.as_deref(), inst.listening, &inst.exited, deadline)
                .await
                .map_err(|e| format!("cannot connect to {}: {e}", inst.addr))?,
        };
        // Upstream: no delayed ACK may hold back a function's answer.
        let stream = Upstream::new(stream).map_err(|e| format!("cannot set up the connection to {}: {e}", inst.addr))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
        // The connection is driven by this task until the answer's head,
        // and then by the response body (`GuardedBody`) until its end: a
        // task of its own only after that, for the next request on it.
        // Spawned before the request it woke the other worker (a cold
        // start's instance task was the worker's next one), and its answer
        // woke this task again, two cross-thread wake-ups per new
        // connection (strace); spawned at the head, the other worker took
        // the client's task and wrote the answer (a futex wake-up and a
        // hand-off on every cold start's path).
        let mut conn: Driver = Box::pin(conn);
        let answer = {
            let send = sender.send_request(req);
            tokio::pin!(send);
            tokio::select! {
                biased;
                r = &mut send => Some(r),
                c = &mut conn => match c {
                    Err(e) => return Err(e.to_string()),
                    // Closed before the head: the request's own error says why.
                    Ok(()) => None,
                },
            }
        };
        let answer = match answer {
            Some(r) => r,
            None => return Err("the instance closed the connection before it answered".into()),
        };
        let resp = answer.map_err(|e| e.to_string())?;
        Ok((resp, sender, Some(conn)))
    }
}

/// "starting", "warm" or "busy".
fn state_of(s: &Slot) -> &'static str {
    if !s.answered {
        "starting"
    } else if s.inflight > 0 {
        "busy"
    } else {
        "warm"
    }
}

/// Headers that belong to one hop, not to the request or response.
fn strip_hop_by_hop(h: &mut axum::http::HeaderMap) {
    for name in ["connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"] {
        h.remove(name);
    }
}

impl FnRuntime {
    fn mark_answered(&self, id: u64) {
        if let Some(s) = lock(&self.slots).iter_mut().find(|s| s.inst.id == id) {
            s.answered = true;
        }
    }

    /// Takes instance `id` out of the list and stops it.
    fn drop_instance(&self, id: u64) {
        let mut slots = lock(&self.slots);
        if let Some(i) = slots.iter().position(|s| s.inst.id == id) {
            slots.remove(i).inst.stop();
        }
    }

    fn stop_all(&self) {
        // Queued requests see a closed semaphore and get 503.
        self.permits.close();
        if let Some(t) = lock(&self.template).take() {
            t.kill.notify_one();
        }
        for s in lock(&self.slots).drain(..) {
            s.inst.stop();
        }
    }

    /// A request on instance `id` finished.
    fn release(&self, id: u64) {
        let mut slots = lock(&self.slots);
        if let Some(i) = slots.iter().position(|s| s.inst.id == id) {
            let s = &mut slots[i];
            s.inflight = s.inflight.saturating_sub(1);
            s.last_used = Instant::now();
            // Served all it may serve: stopped now, not at the idle timeout.
            if self.spec.requests_per_instance > 0 && s.taken >= self.spec.requests_per_instance && s.inflight == 0 {
                slots.remove(i).inst.stop();
            }
        }
    }
}

/// What drives a connection to an instance (hyper's `Connection`).
type Driver = Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>>;

/// A request's hold on an instance slot and an admission permit, given
/// back when the response body is done (or dropped).
struct SlotGuard {
    f: Arc<FnRuntime>,
    inst: Arc<Instance>,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    sender: Option<SendRequest<Body>>,
    /// The response body was read to its end: the connection can be reused.
    done: bool,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if self.done {
            if let Some(s) = self.sender.take() {
                lock(&self.inst.idle).push((s, Instant::now()));
            }
        }
        self.f.release(self.inst.id);
        self.permit.take();
    }
}

/// The instance's response body, passed through; it holds the slot until
/// it ends. The function's timeout covers the whole response, not only its
/// head: a body still unfinished at the deadline is cut off (the client
/// sees the connection end early, as behind any proxy whose read timeout
/// fires) and the instance is stopped, as for a missing head.
struct GuardedBody {
    inner: hyper::body::Incoming,
    guard: Option<SlotGuard>,
    /// A new connection's driver until the body ends (then spawned: see
    /// `Dispatcher::forward`).
    driver: Option<Driver>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout_ms: u64,
}

/// Why a response body ended early.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    /// The instance's connection failed mid-body.
    #[error("the instance's response failed: {0}")]
    Instance(#[from] hyper::Error),
    /// The deadline passed before the body ended.
    #[error("the response was not complete within the function's timeout of {0} ms")]
    Timeout(u64),
}

impl GuardedBody {
    /// The body ended: the connection is free for the next request, and
    /// driven by a task of its own from now on.
    fn finish(&mut self) {
        if let Some(mut g) = self.guard.take() {
            g.done = true;
        }
        if let Some(d) = self.driver.take() {
            tokio::spawn(d);
        }
    }
}

impl hyper::body::Body for GuardedBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<hyper::body::Frame<Bytes>, BodyError>>> {
        // The connection's reads bring the body: driven here, in the
        // client's task, until the body ends.
        if let Some(d) = self.driver.as_mut() {
            if d.as_mut().poll(cx).is_ready() {
                self.driver = None;
            }
        }
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        match r {
            Poll::Ready(None) => {
                self.finish();
                Poll::Ready(None)
            }
            Poll::Ready(Some(frame)) => {
                // hyper's server stops polling a body as soon as
                // `is_end_stream` says it has ended (a Content-Length body
                // after its last bytes), so the end is seen here, not at a
                // `Ready(None)` that never comes: without this the
                // connection to the instance was never reused, and every
                // request opened a new one (on hvt each costs the guest
                // an accept and a thread, and the gateway stayed at a
                // tenth of hey's rate straight to the instance).
                if frame.is_ok() && self.inner.is_end_stream() {
                    self.finish();
                }
                Poll::Ready(Some(frame.map_err(BodyError::Instance)))
            }
            Poll::Pending => {
                if self.deadline.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                if let Some(g) = self.guard.take() {
                    g.f.logs.push(g.inst.id, "gateway", format!("stopping: the response was not complete within the timeout of {} ms", self.timeout_ms));
                    g.f.drop_instance(g.inst.id);
                }
                Poll::Ready(Some(Err(BodyError::Timeout(self.timeout_ms))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// With `SHOAL_SERVE_TRACE` set in the gateway's environment, each cold
/// start's answer adds a `trace:` line to the instance's logs: how long
/// admission, the start (socket and spawn) and the first exchange took
/// (monotonic clock). Off by default: reading the clock is cheap, the log
/// line is not.
pub static TRACE: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| std::env::var_os("SHOAL_SERVE_TRACE").is_some());

/// Copies an instance's output into its function's logs, line by line,
/// each line cut at [`LOG_LINE_MAX`] bytes: the gateway holds at most one
/// such line per stream while it reads, however long the instance's line.
async fn read_lines(p: tokio::net::unix::pipe::Receiver, logs: Arc<Logs>, id: u64, stream: &'static str) {
    use tokio::io::AsyncBufReadExt;
    let mut r = tokio::io::BufReader::with_capacity(LOG_LINE_MAX.min(64 << 10), p);
    let mut line = Vec::new();
    let mut dropped = 0u64;
    let push = |line: &mut Vec<u8>, dropped: &mut u64| {
        let mut text = String::from_utf8_lossy(line).trim_end_matches(['\n', '\r']).to_string();
        if *dropped > 0 {
            text.push_str(&format!(" [… {} more bytes of this line dropped: a line is kept up to {} bytes]", *dropped, LOG_LINE_MAX));
        }
        logs.push(id, stream, text);
        line.clear();
        *dropped = 0;
    };
    loop {
        let chunk = match r.fill_buf().await {
            Ok([]) | Err(_) => {
                if !line.is_empty() || dropped > 0 {
                    push(&mut line, &mut dropped);
                }
                return;
            }
            Ok(c) => c,
        };
        let (part, end) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..=i], true),
            None => (chunk, false),
        };
        let n = part.len();
        let room = LOG_LINE_MAX.saturating_sub(line.len());
        let keep = n.min(room);
        line.extend_from_slice(&part[..keep]);
        dropped += (n - keep) as u64;
        r.consume(n);
        if end {
            push(&mut line, &mut dropped);
        }
    }
}

/// Waits for an instance to exit (or to be told to stop: then kills it),
/// reaps it, removes it from its function and notes how it ended.
async fn watch(mut started: instance::Started, inst: Arc<Instance>, f: std::sync::Weak<FnRuntime>) {
    let status = tokio::select! {
        s = started.child.wait() => s,
        _ = inst.kill.notified() => {
            // A container is killed through its runtime and given a
            // moment to exit with its `run` process (see
            // instance::kill_container: `delete --force` of a running
            // runsc container takes 5 s); the runtime process itself is
            // killed only if that does not do it.
            if let Some((rt, id)) = &started.container {
                instance::kill_container(rt, id).await;
                match tokio::time::timeout(CONTAINER_EXIT, started.child.wait()).await {
                    Ok(s) => s,
                    Err(_) => {
                        let _ = started.child.start_kill();
                        started.child.wait().await
                    }
                }
            } else {
                let _ = started.child.start_kill();
                started.child.wait().await
            }
        }
    };
    if let Some((rt, id)) = &started.container {
        instance::remove_container(rt, id).await;
    }
    inst.exited.store(true, Ordering::SeqCst);
    lock(&inst.idle).clear();
    if let Some(f) = f.upgrade() {
        f.drop_instance(inst.id);
        let how = match status {
            Ok(s) => format!("exited: {s}"),
            Err(e) => format!("exited; cannot read its status: {e}"),
        };
        f.logs.push(inst.id, "gateway", how);
    }
}
