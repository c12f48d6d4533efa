//! What vfs tells inotify (the `net` component's `inotify` module, through
//! the object table): each change the instance makes to its file system,
//! as Linux's `fsnotify` hooks report it. Nothing is done while no watch
//! exists ([`crate::obj::watching`]).

use core::sync::atomic::{AtomicU32, Ordering};
use shoal_plat::Errno;
use shoal_ramfs::{FileType, Ino};

use crate::Vfs;

/// `IN_*` bits vfs reports.
pub(crate) const IN_MODIFY: u32 = 0x2;
pub(crate) const IN_ATTRIB: u32 = 0x4;
pub(crate) const IN_MOVED_FROM: u32 = 0x40;
pub(crate) const IN_MOVED_TO: u32 = 0x80;
pub(crate) const IN_CREATE: u32 = 0x100;
pub(crate) const IN_DELETE: u32 = 0x200;
pub(crate) const IN_DELETE_SELF: u32 = 0x400;
pub(crate) const IN_MOVE_SELF: u32 = 0x800;
pub(crate) const IN_ISDIR: u32 = 0x4000_0000;

/// The last rename cookie given.
static COOKIE: AtomicU32 = AtomicU32::new(0);

impl Vfs {
    /// The inode `path` (guest memory) names for `inotify_add_watch`:
    /// symbolic links followed unless `!follow`, `ENOTDIR` for a
    /// non-directory with `onlydir`.
    pub fn watch_target(&self, path_addr: u64, follow: bool, onlydir: bool) -> Result<Ino, Errno> {
        let path = crate::ops::path_arg(path_addr)?;
        let ino = self.resolve_at(crate::abi::AT_FDCWD, path, follow, false)?;
        if onlydir && self.ftype(ino)? != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        Ok(ino)
    }

    /// `IN_ISDIR` if `ino` is a directory.
    pub(crate) fn isdir_bit(&self, ino: Ino) -> u32 {
        if self.ftype(ino) == Ok(FileType::Directory) {
            IN_ISDIR
        } else {
            0
        }
    }

    /// Child `name` of directory `dir` changed (`IN_CREATE`, `IN_DELETE`, …).
    pub(crate) fn note_child(&self, dir: Ino, mask: u32, name: &[u8], cookie: u32) {
        if !crate::obj::watching() {
            return;
        }
        if let Some(o) = crate::obj::ops() {
            o.fs_event(dir, mask, cookie, name);
        }
    }

    /// Inode `ino` changed (`IN_MODIFY`, `IN_ATTRIB`, …): reported on it
    /// and, with its name, on each watched directory it is in.
    pub(crate) fn note_inode(&self, ino: Ino, mask: u32) {
        if !crate::obj::watching() {
            return;
        }
        let Some(o) = crate::obj::ops() else { return };
        let mask = mask | self.isdir_bit(ino);
        for d in o.watched() {
            if d == ino || shoal_hostfs::is_host(d) {
                continue;
            }
            if let Some(name) = self.fs.name_in(d, ino) {
                o.fs_event(d, mask, 0, name);
            }
        }
        o.fs_event(ino, mask, 0, b"");
    }

    /// Name `name` of `dir`, which named `gone`, was removed (`isdir`:
    /// `IN_ISDIR` for a directory): as Linux's `vfs_unlink`/`vfs_rmdir`,
    /// the link count's change on the inode (a file), the name's removal
    /// on the directory, and the inode's end once its last name is gone.
    pub(crate) fn note_removed(&self, dir: Ino, name: &[u8], gone: Option<Ino>, isdir: u32) {
        if !crate::obj::watching() {
            return;
        }
        if let (Some(i), 0) = (gone, isdir) {
            self.note_child(i, IN_ATTRIB, b"", 0);
        }
        self.note_child(dir, IN_DELETE | isdir, name, 0);
        if let Some(i) = gone {
            if isdir != 0 || shoal_hostfs::is_host(i) || self.fs.is_unlinked(i) {
                self.note_child(i, IN_DELETE_SELF | isdir, b"", 0);
            }
        }
    }

    /// A fresh rename cookie (0 is never one), when something watches.
    pub(crate) fn next_cookie(&self) -> u32 {
        if !crate::obj::watching() {
            return 0;
        }
        let mut c = COOKIE.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        if c == 0 {
            c = COOKIE.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        }
        c
    }
}
