//! A uid (and gid) per instance (`--uid-range START:COUNT`): a
//! root-started spt instance drops to a uid of the range that no other
//! running instance holds, instead of the `nobody` every instance shares
//! (whose per-user kernel limits — threads, inotify and epoll watches,
//! pipe buffers — one tenant could exhaust for the others), as
//! Firecracker's jailer and gVisor give each sandbox its own.
//!
//! A uid is claimed with an exclusive `flock` on `/run/shoal/uids/UID`
//! (a root-only directory), taken without waiting, lowest free uid first,
//! and held by the process that waits for the instance (spt's waiting
//! parent, or `shoal serve` for its prepared instances) for the
//! instance's life. The kernel releases a lock when its holder ends,
//! however it ends, so a uid comes back when its instance exits, crashes
//! or is killed, and nothing is left to clean up after a crash of the
//! holder itself (the instance dies with it: `PR_SET_PDEATHSIG`).

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Where the claims are (one empty file per uid ever claimed).
pub const UIDS_DIR: &str = "/run/shoal/uids";

/// Why a uid could not be claimed (each message one line).
#[derive(Debug, thiserror::Error)]
pub enum UidError {
    /// `--uid-range` does not parse or names uids an instance must not have.
    #[error("--uid-range {0}: expected START:COUNT with 1 <= START, 1 <= COUNT and START+COUNT-1 below 4294967295 (e.g. 100000:1000)")]
    Bad(String),
    /// Every uid of the range is held by a running instance.
    #[error(
        "--uid-range {start}:{count}: every uid of the range is in use by a running instance ({count} of {count}); give a larger range or stop an instance"
    )]
    Full {
        /// First uid.
        start: u32,
        /// How many.
        count: u32,
    },
    /// Only root can switch to another uid.
    #[error("--uid-range needs root: an instance started by another user runs as that user")]
    NotRoot,
    /// The claims directory or a claim file could not be used.
    #[error("cannot claim a uid for the instance in {UIDS_DIR}: {0}")]
    Io(String),
}

/// `--uid-range START:COUNT`: the uids `START..START+COUNT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UidRange {
    /// The first uid.
    pub start: u32,
    /// How many.
    pub count: u32,
}

impl UidRange {
    /// Parses `START:COUNT`. Refused: uid 0 (root), an empty range, and
    /// a range that reaches 4294967295 (`(uid_t)-1`, "no change" to
    /// `setresuid`).
    pub fn parse(spec: &str) -> Result<UidRange, UidError> {
        let bad = || UidError::Bad(spec.to_string());
        let (s, c) = spec.split_once(':').ok_or_else(bad)?;
        let (start, count): (u32, u32) = (s.trim().parse().map_err(|_| bad())?, c.trim().parse().map_err(|_| bad())?);
        if start == 0 || count == 0 || start.checked_add(count - 1).is_none_or(|last| last == u32::MAX) {
            return Err(bad());
        }
        Ok(UidRange { start, count })
    }

    /// As given: `START:COUNT`.
    pub fn spec(&self) -> String {
        format!("{}:{}", self.start, self.count)
    }
}

/// A uid held for one instance: the uid is free again when this is
/// dropped (or its process ends).
#[derive(Debug)]
pub struct UidClaim {
    uid: u32,
    _lock: OwnedFd,
}

impl UidClaim {
    /// The uid (also the gid) the instance runs as.
    pub fn uid(&self) -> u32 {
        self.uid
    }
}

/// Claims the lowest uid of `range` that no running instance holds.
/// Root only.
pub fn claim(range: UidRange) -> Result<UidClaim, UidError> {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(UidError::NotRoot);
    }
    let dir = Path::new(UIDS_DIR);
    if let Some(parent) = dir.parent() {
        crate::hostdir::ensure_private_dir(parent).map_err(|e| UidError::Io(e.to_string()))?;
    }
    crate::hostdir::ensure_private_dir(dir).map_err(|e| UidError::Io(e.to_string()))?;
    for uid in range.start..=range.start + (range.count - 1) {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir.join(uid.to_string()))
            .map_err(|e| UidError::Io(format!("{uid}: {e}")))?;
        // SAFETY: flock on an open descriptor; the lock lives as long as
        // the open file description, which only this process holds
        // (close-on-exec).
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(UidClaim { uid, _lock: f.into() });
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(UidError::Io(format!("{uid}: {e}")));
        }
    }
    Err(UidError::Full { start: range.start, count: range.count })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_start_and_count_without_root_or_the_last_uid() {
        assert_eq!(UidRange::parse("100000:1000").unwrap(), UidRange { start: 100000, count: 1000 });
        assert_eq!(UidRange::parse("100000:1000").unwrap().spec(), "100000:1000");
        for bad in ["", "5", "0:10", "10:0", "a:1", "1:b", "4294967294:2", "4294967295:1", "-1:3"] {
            assert!(matches!(UidRange::parse(bad), Err(UidError::Bad(_))), "{bad}");
        }
        assert_eq!(UidRange::parse("4294967293:2").unwrap().count, 2);
    }
}
