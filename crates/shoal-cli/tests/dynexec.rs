//! Dynamically linked executables (`shoal run /usr/bin/python3.11`,
//! `/usr/bin/node`): the host's own interpreters, unmodified, with their
//! interpreter `ld.so`, their libraries and Python's standard library
//! from the host's `/usr`, `/lib` and `/lib64` mounted read-only
//! (`--mount DIR:DIR:ro`, which needs root on spt), compared with native
//! runs by output and exit status on each tender.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const PYTHON: &str = "/usr/bin/python3.11";
const NODE: &str = "/usr/bin/node";

/// A Python script using hashlib, zlib, json, re, threads, tempfile and
/// exceptions, ending with `sys.exit(3)`.
const PY_SCRIPT: &str = r##"import hashlib, zlib, json, re, threading, tempfile, os, sys
print("sha256", hashlib.sha256(b"shoal" * 1000).hexdigest())
print("md5", hashlib.md5(b"abc").hexdigest())
data = b"hello world " * 500
c = zlib.compress(data, 9)
print("zlib", len(data), len(c), zlib.crc32(data), zlib.decompress(c) == data)
obj = {"a": [1, 2.5, None, True], "b": {"c": "d\u00e9"}}
s = json.dumps(obj, sort_keys=True)
print("json", s, json.loads(s) == obj)
print("re", re.findall(r"(\w+)@(\w+)\.com", "x a@b.com y c@d.com"), re.sub(r"\d+", "#", "a1b22c333"))
results = [0] * 4
lock = threading.Lock()
total = [0]
def work(i):
    acc = 0
    for k in range(20000):
        acc += k * i
    results[i] = acc
    with lock:
        total[0] += 1
ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in ts: t.start()
for t in ts: t.join()
print("threads", results, total[0])
with tempfile.TemporaryDirectory() as d:
    p = os.path.join(d, "f.txt")
    with open(p, "w") as f:
        f.write("line1\nline2\n")
    with open(p) as f:
        print("tempfile", f.read().splitlines(), os.path.getsize(p))
    with tempfile.NamedTemporaryFile(dir=d) as nt:
        nt.write(b"xyz"); nt.flush()
        print("named", os.path.getsize(nt.name))
try:
    {}["missing"]
except KeyError as e:
    print("keyerror", repr(e))
class MyErr(Exception):
    pass
try:
    try:
        1 / 0
    except ZeroDivisionError as e:
        raise MyErr("wrapped") from e
except MyErr as e:
    print("chained", e, type(e.__cause__).__name__)
print("env", os.environ.get("SHOAL_T", "unset"))
sys.exit(3)
"##;

/// A Node script using crypto, zlib, JSON, timers and promises (their
/// order printed), fs, the environment and `process.exitCode`.
const JS_SCRIPT: &str = r##"const crypto = require('crypto');
const zlib = require('zlib');
const fs = require('fs');
const os = require('os');
const path = require('path');
console.log('sha256', crypto.createHash('sha256').update('shoal'.repeat(1000)).digest('hex'));
console.log('hmac', crypto.createHmac('sha1', 'k').update('data').digest('base64'));
const key = crypto.scryptSync('pw', 'salt', 32);
const iv = Buffer.alloc(16, 1);
const c = crypto.createCipheriv('aes-256-cbc', key, iv);
const enc = Buffer.concat([c.update('secret text'), c.final()]);
const d = crypto.createDecipheriv('aes-256-cbc', key, iv);
console.log('aes', enc.toString('hex'), Buffer.concat([d.update(enc), d.final()]).toString());
console.log('random', crypto.randomBytes(16).length);
const data = Buffer.from('hello world '.repeat(500));
const gz = zlib.gzipSync(data, { level: 9 });
console.log('zlib', data.length, zlib.gunzipSync(gz).equals(data), zlib.deflateSync(data).length);
const obj = { a: [1, 2.5, null, true], b: { c: 'd\u00e9' } };
console.log('json', JSON.stringify(obj), JSON.stringify(JSON.parse(JSON.stringify(obj))) === JSON.stringify(obj));
const order = [];
setImmediate(() => order.push('immediate'));
Promise.resolve().then(() => order.push('promise'));
process.nextTick(() => order.push('tick'));
queueMicrotask(() => order.push('microtask'));
order.push('sync');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'shoal-'));
const file = path.join(dir, 'f.txt');
fs.writeFileSync(file, 'line1\nline2\n');
console.log('fs', fs.readFileSync(file, 'utf8').split('\n').length, fs.statSync(file).size, fs.readdirSync(dir));
fs.promises.readFile(file, 'utf8').then((t) => {
  order.push('fsread');
  setTimeout(async () => {
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    const t0 = Date.now();
    await sleep(20);
    const waited = Date.now() - t0 >= 19;
    const r = await Promise.all([1, 2, 3].map(async (x) => { await sleep(5 * (4 - x)); order.push('p' + x); return x * x; }));
    console.log('order', order.join(','));
    console.log('all', r, waited);
    fs.rmSync(dir, { recursive: true });
    console.log('env', process.env.SHOAL_T);
    try { JSON.parse('{bad'); } catch (e) { console.log('error', e.name); }
    process.exitCode = 5;
  }, 10);
});
"##;

/// Three `worker_threads` workers computing and posting results back.
const JS_WORKERS: &str = r##"const { Worker, isMainThread, parentPort, workerData } = require('worker_threads');
if (isMainThread) {
  const results = [];
  let done = 0;
  for (let i = 0; i < 3; i++) {
    const w = new Worker(__filename, { workerData: i });
    w.on('message', (m) => { results[i] = m; });
    w.on('exit', (code) => {
      if (++done === 3) { console.log('workers', JSON.stringify(results), code); }
    });
  }
} else {
  let acc = 0;
  for (let k = 0; k < 100000; k++) acc = (acc + k * (workerData + 1)) % 1000003;
  parentPort.postMessage({ id: workerData, acc });
}
"##;

/// What Node asks of the kernel beyond the runtime itself:
/// `os.networkInterfaces()` (netlink), a `net` server on an `AF_UNIX`
/// path (its socket file, removed again on close), and `fs.watch`
/// (inotify) of a directory and of a file, the changes spaced out so that
/// the events read between them are the same as natively.
const JS_GAPS: &str = r##"const os = require('os');
const net = require('net');
const fs = require('fs');
const path = require('path');
console.log('interfaces', JSON.stringify(os.networkInterfaces()));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gaps-'));
const sock = path.join(dir, 'srv.sock');
const srv = net.createServer((c) => { c.on('data', (d) => { c.end('echo:' + d); }); });
srv.listen(sock, () => {
  console.log('listening', fs.statSync(sock).isSocket(), srv.address() === sock);
  const c = net.connect(sock, () => c.write('hi'));
  let got = '';
  c.on('data', (d) => { got += d; });
  c.on('end', () => {
    console.log('unix', got);
    const bad = net.connect(path.join(dir, 'none.sock'));
    bad.on('error', (e) => {
      console.log('missing', e.code);
      srv.close(() => {
        console.log('after close', fs.existsSync(sock));
        fs.rmSync(dir, { recursive: true });
        watchPart();
      });
    });
  });
});
function watchPart() {
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'watch-'));
const seen = [];
const w = fs.watch(dir, (ev, name) => seen.push(ev + ':' + name));
const steps = [
  () => fs.writeFileSync(path.join(dir, 'a.txt'), 'one'),
  () => fs.appendFileSync(path.join(dir, 'a.txt'), 'two'),
  () => fs.renameSync(path.join(dir, 'a.txt'), path.join(dir, 'b.txt')),
  () => fs.mkdirSync(path.join(dir, 'sub')),
  () => fs.chmodSync(path.join(dir, 'b.txt'), 0o600),
  () => fs.unlinkSync(path.join(dir, 'b.txt')),
  () => fs.rmdirSync(path.join(dir, 'sub')),
];
let i = 0;
function next() {
  if (i < steps.length) {
    steps[i++]();
    setTimeout(next, 30);
    return;
  }
  w.close();
  console.log('watch', seen.join(' '));
  const f = path.join(dir, 'f');
  fs.writeFileSync(f, 'x');
  const fw = fs.watch(f);
  const fseen = [];
  fw.on('change', (ev, name) => fseen.push(ev + ':' + name));
  fs.writeFileSync(f, 'y');
  setTimeout(() => {
    fs.unlinkSync(f);
    setTimeout(() => {
      fw.close();
      console.log('file', fseen.join(' '));
      try { fs.watch(path.join(dir, 'missing')); } catch (e) { console.log('missing', e.code); }
      fs.rmSync(dir, { recursive: true });
    }, 30);
  }, 30);
}
next();
}
"##;

/// What Python asks of the kernel beyond the interpreter: interface names
/// and indices (netlink, `SIOCGIF*`), `AF_UNIX` socket files (stat,
/// rebind, rename, unlink, stale files, datagrams to a path) and abstract
/// names, a FIFO (non-blocking opens, a reader thread), pidfds of the
/// process and of a thread, and waits with no children.
const PY_GAPS: &str = r##"import os, sys, socket, stat, errno, select, signal, tempfile, threading, time
def e(f, *a):
    try:
        r = f(*a)
        return "ok" if r is None else r
    except OSError as x:
        return errno.errorcode.get(x.errno, x.errno)
print("ifaces", socket.if_nameindex(), socket.if_nametoindex("lo"), socket.if_indextoname(1))
print("ifaces bad", e(socket.if_nametoindex, "nosuch0"), e(socket.if_indextoname, 999))
d = tempfile.mkdtemp()
p = os.path.join(d, "s.sock")
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(p)
st = os.stat(p)
print("sockfile", stat.S_ISSOCK(st.st_mode), oct(st.st_mode & 0o777), os.listdir(d), [(x.name, x.is_file(), x.is_dir()) for x in os.scandir(d)])
print("open", e(os.open, p, os.O_RDONLY))
s2 = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
print("rebind", e(s2.bind, p), "twice", e(srv.bind, os.path.join(d, "t.sock")))
srv.listen(4)
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
c.connect(p)
a, _ = srv.accept()
c.sendall(b"ping")
print("stream", a.recv(10), srv.getsockname() == p, a.getsockname() == p)
os.rename(p, os.path.join(d, "r.sock"))
c2 = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
print("renamed", e(c2.connect, p), e(c2.connect, os.path.join(d, "r.sock")))
os.unlink(os.path.join(d, "r.sock"))
c3 = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
print("unlinked", e(c3.connect, os.path.join(d, "r.sock")), "rebind", e(s2.bind, os.path.join(d, "r.sock")))
open(os.path.join(d, "plain"), "w").close()
c4 = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
print("plainfile", e(c4.connect, os.path.join(d, "plain")), "bind over", e(c4.bind, os.path.join(d, "plain")), "nodir", e(c4.bind, os.path.join(d, "no", "x")))
srv.close(); a.close(); c.close()
os.rename(os.path.join(d, "r.sock"), p)
s2.close()
c5 = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
print("stale", e(c5.connect, p), os.path.exists(p), "rebind stale", e(c5.bind, p))
dg = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
q = os.path.join(d, "d.sock")
dg.bind(q)
tx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
tx.sendto(b"dgram", q)
print("dgram", dg.recvfrom(10), e(tx.sendto, b"x", os.path.join(d, "none")), e(tx.sendto, b"x", os.path.join(d, "plain")))
ab = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
ab.bind("\0shoal-abstract"); ab.listen(1)
ac = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
ac.connect("\0shoal-abstract")
print("abstract", ab.getsockname(), e(socket.socket(socket.AF_UNIX).connect, "\0nobody"))
f = os.path.join(d, "fifo")
os.mkfifo(f)
print("fifo", stat.S_ISFIFO(os.stat(f).st_mode), e(os.open, f, os.O_WRONLY | os.O_NONBLOCK))
got = []
def reader():
    fd = os.open(f, os.O_RDONLY)
    while True:
        b = os.read(fd, 100)
        if not b:
            break
        got.append(b)
    os.close(fd)
t = threading.Thread(target=reader); t.start()
w = os.open(f, os.O_WRONLY)
os.write(w, b"through the fifo")
os.close(w)
t.join()
r = os.open(f, os.O_RDONLY | os.O_NONBLOCK)
print("fifo data", b"".join(got), "nonblock reader", os.read(r, 10), select.select([r], [], [], 0)[0] == [r])
os.close(r)
pfd = os.pidfd_open(os.getpid())
print("pidfd", oct(os.fstat(pfd).st_mode), os.get_inheritable(pfd), select.select([pfd], [], [], 0), e(os.read, pfd, 8))
print("pidfd bad", e(os.pidfd_open, os.getpid(), 1), e(os.pidfd_open, 0), e(os.pidfd_open, 4000000))
res = []
th = threading.Thread(target=lambda: res.append((e(os.pidfd_open, threading.get_native_id()), e(os.pidfd_open, threading.get_native_id(), os.O_EXCL))))
th.start(); th.join()
print("pidfd thread", [x if isinstance(x, str) else "fd" for x in res[0]])
sig = []
signal.signal(signal.SIGUSR1, lambda s, fr: sig.append(s))
signal.pidfd_send_signal(pfd, signal.SIGUSR1)
print("pidfd signal", sig, e(signal.pidfd_send_signal, pfd, 99), e(signal.pidfd_send_signal, os.open(os.path.join(d, "plain"), os.O_RDONLY), 0))
print("wait", e(os.waitid, os.P_PIDFD, pfd, os.WEXITED | os.WNOHANG), e(os.waitpid, -1, os.WNOHANG), e(os.waitid, os.P_ALL, 0, 0))
"##;

/// The scripts, in a directory mounted at `/work` (built once per test
/// process).
fn scripts() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch().keep();
        std::fs::write(dir.join("t.py"), PY_SCRIPT).unwrap();
        std::fs::write(dir.join("t.js"), JS_SCRIPT).unwrap();
        std::fs::write(dir.join("w.js"), JS_WORKERS).unwrap();
        std::fs::write(dir.join("gaps.js"), JS_GAPS).unwrap();
        std::fs::write(dir.join("gaps.py"), PY_GAPS).unwrap();
        dir
    })
}

/// The host's own system directories, mounted read-only where they are:
/// `ld.so` (through `/lib64`), the libraries and the interpreters'
/// standard libraries come from them, unpacked.
const SYSTEM: [&str; 6] = ["--mount", "/usr:/usr:ro", "--mount", "/lib:/lib:ro", "--mount", "/lib64:/lib64:ro"];

/// Runs `exe ARGS` natively (with only `SHOAL_T=yes` in the environment;
/// `/work/X` in the arguments names the scripts' `X`) and on every tender
/// with the system directories and the scripts mounted and `run_args`,
/// and asserts the same stdout, stderr and exit status `status`.
fn matches_native(exe: &str, args: &[&str], run_args: &[&str], status: i32) {
    let dir = scripts();
    let native_args: Vec<String> = args.iter().map(|a| a.strip_prefix("/work/").map_or_else(|| a.to_string(), |x| dir.join(x).display().to_string())).collect();
    let n = output(Command::new(exe).args(&native_args).env_clear().env("SHOAL_T", "yes").current_dir(dir));
    assert_eq!(n.status.code(), Some(status), "native {exe} {args:?}: {}", stderr(&n));
    let work = format!("{}:/work:ro", dir.display());
    for t in tenders() {
        let s = output(shoal_run(t).args(SYSTEM).args(["--mount", &work]).args(run_args).args(["-e", "SHOAL_T=yes", exe, "--"]).args(args));
        assert_eq!(stdout(&s), stdout(&n), "{t} {exe} {args:?}: stderr: {}", stderr(&s));
        assert_eq!(stderr(&s), stderr(&n), "{t} {exe} {args:?}: stderr differs");
        assert_eq!(s.status.code(), Some(status), "{t} {exe} {args:?}: stderr: {}", stderr(&s));
    }
}

/// [`matches_native`] with the native run in a network namespace of its
/// own with only `lo` up (`unshare -n`), the interfaces an instance has.
fn matches_native_alone(exe: &str, script: &str, status: i32) {
    let dir = scripts();
    let n = output(
        Command::new("unshare")
            .args(["-n", "sh", "-c", "ip link set lo up && exec \"$0\" \"$@\"", exe])
            .arg(dir.join(script))
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .current_dir(dir),
    );
    assert_eq!(n.status.code(), Some(status), "native {exe} {script}: {}", stderr(&n));
    let work = format!("{}:/work:ro", dir.display());
    for t in tenders() {
        let s = output(shoal_run(t).args(SYSTEM).args(["--mount", &work, exe, "--", &format!("/work/{script}")]));
        assert_eq!(stdout(&s), stdout(&n), "{t} {exe} {script}: stderr: {}", stderr(&s));
        assert_eq!(s.status.code(), Some(status), "{t} {exe} {script}: stderr: {}", stderr(&s));
    }
}

/// Interfaces, `AF_UNIX` socket files and `fs.watch` as natively (see
/// [`JS_GAPS`]).
#[test]
fn node_interfaces_unix_paths_and_watch_match_native() {
    if !shoal_testkit::need(&["root", "node", "unshare", "ip"]) {
        return;
    }
    matches_native_alone(NODE, "gaps.js", 0);
}

/// Interfaces, `AF_UNIX` socket files, FIFOs, pidfds and waits as
/// natively (see [`PY_GAPS`]).
#[test]
fn python_interfaces_sockets_fifos_pidfds_match_native() {
    if !shoal_testkit::need(&["root", "python3.11", "unshare", "ip"]) {
        return;
    }
    matches_native_alone(PYTHON, "gaps.py", 0);
}

#[test]
fn python_script_matches_native() {
    if !shoal_testkit::need(&["root", "python3.11"]) {
        return;
    }
    matches_native(PYTHON, &["/work/t.py"], &[], 3);
}

/// `_ssl`, `_sqlite3` and `_ctypes` are `lib-dynload` modules that the
/// interpreter `dlopen`s, with libssl, libcrypto, libsqlite3 and libffi
/// behind them.
#[test]
fn python_imports_ssl_sqlite3_ctypes_as_natively() {
    if !shoal_testkit::need(&["root", "python3.11"]) {
        return;
    }
    let code = "import ssl, sqlite3, ctypes; print(ssl.OPENSSL_VERSION, sqlite3.sqlite_version); \
                print(sqlite3.connect(':memory:').execute('select 6*7').fetchone()); \
                print(ctypes.CDLL('libz.so.1').zlibVersion() != 0, ctypes.sizeof(ctypes.c_long))";
    matches_native(PYTHON, &["-c", code], &[], 0);
}

/// `dlopen` of a library that is not there: ld.so's own message, through
/// Python's `OSError` and Node's `process.dlopen`.
#[test]
fn dlopen_of_a_missing_library_gives_ld_so_message() {
    if shoal_testkit::need(&["root", "python3.11"]) {
        let code = "import ctypes\ntry:\n    ctypes.CDLL('libshoal-missing.so.1')\nexcept OSError as e:\n    print(e)\n    raise SystemExit(9)";
        matches_native(PYTHON, &["-c", code], &[], 9);
    }
    if shoal_testkit::need(&["root", "node"]) {
        let code = "try { process.dlopen({ exports: {} }, '/nowhere/missing.node'); } catch (e) { console.log(e.message); process.exitCode = 8; }";
        matches_native(NODE, &["-e", code], &[], 8);
    }
}

#[test]
fn node_script_matches_native() {
    if !shoal_testkit::need(&["root", "node"]) {
        return;
    }
    matches_native(NODE, &["/work/t.js"], &[], 5);
}

/// Each worker is a V8 isolate with its own reservations of address
/// space (its code range among them): three need more than the default
/// --mem's share.
#[test]
fn node_worker_threads_match_native() {
    if !shoal_testkit::need(&["root", "node"]) {
        return;
    }
    matches_native(NODE, &["/work/w.js"], &["--mem", "1G"], 0);
}

/// A library's `mov eax, NR; syscall` pair is rewritten by the kernel the
/// first time it traps (kernel/syscall/src/patch.rs): the program sees a
/// `jmp` where natively the `mov` stays; calls through the pair and
/// through a jump to the middle of one keep giving the right answer. A
/// `syscall` followed by glibc's `cmp rax, -4096` is rewritten forward by
/// the first of four threads' calls to trap (three wait in it): each comes
/// back with its bytes.
#[test]
fn library_sites_are_rewritten_on_first_use() {
    if !shoal_testkit::need(&["root"]) {
        return;
    }
    let dir = scratch();
    let d = dir.path();
    let lib = d.join("libsites.so");
    let o = output(Command::new("gcc").args(["-O2", "-shared", "-fPIC", "-o"]).arg(&lib).arg(home().join("apps/exec/libsites.c")));
    assert!(o.status.success(), "gcc libsites: {}", stderr(&o));
    let exe = d.join("dynsites");
    let o = output(
        Command::new("gcc").args(["-O2", "-o"]).arg(&exe).arg(home().join("apps/exec/dynsites.c")).arg("-L").arg(d).args(["-lsites", "-Wl,-rpath,/sitelib"]),
    );
    assert!(o.status.success(), "gcc dynsites: {}", stderr(&o));
    let sitelib = d.join("sitelib");
    std::fs::create_dir_all(&sitelib).unwrap();
    std::fs::copy(&lib, sitelib.join("libsites.so")).unwrap();
    let mount = format!("{}:/sitelib:ro", sitelib.display());
    let n = output(Command::new(&exe).env("LD_LIBRARY_PATH", d));
    let tail = |b: &str| format!("forward before: 0f\nforward after: {b}, read 1 x\nwaiters: 3 of 3 back, 0 wrong\n");
    assert_eq!(stdout(&n), "pair before: b8\npair after: b8\nmiddle after: b8\nagree: 1 1, 0 wrong\n".to_string() + &tail("0f"), "native: {}", stderr(&n));
    for t in tenders() {
        let s = output(shoal_run(t).args(SYSTEM).args(["--mount", &mount]).arg(&exe));
        assert_eq!(stdout(&s), "pair before: b8\npair after: e9\nmiddle after: e9\nagree: 1 1, 0 wrong\n".to_string() + &tail("e9"), "{t}: {}", stderr(&s));
        assert_eq!((s.status.code(), stderr(&s)), (Some(0), String::new()), "{t}");
    }
}

/// A Node `http` server: `/` answers a fixed body, `/count` how many
/// HTTP/1.1 requests `/` has had (hey's; the test's own checks, which
/// may be retried while the server starts, are HTTP/1.0).
const JS_HTTP: &str = r##"const http = require('http');
let served = 0;
http.createServer((req, res) => {
  if (req.url === '/count') { res.end(String(served)); return; }
  if (req.httpVersion === '1.1') served++;
  res.writeHead(200, { 'Content-Type': 'text/plain' });
  res.end('hello from node\n');
}).listen(8080, '0.0.0.0', () => console.log('listening'));
"##;

/// Requests of each `hey` run: several rounds of every connection, few
/// enough for a second or two on a loaded machine.
const HEY_REQUESTS: usize = 500;

/// A port nothing listens on right now (bound and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One `GET path HTTP/1.0` to 127.0.0.1:`port`: the status line and the
/// body, or `None` while nothing answers.
fn get(port: u16, path: &str) -> Option<(String, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// Starts `shoal run ARGS` on `tender` (which publishes 127.0.0.1:`port`),
/// waits (at most 60 s) until `path` answers, runs `hey -n HEY_REQUESTS
/// -c 10` against it, then calls `after` with the port and the `shoal run`
/// process's id while the server still runs, and stops it. Asserts that the first answer and one after
/// hey are `200` with `body` and that hey saw only 200s and no error;
/// returns the server's stderr.
fn serve_under_hey(tender: &str, port: u16, args: &[&str], path: &str, status: &str, body: &str, after: impl FnOnce(u16, u32)) -> String {
    use std::io::Read;
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let mut child = shoal_run(tender).args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let first = loop {
        if let Some(a) = get(port, path) {
            break Some(a);
        }
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut hey = None;
    let mut last = None;
    if first.is_some() {
        let url = format!("http://127.0.0.1:{port}{path}");
        hey = Some(output(Command::new("timeout").args(["60", "hey", "-n", &HEY_REQUESTS.to_string(), "-c", "10", "-t", "20", &url])));
        last = get(port, path);
    }
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if first.is_some() {
            after(port, child.id())
        }
    }));
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let want = Some((status.to_string(), body.to_string()));
    assert_eq!(first, want, "{tender}: the first answer (nothing within 60 s?): {err}");
    let o = hey.unwrap();
    let report = stdout(&o);
    assert!(o.status.success(), "{tender}: hey: {report}{}", stderr(&o));
    assert!(report.contains(&format!("[200]\t{HEY_REQUESTS} responses")), "{tender}: not {HEY_REQUESTS} answers 200:\n{report}\nshoal: {err}");
    assert!(!report.contains("Error distribution"), "{tender}: errors:\n{report}\nshoal: {err}");
    assert_eq!(last, want, "{tender}: the answer after hey: {err}");
    if let Err(p) = checked {
        std::panic::resume_unwind(p);
    }
    err
}

/// Node's `http` behind `--publish` under hey: every request answered
/// 200, the body the same before and after, and the server counted
/// exactly hey's requests.
#[test]
fn node_http_server_serves_hey() {
    if !shoal_testkit::need(&["root", "node", "hey"]) {
        return;
    }
    let dir = scratch();
    std::fs::write(dir.path().join("srv.js"), JS_HTTP).unwrap();
    let app = format!("{}:/app:ro", dir.path().display());
    for t in tenders() {
        let port = free_port();
        let publish = format!("127.0.0.1:{port}:8080");
        let mut args: Vec<&str> = SYSTEM.to_vec();
        args.extend(["--mount", &app, "--publish", &publish, NODE, "--", "/app/srv.js"]);
        let count = |port, _| {
            let c = get(port, "/count").map(|(_, b)| b);
            assert_eq!(c, Some(HEY_REQUESTS.to_string()), "{t}: hey's requests the server counted");
        };
        let err = serve_under_hey(t, port, &args, "/", "HTTP/1.1 200 OK", "hello from node\n", count);
        assert_eq!(err, "", "{t}: node wrote on stderr");
    }
}

/// Requests [`host_calls_of_keepalive`] sends on one connection.
const KEEPALIVE_REQUESTS: usize = 200;

/// The host system calls of the spt instance under `shoal run` process
/// `run` (its child, the shoal-spt process), counted by `strace -c` while
/// [`KEEPALIVE_REQUESTS`] sequential `GET path`s go over one keep-alive
/// connection to 127.0.0.1:`port`, each answered 200 with `body`: each
/// call's name with its count and its failures.
fn host_calls_of_keepalive(run: u32, port: u16, path: &str, body: &str) -> std::collections::HashMap<String, (u64, u64)> {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::Stdio;
    let children = std::fs::read_to_string(format!("/proc/{run}/task/{run}/children")).unwrap();
    let spt: u32 = children.split_whitespace().next().expect("shoal run has a child").parse().unwrap();
    let dir = scratch();
    let out = dir.path().join("strace.txt");
    let mut st = Command::new("strace").args(["-c", "-f", "-o"]).arg(&out).args(["-p", &spt.to_string()]).stderr(Stdio::piped()).spawn().unwrap();
    // Attached once strace says so (the first line on its stderr).
    let mut err = BufReader::new(st.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("attached"), "strace: {line}");
    let s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    for i in 0..KEEPALIVE_REQUESTS {
        (&s).write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
        let mut head = String::new();
        while !head.ends_with("\r\n\r\n") {
            assert_ne!(r.read_line(&mut head).unwrap(), 0, "request {i}: the connection closed: {head}");
        }
        assert!(head.starts_with("HTTP/1.1 200 "), "request {i}: {head}");
        let len: usize = head.lines().find_map(|l| l.strip_prefix("Content-Length: ")).unwrap().trim().parse().unwrap();
        let mut b = vec![0; len];
        r.read_exact(&mut b).unwrap();
        assert_eq!(String::from_utf8_lossy(&b), body, "request {i}");
    }
    drop((r, s));
    // SAFETY: kill sends a signal to strace, our child; no memory involved.
    unsafe { libc::kill(st.id() as i32, libc::SIGINT) };
    st.wait().unwrap();
    // strace -c's table: % time, seconds, usecs/call, calls, [errors,] name.
    std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
            match f.len() {
                6 => Some((f[5].to_string(), (n(3)?, n(4)?))),
                5 => Some((f[4].to_string(), (n(3)?, 0))),
                _ => None,
            }
        })
        .filter(|(name, _)| name != "total")
        .collect()
}

/// `python3.11 -m http.server --protocol HTTP/1.1` serving a mounted
/// directory behind `--publish` under hey: every request answered 200
/// with the file's bytes, and the server logged each of hey's requests.
/// On spt, while one keep-alive connection makes 200 requests, the
/// instance's host calls are those of the requests alone: the server's
/// main thread, blocked in `accept` (it found the listener's readiness
/// left over from the last connection), makes no `accept4`, and the
/// connection's thread no `recvfrom` that finds nothing before it waits
/// (each was about 0.66 per request when every change woke every
/// blocked call to try the host again).
#[test]
fn python_http_server_serves_hey() {
    if !shoal_testkit::need(&["root", "python3.11", "hey"]) {
        return;
    }
    let dir = scratch();
    let body = "hello from python\n".repeat(40);
    std::fs::write(dir.path().join("hello.txt"), &body).unwrap();
    let www = format!("{}:/www:ro", dir.path().display());
    for t in tenders() {
        let port = free_port();
        let publish = format!("127.0.0.1:{port}:8000");
        let mut args: Vec<&str> = SYSTEM.to_vec();
        args.extend(["--mount", &www, "--publish", &publish, PYTHON, "--", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/www"]);
        args.extend(["--protocol", "HTTP/1.1"]);
        let counted = t == "spt" && shoal_testkit::need(&["strace"]);
        let calls = |port, run| {
            if counted {
                let c = host_calls_of_keepalive(run, port, "/hello.txt", &body);
                let (accepts, accept_fails) = c.get("accept4").copied().unwrap_or((0, 0));
                let (recvs, recv_fails) = c.get("recvfrom").copied().unwrap_or((0, 0));
                // The connection's own accept4, and at most one that finds
                // the listener's readiness left over; a recvfrom per
                // request, plus the end of file and at most one that
                // races the first request.
                assert!(accepts <= 2 && accept_fails <= 1, "spt: accept4 (calls, failures) during {KEEPALIVE_REQUESTS} requests on one connection: {c:?}");
                let n = KEEPALIVE_REQUESTS as u64;
                assert!((n..=n + 2).contains(&recvs) && recv_fails <= 1, "spt: recvfrom (calls, failures): {c:?}");
            }
        };
        let err = serve_under_hey(t, port, &args, "/hello.txt", "HTTP/1.1 200 OK", &body, calls);
        let logged = err.lines().filter(|l| l.ends_with("\"GET /hello.txt HTTP/1.1\" 200 -")).count();
        let want = HEY_REQUESTS + if counted { KEEPALIVE_REQUESTS } else { 0 };
        assert_eq!(logged, want, "{t}: the requests the server logged:\n{err}");
    }
}
