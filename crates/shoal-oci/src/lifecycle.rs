//! The operations of the OCI runtime spec (runtime.md): create, start,
//! state, kill, delete — for a container whose process is a shoal tender
//! (docs/design.md "Serving functions").
//!
//! `create` forks the container process and returns: that process has
//! joined the container's network namespace and cgroup, taken the
//! terminal or the caller's stdio, and blocks opening `exec.fifo` for
//! writing. `start` opens the FIFO, which lets it continue: it `exec`s
//! `shoal-tender` (beside `shoal-oci`) with the options mapped from
//! config.json, so the pid create reported stays the tender's pid, and the
//! engine's subreaper (conmon, containerd's shim) sees the guest's exit
//! status as the container's. The tender's own instance process dies with
//! it (PDEATHSIG), so killing the pid ends the container.

use crate::config::{self, Hooks, Plan};
use crate::state::{self, Root, Saved, Status};
use crate::{cgroup, hooks, sys};
use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long `start` waits for a created container's process to answer on
/// its FIFO, and `delete --force` for a killed one to end.
const WAIT: Duration = Duration::from_secs(30);

/// An operation that cannot be done, in runc's words where runc has them.
#[derive(Debug, thiserror::Error)]
pub enum LifeError {
    /// A bundle directory that does not exist.
    #[error("chdir {0}: no such file or directory")]
    NoBundle(PathBuf),
    /// The state.
    #[error(transparent)]
    State(#[from] state::StateError),
    /// config.json.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// A cgroup.
    #[error(transparent)]
    Cgroup(#[from] cgroup::CgroupError),
    /// A hook.
    #[error(transparent)]
    Hook(#[from] hooks::HookError),
    /// runc's wording.
    #[error("cannot start an already running container")]
    StartRunning,
    /// runc's wording.
    #[error("cannot start a container that has stopped")]
    StartStopped,
    /// Still being created.
    #[error("cannot {0} a container that is still being created")]
    Creating(&'static str),
    /// runc's wording.
    #[error("cannot delete container {0} that is not stopped: {1}")]
    DeleteRunning(String, &'static str),
    /// runc's wording.
    #[error("container not running")]
    NotRunning,
    /// runc's wording.
    #[error("cannot update a stopped container")]
    UpdateStopped,
    /// runc's wording.
    #[error("unknown signal {0:?}")]
    BadSignal(String),
    /// A terminal without a socket to send it to (runc's wording).
    #[error("cannot allocate tty if runc will detach without setting console socket")]
    NoConsoleSocket,
    /// A socket without a terminal (runc's wording).
    #[error("cannot use console socket if runc will not detach or allocate tty")]
    ConsoleWithoutTerminal,
    /// The tender program is missing.
    #[error("cannot find shoal-tender beside shoal-oci (looked for {0}); build it with cargo build --release")]
    NoTender(PathBuf),
    /// The container process failed before waiting for start.
    #[error("the container process could not be set up: {0}")]
    Setup(String),
    /// The container process did not answer start.
    #[error("the container process did not take the start signal within {0} s")]
    StartTimeout(u64),
    /// A killed container did not end.
    #[error("container {0} did not stop within {1} s of SIGKILL")]
    KillTimeout(String, u64),
    /// A system call failed.
    #[error("cannot {what}: {source}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
}

pub(crate) fn sys_err(what: &'static str) -> impl FnOnce(std::io::Error) -> LifeError {
    move |source| LifeError::Sys { what, source }
}

/// Where warnings go (the spec's "log a warning": a failed poststop hook,
/// a limit lowered to what the host allows).
pub type Warn<'a> = &'a dyn Fn(&str);

/// `create`'s arguments.
pub struct CreateArgs<'a> {
    /// Container id.
    pub id: &'a str,
    /// Bundle directory.
    pub bundle: &'a Path,
    /// Where to write the tender's pid.
    pub pid_file: Option<&'a Path>,
    /// Where to send the terminal's master.
    pub console_socket: Option<&'a Path>,
    /// Descriptors 3..3+N stay open for the container.
    pub preserve_fds: u32,
}

/// The tender program: `shoal-tender` beside this program.
pub(crate) fn tender_program() -> Result<PathBuf, LifeError> {
    let exe = std::env::current_exe().map_err(sys_err("find the running program"))?;
    let p = exe.parent().unwrap_or(Path::new("/")).join("shoal-tender");
    if p.is_file() {
        Ok(p)
    } else {
        Err(LifeError::NoTender(p))
    }
}

fn hooks_path(root: &Root, id: &str) -> PathBuf {
    root.dir(id).join("hooks.json")
}

fn load_hooks(root: &Root, id: &str) -> Hooks {
    std::fs::read(hooks_path(root, id)).ok().and_then(|t| serde_json::from_slice(&t).ok()).unwrap_or_default()
}

fn state_json(root: &Root, s: &Saved, status: Status) -> Vec<u8> {
    let mut st = root.oci_state(s);
    st.status = status.as_str();
    st.pid = s.pid;
    serde_json::to_vec(&st).unwrap_or_default()
}

/// `create`: see the module docs. On any error nothing is left: no
/// process, no cgroup, no state.
pub fn create(root: &Root, a: &CreateArgs, warn: Warn) -> Result<(), LifeError> {
    state::check_id(a.id)?;
    let bundle = std::fs::canonicalize(a.bundle).ok().filter(|b| b.is_dir()).ok_or_else(|| LifeError::NoBundle(a.bundle.into()))?;
    let plan = config::load(&bundle)?.plan(&bundle)?;
    if plan.terminal && a.console_socket.is_none() {
        return Err(LifeError::NoConsoleSocket);
    }
    if !plan.terminal && a.console_socket.is_some() {
        return Err(LifeError::ConsoleWithoutTerminal);
    }
    let tender = tender_program()?;
    root.claim(a.id)?;
    let mut saved = Saved {
        id: a.id.into(),
        pid: 0,
        pid_start: 0,
        bundle: bundle.clone(),
        rootfs: plan.rootfs.clone(),
        created: state::now_rfc3339(),
        annotations: plan.annotations.clone(),
        cgroups: Vec::new(),
        creating: true,
    };
    let mut child = None;
    let r = create_in(root, a, &plan, &tender, &mut saved, &mut child, warn);
    if r.is_err() {
        if let Some(pid) = child {
            // SAFETY: kill and waitpid on our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
        cgroup::remove(&saved.cgroups);
        let _ = root.remove(a.id);
    }
    r
}

/// The fixed strings the container process needs after the fork, made
/// before it (allocation is best avoided between fork and exec).
pub(crate) struct ChildPlan {
    tender: CString,
    argv: Vec<CString>,
    env: Vec<CString>,
    /// `create`'s start FIFO, which the process waits on; `exec` has none.
    fifo: Option<CString>,
    /// `cgroup.procs` files the process joins before it runs the tender
    /// (`exec`: the container's; `create` is put into its own by the
    /// parent, which makes them).
    pub(crate) join_cgroups: Vec<CString>,
    netns: Option<CString>,
    new_netns: bool,
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlimit)>,
    keep_fds: i32,
    /// The image's descriptor (at or above `keep_fds`), left open for the
    /// tender, which reads it as `/proc/self/fd/N`.
    image_fd: i32,
    /// That descriptor, held open (never read here) while the plan lives.
    _image: OwnedFd,
}

impl ChildPlan {
    /// Joins this network namespace (a path) rather than what the
    /// configuration says.
    pub(crate) fn set_netns(&mut self, ns: CString) {
        self.netns = Some(ns);
        self.new_netns = false;
    }
}

/// The tender's command line, environment and limits for `plan` (the
/// program `tender`; descriptors below `keep_fds` stay open for it): what
/// the container process needs after the fork, made before it.
pub(crate) fn child_plan(plan: &Plan, tender: &Path, keep_fds: i32, warn: Warn) -> Result<ChildPlan, LifeError> {
    let cstr = |s: &str| CString::new(s).map_err(|_| LifeError::Sys { what: "pass an argument", source: std::io::ErrorKind::InvalidInput.into() });
    // The image goes to the tender as the file found inside the root file
    // system (config::find_image), not as a path it would resolve again.
    let image = sys::dup_at_least(&*plan.image, keep_fds).map_err(sys_err("pass the image"))?;
    let mut argv = vec![CString::new(tender.as_os_str().as_bytes()).unwrap_or_default()];
    for (i, t) in plan.tender_args.iter().enumerate() {
        if i == plan.image_arg {
            argv.push(cstr(&format!("/proc/self/fd/{}", image.as_raw_fd()))?);
        } else {
            argv.push(cstr(t)?);
        }
    }
    // The tender needs no environment of the engine's; shoal's own
    // settings (SHOAL_POOL_DIR for the pool mode) pass through, and the
    // cache that create found an executable's kernel and instance images
    // in (HOME's, unless SHOAL_CACHE names one), named absolutely.
    let mut env: Vec<CString> = std::env::vars_os()
        .filter(|(k, _)| k.as_bytes().starts_with(b"SHOAL_"))
        .filter_map(|(k, v)| CString::new([k.as_bytes(), b"=", v.as_bytes()].concat()).ok())
        .collect();
    if std::env::var_os("SHOAL_CACHE").is_none() {
        if let Some(cache) = shoal_tender::exec_cache_dir().as_deref().and_then(Path::parent) {
            env.extend(CString::new([b"SHOAL_CACHE=", cache.as_os_str().as_bytes()].concat()).ok());
        }
    }
    let mut rlimits = Vec::new();
    for (name, res, soft, hard) in &plan.rlimits {
        let (res, soft, hard) = (*res, *soft, *hard);
        let mut cur = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes one rlimit.
        unsafe { libc::getrlimit(res, &mut cur) };
        let (mut soft, mut hard) = (soft, hard);
        // Raising a hard limit needs CAP_SYS_RESOURCE; without it the
        // host's limit stays, and the log says so.
        if hard > cur.rlim_max && !can_raise_limits() {
            warn(&format!("process.rlimits: {name} lowered from {hard} to the host's hard limit {} (raising it needs CAP_SYS_RESOURCE)", cur.rlim_max));
            hard = cur.rlim_max;
            soft = soft.min(hard);
        }
        rlimits.push((res, libc::rlimit { rlim_cur: soft, rlim_max: hard }));
    }
    Ok(ChildPlan {
        tender: argv[0].clone(),
        argv,
        env,
        fifo: None,
        join_cgroups: Vec::new(),
        netns: plan.netns.as_deref().map(sys::cstr).transpose().map_err(sys_err("name the network namespace"))?,
        new_netns: plan.new_netns,
        rlimits,
        keep_fds,
        image_fd: image.as_raw_fd(),
        _image: image,
    })
}

/// The pseudo-terminal a process with `terminal: true` gets when the
/// caller gave a console socket: its master end sent over the socket, its
/// slave end returned for the process (create and exec alike).
pub(crate) fn console_terminal(plan: &Plan, console_socket: Option<&Path>) -> Result<Option<std::os::fd::OwnedFd>, LifeError> {
    Ok(match (plan.terminal, console_socket) {
        (true, Some(sock)) => {
            let (master, slave) = sys::openpty(plan.console_size.map(|c| (c.height, c.width))).map_err(sys_err("open a pseudo-terminal"))?;
            sys::send_fd(sock, &master, "/dev/ptmx").map_err(sys_err("send the terminal over the console socket"))?;
            Some(slave)
        }
        _ => None,
    })
}

fn create_in(root: &Root, a: &CreateArgs, plan: &Plan, tender: &Path, saved: &mut Saved, child: &mut Option<i32>, warn: Warn) -> Result<(), LifeError> {
    root.save(saved)?;
    let hooks_text = serde_json::to_vec(&plan.hooks).unwrap_or_default();
    state::write_atomic(&hooks_path(root, a.id), &hooks_text)?;
    let fifo = root.fifo(a.id);
    sys::mkfifo(&fifo).map_err(sys_err("make the start FIFO"))?;

    let terminal = console_terminal(plan, a.console_socket)?;

    let keep_fds = 3 + a.preserve_fds as i32;
    let mut cp = child_plan(plan, tender, keep_fds, warn)?;
    cp.fifo = Some(sys::cstr(&fifo).map_err(sys_err("name the FIFO"))?);
    let (sync_r, sync_w) = sys::pipe().map_err(sys_err("make a pipe"))?;

    // SAFETY: this program runs no other threads (create starts none), so
    // the child may run ordinary code; it only makes system calls on the
    // prepared strings and ends in exec or _exit.
    let pid = sys::check(unsafe { libc::fork() }).map_err(sys_err("fork the container process"))?;
    if pid == 0 {
        drop(sync_r);
        container_process(&cp, terminal.as_ref(), sync_w);
    }
    *child = Some(pid);
    drop(sync_w);
    drop(terminal);
    let mut answer = Vec::new();
    let _ = std::fs::File::from(sync_r).read_to_end(&mut answer);
    match answer.split_first() {
        Some((0, _)) => {}
        Some((_, msg)) => return Err(LifeError::Setup(String::from_utf8_lossy(msg).into_owned())),
        None => return Err(LifeError::Setup("it ended before it was ready".into())),
    }
    saved.pid = pid;
    saved.pid_start = state::proc_stat(pid).map(|(t, _)| t).unwrap_or(0);
    let rel = cgroup::relative_path(plan.cgroups_path.as_deref(), a.id);
    saved.cgroups = cgroup::apply(&rel, pid, &plan.resources)?;
    root.save(saved)?;

    // runc and runtime-tools' hooks_stdin test: the create-phase hooks see
    // the container as created (its process exists and waits).
    let st = state_json(root, saved, Status::Created);
    hooks::run("prestart", &plan.hooks.prestart, &st, None)?;
    hooks::run("createRuntime", &plan.hooks.create_runtime, &st, None)?;
    hooks::run("createContainer", &plan.hooks.create_container, &st, Some(pid))?;
    if let Some(p) = a.pid_file {
        let p = if p.is_absolute() { p.to_path_buf() } else { std::env::current_dir().unwrap_or_default().join(p) };
        state::write_atomic(&p, pid.to_string().as_bytes())?;
    }
    saved.creating = false;
    root.save(saved)?;
    Ok(())
}

/// Whether this process may raise hard resource limits (CAP_SYS_RESOURCE
/// in its effective set).
fn can_raise_limits() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()).unwrap_or(0);
    eff & (1 << 24) != 0
}

/// The container process between fork and exec: joins the namespace (and,
/// for `exec`, the container's cgroups), applies limits and the terminal,
/// says it is ready on `sync`, waits on the FIFO for start (`create`),
/// then becomes the tender. Never returns.
pub(crate) fn container_process(cp: &ChildPlan, terminal: Option<&OwnedFd>, sync: OwnedFd) -> ! {
    let fail = |what: &str| -> ! {
        let e = std::io::Error::last_os_error();
        let msg = format!("\x01cannot {what}: {e}");
        // SAFETY: writes a buffer we own to the pipe we own, then exits
        // without running the parent's atexit handlers or destructors.
        unsafe {
            libc::write(sync.as_raw_fd(), msg.as_ptr().cast(), msg.len());
            libc::_exit(1)
        }
    };
    // SAFETY: plain system calls on descriptors and strings
    // this process owns; failures are reported through `fail`.
    unsafe {
        // A session of its own: no terminal signals from the caller's
        // terminal, and the right to take the container's terminal.
        libc::setsid();
        if let Some(t) = terminal {
            if libc::ioctl(t.as_raw_fd(), libc::TIOCSCTTY, 0) != 0 {
                fail("make the pseudo-terminal the controlling terminal");
            }
            for fd in 0..3 {
                if libc::dup2(t.as_raw_fd(), fd) < 0 {
                    fail("connect the pseudo-terminal");
                }
            }
        }
        if let Some(ns) = &cp.netns {
            let fd = libc::open(ns.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 || libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                fail("join the container's network namespace");
            }
            libc::close(fd);
        } else if cp.new_netns && libc::unshare(libc::CLONE_NEWNET) != 0 {
            fail("make a network namespace");
        }
        for (res, lim) in &cp.rlimits {
            if libc::setrlimit(*res, lim) != 0 {
                fail("set process.rlimits");
            }
        }
        // Whatever the engine left open beyond stdio and the preserved
        // descriptors must not reach the tender.
        libc::syscall(libc::SYS_close_range, cp.keep_fds as libc::c_uint, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC);
        if libc::fcntl(cp.image_fd, libc::F_SETFD, 0) != 0 {
            fail("pass the image to the tender");
        }
        for procs in &cp.join_cgroups {
            // "0" is the writing process itself, in v1 and v2 alike.
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                fail("join the container's cgroup");
            }
            libc::close(fd);
        }
        libc::write(sync.as_raw_fd(), [0u8].as_ptr().cast(), 1);
        drop(sync);
        if let Some(fifo) = &cp.fifo {
            let fd = libc::open(fifo.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                libc::_exit(125);
            }
            libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
        }
        let mut argv: Vec<*const libc::c_char> = cp.argv.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut envp: Vec<*const libc::c_char> = cp.env.iter().map(|a| a.as_ptr()).collect();
        envp.push(std::ptr::null());
        libc::execve(cp.tender.as_ptr(), argv.as_ptr(), envp.as_ptr());
        let msg = format!("shoal-oci: cannot run {}: {}\n", cp.tender.to_string_lossy(), std::io::Error::last_os_error());
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(125)
    }
}

/// `start`.
pub fn start(root: &Root, id: &str, warn: Warn) -> Result<(), LifeError> {
    let s = root.load(id)?;
    match root.status(&s) {
        Status::Created => {}
        Status::Running => return Err(LifeError::StartRunning),
        Status::Stopped => return Err(LifeError::StartStopped),
        Status::Creating => return Err(LifeError::Creating("start")),
    }
    let hk = load_hooks(root, id);
    let kill_on = |e: LifeError| {
        // SAFETY: kill on the container's pid, checked alive above.
        unsafe { libc::kill(s.pid, libc::SIGKILL) };
        e
    };
    hooks::run("startContainer", &hk.start_container, &state_json(root, &s, Status::Created), Some(s.pid)).map_err(|e| kill_on(e.into()))?;
    let fifo = root.fifo(id);
    let c = sys::cstr(&fifo).map_err(sys_err("name the FIFO"))?;
    // Non-blocking, so a container process that died while waiting cannot
    // hang start; its open for writing completes now that a reader exists.
    // SAFETY: a valid path; the descriptor is owned below.
    let fd = sys::check(unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC) }).map_err(sys_err("open the start FIFO"))?;
    // SAFETY: fd was just opened and is owned here.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let t0 = Instant::now();
    loop {
        let mut b = [0u8; 1];
        // SAFETY: reads at most one byte into `b`.
        let n = unsafe { libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
        if n == 1 {
            break;
        }
        if !state::alive(s.pid, s.pid_start) {
            return Err(LifeError::StartStopped);
        }
        if t0.elapsed() > WAIT {
            return Err(LifeError::StartTimeout(WAIT.as_secs()));
        }
        let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd.
        unsafe { libc::poll(&mut p, 1, 10) };
        if p.revents & libc::POLLHUP != 0 {
            // No writer yet (or the writer is gone): poll would not wait.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let _ = std::fs::remove_file(&fifo);
    // Spec 1.0.2 (the version shoal-oci reports): a failing poststart hook
    // is a warning, and the remaining hooks still run.
    let st = state_json(root, &s, Status::Running);
    for h in &hk.poststart {
        if let Err(e) = hooks::run("poststart", std::slice::from_ref(h), &st, None) {
            warn(&e.to_string());
        }
    }
    Ok(())
}

/// `state`: the spec's JSON.
pub fn state(root: &Root, id: &str) -> Result<String, LifeError> {
    let s = root.load(id)?;
    Ok(serde_json::to_string_pretty(&root.oci_state(&s)).unwrap_or_default())
}

/// The container's processes: the tender, its descendants (its instance
/// process) and whatever else is in its cgroups (`exec`'s instances).
fn members(s: &Saved) -> Vec<i32> {
    let mut pids: Vec<i32> = std::iter::once(s.pid).chain(sys::descendants(s.pid)).collect();
    for p in cgroup::procs(&s.cgroups) {
        if !pids.contains(&p) {
            pids.push(p);
        }
    }
    pids
}

/// `ps`: the container's processes while it is created or running.
pub fn pids(root: &Root, id: &str) -> Result<Vec<i32>, LifeError> {
    let s = root.load(id)?;
    Ok(match root.status(&s) {
        Status::Created | Status::Running => members(&s),
        _ => Vec::new(),
    })
}

/// `update`: new cgroup limits for a created or running container
/// (containerd's shim passes `linux.resources` as JSON, from
/// UpdateContainerResources). `memory.limit` must leave the guest room to
/// boot, as at create.
pub fn update(root: &Root, id: &str, res: &config::Resources) -> Result<(), LifeError> {
    let s = root.load(id)?;
    match root.status(&s) {
        Status::Created | Status::Running => {}
        Status::Creating => return Err(LifeError::Creating("update")),
        Status::Stopped => return Err(LifeError::UpdateStopped),
    }
    if let Some(limit) = res.memory.as_ref().and_then(|m| m.limit).filter(|l| (1..4 << 20).contains(l)) {
        return Err(config::ConfigError::TooLittleMemory(limit).into());
    }
    cgroup::update(&s.cgroups, res)?;
    Ok(())
}

/// `kill`.
pub fn kill(root: &Root, id: &str, signal: &str, all: bool) -> Result<(), LifeError> {
    let sig = sys::parse_signal(signal).ok_or_else(|| LifeError::BadSignal(signal.into()))?;
    let s = root.load(id)?;
    match root.status(&s) {
        Status::Created | Status::Running => {}
        Status::Creating => return Err(LifeError::Creating("kill")),
        Status::Stopped => return Err(LifeError::NotRunning),
    }
    let pids = if all { members(&s) } else { vec![s.pid] };
    for p in pids {
        // SAFETY: kill has no memory-safety preconditions.
        match sys::check(unsafe { libc::kill(p, sig) }) {
            // One of the others may have ended since it was listed.
            Err(e) if p != s.pid && e.raw_os_error() == Some(libc::ESRCH) => {}
            r => {
                r.map_err(sys_err("signal the container process"))?;
            }
        }
    }
    Ok(())
}

/// `delete`.
pub fn delete(root: &Root, id: &str, force: bool, warn: Warn) -> Result<(), LifeError> {
    let s = match root.load(id) {
        Err(state::StateError::NotFound) if force => return Ok(()),
        r => r?,
    };
    match root.status(&s) {
        Status::Stopped => {}
        // The spec: deleting a container that is not stopped is an error
        // without --force, a created one included (runc 1.1 deletes a
        // created container anyway; runtime-tools' delete test holds to
        // the spec).
        _ if force => stop(&s)?,
        st => return Err(LifeError::DeleteRunning(id.into(), st.as_str())),
    }
    end_strays(&s);
    let hk = load_hooks(root, id);
    let st = state_json(root, &s, Status::Stopped);
    cgroup::remove(&s.cgroups);
    root.remove(id)?;
    for h in &hk.poststop {
        if let Err(e) = hooks::run("poststop", std::slice::from_ref(h), &st, None) {
            warn(&e.to_string());
        }
    }
    Ok(())
}

/// Kills what is left in a stopped container's cgroups (instances `exec`
/// started, which the container's end does not end: there is no PID
/// namespace whose end would take them, as runc's has) and waits a little
/// for them to leave, so the cgroups can be removed.
fn end_strays(s: &Saved) {
    let t0 = Instant::now();
    loop {
        let left = cgroup::procs(&s.cgroups);
        if left.is_empty() || t0.elapsed() > Duration::from_secs(2) {
            return;
        }
        for p in left {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kills the container process and waits until it has ended (it is the
/// engine's child, which reaps it; a zombie counts as ended).
fn stop(s: &Saved) -> Result<(), LifeError> {
    if s.pid <= 0 || !state::alive(s.pid, s.pid_start) {
        return Ok(());
    }
    for p in members(s) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    let t0 = Instant::now();
    while state::alive(s.pid, s.pid_start) {
        if t0.elapsed() > WAIT {
            return Err(LifeError::KillTimeout(s.id.clone(), WAIT.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}
