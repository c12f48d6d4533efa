//! Running the lifecycle hooks of config.json (OCI runtime spec, config.md
//! "POSIX-platform Hooks"): each hook is a host program started with its
//! own argv and environment and the container's state JSON on stdin; a
//! hook with `timeout` is killed when it runs longer. The hooks the spec
//! runs "in the container namespace" (createContainer, startContainer)
//! enter the tender's network namespace, the only namespace a shoal
//! container has of its own (docs/design.md "Serving functions").

use crate::config::Hook;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A hook that failed.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// It could not be started.
    #[error("{kind} hook {path}: cannot run it: {source}")]
    Spawn {
        /// Which hook list.
        kind: &'static str,
        /// The program.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// It ended with a non-zero status.
    #[error("{kind} hook {path} failed ({status}){stderr}")]
    Failed {
        /// Which hook list.
        kind: &'static str,
        /// The program.
        path: String,
        /// How it ended.
        status: String,
        /// `: ` and its standard error, when it wrote any.
        stderr: String,
    },
    /// It ran past its timeout.
    #[error("{kind} hook {path} did not finish within its timeout of {secs} s and was killed")]
    Timeout {
        /// Which hook list.
        kind: &'static str,
        /// The program.
        path: String,
        /// The timeout.
        secs: u64,
    },
}

/// Runs `hooks` in order with `state` on stdin; stops at the first
/// failure. `netns_of`: enter this process's network namespace first.
pub fn run(kind: &'static str, hooks: &[Hook], state: &[u8], netns_of: Option<i32>) -> Result<(), HookError> {
    for h in hooks {
        run_one(kind, h, state, netns_of)?;
    }
    Ok(())
}

fn run_one(kind: &'static str, h: &Hook, state: &[u8], netns_of: Option<i32>) -> Result<(), HookError> {
    let path = h.path.display().to_string();
    let mut cmd = Command::new(&h.path);
    if let Some((argv0, rest)) = h.args.split_first() {
        cmd.arg0(argv0).args(rest);
    }
    cmd.env_clear();
    for e in &h.env {
        if let Some((k, v)) = e.split_once('=') {
            cmd.env(k, v);
        }
    }
    cmd.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped());
    if let Some(pid) = netns_of {
        let ns = std::ffi::CString::new(format!("/proc/{pid}/ns/net")).unwrap_or_default();
        // SAFETY: between fork and exec only open, setns and close run,
        // all async-signal-safe; the path was allocated before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(ns.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
                if fd < 0 || libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().map_err(|source| HookError::Spawn { kind, path: path.clone(), source })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that does not read its stdin closes the pipe early; that
        // is its choice, not a failure.
        let _ = stdin.write_all(state);
    }
    let mut stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = stderr.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let deadline = h.timeout.filter(|t| *t > 0).map(|t| Instant::now() + Duration::from_secs(t));
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(source) => return Err(HookError::Spawn { kind, path, source }),
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(HookError::Timeout { kind, path, secs: h.timeout.unwrap_or(0) });
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let err = reader.join().unwrap_or_default();
    if status.success() {
        return Ok(());
    }
    let err = err.trim();
    Err(HookError::Failed {
        kind,
        path,
        status: status.to_string(),
        stderr: if err.is_empty() { String::new() } else { format!(": {}", err.replace('\n', " ")) },
    })
}
