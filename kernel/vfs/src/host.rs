//! Host directories in the name space (`--mount HOSTDIR:GUESTDIR:ro` or
//! `:rw`; component `shoal-hostfs`).
//!
//! A mount's guest directory is a directory of the root file system (made
//! at boot if missing, its own contents hidden); a lookup that reaches it
//! continues at the mount's top node, and `..` there goes back to the
//! guest directory's parent, as across a Linux mount point. Below it, vfs
//! resolves names one at a time, symbolic links included (an absolute
//! link starts again at the guest's root), so nothing is ever resolved on
//! the host beyond one plain name.
//!
//! The root mount (`--mount HOSTDIR:/:ro`, a container's root file
//! system) has no directory of its own: the root directory shows its own
//! names (`/tmp`, `/dev`, `/proc`, `/sys`, what the program makes there)
//! and then HOSTDIR's, so the root's own hide HOSTDIR's of the same name.
//! Another mount whose first name is the root mount's lies on it: found by
//! its path while names are looked up there (its directory must exist in
//! HOSTDIR, as a Linux mount point must).
//!
//! In a read-only mount nothing is written: creating, removing, renaming
//! or linking a name in a mounted directory, opening a mounted file for
//! writing or truncating it, changing its mode, owner or times is `EROFS`
//! (an existing name asked to be created exclusively is `EEXIST`, as Linux
//! answers first). A writable mount (`:rw`) takes regular files and
//! directories (create, write, truncate, remove, rename, mode, times,
//! sync) to the host; links, FIFOs, device nodes and owners are `EPERM`
//! there (the host decides, not the guest), hard links `EPERM` too.

use alloc::vec::Vec;
use shoal_hostfs::{is_host, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
use shoal_plat::Errno;
use shoal_ramfs::{FileType, Fs, Ino};

use crate::path::Parent;
use crate::Vfs;

/// The first directory position of the root mount's entries in the root
/// directory's listing (the root's own positions stay far below).
pub(crate) const UNION_POS: u64 = 1 << 62;

/// The root mount's index: the mount whose guest directory is `/`.
fn root_mount_of(mounts: &[Vec<u8>]) -> Option<usize> {
    mounts.iter().position(|p| p.as_slice() == b"/")
}

/// Whether the root mount (if any) has `name` in its top directory.
pub(crate) fn root_has(name: &[u8]) -> bool {
    root_mount_of(&shoal_hostfs::mounts()).is_some_and(|m| shoal_hostfs::at_path(m, name).is_ok())
}

/// The mount points: every mount's guest directory made in `fs` (as
/// `mkdir -p` would; a name in the way that is not a directory leaves
/// that mount out), or a single-file mount's regular file (made empty if
/// missing; a directory there leaves it out), as `(directory or file,
/// mount)`; the root mount; and the mounts on directories of the root
/// mount, each with its path there.
///
/// A mount lies on the root mount when its first name is the root
/// mount's and not the root file system's own (`/tmp`, `/dev`, …): it is
/// then found by its path as names are looked up beneath the root mount
/// (its directory must exist there), and nothing is made in `fs`, which
/// would hide the root mount's directory of that name.
pub(crate) fn mount_points(fs: &mut Fs) -> MountPoints {
    let all = shoal_hostfs::mounts();
    let root_mount = root_mount_of(&all);
    let mut out = Vec::new();
    let mut inner = Vec::new();
    for (m, path) in all.iter().enumerate() {
        let rel = path.strip_prefix(b"/").unwrap_or(path);
        let first = rel.split(|&c| c == b'/').next().unwrap_or(b"");
        if let Some(rm) = root_mount.filter(|&rm| rm != m) {
            if fs.lookup(fs.root(), first).is_err() && shoal_hostfs::at_path(rm, first).is_ok() {
                inner.push((rel.to_vec(), m));
                continue;
            }
        }
        let file = shoal_hostfs::is_file_mount(m);
        let parts: Vec<&[u8]> = rel.split(|&c| c == b'/').filter(|p| !p.is_empty()).collect();
        let mut cur = Some(fs.root());
        for (k, part) in parts.iter().enumerate() {
            // A single file lies on a regular file (made empty if
            // missing, as a container runtime makes it), its parents on
            // directories.
            let want = if file && k + 1 == parts.len() { FileType::Regular } else { FileType::Directory };
            cur = cur.and_then(|d| match fs.lookup(d, part) {
                Ok(i) if fs.file_type(i) == Ok(want) => Some(i),
                Ok(_) => None,
                Err(_) if want == FileType::Regular => fs.create_file(d, part, 0o644).ok(),
                Err(_) => fs.mkdir(d, part, 0o755).ok(),
            });
        }
        if let Some(d) = cur.filter(|&d| d != fs.root()) {
            out.push((d, m));
        }
    }
    MountPoints { at: out, root: root_mount, inner }
}

/// What [`mount_points`] finds.
pub(crate) struct MountPoints {
    /// `(directory, mount)` of the mounts on the root file system.
    pub at: Vec<(Ino, usize)>,
    /// The root mount.
    pub root: Option<usize>,
    /// The mounts on the root mount: each one's path there and the mount.
    pub inner: Vec<(Vec<u8>, usize)>,
}

/// Takes directory entries (next position, name, inode, `d_type`) until
/// it answers `false`.
pub(crate) type DirentSink<'a> = dyn FnMut(u64, &[u8], u64, u8) -> bool + 'a;

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
        if let Some((dir, _)) = self.mounts.iter().find(|&&(_, mm)| mm == m) {
            return self.fs.parent(*dir);
        }
        // A mount on the root mount: the root mount's node one name up.
        let (rel, _) = self.inner_mounts.iter().find(|(_, mm)| *mm == m).ok_or(Errno::ENOENT)?;
        let up = &rel[..rel.iter().rposition(|&c| c == b'/').unwrap_or(0)];
        let rm = self.root_mount.ok_or(Errno::ENOENT)?;
        self.mounted(shoal_hostfs::at_path(rm, up)?)
    }

    /// What a lookup that found node `ino` reaches: the root directory for
    /// the root mount's top, the top of a mount on the root mount for its
    /// directory there, else `ino`.
    pub(crate) fn mounted(&self, ino: Ino) -> Result<Ino, Errno> {
        let Some(rm) = self.root_mount else { return Ok(ino) };
        if shoal_hostfs::mount_of(ino)? != rm {
            return Ok(ino);
        }
        let rel = shoal_hostfs::rel_path(ino)?;
        if rel.is_empty() {
            return Ok(self.fs.root());
        }
        match self.inner_mounts.iter().find(|(p, _)| *p == rel) {
            Some(&(_, m)) => shoal_hostfs::root(m),
            None => Ok(ino),
        }
    }

    /// A mount on the root mount whose path there is `name` in directory
    /// node `dir`: its top, found even where the root mount has no such
    /// name (a single file mounted where the image has none).
    pub(crate) fn inner_at(&self, dir: Ino, name: &[u8]) -> Option<Ino> {
        let rm = self.root_mount?;
        if self.inner_mounts.is_empty() || shoal_hostfs::mount_of(dir).ok()? != rm {
            return None;
        }
        let mut rel = shoal_hostfs::rel_path(dir).ok()?;
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(name);
        let &(_, m) = self.inner_mounts.iter().find(|(p, _)| *p == rel)?;
        shoal_hostfs::root(m).ok()
    }

    /// Looks `name` up in the root mount's top, for the root directory
    /// that has no such name of its own.
    pub(crate) fn root_lookup(&self, name: &[u8]) -> Result<Ino, Errno> {
        let rm = self.root_mount.ok_or(Errno::ENOENT)?;
        if name.is_empty() || name == b"." || name == b".." {
            return Err(Errno::ENOENT);
        }
        let top = shoal_hostfs::root(rm)?;
        match shoal_hostfs::lookup(top, name) {
            Err(Errno::ENOENT) => self.inner_at(top, name).ok_or(Errno::ENOENT),
            r => self.mounted(r?),
        }
    }

    /// The guest's absolute path of node `ino`.
    pub(crate) fn host_path(&self, ino: Ino) -> Result<Vec<u8>, Errno> {
        let m = shoal_hostfs::mount_of(ino)?;
        let mut p = if Some(m) == self.root_mount {
            Vec::new()
        } else if shoal_hostfs::is_file_mount(m) {
            // A file has no parent link to walk: its guest path as given.
            shoal_hostfs::mounts().into_iter().nth(m).ok_or(Errno::ENOENT)?
        } else if let Some((dir, _)) = self.mounts.iter().find(|&&(_, mm)| mm == m) {
            self.path_of(*dir)?
        } else {
            let (rel, _) = self.inner_mounts.iter().find(|(_, mm)| *mm == m).ok_or(Errno::ENOENT)?;
            [&b"/"[..], rel].concat()
        };
        let rel = shoal_hostfs::rel_path(ino)?;
        if !rel.is_empty() {
            p.push(b'/');
            p.extend_from_slice(&rel);
        }
        if p.is_empty() {
            p.push(b'/');
        }
        Ok(p)
    }

    /// Lists the root directory under a root mount: its own entries, then
    /// the root mount's that it does not have itself. The root mount's
    /// positions are [`UNION_POS`] plus the count of its entries read
    /// before (a host position would collide with the root's own).
    pub(crate) fn list_union_root(&self, start: u64, each: &mut DirentSink<'_>) -> Result<(), Errno> {
        let rm = self.root_mount.ok_or(Errno::ENOENT)?;
        let root = self.fs.root();
        if start < UNION_POS {
            let mut finished = true;
            self.fs.readdir(root, start, |next, name, ino, t| {
                let more = each(next, name, ino, t);
                finished &= more;
                more
            })?;
            if !finished {
                return Ok(());
            }
        }
        let skip = start.saturating_sub(UNION_POS);
        let mut ordinal = 0u64;
        shoal_hostfs::list(shoal_hostfs::root(rm)?, 0, |e| {
            ordinal += 1;
            if ordinal <= skip || e.name == b"." || e.name == b".." || self.fs.lookup(root, e.name).is_ok() {
                return true;
            }
            each(UNION_POS + ordinal, e.name, e.ino, e.dtype)
        })
    }

    /// A call that would change the directory `p` names or the name in it:
    /// `EROFS` if that directory is mounted (`EEXIST` for a name that
    /// exists when `create` asks for a new one, as Linux checks first).
    /// In the root directory under a root mount, a name the root mount
    /// has and the root lacks counts as mounted: it is neither made again
    /// (which would hide it) nor removed.
    pub(crate) fn ro_parent(&self, p: &Parent<'_>, create: bool) -> Result<(), Errno> {
        if p.dir == self.fs.root() && self.root_mount.is_some() && !p.is_special() {
            if self.fs.lookup(p.dir, p.name).is_err() && self.root_lookup(p.name).is_ok() {
                return Err(if create { Errno::EEXIST } else { Errno::EROFS });
            }
            return Ok(());
        }
        if !is_host(p.dir) {
            return Ok(());
        }
        if create && (p.is_special() || self.lookup(p.dir, p.name).is_ok()) {
            return Err(Errno::EEXIST);
        }
        if shoal_hostfs::writable(p.dir) {
            return Ok(());
        }
        Err(Errno::EROFS)
    }

    /// A call that would change `ino` itself: `EROFS` if it is in a
    /// read-only mount.
    pub(crate) fn ro_node(ino: Ino) -> Result<(), Errno> {
        if is_host(ino) && !shoal_hostfs::writable(ino) {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }

    /// A change to a writable mount's name in directory node `p.dir` that
    /// the host does not make for a guest (links, device nodes).
    pub(crate) fn host_refuses(p: &Parent<'_>) -> Result<(), Errno> {
        if is_host(p.dir) {
            Err(Errno::EPERM)
        } else {
            Ok(())
        }
    }
}
