//! Starting an instance's process without copying the gateway.
//!
//! `std`/`tokio`'s `Command` with a `pre_exec` hook (how the gateway set
//! the parent-death signal and handed over the listening socket before)
//! `fork`s: the kernel copies the page tables of the whole multi-threaded
//! gateway for each instance, and both processes then take copy-on-write
//! faults until the child's `exec`. Here the child is started the way
//! `posix_spawn` does it (`shoal_spt::spawn_with`: `clone(CLONE_VM |
//! CLONE_VFORK)`, the spawning thread suspended until the child has
//! `exec`'d): nothing is copied. In the child, which runs in the gateway's
//! memory, only async-signal-safe system calls on data built before the
//! `clone` run: `prctl(PR_SET_PDEATHSIG)`, `getppid`, `setrlimit`, `dup2`,
//! `fcntl`, the signal reset and `execve`. An `exec` that fails is reported
//! to the caller as an error (the child writes its errno into the
//! gateway's memory, which it shares, before it exits), as `Command` does.
//!
//! [`Proc`] is the handle the gateway keeps instead of tokio's `Child`:
//! the pid, a pidfd (waited on through the runtime's reactor: it becomes
//! readable when the process exits; signals go through it, so a reaped
//! pid reused by another process is never signalled), the output pipes,
//! and kill-and-reap on drop, as `kill_on_drop(true)` did.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::unix::pipe;

/// Why a process could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// An argument or environment entry holds a NUL byte.
    #[error("an argument or environment entry holds a NUL byte")]
    Nul,
    /// A system call of the start failed (pipe, clone, pidfd).
    #[error("cannot {0}: {1}")]
    Sys(&'static str, io::Error),
    /// The child could not set itself up or `exec` the program.
    #[error("cannot start {0}: {1}")]
    Exec(String, io::Error),
}

/// What to start: the program, its arguments (without `argv[0]`, which is
/// the program), the whole environment, and what the child gets.
pub struct Spec {
    program: CString,
    args: Vec<CString>,
    env: Vec<CString>,
    /// A descriptor the child gets at [`Spec::listen_at`] (3 or above),
    /// without close-on-exec.
    pub listen: Option<RawFd>,
    /// The descriptor number of `listen` in the child.
    pub listen_at: RawFd,
    /// An address-space limit (`RLIMIT_AS`) for the child.
    pub address_space: Option<u64>,
    /// One more descriptor the child gets: (ours, its number), both above
    /// [`Spec::listen_at`] and apart from it (an hvt template's control
    /// channel).
    pub extra: Option<(RawFd, RawFd)>,
}

fn cstr(s: &OsStr) -> Result<CString, SpawnError> {
    CString::new(s.as_bytes()).map_err(|_| SpawnError::Nul)
}

impl Spec {
    /// `program` (a path: it is run as given, never searched in `PATH`)
    /// with an empty environment.
    pub fn new(program: impl AsRef<OsStr>) -> Result<Spec, SpawnError> {
        Ok(Spec { program: cstr(program.as_ref())?, args: Vec::new(), env: Vec::new(), listen: None, listen_at: 3, address_space: None, extra: None })
    }

    /// Adds an argument.
    pub fn arg(&mut self, a: impl AsRef<OsStr>) -> Result<&mut Spec, SpawnError> {
        self.args.push(cstr(a.as_ref())?);
        Ok(self)
    }

    /// Adds `key=value` to the environment.
    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Result<&mut Spec, SpawnError> {
        let mut kv = key.as_ref().as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(value.as_ref().as_bytes());
        self.env.push(CString::new(kv).map_err(|_| SpawnError::Nul)?);
        Ok(self)
    }

    /// Starts the program with stdin from `/dev/null` and stdout and
    /// stderr into pipes, dying with this process (`PR_SET_PDEATHSIG`,
    /// SIGKILL). Must run inside the tokio runtime (the pidfd and the
    /// pipes are registered with its reactor).
    pub fn spawn(&self) -> Result<Proc, SpawnError> {
        let name = || self.program.to_string_lossy().into_owned();
        if self.listen.is_some() && self.listen_at <= 2 {
            // It would overwrite the child's standard descriptors.
            return Err(SpawnError::Sys("hand over the listening socket at descriptor 0, 1 or 2", io::Error::from_raw_os_error(libc::EINVAL)));
        }
        // Everything the child uses is built here, before the clone.
        let mut argv: Vec<*const libc::c_char> = Vec::with_capacity(self.args.len() + 2);
        argv.push(self.program.as_ptr());
        argv.extend(self.args.iter().map(|a| a.as_ptr()));
        argv.push(std::ptr::null());
        let mut envp: Vec<*const libc::c_char> = self.env.iter().map(|e| e.as_ptr()).collect();
        envp.push(std::ptr::null());
        let null = above_stdio(std::fs::File::open("/dev/null").map_err(|e| SpawnError::Sys("open /dev/null", e))?.into())?;
        let (out_r, out_w) = pipe_pair()?;
        let (err_r, err_w) = pipe_pair()?;
        let (out_w, err_w) = (above_stdio(out_w)?, above_stdio(err_w)?);
        // A listening socket at 0-2 (a gateway started with those closed)
        // would be overwritten by the child's stdio: hand over a copy.
        let listen_copy = match self.listen {
            Some(fd) if fd <= 2 => Some(dup_above_stdio(fd)?),
            _ => None,
        };
        let plan = ChildPlan {
            parent: std::process::id() as libc::pid_t,
            stdio: [null.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()],
            listen: listen_copy.as_ref().map(|c| c.as_raw_fd()).or(self.listen).map(|fd| (fd, self.listen_at)),
            address_space: self.address_space,
            extra: self.extra.filter(|&(from, to)| from > self.listen_at.max(2) && to > self.listen_at.max(2)),
            program: self.program.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            failed: AtomicI32::new(0),
        };
        // SAFETY: `ChildPlan::run` only makes async-signal-safe system
        // calls on `plan` (built above, alive until spawn_with returns,
        // which is after the child's exec or exit), resets the signal
        // dispositions before it unblocks signals, and ends in execve or
        // _exit.
        let pid = unsafe { shoal_spt::spawn_with(0, &|| plan.run()) }.map_err(|e| SpawnError::Sys("clone", e))?;
        drop((null, out_w, err_w, listen_copy));
        let failed = plan.failed.load(Ordering::SeqCst);
        if failed != 0 {
            // The child has exited (CLONE_VFORK returned): reap it.
            reap(pid);
            return Err(SpawnError::Exec(name(), io::Error::from_raw_os_error(failed)));
        }
        adopt(pid, out_r, err_r)
    }
}

/// Starts an instance of a prepared spt function (`shoal_spt::Prepared`):
/// the instance program itself, with stdin from `/dev/null`, stdout and
/// stderr into pipes, `listen` as its listening socket and `env` added
/// to the guest's environment. One `clone` and one `exec`, no front end
/// (`shoal-tender`) in between; the instance is confined exactly as
/// `shoal run` confines it and dies with this process (see
/// `shoal_spt::Prepared::spawn`), as `uid` if given (else `nobody`). Must
/// run inside the tokio runtime.
pub fn spawn_spt(prepared: &shoal_spt::Prepared, listen: &OwnedFd, env: &[std::ffi::OsString], uid: Option<u32>) -> Result<Proc, SpawnError> {
    let null: OwnedFd = std::fs::File::open("/dev/null").map_err(|e| SpawnError::Sys("open /dev/null", e))?.into();
    let (out_r, out_w) = pipe_pair()?;
    let (err_r, err_w) = pipe_pair()?;
    let listeners = [listen.try_clone().map_err(|e| SpawnError::Sys("duplicate the listening socket", e))?];
    let io = shoal_spt::InstanceIo { stdin: &null, stdout: &out_w, stderr: &err_w, listeners: &listeners, env, uid };
    let pid = prepared.spawn(&io).map_err(|e| SpawnError::Exec(shoal_spt::INSTANCE_PROGRAM.into(), io::Error::other(e.to_string())))?;
    drop((null, out_w, err_w, listeners));
    adopt(pid, out_r, err_r)
}

/// Starts the template of a prepared spt function (`shoal_spt::Prepared::
/// spawn_template`, `super::template`) with `listen` as its listening
/// socket (which nobody connects to: the template never serves) and waits
/// up to `timeout` for its ready point. A template that ends or does not
/// get there is killed and reaped; the error then ends with its last line
/// on stderr. Must run inside the tokio runtime.
pub fn spawn_template(
    prepared: &shoal_spt::Prepared,
    listen: &OwnedFd,
    env: &[std::ffi::OsString],
    timeout: std::time::Duration,
    ready: shoal_spt::ReadyPoint,
) -> Result<(shoal_spt::Template, Proc), String> {
    // On the gateway's one long-lived spawner thread: a child's
    // parent-death signal fires when the *thread* that made it ends, and
    // the copies inherit that parent (CLONE_PARENT); a template started
    // on a blocking-pool thread (a deploy's) would die with that thread.
    let rt = tokio::runtime::Handle::current();
    on_spawner(|| {
        let _rt = rt.enter();
        spawn_template_here(prepared, listen, env, timeout, ready)
    })
}

/// Runs `f` on the gateway's spawner thread (made at the first call,
/// alive as long as the gateway) and returns its result.
fn on_spawner<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    type Job = Box<dyn FnOnce() + Send>;
    static SPAWNER: std::sync::OnceLock<std::sync::Mutex<std::sync::mpsc::Sender<Job>>> = std::sync::OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new().name("shoal-spawner".into()).spawn(move || {
            for job in rx {
                job();
            }
        });
        if spawned.is_err() {
            // No thread: jobs are run by the caller (see below).
        }
        std::sync::Mutex::new(tx)
    });
    let (done_tx, done_rx) = std::sync::mpsc::sync_channel::<R>(1);
    // The job borrows from this frame: it is run to its end before this
    // function returns (the caller waits for its result below).
    let job: Box<dyn FnOnce() + Send + '_> = Box::new(move || {
        let _ = done_tx.send(f());
    });
    // SAFETY: the job only lives until it has sent its result, which this
    // function waits for before returning; the borrows it holds outlive it.
    let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Job>(job) };
    let sent = tx.lock().unwrap_or_else(|e| e.into_inner()).send(job);
    match sent {
        Ok(()) => done_rx.recv().unwrap_or_else(|_| panic!("the spawner thread ended")),
        Err(std::sync::mpsc::SendError(job)) => {
            job();
            done_rx.recv().unwrap_or_else(|_| panic!("the spawner job did not finish"))
        }
    }
}

fn spawn_template_here(
    prepared: &shoal_spt::Prepared,
    listen: &OwnedFd,
    env: &[std::ffi::OsString],
    timeout: std::time::Duration,
    ready: shoal_spt::ReadyPoint,
) -> Result<(shoal_spt::Template, Proc), String> {
    let null: OwnedFd = std::fs::File::open("/dev/null").map_err(|e| format!("cannot open /dev/null: {e}"))?.into();
    let (out_r, out_w) = pipe_pair().map_err(|e| e.to_string())?;
    let (err_r, err_w) = pipe_pair().map_err(|e| e.to_string())?;
    let listeners = [listen.try_clone().map_err(|e| format!("cannot duplicate the listening socket: {e}"))?];
    // The template's uid is every copy's: `nobody` (with `--uid-range`
    // the gateway starts by exec instead, a uid per instance).
    let io = shoal_spt::InstanceIo { stdin: &null, stdout: &out_w, stderr: &err_w, listeners: &listeners, env, uid: None };
    let mut t = prepared.spawn_template_at(&io, ready).map_err(|e| format!("cannot start the template: {e}"))?;
    drop((null, out_w, err_w, listeners));
    if let Err(e) = t.wait_ready(timeout) {
        kill(t.pid());
        reap(t.pid());
        let words = last_words(&err_r).or_else(|| last_words(&out_r));
        return Err(match words {
            Some(w) => format!("{e}; its last words: {w}"),
            None => e.to_string(),
        });
    }
    let pid = t.pid();
    let p = adopt(pid, out_r, err_r).map_err(|e| e.to_string())?;
    Ok((t, p))
}

/// The last non-empty line of what a dead process left in pipe `r`
/// (non-blocking; its write ends are closed).
fn last_words(r: &OwnedFd) -> Option<String> {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reads into a local buffer of its length.
        let n = unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 || all.len() > 1 << 20 {
            break;
        }
        all.extend_from_slice(&buf[..n as usize]);
    }
    String::from_utf8_lossy(&all).lines().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim().to_string())
}

/// Starts an instance as a copy of `template` (`shoal_spt::Template::
/// copy`) with `listen` as its listening socket and its own stdout and
/// stderr pipes; waits up to `timeout` for the template's answer.
pub fn copy_spt(template: &shoal_spt::Template, listen: OwnedFd, timeout: std::time::Duration) -> Result<Proc, CopyError> {
    let (out_r, out_w) = pipe_pair()?;
    let (err_r, err_w) = pipe_pair()?;
    let listeners = [listen];
    let pid = template.copy(&shoal_spt::CopyIo { stdout: &out_w, stderr: &err_w, listeners: &listeners }, timeout)?;
    drop((out_w, err_w, listeners));
    Ok(adopt(pid, out_r, err_r)?)
}

/// Where an hvt template's control channel is in its tender.
const HVT_CONTROL_FD: RawFd = 63;

/// Starts the template of an hvt function: `spec` (the tender with the
/// function's options and its listening socket) made a template
/// (`shoal_hvt::template`), and waits up to `timeout` for its ready
/// point. A template that ends or does not get there is killed and
/// reaped; the error then ends with its last line on stderr. Runs on the
/// spawner thread (see [`spawn_template`]); must run inside the tokio runtime.
pub fn spawn_hvt_template(mut spec: Spec, timeout: std::time::Duration, ready: shoal_spt::ReadyPoint) -> Result<(shoal_hvt::template::Template, Proc), String> {
    let (ours, theirs) = shoal_hvt::template::seqpacket_pair().map_err(|e| format!("cannot make the template's control channel: {e}"))?;
    // Above every descriptor the child's dup2s write.
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) makes a new descriptor.
    let high = unsafe { libc::fcntl(theirs.as_raw_fd(), libc::F_DUPFD_CLOEXEC, HVT_CONTROL_FD + 1) };
    if high < 0 {
        return Err(format!("cannot place the template's control channel: {}", io::Error::last_os_error()));
    }
    // SAFETY: a new descriptor, owned by nobody else.
    let high = unsafe { OwnedFd::from_raw_fd(high) };
    drop(theirs);
    spec.env(shoal_hvt::template::TEMPLATE_FD_ENV, HVT_CONTROL_FD.to_string()).map_err(|e| e.to_string())?;
    if ready == shoal_spt::ReadyPoint::Explicit {
        spec.env(shoal_hvt::template::TEMPLATE_READY_ENV, "explicit").map_err(|e| e.to_string())?;
    }
    spec.extra = Some((high.as_raw_fd(), HVT_CONTROL_FD));
    let rt = tokio::runtime::Handle::current();
    on_spawner(move || {
        let _rt = rt.enter();
        let mut p = spec.spawn().map_err(|e| format!("cannot start the template: {e}"))?;
        drop(high);
        let t = shoal_hvt::template::Template::new(ours, p.pid as libc::pid_t);
        if let Err(e) = t.wait_ready_at(timeout, ready) {
            // A template that ended closed its channel before it wrote its
            // last words: up to a second for it to end on its own.
            let mut st = None;
            for _ in 0..100 {
                if let Ok(Some(s)) = waitpid(t.pid(), true) {
                    st = Some(s);
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            if st.is_none() {
                kill(t.pid());
                st = waitpid(t.pid(), false).ok().flatten();
            }
            p.status = st.map(ExitStatus::from_raw);
            let fd = |r: Option<pipe::Receiver>| r.and_then(|r| r.into_nonblocking_fd().ok());
            let (out, err) = (fd(p.stdout.take()), fd(p.stderr.take()));
            let words = err.as_ref().and_then(last_words).or_else(|| out.as_ref().and_then(last_words));
            return Err(match words {
                Some(w) => format!("{e}; its last words: {w}"),
                None => e.to_string(),
            });
        }
        Ok((t, p))
    })
}

/// An empty VM of an hvt template (`shoal_hvt::template::EmptyVm`) and its
/// process, made ahead of the request that makes it a copy.
pub struct HvtSpare {
    vm: shoal_hvt::template::EmptyVm,
    proc: Proc,
}

/// Asks `template` for an empty VM and waits up to `timeout` until it is
/// made. Must run inside the tokio runtime.
pub fn hvt_spare(template: &shoal_hvt::template::Template, timeout: std::time::Duration) -> Result<HvtSpare, CopyError> {
    let vm = template.make_empty(timeout).map_err(CopyError::Hvt)?;
    let proc = adopt_bare(vm.pid())?;
    vm.wait_made(timeout).map_err(CopyError::Hvt)?;
    Ok(HvtSpare { vm, proc })
}

/// Makes `spare` a copy of its template with `listen` as its listening
/// socket and its own stdout and stderr pipes: the instance's process.
pub fn start_hvt_copy(spare: HvtSpare, listen: OwnedFd) -> Result<Proc, CopyError> {
    let (out_r, out_w) = pipe_pair()?;
    let (err_r, err_w) = pipe_pair()?;
    let HvtSpare { vm, mut proc } = spare;
    vm.start(&out_w, &err_w, &[listen]).map_err(CopyError::Hvt)?;
    drop((out_w, err_w));
    proc.stdout = Some(pipe::Receiver::from_owned_fd_unchecked(out_r).map_err(|e| SpawnError::Sys("watch the instance", e))?);
    proc.stderr = Some(pipe::Receiver::from_owned_fd_unchecked(err_r).map_err(|e| SpawnError::Sys("watch the instance", e))?);
    Ok(proc)
}

/// Why a copy of a template could not be started.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The gateway's side (pipes, pidfd).
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// The template's side: it is gone or not to be trusted.
    #[error(transparent)]
    Template(#[from] shoal_spt::TemplateError),
    /// An hvt template's side.
    #[error(transparent)]
    Hvt(shoal_hvt::template::TemplateError),
}

/// The handle of a started child `pid` whose stdout and stderr are the
/// read ends given: a pidfd registered with the reactor; the child is
/// killed and reaped if that fails.
fn adopt(pid: libc::pid_t, out_r: OwnedFd, err_r: OwnedFd) -> Result<Proc, SpawnError> {
    let pidfd = match pidfd_open(pid) {
        Ok(fd) => fd,
        Err(e) => {
            kill(pid);
            reap(pid);
            return Err(SpawnError::Sys("open a pidfd of the instance", e));
        }
    };
    let registered = (|| {
        // SAFETY: the AsyncFd owns the OwnedFd, which stays open and
        // the same descriptor until the AsyncFd is dropped.
        let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }?;
        Ok::<_, io::Error>((pidfd, pipe::Receiver::from_owned_fd_unchecked(out_r)?, pipe::Receiver::from_owned_fd_unchecked(err_r)?))
    })();
    match registered {
        Ok((pidfd, stdout, stderr)) => Ok(Proc { pid: pid as u32, pidfd: Some(pidfd), status: None, stdout: Some(stdout), stderr: Some(stderr) }),
        Err(e) => {
            kill(pid);
            reap(pid);
            Err(SpawnError::Sys("watch the instance", e))
        }
    }
}

/// The handle of child `pid` without output pipes (an hvt template's
/// empty VM: its pipes come when it becomes a copy).
fn adopt_bare(pid: libc::pid_t) -> Result<Proc, SpawnError> {
    let pidfd = match pidfd_open(pid) {
        Ok(fd) => fd,
        Err(e) => {
            kill(pid);
            reap(pid);
            return Err(SpawnError::Sys("open a pidfd of the instance", e));
        }
    };
    // SAFETY: the AsyncFd owns the OwnedFd, which stays open and the same
    // descriptor until the AsyncFd is dropped.
    match unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) } {
        Ok(pidfd) => Ok(Proc { pid: pid as u32, pidfd: Some(pidfd), status: None, stdout: None, stderr: None }),
        Err(e) => {
            kill(pid);
            reap(pid);
            Err(SpawnError::Sys("watch the instance", e.into()))
        }
    }
}

/// What the child does between `clone` and `execve`, all prepared by the
/// parent: plain descriptors, numbers and pointers into the parent's
/// live `CString`s.
struct ChildPlan {
    parent: libc::pid_t,
    /// Descriptors for 0, 1 and 2; all are above 2 (`above_stdio`), so no
    /// `dup2` here overwrites a later source, and `listen` is above 2 too.
    stdio: [RawFd; 3],
    listen: Option<(RawFd, RawFd)>,
    address_space: Option<u64>,
    extra: Option<(RawFd, RawFd)>,
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// The errno of the step that failed; 0 while all goes well.
    failed: AtomicI32,
}

impl ChildPlan {
    /// In the child: set up, then exec; on failure, note the errno for
    /// the parent and `_exit(127)`. Async-signal-safe: no allocation, no
    /// lock, writes only `failed` of the parent's memory.
    fn run(&self) {
        let r = self.setup();
        let e = match r {
            Ok(()) => {
                // SAFETY: the arrays are null-terminated and point into
                // CStrings the parent keeps alive until the exec.
                unsafe { libc::execve(self.program, self.argv, self.envp) };
                errno()
            }
            Err(e) => e,
        };
        self.failed.store(if e == 0 { libc::EIO } else { e }, Ordering::SeqCst);
        // SAFETY: _exit runs no handlers; the child ends here.
        unsafe { libc::_exit(127) }
    }

    fn setup(&self) -> Result<(), i32> {
        // SAFETY: prctl/getppid/setrlimit/dup2/fcntl take only the values
        // and the local rlimit given; they change only this (the child)
        // process.
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) < 0 {
                return Err(errno());
            }
            // The gateway died before the prctl: do not outlive it.
            if libc::getppid() != self.parent {
                libc::_exit(1);
            }
            if let Some(limit) = self.address_space {
                let r = libc::rlimit { rlim_cur: limit, rlim_max: limit };
                if libc::setrlimit(libc::RLIMIT_AS, &r) < 0 {
                    return Err(errno());
                }
            }
            for (to, &from) in self.stdio.iter().enumerate() {
                if libc::dup2(from, to as RawFd) < 0 {
                    return Err(errno());
                }
            }
            if let Some((from, to)) = self.listen {
                // dup2 onto itself would keep close-on-exec.
                let r = if from == to { libc::fcntl(from, libc::F_SETFD, 0) } else { libc::dup2(from, to) };
                if r < 0 {
                    return Err(errno());
                }
            }
            if let Some((from, to)) = self.extra {
                let r = if from == to { libc::fcntl(from, libc::F_SETFD, 0) } else { libc::dup2(from, to) };
                if r < 0 {
                    return Err(errno());
                }
            }
        }
        // spawn_with blocked every signal; the program starts with the
        // default dispositions and an empty mask.
        shoal_spt::reset_signals();
        Ok(())
    }
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// A pipe, both ends close-on-exec, the read end non-blocking (for the
/// reactor; the child's end stays blocking: it is its stdout).
fn pipe_pair() -> Result<(OwnedFd, OwnedFd), SpawnError> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(SpawnError::Sys("make a pipe", io::Error::last_os_error()));
    }
    // SAFETY: both descriptors are new and owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on a descriptor we own.
    if unsafe { libc::fcntl(r.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } < 0 {
        return Err(SpawnError::Sys("make a pipe", io::Error::last_os_error()));
    }
    Ok((r, w))
}

/// A close-on-exec duplicate of `fd` numbered 3 or above.
fn dup_above_stdio(fd: RawFd) -> Result<OwnedFd, SpawnError> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) makes a new descriptor.
    let n = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if n < 0 {
        return Err(SpawnError::Sys("duplicate a descriptor", io::Error::last_os_error()));
    }
    // SAFETY: a new descriptor, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

/// `fd` itself if it is numbered 3 or above, else a duplicate that is:
/// the child's `dup2`s onto 0, 1 and 2 must not overwrite a source they
/// have yet to copy (only possible in a gateway started with some of its
/// standard descriptors closed).
fn above_stdio(fd: OwnedFd) -> Result<OwnedFd, SpawnError> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    dup_above_stdio(fd.as_raw_fd())
}

/// `pidfd_open(pid, 0)` of a child not yet reaped (so `pid` is still it).
fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes no pointers; the result is a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// SIGKILL to a child not yet reaped.
fn kill(pid: libc::pid_t) {
    // SAFETY: a signal to our own unreaped child (its pid cannot be reused).
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Waits for child `pid` to exit and reaps it; `WNOHANG` if `nohang`.
/// Returns its wait status once reaped.
fn waitpid(pid: libc::pid_t, nohang: bool) -> io::Result<Option<i32>> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes only `status`.
        let r = unsafe { libc::waitpid(pid, &mut status, if nohang { libc::WNOHANG } else { 0 }) };
        if r == pid {
            return Ok(Some(status));
        }
        if r == 0 {
            return Ok(None);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reaps a child that has exited or was killed (blocking).
fn reap(pid: libc::pid_t) {
    let _ = waitpid(pid, false);
}

/// A started instance process: wait, kill, output pipes; killed and
/// reaped when dropped unwaited.
pub struct Proc {
    pid: u32,
    /// `None` once moved into the reaper of `Drop`.
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
    /// The child's stdout (non-blocking, registered with the reactor).
    pub stdout: Option<pipe::Receiver>,
    /// The child's stderr.
    pub stderr: Option<pipe::Receiver>,
}

impl Proc {
    /// The process id (kept after the process is reaped, for the logs).
    pub fn id(&self) -> Option<u32> {
        Some(self.pid)
    }

    /// Waits for the process to exit and reaps it.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        let Some(fd) = &self.pidfd else { return Err(io::Error::other("the process is being reaped")) };
        loop {
            // A pidfd is readable once its process has exited.
            let mut ready = fd.readable().await?;
            if let Some(raw) = waitpid(self.pid as libc::pid_t, true)? {
                let s = ExitStatus::from_raw(raw);
                self.status = Some(s);
                return Ok(s);
            }
            ready.clear_ready();
        }
    }

    /// Sends SIGKILL (through the pidfd) unless the process is reaped.
    pub fn start_kill(&mut self) -> io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        let Some(fd) = &self.pidfd else { return Ok(()) };
        // SAFETY: pidfd_send_signal takes the pidfd, a signal number and
        // no siginfo.
        let r = unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), libc::SIGKILL, std::ptr::null::<libc::siginfo_t>(), 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            // ESRCH: it has exited and waits to be reaped.
            if e.raw_os_error() != Some(libc::ESRCH) {
                return Err(e);
            }
        }
        Ok(())
    }
}

impl Drop for Proc {
    /// Kills and reaps the process if nobody waited for it: on the
    /// runtime without blocking it when there is one, else on a thread.
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        let _ = self.start_kill();
        let pid = self.pid as libc::pid_t;
        let Some(fd) = self.pidfd.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    while let Ok(mut ready) = fd.readable().await {
                        match waitpid(pid, true) {
                            Ok(None) => ready.clear_ready(),
                            _ => return,
                        }
                    }
                });
            }
            Err(_) => {
                drop(fd);
                std::thread::spawn(move || reap(pid));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn output_environment_and_the_listen_descriptor_reach_the_program() {
        rt().block_on(async {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut s = Spec::new("/bin/sh").unwrap();
            // fd 5 must be the listening socket; stderr is separate.
            s.arg("-c").unwrap().arg("echo \"$GREETING\"; readlink /proc/self/fd/5; echo oops >&2; exit 7").unwrap();
            s.env("GREETING", "hello").unwrap();
            s.listen = Some(l.as_raw_fd());
            s.listen_at = 5;
            let mut p = s.spawn().unwrap();
            let mut out = String::new();
            p.stdout.take().unwrap().read_to_string(&mut out).await.unwrap();
            let mut err = String::new();
            p.stderr.take().unwrap().read_to_string(&mut err).await.unwrap();
            let status = p.wait().await.unwrap();
            let mut lines = out.lines();
            assert_eq!(lines.next(), Some("hello"));
            assert!(lines.next().unwrap_or("").starts_with("socket:["), "{out}");
            assert_eq!(err.trim(), "oops");
            assert_eq!(status.code(), Some(7));
        });
    }

    #[test]
    fn a_program_that_cannot_run_is_an_error() {
        rt().block_on(async {
            let e = Spec::new("/nonexistent/program").unwrap().spawn().err().expect("must fail");
            assert!(matches!(&e, SpawnError::Exec(_, io) if io.raw_os_error() == Some(libc::ENOENT)), "{e}");
        });
    }

    #[test]
    fn kill_ends_the_process_and_wait_reports_the_signal() {
        rt().block_on(async {
            let mut p = Spec::new("/bin/sleep").unwrap().arg("30").unwrap().spawn().unwrap();
            p.start_kill().unwrap();
            let s = p.wait().await.unwrap();
            assert_eq!(s.signal(), Some(libc::SIGKILL));
            // Waiting again gives the same status; killing again is harmless.
            assert_eq!(p.wait().await.unwrap().signal(), Some(libc::SIGKILL));
            p.start_kill().unwrap();
        });
    }

    #[test]
    fn dropping_an_unwaited_process_kills_and_reaps_it() {
        rt().block_on(async {
            let p = Spec::new("/bin/sleep").unwrap().arg("30").unwrap().spawn().unwrap();
            let pid = p.id().unwrap();
            drop(p);
            // Gone from /proc once killed and reaped (a zombie would stay).
            let t = std::time::Instant::now();
            while std::path::Path::new(&format!("/proc/{pid}")).exists() {
                assert!(t.elapsed() < std::time::Duration::from_secs(10), "process {pid} still there");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        });
    }

    #[test]
    fn a_listen_descriptor_over_stdio_is_refused() {
        rt().block_on(async {
            let mut s = Spec::new("/bin/true").unwrap();
            s.listen = Some(0);
            s.listen_at = 1;
            assert!(matches!(s.spawn(), Err(SpawnError::Sys(..))));
        });
    }

    #[test]
    fn a_nul_byte_is_refused() {
        assert!(matches!(Spec::new("/bin/sh").unwrap().arg("a\0b"), Err(SpawnError::Nul)));
    }
}
