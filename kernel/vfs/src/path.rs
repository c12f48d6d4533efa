//! Path resolution.
//!
//! Linux rules: an absolute path starts at `/`, a relative one at the
//! working directory or at the directory `dirfd` names; empty components
//! (`a//b`) are skipped; `.` and `..` are looked up like names (`..` of `/`
//! is `/`); every component but the last must be a directory (`ENOTDIR`);
//! symbolic links are followed — inside the path always, at the end unless
//! the call says not to, and always when the path ends in `/` — at most
//! [`MAXSYMLINKS`] in one resolution (`ELOOP`); a trailing `/` requires a
//! directory.

use alloc::vec::Vec;
use shoal_plat::Errno;
use shoal_ramfs::{FileType, Ino};

use crate::abi::{AT_FDCWD, MAXSYMLINKS};
use crate::{Target, Vfs};

/// The last component of a path to create or remove.
pub(crate) struct Parent<'p> {
    /// The directory that holds (or would hold) it.
    pub dir: Ino,
    /// The name; empty for a path made only of slashes (`/`).
    pub name: &'p [u8],
    /// Whether the path ended in `/`.
    pub trailing: bool,
}

impl<'p> Parent<'p> {
    /// Whether the name is `.`, `..` or empty (the path names a directory
    /// that cannot be created, removed or renamed by this name).
    pub fn is_special(&self) -> bool {
        self.name.is_empty() || self.name == b"." || self.name == b".."
    }
}

impl Vfs {
    /// The directory a relative `path` starts from.
    pub(crate) fn start_dir(&self, dirfd: i32, path: &[u8]) -> Result<Ino, Errno> {
        if path.first() == Some(&b'/') {
            return Ok(self.fs.root());
        }
        if dirfd == AT_FDCWD {
            return Ok(self.cwd);
        }
        match self.ofd(self.ofd_of(dirfd)?).target {
            Target::Node(ino) if self.ftype(ino)? == FileType::Directory => Ok(ino),
            _ => Err(Errno::ENOTDIR),
        }
    }

    /// Resolves `path` from directory `dir`; `follow`: follow a symbolic
    /// link in the last component.
    pub(crate) fn walk(&self, dir: Ino, path: &[u8], follow: bool, links: &mut u32) -> Result<Ino, Errno> {
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        let mut cur = if path[0] == b'/' { self.fs.root() } else { dir };
        let trailing = path.ends_with(b"/");
        let mut parts = path.split(|&c| c == b'/').filter(|p| !p.is_empty()).peekable();
        while let Some(name) = parts.next() {
            let last = parts.peek().is_none();
            let next = self.lookup(cur, name)?;
            if self.ftype(next)? == FileType::Symlink && (!last || follow || trailing) {
                *links += 1;
                if *links > MAXSYMLINKS {
                    return Err(Errno::ELOOP);
                }
                let target: Vec<u8> = self.link_target(next)?;
                cur = self.walk(cur, &target, true, links)?;
            } else {
                cur = next;
            }
        }
        if trailing && self.ftype(cur)? != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        Ok(cur)
    }

    /// Resolves all of `path` but its last component.
    pub(crate) fn walk_parent<'p>(&self, dir: Ino, path: &'p [u8], links: &mut u32) -> Result<Parent<'p>, Errno> {
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        let end = path.iter().rposition(|&c| c != b'/').map(|i| i + 1).unwrap_or(0);
        let trimmed = &path[..end];
        let trailing = end < path.len();
        if trimmed.is_empty() {
            return Ok(Parent { dir: self.fs.root(), name: b"", trailing });
        }
        let (dir, name) = match trimmed.iter().rposition(|&c| c == b'/') {
            None => (if path[0] == b'/' { self.fs.root() } else { dir }, trimmed),
            Some(i) => {
                let prefix = &trimmed[..i + 1];
                (self.walk(dir, prefix, true, links)?, &trimmed[i + 1..])
            }
        };
        if self.ftype(dir)? != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        Ok(Parent { dir, name, trailing })
    }

    /// Resolves a path argument of a `*at` call: `empty_ok`
    /// (`AT_EMPTY_PATH`) lets an empty path name `dirfd` itself.
    pub(crate) fn resolve_at(&self, dirfd: i32, path: &[u8], follow: bool, empty_ok: bool) -> Result<Ino, Errno> {
        if path.is_empty() {
            if !empty_ok {
                return Err(Errno::ENOENT);
            }
            if dirfd == AT_FDCWD {
                return Ok(self.cwd);
            }
            return match self.ofd(self.ofd_of(dirfd)?).target.ino() {
                Some(ino) => Ok(ino),
                None => Err(Errno::EBADF),
            };
        }
        let start = self.start_dir(dirfd, path)?;
        self.walk(start, path, follow, &mut 0)
    }

    /// The absolute path of directory `ino` (`ENOENT` if it was removed).
    pub(crate) fn path_of(&self, mut ino: Ino) -> Result<Vec<u8>, Errno> {
        if shoal_hostfs::is_host(ino) {
            return self.host_path(ino);
        }
        let mut parts: Vec<&[u8]> = Vec::new();
        while ino != self.fs.root() {
            let parent = self.fs.parent(ino)?;
            let name = self.fs.name_in(parent, ino).ok_or(Errno::ENOENT)?;
            if self.fs.is_unlinked(ino) {
                return Err(Errno::ENOENT);
            }
            parts.push(name);
            ino = parent;
        }
        let mut out = Vec::new();
        for p in parts.iter().rev() {
            out.push(b'/');
            out.extend_from_slice(p);
        }
        if out.is_empty() {
            out.push(b'/');
        }
        Ok(out)
    }
}
