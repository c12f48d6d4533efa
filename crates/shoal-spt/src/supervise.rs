//! The waiting parent's loop (`crate::run`): forwards SIGTERM and SIGHUP
//! to the instance and stops an instance whose kernel does not take them
//! (`shoal_loader::stop`; docs/architecture.md "Signals from the host").
//!
//! The parent's handler only notes a signal and writes a byte to a
//! self-pipe (`crate::signals::catch_for_child`); this loop sleeps in
//! `poll` on that pipe and on a pidfd of the instance (readable when it
//! exits), with the grace period's end as the timeout, so every wait is
//! bounded and nothing spins. The guest's word lives in the instance's
//! memory, which this process cannot see: whether a signal is still
//! untaken it asks the instance (`QUERY_SIGNAL`, answered in the shared
//! report page by a handler that runs even while the guest's kernel
//! spins). An instance that does not answer within [`ANSWER_WAIT`] is
//! taken as not taking signals at all.

use crate::signals::{self, Report};
use shoal_loader::stop::NotTaken;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long the parent waits for the instance's answer to a query. Its
/// handler runs at the instance's next return to user mode, within a
/// scheduler tick of a loaded host; generous, since a missed answer stops
/// the instance.
const ANSWER_WAIT: Duration = Duration::from_secs(2);
/// The step of the wait for an answer (the answer comes through shared
/// memory, which nothing can wait on without a system call the instance
/// is not allowed).
const ANSWER_STEP_MS: i32 = 5;
/// Without pidfds (Linux before 5.3) the loop looks at the instance this
/// often.
const NO_PIDFD_STEP_MS: u64 = 100;

/// Why the parent stopped the instance: the untaken signal and why.
pub type Stop = (i32, NotTaken);

/// Waits for instance `pid` to end, forwarding the signals the parent
/// catches, and stops it (SIGKILL) when its kernel leaves one untaken for
/// `limit_ns` or a second comes while one is untaken; `say` prints the
/// line before that. Returns the raw wait status and, if the parent
/// stopped it, why.
pub fn wait(pid: libc::pid_t, wake: &OwnedFd, report: &Report, limit_ns: u64, say: &dyn Fn(&str)) -> io::Result<(libc::c_int, Option<Stop>)> {
    let pidfd = crate::sys::pidfd_open(pid).ok();
    let limit = Duration::from_nanos(limit_ns);
    let mut waiting: Option<(i32, Instant)> = None;
    let mut ask = Asker { pid, report, pidfd: pidfd.as_ref(), seq: 0 };
    loop {
        let arrived = signals::take_arrived();
        for sig in 1..=64 {
            if arrived & (1 << (sig - 1)) == 0 {
                continue;
            }
            if let Some((first, _)) = waiting {
                if ask.untaken()? {
                    return stop(pid, (first, NotTaken::Second), say);
                }
            }
            // Our own child, not yet reaped (ESRCH: it is ending; the
            // wait below sees it).
            let _ = crate::sys::kill(pid, sig);
            waiting = Some((sig, Instant::now() + limit));
        }
        if let Some((first, end)) = waiting {
            if Instant::now() >= end {
                if ask.untaken()? {
                    return stop(pid, (first, NotTaken::Timeout(limit_ns)), say);
                }
                // Taken: the program's handler may take as long as it likes.
                waiting = None;
            }
        }
        if let Some(status) = crate::sys::try_waitpid(pid)? {
            return Ok((status, None));
        }
        let mut timeout = waiting.map(|(_, end)| end.saturating_duration_since(Instant::now()));
        if pidfd.is_none() {
            timeout = Some(timeout.map_or(Duration::from_millis(NO_PIDFD_STEP_MS), |t| t.min(Duration::from_millis(NO_PIDFD_STEP_MS))));
        }
        let ms = timeout.map_or(-1, |t| i32::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX));
        poll(&[Some(wake), pidfd.as_ref()], ms);
        drain(wake);
    }
}

/// Asks the instance which forwarded signals are untaken.
struct Asker<'a> {
    pid: libc::pid_t,
    report: &'a Report,
    pidfd: Option<&'a OwnedFd>,
    seq: u64,
}

impl Asker<'_> {
    /// Whether the guest has a forwarded signal untaken (or the instance
    /// did not answer in time). An instance that ended meanwhile has
    /// nothing untaken: the loop reaps it.
    fn untaken(&mut self) -> io::Result<bool> {
        self.seq += 1;
        self.report.query.store(self.seq, Ordering::SeqCst);
        // Our own child, not yet reaped.
        if crate::sys::kill(self.pid, signals::QUERY_SIGNAL).is_err() {
            return Ok(false);
        }
        let end = Instant::now() + ANSWER_WAIT;
        loop {
            if self.report.answered.load(Ordering::SeqCst) == self.seq {
                return Ok(self.report.untaken.load(Ordering::SeqCst) != 0);
            }
            if Instant::now() >= end {
                return Ok(true);
            }
            if exited(self.pid, self.pidfd)? {
                return Ok(false);
            }
            match self.pidfd {
                Some(fd) => poll(&[Some(fd)], ANSWER_STEP_MS),
                None => std::thread::sleep(Duration::from_millis(ANSWER_STEP_MS as u64)),
            }
        }
    }
}

/// Stops the instance (its kernel does not take signals) after the line.
fn stop(pid: libc::pid_t, why: Stop, say: &dyn Fn(&str)) -> io::Result<(libc::c_int, Option<Stop>)> {
    say(&format!("shoal: {}\n", shoal_loader::stop::message(why.0, why.1)));
    // Our own child, not yet reaped.
    let _ = crate::sys::kill(pid, libc::SIGKILL);
    let status = crate::sys::waitpid(pid)?;
    Ok((status, Some(why)))
}

/// Whether the instance has ended (not reaping it).
fn exited(pid: libc::pid_t, pidfd: Option<&OwnedFd>) -> io::Result<bool> {
    if let Some(fd) = pidfd {
        return Ok(crate::sys::pidfd_ended(fd.as_raw_fd()));
    }
    // SAFETY: a zeroed siginfo_t is valid for waitid to fill.
    let mut info: libc::siginfo_t = unsafe { core::mem::zeroed() };
    // SAFETY: waitid with WNOWAIT leaves the child unreaped; `info` is valid.
    let rc = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: filled by waitid (0 when nothing has changed).
    Ok(unsafe { info.si_pid() } == pid)
}

/// Sleeps until one of `fds` is readable, a signal arrives or `ms` pass
/// (-1: no limit). Errors (EINTR) only end the sleep early.
fn poll(fds: &[Option<&OwnedFd>], ms: i32) {
    let mut p: Vec<libc::pollfd> = fds.iter().flatten().map(|f| libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
    // SAFETY: poll on `p.len()` valid pollfds owned by this frame.
    unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
}

/// Empties the self-pipe (non-blocking).
fn drain(wake: &OwnedFd) {
    let mut buf = [0u8; 64];
    // SAFETY: read into a local buffer of its length.
    while unsafe { libc::read(wake.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}
