//! End-to-end tests of `shoal-oci`: the OCI lifecycle called
//! directly, the errors runc gives for bad input, the console socket, and
//! then podman and containerd running shoal images through it. They need
//! root (namespaces, cgroups, the engines); without it each test skips
//! through shoal_testkit (a failure when SHOAL_REQUIRE names root).
//!
//! The container process outlives `shoal-oci create`, as with runc; this
//! test process makes itself a child subreaper, so the tender becomes its
//! child and its exit status can be read with waitpid, as conmon and
//! containerd's shim read it.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The binaries under test: shoal-oci and, beside it, shoal and shoal-tender.
fn bin(name: &str) -> PathBuf {
    let oci = PathBuf::from(env!("CARGO_BIN_EXE_shoal-oci"));
    let p = oci.parent().unwrap().join(name);
    assert!(p.is_file(), "{} is missing: run cargo build --release first", p.display());
    p
}

fn home() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Whether the test can run (as root); skips through shoal_testkit otherwise.
fn root_or_skip() -> bool {
    if !shoal_testkit::need(&["root"]) {
        return false;
    }
    // SAFETY: PR_SET_CHILD_SUBREAPER takes one integer argument.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) };
    true
}

/// The test images, built once: `app` (tests/app.c) and `hello` (apps/hello.c).
fn images() -> &'static (PathBuf, PathBuf) {
    static IMAGES: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    IMAGES.get_or_init(|| {
        // One directory per test process under cargo's scratch directory;
        // those of test processes that have ended are removed.
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("shoal-oci-images");
        for e in std::fs::read_dir(&base).into_iter().flatten().filter_map(Result::ok) {
            let gone = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()).is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists());
            if gone {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = base.join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let build = |src: &Path, out: &Path| {
            let o = Command::new(bin("shoal")).arg("cc").arg("-O2").arg(src).arg("-o").arg(out).output().unwrap();
            assert!(o.status.success(), "shoal cc {}: {}", src.display(), String::from_utf8_lossy(&o.stderr));
        };
        let (app, hello) = (dir.join("app"), dir.join("hello"));
        build(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/app.c"), &app);
        build(&home().join("apps/hello.c"), &hello);
        (app, hello)
    })
}

/// A scratch bundle with `rootfs/app` and config.json running `args`;
/// `edit` changes the config first.
fn bundle(dir: &Path, args: &[&str], edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let b = dir.join("bundle");
    std::fs::create_dir_all(b.join("rootfs")).unwrap();
    std::fs::copy(&images().0, b.join("rootfs/app")).unwrap();
    let mut args_v = vec!["/app".to_string()];
    args_v.extend(args.iter().map(|s| s.to_string()));
    let mut cfg = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"terminal": false, "user": {"uid": 0, "gid": 0}, "args": args_v,
                    "env": ["PATH=/bin", "GREETING=hi"], "cwd": "/"},
        "root": {"path": "rootfs"},
        "linux": {"namespaces": [{"type": "network"}, {"type": "pid"}]}
    });
    edit(&mut cfg);
    std::fs::write(b.join("config.json"), serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    b
}

/// `shoal-oci --root ROOT ARGS`, with stdio to files in `dir` (the
/// container process keeps create's stdout and stderr: pipes would keep a
/// reader waiting for the container's end).
struct Oci {
    root: PathBuf,
    dir: PathBuf,
}

impl Oci {
    fn new(dir: &Path) -> Oci {
        Oci { root: dir.join("state"), dir: dir.to_path_buf() }
    }
    fn run(&self, args: &[&str]) -> Output {
        let out = std::fs::File::create(self.dir.join("cmd.out")).unwrap();
        let err = std::fs::File::create(self.dir.join("cmd.err")).unwrap();
        let status = Command::new(bin("shoal-oci")).arg("--root").arg(&self.root).args(args).stdin(Stdio::null()).stdout(out).stderr(err).status().unwrap();
        Output { status, stdout: std::fs::read(self.dir.join("cmd.out")).unwrap(), stderr: std::fs::read(self.dir.join("cmd.err")).unwrap() }
    }
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(o.status.success(), "shoal-oci {args:?} failed: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
    /// Asserts a runc-like failure: non-zero, one line `shoal-oci: …` with `needle`.
    fn fails(&self, args: &[&str], needle: &str) {
        let o = self.run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "shoal-oci {args:?} should fail");
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(err.lines().count(), 1, "one line of error expected: {err}");
        assert!(err.starts_with("shoal-oci: ") && err.contains(needle), "shoal-oci {args:?}: `{err}` lacks `{needle}`");
    }
    fn state(&self, id: &str) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["state", id])).unwrap()
    }
    /// Creates container `id` from `bundle`, its stdout and stderr going
    /// to the file `id.log`; returns the pid from the pid file.
    fn create(&self, id: &str, bundle: &Path) -> i32 {
        let log = std::fs::File::create(self.dir.join(format!("{id}.log"))).unwrap();
        let pid_file = self.dir.join(format!("{id}.pid"));
        let status = Command::new(bin("shoal-oci"))
            .arg("--root")
            .arg(&self.root)
            .args(["create", "--bundle"])
            .arg(bundle)
            .arg("--pid-file")
            .arg(&pid_file)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .status()
            .unwrap();
        assert!(status.success(), "create {id}: {}", self.log(id));
        std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap()
    }
    fn log(&self, id: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{id}.log"))).unwrap_or_default()
    }
    /// Waits (bounded) until the container's log holds `text`.
    fn wait_log(&self, id: &str, text: &str) {
        let t0 = Instant::now();
        while !self.log(id).contains(text) {
            assert!(t0.elapsed() < Duration::from_secs(30), "{id} never printed {text:?}: {}", self.log(id));
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    fn entries(&self) -> Vec<String> {
        std::fs::read_dir(&self.root).map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default()
    }
}

/// Waits for our child `pid` (the tender, re-parented to this subreaper):
/// Ok(exit status) or Err(signal).
fn wait_child(pid: i32) -> Result<i32, i32> {
    let mut st = 0;
    // SAFETY: waitpid writes one int.
    let r = unsafe { libc::waitpid(pid, &mut st, 0) };
    assert_eq!(r, pid, "waitpid({pid}): {}", std::io::Error::last_os_error());
    if libc::WIFEXITED(st) {
        Ok(libc::WEXITSTATUS(st))
    } else {
        Err(libc::WTERMSIG(st))
    }
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("shoal-oci-test-").tempdir().unwrap()
}

/// A hook that saves the state it is given on stdin to `file` and appends
/// its name to `order`.
fn save_hook(file: &Path, name: &str, order: &Path) -> serde_json::Value {
    serde_json::json!({"path": "/bin/sh", "args": ["sh", "-c", format!("cat > {}; echo {name} >> {}", file.display(), order.display())]})
}

#[test]
fn lifecycle_create_start_state_kill_delete_with_hooks() {
    if !root_or_skip() {
        return;
    }
    let t = scratch();
    let d = t.path();
    let hooks = ["createRuntime", "createContainer", "startContainer", "poststart", "poststop"];
    let b = bundle(d, &["wait"], |c| {
        let mut h = serde_json::Map::new();
        for k in hooks {
            h.insert(k.into(), serde_json::json!([save_hook(&d.join(format!("{k}.json")), k, &d.join("order"))]));
        }
        c["hooks"] = h.into();
        c["annotations"] = serde_json::json!({"org.example": "yes"});
    });
    let oci = Oci::new(d);
    let pid = oci.create("c1", &b);
    let s = oci.state("c1");
    assert_eq!((s["status"].as_str(), s["pid"].as_i64(), s["id"].as_str()), (Some("created"), Some(pid as i64), Some("c1")));
    assert_eq!(s["bundle"].as_str(), Some(b.canonicalize().unwrap().to_str().unwrap()));
    assert_eq!(s["annotations"]["org.example"], "yes");
    assert!(!oci.log("c1").contains("ready"), "the program ran before start");
    for k in ["createRuntime", "createContainer"] {
        let h: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join(format!("{k}.json"))).unwrap()).unwrap();
        assert_eq!((h["id"].as_str(), h["status"].as_str(), h["pid"].as_i64()), (Some("c1"), Some("created"), Some(pid as i64)), "{k}");
    }
    assert!(!d.join("startContainer.json").exists());

    oci.ok(&["start", "c1"]);
    oci.wait_log("c1", "ready");
    assert_eq!(oci.state("c1")["status"], "running");
    // ps: the tender first, then its instance process.
    let pids: Vec<i32> = serde_json::from_str(&oci.ok(&["ps", "--format", "json", "c1"])).unwrap();
    assert!(pids.len() >= 2 && pids[0] == pid, "{pids:?}");
    // exec: a sibling instance of the program the command names in the
    // container's root file system; without --detach its status is exec's.
    let o = oci.run(&["exec", "c1", "/app", "exit", "5"]);
    assert_eq!(o.status.code(), Some(5), "{}", String::from_utf8_lossy(&o.stderr));
    oci.fails(&["exec", "c1", "ls"], "process.args[0] ls: no such file in the root file system");
    oci.fails(&["exec", "c1"], "exec needs a command");
    oci.fails(&["exec", "--user", "root", "c1", "/app"], "--user \"root\": expected UID[:GID]");
    oci.fails(&["exec", "--process", "/nonexistent-shoal", "c1"], "cannot read the process file /nonexistent-shoal");
    oci.fails(&["exec", "--tty", "--detach", "c1", "/app"], "cannot allocate tty if runc will detach without setting console socket");
    let h: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("poststart.json")).unwrap()).unwrap();
    assert_eq!(h["status"], "running");
    assert!(d.join("startContainer.json").exists());
    oci.fails(&["start", "c1"], "cannot start an already running container");
    oci.fails(&["delete", "c1"], "cannot delete container c1 that is not stopped: running");
    assert_eq!(oci.state("c1")["status"], "running", "a refused delete changed the container");
    oci.fails(&["kill", "c1", "BOGUS"], "unknown signal \"BOGUS\"");

    // SIGKILL: what SIGTERM does is the tender's business (it may hand it
    // to the guest), SIGKILL ends the instance whatever the guest does.
    oci.ok(&["kill", "c1", "KILL"]);
    assert_eq!(wait_child(pid), Err(libc::SIGKILL));
    let s = oci.state("c1");
    assert_eq!((s["status"].as_str(), s["pid"].as_i64()), (Some("stopped"), Some(0)));
    oci.fails(&["kill", "c1", "KILL"], "container not running");
    oci.fails(&["exec", "c1", "/app"], "cannot exec in a stopped container");
    oci.fails(&["start", "c1"], "cannot start a container that has stopped");
    oci.ok(&["delete", "c1"]);
    oci.fails(&["state", "c1"], "container does not exist");
    assert!(oci.entries().is_empty(), "state left behind: {:?}", oci.entries());
    let h: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("poststop.json")).unwrap()).unwrap();
    assert_eq!(h["status"], "stopped");
    assert_eq!(std::fs::read_to_string(d.join("order")).unwrap().split_whitespace().collect::<Vec<_>>(), hooks, "hooks ran out of order");
}

#[test]
fn exit_status_output_env_and_args_pass_through() {
    if !root_or_skip() {
        return;
    }
    let t = scratch();
    let oci = Oci::new(t.path());
    let b = bundle(t.path(), &["exit", "42"], |_| {});
    let pid = oci.create("e42", &b);
    oci.ok(&["start", "e42"]);
    assert_eq!(wait_child(pid), Ok(42));
    assert!(oci.log("e42").contains("exiting with 42"), "{}", oci.log("e42"));
    oci.ok(&["delete", "e42"]);

    // apps/hello.c prints its arguments and environment.
    let t = scratch();
    let oci = Oci::new(t.path());
    let b = bundle(t.path(), &["one", "two"], |c| c["linux"]["resources"] = serde_json::json!({"memory": {"limit": 64 << 20}}));
    std::fs::copy(&images().1, b.join("rootfs/app")).unwrap();
    let pid = oci.create("hello", &b);
    let cg = std::fs::read_to_string("/sys/fs/cgroup/memory/shoal-oci/hello/memory.limit_in_bytes")
        .or_else(|_| std::fs::read_to_string("/sys/fs/cgroup/shoal-oci/hello/memory.max"));
    assert_eq!(cg.map(|s| s.trim().to_string()).ok().as_deref(), Some("67108864"), "the memory limit reaches the cgroup");
    oci.ok(&["start", "hello"]);
    assert_eq!(wait_child(pid), Ok(0));
    let log = oci.log("hello");
    for want in ["hello, world", "argv[1]=one", "argv[2]=two", "env: GREETING=hi"] {
        assert!(log.contains(want), "{want:?} missing from {log}");
    }
    oci.ok(&["delete", "hello"]);
    assert!(!Path::new("/sys/fs/cgroup/memory/shoal-oci/hello").exists(), "cgroup left behind");
}

/// `process.args[0]` is found inside the root file system with
/// its symlinks resolved there (as the guest resolves them), so a symlink
/// naming a host file outside it finds nothing, and the tender is handed
/// the file found, not a path to resolve again.
#[test]
fn image_symlinks_resolve_inside_the_root_file_system() {
    if !root_or_skip() {
        return;
    }
    let t = scratch();
    let d = t.path();
    let oci = Oci::new(d);
    // A runnable image outside the root file system.
    let outside = d.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::copy(&images().0, outside.join("app")).unwrap();
    let b = bundle(&d.join("abs"), &["exit", "7"], |_| {});
    std::fs::remove_file(b.join("rootfs/app")).unwrap();
    std::os::unix::fs::symlink(outside.join("app"), b.join("rootfs/app")).unwrap();
    oci.fails(&["create", "--bundle", b.to_str().unwrap(), "abs"], "process.args[0] /app: no such file in the root file system");
    let b = bundle(&d.join("rel"), &["exit", "7"], |c| c["process"]["args"][0] = "/rel".into());
    std::os::unix::fs::symlink("../../../outside/app", b.join("rootfs/rel")).unwrap();
    assert!(b.join("rootfs/rel").is_file(), "the relative symlink names the outside image on the host");
    oci.fails(&["create", "--bundle", b.to_str().unwrap(), "rel"], "process.args[0] /rel: no such file in the root file system");
    // A host file that is not an image, named by a symlink through a
    // directory of the root file system.
    let b = bundle(&d.join("etc"), &[], |c| c["process"]["args"][0] = "/etc/passwd".into());
    std::os::unix::fs::symlink("/etc", b.join("rootfs/etc")).unwrap();
    oci.fails(&["create", "--bundle", b.to_str().unwrap(), "etc"], "process.args[0] /etc/passwd: no such file in the root file system");
    assert!(oci.entries().is_empty(), "failed creates left state: {:?}", oci.entries());

    // Symlinks that stay inside still lead to the image: bin/app -> /app
    // (the root file system's /app), found through PATH.
    let b = bundle(&d.join("inside"), &["exit", "42"], |c| c["process"]["args"][0] = "app".into());
    std::fs::create_dir(b.join("rootfs/bin")).unwrap();
    std::os::unix::fs::symlink("/app", b.join("rootfs/bin/app")).unwrap();
    let pid = oci.create("inside", &b);
    oci.ok(&["start", "inside"]);
    assert_eq!(wait_child(pid), Ok(42));
    assert!(oci.log("inside").contains("exiting with 42"), "{}", oci.log("inside"));
    oci.ok(&["delete", "inside"]);
}

#[test]
fn delete_force_kills_and_delete_of_created_needs_force() {
    if !root_or_skip() {
        return;
    }
    let t = scratch();
    let oci = Oci::new(t.path());
    let b = bundle(t.path(), &["wait"], |_| {});
    let pid = oci.create("f1", &b);
    oci.ok(&["start", "f1"]);
    oci.wait_log("f1", "ready");
    oci.ok(&["delete", "--force", "f1"]);
    assert_eq!(wait_child(pid), Err(libc::SIGKILL));
    oci.fails(&["state", "f1"], "container does not exist");
    // A created container (waiting for start) is not stopped either: the
    // spec wants --force.
    let pid = oci.create("f2", &b);
    oci.fails(&["delete", "f2"], "cannot delete container f2 that is not stopped: created");
    assert_eq!(oci.state("f2")["status"], "created");
    oci.ok(&["delete", "--force", "f2"]);
    assert_eq!(wait_child(pid), Err(libc::SIGKILL));
    assert!(!oci.log("f2").contains("ready"));
    // kill --all of a running container.
    let pid = oci.create("f3", &b);
    oci.ok(&["start", "f3"]);
    oci.wait_log("f3", "ready");
    oci.ok(&["kill", "--all", "f3", "9"]);
    assert_eq!(wait_child(pid), Err(libc::SIGKILL));
    oci.ok(&["delete", "f3"]);
    assert!(oci.entries().is_empty(), "{:?}", oci.entries());
}

#[test]
fn bad_input_gives_runc_errors_and_leaves_no_state() {
    if !root_or_skip() {
        return;
    }
    let t = scratch();
    let d = t.path();
    let oci = Oci::new(d);
    let empty = d.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = empty.to_str().unwrap();
    oci.fails(&["create", "--bundle", e, "x"], "JSON specification file config.json not found");
    oci.fails(&["create", "--bundle", "/nonexistent-bundle", "x"], "chdir /nonexistent-bundle: no such file or directory");
    for cmd in ["state", "start", "delete"] {
        oci.fails(&[cmd, "nope"], "container does not exist");
    }
    oci.fails(&["kill", "nope", "KILL"], "container does not exist");
    oci.ok(&["delete", "--force", "nope"]);
    assert!(oci.entries().is_empty(), "{:?}", oci.entries());
    // With --log and --log-format json the error is also a JSON line there
    // (containerd's shim reads it).
    let log = d.join("log.json");
    oci.fails(&["--log", log.to_str().unwrap(), "--log-format", "json", "state", "nope"], "container does not exist");
    let line: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&log).unwrap().lines().last().unwrap()).unwrap();
    assert_eq!((line["level"].as_str(), line["msg"].as_str()), (Some("error"), Some("container does not exist")));
    let features: serde_json::Value = serde_json::from_str(&oci.ok(&["features"])).unwrap();
    assert_eq!(features["hooks"].as_array().map(Vec::len), Some(6));
    assert!(oci.ok(&["--version"]).starts_with("shoal-oci version "));

    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    // process.user and process.cwd are given to the guest (tests/cri.rs).
    let refused: [(&str, Edit); 4] = [
        ("process.args[0] /missing: no such file", Box::new(|c| c["process"]["args"] = serde_json::json!(["/missing"]))),
        ("process.cwd work: must be an absolute path", Box::new(|c| c["process"]["cwd"] = "work".into())),
        // Directories and regular files are mounted (read-only or
        // writable); a device is not.
        (
            "mount of /dev/null on /data: a shoal guest sees",
            Box::new(|c| c["mounts"] = serde_json::json!([{"destination": "/data", "type": "bind", "source": "/dev/null", "options": ["rbind"]}])),
        ),
        ("annotation org.shoal.tender=xen", Box::new(|c| c["annotations"] = serde_json::json!({"org.shoal.tender": "xen"}))),
    ];
    for (i, (needle, edit)) in refused.iter().enumerate() {
        let sub = d.join(format!("r{i}"));
        let b = bundle(&sub, &[], |c| edit(c));
        oci.fails(&["create", "--bundle", b.to_str().unwrap(), "x"], needle);
    }
    let b = bundle(&d.join("ok"), &["wait"], |_| {});
    oci.fails(&["create", "--bundle", b.to_str().unwrap(), "bad/id"], "invalid id format");
    assert!(oci.entries().is_empty(), "failed creates left state: {:?}", oci.entries());

    // A failing createRuntime hook fails create and leaves nothing.
    let hb = bundle(&d.join("hook"), &["wait"], |c| {
        c["hooks"] = serde_json::json!({"createRuntime": [{"path": "/bin/sh", "args": ["sh", "-c", "echo hook says no >&2; exit 3"]}]})
    });
    oci.fails(&["create", "--bundle", hb.to_str().unwrap(), "h"], "createRuntime hook /bin/sh failed (exit status: 3): hook says no");
    assert!(oci.entries().is_empty(), "{:?}", oci.entries());

    // A duplicate id is refused and the first container is untouched.
    let pid = oci.create("dup", &b);
    oci.fails(&["create", "--bundle", b.to_str().unwrap(), "dup"], "container with given ID already exists");
    assert_eq!(oci.state("dup")["status"], "created");
    oci.ok(&["delete", "--force", "dup"]);
    assert_eq!(wait_child(pid), Err(libc::SIGKILL));
    assert!(oci.entries().is_empty(), "{:?}", oci.entries());
}

/// Receives one descriptor sent with SCM_RIGHTS on `conn`.
fn recv_fd(conn: &std::os::unix::net::UnixStream) -> OwnedFd {
    let mut buf = [0u8; 256];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr pointing at live buffers of the given sizes;
    // the descriptor read from the control message is a new one for us.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control);
        assert!(libc::recvmsg(conn.as_raw_fd(), &mut msg, 0) > 0, "recvmsg: {}", std::io::Error::last_os_error());
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        assert!(!cmsg.is_null() && (*cmsg).cmsg_type == libc::SCM_RIGHTS, "no descriptor received");
        OwnedFd::from_raw_fd(std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>()))
    }
}

#[test]
fn console_socket_receives_the_terminal() {
    if !root_or_skip() {
        return;
    }
    let t = scratch();
    let d = t.path();
    let oci = Oci::new(d);
    let b = bundle(d, &["tty"], |c| c["process"]["terminal"] = true.into());
    oci.fails(&["create", "--bundle", b.to_str().unwrap(), "t0"], "cannot allocate tty if runc will detach without setting console socket");
    let sock = d.join("console.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let pid_file = d.join("t1.pid");
    let create = Command::new(bin("shoal-oci"))
        .arg("--root")
        .arg(&oci.root)
        .args(["create", "--bundle"])
        .arg(&b)
        .arg("--console-socket")
        .arg(&sock)
        .arg("--pid-file")
        .arg(&pid_file)
        .arg("t1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("t1.err")).unwrap())
        .spawn()
        .unwrap();
    let (conn, _) = listener.accept().unwrap();
    let master = recv_fd(&conn);
    let mut create = create;
    assert!(create.wait().unwrap().success(), "{}", std::fs::read_to_string(d.join("t1.err")).unwrap());
    let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    oci.ok(&["start", "t1"]);
    let mut out = String::new();
    let mut f = std::fs::File::from(master);
    let mut buf = [0u8; 256];
    // Read until the program's line arrives (EIO once the terminal's last
    // user has gone).
    while !out.contains('\n') {
        match f.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    // The guest's output came through the terminal, and its stdin is one
    // (the kernel reports isatty for stdin only; stdout reads 0 there).
    assert!(out.contains("isatty 1 "), "the guest's stdin is not the terminal: {out:?}");
    assert_eq!(wait_child(pid), Ok(0));
    oci.ok(&["delete", "t1"]);
}

/// The test images as oci-archives made by `shoal oci-image` (built once):
/// `localhost/shoal-oci-test/hello` (apps/hello.c) and
/// `localhost/shoal-oci-test/app` (tests/app.c). The archives are
/// deterministic, so loading them again replaces nothing.
fn archives() -> &'static (PathBuf, PathBuf) {
    static ARCHIVES: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    ARCHIVES.get_or_init(|| {
        let (app, hello) = images();
        let dir = app.parent().unwrap();
        let make = |img: &Path, tag: &str, out: &str| {
            let out = dir.join(out);
            let o = Command::new(bin("shoal")).arg("oci-image").arg(img).args(["-t", tag, "-o"]).arg(&out).output().unwrap();
            assert!(o.status.success(), "shoal oci-image: {}", String::from_utf8_lossy(&o.stderr));
            out
        };
        (make(hello, "shoal-oci-test/hello", "hello.oci.tar"), make(app, "shoal-oci-test/app", "app.oci.tar"))
    })
}

/// Whether `tool` (a shoal_testkit feature) is here; skips otherwise.
fn have(tool: &str) -> bool {
    shoal_testkit::need(&[tool])
}

/// `podman --runtime …/shoal-oci ARGS` with the test images loaded.
fn podman(args: &[&str]) -> Output {
    static LOADED: OnceLock<()> = OnceLock::new();
    LOADED.get_or_init(|| {
        let (hello, app) = archives();
        for (a, name) in [(hello, "localhost/shoal-oci-test/hello"), (app, "localhost/shoal-oci-test/app")] {
            podman_load(a, name);
        }
    });
    Command::new("podman").arg("--runtime").arg(bin("shoal-oci")).args(args).stdin(Stdio::null()).output().unwrap()
}

/// `podman load -i ARCHIVE` of image `name`; the image that held the name
/// before (an older build of the test programs) is removed, so repeated
/// runs leave no unnamed images behind.
fn podman_load(archive: &Path, name: &str) {
    let id = || {
        let o = Command::new("podman").args(["image", "inspect", "--format", "{{.Id}}", name]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let before = id();
    let o = Command::new("podman").arg("load").arg("-i").arg(archive).output().unwrap();
    assert!(o.status.success(), "podman load {}: {}", archive.display(), String::from_utf8_lossy(&o.stderr));
    if !before.is_empty() && before != id() {
        // Fails harmlessly while a container still uses it.
        let _ = Command::new("podman").args(["rmi", &before]).output();
    }
}

/// Removes podman container `name` when dropped, so a failed assertion
/// leaves no container (and no image in use) behind.
struct PodmanRm(String);

impl Drop for PodmanRm {
    fn drop(&mut self) {
        let _ = Command::new("podman").args(["rm", "-f", "-i", &self.0]).output();
    }
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn podman_run_rm_prints_hello_world_and_passes_exit_status() {
    if !root_or_skip() || !have("podman") {
        return;
    }
    let o = podman(&["run", "--rm", "localhost/shoal-oci-test/hello", "from-podman"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("hello, world") && out.contains("argv[1]=from-podman") && out.contains("env: container=podman"), "{}", text(&o));
    let o = podman(&["run", "--rm", "localhost/shoal-oci-test/app", "exit", "42"]);
    assert_eq!(o.status.code(), Some(42), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("exiting with 42"));
    // The tender and the memory mode chosen by annotation; a bad choice is refused.
    let o = podman(&["run", "--rm", "--annotation", "org.shoal.mem-mode=ksm", "-m", "64m", "localhost/shoal-oci-test/app"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    match std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        Ok(_) => {
            let o = podman(&["run", "--rm", "--annotation", "org.shoal.tender=hvt", "localhost/shoal-oci-test/app", "exit", "7"]);
            assert_eq!(o.status.code(), Some(7), "hvt: {}", text(&o));
        }
        Err(e) => shoal_testkit::skip("kvm", &format!("the hvt part: /dev/kvm: {e}")),
    }
    let o = podman(&["run", "--rm", "--annotation", "org.shoal.tender=xen", "localhost/shoal-oci-test/app"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(text(&o).contains("annotation org.shoal.tender=xen: expected one of spt, hvt"), "{}", text(&o));
}

#[test]
fn podman_run_detached_logs_ps_stop_rm() {
    if !root_or_skip() || !have("podman") {
        return;
    }
    let name = format!("shoal-oci-test-d{}", std::process::id());
    let _rm = PodmanRm(name.clone());
    let o = podman(&["run", "-d", "--name", &name, "localhost/shoal-oci-test/app", "wait"]);
    assert!(o.status.success(), "{}", text(&o));
    let id = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let t0 = Instant::now();
    loop {
        let logs = podman(&["logs", &name]);
        if String::from_utf8_lossy(&logs.stdout).contains("ready") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no ready in the logs: {}", text(&logs));
        std::thread::sleep(Duration::from_millis(50));
    }
    let ps = podman(&["ps", "--filter", &format!("name={name}"), "--format", "{{.Names}} {{.Status}}"]);
    assert!(String::from_utf8_lossy(&ps.stdout).starts_with(&format!("{name} Up")), "{}", text(&ps));
    let state: serde_json::Value =
        serde_json::from_str(&String::from_utf8_lossy(&Command::new(bin("shoal-oci")).args(["state", &id]).output().unwrap().stdout)).unwrap();
    assert_eq!(state["status"], "running");
    // podman stop: SIGTERM to the tender, which hands it to the guest; the
    // program, asleep in sleep(60) with no handler, dies of it as on Linux
    // (143) — not of the SIGKILL podman sends after the timeout (137).
    let o = podman(&["stop", "-t", "20", &name]);
    assert!(o.status.success(), "{}", text(&o));
    let code = podman(&["inspect", "--format", "{{.State.ExitCode}} {{.State.Status}}", &name]);
    let code = String::from_utf8_lossy(&code.stdout).trim().to_string();
    assert_eq!(code, "143 exited", "SIGTERM did not end the sleeping guest");
    let o = podman(&["rm", &name]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!Path::new("/run/shoal-oci").join(&id).exists(), "runtime state left behind");
}

#[test]
fn podman_run_t_gets_a_terminal() {
    if !root_or_skip() || !have("podman") {
        return;
    }
    let o = podman(&["run", "--rm", "-t", "localhost/shoal-oci-test/app", "tty"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // The guest's stdin is the terminal (the kernel reports isatty for stdin).
    assert!(String::from_utf8_lossy(&o.stdout).contains("isatty 1 "), "{}", text(&o));
}

/// The containerd configuration docs/oci.md shows (a CRI runtime class
/// `shoal` whose runc shim calls shoal-oci), with this test's own root,
/// state and socket.
fn containerd_config(dir: &Path) -> String {
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.shoal]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.shoal.options]
    BinaryName = "{oci}"
"#,
        d = dir.display(),
        oci = bin("shoal-oci").display()
    )
}

#[test]
fn containerd_ctr_runs_shoal_images_through_the_runc_shim() {
    if !root_or_skip() || !have("containerd") {
        return;
    }
    let t = scratch();
    let d = t.path();
    std::fs::write(d.join("config.toml"), containerd_config(d)).unwrap();
    let mut daemon = Command::new("containerd")
        .arg("--config")
        .arg(d.join("config.toml"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("containerd.log")).unwrap())
        .spawn()
        .unwrap();
    let sock = d.join("containerd.sock");
    let id = format!("shoal-oci-test-{}", std::process::id());
    // Whatever happens, the task, its shim (which outlives containerd) and
    // the container go before containerd does.
    struct Cleanup<'a>(&'a mut std::process::Child, PathBuf, String);
    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            for args in [&["task", "kill", "-s", "SIGKILL"][..], &["task", "delete", "-f"], &["container", "delete"]] {
                let _ = Command::new("ctr").arg("--address").arg(&self.1).args(args).arg(&self.2).output();
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _guard = Cleanup(&mut daemon, sock.clone(), id.clone());
    let ctr = |args: &[&str]| Command::new("ctr").arg("--address").arg(&sock).args(args).stdin(Stdio::null()).output().unwrap();
    let t0 = Instant::now();
    while !ctr(&["version"]).status.success() {
        assert!(t0.elapsed() < Duration::from_secs(30), "containerd did not start: {}", std::fs::read_to_string(d.join("containerd.log")).unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    // The CRI plugin read the runtime class from the config.
    let dump = Command::new("containerd").arg("--config").arg(d.join("config.toml")).args(["config", "dump"]).output().unwrap();
    assert!(String::from_utf8_lossy(&dump.stdout).contains(&format!("BinaryName = \"{}\"", bin("shoal-oci").display())), "{}", text(&dump));

    let (hello, app) = archives();
    for a in [hello, app] {
        let o = ctr(&["images", "import", a.to_str().unwrap()]);
        assert!(o.status.success(), "ctr images import: {}", text(&o));
    }
    let oci = bin("shoal-oci");
    let o = ctr(&["run", "--rm", "--runc-binary", oci.to_str().unwrap(), "localhost/shoal-oci-test/hello:latest", &id, "/hello", "from-ctr"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("hello, world") && out.contains("argv[1]=from-ctr"), "{}", text(&o));
    let o = ctr(&["run", "--rm", "--runc-binary", oci.to_str().unwrap(), "localhost/shoal-oci-test/app:latest", &id, "/app", "exit", "42"]);
    assert_eq!(o.status.code(), Some(42), "{}", text(&o));
    // Detached: the task runs, ps lists the tender and its instance, and
    // SIGKILL stops it with status 137.
    let o = ctr(&["run", "-d", "--runc-binary", oci.to_str().unwrap(), "localhost/shoal-oci-test/app:latest", &id, "/app", "wait"]);
    assert!(o.status.success(), "{}", text(&o));
    let ls = String::from_utf8_lossy(&ctr(&["task", "ls"]).stdout).into_owned();
    assert!(ls.lines().any(|l| l.starts_with(&id) && l.ends_with("RUNNING")), "{ls}");
    // The tender forks its instance process right after start.
    let t0 = Instant::now();
    loop {
        let ps = String::from_utf8_lossy(&ctr(&["task", "ps", &id]).stdout).into_owned();
        if ps.lines().count() >= 3 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "ps lists the tender and its instance: {ps}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ctr(&["task", "kill", "-s", "SIGKILL", &id]).status.success());
    let t0 = Instant::now();
    loop {
        let ls = String::from_utf8_lossy(&ctr(&["task", "ls"]).stdout).into_owned();
        if ls.lines().any(|l| l.starts_with(&id) && l.ends_with("STOPPED")) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "the task did not stop: {ls}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = ctr(&["task", "delete", &id]);
    assert!(o.status.success() && text(&o).contains("exit code 137"), "{}", text(&o));
    assert!(ctr(&["container", "delete", &id]).status.success());
    assert!(ctr(&["containers", "ls", "-q"]).stdout.is_empty(), "containers left behind");
}

#[test]
fn podman_run_p_reaches_the_http_example() {
    let test = "podman_run_p_reaches_the_http_example";
    if !root_or_skip() || !have("podman") {
        return;
    }
    let t = scratch();
    let d = t.path();
    let http = d.join("http");
    let o = Command::new(bin("shoal")).arg("cc").arg("-O2").arg(home().join("apps/net/http.c")).arg("-o").arg(&http).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let www = d.join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::write(www.join("index.txt"), "served from the container\n").unwrap();
    let archive = d.join("http.oci.tar");
    let o =
        Command::new(bin("shoal")).arg("oci-image").arg(&http).args(["-t", "shoal-oci-test/http", "--fs"]).arg(&www).arg("-o").arg(&archive).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    podman_load(&archive, "localhost/shoal-oci-test/http");
    // As with runc: `-p` and nothing else. The container has a network
    // namespace of its own, so the tender binds the guest's port 8080 there
    // when the guest binds it (--net-bind-any), where podman forwards to.
    podman_p_on(test, &[]);
    match std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        Ok(_) => podman_p_on(test, &["--annotation", "org.shoal.tender=hvt"]),
        Err(e) => shoal_testkit::skip("kvm", &format!("the hvt part: /dev/kvm: {e}")),
    }
}

/// `podman run -d -p 127.0.0.1:18080:8080` of the HTTP example (with
/// `extra` options), two requests from the host, then stop and rm.
fn podman_p_on(test: &str, extra: &[&str]) {
    let name = format!("shoal-oci-test-http{}", std::process::id());
    let _rm = PodmanRm(name.clone());
    let mut args = vec!["run", "-d", "--name", &name, "-p", "127.0.0.1:18080:8080"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["localhost/shoal-oci-test/http", "8080", "/"]);
    let o = podman(&args);
    assert!(o.status.success(), "{test} {extra:?}: {}", text(&o));
    let get = |path: &str| -> Option<String> {
        use std::io::Write;
        let mut c = std::net::TcpStream::connect_timeout(&"127.0.0.1:18080".parse().unwrap(), Duration::from_secs(2)).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
        let mut s = String::new();
        c.read_to_string(&mut s).ok()?;
        Some(s)
    };
    let t0 = Instant::now();
    let hello = loop {
        match get("/hello") {
            Some(s) if s.contains("hello from http") => break s,
            other => assert!(t0.elapsed() < Duration::from_secs(30), "{extra:?}: no answer through -p: {other:?} {}", text(&podman(&["logs", &name]))),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(hello.starts_with("HTTP/1.1 200"), "{extra:?}: {hello}");
    assert!(get("/index.txt").unwrap_or_default().contains("served from the container"), "the image's files are the guest's root (the root mount)");
    assert!(podman(&["stop", "-t", "5", &name]).status.success());
    assert!(podman(&["rm", &name]).status.success());
}

/// The opencontainers runtime-tools validation tests that apply
/// (scripts/oci-validate). scripts/setup fetches runtime-tools' Go module
/// into ~/.cache/shoal when go is installed (the testkit feature `go` is
/// both), so the test suite itself fetches nothing.
#[test]
fn runtime_tools_validation_tests_pass() {
    if !root_or_skip() || !have("go") {
        return;
    }
    let o = Command::new(home().join("scripts/oci-validate")).stdin(Stdio::null()).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "runtime-tools validation failed:\n{out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("oci-validate: 11 passed, 0 failed"), "{out}");
}

/// `shoal oci-image` of a static Linux executable (apps/exec/threads.c,
/// `gcc -static`) packs the instance image built around it under the
/// executable's name; podman runs it through shoal-oci with the output
/// and exit status of the native run, on spt and hvt.
#[test]
fn podman_runs_an_oci_image_of_a_static_executable_like_natively() {
    if !root_or_skip() || !have("podman") {
        return;
    }
    let dir = scratch();
    let exe = dir.path().join("threads");
    let o = Command::new("gcc").args(["-static", "-O2", "-pthread"]).arg(home().join("apps/exec/threads.c")).arg("-o").arg(&exe).output().unwrap();
    assert!(o.status.success(), "gcc -static: {}", text(&o));
    let native = Command::new(&exe).args(["one", "two words"]).env_clear().env("GREETING", "hi").output().unwrap();
    assert_eq!(native.status.code(), Some(7), "{}", text(&native));
    let archive = dir.path().join("threads.oci.tar");
    let o = Command::new(bin("shoal")).arg("oci-image").arg(&exe).args(["-t", "shoal-oci-test/exec-threads", "-o"]).arg(&archive).output().unwrap();
    assert!(o.status.success(), "shoal oci-image: {}", text(&o));
    podman_load(&archive, "localhost/shoal-oci-test/exec-threads");
    let mut tenders = vec!["spt"];
    match std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        Ok(_) => tenders.push("hvt"),
        Err(e) => shoal_testkit::skip("kvm", &format!("the hvt part: /dev/kvm: {e}")),
    }
    for t in tenders {
        let o = Command::new("podman")
            .arg("--runtime")
            .arg(bin("shoal-oci"))
            .args([
                "run",
                "--rm",
                "--annotation",
                &format!("org.shoal.tender={t}"),
                "-e",
                "GREETING=hi",
                "localhost/shoal-oci-test/exec-threads",
                "one",
                "two words",
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(7), "{t}: {}", text(&o));
        // argv[0] differs (the path given); every other line is the native run's.
        let lines = |b: &[u8]| String::from_utf8_lossy(b).lines().filter(|l| !l.contains("argv[0]")).map(str::to_string).collect::<Vec<_>>();
        assert_eq!(lines(&o.stdout), lines(&native.stdout), "{t}: {}", text(&o));
    }
}
