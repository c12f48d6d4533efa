//! Volumes: a host directory whose contents an instance keeps across runs
//! (`shoal run --volume HOSTDIR:GUESTDIR`; docs/design.md "Tenders and hypercalls", "Memory and sharing").
//!
//! At start the front end packs HOSTDIR into the root archive at GUESTDIR
//! (`shoal_archive::pack_with_volume`), where the guest reads and writes it
//! in memory like the rest of `ramfs`. When the instance ends by exit (or
//! a signal's default action) the kernel packs GUESTDIR's tree and hands it
//! over with the `VolumeSave` hypercall; once the instance is gone the
//! tender calls [`store`], which replaces HOSTDIR's contents with that
//! tree in one step. A CPU fault, a refused hypercall or a kill from
//! outside saves nothing: HOSTDIR keeps what the last clean exit left.
//!
//! The archive comes from the guest, which is hostile. [`store`] never
//! writes outside a new directory it made itself beside HOSTDIR:
//! the archive reader has already refused absolute paths, `.`/`..` parts,
//! empty or NUL-containing names, duplicates and entries whose parent is
//! not a directory; every file and directory is created relative to the
//! descriptor of its parent, which `store` itself created, with
//! `O_EXCL|O_NOFOLLOW` (a symlink entry is created as a link and never
//! followed, and a name below it cannot exist in a valid archive);
//! set-id and sticky bits are dropped; the total is bounded by the archive,
//! which the tender took only up to the guest's memory size. Then one
//! `renameat2(RENAME_EXCHANGE)` swaps the new directory with HOSTDIR and
//! the old contents are removed (without following links). Any failure
//! leaves HOSTDIR as it was and removes the new directory.

use shoal_archive::{Archive, Kind};
use std::collections::HashMap;
use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A `--volume HOSTDIR:GUESTDIR` that cannot be used, or a save that failed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// Not `HOSTDIR:GUESTDIR`.
    #[error("--volume {0}: expected HOSTDIR:GUESTDIR (GUESTDIR absolute)")]
    Syntax(String),
    /// HOSTDIR is not an existing directory.
    #[error("--volume {0}: no such directory")]
    NoDir(PathBuf),
    /// GUESTDIR is not an absolute path of ordinary names, or too long.
    #[error("--volume: the guest directory {0} must be an absolute path of ordinary names, at most {max} bytes", max = shoal_abi::VOLUME_PATH_MAX - 1)]
    BadGuest(String),
    /// HOSTDIR is `/`, which cannot be replaced.
    #[error("--volume {0}: the host directory cannot be the root directory")]
    Root(PathBuf),
    /// The guest handed over an archive the reader refuses.
    #[error("the volume {0} was not saved: the guest's archive is invalid: {1}")]
    BadArchive(PathBuf, shoal_archive::ArchiveError),
    /// A system call failed while writing.
    #[error("the volume {path} was not saved: cannot {what}: {source}")]
    Io {
        /// HOSTDIR.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
}

/// A parsed `--volume HOSTDIR:GUESTDIR`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Volume {
    /// The host directory, made absolute (symlinks resolved once, here).
    pub host: PathBuf,
    /// The guest directory: absolute, no `.`/`..` or empty parts.
    pub guest: String,
}

impl Volume {
    /// Parses `HOSTDIR:GUESTDIR` (split at the last ':'); HOSTDIR must be
    /// an existing directory.
    pub fn parse(spec: &str) -> Result<Volume, VolumeError> {
        let (host, guest) = spec.rsplit_once(':').filter(|(h, g)| !h.is_empty() && !g.is_empty()).ok_or_else(|| VolumeError::Syntax(spec.into()))?;
        let ok = guest.len() < shoal_abi::VOLUME_PATH_MAX
            && guest.len() > 1
            && guest.starts_with('/')
            && guest[1..].split('/').all(|p| !p.is_empty() && p != "." && p != ".." && !p.contains('\0'));
        if !ok {
            return Err(VolumeError::BadGuest(guest.into()));
        }
        let host = std::fs::canonicalize(host).ok().filter(|p| p.is_dir()).ok_or_else(|| VolumeError::NoDir(host.into()))?;
        if host.parent().is_none() {
            return Err(VolumeError::Root(host));
        }
        Ok(Volume { host, guest: guest.into() })
    }

    /// The boot-info form of the guest path: NUL padded.
    pub fn boot_path(&self) -> [u8; shoal_abi::VOLUME_PATH_MAX] {
        let mut p = [0u8; shoal_abi::VOLUME_PATH_MAX];
        p[..self.guest.len()].copy_from_slice(self.guest.as_bytes());
        p
    }
}

fn cstr(b: &[u8]) -> Result<CString, std::io::Error> {
    CString::new(b).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(r: libc::c_int) -> Result<libc::c_int, std::io::Error> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn open_at(dir: libc::c_int, name: &[u8], flags: libc::c_int, mode: libc::mode_t) -> Result<OwnedFd, std::io::Error> {
    let n = cstr(name)?;
    // SAFETY: `n` is a NUL-terminated string that lives across the call.
    let fd = check(unsafe { libc::openat(dir, n.as_ptr(), flags | libc::O_CLOEXEC | libc::O_NOFOLLOW, mode as libc::c_uint) })?;
    // SAFETY: openat just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn dir_flags() -> libc::c_int {
    libc::O_RDONLY | libc::O_DIRECTORY
}

/// Replaces the contents of `host` with the tree in `archive` (from the
/// guest: hostile), as the module docs say. `host` is what
/// [`Volume::parse`] returned.
pub fn store(host: &Path, archive: &[u8]) -> Result<(), VolumeError> {
    let a = Archive::parse(archive).map_err(|e| VolumeError::BadArchive(host.to_path_buf(), e))?;
    let err = |what: &'static str| move |source| VolumeError::Io { path: host.to_path_buf(), what, source };
    let (Some(parent), Some(name)) = (host.parent(), host.file_name()) else {
        return Err(VolumeError::Root(host.to_path_buf()));
    };
    let mode = std::fs::symlink_metadata(host).map_err(err("read the host directory"))?.mode() & 0o777;
    let pfd = open_at(libc::AT_FDCWD, parent.as_os_str().as_bytes(), dir_flags(), 0).map_err(err("open the host directory's parent"))?;
    let mut tmp = b".".to_vec();
    tmp.extend_from_slice(name.as_bytes());
    tmp.extend_from_slice(format!(".shoal-new-{}", std::process::id()).as_bytes());
    let tmp_path = parent.join(std::ffi::OsStr::from_bytes(&tmp));
    // A leftover of a tender that died while saving (same pid, reused).
    let _ = std::fs::remove_dir_all(&tmp_path);
    let c_tmp = cstr(&tmp).map_err(err("name the new directory"))?;
    // SAFETY: `c_tmp` is a NUL-terminated string that lives across the call.
    check(unsafe { libc::mkdirat(pfd.as_raw_fd(), c_tmp.as_ptr(), 0o700) }).map_err(err("make the new directory"))?;
    let result = fill(pfd.as_raw_fd(), &tmp, &a, mode).map_err(err("write the new contents")).and_then(|()| {
        let c_name = cstr(name.as_bytes()).map_err(err("name the host directory"))?;
        // SAFETY: both names are NUL-terminated strings that live across
        // the call; RENAME_EXCHANGE swaps two existing entries atomically.
        let r = unsafe { libc::syscall(libc::SYS_renameat2, pfd.as_raw_fd(), c_tmp.as_ptr(), pfd.as_raw_fd(), c_name.as_ptr(), libc::RENAME_EXCHANGE) };
        check(r as libc::c_int).map_err(err("swap the new contents into place"))?;
        Ok(())
    });
    // After a swap this is the old contents; after a failure, the new.
    let _ = std::fs::remove_dir_all(&tmp_path);
    // SAFETY: fsync of a descriptor we own; makes the swap durable.
    unsafe { libc::fsync(pfd.as_raw_fd()) };
    result
}

/// Writes every entry below the new directory `tmp` (in `parent`).
fn fill(parent: libc::c_int, tmp: &[u8], a: &Archive<'_>, top_mode: u32) -> Result<(), std::io::Error> {
    let root = open_at(parent, tmp, dir_flags(), 0)?;
    let mut dirs: HashMap<&[u8], OwnedFd> = HashMap::new();
    let mut modes: Vec<(&[u8], u32)> = Vec::new();
    for e in a.entries() {
        let (dir, name) = match e.path.iter().rposition(|&c| c == b'/') {
            Some(i) => (dirs.get(&e.path[..i]).ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOTDIR))?.as_raw_fd(), &e.path[i + 1..]),
            None => (root.as_raw_fd(), e.path),
        };
        // Set-id and sticky bits are not the guest's to set on the host.
        let mode = e.mode & 0o777;
        match e.kind {
            Kind::Dir => {
                let c = cstr(name)?;
                // SAFETY: `c` is a NUL-terminated string that lives across the call.
                check(unsafe { libc::mkdirat(dir, c.as_ptr(), 0o700) })?;
                dirs.insert(e.path, open_at(dir, name, dir_flags(), 0)?);
                modes.push((e.path, mode));
            }
            Kind::File => {
                let fd = open_at(dir, name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)?;
                let mut f = std::fs::File::from(fd);
                f.write_all(e.data)?;
                f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
                f.sync_all()?;
            }
            Kind::Symlink => {
                let (c, t) = (cstr(name)?, cstr(e.data)?);
                // SAFETY: both are NUL-terminated strings that live across
                // the call; symlinkat creates the link without following it.
                check(unsafe { libc::symlinkat(t.as_ptr(), dir, c.as_ptr()) })?;
            }
        }
    }
    // Directory modes last (a read-only directory is filled first); the
    // owner keeps rwx so that the next save can remove the old tree.
    for (path, mode) in modes {
        if let Some(fd) = dirs.get(path) {
            // SAFETY: fchmod on a descriptor we own.
            check(unsafe { libc::fchmod(fd.as_raw_fd(), (mode | 0o700) as libc::mode_t) })?;
            // SAFETY: fsync on a descriptor we own.
            check(unsafe { libc::fsync(fd.as_raw_fd()) })?;
        }
    }
    // SAFETY: fchmod on a descriptor we own.
    check(unsafe { libc::fchmod(root.as_raw_fd(), (top_mode | 0o700) as libc::mode_t) })?;
    // SAFETY: fsync on a descriptor we own.
    check(unsafe { libc::fsync(root.as_raw_fd()) })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_archive::{encode, Item};

    fn item(path: &str, kind: Kind, mode: u32, data: &[u8]) -> Item {
        Item { path: path.as_bytes().to_vec(), kind, mode, data: data.to_vec() }
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("shoal-volume-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn parses_volume_specs() {
        let d = tmpdir("parse");
        let v = Volume::parse(&format!("{}:/data", d.display())).unwrap();
        assert_eq!((v.host.clone(), v.guest.as_str()), (std::fs::canonicalize(&d).unwrap(), "/data"));
        assert_eq!(&v.boot_path()[..6], b"/data\0");
        let msg = |s: &str| Volume::parse(s).unwrap_err().to_string();
        assert_eq!(msg("nocolon"), "--volume nocolon: expected HOSTDIR:GUESTDIR (GUESTDIR absolute)");
        assert_eq!(msg("/nonexistent-shoal:/d"), "--volume /nonexistent-shoal: no such directory");
        for g in ["rel", "/", "/a/../b", "/a//b", "/a/"] {
            assert!(msg(&format!("{}:{g}", d.display())).contains("must be an absolute path"), "{g}");
        }
        assert!(msg("/:/d").contains("cannot be the root"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn store_replaces_the_contents_and_keeps_the_mode() {
        let d = tmpdir("store");
        let host = d.join("vol");
        std::fs::create_dir_all(host.join("gone")).unwrap();
        std::fs::write(host.join("old"), b"x").unwrap();
        let mut items = vec![
            item("count", Kind::File, 0o4755, b"3\n"),
            item("sub", Kind::Dir, 0o500, b""),
            item("sub/f", Kind::File, 0o600, b"data"),
            item("sub/link", Kind::Symlink, 0o777, b"/etc/passwd"),
        ];
        store(&host, &encode(&mut items).unwrap()).unwrap();
        assert_eq!(std::fs::read(host.join("count")).unwrap(), b"3\n");
        assert_eq!(std::fs::metadata(host.join("count")).unwrap().mode() & 0o7777, 0o755, "set-id bits dropped");
        assert_eq!(std::fs::read(host.join("sub/f")).unwrap(), b"data");
        assert_eq!(std::fs::read_link(host.join("sub/link")).unwrap(), Path::new("/etc/passwd"));
        assert!(!host.join("old").exists() && !host.join("gone").exists());
        let names: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["vol"], "no temporary directory is left");
        // Saved again over a tree with a read-only directory and a link.
        store(&host, &encode(&mut []).unwrap()).unwrap();
        assert_eq!(std::fs::read_dir(&host).unwrap().count(), 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_hostile_archive_writes_nothing_outside_and_changes_nothing() {
        let d = tmpdir("hostile");
        let host = d.join("vol");
        std::fs::create_dir_all(&host).unwrap();
        std::fs::write(host.join("keep"), b"k").unwrap();
        // A valid archive whose symlink points out, then damage that the
        // reader must refuse: a name with '/', "..", an absolute path, a
        // child under the symlink, a huge size.
        let mut items = vec![item("out", Kind::Symlink, 0o777, d.to_str().unwrap().as_bytes()), item("z", Kind::File, 0o644, b"zz")];
        let good = encode(&mut items).unwrap();
        let mut huge = good.clone();
        huge[32 + 32 + 24..32 + 32 + 32].copy_from_slice(&u64::MAX.to_le_bytes());
        let named = |p: &str| encode(&mut [item(p, Kind::File, 0o644, b"x")]).unwrap();
        for bad in [named(".."), named("/etc/passwd"), named("a/../../x"), named("a//b"), named("nul\0"), named("a/b"), huge] {
            assert!(matches!(store(&host, &bad), Err(VolumeError::BadArchive(..))));
            assert_eq!(std::fs::read(host.join("keep")).unwrap(), b"k", "a refused save changes nothing");
        }
        // "out/z": a file below the symlink (the parent is no directory).
        let mut below = vec![item("out", Kind::Symlink, 0o777, b"/tmp"), item("out/z", Kind::File, 0o644, b"zz")];
        assert!(matches!(store(&host, &encode(&mut below).unwrap()), Err(VolumeError::BadArchive(..))));
        store(&host, &good).unwrap();
        assert_eq!(std::fs::read_link(host.join("out")).unwrap(), d);
        assert_eq!(std::fs::read(host.join("z")).unwrap(), b"zz");
        let mut names: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["vol"], "nothing was written beside the volume");
        // A name too long for the host file system: refused, nothing changed.
        let long = "n".repeat(300);
        let mut l = vec![item(&long, Kind::File, 0o644, b"")];
        assert!(matches!(store(&host, &encode(&mut l).unwrap()), Err(VolumeError::Io { .. })));
        assert_eq!(std::fs::read(host.join("z")).unwrap(), b"zz");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
