//! Packs a host directory into an archive (the tender side of `--fs`).

use crate::{encode, Item, Kind};
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

fn walk(root: &Path, rel: &Path, out: &mut Vec<Item>) -> Result<(), PackError> {
    let dir = root.join(rel);
    let rd = std::fs::read_dir(&dir).map_err(|e| PackError::Io(dir.clone(), e))?;
    for ent in rd {
        let ent = ent.map_err(|e| PackError::Io(dir.clone(), e))?;
        let rel_path = rel.join(ent.file_name());
        let full = root.join(&rel_path);
        let meta = std::fs::symlink_metadata(&full).map_err(|e| PackError::Io(full.clone(), e))?;
        let mode = meta.permissions().mode() & 0o7777;
        let path = rel_path.as_os_str().as_bytes().to_vec();
        let ft = meta.file_type();
        if ft.is_dir() {
            out.push(Item { path, kind: Kind::Dir, mode, data: Vec::new() });
            walk(root, &rel_path, out)?;
        } else if ft.is_file() {
            let data = std::fs::read(&full).map_err(|e| PackError::Io(full.clone(), e))?;
            out.push(Item { path, kind: Kind::File, mode, data });
        } else if ft.is_symlink() {
            let target = std::fs::read_link(&full).map_err(|e| PackError::Io(full.clone(), e))?;
            let data = target.as_os_str().as_bytes().to_vec();
            out.push(Item { path, kind: Kind::Symlink, mode: 0o777, data });
        } else {
            return Err(PackError::Unsupported(full));
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

fn list(root: &Path) -> Result<Vec<Item>, PackError> {
    let meta = std::fs::metadata(root).map_err(|e| PackError::Io(root.to_path_buf(), e))?;
    if !meta.is_dir() {
        return Err(PackError::NotADirectory(root.to_path_buf()));
    }
    let mut items = Vec::new();
    walk(root, Path::new(""), &mut items)?;
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
