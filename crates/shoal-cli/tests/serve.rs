//! `shoal serve` end to end: a real gateway process on 127.0.0.1, the
//! example functions of apps/functions built with `shoal cc` and natively,
//! and plain HTTP/1.1 from the test (no client library: what goes over
//! the wire is what is tested). Every wait is bounded.

mod common;

use common::*;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The longest any single wait in these tests may take.
const DEADLINE: Duration = Duration::from_secs(60);

/// The example functions, built once per test binary: `DIR/NAME` (shoal
/// image), `DIR/NAME.native`, `DIR/fs/data.bin` (50 MiB).
fn functions() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch().keep();
        let o = Command::new("bash").arg(home().join("apps/functions/build.sh")).arg(&dir).env("SHOAL", env!("CARGO_BIN_EXE_shoal")).output().unwrap();
        assert!(o.status.success(), "build.sh failed: {}", stderr(&o));
        dir
    })
}

fn image(name: &str) -> String {
    functions().join(name).display().to_string()
}

/// A `shoal serve` process.
struct Gateway {
    child: Child,
    addr: SocketAddr,
    /// Its stderr.
    log: PathBuf,
    /// Its API token (`STATE/token`).
    token: String,
}

/// The tokens of the gateways started, by address: [`http`] sends the
/// token of the gateway it talks to (`http_as` chooses).
fn tokens() -> &'static std::sync::Mutex<std::collections::HashMap<SocketAddr, String>> {
    static T: OnceLock<std::sync::Mutex<std::collections::HashMap<SocketAddr, String>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

/// The options the tests' gateways run with unless a test says otherwise:
/// the process backend on, and deploys may name paths under the temporary
/// directory (where every test's files are).
fn test_options() -> Vec<String> {
    vec!["--allow-process".into(), "--allow-path".into(), std::env::temp_dir().display().to_string()]
}

impl Gateway {
    fn start(state: &Path) -> Gateway {
        Gateway::start_with(state, &[])
    }

    /// With extra environment variables for the gateway.
    fn start_with(state: &Path, env: &[(&str, &Path)]) -> Gateway {
        Gateway::start_opts(state, env, &test_options())
    }

    /// With extra environment variables and the given options.
    fn start_opts(state: &Path, env: &[(&str, &Path)], options: &[String]) -> Gateway {
        Gateway::start_on("127.0.0.1:0", state, env, options)
    }

    /// Listening on `listen`, with extra environment variables and the given options.
    fn start_on(listen: &str, state: &Path, env: &[(&str, &Path)], options: &[String]) -> Gateway {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let log = std::env::temp_dir().join(format!("shoal-serve-test-{}-{n}.log", std::process::id()));
        let mut child = shoal()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(["serve", "--listen", listen])
            .args(options)
            .arg("--state")
            .arg(state)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let addr = line
            .strip_prefix("listening on http://")
            .and_then(|l| l.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("the gateway said {line:?}; stderr: {}", std::fs::read_to_string(&log).unwrap_or_default()));
        // Keep draining stdout so the gateway never blocks on it.
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut out, &mut std::io::sink());
        });
        let token = std::fs::read_to_string(state.join("token")).expect("the gateway wrote no token file").trim().to_string();
        tokens().lock().unwrap().insert(addr, token.clone());
        Gateway { child, addr, log, token }
    }

    fn req(&self, method: &str, path: &str, body: Option<&[u8]>) -> Resp {
        http(self.addr, method, path, body)
    }

    fn get(&self, path: &str) -> Resp {
        self.req("GET", path, None)
    }

    fn deploy(&self, name: &str, settings: &str) -> Resp {
        self.req("PUT", &format!("/functions/{name}"), Some(settings.as_bytes()))
    }

    /// Instance ids of `function` now running.
    fn instances(&self, function: &str) -> Vec<(u64, u32)> {
        let r = self.get("/instances");
        assert_eq!(r.status, 200);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        v.as_array().unwrap().iter().filter(|i| i["function"] == function).map(|i| (i["id"].as_u64().unwrap(), i["pid"].as_u64().unwrap_or(0) as u32)).collect()
    }

    /// SIGTERM, then the exit status (bounded).
    fn stop(mut self) -> Option<i32> {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                if st.code().is_none() {
                    // A death by signal: say which, with what the gateway said.
                    use std::os::unix::process::ExitStatusExt;
                    eprintln!("the gateway died of signal {:?}; stderr: {}", st.signal(), std::fs::read_to_string(&self.log).unwrap_or_default());
                }
                return st.code();
            }
            assert!(t0.elapsed() < DEADLINE, "the gateway did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failing test shows what the gateway said.
        if std::thread::panicking() {
            let _ = writeln!(std::io::stderr(), "gateway stderr: {}", std::fs::read_to_string(&self.log).unwrap_or_default());
        }
        // Printed above when it matters; hundreds pile up in /tmp otherwise.
        let _ = std::fs::remove_file(&self.log);
    }
}

/// An HTTP answer.
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).to_string()
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// One HTTP/1.1 request on its own connection (`Connection: close`),
/// with the gateway's token.
fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&[u8]>) -> Resp {
    http_typed(addr, method, path, body, "application/json")
}

/// [`http`] with the body's Content-Type.
fn http_typed(addr: SocketAddr, method: &str, path: &str, body: Option<&[u8]>, content_type: &str) -> Resp {
    let token = tokens().lock().unwrap().get(&addr).cloned();
    http_as(addr, method, path, body, Some(content_type), token.as_deref())
}

/// One request with the given Content-Type (none: no header) and token
/// (none: no `Authorization`).
fn http_as(addr: SocketAddr, method: &str, path: &str, body: Option<&[u8]>, content_type: Option<&str>, token: Option<&str>) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    let body = body.unwrap_or(b"");
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len()).unwrap();
    if let (false, Some(ct)) = (body.is_empty(), content_type) {
        write!(s, "Content-Type: {ct}\r\n").unwrap();
    }
    if let Some(t) = token {
        write!(s, "Authorization: Bearer {t}\r\n").unwrap();
    }
    write!(s, "\r\n").unwrap();
    // A refusal (401, 413, 415) may come before the body is read, and the
    // gateway then closes: the write fails, the answer is still there.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if raw.is_empty() => panic!("{method} {path}: no answer: {e}"),
            Err(_) => break,
        }
    }
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    let mut body = raw[end + 4..].to_vec();
    if headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked")) {
        body = dechunk(&body);
    }
    Resp { status, headers, body }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let i = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(String::from_utf8_lossy(&b[..i]).trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[i + 2..i + 2 + n]);
        b = &b[i + 4 + n..];
    }
}

/// Waits (bounded) until `cond` holds.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < DEADLINE, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn process_alive(pid: u32) -> bool {
    // Zombies count as gone: /proc/PID/stat's state field is Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z')).unwrap_or(false)
}

/// The backends to test the shoal side on: the tenders (hvt skipping
/// visibly without /dev/kvm) and process.
fn backends() -> Vec<&'static str> {
    let mut b = tenders();
    b.push("process");
    b
}

/// The image for a backend: the shoal image or the native build.
fn image_for(name: &str, backend: &str) -> String {
    if matches!(backend, "spt" | "hvt") {
        image(name)
    } else {
        image(&format!("{name}.native"))
    }
}

#[test]
fn deploy_then_invoke_on_every_backend_cold_then_warm() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    for b in backends() {
        let name = format!("noop-{b}");
        let r = gw.deploy(&name, &format!(r#"{{"image":"{}","backend":"{b}"}}"#, image_for("noop", b)));
        assert_eq!(r.status, 201, "{b}: {}", r.text());
        let first = gw.get(&format!("/fn/{name}/"));
        assert_eq!((first.status, first.text().as_str()), (200, "noop\n"), "{b}");
        assert_eq!(first.header("x-shoal-cold-start"), Some("true"), "{b}");
        let second = gw.get(&format!("/fn/{name}/hello?x=1"));
        assert_eq!((second.status, second.text().as_str()), (200, "noop\n"), "{b}");
        assert_eq!(second.header("x-shoal-cold-start"), Some("false"), "{b}: the second request must reuse the warm instance");
        assert_eq!(first.header("x-shoal-instance"), second.header("x-shoal-instance"), "{b}");
        assert_eq!(gw.instances(&name).len(), 1, "{b}");
        // A function with an argument, and a streamed request body echoed back.
        let fib = format!("fib-{b}");
        assert_eq!(gw.deploy(&fib, &format!(r#"{{"image":"{}","backend":"{b}"}}"#, image_for("fib", b))).status, 201);
        assert_eq!(gw.get(&format!("/fn/{fib}?n=20")).text(), "fib(20) = 6765\n", "{b}");
        let echo = format!("echo-{b}");
        assert_eq!(gw.deploy(&echo, &format!(r#"{{"image":"{}","backend":"{b}"}}"#, image_for("sleep", b))).status, 201);
        let big: Vec<u8> = (0..(1 << 20)).map(|i| (i * 7 % 251) as u8).collect();
        let r = gw.req("POST", &format!("/fn/{echo}/"), Some(&big));
        assert_eq!(r.status, 200, "{b}");
        assert!(r.body == big, "{b}: the 1 MiB body did not come back intact ({} bytes)", r.body.len());
    }
    assert_eq!(gw.stop(), Some(0));
}

#[test]
fn static_and_fileread_use_the_function_fs() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let fs = functions().join("fs");
    for b in backends() {
        let st = format!("static-{b}");
        let r = gw.deploy(&st, &format!(r#"{{"image":"{}","backend":"{b}","fs":"{}"}}"#, image_for("static", b), fs.display()));
        assert_eq!(r.status, 201, "{}", r.text());
        let r = gw.get(&format!("/fn/{st}/"));
        assert_eq!(r.status, 200, "{b}");
        assert_eq!(r.body.len(), 50 << 20, "{b}");
        assert!(r.body == std::fs::read(fs.join("data.bin")).unwrap(), "{b}: the served file differs");
        let fr = format!("fileread-{b}");
        assert_eq!(
            gw.deploy(&fr, &format!(r#"{{"image":"{}","backend":"{b}","fs":"{}","memory":"256M"}}"#, image_for("fileread", b), fs.display())).status,
            201
        );
        let r = gw.get(&format!("/fn/{fr}/"));
        assert!(r.text().starts_with("read 52428800 bytes"), "{b}: {}", r.text());
        let al = format!("alloc-{b}");
        assert_eq!(gw.deploy(&al, &format!(r#"{{"image":"{}","backend":"{b}"}}"#, image_for("alloc", b))).status, 201);
        assert!(gw.get(&format!("/fn/{al}/")).text().starts_with("allocated 52428800 bytes"), "{b}");
        let mm = format!("matmul-{b}");
        assert_eq!(gw.deploy(&mm, &format!(r#"{{"image":"{}","backend":"{b}"}}"#, image_for("matmul", b))).status, 201);
        assert_eq!(gw.get(&format!("/fn/{mm}/?n=64")).text(), "matmul 64 sum 1047866.0\n", "{b}");
    }
}

#[test]
fn idle_instances_stop_after_keep_warm() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    assert_eq!(gw.deploy("noop", &format!(r#"{{"image":"{}","keep_warm_ms":300}}"#, image("noop"))).status, 201);
    let r = gw.get("/fn/noop/");
    assert_eq!(r.status, 200);
    let (id, pid) = gw.instances("noop")[0];
    wait_until("the idle instance is stopped", || gw.instances("noop").is_empty());
    wait_until("the idle instance's process is gone", || !process_alive(pid));
    let r = gw.get("/fn/noop/");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-shoal-cold-start"), Some("true"));
    assert_ne!(r.header("x-shoal-instance"), Some(id.to_string().as_str()));
}

#[test]
fn twenty_concurrent_requests_never_more_than_four_instances() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let r = gw.deploy("sleep", &format!(r#"{{"image":"{}","concurrency":1,"max_instances":4,"queue":100}}"#, image("sleep")));
    assert_eq!(r.status, 201);
    let addr = gw.addr;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d2 = done.clone();
    let gw_addr = gw.addr;
    let watcher = std::thread::spawn(move || {
        let mut most = 0;
        while !d2.load(std::sync::atomic::Ordering::SeqCst) {
            let v: serde_json::Value = serde_json::from_slice(&http(gw_addr, "GET", "/instances", None).body).unwrap();
            most = most.max(v.as_array().unwrap().len());
            std::thread::sleep(Duration::from_millis(5));
        }
        most
    });
    let clients: Vec<_> = (0..20).map(|_| std::thread::spawn(move || http(addr, "GET", "/fn/sleep/?ms=150", None))).collect();
    let answers: Vec<Resp> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let most = watcher.join().unwrap();
    assert!(answers.iter().all(|r| r.status == 200 && r.text() == "slept 150 ms\n"), "not every request was answered 200");
    let ids: BTreeSet<_> = answers.iter().map(|r| r.header("x-shoal-instance").unwrap().to_string()).collect();
    assert!(ids.len() <= 4, "{} instances served the requests", ids.len());
    assert!(most <= 4, "{most} instances ran at once");
}

#[test]
fn a_full_queue_answers_429_with_retry_after() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let r = gw.deploy("sleep", &format!(r#"{{"image":"{}","concurrency":1,"max_instances":1,"queue":1}}"#, image("sleep")));
    assert_eq!(r.status, 201);
    let addr = gw.addr;
    let busy = std::thread::spawn(move || http(addr, "GET", "/fn/sleep/?ms=1500", None));
    wait_until("the first request is in flight", || {
        http(addr, "GET", "/metrics", None).text().contains("shoal_instances{function=\"sleep\",state=\"starting\"} 1")
    });
    let queued = std::thread::spawn(move || http(addr, "GET", "/fn/sleep/?ms=1", None));
    wait_until("the second request is queued", || http(addr, "GET", "/metrics", None).text().contains("shoal_queue_length{function=\"sleep\"} 1"));
    let refused = gw.get("/fn/sleep/?ms=1");
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(refused.json()["error"].as_str().unwrap().contains("queue is full"));
    assert_eq!(busy.join().unwrap().status, 200);
    assert_eq!(queued.join().unwrap().status, 200);
}

#[test]
fn a_timeout_answers_504_and_stops_the_instance() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    assert_eq!(gw.deploy("sleep", &format!(r#"{{"image":"{}","timeout_ms":500}}"#, image("sleep"))).status, 201);
    assert_eq!(gw.get("/fn/sleep/?ms=1").status, 200);
    let (id, pid) = gw.instances("sleep")[0];
    let r = gw.get("/fn/sleep/?ms=5000");
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(r.json()["error"].as_str().unwrap().contains("timeout"));
    assert!(gw.instances("sleep").iter().all(|(i, _)| *i != id), "the timed-out instance is still listed");
    wait_until("the timed-out instance's process is gone", || !process_alive(pid));
    let r = gw.get("/fn/sleep/?ms=1");
    assert_eq!(r.status, 200);
    assert_ne!(r.header("x-shoal-instance"), Some(id.to_string().as_str()));
}

/// The timeout covers the whole response: a function that sends its head
/// at once and its body late is cut off at the deadline (the client gets
/// fewer bytes than Content-Length, then the end of the connection) and
/// its instance is stopped.
#[test]
fn a_response_body_past_the_timeout_is_cut_off_and_the_instance_stopped() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    assert_eq!(gw.deploy("stall", &format!(r#"{{"image":"{}","timeout_ms":700}}"#, image("sleep"))).status, 201);
    // A body inside the timeout arrives whole.
    assert_eq!(gw.get("/fn/stall/?stall=50").text(), "stalled 50 ms\n");
    let (id, pid) = gw.instances("stall")[0];
    let mut s = TcpStream::connect(gw.addr).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(s, "GET /fn/stall/?stall=5000 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let t0 = Instant::now();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    // Until the gateway ends the connection (an error counts as its end).
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&raw).to_string();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(!text.contains("stalled 5000 ms"), "the body arrived although it came after the timeout: {text}");
    assert!(t0.elapsed() < Duration::from_millis(4500), "the connection was not cut at the timeout ({:?})", t0.elapsed());
    assert!(gw.instances("stall").iter().all(|(i, _)| *i != id), "the instance is still listed");
    wait_until("the stalled instance's process is gone", || !process_alive(pid));
    let logs = gw.get("/functions/stall/logs").text();
    assert!(logs.contains("not complete within the timeout of 700 ms"), "{logs}");
    assert_eq!(gw.get("/fn/stall/?stall=1").status, 200);
}

/// A function's `memory` bounds its instances on every backend: guest
/// memory on spt/hvt, the address-space limit of a `process` instance
/// (runc/runsc: the container's limit, in runc_and_runsc_backends).
#[test]
fn the_memory_setting_bounds_the_instance() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    for b in backends() {
        let name = format!("alloc-{b}");
        assert_eq!(gw.deploy(&name, &format!(r#"{{"image":"{}","backend":"{b}","memory":"32M"}}"#, image_for("alloc", b))).status, 201);
        assert_eq!(gw.get(&format!("/fn/{name}/?mb=4")).status, 200, "{b}");
        let r = gw.get(&format!("/fn/{name}/?mb=50"));
        assert_eq!((r.status, r.text().as_str()), (500, "out of memory\n"), "{b}: 50 MiB in a 32 MiB instance");
        assert_eq!(gw.deploy(&name, &format!(r#"{{"image":"{}","backend":"{b}","memory":"128M"}}"#, image_for("alloc", b))).status, 200);
        assert_eq!(gw.get(&format!("/fn/{name}/?mb=50")).status, 200, "{b}: 50 MiB in a 128 MiB instance");
    }
}

/// `mem_mode` reaches the tender: with `pool`, the gateway adds the image
/// to the library pool at deploy and the instance maps its read-only pages
/// from the pool's files; `ksm` and `copy` run too. Memory modes are only
/// for spt/hvt (422 otherwise), and an unknown one is refused.
#[test]
fn the_memory_mode_reaches_the_instances() {
    let dir = scratch();
    let pool = dir.path().join("pool");
    let gw = Gateway::start_with(&dir.path().join("state"), &[("SHOAL_POOL_DIR", &pool)]);
    for t in tenders() {
        for mode in ["pool", "ksm", "copy"] {
            let name = format!("noop-{t}-{mode}");
            let r = gw.deploy(&name, &format!(r#"{{"image":"{}","backend":"{t}","mem_mode":"{mode}"}}"#, image("noop")));
            assert_eq!(r.status, 201, "{t} {mode}: {}", r.text());
            assert_eq!(gw.get(&format!("/fn/{name}/")).text(), "noop\n", "{t} {mode}");
            if mode == "pool" {
                let (_, pid) = gw.instances(&name)[0];
                // The tender's process and its instance (spt's waiting parent forks it).
                let mut maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
                if let Ok(children) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
                    for c in children.split_whitespace() {
                        maps.push_str(&std::fs::read_to_string(format!("/proc/{c}/maps")).unwrap_or_default());
                    }
                }
                assert!(maps.contains(&pool.display().to_string()), "{t}: the instance maps no pool file:\n{maps}");
            }
        }
    }
    assert!(std::fs::read_dir(&pool).unwrap().count() > 0, "the deploy filled the pool");
    let r = gw.deploy("native-pool", &format!(r#"{{"image":"{}","backend":"process","mem_mode":"pool"}}"#, image("noop.native")));
    assert_eq!(r.status, 422, "{}", r.text());
    let r = gw.deploy("bogus", &format!(r#"{{"image":"{}","mem_mode":"shared"}}"#, image("noop")));
    assert_eq!(r.status, 422, "{}", r.text());
}

/// The Lua function runtime (recipe lua-fn + apps/functions/lua_fn.c) runs
/// the handler script of the function's fs on every backend: a no-op, an
/// argument, a POST body echoed, a Lua error as 500 with its message; a
/// handler with a syntax error stops its instance at start with the
/// parser's message in the logs and the request gets 502.
#[test]
fn the_lua_runtime_serves_a_handler_script_on_every_backend() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let fs = functions().join("lua-fs");
    for b in backends() {
        let name = format!("lua-{b}");
        let r = gw.deploy(&name, &format!(r#"{{"image":"{}","backend":"{b}","fs":"{}"}}"#, image_for("lua", b), fs.display()));
        assert_eq!(r.status, 201, "{b}: {}", r.text());
        let r = gw.get(&format!("/fn/{name}/"));
        assert_eq!((r.status, r.text().as_str()), (200, "hello from Lua\n"), "{b}");
        assert_eq!(gw.get(&format!("/fn/{name}/fib?n=20")).text(), "fib(20) = 6765\n", "{b}");
        let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let r = gw.req("POST", &format!("/fn/{name}/echo"), Some(&body));
        assert_eq!((r.status, r.header("content-type")), (200, Some("application/octet-stream")), "{b}");
        assert!(r.body == body, "{b}: the body did not come back intact");
        let r = gw.get(&format!("/fn/{name}/error"));
        assert_eq!(r.status, 500, "{b}");
        assert!(r.text().contains("the handler was asked to fail"), "{b}: {}", r.text());
        assert_eq!(gw.get(&format!("/fn/{name}/fib?n=99")).status, 400, "{b}");
    }
    let bad = dir.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    std::fs::write(bad.join("handler.lua"), "function handle(req) return 'x'\n").unwrap();
    // On spt its template never gets to its ready point: the deploy fails
    // with Lua's message; started by exec, the first request does.
    let r = gw.deploy("lua-bad", &format!(r#"{{"image":"{}","fs":"{}"}}"#, image("lua"), bad.display()));
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.text().contains("lua_fn: /handler.lua:2: 'end' expected"), "{}", r.text());
    assert_eq!(gw.deploy("lua-bad", &format!(r#"{{"image":"{}","fs":"{}","template":false}}"#, image("lua"), bad.display())).status, 201);
    assert_eq!(gw.get("/fn/lua-bad/").status, 502);
    let logs = gw.get("/functions/lua-bad/logs").text();
    assert!(logs.contains("lua_fn: /handler.lua:2: 'end' expected"), "{logs}");
    assert_eq!(gw.stop(), Some(0));
}

/// `POST /images` stores an uploaded image by digest; a deploy names it
/// `sha256:HEX`; a second upload of the same bytes is the same image; a
/// file that is no image is refused with nothing stored; replacing the
/// function's image deletes the upload nobody uses any more; `shoal fn
/// deploy --upload` does the same from the command line.
#[test]
fn an_uploaded_image_is_stored_by_digest_and_deployed() {
    let dir = scratch();
    let state = dir.path().join("state");
    let gw = Gateway::start(&state);
    let junk = vec![0x5au8; 4096];
    let r = http_typed(gw.addr, "POST", "/images", Some(&junk), "application/octet-stream");
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.json()["error"].as_str().unwrap().contains("neither a shoal image nor an ELF executable"));
    assert!(!state.join("images").exists(), "a refused upload left the images directory");
    let bytes = std::fs::read(image("noop")).unwrap();
    let r = http_typed(gw.addr, "POST", "/images", Some(&bytes), "application/octet-stream");
    assert_eq!(r.status, 201, "{}", r.text());
    let v = r.json();
    let reference = v["image"].as_str().unwrap().to_string();
    assert!(reference.starts_with("sha256:") && reference.len() == 7 + 64, "{reference}");
    assert_eq!((v["kind"].as_str(), v["size"].as_u64()), (Some("shoal"), Some(bytes.len() as u64)));
    let stored = PathBuf::from(v["path"].as_str().unwrap());
    assert_eq!(std::fs::read(&stored).unwrap(), bytes);
    let again = http_typed(gw.addr, "POST", "/images", Some(&bytes), "application/octet-stream");
    assert_eq!((again.status, again.json()["image"].as_str()), (200, Some(reference.as_str())));
    assert_eq!(gw.deploy("up", &format!(r#"{{"image":"{reference}"}}"#)).status, 201);
    assert_eq!(gw.get("/fn/up/").text(), "noop\n");
    let r = gw.deploy("up2", &format!(r#"{{"image":"sha256:{}"}}"#, "0".repeat(64)));
    assert_eq!(r.status, 422, "{}", r.text());
    // Replaced by a path: the upload is no longer used by anyone.
    assert_eq!(gw.deploy("up", &format!(r#"{{"image":"{}"}}"#, image("noop"))).status, 200);
    assert!(!stored.exists(), "the unused upload was kept");
    let url = format!("http://{}", gw.addr);
    let o = shoal().args(["fn", "--gateway", &url, "deploy", "fib-up", &image("fib"), "--upload"]).arg("--state").arg(&state).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("image {}", state.join("images").display())), "{}", stdout(&o));
    assert_eq!(gw.get("/fn/fib-up/?n=10").text(), "fib(10) = 55\n");
    // It survives a restart of the gateway, as deployments do.
    drop(gw);
    let gw = Gateway::start(&state);
    assert_eq!(gw.get("/fn/fib-up/?n=11").text(), "fib(11) = 89\n");
}

#[test]
fn a_crash_answers_502_and_the_next_request_succeeds() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    for b in backends() {
        let name = format!("crash-{b}");
        assert_eq!(gw.deploy(&name, &format!(r#"{{"image":"{}","backend":"{b}"}}"#, image_for("crash", b))).status, 201);
        assert_eq!(gw.get(&format!("/fn/{name}/")).text(), "alive\n");
        let r = gw.get(&format!("/fn/{name}/crash"));
        assert_eq!(r.status, 502, "{b}: {}", r.text());
        let r = gw.get(&format!("/fn/{name}/"));
        assert_eq!((r.status, r.text().as_str()), (200, "alive\n"), "{b}");
        assert_eq!(r.header("x-shoal-cold-start"), Some("true"), "{b}: the crashed instance must have been replaced");
        let logs = gw.get(&format!("/functions/{name}/logs")).text();
        assert!(logs.lines().any(|l| l.contains("\"stream\":\"gateway\"") && l.contains("exited")), "{b}: logs do not note the exit: {logs}");
    }
}

/// A request the instance drops (it closes the connection without an
/// answer but keeps running, as an overloaded instance does) answers 502;
/// the instance is kept and serves the next request warm. Stopping it
/// would fail every other request it is serving.
#[test]
fn a_dropped_request_answers_502_and_the_instance_is_kept() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    for b in backends() {
        let name = format!("drop-{b}");
        assert_eq!(gw.deploy(&name, &format!(r#"{{"image":"{}","backend":"{b}"}}"#, image_for("crash", b))).status, 201);
        let first = gw.get(&format!("/fn/{name}/"));
        assert_eq!(first.text(), "alive\n", "{b}");
        let r = gw.get(&format!("/fn/{name}/drop"));
        assert_eq!(r.status, 502, "{b}: {}", r.text());
        let r = gw.get(&format!("/fn/{name}/"));
        assert_eq!((r.status, r.text().as_str()), (200, "alive\n"), "{b}");
        assert_eq!(r.header("x-shoal-cold-start"), Some("false"), "{b}: the instance must have been kept");
        assert_eq!(r.header("x-shoal-instance"), first.header("x-shoal-instance"), "{b}");
        let logs = gw.get(&format!("/functions/{name}/logs")).text();
        assert!(logs.lines().any(|l| l.contains("\"stream\":\"gateway\"") && l.contains("is kept")), "{b}: logs do not note the failure: {logs}");
    }
}

/// The local addresses (`ADDR:PORT` as /proc/net/tcp spells them) of the
/// IPv4 sockets whose remote port is `port`, in `state` (01 ESTABLISHED,
/// 06 TIME_WAIT): on this side, the gateway's connections to an instance.
/// A TIME_WAIT socket belongs to no process, so one left by another
/// test's gateway towards an instance that had the same port before
/// (ports are reused; TIME_WAIT lasts 60 s) is in the list too: callers
/// compare before and after instead of expecting none.
fn tcp_to_port(port: u16, state: &str) -> std::collections::BTreeSet<String> {
    let t = std::fs::read_to_string("/proc/net/tcp").unwrap();
    t.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 3 && f[3] == state && f[2].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()) == Some(port)).then(|| f[1].to_string())
        })
        .collect()
}

/// Sequential requests through the gateway reuse one kept-alive
/// connection to the instance: the connection the first request opened
/// is, after 19 more, the only one open to the instance, and none was
/// closed meanwhile (no new TIME_WAIT); left unused, it is closed and the
/// instance stays warm. Before, every request opened its own (hyper's
/// server stops polling a body at its Content-Length, so the connection
/// never went back to the pool).
#[test]
fn sequential_requests_reuse_one_connection_to_the_instance() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    for b in backends() {
        let name = format!("reuse-{b}");
        assert_eq!(gw.deploy(&name, &format!(r#"{{"image":"{}","backend":"{b}"}}"#, image_for("noop", b))).status, 201);
        assert_eq!(gw.get(&format!("/fn/{name}/")).status, 200, "{b}");
        let r = gw.get("/instances");
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let addr: SocketAddr = v.as_array().unwrap().iter().find(|i| i["function"] == name.as_str()).unwrap()["address"].as_str().unwrap().parse().unwrap();
        let first = tcp_to_port(addr.port(), "01");
        let closed_before = tcp_to_port(addr.port(), "06");
        assert_eq!(first.len(), 1, "{b}: connections open to the instance at {addr} after the first request: {first:?}");
        for _ in 1..20 {
            assert_eq!(gw.get(&format!("/fn/{name}/")).status, 200, "{b}");
        }
        assert_eq!(tcp_to_port(addr.port(), "01"), first, "{b}: connections open to the instance at {addr}");
        let closed: Vec<String> = tcp_to_port(addr.port(), "06").difference(&closed_before).cloned().collect();
        assert!(closed.is_empty(), "{b}: connections to the instance at {addr} were closed: {closed:?}");
        // Unused, it is closed (after 2 s: serve::dispatch::POOL_IDLE).
        wait_until(&format!("{b}: the idle connection to {addr} is closed"), || tcp_to_port(addr.port(), "01").is_empty());
        assert_eq!(gw.get(&format!("/fn/{name}/")).header("x-shoal-cold-start"), Some("false"), "{b}");
    }
}

#[test]
fn a_restart_keeps_the_deployments_and_stops_instances() {
    let dir = scratch();
    // A nested state directory the gateway must create, mode 0700.
    let state = dir.path().join("a/b/state");
    let gw = Gateway::start(&state);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&state).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(gw.deploy("noop", &format!(r#"{{"image":"{}","concurrency":3}}"#, image("noop"))).status, 201);
    assert_eq!(gw.get("/fn/noop/").status, 200);
    let (_, pid) = gw.instances("noop")[0];
    assert!(process_alive(pid));
    assert_eq!(gw.stop(), Some(0), "SIGTERM must stop the gateway cleanly");
    wait_until("the instance is stopped with the gateway", || !process_alive(pid));
    let gw = Gateway::start(&state);
    let f = gw.get("/functions/noop");
    assert_eq!(f.status, 200);
    assert_eq!(f.json()["concurrency"], 3);
    assert_eq!(gw.get("/fn/noop/").text(), "noop\n");
    assert_eq!(gw.req("DELETE", "/functions/noop", None).status, 200);
    drop(gw);
    let gw = Gateway::start(&state);
    assert_eq!(gw.get("/functions/noop").status, 404, "a removed function came back after a restart");
}

/// Two gateways on one state directory would overwrite each other's
/// deployments and collect each other's uploads: the second is refused in
/// one line while the first runs, and starts once the first has stopped.
#[test]
fn a_second_gateway_on_the_same_state_is_refused() {
    let dir = scratch();
    let state = dir.path().join("state");
    let gw = Gateway::start(&state);
    let o = shoal().args(["serve", "--listen", "127.0.0.1:0", "--state"]).arg(&state).stdin(Stdio::null()).output().unwrap();
    assert_eq!(o.status.code(), Some(125));
    assert_eq!(stderr(&o), format!("shoal: the state directory {} is in use by another shoal serve; give each gateway its own --state\n", state.display()));
    assert_eq!(gw.stop(), Some(0));
    let gw = Gateway::start(&state);
    assert_eq!(gw.get("/functions").status, 200);
}

#[test]
fn instances_die_with_a_killed_gateway() {
    let dir = scratch();
    let mut gw = Gateway::start(&dir.path().join("state"));
    let mut pids = Vec::new();
    for b in backends() {
        let name = format!("noop-{b}");
        assert_eq!(gw.deploy(&name, &format!(r#"{{"image":"{}","backend":"{b}"}}"#, image_for("noop", b))).status, 201);
        assert_eq!(gw.get(&format!("/fn/{name}/")).status, 200);
        pids.push((b, gw.instances(&name)[0].1));
    }
    gw.child.kill().unwrap();
    gw.child.wait().unwrap();
    for (b, pid) in pids {
        wait_until(&format!("the {b} instance dies with its gateway"), || !process_alive(pid));
    }
}

/// Parses Prometheus text: every line a comment or `NAME{LABELS} VALUE`;
/// returns the samples.
fn parse_prometheus(text: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line:?}"));
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'), "bad metric name in {line:?}");
        if name_end < series.len() {
            assert!(series.ends_with('}'), "bad labels in {line:?}");
            for pair in series[name_end + 1..series.len() - 1].split("\",").filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once("=\"").unwrap_or_else(|| panic!("bad label {pair:?} in {line:?}"));
                assert!(k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "bad label name in {line:?}");
                assert!(!v.contains('"') || v.ends_with('"'), "bad label value in {line:?}");
            }
        }
        let v: f64 = if value == "+Inf" { f64::INFINITY } else { value.parse().unwrap_or_else(|_| panic!("bad value in {line:?}")) };
        out.push((series.to_string(), v));
    }
    out
}

#[test]
fn metrics_are_prometheus_text_and_count_the_requests() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    assert_eq!(gw.deploy("noop", &format!(r#"{{"image":"{}"}}"#, image("noop"))).status, 201);
    assert_eq!(gw.deploy("crash", &format!(r#"{{"image":"{}"}}"#, image("crash"))).status, 201);
    for _ in 0..7 {
        assert_eq!(gw.get("/fn/noop/").status, 200);
    }
    assert_eq!(gw.get("/fn/crash/crash").status, 502);
    assert_eq!(gw.get("/fn/crash/").status, 200);
    assert_eq!(gw.get("/fn/nothere/").status, 404);
    let r = gw.get("/metrics");
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let samples = parse_prometheus(&r.text());
    let get = |s: &str| samples.iter().find(|(k, _)| k == s).map(|(_, v)| *v).unwrap_or_else(|| panic!("no sample {s}:\n{}", r.text()));
    assert_eq!(get("shoal_invocations_total{function=\"noop\",status=\"200\"}"), 7.0);
    assert_eq!(get("shoal_invocations_total{function=\"crash\",status=\"502\"}"), 1.0);
    assert_eq!(get("shoal_invocations_total{function=\"crash\",status=\"200\"}"), 1.0);
    assert_eq!(get("shoal_cold_starts_total{function=\"noop\"}"), 1.0);
    assert_eq!(get("shoal_cold_starts_total{function=\"crash\"}"), 2.0);
    assert_eq!(get("shoal_cold_start_duration_seconds_count{function=\"noop\"}"), 1.0);
    assert_eq!(get("shoal_request_duration_seconds_count{function=\"noop\"}"), 7.0);
    assert_eq!(get("shoal_request_duration_seconds_bucket{function=\"noop\",le=\"+Inf\"}"), 7.0);
    assert_eq!(get("shoal_instances{function=\"noop\",state=\"warm\"}"), 1.0);
    assert_eq!(get("shoal_queue_length{function=\"noop\"}"), 0.0);
    assert!(!r.text().contains("nothere"), "an unknown function must not create series");
}

#[test]
fn bad_input_is_a_json_error_and_nothing_is_written() {
    let dir = scratch();
    let state = dir.path().join("state");
    let gw = Gateway::start(&state);
    let corrupt = dir.path().join("corrupt");
    std::fs::write(&corrupt, b"\x7fELF this is not an image").unwrap();
    let noop = image("noop");
    let cases: Vec<(&str, &str, String, u16, &str)> = vec![
        ("PUT", "/functions/f", format!(r#"{{"image":"{}"}}"#, dir.path().join("nonexistent").display()), 422, "No such file"),
        ("PUT", "/functions/f", format!(r#"{{"image":"{}"}}"#, corrupt.display()), 422, "not a usable shoal image"),
        ("PUT", "/functions/f", format!(r#"{{"image":"{}","backend":"process"}}"#, functions().join("fs/data.bin").display()), 422, "not an ELF"),
        ("PUT", "/functions/f", format!(r#"{{"image":"{noop}","backend":"docker"}}"#), 422, "unknown backend"),
        ("PUT", "/functions/f", format!(r#"{{"image":"{noop}","concurrency":0}}"#), 422, "concurrency"),
        ("PUT", "/functions/f", format!(r#"{{"image":"{noop}","colour":"red"}}"#), 400, "colour"),
        ("PUT", "/functions/f", r#"{"image": "#.into(), 400, "JSON"),
        ("PUT", "/functions/a%2Fb", format!(r#"{{"image":"{noop}"}}"#), 400, "invalid function name"),
        ("PUT", "/functions/..", format!(r#"{{"image":"{noop}"}}"#), 400, "invalid function name"),
        ("PUT", "/functions/f", format!(r#"{{"name":"g","image":"{noop}"}}"#), 409, "URL names"),
        ("GET", "/fn/nothere/", String::new(), 404, "no function named"),
        ("GET", "/functions/nothere", String::new(), 404, "no function named"),
        ("DELETE", "/functions/nothere", String::new(), 404, "no function named"),
        ("GET", "/functions/nothere/logs", String::new(), 404, "no function named"),
    ];
    for (method, path, body, status, needle) in cases {
        let r = gw.req(method, path, if body.is_empty() { None } else { Some(body.as_bytes()) });
        assert_eq!(r.status, status, "{method} {path} {body}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"), "{method} {path}");
        let e = r.json()["error"].as_str().unwrap_or_else(|| panic!("no error message: {}", r.text())).to_string();
        assert!(e.contains(needle), "{method} {path}: {e:?} does not mention {needle:?}");
    }
    let left: Vec<_> = std::fs::read_dir(&state).unwrap().map(|e| e.unwrap().file_name()).filter(|n| n != "token" && n != "lock").collect();
    assert!(left.is_empty(), "bad input wrote to the state directory: {left:?}");
    assert_eq!(gw.get("/functions").json(), serde_json::json!([]));
}

#[test]
fn the_fn_command_deploys_lists_invokes_and_removes() {
    let dir = scratch();
    let state = dir.path().join("state");
    let gw = Gateway::start(&state);
    let url = format!("http://{}", gw.addr);
    // The token is found in the gateway's state directory (--state or
    // SHOAL_STATE), or given (--token or SHOAL_TOKEN).
    let fnc = || {
        let mut c = shoal();
        c.env_remove("SHOAL_TOKEN").env("SHOAL_STATE", &state).args(["fn", "--gateway", &url]);
        c
    };
    let o = fnc().args(["deploy", "fib", &image("fib"), "--concurrency", "2", "--keep-warm-ms", "5000"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("deployed fib"));
    let o = shoal().env_remove("SHOAL_STATE").env("SHOAL_TOKEN", &gw.token).args(["fn", "--gateway", &url, "ls"]).output().unwrap();
    assert!(stdout(&o).lines().any(|l| l.starts_with("fib ") && l.contains("spt")), "{}", stdout(&o));
    // ls shows memory and how many environment variables (not their values).
    let o = fnc().args(["deploy", "fib", &image("fib"), "--memory", "48M", "-e", "SECRET=hunter2", "-e", "B=1"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("updated fib (spt, image ") && stdout(&o).contains("back to their defaults"), "{}", stdout(&o));
    let o = fnc().arg("ls").output().unwrap();
    let head = stdout(&o).lines().next().unwrap_or("").to_string();
    assert!(head.contains("MEMORY") && head.contains("ENV"), "{head}");
    let row = stdout(&o).lines().find(|l| l.starts_with("fib ")).unwrap_or("").to_string();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols.get(6..8), Some(&["48M", "2"][..]), "{row}");
    assert!(!stdout(&o).contains("hunter2"), "ls printed an environment value");
    let o = shoal().env_remove("SHOAL_STATE").env_remove("SHOAL_TOKEN").args(["fn", "--gateway", &url, "--token", &gw.token, "ls"]).output().unwrap();
    assert!(stdout(&o).lines().any(|l| l.starts_with("fib ")), "{}", stdout(&o));
    // Without the token: refused with the gateway's one-line reason.
    let nowhere = dir.path().join("no-state");
    let o = shoal().env_remove("SHOAL_TOKEN").args(["fn", "--gateway", &url, "--state"]).arg(&nowhere).arg("ls").output().unwrap();
    assert_clean_error(&o, "401");
    let o = fnc().args(["invoke", "fib", "--path", "/?n=10"]).output().unwrap();
    assert_eq!(stdout(&o), "fib(10) = 55\n");
    let o = fnc().args(["logs", "fib"]).output().unwrap();
    assert!(stdout(&o).contains("gateway: started on"), "{}", stdout(&o));
    // logs -f: follows until killed (bounded by the read below).
    let mut follow = fnc().args(["logs", "-f", "fib"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(follow.stdout.take().unwrap());
    let mut line = String::new();
    // (First the template's line: the function's cold starts copy it.)
    for _ in 0..3 {
        line.clear();
        out.read_line(&mut line).unwrap();
        if line.contains("started on") {
            break;
        }
    }
    assert!(line.contains("started on"), "{line}");
    follow.kill().unwrap();
    follow.wait().unwrap();
    let o = fnc().args(["invoke", "nothere"]).output().unwrap();
    assert_clean_error(&o, "404");
    // A name with a slash is the gateway's name error (400), not a
    // missing route (404).
    let o = fnc().args(["deploy", "a/b", &image("fib")]).output().unwrap();
    assert_clean_error(&o, "400");
    assert_clean_error(&o, "invalid function name \"a/b\"");
    // rm takes several names.
    let o = fnc().args(["deploy", "fib2", &image("fib")]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = fnc().args(["rm", "fib", "fib2"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "removed fib\nremoved fib2\n");
    assert_eq!(gw.get("/functions").json(), serde_json::json!([]));
}

/// A Go function (apps/functions/go/fib, one static executable, built by
/// build.sh as go-fib) deployed with `shoal fn deploy` on spt, hvt and
/// process — the same file on each: spt and hvt run the instance image
/// built around it, process the file itself — and invoked with `shoal fn
/// invoke`, cold then warm; then uploaded (`--upload`) and deployed on spt.
#[test]
fn a_go_executable_is_deployed_with_shoal_fn_and_invoked_on_spt_hvt_and_process() {
    let exe = functions().join("go-fib");
    if !exe.is_file() {
        shoal_testkit::skip("go", "build.sh found no Go 1.22 or newer, so the Go functions are not built");
        return;
    }
    let dir = scratch();
    let state = dir.path().join("state");
    let gw = Gateway::start(&state);
    let url = format!("http://{}", gw.addr);
    let fnc = || {
        let mut c = shoal();
        c.env_remove("SHOAL_TOKEN").env("SHOAL_STATE", &state).args(["fn", "--gateway", &url]);
        c
    };
    for b in backends() {
        let name = format!("go-fib-{b}");
        // process: the memory setting is RLIMIT_AS there, which counts the
        // Go runtime's ~800 MB of reserved address space (spt and hvt count
        // memory used, and start it with the default 256M).
        let memory = if b == "process" { "1G" } else { "256M" };
        let o = fnc().args(["deploy", &name]).arg(&exe).args(["--backend", b, "--memory", memory]).output().unwrap();
        assert!(o.status.success(), "{b}: {}", stderr(&o));
        assert_eq!(stdout(&o), format!("deployed {name} ({b}, image {})\n", exe.display()), "{b}");
        for n in ["10", "25"] {
            let o = fnc().args(["invoke", &name, "--path", &format!("/?n={n}")]).output().unwrap();
            assert!(o.status.success(), "{b}: {}", stderr(&o));
            let want = if n == "10" { "fib(10) = 55\n" } else { "fib(25) = 75025\n" };
            assert_eq!(stdout(&o), want, "{b}");
        }
        assert_eq!(gw.instances(&name).len(), 1, "{b}: the second invocation must reuse the warm instance");
        let shown = gw.get(&format!("/functions/{name}")).json();
        if b == "process" {
            assert_eq!(shown["image"], serde_json::json!(exe.display().to_string()), "{shown}");
        } else {
            assert_eq!(shown["executable"], serde_json::json!(exe.display().to_string()), "{b}: {shown}");
        }
    }
    let o = fnc().args(["deploy", "go-fib-up"]).arg(&exe).args(["--backend", "spt", "--upload"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = fnc().args(["invoke", "go-fib-up", "--path", "/?n=20"]).output().unwrap();
    assert_eq!(stdout(&o), "fib(20) = 6765\n", "{}", stderr(&o));
    assert_eq!(gw.stop(), Some(0));
}

/// `--gateway` goes before or after the subcommand or comes from
/// `SHOAL_GATEWAY`, as `HOST:PORT`, `localhost:PORT` or a URL; the
/// gateway itself listens on `localhost:0` (loopback: no
/// `--insecure-listen` needed).
#[test]
fn the_gateway_address_is_accepted_in_every_form_and_order() {
    let dir = scratch();
    let state = dir.path().join("state");
    let gw = Gateway::start_on("localhost:0", &state, &[], &test_options());
    assert!(gw.addr.ip().is_loopback() && gw.addr.is_ipv4(), "localhost:0 listened on {}", gw.addr);
    assert_eq!(gw.deploy("noop", &format!(r#"{{"image":"{}"}}"#, image("noop"))).status, 201);
    let port = gw.addr.port();
    let forms = [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("http://127.0.0.1:{port}"), format!("http://localhost:{port}/")];
    for x in &forms {
        let base = || {
            let mut c = shoal();
            c.env_remove("SHOAL_TOKEN").env_remove("SHOAL_GATEWAY").env("SHOAL_STATE", &state);
            c
        };
        let orders: [(&str, Command); 3] = [
            ("fn --gateway X ls", {
                let mut c = base();
                c.args(["fn", "--gateway", x, "ls"]);
                c
            }),
            ("fn ls --gateway X", {
                let mut c = base();
                c.args(["fn", "ls", "--gateway", x]);
                c
            }),
            ("SHOAL_GATEWAY=X fn ls", {
                let mut c = base();
                c.env("SHOAL_GATEWAY", x).args(["fn", "ls"]);
                c
            }),
        ];
        for (how, mut c) in orders {
            let o = c.output().unwrap();
            assert!(o.status.success(), "{how} with X = {x}: {}", stderr(&o));
            assert!(stdout(&o).lines().any(|l| l.starts_with("noop ")), "{how} with X = {x}: {}", stdout(&o));
        }
        // After a subcommand's own arguments and options too.
        let o = base().args(["fn", "invoke", "noop", "--path", "/", "--gateway", x]).output().unwrap();
        assert_eq!((stdout(&o).as_str(), stderr(&o).as_str()), ("noop\n", ""), "invoke … --gateway {x}");
    }
    let o = shoal().env_remove("SHOAL_TOKEN").env("SHOAL_STATE", &state).args(["fn", "deploy", "fib", &image("fib"), "--gateway", &forms[0]]).output().unwrap();
    assert!(o.status.success() && stdout(&o).starts_with("deployed fib "), "{}", stderr(&o));
    // A wrong address is one line naming the forms, not clap's tip.
    let o = shoal().args(["fn", "ls", "--gateway", "https://127.0.0.1:1"]).output().unwrap();
    assert_clean_error(&o, "--gateway https://127.0.0.1:1: only http:// is supported");
    let o = shoal().args(["serve", "--listen", "example.com:0", "--state"]).arg(dir.path().join("s2")).output().unwrap();
    assert_clean_error(&o, "--listen example.com:0: expected ADDR:PORT or localhost:PORT");
    assert_eq!(gw.stop(), Some(0));
}

/// A deploy its tender would refuse is refused at deploy (422, one line
/// with the tender's reason); the hvt checks need no /dev/kvm.
#[test]
fn what_hvt_cannot_run_is_refused_at_deploy_with_the_tenders_reason() {
    let dir = scratch();
    let state = dir.path().join("state");
    let gw = Gateway::start(&state);
    let r = gw.deploy("big", &format!(r#"{{"image":"{}","backend":"hvt","memory":"8G"}}"#, image("noop")));
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(
        r.json()["error"].as_str().unwrap_or_default(),
        format!("{}: --mem 8G is too large for the hvt tender: hypercalls pass 32-bit addresses, so guest memory is at most 4G", image("noop"))
    );
    // An executable for another machine (the host's `true` marked as
    // aarch64) is neither a shoal image nor an executable shoal can run.
    let dynamic = dir.path().join("true");
    let mut b = std::fs::read("/bin/true").unwrap();
    b[18..20].copy_from_slice(&183u16.to_le_bytes());
    std::fs::write(&dynamic, b).unwrap();
    let r = gw.deploy("native", &format!(r#"{{"image":"{}","backend":"hvt"}}"#, dynamic.display()));
    assert_eq!(r.status, 422, "{}", r.text());
    let e = r.json()["error"].as_str().unwrap_or_default().to_string();
    assert!(e.starts_with(&format!("image {}: ", dynamic.display())) && !e.contains('\n'), "{e}");
    // Through `shoal fn`: the gateway's reason in one line.
    let o = shoal()
        .env_remove("SHOAL_TOKEN")
        .env("SHOAL_STATE", &state)
        .args(["fn", "deploy", "big", &image("noop"), "--backend", "hvt", "--memory", "8G"])
        .arg("--gateway")
        .arg(gw.addr.to_string())
        .output()
        .unwrap();
    assert_clean_error(&o, "the gateway answered 422: ");
    assert_clean_error(&o, "--mem 8G is too large for the hvt tender");
    assert_eq!(gw.get("/functions").json(), serde_json::json!([]));
    // 4G is what hvt can give: accepted.
    if tenders().contains(&"hvt") {
        let r = gw.deploy("big", &format!(r#"{{"image":"{}","backend":"hvt","memory":"4G"}}"#, image("noop")));
        assert_eq!(r.status, 201, "{}", r.text());
    }
    assert_eq!(gw.stop(), Some(0));
}

/// An instance that exits without answering: the 502's body ends with
/// the last line it wrote to stderr (no need for `fn logs`).
#[test]
fn a_502_carries_the_instances_last_words() {
    let dir = scratch();
    let src = dir.path().join("quitter.c");
    std::fs::write(&src, "#include <stdio.h>\nint main(void) {\n    fprintf(stderr, \"starting\\n\");\n    fprintf(stderr, \"quitter: no port for me today\\n\");\n    return 3;\n}\n").unwrap();
    let shoal_img = build_image(&src, dir.path(), &[]);
    let native = build_native(&src, dir.path(), &[]);
    let gw = Gateway::start(&dir.path().join("state"));
    for b in backends() {
        let img = if b == "process" { &native } else { &shoal_img };
        let name = format!("quitter-{b}");
        // (With a template, spt and hvt refuse it at deploy: tested with templates.)
        let tmpl = if matches!(b, "spt" | "hvt") { r#","template":false"# } else { "" };
        let r = gw.deploy(&name, &format!(r#"{{"image":"{}","backend":"{b}"{tmpl}}}"#, img.display()));
        assert_eq!(r.status, 201, "{b}: {}", r.text());
        let r = gw.get(&format!("/fn/{name}/"));
        assert_eq!(r.status, 502, "{b}: {}", r.text());
        let e = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(
            e.starts_with(&format!("the instance of {name} failed to answer: ")) && e.ends_with("; its last words: quitter: no port for me today"),
            "{b}: {e}"
        );
    }
    assert_eq!(gw.stop(), Some(0));
}

/// runc and runsc run the native build in an OCI bundle; they need root
/// and the runtimes (scripts/setup installs them).
#[test]
fn runc_and_runsc_backends() {
    if !shoal_testkit::need(&["root"]) {
        return;
    }
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    for rt in ["runc", "runsc"] {
        if !shoal_testkit::need(&[rt]) {
            continue;
        }
        let name = format!("noop-{rt}");
        assert_eq!(gw.deploy(&name, &format!(r#"{{"image":"{}","backend":"{rt}"}}"#, image("noop.native"))).status, 201);
        let r = gw.get(&format!("/fn/{name}/"));
        assert_eq!((r.status, r.text().as_str()), (200, "noop\n"), "{rt}");
        let r = gw.get(&format!("/fn/{name}/"));
        assert_eq!(r.header("x-shoal-cold-start"), Some("false"), "{rt}");
        // Another gateway starting removes only the containers of gateways
        // that are gone, not this one's running container.
        let other = Gateway::start(&dir.path().join(format!("state-other-{rt}")));
        drop(other);
        let r = gw.get(&format!("/fn/{name}/"));
        assert_eq!((r.status, r.header("x-shoal-cold-start")), (200, Some("false")), "{rt}: another gateway's start stopped this one's container");
        let fib = format!("fib-{rt}");
        assert_eq!(gw.deploy(&fib, &format!(r#"{{"image":"{}","backend":"{rt}"}}"#, image("fib.native"))).status, 201);
        assert_eq!(gw.get(&format!("/fn/{fib}?n=20")).text(), "fib(20) = 6765\n", "{rt}");
        // `memory` is the container's memory limit: touching more is an OOM kill.
        let alloc = format!("alloc-{rt}");
        assert_eq!(gw.deploy(&alloc, &format!(r#"{{"image":"{}","backend":"{rt}","memory":"32M"}}"#, image("alloc.native"))).status, 201);
        assert_eq!(gw.get(&format!("/fn/{alloc}/?mb=4")).status, 200, "{rt}");
        assert_eq!(gw.get(&format!("/fn/{alloc}/?mb=50")).status, 502, "{rt}: 50 MiB under a 32 MiB limit");
        // A container that exits before it listens (the Lua runtime with
        // no handler.lua) answers 502 once it has exited, not 504 after the
        // whole timeout spent retrying its port.
        let empty = dir.path().join("empty-fs");
        std::fs::create_dir_all(&empty).unwrap();
        let gone = format!("gone-{rt}");
        let settings = format!(r#"{{"image":"{}","backend":"{rt}","fs":"{}","timeout_ms":20000}}"#, image("lua.native"), empty.display());
        assert_eq!(gw.deploy(&gone, &settings).status, 201);
        let r = gw.get(&format!("/fn/{gone}/"));
        assert_eq!(r.status, 502, "{rt}: {}", r.text());
        assert!(r.text().contains("exited before it listened"), "{rt}: {}", r.text());
    }
    assert_eq!(gw.stop(), Some(0));
}

/// A `/proc/PID/status` memory field (VmRSS, RssAnon) in KiB.
fn mem_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok()).unwrap()
}

/// Runs `hey -n N -c C` against `url`: (status → count, errors, requests/s).
fn hey(url: &str, n: usize, c: usize) -> (Vec<(u16, usize)>, Vec<String>, f64) {
    let o = Command::new("hey").args(["-n", &n.to_string(), "-c", &c.to_string(), "-t", "60", url]).output().unwrap();
    assert!(o.status.success(), "hey failed: {}", stderr(&o));
    let text = stdout(&o);
    let mut statuses = Vec::new();
    let mut errors = Vec::new();
    let mut in_errors = false;
    let mut rps = 0.0;
    for l in text.lines() {
        let t = l.trim();
        if let Some(v) = t.strip_prefix("Requests/sec:") {
            rps = v.trim().parse().unwrap_or(0.0);
        }
        if t.starts_with("Error distribution") {
            in_errors = true;
        } else if in_errors && !t.is_empty() {
            errors.push(t.to_string());
        }
        if let Some(rest) = t.strip_prefix('[') {
            if let (Some((code, count)), false) = (rest.split_once(']'), in_errors) {
                if let (Ok(code), Some(Ok(count))) = (code.parse::<u16>(), count.split_whitespace().next().map(str::parse::<usize>)) {
                    if t.ends_with("responses") {
                        statuses.push((code, count));
                    }
                }
            }
        }
    }
    (statuses, errors, rps)
}

/// A function that serves one connection at a time (accept, answer until
/// the client closes, accept the next: `apps/functions/serial.c`) deployed
/// with the default settings, under `hey -n 3000 -c 128`: every request is
/// answered 200 or 429, at most 10 % 429, and hey sees no errors (no
/// timeouts, no resets). With 8 requests per instance by default it got
/// 26 × 502 and 24 client timeouts: the gateway kept its first connection
/// alive and the other seven waited in the instance's backlog.
#[test]
fn a_serial_function_is_served_under_load_with_default_settings() {
    if !shoal_testkit::need(&["hey"]) {
        return;
    }
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    assert_eq!(gw.deploy("serial", &format!(r#"{{"image":"{}"}}"#, image("serial"))).status, 201);
    let url = format!("http://{}/fn/serial/", gw.addr);
    let (statuses, errors, rps) = hey(&url, 3000, 128);
    let _ = writeln!(std::io::stderr(), "serial function under hey -n 3000 -c 128: {rps:.0} req/s {statuses:?}");
    assert!(errors.is_empty(), "hey saw errors (timeouts, resets): {errors:?} {statuses:?}");
    assert!(statuses.iter().all(|(s, _)| [200, 429].contains(s)), "unexpected statuses {statuses:?}");
    let answered: usize = statuses.iter().map(|(_, n)| n).sum();
    let busy: usize = statuses.iter().filter(|(s, _)| *s == 429).map(|(_, n)| n).sum();
    // hey gives each of its 128 workers 3000/128 requests (integer division).
    assert_eq!(answered, 3000 / 128 * 128, "requests lost: {statuses:?}");
    assert!(busy * 10 <= answered, "more than 10 % answered 429: {statuses:?}");
}

/// 10,000 requests at concurrency 1, 64, 512 and 4,096 against noop on
/// spt (default settings: 1 per instance, 4 instances, queue 256): every
/// request answered 200, 429 or 503, no connection errors. Memory: a
/// second round leaves the gateway's resident size where the first left
/// it (within 5% of the idle size: no growth per load), and both are
/// within 25% of its idle size before the first (idle with its pool of
/// kept-alive connections to the instances full: about 1.2 MiB for 32 of
/// them). The first 4,096-client round raises the high-water once (heap
/// freed below its top, which glibc cannot trim): 0.4–1.25 MiB of 7.7–8.3
/// in five runs (two crossed the earlier 10% bound), 0.3–0.9 MiB of it
/// anonymous, and the second round adds nothing (the gateway runs without
/// glibc's per-thread caches and with one arena, see
/// serve::MALLOC_TUNABLES; with glibc's defaults it stayed about 2 MiB
/// above). The throughput is printed, never asserted. About 10 s here.
#[test]
fn hey_load_against_noop_on_spt() {
    if !shoal_testkit::need(&["hey"]) {
        return;
    }
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    assert_eq!(gw.deploy("noop", &format!(r#"{{"image":"{}"}}"#, image("noop"))).status, 201);
    let url = format!("http://{}/fn/noop/", gw.addr);
    let pid = gw.child.id();
    assert_eq!(gw.get("/fn/noop/").status, 200);
    // Warm up at the pool's size (4 instances, a connection each) before
    // the idle size is taken; the kept-alive connections to the instances
    // are closed 2 s after their last use.
    let (statuses, errors, _) = hey(&url, 2000, 32);
    assert!(errors.is_empty() && statuses.iter().all(|(s, _)| *s == 200), "warm-up: {statuses:?} {errors:?}");
    std::thread::sleep(Duration::from_millis(2500));
    let idle = (mem_kib(pid, "VmRSS:"), mem_kib(pid, "RssAnon:"));
    let round = || {
        let mut report = Vec::new();
        for c in [1usize, 64, 512, 4096] {
            let (statuses, errors, rps) = hey(&url, 10_000, c);
            assert!(errors.is_empty(), "c={c}: hey saw errors (resets, timeouts): {errors:?}");
            assert!(statuses.iter().all(|(s, _)| [200, 429, 503].contains(s)), "c={c}: unexpected statuses {statuses:?}");
            // hey gives each of its C workers N/C requests (integer division).
            let answered: usize = statuses.iter().map(|(_, n)| n).sum();
            assert_eq!(answered, 10_000 / c * c, "c={c}: requests lost: {statuses:?}");
            report.push(format!("c={c}: {rps:.0} req/s {statuses:?}"));
        }
        // The gateway trims its heap once a second after requests.
        std::thread::sleep(Duration::from_millis(2500));
        report.join("; ")
    };
    let r1 = round();
    let after1 = (mem_kib(pid, "VmRSS:"), mem_kib(pid, "RssAnon:"));
    let r2 = round();
    let after2 = (mem_kib(pid, "VmRSS:"), mem_kib(pid, "RssAnon:"));
    let _ = writeln!(std::io::stderr(), "hey against noop on spt: round 1: {r1}; round 2: {r2}; gateway (VmRSS, RssAnon) KiB {idle:?} before, {after1:?} after round 1, {after2:?} after round 2");
    for (round, after) in [(1, after1.0), (2, after2.0)] {
        assert!(after * 4 <= idle.0 * 5, "the gateway's memory did not come back near its idle size: {} KiB idle, {after} KiB after round {round}", idle.0);
    }
    assert!(
        after2.0 * 20 <= after1.0 * 20 + idle.0,
        "the gateway's memory grew from one round to the next: {} KiB after round 1, {} after round 2 ({} idle)",
        after1.0,
        after2.0,
        idle.0
    );
}

/// What a host sees of a process's confinement: credentials,
/// capabilities, `no_new_privs`, seccomp, limits, environment, its open
/// descriptors (number and kind, without inode numbers) and, for each
/// namespace, whether it is the test's own (and the network namespace's
/// identity: the shared empty one when root).
fn confinement(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    const FIELDS: [&str; 12] =
        ["Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:", "NoNewPrivs:", "Seccomp:", "Seccomp_filters:", "NSpid:"];
    for l in status.lines().filter(|l| FIELDS.iter().any(|f| l.starts_with(f))) {
        // NSpid: only the depth (and the pid inside: 1) can match.
        if let Some(rest) = l.strip_prefix("NSpid:") {
            let ids: Vec<&str> = rest.split_whitespace().collect();
            out.push(format!("NSpid depth {} inner {}", ids.len(), ids.last().unwrap_or(&"")));
        } else {
            out.push(l.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    out.push(std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default());
    out.push(format!("environ {:?}", std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default()));
    let mut fds: Vec<(u32, String)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let n = e.file_name().to_str()?.parse().ok()?;
                    let t = std::fs::read_link(e.path()).ok()?.display().to_string();
                    // socket:[123] → socket; pipe:[…] → pipe; paths stay.
                    Some((n, t.split(":[").next().unwrap_or("").to_string()))
                })
                .collect()
        })
        .unwrap_or_default();
    fds.sort();
    out.push(format!("fds {fds:?}"));
    for ns in ["cgroup", "ipc", "mnt", "net", "pid", "time", "user", "uts"] {
        let theirs = std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).ok();
        let ours = std::fs::read_link(format!("/proc/self/ns/{ns}")).ok();
        out.push(format!("ns {ns}: readable {}, the host's {}", theirs.is_some(), theirs == ours));
        if ns == "net" {
            out.push(format!("ns net {:?}", theirs));
        }
    }
    out
}

/// An spt instance the gateway starts (the instance program spawned
/// straight from the function prepared at deploy, no `shoal-tender` in
/// between) is confined exactly as one `shoal run` starts from the same
/// image and options with a handed-over socket: same user, capabilities,
/// `no_new_privs`, seccomp filter, limits, environment, descriptors and
/// namespaces (as root: its own PID, mount, IPC and user namespaces and
/// the shared empty network namespace).
#[test]
fn an_spt_instance_is_confined_as_shoal_run_confines_it() {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    // Started by exec (a copy of a template differs in two ways, tested
    // with templates: the host's PID namespace and a second filter).
    assert_eq!(gw.deploy("noop", &format!(r#"{{"image":"{}","template":false}}"#, image("noop"))).status, 201);
    assert_eq!(gw.get("/fn/noop/").text(), "noop\n");
    let (_, pid) = gw.instances("noop")[0];
    // The gateway's instance is the instance program itself.
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    assert_eq!(comm.trim(), "shoal-spt", "the gateway's instance process");
    // The same function under `shoal run`, its socket at descriptor 3 as the gateway hands it over.
    let sock = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = sock.local_addr().unwrap().port();
    let fd = sock.as_raw_fd();
    let mut cmd = shoal_run("spt");
    cmd.args(["--mem", "256M", "--mem-mode", "copy", "--listen-fd", "3", "-e", &format!("PORT={port}")])
        .arg(image("noop"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: dup and dup2 are async-signal-safe; they only place the
    // socket at 3 in the child (through a copy without close-on-exec, since
    // a dup2 of the socket onto itself, should it be 3, would keep the flag).
    unsafe {
        cmd.pre_exec(move || {
            let copy = libc::dup(fd);
            if copy < 0 || (copy != 3 && libc::dup2(copy, 3) < 0) {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut run = cmd.spawn().unwrap();
    drop(sock);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let r = http(addr, "GET", "/", None);
    assert_eq!(r.text(), "noop\n");
    let tender = run.id();
    let child = || -> Option<u32> { std::fs::read_to_string(format!("/proc/{tender}/task/{tender}/children")).ok()?.split_whitespace().next()?.parse().ok() };
    let reference = child().expect("shoal run's instance process");
    // Both have closed their connections (the gateway after 2 s unused).
    let t0 = Instant::now();
    let (mut a, mut b) = (confinement(pid), confinement(reference));
    while a != b && t0.elapsed() < DEADLINE {
        std::thread::sleep(Duration::from_millis(100));
        (a, b) = (confinement(pid), confinement(reference));
    }
    let _ = run.kill();
    let _ = run.wait();
    assert_eq!(a, b, "the gateway's instance (left) is confined otherwise than shoal run's (right)");
    assert!(a.iter().any(|l| l == "Seccomp: 2") && a.iter().any(|l| l == "NoNewPrivs: 1"), "{a:?}");
    // Only root's instances make namespaces and drop to nobody.
    if shoal_testkit::need(&["root"]) {
        assert!(a.iter().any(|l| l == "ns pid: readable true, the host's false"), "{a:?}");
        assert!(a.iter().any(|l| l.starts_with("Uid: 65534")), "{a:?}");
    }
}

/// `shoal serve --uid-range` (root): the gateway runs each spt instance as
/// a uid and gid of its own from the range (claimed and held by the
/// gateway while the instance runs), not as the `nobody` they shared.
#[test]
fn with_a_uid_range_each_spt_instance_runs_as_a_uid_of_its_own() {
    if !shoal_testkit::need(&["root"]) {
        return;
    }
    let dir = scratch();
    // Two uids no other run of this test takes at the same time.
    let start = 3_200_000 + (std::process::id() % 100_000) * 2;
    let mut options = test_options();
    options.extend(["--uid-range".to_string(), format!("{start}:2")]);
    let gw = Gateway::start_opts(&dir.path().join("state"), &[], &options);
    let mut ids = Vec::new();
    for f in ["one", "two"] {
        assert_eq!(gw.deploy(f, &format!(r#"{{"image":"{}"}}"#, image("noop"))).status, 201);
        assert_eq!(gw.get(&format!("/fn/{f}/")).text(), "noop\n");
        let (_, pid) = gw.instances(f)[0];
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let field = |k: &str| status.lines().find(|l| l.starts_with(k)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse::<u32>().ok());
        assert_eq!(field("Uid:"), field("Gid:"), "{f}: {status}");
        ids.push(field("Uid:").unwrap());
    }
    ids.sort_unstable();
    assert_eq!(ids, [start, start + 1], "the two instances' uids");
}

/// spt functions are prepared at deploy: an image that is not a shoal
/// image, or settings spt cannot boot (an environment larger than the
/// guest's argument area), are refused then with 422 and a one-line
/// error, and nothing is stored.
#[test]
fn what_spt_cannot_run_is_refused_at_deploy_with_one_line() {
    let dir = scratch();
    let state = dir.path().join("state");
    let gw = Gateway::start(&state);
    let truncated = dir.path().join("truncated");
    let noop = std::fs::read(image("noop")).unwrap();
    std::fs::write(&truncated, &noop[..noop.len() / 3]).unwrap();
    let big = "x".repeat(1536 << 10);
    for (body, needle) in [
        (format!(r#"{{"image":"{}"}}"#, truncated.display()), "truncated"),
        (format!(r#"{{"image":"{}","memory":"4M","env":{{"BIG":"{big}"}}}}"#, image("noop")), "noop"),
    ] {
        let r = gw.deploy("f", &body);
        let e = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert_eq!(r.status, 422, "{}", &e[..e.len().min(300)]);
        assert!(!e.contains('\n') && e.contains(needle), "not one line naming {needle}: {e:?}");
    }
    assert_eq!(gw.get("/functions").json(), serde_json::json!([]));
    assert!(
        std::fs::read_dir(&state).map(|d| d.flatten().filter(|e| e.file_name() != "token" && e.file_name() != "lock").count()).unwrap_or(0) == 0,
        "a refused deploy wrote to the state directory"
    );
}

/// The gateway's descriptors of a kind (`/proc/PID/fd` link targets that
/// contain `what`).
fn open_fds(pid: u32, what: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| rd.flatten().filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.display().to_string().contains(what))).count())
        .unwrap_or(0)
}

/// What a deploy prepares (the image kept open, the root file system in
/// one sealed memory file shared by the instances) lives as long as the
/// deployment: a replaced function's is dropped for the new one's, a
/// removed function's is closed, and the instances still start from the
/// current one.
#[test]
fn the_prepared_function_is_dropped_when_replaced_or_removed() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let gpid = gw.child.id();
    let fs = dir.path().join("fs");
    std::fs::create_dir_all(&fs).unwrap();
    std::fs::write(fs.join("data.bin"), vec![7u8; 10000]).unwrap();
    let img = image("fileread");
    let deploy = |status| {
        let r = gw.deploy("fr", &format!(r#"{{"image":"{img}","fs":"{}"}}"#, fs.display()));
        assert_eq!(r.status, status, "{}", r.text());
    };
    deploy(201);
    let held = open_fds(gpid, &img);
    assert!(held > 0, "the prepared function keeps its image open");
    assert_eq!(open_fds(gpid, "memfd:shoal-archive"), 1, "after the deploy");
    assert_eq!(gw.get("/fn/fr/").status, 200);
    // A new fs: packed again at the redeploy, the old archive closed.
    std::fs::write(fs.join("data.bin"), vec![7u8; 20000]).unwrap();
    deploy(200);
    assert_eq!((open_fds(gpid, "memfd:shoal-archive"), open_fds(gpid, &img)), (1, held), "after the replacement");
    let r = gw.get("/fn/fr/");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("20000"), "the new instance reads the new fs: {}", r.text());
    assert_eq!(gw.req("DELETE", "/functions/fr", None).status, 200);
    wait_until("the removed function's prepared files closed", || open_fds(gpid, "memfd:shoal-archive") == 0 && open_fds(gpid, &img) == 0);
}

// ------------------------------------------------- security: the gateway

/// `curl` run as `nobody` (`setpriv`): the HTTP status it got.
fn curl_as_nobody(args: &[&str]) -> String {
    let o = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "30"])
        .args(args)
        .output()
        .unwrap();
    stdout(&o)
}

/// The management API answers only requests with the gateway's token
/// (401 otherwise, with `WWW-Authenticate: Bearer` and a one-line JSON
/// error); a local user who is not the gateway's (`nobody`, with curl)
/// can neither read the token nor deploy; invocations stay open unless
/// the gateway is started with `--auth-invoke`; a listen address beyond
/// loopback needs `--insecure-listen`. Before, anyone who could connect
/// deployed a `process` function that ran as the gateway's user.
#[test]
fn the_management_api_needs_the_gateway_token() {
    let dir = scratch();
    let state = dir.path().join("state");
    let gw = Gateway::start(&state);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(state.join("token")).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(gw.token.len(), 64);
    let deploy = format!(r#"{{"image":"{}"}}"#, image("noop"));
    let wrong = "0".repeat(64);
    for (method, path, body) in [
        ("PUT", "/functions/pwn", Some(deploy.as_bytes())),
        ("GET", "/functions", None),
        ("GET", "/functions/pwn", None),
        ("DELETE", "/functions/pwn", None),
        ("GET", "/functions/pwn/logs", None),
        ("GET", "/instances", None),
        ("GET", "/metrics", None),
        ("POST", "/images", Some(b"\x7fELF".as_slice())),
        ("GET", "/nothere", None),
    ] {
        for token in [None, Some(wrong.as_str()), Some(&gw.token[..63])] {
            let r = http_as(gw.addr, method, path, body, Some("application/json"), token);
            assert_eq!(r.status, 401, "{method} {path} with token {token:?}: {}", r.text());
            assert_eq!(r.header("www-authenticate"), Some("Bearer"), "{method} {path}");
            let e = r.json()["error"].as_str().unwrap_or_default().to_string();
            assert!(e.contains("token") && !e.contains('\n'), "{e:?}");
        }
    }
    assert_eq!(gw.get("/functions").json(), serde_json::json!([]), "a refused deploy was stored");
    // With the token: deployed; the invocation needs none.
    assert_eq!(gw.deploy("noop", &deploy).status, 201);
    let r = http_as(gw.addr, "GET", "/fn/noop/", None, None, None);
    assert_eq!((r.status, r.text().as_str()), (200, "noop\n"));
    // As nobody: curl through setpriv, which needs root.
    if shoal_testkit::need(&["root", "setpriv", "curl"]) {
        let url = format!("http://{}/functions/pwn", gw.addr);
        let native = format!(r#"{{"image":"{}","backend":"process"}}"#, image("noop.native"));
        let code = curl_as_nobody(&["-X", "PUT", "-H", "Content-Type: application/json", "--data", &native, &url]);
        assert_eq!(code, "401", "a deploy as nobody");
        let code =
            curl_as_nobody(&["-X", "PUT", "-H", "Content-Type: application/json", "-H", &format!("Authorization: Bearer {wrong}"), "--data", &native, &url]);
        assert_eq!(code, "401", "a deploy as nobody with a guessed token");
        let o = Command::new("setpriv").args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "cat"]).arg(state.join("token")).output().unwrap();
        assert!(!o.status.success() && o.stdout.is_empty(), "nobody read the token: {}", stdout(&o));
        assert_eq!(curl_as_nobody(&[&format!("http://{}/fn/noop/", gw.addr)]), "200", "an invocation as nobody");
        assert_eq!(gw.get("/functions/pwn").status, 404, "nobody's deploy was stored");
    }
    drop(gw);
    // The same token after a restart; with --auth-invoke, invocations need it too.
    let mut opts = test_options();
    opts.push("--auth-invoke".into());
    let gw = Gateway::start_opts(&state, &[], &opts);
    assert_eq!(gw.token.len(), 64);
    let r = http_as(gw.addr, "GET", "/fn/noop/", None, None, None);
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(gw.get("/fn/noop/").text(), "noop\n");
    // Plain HTTP beyond loopback only when asked for.
    let o = shoal().args(["serve", "--listen", "0.0.0.0:0", "--state"]).arg(dir.path().join("other")).output().unwrap();
    assert_clean_error(&o, "--insecure-listen");
}

/// Without `--allow-process` the process backend is refused (403), by
/// path or upload; `image` and `fs` must lie beneath an `--allow-path`
/// directory (403 otherwise: outside, through `..`, through a link out of
/// it, or not existing — the answer tells nothing about the file), while
/// uploads are always allowed. A deployment the gateway's options no
/// longer allow after a restart stays, and its invocations answer 403.
#[test]
fn the_process_backend_and_host_paths_need_the_operator() {
    let dir = scratch();
    let state = dir.path().join("state");
    let allowed = dir.path().join("allowed");
    std::fs::create_dir_all(allowed.join("fs")).unwrap();
    std::fs::copy(image("noop"), allowed.join("noop")).unwrap();
    std::fs::copy(image("noop.native"), allowed.join("noop.native")).unwrap();
    std::os::unix::fs::symlink(image("noop"), allowed.join("link")).unwrap();
    std::os::unix::fs::symlink("/", allowed.join("root")).unwrap();
    let opts = vec!["--allow-path".to_string(), allowed.display().to_string()];
    let gw = Gateway::start_opts(&state, &[], &opts);
    let forbidden = |body: String, needle: &str| {
        let r = gw.deploy("f", &body);
        assert_eq!(r.status, 403, "{body}: {}", r.text());
        let e = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(e.contains(needle) && !e.contains('\n'), "{body}: {e:?} does not mention {needle:?}");
    };
    let a = allowed.display();
    forbidden(format!(r#"{{"image":"{a}/noop.native","backend":"process"}}"#), "--allow-process");
    forbidden(format!(r#"{{"image":"{}"}}"#, image("noop")), "--allow-path");
    forbidden(r#"{"image":"/nonexistent/image"}"#.into(), "--allow-path");
    forbidden(r#"{"image":"/usr/bin/true","backend":"runc"}"#.into(), "--allow-path");
    forbidden(format!(r#"{{"image":"{a}/../allowed/noop"}}"#), "..");
    forbidden(format!(r#"{{"image":"{a}/link"}}"#), "--allow-path");
    forbidden(format!(r#"{{"image":"{a}/root/etc/passwd"}}"#), "--allow-path");
    forbidden(format!(r#"{{"image":"{a}/noop","fs":"/etc"}}"#), "--allow-path");
    forbidden(format!(r#"{{"image":"{a}/noop","fs":"{a}/root/etc"}}"#), "--allow-path");
    // An upload of a native program is no way around the process opt-in.
    let bytes = std::fs::read(image("noop.native")).unwrap();
    let up = http_typed(gw.addr, "POST", "/images", Some(&bytes), "application/octet-stream");
    assert_eq!(up.status, 201, "{}", up.text());
    forbidden(format!(r#"{{"image":"{}","backend":"process"}}"#, up.json()["image"].as_str().unwrap()), "--allow-process");
    assert_eq!(gw.get("/functions").json(), serde_json::json!([]));
    // Allowed: a path beneath the directory, and an upload.
    assert_eq!(gw.deploy("noop", &format!(r#"{{"image":"{a}/noop","fs":"{a}/fs"}}"#)).status, 201);
    assert_eq!(gw.get("/fn/noop/").text(), "noop\n");
    let shoal_image = std::fs::read(image("noop")).unwrap();
    let up = http_typed(gw.addr, "POST", "/images", Some(&shoal_image), "application/octet-stream");
    assert_eq!(gw.deploy("up", &format!(r#"{{"image":"{}"}}"#, up.json()["image"].as_str().unwrap())).status, 201);
    assert_eq!(gw.get("/fn/up/").text(), "noop\n");
    drop(gw);
    // A process function deployed with the opt-in, the gateway restarted without it.
    let mut with = opts.clone();
    with.push("--allow-process".into());
    let gw = Gateway::start_opts(&state, &[], &with);
    assert_eq!(gw.deploy("native", &format!(r#"{{"image":"{a}/noop.native","backend":"process"}}"#)).status, 201);
    assert_eq!(gw.get("/fn/native/").text(), "noop\n");
    drop(gw);
    let gw = Gateway::start_opts(&state, &[], &opts);
    let r = gw.get("/fn/native/");
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.json()["error"].as_str().unwrap_or_default().contains("--allow-process"), "{}", r.text());
    assert_eq!(gw.get("/fn/noop/").text(), "noop\n");
}

/// A static C program that tries to connect to the ports it is given
/// (apps/functions/netprobe.c), built natively.
fn netprobe() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = scratch().keep();
        let here = home().join("apps/functions");
        build_native(&here.join("netprobe.c"), &dir, &[here.join("fn_http.c").to_str().unwrap(), "-lpthread"])
    })
}

/// runc and runsc functions run in a network namespace of their own: a
/// function that connects to the gateway's address, to another
/// function's instance (spt) and to the other container function's port
/// is refused each time (ECONNREFUSED: nothing listens on those ports in
/// its namespace). Before, they shared the host's network and reached the
/// management API.
#[test]
fn container_functions_reach_neither_the_gateway_nor_other_functions() {
    if !shoal_testkit::need(&["root"]) {
        return;
    }
    // Each runtime that is missing is a skip of its part.
    let rts: Vec<&str> = ["runc", "runsc"].into_iter().filter(|rt| shoal_testkit::need(&[rt])).collect();
    if rts.is_empty() {
        return;
    }
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    assert_eq!(gw.deploy("other", &format!(r#"{{"image":"{}"}}"#, image("noop"))).status, 201);
    assert_eq!(gw.get("/fn/other/").text(), "noop\n");
    let port_of = |name: &str| -> u16 {
        let v = gw.get("/instances").json();
        let a = v.as_array().unwrap().iter().find(|i| i["function"] == name).unwrap_or_else(|| panic!("no instance of {name}: {v}"))["address"].clone();
        a.as_str().unwrap().parse::<SocketAddr>().unwrap().port()
    };
    let other = port_of("other");
    for rt in &rts {
        let r = gw.deploy(&format!("probe-{rt}"), &format!(r#"{{"image":"{}","backend":"{rt}"}}"#, netprobe().display()));
        assert_eq!(r.status, 201, "{}", r.text());
        // Started, so that the other probe has its port to try.
        assert_eq!(gw.get(&format!("/fn/probe-{rt}/")).status, 200, "{rt}");
    }
    for rt in &rts {
        let mut ports = vec![gw.addr.port(), other];
        ports.extend(rts.iter().filter(|o| *o != rt).map(|o| port_of(&format!("probe-{o}"))));
        let list: Vec<String> = ports.iter().map(u16::to_string).collect();
        let r = gw.get(&format!("/fn/probe-{rt}/?to={}", list.join(",")));
        assert_eq!(r.status, 200, "{rt}: {}", r.text());
        let want: String = ports.iter().map(|p| format!("{p} refused: Connection refused (errno 111)\n")).collect();
        assert_eq!(r.text(), want, "{rt}: the function reached the gateway ({}) or another function", gw.addr.port());
        // The gateway's instance list says where the instance is.
        let v = gw.get("/instances").json();
        let i = v.as_array().unwrap().iter().find(|i| i["function"] == format!("probe-{rt}").as_str()).unwrap().clone();
        assert!(i["netns"].as_str().is_some_and(|p| p.starts_with("/proc/")), "{rt}: {i}");
    }
    assert_eq!(gw.stop(), Some(0));
}

/// A function that writes 768 MiB to stdout without a newline leaves the
/// gateway under 64 MiB resident (its peak too): a log line is kept up to
/// 16 KiB, the rest dropped with a marker, and a function's log up to
/// 1 MiB. Before, the gateway kept the whole line (795 MB).
#[test]
fn a_flood_without_newline_leaves_the_gateway_small() {
    let dir = scratch();
    let here = home().join("apps/functions");
    let flood = build_image(&here.join("flood.c"), dir.path(), &[here.join("fn_http.c").to_str().unwrap(), "-lpthread"]);
    let gw = Gateway::start(&dir.path().join("state"));
    let pid = gw.child.id();
    let settings = format!(r#"{{"image":"{}","timeout_ms":600000}}"#, flood.display());
    assert_eq!(gw.deploy("flood", &settings).status, 201);
    let t0 = Instant::now();
    let r = gw.get("/fn/flood/?mb=768");
    assert_eq!((r.status, r.text().as_str()), (200, "flooded 768 MiB\n"), "{}", r.text());
    let (rss, peak) = (mem_kib(pid, "VmRSS:"), mem_kib(pid, "VmHWM:"));
    let _ = writeln!(std::io::stderr(), "768 MiB flood in {:?}: gateway VmRSS {rss} KiB, VmHWM {peak} KiB", t0.elapsed());
    assert!(rss < 64 << 10 && peak < 64 << 10, "the gateway grew to {rss} KiB (peak {peak} KiB)");
    // A redeploy stops the instance: its unfinished line is logged, cut.
    assert_eq!(gw.deploy("flood", &settings).status, 200);
    let mut logs = String::new();
    wait_until("the cut line is in the logs", || {
        logs = gw.get("/functions/flood/logs").text();
        logs.contains("more bytes of this line dropped")
    });
    assert!(logs.len() < 2 << 20, "the logs are {} bytes", logs.len());
    let line = logs.lines().find(|l| l.contains("dropped")).unwrap();
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let text = v["line"].as_str().unwrap();
    assert!(text.starts_with(&"x".repeat(16 << 10)) && !text.starts_with(&"x".repeat((16 << 10) + 1)), "the kept line is not 16 KiB of output");
    assert!(text.contains(&format!("{} more bytes", (768u64 << 20) - (16 << 10))), "{}", &text[16 << 10..]);
    assert!(mem_kib(pid, "VmHWM:") < 64 << 10);
}

/// `POST /images` takes only `application/octet-stream` (415 for none, or
/// a type a web page can send without asking); all uploads together stay
/// within `--upload-quota` (413 beyond); an upload no function uses is
/// deleted when a function stops using it, and at the gateway's start.
#[test]
fn uploads_have_a_type_a_quota_and_unused_ones_are_collected() {
    let dir = scratch();
    let state = dir.path().join("state");
    let noop = std::fs::read(image("noop")).unwrap();
    let fib = std::fs::read(image("fib")).unwrap();
    // Room for one of the two, not for both.
    let quota = (noop.len().max(fib.len()) * 3 / 2).to_string();
    let mut opts = test_options();
    opts.extend(["--upload-quota".to_string(), quota.clone()]);
    let gw = Gateway::start_opts(&state, &[], &opts);
    for ct in [None, Some("text/plain"), Some("application/x-www-form-urlencoded"), Some("multipart/form-data; boundary=x")] {
        let r = http_as(gw.addr, "POST", "/images", Some(&noop), ct, Some(&gw.token));
        assert_eq!(r.status, 415, "{ct:?}: {}", r.text());
        assert!(r.json()["error"].as_str().unwrap_or_default().contains("application/octet-stream"));
    }
    let r = http_as(gw.addr, "PUT", "/functions/f", Some(format!(r#"{{"image":"{}"}}"#, image("noop")).as_bytes()), Some("text/plain"), Some(&gw.token));
    assert_eq!(r.status, 415, "{}", r.text());
    assert!(!state.join("images").exists(), "a refused upload stored something");
    let up = |bytes: &[u8]| http_typed(gw.addr, "POST", "/images", Some(bytes), "application/octet-stream");
    let first = up(&noop);
    assert_eq!(first.status, 201, "{}", first.text());
    let r = up(&fib);
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(r.json()["error"].as_str().unwrap_or_default().contains("quota"), "{}", r.text());
    let count = || std::fs::read_dir(state.join("images")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(count(), 1, "the refused upload left a file");
    // Deployed, then replaced by a path: the upload goes, the quota has room.
    assert_eq!(gw.deploy("f", &format!(r#"{{"image":"{}"}}"#, first.json()["image"].as_str().unwrap())).status, 201);
    assert_eq!(gw.deploy("f", &format!(r#"{{"image":"{}"}}"#, image("noop"))).status, 200);
    assert_eq!(count(), 0);
    let second = up(&fib);
    assert_eq!(second.status, 201, "{}", second.text());
    assert_eq!(count(), 1);
    // Never deployed: deleted at the next start.
    drop(gw);
    let gw = Gateway::start_opts(&state, &[], &opts);
    assert_eq!(count(), 0, "an unused upload survived the restart");
    assert!(std::fs::read_to_string(&gw.log).unwrap_or_default().contains("deleted 1 uploaded image"));
    assert_eq!(gw.get("/fn/f/").text(), "noop\n");
}

// ---------------------------------------------------------------------
// Templates (spt): cold starts are copies of an instance booted to its
// ready point at deploy (docs/serve.md "Templates").

/// The pids of the templates a function's logs announce, in order.
fn template_pids(gw: &Gateway, name: &str) -> Vec<u32> {
    let logs = gw.get(&format!("/functions/{name}/logs")).text();
    logs.lines()
        .filter_map(|l| l.split("template ready, pid ").nth(1))
        .filter_map(|r| r.split(|c: char| !c.is_ascii_digit()).next().and_then(|p| p.parse().ok()))
        .collect()
}

/// `curl` one request to `url` on a new connection: (status, the
/// x-shoal-instance header, body).
fn curl(url: &str) -> (u16, String, String) {
    let o = Command::new("curl").args(["-s", "-S", "-m", "60", "-D", "-", url]).output().unwrap();
    assert!(o.status.success(), "curl {url}: {}", stderr(&o));
    let text = stdout(&o);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let inst = head.lines().find_map(|l| l.strip_prefix("x-shoal-instance:")).unwrap_or("").trim().to_string();
    (status, inst, body.to_string())
}

/// A field `key=value` of tmpl's answer.
fn field<'a>(body: &'a str, key: &str) -> &'a str {
    body.split_whitespace().find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('='))).unwrap_or_else(|| panic!("no {key} in {body:?}"))
}

/// 200 cold requests one after the other (curl, a new connection each),
/// each answered by a fresh copy of the one template: its own request
/// counter is 1, its random bytes are its own (200 different), it sees
/// only its own file, and every instance id differs.
#[test]
fn template_200_sequential_cold_requests_each_on_a_fresh_copy() {
    if !shoal_testkit::need(&["curl"]) {
        return;
    }
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let r = gw.deploy("t", &format!(r#"{{"image":"{}","requests_per_instance":1}}"#, image("tmpl")));
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["template"], true, "templates are on by default on spt");
    let mut instances = BTreeSet::new();
    let mut randoms = BTreeSet::new();
    for i in 0..200 {
        let (status, inst, body) = curl(&format!("http://{}/fn/t/", gw.addr));
        assert_eq!(status, 200, "request {i}: {body}");
        assert_eq!(field(&body, "count"), "1", "request {i} was not the first of its instance: {body}");
        assert_eq!(field(&body, "marks"), "1", "request {i} saw another copy's file: {body}");
        assert!(instances.insert(inst.clone()), "request {i}: instance {inst} answered twice");
        assert!(randoms.insert(field(&body, "random").to_string()), "request {i}: random bytes repeated: {body}");
    }
    let t = template_pids(&gw, "t");
    assert_eq!(t.len(), 1, "one template for all 200: {t:?}");
    assert!(process_alive(t[0]), "the template must still run");
}

/// 100 cold requests at once (hey -c 100), each a copy of the template:
/// all answered 200. Copies start outside the function's instance lock,
/// so requests to a function whose one instance takes several at once
/// (`concurrency` 4, `max_instances` 1) wait for the instance that is
/// starting: 8 at once are all answered by one cold start.
#[test]
fn template_100_concurrent_cold_requests_all_answered() {
    if !shoal_testkit::need(&["hey"]) {
        return;
    }
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let r = gw.deploy("t", &format!(r#"{{"image":"{}","requests_per_instance":1,"max_instances":100}}"#, image("noop")));
    assert_eq!(r.status, 201, "{}", r.text());
    let (statuses, errors, _) = hey(&format!("http://{}/fn/t/", gw.addr), 100, 100);
    assert_eq!(statuses, vec![(200, 100)], "errors: {errors:?}");
    assert!(errors.is_empty(), "{errors:?}");
    let cold_starts = |name: &str| {
        let m = gw.get("/metrics").text();
        let key = format!("shoal_cold_starts_total{{function=\"{name}\"}}");
        parse_prometheus(&m).into_iter().find(|(k, _)| *k == key).map(|(_, v)| v).unwrap_or_else(|| panic!("no {key} in {m}"))
    };
    assert_eq!(cold_starts("t"), 100.0, "every request a cold start");
    let r = gw.deploy("shared", &format!(r#"{{"image":"{}","concurrency":4,"max_instances":1}}"#, image("noop")));
    assert_eq!(r.status, 201, "{}", r.text());
    let (statuses, errors, _) = hey(&format!("http://{}/fn/shared/", gw.addr), 8, 8);
    assert_eq!(statuses, vec![(200, 8)], "errors: {errors:?}");
    assert_eq!(cold_starts("shared"), 1.0, "one instance for all 8");
    assert_eq!(gw.instances("shared").len(), 1);
}

/// Two copies of one template do not see each other's memory, files or
/// random stream: the first writes a global variable and a file and draws
/// random bytes; the second (a fresh copy) starts from the template's
/// state, not the first's.
#[test]
fn two_copies_of_a_template_share_no_memory_files_or_random_bytes() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let r = gw.deploy("t", &format!(r#"{{"image":"{}","requests_per_instance":3}}"#, image("tmpl")));
    assert_eq!(r.status, 201, "{}", r.text());
    let a0 = gw.get("/fn/t/poison");
    assert_eq!(a0.text(), "poisoned\n");
    let a1 = gw.get("/fn/t/").text();
    let a2 = gw.get("/fn/t/").text();
    assert_eq!((field(&a1, "count"), field(&a1, "poison"), field(&a1, "marks")), ("2", "1", "1"), "{a1}");
    assert_eq!((field(&a2, "count"), field(&a2, "marks")), ("3", "2"), "{a2}");
    let b = gw.get("/fn/t/");
    assert_eq!(b.header("x-shoal-cold-start"), Some("true"));
    assert_ne!(b.header("x-shoal-instance"), a0.header("x-shoal-instance"));
    let b = b.text();
    assert_eq!((field(&b, "count"), field(&b, "poison"), field(&b, "marks")), ("1", "0", "1"), "the second copy saw the first's state: {b}");
    let rnd: BTreeSet<&str> = [&a1, &a2, &b].iter().map(|t| field(t, "random")).collect();
    assert_eq!(rnd.len(), 3, "random bytes repeated across copies: {a1} {a2} {b}");
    assert_eq!(template_pids(&gw, "t").len(), 1);
}

/// A program that crashes (or exits) before its ready point fails the
/// deploy with 422 and says why, with the template's last words; nothing
/// is deployed.
#[test]
fn a_template_that_dies_before_its_ready_point_fails_the_deploy() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let r = gw.deploy("t", &format!(r#"{{"image":"{}","env":{{"CRASH_BEFORE_READY":"1"}}}}"#, image("tmpl")));
    assert_eq!(r.status, 422, "{}", r.text());
    let e = r.json()["error"].as_str().unwrap_or_default().to_string();
    assert!(
        e.starts_with(
            "the template of t (its instance stopped where the program first waits for a connection) failed: the template ended before its ready point"
        ),
        "{e}"
    );
    assert!(e.contains("; its last words: shoal: the guest crashed: SIGSEGV"), "{e}");
    assert_eq!(gw.get("/functions/t").status, 404, "nothing may be deployed");
    // Off, the same program deploys (and fails at its first request).
    let r = gw.deploy("t", &format!(r#"{{"image":"{}","template":false,"env":{{"CRASH_BEFORE_READY":"1"}}}}"#, image("tmpl")));
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(gw.get("/fn/t/").status, 502);
}

/// A copy that crashes is replaced by a new copy of the same template; a
/// template that dies is built again at the next cold start; a redeploy
/// builds a new one and stops the old.
#[test]
fn crashed_copies_are_replaced_and_a_dead_template_is_rebuilt() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let deploy = || gw.deploy("c", &format!(r#"{{"image":"{}"}}"#, image("crash")));
    assert_eq!(deploy().status, 201);
    assert_eq!(gw.get("/fn/c/").text(), "alive\n");
    assert_eq!(gw.get("/fn/c/crash").status, 502);
    let r = gw.get("/fn/c/");
    assert_eq!((r.status, r.header("x-shoal-cold-start")), (200, Some("true")), "{}", r.text());
    let t = template_pids(&gw, "c");
    assert_eq!(t.len(), 1, "the crash must not cost the template: {t:?}");
    // The template killed from outside: the next cold start builds one.
    // SAFETY: kill(2) on a pid the gateway's logs name.
    unsafe { libc::kill(t[0] as i32, libc::SIGKILL) };
    wait_until("the gateway notes the template's end", || gw.get("/functions/c/logs").text().contains("template exited"));
    for i in gw.instances("c") {
        // SAFETY: kill(2) on the instance's pid.
        unsafe { libc::kill(i.1 as i32, libc::SIGKILL) };
    }
    wait_until("the instance is gone", || gw.instances("c").is_empty());
    let r = gw.get("/fn/c/");
    assert_eq!((r.status, r.text().as_str()), (200, "alive\n"));
    let t2 = template_pids(&gw, "c");
    assert_eq!(t2.len(), 2, "{t2:?}");
    assert_eq!(deploy().status, 200);
    let t3 = template_pids(&gw, "c");
    assert_eq!(t3.len(), 3, "a redeploy builds a new template: {t3:?}");
    wait_until("the replaced template is stopped", || !process_alive(t2[1]));
    assert!(process_alive(t3[2]));
}

/// A hostile copy: every host system call it makes past its guest kernel
/// that only the template may make (fork, placing descriptors, a filter,
/// the parent-death signal, the boot-info page, the control channel), and
/// those no instance may make (signals, another process's memory), kill
/// it with SIGSYS (its last words name the call); the template and its
/// other copies go on.
#[test]
fn a_hostile_copy_cannot_fork_signal_or_reach_its_template() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    assert_eq!(gw.deploy("t", &format!(r#"{{"image":"{}"}}"#, image("tmpl"))).status, 201);
    let tpl = template_pids(&gw, "t")[0];
    // (The call's number: the sandbox's message names only some calls.)
    let calls = [
        (format!("nr=56&a={}", libc::CLONE_PARENT), 56),
        ("nr=57".to_string(), 57),
        ("nr=435&a=0&b=0".to_string(), 435),
        (format!("nr=62&a={tpl}&b=9"), 62),
        (format!("nr=200&a={tpl}&b=9"), 200),
        (format!("nr=310&a={tpl}"), 310),
        (format!("nr=101&a=16&b={tpl}"), 101),
        (format!("nr=434&a={tpl}"), 434),
        ("nr=292&a=4&b=3".to_string(), 292),
        ("nr=317&a=1".to_string(), 317),
        ("nr=157&a=1&b=9".to_string(), 157),
        ("nr=47&a=63".to_string(), 47),
        ("nr=10&a=65536&b=4096&c=3".to_string(), 10),
    ];
    for (q, nr) in &calls {
        let r = gw.get(&format!("/fn/t/host?{q}"));
        assert_eq!(r.status, 502, "{q}: {}", r.text());
        let e = r.json()["error"].as_str().unwrap_or_default().to_string();
        let words = "its last words: shoal: the guest made a system call that the spt sandbox forbids and was killed (system call ";
        assert!(e.contains(&format!("{words}{nr})")) || e.contains(&format!("{words}{nr}, ")), "{q}: {e}");
    }
    assert!(process_alive(tpl), "the template must survive its copies");
    let r = gw.get("/fn/t/").text();
    assert_eq!(field(&r, "count"), "1", "{r}");
    assert_eq!(template_pids(&gw, "t"), vec![tpl], "still the first template");
}

/// The user namespace of process `pid` (`user:[INODE]`).
fn userns(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/user")).map(|p| p.display().to_string()).unwrap_or_default()
}

/// Every live (not zombie) process in user namespace `ns`, sorted.
fn in_userns(ns: &str) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .filter(|&p| process_alive(p) && userns(p) == ns)
        .collect();
    pids.sort();
    pids
}

/// A template's program that forks on the host before its ready point
/// (an inline `clone(CLONE_PARENT)`, the call the template's filter
/// allows for its copies) gets EAGAIN: the template's pids cgroup holds
/// one process until the gateway asks for copies. In the template's user
/// namespace are only the template and the copies the gateway made, and
/// nothing once the gateway stops (/proc).
#[test]
fn a_template_cannot_fork_before_its_ready_point() {
    if !shoal_testkit::need(&["root"]) {
        return;
    }
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let r = gw.deploy("f", &format!(r#"{{"image":"{}","env":{{"FORK_BEFORE_READY":"1"}}}}"#, image("tmpl")));
    assert_eq!(r.status, 201, "{}", r.text());
    let tpl = template_pids(&gw, "f")[0];
    let ns = userns(tpl);
    assert!(ns.starts_with("user:["), "{ns}");
    assert_ne!(ns, userns(std::process::id()), "the template has a user namespace of its own");
    let body = gw.get("/fn/f/").text();
    assert_eq!(field(&body, "fork"), "-11", "the fork before the ready point must fail with EAGAIN: {body}");
    let mut want = vec![tpl];
    want.extend(gw.instances("f").iter().map(|i| i.1));
    want.sort();
    assert_eq!(want.len(), 2, "{want:?}");
    assert_eq!(in_userns(&ns), want, "only the template and its copy");
    assert_eq!(gw.stop(), Some(0));
    wait_until("nothing of the function is left", || in_userns(&ns).is_empty());
}

/// The live processes of the pids cgroups of the templates gateway `gw`
/// made (`shoal-template-GATEWAYPID-N`), by cgroup.
fn template_cgroups(gw: u32) -> Vec<(String, Vec<u32>)> {
    let root = Path::new("/sys/fs/cgroup/pids");
    let mut out: Vec<(String, Vec<u32>)> = std::fs::read_dir(root)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("shoal-template-{gw}-")))
                .map(|e| {
                    let procs = std::fs::read_to_string(e.path().join("cgroup.procs")).unwrap_or_default();
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        procs.split_whitespace().filter_map(|p| p.parse().ok()).filter(|&p| process_alive(p)).collect(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// A template's program that forges the ready word on its control
/// channel (so that the gateway lets its template make copies while the
/// program still runs) and forks: it gets no more processes than the
/// gateway allows its template (the template and twice `max_instances`),
/// its answer to the copy request is no copy (500), and the processes it
/// made are killed with the template; nothing is left once the gateway
/// stops.
#[test]
fn a_template_that_forges_its_ready_point_is_bounded_and_its_forks_killed() {
    if !shoal_testkit::need(&["root"]) || !Path::new("/sys/fs/cgroup/pids/tasks").is_file() {
        return;
    }
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let gw_pid = gw.child.id();
    let r = gw.deploy("f", &format!(r#"{{"image":"{}","max_instances":1,"env":{{"FORGE_READY":"1"}}}}"#, image("tmpl")));
    assert_eq!(r.status, 201, "{}", r.text());
    let tpl = template_pids(&gw, "f")[0];
    let cg = template_cgroups(gw_pid);
    assert_eq!(cg.len(), 1, "{cg:?}");
    let max = std::fs::read_to_string(format!("/sys/fs/cgroup/pids/{}/pids.max", cg[0].0)).unwrap();
    assert_eq!(max.trim(), "3", "the template and twice max_instances");
    wait_until("the program made what it may", || template_cgroups(gw_pid)[0].1.len() == 3);
    let strays: Vec<u32> = template_cgroups(gw_pid)[0].1.iter().copied().filter(|&p| p != tpl).collect();
    assert_eq!(strays.len(), 2, "{strays:?}");
    let r = gw.get("/fn/f/");
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.text().contains("is not a copy of it"), "{}", r.text());
    wait_until("the forks of the templates are killed", || template_cgroups(gw_pid).iter().all(|(_, p)| p.is_empty()));
    assert!(strays.iter().all(|&p| !process_alive(p)), "{strays:?}");
    assert!(gw.get("/functions/f/logs").text().contains("killed 2 process(es) the template made"));
    assert_eq!(gw.stop(), Some(0));
    assert!(template_cgroups(gw_pid).iter().all(|(_, p)| p.is_empty()));
}

// ---------------------------------------------------------------------
// Templates on hvt: cold starts are new VMs of the template's memory
// (copy-on-write) and vCPU state, from empty VMs made ahead.

/// 40 cold requests one after the other (curl, a new connection each),
/// each on a fresh copy of the one hvt template (count 1, random bytes of
/// its own, its own file). 40, not spt's 200: each hvt copy is a fork of
/// the template's VMM plus a KVM VM, about 2-3 ms of this 2-core host's
/// CPU to make and stop, and the suite is over its time budget; 40 bound
/// the test to a few seconds and still cycle the empty-VM pool many times.
#[test]
fn hvt_template_sequential_cold_requests_each_on_a_fresh_copy() {
    if !tenders().contains(&"hvt") || !shoal_testkit::need(&["curl"]) {
        return;
    }
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let r = gw.deploy("t", &format!(r#"{{"image":"{}","backend":"hvt","requests_per_instance":1}}"#, image("tmpl")));
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["template"], true, "templates are on by default on hvt");
    let mut instances = BTreeSet::new();
    let mut randoms = BTreeSet::new();
    for i in 0..40 {
        let (status, inst, body) = curl(&format!("http://{}/fn/t/", gw.addr));
        assert_eq!(status, 200, "request {i}: {body}");
        assert_eq!(field(&body, "count"), "1", "request {i} was not the first of its instance: {body}");
        assert_eq!(field(&body, "marks"), "1", "request {i} saw another copy's file: {body}");
        assert!(instances.insert(inst.clone()), "request {i}: instance {inst} answered twice");
        assert!(randoms.insert(field(&body, "random").to_string()), "request {i}: random bytes repeated: {body}");
    }
    let t = template_pids(&gw, "t");
    assert_eq!(t.len(), 1, "one template for all: {t:?}");
    assert!(process_alive(t[0]), "the template must still run");
}

/// 40 cold requests at once (hey -c 40) on hvt, each a copy of the
/// template: all answered 200, all cold starts.
#[test]
fn hvt_template_concurrent_cold_requests_all_answered() {
    if !tenders().contains(&"hvt") || !shoal_testkit::need(&["hey"]) {
        return;
    }
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let r = gw.deploy("t", &format!(r#"{{"image":"{}","backend":"hvt","requests_per_instance":1,"max_instances":40}}"#, image("noop")));
    assert_eq!(r.status, 201, "{}", r.text());
    let (statuses, errors, _) = hey(&format!("http://{}/fn/t/", gw.addr), 40, 40);
    assert_eq!(statuses, vec![(200, 40)], "errors: {errors:?}");
    let m = gw.get("/metrics").text();
    let cold = parse_prometheus(&m).into_iter().find(|(k, _)| k.starts_with("shoal_cold_starts_total")).map(|(_, v)| v).unwrap_or(0.0);
    assert_eq!(cold, 40.0, "every request a cold start: {m}");
    assert_eq!(template_pids(&gw, "t").len(), 1);
}

/// An hvt program that crashes before its ready point fails the deploy
/// with 422 and the template's last words; a copy that crashes is
/// replaced by a new copy of the same template.
#[test]
fn hvt_template_crash_before_ready_fails_the_deploy_and_a_crashed_copy_is_replaced() {
    if !tenders().contains(&"hvt") {
        return;
    }
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let r = gw.deploy("t", &format!(r#"{{"image":"{}","backend":"hvt","env":{{"CRASH_BEFORE_READY":"1"}}}}"#, image("tmpl")));
    assert_eq!(r.status, 422, "{}", r.text());
    let e = r.json()["error"].as_str().unwrap_or_default().to_string();
    assert!(
        e.starts_with(
            "the template of t (its instance stopped where the program first waits for a connection) failed: the template ended before its ready point (the program's first wait for a connection); its last words: shoal: guest fault: page fault"
        ),
        "{e}"
    );
    assert_eq!(gw.get("/functions/t").status, 404, "nothing may be deployed");
    assert_eq!(gw.deploy("c", &format!(r#"{{"image":"{}","backend":"hvt"}}"#, image("crash"))).status, 201);
    assert_eq!(gw.get("/fn/c/").text(), "alive\n");
    assert_eq!(gw.get("/fn/c/crash").status, 502);
    let r = gw.get("/fn/c/");
    assert_eq!((r.status, r.header("x-shoal-cold-start"), r.text().as_str()), (200, Some("true"), "alive\n"));
    let t = template_pids(&gw, "c");
    assert_eq!(t.len(), 1, "the crash must not cost the template: {t:?}");
    // The template killed from outside: the next cold start builds one.
    // SAFETY: kill(2) on a pid the gateway's logs name.
    unsafe { libc::kill(t[0] as i32, libc::SIGKILL) };
    wait_until("the gateway notes the template's end", || gw.get("/functions/c/logs").text().contains("template exited"));
    for i in gw.instances("c") {
        // SAFETY: kill(2) on the instance's pid.
        unsafe { libc::kill(i.1 as i32, libc::SIGKILL) };
    }
    wait_until("the instance is gone", || gw.instances("c").is_empty());
    assert_eq!(gw.get("/fn/c/").text(), "alive\n");
    assert_eq!(template_pids(&gw, "c").len(), 2);
}

/// `"template": false` starts every instance by exec, as before; the
/// setting is refused off spt.
#[test]
fn template_false_starts_instances_by_exec() {
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let r = gw.deploy("n", &format!(r#"{{"image":"{}","template":false}}"#, image("noop")));
    assert_eq!((r.status, &r.json()["template"]), (201, &serde_json::Value::Bool(false)));
    assert_eq!(gw.get("/fn/n/").text(), "noop\n");
    assert!(template_pids(&gw, "n").is_empty());
    let r = gw.deploy("p", &format!(r#"{{"image":"{}","backend":"process","template":true}}"#, image("noop.native")));
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(r.json()["error"], "template: only the spt and hvt backends start instances from a template, not process");
}

/// A Node.js handler: a no-op, the request echoed, a throw.
const NODE_HANDLER: &str = r#"exports.handle = async (req) => {
  if (req.path === '/throw') throw new Error('the node handler was asked to fail');
  if (req.path === '/echo') return { status: 201, type: 'application/octet-stream', body: req.body };
  return `hello from Node ${process.version.split('.')[0]} ${req.method} ${req.query}\n`;
};
"#;

/// The same in Python.
const PY_HANDLER: &str = r#"import sys
def handle(req):
    if req["path"] == "/throw":
        raise ValueError("the python handler was asked to fail")
    if req["path"] == "/echo":
        return {"status": 201, "type": "application/octet-stream", "body": req["body"]}
    return f"hello from Python {sys.version_info[0]}.{sys.version_info[1]} {req['method']} {req['query']}\n"
"#;

/// The function runtimes (`"runtime": "node"|"python"` + a handler file):
/// the host's /usr/bin/node and /usr/bin/python3.11 serve the handler's
/// `handle(req)` on spt and hvt (copies of a template) and process: the handler's
/// answer, a POST body echoed with the status and type it chose, a throw
/// as 500 with its message, which the logs also hold.
#[test]
fn node_and_python_runtimes_serve_a_handler() {
    if !shoal_testkit::need(&["root", "node", "python3.11"]) {
        return;
    }
    let dir = scratch();
    std::fs::write(dir.path().join("h.js"), NODE_HANDLER).unwrap();
    std::fs::write(dir.path().join("h.py"), PY_HANDLER).unwrap();
    let pool = dir.path().join("pool");
    let gw = Gateway::start_with(&dir.path().join("state"), &[("SHOAL_POOL_DIR", &pool)]);
    for b in backends() {
        for (rt, file, hello) in [("node", "h.js", "hello from Node v20 GET a=1\n"), ("python", "h.py", "hello from Python 3.11 GET a=1\n")] {
            let name = format!("{rt}-{b}");
            let handler = dir.path().join(file);
            let r = gw.deploy(&name, &format!(r#"{{"runtime":"{rt}","handler":"{}","backend":"{b}"}}"#, handler.display()));
            assert_eq!(r.status, 201, "{rt} on {b}: {}", r.text());
            assert_eq!(
                r.json()["executable"].as_str().or(r.json()["image"].as_str()),
                Some(if rt == "node" { "/usr/bin/node" } else { "/usr/bin/python3.11" })
            );
            // spt and hvt: from a template (the copies inherit the
            // read-only host directories, and on hvt map the template's
            // mapped libraries again), as every function there.
            let shoal = b == "spt" || b == "hvt";
            assert_eq!(r.json()["template"], shoal, "{rt} on {b}");
            // Node's 99 MB executable shares its pages from the pool on spt
            // by default, as `shoal run` does (Python's 7 MB is copied).
            let pooled = rt == "node" && b == "spt";
            assert_eq!(r.json()["mem_mode"], if pooled { "pool" } else { "copy" }, "{rt} on {b}");
            let built = r.json()["image"].as_str().and_then(|i| Path::new(i).file_name()?.to_str().map(str::to_string)).unwrap_or_default();
            let r = gw.get(&format!("/fn/{name}/?a=1"));
            assert_eq!((r.status, r.text().as_str()), (200, hello), "{rt} on {b}");
            if shoal {
                let t = template_pids(&gw, &name);
                let i = gw.instances(&name);
                assert_eq!((t.len(), i.len()), (1, 1), "{rt} on {b}: one template, one copy");
                assert_ne!(t[0], i[0].1, "{rt} on {b}: the template never serves");
                if pooled {
                    // The pool holds the pages of the image the instance
                    // runs (its `exec` library is named by the built
                    // image's cache key), and the copy maps them from there.
                    let lib = format!("exec@{}", built.get(..16).unwrap_or("?"));
                    let held = std::fs::read_dir(&pool).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&lib)).count();
                    assert!(held > 0, "the pool holds no page of {built} ({lib}*)");
                    let maps = std::fs::read_to_string(format!("/proc/{}/maps", i[0].1)).unwrap_or_default();
                    assert!(maps.lines().any(|l| l.contains(&pool.join(&lib).display().to_string())), "the copy maps no {lib}* from the pool:\n{maps}");
                }
            }
            let body: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
            let r = gw.req("POST", &format!("/fn/{name}/echo"), Some(&body));
            assert_eq!((r.status, r.header("content-type")), (201, Some("application/octet-stream")), "{rt} on {b}");
            assert!(r.body == body, "{rt} on {b}: the body did not come back intact");
            let r = gw.get(&format!("/fn/{name}/throw"));
            assert_eq!((r.status, r.text().as_str()), (500, format!("the {rt} handler was asked to fail\n").as_str()), "{rt} on {b}");
            let logs = gw.get(&format!("/functions/{name}/logs")).text();
            assert!(logs.contains(&format!("the {rt} handler was asked to fail")), "{rt} on {b}: {logs}");
            // The instance lives on.
            assert_eq!(gw.get(&format!("/fn/{name}/?a=1")).header("x-shoal-cold-start"), Some("false"), "{rt} on {b}");
        }
    }
    if backends().contains(&"hvt") && shoal_testkit::need(&["curl"]) {
        // 20 cold requests one after the other, each on a fresh hvt copy
        // of one Python template (its counter 1, its own random bytes):
        // every copy maps the libraries the template mapped from /usr again.
        std::fs::write(dir.path().join("count.py"), PY_COUNTER).unwrap();
        let r = gw.deploy(
            "py-cold",
            &format!(r#"{{"runtime":"python","handler":"{}","backend":"hvt","requests_per_instance":1}}"#, dir.path().join("count.py").display()),
        );
        assert_eq!((r.status, &r.json()["template"]), (201, &serde_json::Value::Bool(true)), "{}", r.text());
        let mut instances = BTreeSet::new();
        let mut randoms = BTreeSet::new();
        for i in 0..20 {
            let (status, inst, body) = curl(&format!("http://{}/fn/py-cold/", gw.addr));
            assert_eq!(status, 200, "request {i}: {body}");
            assert_eq!(field(&body, "count"), "1", "request {i} was not the first of its instance: {body}");
            assert!(instances.insert(inst.clone()), "request {i}: instance {inst} answered twice");
            assert!(randoms.insert(field(&body, "random").to_string()), "request {i}: random bytes repeated: {body}");
        }
        let t = template_pids(&gw, "py-cold");
        assert_eq!(t.len(), 1, "one template for all 20: {t:?}");
        assert!(process_alive(t[0]), "the template must still run");
    }
    assert_eq!(gw.stop(), Some(0));
}

/// A Python handler that counts its requests and draws random bytes.
const PY_COUNTER: &str = r#"import os
count = 0
def handle(req):
    global count
    count += 1
    return f"count={count} random={os.urandom(8).hex()}\n"
"#;

/// Runtime deploys are checked before anything runs: an unknown runtime,
/// a handler that is missing, of the wrong kind, relative, or given with
/// an image, and a handler without a runtime are refused with one line
/// (the API's 422, `shoal fn deploy`'s error and exit status).
#[test]
fn runtime_deploys_are_checked() {
    let dir = scratch();
    let d = dir.path();
    std::fs::write(d.join("h.js"), NODE_HANDLER).unwrap();
    std::fs::write(d.join("h.py"), PY_HANDLER).unwrap();
    let gw = Gateway::start(&d.join("state"));
    let js = d.join("h.js").display().to_string();
    let missing = d.join("nothing.js").display().to_string();
    for (body, needle) in [
        (format!(r#"{{"runtime":"ruby","handler":"{js}"}}"#), "unknown runtime `ruby`: expected node or python".to_string()),
        (format!(r#"{{"runtime":"node","handler":"{missing}"}}"#), format!("handler {missing}: No such file or directory")),
        (format!(r#"{{"runtime":"python","handler":"{js}"}}"#), format!("handler {js}: a python handler is a .py file")),
        (r#"{"runtime":"node","handler":"h.js"}"#.to_string(), "handler h.js: give an absolute path".to_string()),
        (r#"{"runtime":"node"}"#.to_string(), "runtime node: the body has no \"handler\"".to_string()),
        (format!(r#"{{"runtime":"node","handler":"{js}","image":"/usr/bin/node"}}"#), "has a \"handler\", not an \"image\"".to_string()),
        (format!(r#"{{"handler":"{js}","image":"/usr/bin/node"}}"#), "handler: only a runtime function has one".to_string()),
        (format!(r#"{{"runtime":"node","handler":"{}"}}"#, d.display()), format!("handler {}: a node handler is a .js file", d.display())),
    ] {
        let r = gw.deploy("rt", &body);
        assert_eq!(r.status, 422, "{body}: {}", r.text());
        let e = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(e.contains(&needle) && !e.contains('\n'), "{body}: {e}");
    }
    assert_eq!(gw.get("/functions").json(), serde_json::json!([]), "a refused deploy left a function");
    let url = format!("http://{}", gw.addr);
    let o = output(shoal().args(["fn", "--gateway", &url, "deploy", "rt", "--runtime", "perl", &js]).arg("--state").arg(d.join("state")));
    assert_clean_error(&o, "unknown runtime `perl`: expected node or python");
    let o = output(shoal().args(["fn", "--gateway", &url, "deploy", "rt", "--runtime", "node", "--upload", &js]).arg("--state").arg(d.join("state")));
    assert_clean_error(&o, "--upload sends an image");
    // A handler beneath no allowed path is refused before it is read.
    let o = output(shoal().args(["fn", "--gateway", &url, "deploy", "rt", "--runtime", "node", "/etc/hostname.js"]).arg("--state").arg(d.join("state")));
    assert_clean_error(&o, "handler /etc/hostname.js: ");
}

/// The runtime directories under `STATE/runtimes` (digest names), sorted.
fn runtime_dirs(state: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(state.join("runtimes")).map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
    v.sort();
    v
}

/// A runtime function's directory (`STATE/runtimes/SHA256/`) is deleted
/// once no function uses it: two functions of one handler share one, which
/// stays until the second is gone; a redeploy with another handler deletes
/// the old one; a directory no function uses (a gateway killed mid-way)
/// goes at the next start. The process backend: nothing starts at deploy.
#[test]
fn runtime_directories_are_deleted_when_no_function_uses_them() {
    if !shoal_testkit::need(&["python3.11"]) {
        return;
    }
    let dir = scratch();
    let d = dir.path();
    std::fs::write(d.join("h.py"), PY_HANDLER).unwrap();
    std::fs::write(d.join("h2.py"), format!("{PY_HANDLER}\n# two\n")).unwrap();
    let state = d.join("state");
    let gw = Gateway::start(&state);
    let deploy = |name: &str, file: &str| {
        let r = gw.deploy(name, &format!(r#"{{"runtime":"python","handler":"{}","backend":"process"}}"#, d.join(file).display()));
        assert!(r.status == 201 || r.status == 200, "{name}: {}", r.text());
    };
    deploy("a", "h.py");
    deploy("b", "h.py");
    let first = runtime_dirs(&state);
    assert_eq!(first.len(), 1, "one handler, one directory: {first:?}");
    assert_eq!(gw.req("DELETE", "/functions/a", None).status, 200);
    assert_eq!(runtime_dirs(&state), first, "b still uses it");
    deploy("b", "h2.py");
    let second = runtime_dirs(&state);
    assert_eq!(second.len(), 1, "{second:?}");
    assert_ne!(second, first, "the redeploy's old directory must go");
    assert_eq!(gw.req("DELETE", "/functions/b", None).status, 200);
    assert_eq!(runtime_dirs(&state), Vec::<String>::new());
    // Left behind (as by a gateway killed between its copy and its save):
    // gone at the next start.
    deploy("c", "h.py");
    assert_eq!(gw.stop(), Some(0));
    let stray = state.join("runtimes").join("f".repeat(64));
    std::fs::create_dir(&stray).unwrap();
    let gw = Gateway::start(&state);
    assert_eq!(runtime_dirs(&state), first, "only c's directory is kept");
    assert_eq!(gw.get("/functions").status, 200);
}

/// hvt: two copies of one template do not see each other's memory, files
/// or random stream (as `two_copies_of_a_template_share_no_memory_files_or_random_bytes`
/// on spt), and a copy's own guest file is not in the next copy.
#[test]
fn hvt_two_copies_of_a_template_share_no_memory_files_or_random_bytes() {
    if !tenders().contains(&"hvt") {
        return;
    }
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let r = gw.deploy("t", &format!(r#"{{"image":"{}","backend":"hvt","requests_per_instance":3}}"#, image("tmpl")));
    assert_eq!(r.status, 201, "{}", r.text());
    let a0 = gw.get("/fn/t/poison");
    assert_eq!(a0.text(), "poisoned\n");
    let a1 = gw.get("/fn/t/").text();
    let a2 = gw.get("/fn/t/").text();
    assert_eq!((field(&a1, "count"), field(&a1, "poison"), field(&a1, "marks")), ("2", "1", "1"), "{a1}");
    assert_eq!((field(&a2, "count"), field(&a2, "marks")), ("3", "2"), "{a2}");
    let b = gw.get("/fn/t/");
    assert_eq!(b.header("x-shoal-cold-start"), Some("true"));
    assert_ne!(b.header("x-shoal-instance"), a0.header("x-shoal-instance"));
    let b = b.text();
    assert_eq!((field(&b, "count"), field(&b, "poison"), field(&b, "marks")), ("1", "0", "1"), "the second copy saw the first's state: {b}");
    let rnd: BTreeSet<&str> = [&a1, &a2, &b].iter().map(|t| field(t, "random")).collect();
    assert_eq!(rnd.len(), 3, "random bytes repeated across copies: {a1} {a2} {b}");
    assert_eq!(template_pids(&gw, "t").len(), 1);
}

/// hvt: a hostile copy's host system calls (an inline `syscall`: making
/// a process, signalling the template by its host pid, reading or writing
/// its memory, a pidfd of it, placing descriptors, a seccomp filter, the
/// parent-death signal, the template's control channel, descriptor 63 in
/// its VMM) never reach the host: a shoal image's `syscall` instruction
/// is a guest fault in its own VM, which ends that copy alone (502 with
/// its last words); the template goes on and the next copy starts from
/// its state, not the dead copy's.
#[test]
fn hvt_a_hostile_copy_cannot_fork_signal_or_reach_its_template() {
    if !tenders().contains(&"hvt") {
        return;
    }
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    assert_eq!(gw.deploy("t", &format!(r#"{{"image":"{}","backend":"hvt"}}"#, image("tmpl"))).status, 201);
    let tpl = template_pids(&gw, "t")[0];
    let calls = [
        format!("nr=56&a={}", libc::CLONE_PARENT),
        "nr=57".to_string(),
        format!("nr=62&a={tpl}&b=9"),
        format!("nr=310&a={tpl}"),
        format!("nr=311&a={tpl}"),
        format!("nr=434&a={tpl}"),
        "nr=292&a=4&b=3".to_string(),
        "nr=317&a=1".to_string(),
        "nr=157&a=1&b=9".to_string(),
        "nr=44&a=63".to_string(),
    ];
    for q in &calls {
        assert_eq!(gw.get("/fn/t/poison").text(), "poisoned\n");
        let r = gw.get(&format!("/fn/t/host?{q}"));
        assert_eq!(r.status, 502, "{q}: {}", r.text());
        let e = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(e.contains("its last words: shoal: guest fault: invalid opcode") && e.contains("the guest executed a `syscall` instruction"), "{q}: {e}");
        assert!(process_alive(tpl), "{q}: the template must survive its copies");
    }
    let r = gw.get("/fn/t/");
    assert_eq!(r.header("x-shoal-cold-start"), Some("true"));
    let r = r.text();
    assert_eq!((field(&r, "count"), field(&r, "poison")), ("1", "0"), "a fresh copy of the template's state: {r}");
    assert_eq!(template_pids(&gw, "t"), vec![tpl], "still the first template");
}

/// A gateway killed with SIGKILL after a template's program forged its
/// ready word and forked: within 1 s nothing of its templates is left —
/// the template and its copies die with it (parent-death signal), the
/// program's own forks (no parent-death signal) by the gateway's watcher,
/// which wakes at its end and kills what its template groups hold — and
/// the groups are gone; the next gateway starts clean.
#[test]
fn a_sigkilled_gateways_templates_and_their_forks_die_with_it() {
    if !shoal_testkit::need(&["root"]) || !Path::new("/sys/fs/cgroup/pids/tasks").is_file() {
        return;
    }
    let dir = scratch();
    let state = dir.path().join("state");
    let mut gw = Gateway::start(&state);
    let gw_pid = gw.child.id();
    let r = gw.deploy("f", &format!(r#"{{"image":"{}","max_instances":1,"env":{{"FORGE_READY":"1"}}}}"#, image("tmpl")));
    assert_eq!(r.status, 201, "{}", r.text());
    wait_until("the program made what it may", || template_cgroups(gw_pid)[0].1.len() == 3);
    let tpl = template_pids(&gw, "f")[0];
    let all: Vec<u32> = template_cgroups(gw_pid)[0].1.clone();
    assert_eq!(all.len(), 3, "the template and two forks of its own: {all:?}");
    assert!(all.contains(&tpl), "{all:?}");
    gw.child.kill().unwrap();
    gw.child.wait().unwrap();
    let killed = Instant::now();
    while all.iter().any(|&p| process_alive(p)) && killed.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let alive: Vec<u32> = all.iter().copied().filter(|&p| process_alive(p)).collect();
    assert!(alive.is_empty(), "{alive:?} of {all:?} outlived the gateway by {:?}", killed.elapsed());
    wait_until("its template groups are removed", || template_cgroups(gw_pid).is_empty());
    let next = Gateway::start(&state);
    assert_eq!(next.stop(), Some(0));
}

/// A handler that appends each request's path to `/data/hits` (a
/// writable mount) and answers what it read from `/conf` (a read-only
/// single file).
const PY_WRITER: &str = r#"def handle(req):
    with open("/data/hits", "a") as f:
        f.write(req["path"] + "\n")
    with open("/conf") as f:
        return "conf " + f.read()
"#;

/// Writable function mounts (`"mounts": [{"host", "guest", "rw": true}]`
/// or `HOSTDIR:GUESTDIR:rw`) and single files: a Python handler on spt
/// (a template's copies) writes through to the host directory and reads a
/// read-only file; what the CLI refuses is refused with one line (422),
/// a host path beneath no allowed directory with 403, a malformed mount
/// with 400 (as any malformed setting), a mount on a
/// backend without mounts with 422.
#[test]
fn writable_function_mounts_take_the_handlers_writes() {
    if !shoal_testkit::need(&["root", "python3.11"]) {
        return;
    }
    let dir = scratch();
    let d = dir.path();
    std::fs::write(d.join("w.py"), PY_WRITER).unwrap();
    let data = d.join("data");
    std::fs::create_dir_all(&data).unwrap();
    // Writable by anyone, as the kubelet makes an emptyDir: a root guest's
    // spt instance runs as nobody (docs/architecture.md "Writable mounts").
    std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::write(d.join("conf"), "from the host\n").unwrap();
    let gw = Gateway::start(&d.join("state"));
    let handler = d.join("w.py").display().to_string();
    let body = serde_json::json!({
        "runtime": "python", "handler": handler, "backend": "spt",
        "mounts": [{"host": data, "guest": "/data", "rw": true}, format!("{}:/conf:ro", d.join("conf").display())],
    });
    let r = gw.deploy("writer", &body.to_string());
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["mounts"], serde_json::json!([format!("{}:/data:rw", data.display()), format!("{}:/conf:ro", d.join("conf").display())]));
    for p in ["/one", "/two"] {
        let r = gw.get(&format!("/fn/writer{p}"));
        assert_eq!((r.status, r.text().as_str()), (200, "conf from the host\n"));
    }
    assert_eq!(std::fs::read_to_string(data.join("hits")).unwrap(), "/one\n/two\n");
    assert_eq!(std::fs::read_to_string(d.join("conf")).unwrap(), "from the host\n");
    // The same mounts through `shoal fn deploy --mount`, HOST relative to
    // the command's directory: the gateway is told absolute paths.
    let url = format!("http://{}", gw.addr);
    let o = shoal()
        .current_dir(d)
        .env("SHOAL_TOKEN", &gw.token)
        .args(["fn", "--gateway", &url, "deploy", "writer2", "--runtime", "python", "w.py", "--backend", "spt"])
        .args(["--mount", "data:/data:rw", "--mount", "conf:/conf:ro"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let r = gw.get("/functions/writer2");
    assert_eq!(
        r.json()["mounts"],
        serde_json::json!([format!("{}:/data:rw", data.display()), format!("{}:/conf:ro", d.join("conf").display())]),
        "{}",
        r.text()
    );
    assert_eq!(gw.get("/fn/writer2/three").text(), "conf from the host\n");
    assert_eq!(std::fs::read_to_string(data.join("hits")).unwrap(), "/one\n/two\n/three\n");
    let o = shoal().current_dir(d).env("SHOAL_TOKEN", &gw.token).args(["fn", "--gateway", &url, "deploy", "w3", "w.py", "--mount", "data"]).output().unwrap();
    assert_eq!((o.status.code(), stderr(&o).trim()), (Some(125), "shoal: --mount data: expected HOST:GUEST:ro|rw"));
    let refused = [
        (serde_json::json!({"host": data, "guest": "/", "rw": true}), 422, "the root mount (GUESTDIR /) is read-only"),
        (serde_json::json!({"host": data, "guest": "data", "rw": true}), 422, "expected HOSTDIR:GUESTDIR:ro"),
        (serde_json::json!({"host": "/etc", "guest": "/etc2", "rw": true}), 403, "mount /etc: "),
        (serde_json::json!({"host": data, "guest": "/d", "rw": true, "x": 1}), 400, "give \"HOSTDIR:GUESTDIR:ro\" (or :rw) or {\"host\""),
    ];
    for (m, status, needle) in refused {
        let r = gw.deploy("bad", &serde_json::json!({"runtime": "python", "handler": handler, "backend": "spt", "mounts": [m]}).to_string());
        let e = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(r.status == status && e.contains(needle) && !e.contains('\n'), "{m}: {} {e}", r.status);
    }
    let r = gw.deploy(
        "bad",
        &serde_json::json!({"runtime": "python", "handler": handler, "backend": "process", "mounts": [{"host": data, "guest": "/d", "rw": true}]}).to_string(),
    );
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.text().contains("only the spt and hvt backends have host directories"), "{}", r.text());
    assert_eq!(gw.stop(), Some(0));
}

// ---------------------------------------------------------------------
// The explicit ready point (docs/serve.md "The explicit ready point").

/// tmpl's start under READY_EXPLICIT=1 (apps/functions/tmpl.c): FNV-1a
/// over 20,000,000 counts, as hex.
fn tmpl_expensive_start() -> String {
    let mut h: u64 = 1469598103934665603;
    for i in 0..20_000_000u64 {
        h = (h ^ i).wrapping_mul(1099511628211);
    }
    format!("{h:x}")
}

/// A function deployed with `"ready": "explicit"` becomes a template at
/// its program's write to /dev/shoal/ready, not at its first wait for a
/// connection, on spt and hvt: two cold requests, each on a fresh copy,
/// answer with the template's start (the same random draw before the
/// write, the start's exact result, the start run once) and each with its
/// own draw after the write (with the default ready point both draws are
/// the template's); both writes answer 6 in a copy (the second changes
/// nothing), and in an instance started by exec. A program that never
/// writes fails the deploy with a clear 422 within its timeout; `explicit`
/// without a template is refused.
#[test]
fn an_explicit_ready_point_is_where_the_copies_start() {
    if !shoal_testkit::need(&["curl"]) {
        return;
    }
    let dir = scratch();
    let gw = Gateway::start(&dir.path().join("state"));
    let work = tmpl_expensive_start();
    let mut backends = vec!["spt"];
    if tenders().contains(&"hvt") {
        backends.push("hvt");
    }
    for b in backends {
        for ready in ["explicit", "listen"] {
            let name = format!("{b}-{ready}");
            let r = gw.deploy(
                &name,
                &format!(r#"{{"image":"{}","backend":"{b}","requests_per_instance":1,"ready":"{ready}","env":{{"READY_EXPLICIT":"1"}}}}"#, image("tmpl")),
            );
            assert_eq!(r.status, 201, "{name}: {}", r.text());
            assert_eq!((r.json()["template"].as_bool(), r.json()["ready"].as_str()), (Some(true), Some(ready)), "{name}");
            let one = curl(&format!("http://{}/fn/{name}/", gw.addr));
            let two = curl(&format!("http://{}/fn/{name}/", gw.addr));
            assert_ne!(one.1, two.1, "{name}: two requests, two instances");
            for (status, _, body) in [&one, &two] {
                assert_eq!(*status, 200, "{name}: {body}");
                assert_eq!(
                    (field(body, "count"), field(body, "inits"), field(body, "work"), field(body, "ready")),
                    ("1", "1", work.as_str(), "6,6"),
                    "{name}: {body}"
                );
            }
            assert_eq!(field(&one.2, "init"), field(&two.2, "init"), "{name}: the start ran again in a copy: {} / {}", one.2, two.2);
            let own = field(&one.2, "after") != field(&two.2, "after");
            assert_eq!(own, ready == "explicit", "{name}: the draw after the write is each copy's own only at the explicit ready point: {} / {}", one.2, two.2);
            assert_eq!(template_pids(&gw, &name).len(), 1, "{name}");
        }
        // A program that never writes: the deploy's 422 within its timeout.
        let t0 = std::time::Instant::now();
        let r = gw.deploy("never", &format!(r#"{{"image":"{}","backend":"{b}","ready":"explicit","timeout_ms":500}}"#, image("tmpl")));
        assert_eq!(r.status, 422, "{b}: {}", r.text());
        let e = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(
            e.starts_with("the template of never (its instance stopped where the program first writes to /dev/shoal/ready) failed: the template did not reach its ready point within 500 ms: the program (deployed with \"ready\": \"explicit\") did not write to /dev/shoal/ready"),
            "{b}: {e}"
        );
        assert!(!e.contains('\n'), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(10), "{b}: {:?}", t0.elapsed());
        assert_eq!(gw.get("/functions/never").status, 404, "nothing may be deployed");
    }
    // Started by exec the writes change nothing.
    let r = gw.deploy("exec", &format!(r#"{{"image":"{}","template":false,"env":{{"READY_EXPLICIT":"1"}}}}"#, image("tmpl")));
    assert_eq!(r.status, 201, "{}", r.text());
    let (status, _, body) = curl(&format!("http://{}/fn/exec/", gw.addr));
    assert_eq!((status, field(&body, "ready"), field(&body, "work")), (200, "6,6", work.as_str()), "{body}");
    for (body, needle) in [
        (
            format!(r#"{{"image":"{}","template":false,"ready":"explicit"}}"#, image("tmpl")),
            "ready: explicit is where a template stops, and this function has none (template off)",
        ),
        (
            format!(r#"{{"image":"{}","backend":"process","ready":"explicit"}}"#, image("tmpl")),
            "ready: explicit is where a template stops, and this function has none (only spt and hvt have templates)",
        ),
        (format!(r#"{{"image":"{}","ready":"later"}}"#, image("tmpl")), "ready \"later\": expected listen or explicit"),
    ] {
        let r = gw.deploy("bad", &body);
        assert_eq!(r.status, 422, "{body}: {}", r.text());
        let e = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(e.starts_with(needle), "{body}: {e}");
    }
}
