//! Safe places on the host for what shoal writes outside the user's own
//! directories (docs/design.md "Tenders and hypercalls", "Memory and sharing": the TSC calibration cache, the library pool).
//!
//! `/dev/shm` and `/tmp` are writable by every local user, so a fixed name
//! there is a place another user can get to first: with a symbolic link, to
//! make a root `shoal run` overwrite any file; with a directory of their
//! own, to feed shoal a file they wrote. The rules here are OpenSSH's
//! `safe_path` rules, applied to every component of a path, not only the
//! last:
//!
//! - every ancestor directory must be owned by root or by us and be
//!   unwritable by group and others — unless it is sticky (`/tmp`,
//!   `/dev/shm`), where others cannot rename or remove what we own;
//! - the directory itself must be a real directory (not a symbolic link),
//!   owned by our effective uid, and not writable by group or others
//!   ([`check_dir`]); a private directory ([`ensure_private_dir`]) must in
//!   addition be mode 0700, and is created that way;
//! - files inside are created with `O_CREAT|O_EXCL|O_NOFOLLOW` under a
//!   temporary name and renamed into place ([`write_atomic`]), and read with
//!   `O_NOFOLLOW` after checking (on the open descriptor) that they are
//!   regular files we own ([`read_owned`]).
//!
//! Once a directory passes, nobody but us (and root) can change what is in
//! it, so later path-based operations inside it are safe.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a host directory or file was not used.
#[derive(Debug, thiserror::Error)]
pub enum HostDirError {
    /// A path component failed the ownership or permission rules.
    #[error("{path} is unsafe to use: {reason}")]
    Unsafe {
        /// The component.
        path: PathBuf,
        /// Why, as a clause.
        reason: &'static str,
    },
    /// A system call failed.
    #[error("cannot use {path}: {source}")]
    Io {
        /// What was being used.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> HostDirError + '_ {
    move |source| HostDirError::Io { path: path.to_path_buf(), source }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Checks every ancestor of `path` (not `path` itself): owned by root or
/// us, and not writable by group or others unless sticky. Relative paths
/// are checked from the current directory up.
pub fn check_ancestors(path: &Path) -> Result<(), HostDirError> {
    let abs = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir().map_err(io(path))?.join(path) };
    let me = euid();
    let mut cur = abs.parent();
    while let Some(dir) = cur {
        let md = std::fs::symlink_metadata(dir).map_err(io(dir))?;
        let unsafe_because = |reason| HostDirError::Unsafe { path: dir.to_path_buf(), reason };
        // A symbolic link among the ancestors is followed by the kernel;
        // what it points at is checked on its own only if it is safe to
        // follow, i.e. a link that only root or we could have made.
        if md.file_type().is_symlink() {
            if md.uid() != 0 && md.uid() != me {
                return Err(unsafe_because("it is a symbolic link owned by another user"));
            }
            let target = std::fs::canonicalize(dir).map_err(io(dir))?;
            return check_ancestors(&target.join("x"));
        }
        if md.uid() != 0 && md.uid() != me {
            return Err(unsafe_because("a directory on its path is owned by another user"));
        }
        let sticky = md.mode() & libc::S_ISVTX != 0;
        if md.mode() & 0o022 != 0 && !sticky {
            return Err(unsafe_because("a directory on its path is writable by other users and not sticky"));
        }
        cur = dir.parent();
    }
    Ok(())
}

/// Checks that `dir` is a real directory owned by us and not writable by
/// group or others, and that its ancestors are safe ([`check_ancestors`]).
pub fn check_dir(dir: &Path) -> Result<(), HostDirError> {
    check_ancestors(dir)?;
    let md = std::fs::symlink_metadata(dir).map_err(io(dir))?;
    let bad = |reason| HostDirError::Unsafe { path: dir.to_path_buf(), reason };
    if !md.file_type().is_dir() {
        return Err(bad("it is not a directory (or it is a symbolic link)"));
    }
    if md.uid() != euid() {
        return Err(bad("it is owned by another user"));
    }
    if md.mode() & 0o022 != 0 {
        return Err(bad("it is writable by group or others"));
    }
    Ok(())
}

/// Creates `dir` with mode `mode` if it does not exist (its parent must),
/// then [`check_dir`]s it. `mode` must not give write permission to group
/// or others.
pub fn ensure_dir(dir: &Path, mode: u32) -> Result<(), HostDirError> {
    debug_assert!(mode & 0o022 == 0);
    check_ancestors(dir)?;
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(dir)(e)),
    }
    check_dir(dir)
}

/// Creates (mode 0700) or checks a directory that only we may read:
/// [`ensure_dir`], and nothing for group or others.
pub fn ensure_private_dir(dir: &Path) -> Result<(), HostDirError> {
    ensure_dir(dir, 0o700)?;
    let md = std::fs::symlink_metadata(dir).map_err(io(dir))?;
    if md.mode() & 0o077 != 0 {
        return Err(HostDirError::Unsafe { path: dir.to_path_buf(), reason: "it is readable by group or others (a private directory must be mode 0700)" });
    }
    Ok(())
}

/// Writes `bytes` to `dir/name` atomically: a new temporary file
/// (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode `mode`) renamed over the name. `dir`
/// must have passed [`check_dir`]. The temporary file is removed on failure.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<(), HostDirError> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        drop(f);
        std::fs::rename(&tmp, &path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(&path)(e)
    })
}

/// Reads `path` if it is a regular file owned by us of at most `max`
/// bytes, opened without following a symbolic link and checked on the
/// open descriptor (so a swap between check and read cannot fool it).
pub fn read_owned(path: &Path, max: u64) -> Result<Vec<u8>, HostDirError> {
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK).open(path).map_err(io(path))?;
    let md = f.metadata().map_err(io(path))?;
    let bad = |reason| HostDirError::Unsafe { path: path.to_path_buf(), reason };
    if !md.file_type().is_file() {
        return Err(bad("it is not a regular file"));
    }
    if md.uid() != euid() {
        return Err(bad("it is owned by another user"));
    }
    if md.len() > max {
        return Err(bad("it is larger than expected"));
    }
    let mut out = Vec::new();
    f.take(max).read_to_end(&mut out).map_err(io(path))?;
    Ok(out)
}

/// shoal's per-user runtime directory for small caches: `$SHOAL_RUNTIME_DIR`
/// if set, else `$XDG_RUNTIME_DIR/shoal`, else `/dev/shm/shoal-UID` (or
/// `/tmp/shoal-UID` without `/dev/shm`). Created mode 0700 and checked
/// ([`ensure_private_dir`]); an unsafe one is an error, never used.
pub fn runtime_dir() -> Result<PathBuf, HostDirError> {
    let dir = if let Some(d) = std::env::var_os("SHOAL_RUNTIME_DIR") {
        PathBuf::from(d)
    } else if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| Path::new(d).is_absolute()) {
        PathBuf::from(d).join("shoal")
    } else {
        let base = if Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" };
        PathBuf::from(format!("{base}/shoal-{}", euid()))
    };
    ensure_private_dir(&dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("shoal-hostdir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }

    #[test]
    fn private_dir_is_made_0700_and_a_symlink_there_is_refused() {
        let s = scratch("priv");
        let d = s.join("cache");
        ensure_private_dir(&d).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        let victim = s.join("victim");
        std::fs::create_dir(&victim).unwrap();
        let link = s.join("link");
        symlink(&victim, &link).unwrap();
        let e = ensure_private_dir(&link).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(ensure_private_dir(&victim).unwrap_err().to_string().contains("mode 0700"));
        std::fs::remove_dir_all(&s).unwrap();
    }

    #[test]
    fn writes_do_not_follow_a_planted_symlink() {
        let s = scratch("write");
        let victim = s.join("victim.txt");
        std::fs::write(&victim, "precious").unwrap();
        // A link at the final name is replaced, not written through.
        symlink(&victim, s.join("tsc")).unwrap();
        write_atomic(&s, "tsc", b"new", 0o600).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read(s.join("tsc")).unwrap(), b"new");
        // A link at the temporary name makes the write fail, not follow it.
        symlink(&victim, s.join(format!(".x.tmp-{}", std::process::id()))).unwrap();
        assert!(write_atomic(&s, "x", b"evil", 0o600).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        // Reading does not follow a link either.
        symlink(&victim, s.join("rlink")).unwrap();
        assert!(read_owned(&s.join("rlink"), 100).is_err());
        assert_eq!(read_owned(&s.join("tsc"), 100).unwrap(), b"new");
        std::fs::remove_dir_all(&s).unwrap();
    }

    #[test]
    fn an_ancestor_writable_by_others_is_refused() {
        let s = scratch("anc");
        let open = s.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = ensure_private_dir(&open.join("cache")).unwrap_err().to_string();
        assert!(e.contains("writable by other users and not sticky"), "{e}");
        // Sticky, like /tmp and /dev/shm: fine.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        ensure_private_dir(&open.join("cache")).unwrap();
        std::fs::remove_dir_all(&s).unwrap();
    }
}
