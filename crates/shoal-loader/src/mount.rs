//! Host directories and files (`--mount HOSTDIR:GUESTDIR:ro` or `:rw`,
//! `--mount HOSTFILE:GUESTFILE:ro` or `:rw`; docs/architecture.md "Host
//! directories"): what both tenders share before the guest runs —
//! parsing the option and opening each directory once, as an `O_PATH`
//! descriptor that every later open on the guest's behalf is confined
//! beneath (`shoal_hostcall::hostfs`), and each single file once, opened
//! for reading (or reading and writing), the only file that mount ever
//! reaches (as a bind mount of a file, it stays the file it was at start
//! even if the host renames another over its path).

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Most `--mount`s an instance has.
pub const MAX_MOUNTS: usize = 16;
/// Longest guest directory of a mount.
pub const GUEST_PATH_MAX: usize = 255;

/// A `--mount` that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// Not `HOSTDIR:GUESTDIR:ro` or `HOSTDIR:GUESTDIR:rw`.
    #[error("--mount {0}: expected HOSTDIR:GUESTDIR:ro or HOSTDIR:GUESTDIR:rw (GUESTDIR absolute)")]
    Syntax(String),
    /// HOSTDIR is not an existing directory or regular file.
    #[error("--mount {0}: no such directory or regular file")]
    NoDir(PathBuf),
    /// A regular file asked to be the root mount.
    #[error("--mount {0}: the root mount (GUESTDIR /) must be a directory")]
    RootFile(String),
    /// GUESTDIR is not an absolute path of ordinary names, or too long.
    #[error("--mount: the guest directory {0} must be / or an absolute path of ordinary names, at most {GUEST_PATH_MAX} bytes")]
    BadGuest(String),
    /// The root mount asked to be writable.
    #[error("--mount {0}: the root mount (GUESTDIR /) is read-only; writes there stay in guest memory")]
    RootWritable(String),
    /// Two mounts at one guest directory.
    #[error("--mount: two mounts at {0}")]
    Twice(String),
    /// More than [`MAX_MOUNTS`].
    #[error("--mount: at most {MAX_MOUNTS} mounts")]
    TooMany,
    /// The directory could not be opened.
    #[error("--mount: cannot open {path}: {source}")]
    Open {
        /// HOSTDIR.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

/// A parsed `--mount HOSTDIR:GUESTDIR:ro` (or `:rw`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// The host directory, made absolute (symlinks resolved once, here).
    pub host: PathBuf,
    /// The guest directory: absolute, no `.`/`..` or empty parts; `/` for
    /// the root mount.
    pub guest: String,
    /// `:rw`: the guest may create, write, remove and rename beneath it
    /// (a single file: write, truncate, change its mode and times).
    pub writable: bool,
    /// The host path is a regular file (a single-file mount), not a
    /// directory.
    pub file: bool,
}

impl Mount {
    /// Parses `HOSTDIR:GUESTDIR:ro` or `HOSTDIR:GUESTDIR:rw` (split at
    /// the last two ':'); HOSTDIR must be an existing directory or
    /// regular file (then GUESTDIR names the file in the guest).
    pub fn parse(spec: &str) -> Result<Mount, MountError> {
        let syntax = || MountError::Syntax(spec.into());
        let (rest, writable) = match spec.strip_suffix(":rw") {
            Some(r) => (r, true),
            None => (spec.strip_suffix(":ro").ok_or_else(syntax)?, false),
        };
        let (host, guest) = rest.rsplit_once(':').filter(|(h, g)| !h.is_empty() && !g.is_empty()).ok_or_else(syntax)?;
        if !guest.starts_with('/') {
            return Err(syntax());
        }
        // `/` itself is the root mount: the guest's root directory shows
        // HOSTDIR's names beneath its own (docs/architecture.md).
        let ok = guest == "/" || (guest.len() <= GUEST_PATH_MAX && guest[1..].split('/').all(|p| !p.is_empty() && p != "." && p != ".." && !p.contains('\0')));
        if !ok {
            return Err(MountError::BadGuest(guest.into()));
        }
        if writable && guest == "/" {
            return Err(MountError::RootWritable(spec.into()));
        }
        let host = std::fs::canonicalize(host).ok().filter(|p| p.is_dir() || p.is_file()).ok_or_else(|| MountError::NoDir(host.into()))?;
        let file = host.is_file();
        if file && guest == "/" {
            return Err(MountError::RootFile(spec.into()));
        }
        Ok(Mount { host, guest: guest.into(), writable, file })
    }

    /// Opens the host directory (`O_PATH | O_DIRECTORY | O_CLOEXEC`), or
    /// the host file for reading (and writing, `:rw`): a regular file
    /// (checked on an `O_PATH` look first, so that no device or FIFO is
    /// ever opened), the same one when opened.
    pub fn open(&self) -> Result<OwnedFd, MountError> {
        let err = |source| MountError::Open { path: self.host.clone(), source };
        let c = std::ffi::CString::new(self.host.as_os_str().as_bytes()).map_err(|_| err(std::io::Error::from_raw_os_error(libc::EINVAL)))?;
        let open = |flags: i32| -> Result<OwnedFd, MountError> {
            // SAFETY: a NUL-terminated path; the descriptor returned is
            // owned by the OwnedFd below.
            let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
            if fd < 0 {
                return Err(err(std::io::Error::last_os_error()));
            }
            // SAFETY: `fd` was just opened and is owned by nobody else.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        if !self.file {
            return open(libc::O_PATH | libc::O_DIRECTORY);
        }
        let id = |fd: &OwnedFd| -> Result<(u64, u64, u32), MountError> {
            let st = fstat(fd).map_err(err)?;
            Ok((st.st_dev, st.st_ino, st.st_mode & libc::S_IFMT))
        };
        let probe = id(&open(libc::O_PATH | libc::O_NOFOLLOW)?)?;
        if probe.2 != libc::S_IFREG {
            return Err(err(std::io::Error::from_raw_os_error(libc::EINVAL)));
        }
        let how = if self.writable { libc::O_RDWR } else { libc::O_RDONLY };
        let fd = open(how | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)?;
        if id(&fd)? != probe {
            return Err(err(std::io::Error::from_raw_os_error(libc::ESTALE)));
        }
        Ok(fd)
    }
}

/// `fstat(fd)`.
pub fn fstat(fd: &OwnedFd) -> std::io::Result<libc::stat> {
    use std::os::fd::AsRawFd;
    // SAFETY: an all-zero `stat` is valid; fstat writes into it.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: `fd` is open and `st` a valid, writable `stat`.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

/// Checks a list of mounts together (count, no guest directory twice).
pub fn check_all(mounts: &[Mount]) -> Result<(), MountError> {
    if mounts.len() > MAX_MOUNTS {
        return Err(MountError::TooMany);
    }
    for (i, m) in mounts.iter().enumerate() {
        if mounts[..i].iter().any(|o| o.guest == m.guest) {
            return Err(MountError::Twice(m.guest.clone()));
        }
    }
    Ok(())
}

/// Opens every mount's host directory, in order.
pub fn open_all(mounts: &[Mount]) -> Result<Vec<OwnedFd>, MountError> {
    check_all(mounts)?;
    mounts.iter().map(Mount::open).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let m = Mount::parse("/usr:/usr:ro").unwrap();
        assert_eq!(m.guest, "/usr");
        assert!(matches!(Mount::parse("/usr:/usr"), Err(MountError::Syntax(_))));
        assert!(matches!(Mount::parse("/usr:usr:ro"), Err(MountError::Syntax(_))));
        assert_eq!(Mount::parse("/usr:/:ro").unwrap().guest, "/", "the root mount");
        assert!(Mount::parse("/usr:/data:rw").unwrap().writable);
        assert!(!Mount::parse("/usr:/data:ro").unwrap().writable);
        assert!(matches!(Mount::parse("/usr:/:rw"), Err(MountError::RootWritable(_))));
        assert!(matches!(Mount::parse("/usr:/data:wr"), Err(MountError::Syntax(_))));
        assert!(matches!(Mount::parse("/usr://:ro"), Err(MountError::BadGuest(_))));
        assert!(matches!(Mount::parse("/usr:/a/../b:ro"), Err(MountError::BadGuest(_))));
        assert!(matches!(Mount::parse("/nonexistent-shoal:/x:ro"), Err(MountError::NoDir(_))));
        assert!(matches!(Mount::parse("/usr:/x:wo"), Err(MountError::Syntax(_))));
        let f = Mount::parse("/etc/hostname:/etc/hostname:ro").unwrap();
        assert!(f.file && !f.writable, "a single file");
        assert!(!m.file);
        assert!(matches!(Mount::parse("/etc/hostname:/:ro"), Err(MountError::RootFile(_))));
        assert!(matches!(Mount::parse("/dev/null:/x:ro"), Err(MountError::NoDir(_))), "not a regular file");
    }
}
