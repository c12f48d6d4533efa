//! Packs a host directory into an archive (the tender side of `--fs`).
//!
//! The tree may belong to someone else (a container image's root file
//! system) and change while it is packed, so it is walked through
//! directory descriptors: each entry is looked at and opened relative to
//! its opened directory, never through a symlink, and what was opened is
//! what is packed. A symlink is stored as a symlink (the guest resolves it
//! inside its own file system); no swap of a directory or file for a
//! symlink during the walk makes it read a file outside the tree.

use crate::{encode, Item, Kind};
use std::ffi::{CString, OsStr};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why a directory could not be packed.
#[derive(Debug)]
pub enum PackError {
    /// The directory (or something in it) could not be read.
    Io(PathBuf, std::io::Error),
    /// The path is not a directory.
    NotADirectory(PathBuf),
    /// A file is neither a regular file, a directory nor a symlink.
    Unsupported(PathBuf),
    /// The archive would exceed the format's limits.
    TooLarge,
    /// A `--volume` guest directory that is not an absolute path of
    /// ordinary names.
    BadGuestPath(String),
    /// Something of the root file system is in the way of a volume's
    /// guest directory (a file or symlink where a directory must be).
    VolumeBlocked(String),
}

impl std::fmt::Display for PackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PackError::Io(p, e) => write!(f, "cannot read {}: {e}", p.display()),
            PackError::NotADirectory(p) => write!(f, "{} is not a directory", p.display()),
            PackError::Unsupported(p) => {
                write!(f, "{} is not a regular file, directory or symlink", p.display())
            }
            PackError::TooLarge => write!(f, "the directory is too large to pack"),
            PackError::BadGuestPath(p) => {
                write!(f, "the volume's guest directory {p} is not an absolute path of ordinary names")
            }
            PackError::VolumeBlocked(p) => {
                write!(f, "the root file system has a file or symlink at {p}, where the volume's directory goes")
            }
        }
    }
}

impl std::error::Error for PackError {}

/// A directory opened for the walk (`O_DIRECTORY | O_NOFOLLOW`): its
/// entries are named relative to it, so no path is resolved again once the
/// walk has started, and a symlink swapped in for a directory or file
/// while the walk runs cannot make it read outside the tree.
struct Dir(OwnedFd);

/// Flags for opening anything below the root: never through a symlink
/// (`O_NOFOLLOW`), never blocking on a FIFO swapped in for a file
/// (`O_NONBLOCK`; a regular file ignores it).
const BELOW: libc::c_int = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;

fn cstring(name: &OsStr) -> std::io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| std::io::ErrorKind::InvalidInput.into())
}

/// `openat(dir, name, flags)`, `dir` `None` for a path from the working
/// directory.
fn open_at(dir: Option<&Dir>, name: &OsStr, flags: libc::c_int) -> std::io::Result<OwnedFd> {
    let c = cstring(name)?;
    let at = dir.map_or(libc::AT_FDCWD, |d| d.0.as_raw_fd());
    // SAFETY: `c` is a NUL-terminated name; the result is a new descriptor
    // or -1.
    let fd = unsafe { libc::openat(at, c.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
fn lstat_at(dir: &Dir, name: &OsStr) -> std::io::Result<libc::stat> {
    let c = cstring(name)?;
    // SAFETY: an all-zero stat is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` a writable stat.
    if unsafe { libc::fstatat(dir.0.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

/// `fstat(fd)`.
fn stat_fd(fd: &OwnedFd) -> std::io::Result<libc::stat> {
    // SAFETY: an all-zero stat is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a writable stat.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

/// `readlinkat(dir, name)`.
fn readlink_at(dir: &Dir, name: &OsStr) -> std::io::Result<Vec<u8>> {
    let c = cstring(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: `buf` has room for `buf.len()` bytes.
    let n = unsafe { libc::readlinkat(dir.0.as_raw_fd(), c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

fn is(st: &libc::stat, kind: libc::mode_t) -> bool {
    st.st_mode & libc::S_IFMT == kind
}

fn walk(dir: &Dir, root: &Path, rel: &Path, out: &mut Vec<Item>) -> Result<(), PackError> {
    let io = |p: &Path| {
        let full = root.join(p);
        move |e| PackError::Io(full, e)
    };
    // read_dir on /proc/self/fd/N lists the directory `dir` holds open, not
    // whatever its path names now; a duplicate keeps `dir`'s offset alone.
    let listed = std::fs::read_dir(format!("/proc/self/fd/{}", dir.0.as_raw_fd())).map_err(io(rel))?;
    for ent in listed {
        let ent = ent.map_err(io(rel))?;
        let name = ent.file_name();
        let rel_path = rel.join(&name);
        let path = rel_path.as_os_str().as_bytes().to_vec();
        let st = lstat_at(dir, &name).map_err(io(&rel_path))?;
        if is(&st, libc::S_IFDIR) {
            let sub = open_at(Some(dir), &name, BELOW | libc::O_RDONLY | libc::O_DIRECTORY).map_err(io(&rel_path))?;
            let st = stat_fd(&sub).map_err(io(&rel_path))?;
            out.push(Item { path, kind: Kind::Dir, mode: st.st_mode & 0o7777, data: Vec::new() });
            walk(&Dir(sub), root, &rel_path, out)?;
        } else if is(&st, libc::S_IFREG) {
            let f = open_at(Some(dir), &name, BELOW | libc::O_RDONLY).map_err(io(&rel_path))?;
            // What was opened decides: a FIFO or device swapped in since
            // the look above is refused, not read.
            let st = stat_fd(&f).map_err(io(&rel_path))?;
            if !is(&st, libc::S_IFREG) {
                return Err(PackError::Unsupported(root.join(&rel_path)));
            }
            let mut data = Vec::new();
            std::fs::File::from(f).read_to_end(&mut data).map_err(io(&rel_path))?;
            out.push(Item { path, kind: Kind::File, mode: st.st_mode & 0o7777, data });
        } else if is(&st, libc::S_IFLNK) {
            let data = readlink_at(dir, &name).map_err(io(&rel_path))?;
            out.push(Item { path, kind: Kind::Symlink, mode: 0o777, data });
        } else {
            return Err(PackError::Unsupported(root.join(&rel_path)));
        }
    }
    Ok(())
}

/// Packs the directory `root` (recursively; symlinks are stored, not
/// followed) into archive bytes.
pub fn pack_dir(root: &Path) -> Result<Vec<u8>, PackError> {
    let mut items = list(root)?;
    encode(&mut items).map_err(|_| PackError::TooLarge)
}

/// The entries below `root`: `root` itself is opened once (the caller's
/// path, symlinks in it followed), everything below it through directory
/// descriptors without following symlinks.
fn list(root: &Path) -> Result<Vec<Item>, PackError> {
    let io = |e| PackError::Io(root.to_path_buf(), e);
    let fd = open_at(None, root.as_os_str(), libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK).map_err(io)?;
    if !is(&stat_fd(&fd).map_err(io)?, libc::S_IFDIR) {
        return Err(PackError::NotADirectory(root.to_path_buf()));
    }
    let mut items = Vec::new();
    walk(&Dir(fd), root, Path::new(""), &mut items)?;
    Ok(items)
}

/// Packs the root file system `root` (or an empty one) with the volume
/// directory `host` in it at the absolute guest path `guest`
/// (`--volume HOSTDIR:GUESTDIR`): whatever `root` has at `guest` is
/// replaced by `host`'s tree, and the directories leading to it are made.
pub fn pack_with_volume(root: Option<&Path>, host: &Path, guest: &str) -> Result<Vec<u8>, PackError> {
    let rel = guest.strip_prefix('/').filter(|r| crate::valid_path(r.as_bytes())).ok_or_else(|| PackError::BadGuestPath(guest.into()))?;
    let rel = rel.as_bytes();
    let mut items = match root {
        Some(r) => list(r)?,
        None => Vec::new(),
    };
    let under = |p: &[u8]| p == rel || (p.len() > rel.len() && p.starts_with(rel) && p[rel.len()] == b'/');
    items.retain(|i| !under(&i.path));
    for (i, _) in rel.iter().enumerate().filter(|&(_, &c)| c == b'/').chain([(rel.len(), &b'/')]) {
        let dir = &rel[..i];
        match items.iter().find(|it| it.path == dir) {
            Some(it) if it.kind == Kind::Dir => {}
            Some(_) => return Err(PackError::VolumeBlocked(format!("/{}", String::from_utf8_lossy(dir)))),
            None => items.push(Item { path: dir.to_vec(), kind: Kind::Dir, mode: 0o755, data: Vec::new() }),
        }
    }
    if let Some(top) = items.iter_mut().find(|it| it.path == rel) {
        top.mode = std::fs::metadata(host).map_err(|e| PackError::Io(host.to_path_buf(), e))?.permissions().mode() & 0o7777;
    }
    for mut it in list(host)? {
        let mut p = rel.to_vec();
        p.push(b'/');
        p.extend_from_slice(&it.path);
        it.path = p;
        items.push(it);
    }
    encode(&mut items).map_err(|_| PackError::TooLarge)
}
