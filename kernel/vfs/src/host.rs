//! Read-only host directories in the name space (`--mount
//! HOSTDIR:GUESTDIR:ro`; component `shoal-hostfs`).
//!
//! A mount's guest directory is a directory of the root file system (made
//! at boot if missing, its own contents hidden); a lookup that reaches it
//! continues at the mount's top node, and `..` there goes back to the
//! guest directory's parent, as across a Linux mount point. Below it, vfs
//! resolves names one at a time, symbolic links included (an absolute
//! link starts again at the guest's root), so nothing is ever resolved on
//! the host beyond one plain name.
//!
//! Nothing is written: creating, removing, renaming or linking a name in
//! a mounted directory, opening a mounted file for writing or truncating
//! it, changing its mode, owner or times is `EROFS` (an existing name
//! asked to be created exclusively is `EEXIST`, as Linux answers first).

use alloc::vec::Vec;
use shoal_hostfs::{is_host, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
use shoal_plat::Errno;
use shoal_ramfs::{FileType, Fs, Ino};

use crate::path::Parent;
use crate::Vfs;

/// Makes every mount's guest directory in `fs` (as `mkdir -p` would; a
/// name in the way that is not a directory leaves that mount out) and
/// returns `(directory, mount)` for each.
pub(crate) fn mount_points(fs: &mut Fs) -> Vec<(Ino, usize)> {
    let mut out = Vec::new();
    for (m, path) in shoal_hostfs::mounts().iter().enumerate() {
        let mut cur = Some(fs.root());
        for part in path.split(|&c| c == b'/').filter(|p| !p.is_empty()) {
            cur = cur.and_then(|d| match fs.lookup(d, part) {
                Ok(i) if fs.file_type(i) == Ok(FileType::Directory) => Some(i),
                Ok(_) => None,
                Err(_) => fs.mkdir(d, part, 0o755).ok(),
            });
        }
        if let Some(d) = cur.filter(|&d| d != fs.root()) {
            out.push((d, m));
        }
    }
    out
}

/// The file type of a host `st_mode`; `None` for kinds a mount does not
/// serve (FIFOs, sockets, devices).
pub(crate) fn host_type(mode: u32) -> Option<FileType> {
    match mode & S_IFMT {
        S_IFREG => Some(FileType::Regular),
        S_IFDIR => Some(FileType::Directory),
        S_IFLNK => Some(FileType::Symlink),
        _ => None,
    }
}

impl Vfs {
    /// The file type of `ino`, a ramfs inode or a node (a host FIFO,
    /// socket or device reads as a regular file that cannot be opened).
    pub(crate) fn ftype(&self, ino: Ino) -> Result<FileType, Errno> {
        if is_host(ino) {
            return Ok(host_type(shoal_hostfs::mode(ino)?).unwrap_or(FileType::Regular));
        }
        self.fs.file_type(ino)
    }

    /// The target of symbolic link `ino`.
    pub(crate) fn link_target(&self, ino: Ino) -> Result<Vec<u8>, Errno> {
        if is_host(ino) {
            return shoal_hostfs::readlink(ino);
        }
        Ok(self.fs.readlink(ino)?.to_vec())
    }

    /// The mount whose guest directory `ino` is.
    pub(crate) fn mount_at(&self, ino: Ino) -> Option<usize> {
        self.mounts.iter().find(|&&(d, _)| d == ino).map(|&(_, m)| m)
    }

    /// `..` of a mount's top node: its guest directory's parent.
    pub(crate) fn mount_parent(&self, top: Ino) -> Result<Ino, Errno> {
        let m = shoal_hostfs::mount_of(top)?;
        let (dir, _) = self.mounts.iter().find(|&&(_, mm)| mm == m).copied().ok_or(Errno::ENOENT)?;
        self.fs.parent(dir)
    }

    /// The guest's absolute path of node `ino`.
    pub(crate) fn host_path(&self, ino: Ino) -> Result<Vec<u8>, Errno> {
        let m = shoal_hostfs::mount_of(ino)?;
        let (dir, _) = self.mounts.iter().find(|&&(_, mm)| mm == m).copied().ok_or(Errno::ENOENT)?;
        let mut p = self.path_of(dir)?;
        let rel = shoal_hostfs::rel_path(ino)?;
        if !rel.is_empty() {
            p.push(b'/');
            p.extend_from_slice(&rel);
        }
        Ok(p)
    }

    /// A call that would change the directory `p` names or the name in it:
    /// `EROFS` if that directory is mounted (`EEXIST` for a name that
    /// exists when `create` asks for a new one, as Linux checks first).
    pub(crate) fn ro_parent(&self, p: &Parent<'_>, create: bool) -> Result<(), Errno> {
        if !is_host(p.dir) {
            return Ok(());
        }
        if create && (p.is_special() || self.lookup(p.dir, p.name).is_ok()) {
            return Err(Errno::EEXIST);
        }
        Err(Errno::EROFS)
    }

    /// A call that would change `ino` itself: `EROFS` if it is mounted.
    pub(crate) fn ro_node(ino: Ino) -> Result<(), Errno> {
        if is_host(ino) {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }
}
