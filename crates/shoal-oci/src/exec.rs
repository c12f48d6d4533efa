//! `exec`: another program in a created or running container, answering
//! runc's `exec` command line as containerd's runc shim calls it (the CRI's
//! ExecSync and Exec, `crictl exec`, the kubelet's exec probes).
//!
//! A shoal guest is one program, so there is no process to start inside
//! it: the exec's program runs as a sibling instance in the container's
//! context instead. It is a new tender on the container's tender (spt or
//! hvt), running the executable the exec's `args[0]` names in the
//! container's root file system, with the container's mounts (a writable
//! volume is the same host directory, so each sees the other's writes),
//! the exec's environment, working directory and user, in the container's
//! network namespace and cgroups (its limits bound both). What is not
//! shared is the guest's own memory: the container's `/tmp` and the names
//! it made in `/` live in its guest and are not seen by the exec.
//!
//! As with runc, `--detach` returns once the process runs (the caller, the
//! shim, is its subreaper and reads its exit status); without it `exec`
//! waits and exits with the program's status.

use crate::config::{self, ConfigError};
use crate::lifecycle::{self, sys_err, LifeError, Warn};
use crate::state::{self, Root, Status};
use crate::sys;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Why an exec cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The container's state.
    #[error(transparent)]
    State(#[from] state::StateError),
    /// The container's configuration or the exec's process.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Setting the process up.
    #[error(transparent)]
    Life(#[from] LifeError),
    /// runc's wording.
    #[error("cannot exec in a stopped container")]
    Stopped,
    /// The `--process` file cannot be read.
    #[error("cannot read the process file {0}: {1}")]
    ReadProcess(PathBuf, std::io::Error),
    /// The `--process` file is not an OCI process.
    #[error("the process file {0} is not a valid OCI process: {1}")]
    BadProcess(PathBuf, serde_json::Error),
    /// Neither `--process` nor a command.
    #[error("exec needs a command: give --process FILE or the program and its arguments after the container id")]
    NoCommand,
    /// A `--user` that is not `UID[:GID]`.
    #[error("--user {0:?}: expected UID[:GID], numbers (the guest has no user database to look names up in)")]
    BadUser(String),
    /// A `--env` without `=`.
    #[error("--env {0:?}: expected NAME=VALUE")]
    BadEnv(String),
}

/// `exec`'s arguments, as runc names them.
pub struct ExecArgs<'a> {
    /// The container id.
    pub id: &'a str,
    /// An OCI `process` JSON file (what containerd's shim passes).
    pub process: Option<&'a Path>,
    /// The program and its arguments (without `--process`).
    pub args: &'a [String],
    /// Where to write the new process's pid.
    pub pid_file: Option<&'a Path>,
    /// Where to send the terminal's master.
    pub console_socket: Option<&'a Path>,
    /// Return once it runs instead of waiting for its end.
    pub detach: bool,
    /// Give it a terminal.
    pub tty: bool,
    /// Its working directory.
    pub cwd: Option<&'a str>,
    /// More environment (`NAME=VALUE`, replacing a same-named one).
    pub env: &'a [String],
    /// Its user, `UID[:GID]`.
    pub user: Option<&'a str>,
    /// Descriptors 3..3+N stay open for it.
    pub preserve_fds: u32,
}

/// The exec's process: the `--process` file, or the container's own with
/// the given command; then the flags over it.
fn process(a: &ExecArgs, spec: &config::Spec) -> Result<config::Process, ExecError> {
    let mut p = match a.process {
        Some(path) => {
            let text = std::fs::read(path).map_err(|e| ExecError::ReadProcess(path.into(), e))?;
            serde_json::from_slice::<config::Process>(&text).map_err(|e| ExecError::BadProcess(path.into(), e))?
        }
        None => {
            let mut p = spec.process.clone().unwrap_or_default();
            p.args = a.args.to_vec();
            // runc's exec starts with a fresh terminal setting and no
            // limits of the container's first process.
            p.terminal = false;
            p.rlimits.clear();
            p
        }
    };
    if p.args.is_empty() {
        return Err(ExecError::NoCommand);
    }
    p.terminal |= a.tty;
    if let Some(cwd) = a.cwd {
        p.cwd = cwd.into();
    }
    for e in a.env {
        let (name, _) = e.split_once('=').ok_or_else(|| ExecError::BadEnv(e.clone()))?;
        p.env.retain(|old| old.split_once('=').map(|(n, _)| n) != Some(name));
        p.env.push(e.clone());
    }
    if let Some(u) = a.user {
        let (uid, gid) = u.split_once(':').unwrap_or((u, "0"));
        match (uid.parse(), gid.parse()) {
            (Ok(uid), Ok(gid)) => (p.user.uid, p.user.gid) = (uid, gid),
            _ => return Err(ExecError::BadUser(u.into())),
        }
    }
    Ok(p)
}

/// `exec`: returns the exit status to exit with (0 when detached).
pub fn exec(root: &Root, a: &ExecArgs, warn: Warn) -> Result<i32, ExecError> {
    let s = root.load(a.id)?;
    match root.status(&s) {
        Status::Created | Status::Running => {}
        Status::Creating => return Err(LifeError::Creating("exec in").into()),
        Status::Stopped => return Err(ExecError::Stopped),
    }
    let mut spec = config::load(&s.bundle)?;
    spec.process = Some(process(a, &spec)?);
    // The container's ports are the container's: the sibling binds what
    // its own program binds, in the same network namespace.
    spec.annotations.remove(config::ANN_PUBLISH);
    spec.hooks = config::Hooks::default();
    let plan = spec.plan(&s.bundle)?;
    if plan.terminal && a.console_socket.is_none() && a.detach {
        return Err(LifeError::NoConsoleSocket.into());
    }
    if !plan.terminal && a.console_socket.is_some() {
        return Err(LifeError::ConsoleWithoutTerminal.into());
    }
    let tender = lifecycle::tender_program()?;
    let mut cp = lifecycle::child_plan(&plan, &tender, 3 + a.preserve_fds as i32, warn)?;
    // The container's network namespace, whichever it is (a path, or one
    // made at create): the one its tender is in.
    cp.set_netns(sys::cstr(Path::new(&format!("/proc/{}/ns/net", s.pid))).map_err(sys_err("name the network namespace"))?);
    cp.join_cgroups = s.cgroups.iter().map(|d| sys::cstr(&d.join("cgroup.procs"))).collect::<Result<_, _>>().map_err(sys_err("name the cgroup"))?;

    // A terminal for the shim (`--console-socket`); without a socket, a
    // caller that waits lends its own stdio, a terminal if it has one.
    let terminal = lifecycle::console_terminal(&plan, a.console_socket)?;
    let (sync_r, sync_w) = sys::pipe().map_err(sys_err("make a pipe"))?;
    // SAFETY: this program runs no other threads, so the child may run
    // ordinary code; it only makes system calls on the prepared strings
    // and ends in exec or _exit.
    let pid = sys::check(unsafe { libc::fork() }).map_err(sys_err("fork the exec process"))?;
    if pid == 0 {
        drop(sync_r);
        lifecycle::container_process(&cp, terminal.as_ref(), sync_w);
    }
    drop(sync_w);
    drop(terminal);
    let mut answer = Vec::new();
    let _ = std::fs::File::from(sync_r).read_to_end(&mut answer);
    let failed = match answer.split_first() {
        Some((0, _)) => None,
        Some((_, msg)) => Some(String::from_utf8_lossy(msg).into_owned()),
        None => Some("it ended before it was ready".into()),
    };
    if let Some(msg) = failed {
        // SAFETY: waitpid on our own child, which has exited or will.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        return Err(LifeError::Setup(msg).into());
    }
    if let Some(p) = a.pid_file {
        let p = if p.is_absolute() { p.to_path_buf() } else { std::env::current_dir().unwrap_or_default().join(p) };
        state::write_atomic(&p, pid.to_string().as_bytes())?;
    }
    if a.detach {
        return Ok(0);
    }
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes one int.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(LifeError::Sys { what: "wait for the exec process", source: std::io::Error::last_os_error() }.into());
        }
    }
    Ok(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) })
}
