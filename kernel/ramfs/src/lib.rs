//! Kernel component `ramfs` (docs/design.md "Components and recovery"): the in-memory file system.
//!
//! A tree of inodes — regular files, directories and symbolic links — with
//! Linux semantics: permission bits, link counts, sizes, and access,
//! modification, change and birth times in nanoseconds. It is populated at
//! boot from the read-only root archive ([`Fs::from_archive`]); archive file
//! contents are not copied but borrowed, and copied page by page when first
//! written ([`data`]). Everything written lives in memory only and is lost
//! when the instance exits.
//!
//! This crate knows inodes and names, not paths or descriptors: path
//! resolution, open files and the system calls are in `shoal-vfs`. Inodes
//! are referenced by number ([`Ino`]); an inode lives while it has a name
//! (`nlink > 0`) or a reference ([`Fs::get_ref`], held by open files and the
//! working directory), so an unlinked open file stays readable, as on Linux.
//! Hard links to files are implemented; to directories they are `EPERM`.
//!
//! Access control: shoal runs one program as one user, which owns every
//! file; this crate stores modes and owners but does not check them (the
//! vfs applies root-like rules, see there).
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod data;
pub mod dir;
pub mod heal;

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use shoal_archive::{Archive, ArchiveError, Kind};
use shoal_plat::Errno;

pub use data::FileData;
pub use dir::Dir;

/// An inode number.
pub type Ino = u64;

/// Inode number of the root directory.
pub const ROOT_INO: Ino = 1;
/// Longest name of a directory entry.
pub const NAME_MAX: usize = 255;
/// Longest symbolic-link target (PATH_MAX including its NUL).
pub const SYMLINK_MAX: usize = 4095;

/// File type bits of `st_mode`.
pub const S_IFMT: u32 = 0o170000;
/// Regular file.
pub const S_IFREG: u32 = 0o100000;
/// Directory.
pub const S_IFDIR: u32 = 0o040000;
/// Symbolic link.
pub const S_IFLNK: u32 = 0o120000;
/// Named pipe (FIFO).
pub const S_IFIFO: u32 = 0o010000;
/// Character device.
pub const S_IFCHR: u32 = 0o020000;
/// Socket.
pub const S_IFSOCK: u32 = 0o140000;

/// Linux's `makedev(major, minor)` (the `st_rdev` encoding).
pub const fn makedev(major: u32, minor: u32) -> u64 {
    let (ma, mi) = (major as u64, minor as u64);
    ((ma & 0xfffff000) << 32) | ((ma & 0xfff) << 8) | ((mi & 0xffffff00) << 12) | (mi & 0xff)
}

/// What an inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileType {
    /// A regular file.
    Regular,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A named pipe (its data lives in the vfs, not here).
    Fifo,
    /// A character device (what it does is the vfs's business; the inode
    /// holds its device number).
    CharDevice,
    /// A socket's name in the file system (`bind` of an `AF_UNIX` path,
    /// `mknod(S_IFSOCK)`; which socket it names is the net component's).
    Socket,
}

impl FileType {
    /// The `S_IF*` bits.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::Regular => S_IFREG,
            FileType::Directory => S_IFDIR,
            FileType::Symlink => S_IFLNK,
            FileType::Fifo => S_IFIFO,
            FileType::CharDevice => S_IFCHR,
            FileType::Socket => S_IFSOCK,
        }
    }

    /// The `d_type` of a directory entry (`DT_REG`, `DT_DIR`, `DT_LNK`,
    /// `DT_FIFO`, `DT_CHR`, `DT_SOCK`).
    pub fn dirent_type(self) -> u8 {
        match self {
            FileType::Regular => 8,
            FileType::Directory => 4,
            FileType::Symlink => 10,
            FileType::Fifo => 1,
            FileType::CharDevice => 2,
            FileType::Socket => 12,
        }
    }
}

/// A point in time: seconds and nanoseconds since the epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timespec {
    /// Seconds (may be negative: before 1970).
    pub sec: i64,
    /// Nanoseconds, `0..1_000_000_000`.
    pub nsec: u32,
}

impl Timespec {
    /// From nanoseconds since the epoch.
    pub fn from_ns(ns: u64) -> Timespec {
        Timespec { sec: (ns / 1_000_000_000) as i64, nsec: (ns % 1_000_000_000) as u32 }
    }
}

/// The attributes of an inode, as `stat` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: Ino,
    /// What it is.
    pub ftype: FileType,
    /// Type and permission bits (`st_mode`).
    pub mode: u32,
    /// Number of names (for directories 2 + subdirectories).
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes (directories: 20 per entry, `.` and `..` included, as
    /// tmpfs reports).
    pub size: u64,
    /// 512-byte blocks used.
    pub blocks: u64,
    /// Last access.
    pub atime: Timespec,
    /// Last modification of the contents.
    pub mtime: Timespec,
    /// Last change of the inode.
    pub ctime: Timespec,
    /// Creation.
    pub btime: Timespec,
    /// Device number of a character device (`st_rdev`), else 0.
    pub rdev: u64,
}

/// Bytes that are either borrowed from the archive or owned.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Bytes {
    Static(&'static [u8]),
    Owned(Box<[u8]>),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Static(s) => s,
            Bytes::Owned(b) => b,
        }
    }
}

#[derive(Debug)]
enum Node {
    File(FileData),
    Dir(Dir),
    Symlink(Bytes),
    Fifo,
    CharDevice(u64),
    Socket,
}

#[derive(Debug)]
struct Inode {
    perm: u32,
    nlink: u32,
    refs: u32,
    uid: u32,
    gid: u32,
    atime: Timespec,
    mtime: Timespec,
    ctime: Timespec,
    btime: Timespec,
    node: Node,
}

impl Inode {
    /// Whether a read at time `t` updates the access time (`relatime`:
    /// it is older than the modification or change time, or than a day).
    fn atime_due(&self, t: Timespec) -> bool {
        self.atime <= self.mtime || self.atime <= self.ctime || t.sec - self.atime.sec >= 24 * 3600
    }

    fn ftype(&self) -> FileType {
        match self.node {
            Node::File(_) => FileType::Regular,
            Node::Dir(_) => FileType::Directory,
            Node::Symlink(_) => FileType::Symlink,
            Node::Fifo => FileType::Fifo,
            Node::CharDevice(_) => FileType::CharDevice,
            Node::Socket => FileType::Socket,
        }
    }
}

/// Flags of [`Fs::rename`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenameFlags {
    /// Fail with `EEXIST` if the new name exists (`RENAME_NOREPLACE`).
    pub noreplace: bool,
    /// Swap the two names, which must both exist (`RENAME_EXCHANGE`).
    pub exchange: bool,
}

/// The file system.
pub struct Fs {
    inodes: BTreeMap<Ino, Inode>,
    next_ino: Ino,
    clock: fn() -> u64,
    resized: Resized,
    /// What changed since the last [`Fs::clear_journal`] (module [`heal`]).
    journal: heal::Journal,
}

/// Which regular files changed size since the last [`Fs::take_resized`]
/// (the shared mappings of a file follow its size: `shoal_mm::file`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Resized {
    /// None.
    #[default]
    None,
    /// This one.
    One(Ino),
    /// More than one.
    Many,
}

/// Checks that `name` can be a directory entry.
pub fn check_name(name: &[u8]) -> Result<(), Errno> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

impl Fs {
    /// An empty file system: a root directory (mode 0755) and nothing else.
    /// `clock` gives the time in nanoseconds since the epoch.
    pub fn new(clock: fn() -> u64) -> Fs {
        let mut fs = Fs { inodes: BTreeMap::new(), next_ino: ROOT_INO, clock, resized: Resized::None, journal: heal::Journal::default() };
        let root = fs.alloc(Node::Dir(Dir::new(ROOT_INO)), 0o755);
        debug_assert_eq!(root, ROOT_INO);
        fs.touch(&root).expect("root").nlink = 2;
        fs
    }

    /// The file system held by the archive `bytes` (validated first). File
    /// contents and link targets stay in `bytes`, which must never change.
    pub fn from_archive(bytes: &'static [u8], clock: fn() -> u64) -> Result<Fs, ArchiveError> {
        let archive = Archive::parse(bytes)?;
        let mut fs = Fs::new(clock);
        let mut dirs: BTreeMap<&'static [u8], Ino> = BTreeMap::new();
        for e in archive.entries() {
            let (parent, name) = match e.path.iter().rposition(|&c| c == b'/') {
                Some(i) => (*dirs.get(&e.path[..i]).ok_or(ArchiveError::BadOrder(0))?, &e.path[i + 1..]),
                None => (ROOT_INO, e.path),
            };
            if name.len() > NAME_MAX || fs.dir(parent).map(|d| d.get(name).is_some()).unwrap_or(true) {
                return Err(ArchiveError::BadOrder(0));
            }
            let ino = match e.kind {
                Kind::File => fs.alloc(Node::File(FileData::from_base(e.data)), e.mode),
                Kind::Symlink => fs.alloc(Node::Symlink(Bytes::Static(e.data)), 0o777),
                Kind::Dir => {
                    let ino = fs.alloc(Node::Dir(Dir::new(parent)), e.mode);
                    dirs.insert(e.path, ino);
                    ino
                }
            };
            fs.attach(parent, name, ino);
        }
        Ok(fs)
    }

    /// Packs the tree below the directory `dir` into archive bytes (paths
    /// relative to `dir`): what the kernel hands the tender for a volume
    /// (`shoal run --volume`). Regular files, directories and symlinks are
    /// kept; FIFOs and devices are left out (they hold no data); a file
    /// with several links is stored once per name. `ENOMEM` if the copy
    /// does not fit in memory, `EFBIG` past the format's limits.
    pub fn pack(&self, dir: Ino) -> Result<alloc::vec::Vec<u8>, Errno> {
        use alloc::vec::Vec;
        use shoal_archive::Item;
        let mut items = Vec::new();
        let mut todo: Vec<(Vec<u8>, Ino)> = alloc::vec![(Vec::new(), dir)];
        while let Some((prefix, d)) = todo.pop() {
            for (_, name, ino) in self.dir(d)?.entries_from(dir::FIRST_COOKIE) {
                let mut path = prefix.clone();
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(name);
                let inode = self.inode(ino)?;
                let (kind, mode, data) = match &inode.node {
                    Node::Dir(_) => {
                        todo.push((path.clone(), ino));
                        (Kind::Dir, inode.perm & 0o7777, Vec::new())
                    }
                    Node::File(f) => {
                        let mut data = Vec::new();
                        let len = usize::try_from(f.size()).map_err(|_| Errno::EFBIG)?;
                        data.try_reserve_exact(len).map_err(|_| Errno::ENOMEM)?;
                        data.resize(len, 0);
                        f.read(0, &mut data);
                        (Kind::File, inode.perm & 0o7777, data)
                    }
                    Node::Symlink(t) => (Kind::Symlink, 0o777, t.as_slice().to_vec()),
                    Node::Fifo | Node::CharDevice(_) | Node::Socket => continue,
                };
                items.push(Item { path, kind, mode, data });
            }
        }
        shoal_archive::encode(&mut items).map_err(|_| Errno::EFBIG)
    }

    /// The current time.
    pub fn now(&self) -> Timespec {
        Timespec::from_ns((self.clock)())
    }

    /// The root directory.
    pub fn root(&self) -> Ino {
        ROOT_INO
    }

    /// Number of live inodes.
    pub fn inode_count(&self) -> usize {
        self.inodes.len()
    }

    /// Journaled as touched, but an empty regular file as
    /// [`heal::Change::Created`] (the log builds its image from that).
    fn alloc(&mut self, node: Node, perm: u32) -> Ino {
        let ino = self.next_ino;
        self.next_ino += 1;
        let t = self.now();
        let nlink = if matches!(node, Node::Dir(_)) { 2 } else { 1 };
        let perm = perm & 0o7777;
        match &node {
            Node::File(f) if f.size() == 0 && f.owned_pages() == 0 => self.journal.changed(heal::Change::Created { ino, perm, time: t }),
            _ => self.journal.touched(ino),
        }
        self.inodes.insert(ino, Inode { perm, nlink, refs: 0, uid: 0, gid: 0, atime: t, mtime: t, ctime: t, btime: t, node });
        ino
    }

    /// Adds entry `name` → `ino` to directory `dir`, counting the link.
    /// Journaled as the entry added ([`heal::Change::Added`]), the
    /// directory not marked touched (the log edits its image by that one
    /// entry).
    fn attach(&mut self, dir: Ino, name: &[u8], ino: Ino) {
        let is_dir = matches!(self.inodes.get(&ino).map(|i| &i.node), Some(Node::Dir(_)));
        let t = self.now();
        let Some(d) = self.inodes.get_mut(&dir) else { return };
        let Node::Dir(dd) = &mut d.node else { return };
        let cookie = dd.insert(name, ino);
        if is_dir {
            d.nlink += 1;
        }
        d.mtime = t;
        d.ctime = t;
        let nlink = d.nlink;
        self.journal.added(dir, cookie, ino, name, t, nlink);
    }

    /// Removes entry `name` from directory `dir` (the caller looked it
    /// up), moving the directory's times and its link count by
    /// `subdir_delta`; journaled as the entry removed
    /// ([`heal::Change::Removed`]), the directory not marked touched.
    fn detach(&mut self, dir: Ino, name: &[u8], subdir_delta: i32) -> Result<(), Errno> {
        let t = self.now();
        let d = self.inodes.get_mut(&dir).ok_or(Errno::ENOENT)?;
        let Node::Dir(dd) = &mut d.node else { return Err(Errno::ENOTDIR) };
        let (cookie, _) = dd.remove_entry(name).ok_or(Errno::ENOENT)?;
        d.mtime = t;
        d.ctime = t;
        d.nlink = (d.nlink as i64 + subdir_delta as i64) as u32;
        let nlink = d.nlink;
        self.journal.changed(heal::Change::Removed { dir, cookie, time: t, nlink });
        Ok(())
    }

    fn inode(&self, ino: Ino) -> Result<&Inode, Errno> {
        self.inodes.get(&ino).ok_or(Errno::ENOENT)
    }

    fn inode_mut(&mut self, ino: Ino) -> Result<&mut Inode, Errno> {
        self.touch(&ino).ok_or(Errno::ENOENT)
    }

    /// The inode `ino` for changing it: the journal notes it (module
    /// [`heal`]).
    fn touch(&mut self, ino: &Ino) -> Option<&mut Inode> {
        let i = self.inodes.get_mut(ino)?;
        self.journal.touched(*ino);
        Some(i)
    }

    fn dir(&self, ino: Ino) -> Result<&Dir, Errno> {
        match &self.inode(ino)?.node {
            Node::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn dir_mut(&mut self, ino: Ino) -> Result<&mut Dir, Errno> {
        match &mut self.inode_mut(ino)?.node {
            Node::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    /// A directory that can still get entries (not removed): `ENOENT` if it
    /// was removed, `ENOTDIR` if it is not a directory.
    fn live_dir(&self, ino: Ino) -> Result<&Dir, Errno> {
        let d = self.dir(ino)?;
        if self.inodes[&ino].nlink == 0 {
            return Err(Errno::ENOENT);
        }
        Ok(d)
    }

    /// The attributes of `ino`.
    pub fn attr(&self, ino: Ino) -> Result<Attr, Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        let i = self.inode(ino)?;
        let (size, blocks) = match &i.node {
            Node::File(f) => (f.size(), f.blocks()),
            Node::Dir(d) => ((d.len() as u64 + 2) * 20, 0),
            Node::Symlink(b) => (b.as_slice().len() as u64, 0),
            Node::Fifo | Node::CharDevice(_) | Node::Socket => (0, 0),
        };
        let rdev = if let Node::CharDevice(r) = i.node { r } else { 0 };
        Ok(Attr {
            ino,
            ftype: i.ftype(),
            mode: i.ftype().mode_bits() | i.perm,
            nlink: i.nlink,
            uid: i.uid,
            gid: i.gid,
            size,
            blocks,
            atime: i.atime,
            mtime: i.mtime,
            ctime: i.ctime,
            btime: i.btime,
            rdev,
        })
    }

    /// What `ino` is.
    pub fn file_type(&self, ino: Ino) -> Result<FileType, Errno> {
        Ok(self.inode(ino)?.ftype())
    }

    /// The entry `name` of directory `dir` (`.` and `..` included).
    /// `ENOTDIR` if `dir` is not a directory, `ENOENT` if there is no such
    /// entry or `dir` was removed.
    /// In a removed directory `.` and `..` still resolve (as on Linux, where
    /// `cd ..` works from a deleted working directory); other names do not.
    pub fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Ino, Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        let d = self.dir(dir)?;
        match name {
            b"." => Ok(dir),
            b".." => Ok(d.parent),
            _ if name.len() > NAME_MAX => Err(Errno::ENAMETOOLONG),
            _ => self.live_dir(dir)?.get(name).ok_or(Errno::ENOENT),
        }
    }

    /// The parent of directory `dir`.
    pub fn parent(&self, dir: Ino) -> Result<Ino, Errno> {
        Ok(self.dir(dir)?.parent)
    }

    /// The name of `child` in directory `dir`, if it has one there.
    pub fn name_in(&self, dir: Ino, child: Ino) -> Option<&[u8]> {
        self.dir(dir).ok()?.name_of(child)
    }

    /// Whether `ino` has been removed (its last name is gone).
    pub fn is_unlinked(&self, ino: Ino) -> bool {
        self.inodes.get(&ino).map(|i| i.nlink == 0).unwrap_or(true)
    }

    /// Whether directory `anc` is `ino` or one of its ancestors.
    pub fn is_ancestor(&self, anc: Ino, mut ino: Ino) -> bool {
        loop {
            if ino == anc {
                return true;
            }
            match self.parent(ino) {
                Ok(p) if p != ino => ino = p,
                _ => return false,
            }
        }
    }

    fn create_node(&mut self, dir: Ino, name: &[u8], node: Node, perm: u32) -> Result<Ino, Errno> {
        check_name(name)?;
        if self.live_dir(dir)?.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        let ino = self.alloc(node, perm);
        self.attach(dir, name, ino);
        Ok(ino)
    }

    /// Creates an empty regular file `name` in `dir` with permissions `perm`.
    pub fn create_file(&mut self, dir: Ino, name: &[u8], perm: u32) -> Result<Ino, Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        self.create_node(dir, name, Node::File(FileData::new()), perm)
    }

    /// Creates a regular file `name` in `dir` holding `data`, which it
    /// borrows as an archive file borrows the archive's bytes: nothing is
    /// copied until a write (copy-on-write per page, [`data`]). For files
    /// every instance makes alike at boot (`/etc/hosts`): their bytes stay
    /// in the image's read-only data, shared by every instance through the
    /// library pool, instead of a kernel heap page of each instance.
    pub fn create_file_static(&mut self, dir: Ino, name: &[u8], perm: u32, data: &'static [u8]) -> Result<Ino, Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        self.create_node(dir, name, Node::File(FileData::from_base(data)), perm)
    }

    /// Creates a directory.
    pub fn mkdir(&mut self, dir: Ino, name: &[u8], perm: u32) -> Result<Ino, Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        self.create_node(dir, name, Node::Dir(Dir::new(dir)), perm)
    }

    /// Creates a symbolic link to `target`.
    pub fn symlink(&mut self, dir: Ino, name: &[u8], target: &[u8]) -> Result<Ino, Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if target.len() > SYMLINK_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        self.create_node(dir, name, Node::Symlink(Bytes::Owned(Box::from(target))), 0o777)
    }

    /// Creates a named pipe `name` in `dir` (`mknod(S_IFIFO)`, `mkfifo`).
    pub fn mkfifo(&mut self, dir: Ino, name: &[u8], perm: u32) -> Result<Ino, Errno> {
        self.create_node(dir, name, Node::Fifo, perm)
    }

    /// Creates socket file `name` in `dir` (`bind` of an `AF_UNIX` path,
    /// `mknod(S_IFSOCK)`).
    pub fn mksock(&mut self, dir: Ino, name: &[u8], perm: u32) -> Result<Ino, Errno> {
        self.create_node(dir, name, Node::Socket, perm)
    }

    /// Creates character device `name` in `dir` with device number `rdev`
    /// ([`makedev`]).
    pub fn mkchardev(&mut self, dir: Ino, name: &[u8], perm: u32, rdev: u64) -> Result<Ino, Errno> {
        self.create_node(dir, name, Node::CharDevice(rdev), perm)
    }

    /// Creates a pipe with no name (`pipe(2)`), holding one reference for
    /// the caller; it disappears when that is dropped.
    pub fn create_unnamed_fifo(&mut self) -> Ino {
        let ino = self.alloc(Node::Fifo, 0o600);
        let i = self.touch(&ino).expect("new inode");
        i.nlink = 0;
        i.refs = 1;
        ino
    }

    /// Creates a regular file with no name (`O_TMPFILE`), holding one
    /// reference for the caller; it disappears when that is dropped.
    pub fn create_unnamed(&mut self, dir: Ino, perm: u32) -> Result<Ino, Errno> {
        self.live_dir(dir)?;
        let ino = self.alloc(Node::File(FileData::new()), perm);
        let i = self.inode_mut(ino)?;
        i.nlink = 0;
        i.refs = 1;
        Ok(ino)
    }

    /// Adds the name `name` in `dir` for the existing file `ino` (hard
    /// link). Directories: `EPERM`; a removed file: `ENOENT`.
    pub fn link(&mut self, dir: Ino, name: &[u8], ino: Ino) -> Result<(), Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        check_name(name)?;
        let i = self.inode(ino)?;
        if i.ftype() == FileType::Directory {
            return Err(Errno::EPERM);
        }
        if i.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        if self.live_dir(dir)?.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        let t = self.now();
        let i = self.inode_mut(ino)?;
        i.nlink += 1;
        i.ctime = t;
        self.attach(dir, name, ino);
        Ok(())
    }

    /// Drops one name of `ino` (already removed from its directory).
    /// Journaled as touched, or as [`heal::Change::Freed`] alone when
    /// that was its last name and nobody holds it (SQLite's journal file
    /// at its unlink).
    fn drop_link(&mut self, ino: Ino) {
        let t = self.now();
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.nlink = if matches!(i.node, Node::Dir(_)) { 0 } else { i.nlink.saturating_sub(1) };
            i.ctime = t;
            if i.nlink != 0 || i.refs != 0 || ino == ROOT_INO {
                self.journal.touched(ino);
            }
        }
        self.maybe_free(ino);
    }

    /// Destroys `ino` if it has neither a name nor a reference left
    /// (journaled as [`heal::Change::Freed`]).
    fn maybe_free(&mut self, ino: Ino) {
        if ino == ROOT_INO {
            return;
        }
        if let Some(i) = self.inodes.get(&ino) {
            if i.nlink == 0 && i.refs == 0 {
                self.journal.changed(heal::Change::Freed { ino });
                self.inodes.remove(&ino);
            }
        }
    }

    fn touch_dir(&mut self, dir: Ino, subdir_delta: i32) {
        let t = self.now();
        if let Some(d) = self.touch(&dir) {
            d.mtime = t;
            d.ctime = t;
            d.nlink = (d.nlink as i64 + subdir_delta as i64) as u32;
        }
    }

    /// Removes the non-directory entry `name` from `dir` (`EISDIR` for a
    /// directory).
    pub fn unlink(&mut self, dir: Ino, name: &[u8]) -> Result<(), Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        if name == b"." || name == b".." {
            return Err(Errno::EISDIR);
        }
        let ino = self.lookup(dir, name)?;
        if self.file_type(ino)? == FileType::Directory {
            return Err(Errno::EISDIR);
        }
        self.detach(dir, name, 0)?;
        self.drop_link(ino);
        Ok(())
    }

    /// Removes the empty directory `name` from `dir`.
    pub fn rmdir(&mut self, dir: Ino, name: &[u8]) -> Result<(), Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        match name {
            b"." => return Err(Errno::EINVAL),
            b".." => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        self.live_dir(dir)?;
        let ino = self.lookup(dir, name)?;
        if !self.dir(ino)?.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        self.detach(dir, name, -1)?;
        self.drop_link(ino);
        Ok(())
    }

    /// Renames `odir/oname` to `ndir/nname` with Linux `renameat2`
    /// semantics (the caller rejects `.`/`..` with `EBUSY`).
    pub fn rename(&mut self, odir: Ino, oname: &[u8], ndir: Ino, nname: &[u8], flags: RenameFlags) -> Result<(), Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        check_name(oname).map_err(|e| if e == Errno::EINVAL { Errno::EBUSY } else { e })?;
        check_name(nname).map_err(|e| if e == Errno::EINVAL { Errno::EBUSY } else { e })?;
        if flags.noreplace && flags.exchange {
            return Err(Errno::EINVAL);
        }
        self.live_dir(ndir)?;
        let oino = self.lookup(odir, oname)?;
        let nino = self.live_dir(ndir)?.get(nname);
        let otype = self.file_type(oino)?;
        if flags.exchange {
            let nino = nino.ok_or(Errno::ENOENT)?;
            let ntype = self.file_type(nino)?;
            if oino == nino {
                return Ok(());
            }
            if (otype == FileType::Directory && self.is_ancestor(oino, ndir)) || (ntype == FileType::Directory && self.is_ancestor(nino, odir)) {
                return Err(Errno::EINVAL);
            }
            self.dir_mut(odir)?.replace(oname, nino);
            self.dir_mut(ndir)?.replace(nname, oino);
            let mut od = 0;
            let mut nd = 0;
            if otype == FileType::Directory {
                self.dir_mut(oino)?.parent = ndir;
                od -= 1;
                nd += 1;
            }
            if ntype == FileType::Directory {
                self.dir_mut(nino)?.parent = odir;
                od += 1;
                nd -= 1;
            }
            if odir == ndir {
                self.touch_dir(odir, 0);
            } else {
                self.touch_dir(odir, od);
                self.touch_dir(ndir, nd);
            }
            let t = self.now();
            self.inode_mut(oino)?.ctime = t;
            self.inode_mut(nino)?.ctime = t;
            return Ok(());
        }
        if otype == FileType::Directory && self.is_ancestor(oino, ndir) {
            return Err(Errno::EINVAL);
        }
        if let Some(n) = nino {
            if flags.noreplace {
                return Err(Errno::EEXIST);
            }
            if n == oino {
                return Ok(());
            }
            let ntype = self.file_type(n)?;
            if otype == FileType::Directory {
                if ntype != FileType::Directory {
                    return Err(Errno::ENOTDIR);
                }
                if !self.dir(n)?.is_empty() {
                    return Err(Errno::ENOTEMPTY);
                }
            } else if ntype == FileType::Directory {
                return Err(Errno::EISDIR);
            }
            self.dir_mut(ndir)?.remove(nname);
            self.touch_dir(ndir, if ntype == FileType::Directory { -1 } else { 0 });
            self.drop_link(n);
        }
        self.dir_mut(odir)?.remove(oname);
        let isdir = otype == FileType::Directory;
        self.touch_dir(odir, if isdir { -1 } else { 0 });
        self.dir_mut(ndir)?.insert(nname, oino);
        self.touch_dir(ndir, if isdir { 1 } else { 0 });
        if isdir {
            self.dir_mut(oino)?.parent = ndir;
        }
        let t = self.now();
        self.inode_mut(oino)?.ctime = t;
        Ok(())
    }

    /// Takes a reference on `ino` (an open file, the working directory):
    /// it stays alive after its last name is removed.
    /// Journaled as [`heal::Change::Refs`], not as a touched inode.
    pub fn get_ref(&mut self, ino: Ino) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.refs += 1;
            let refs = i.refs;
            self.journal.changed(heal::Change::Refs { ino, refs });
        }
    }

    /// The references taken on `ino` ([`Fs::get_ref`]); `None` if it
    /// does not exist.
    pub fn refs(&self, ino: Ino) -> Option<u32> {
        self.inodes.get(&ino).map(|i| i.refs)
    }

    /// Drops a reference taken with [`Fs::get_ref`].
    /// Journaled as [`heal::Change::Refs`] (and as touched if it freed
    /// the inode).
    pub fn put_ref(&mut self, ino: Ino) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.refs = i.refs.saturating_sub(1);
            let refs = i.refs;
            self.journal.changed(heal::Change::Refs { ino, refs });
        }
        self.maybe_free(ino);
    }

    fn file(&self, ino: Ino) -> Result<&FileData, Errno> {
        match &self.inode(ino)?.node {
            Node::File(f) => Ok(f),
            Node::Dir(_) => Err(Errno::EISDIR),
            _ => Err(Errno::EINVAL),
        }
    }

    fn file_mut(&mut self, ino: Ino) -> Result<&mut FileData, Errno> {
        match &mut self.inode_mut(ino)?.node {
            Node::File(f) => Ok(f),
            Node::Dir(_) => Err(Errno::EISDIR),
            _ => Err(Errno::EINVAL),
        }
    }

    fn note_resized(&mut self, ino: Ino) {
        self.resized = match self.resized {
            Resized::None => Resized::One(ino),
            Resized::One(i) if i == ino => Resized::One(ino),
            _ => Resized::Many,
        };
    }

    /// The files that changed size since the last call (and forgets them).
    pub fn take_resized(&mut self) -> Resized {
        core::mem::take(&mut self.resized)
    }

    /// The address of the page-aligned page holding offset `off` of regular
    /// file `ino`, which a shared mapping may map (see
    /// [`FileData::page_addr`]); `None` past the end of the file.
    pub fn page_addr(&mut self, ino: Ino, off: u64) -> Result<Option<(u64, bool)>, Errno> {
        let r = self.file_mut(ino)?.page_addr(off)?;
        if r.is_some() {
            // The page may have just become the file's own (a copy of the
            // archive's bytes, or zeros for a hole): the log's handle of
            // the file takes it too (module `heal`).
            self.journal.changed(heal::Change::Mapped { ino, off });
        }
        Ok(r)
    }

    /// See [`FileData::page_handed_out`].
    pub fn page_handed_out(&mut self, ino: Ino, off: u64) {
        if let Ok(f) = self.file_mut(ino) {
            f.page_handed_out(off);
        }
    }

    /// The contents of `ino` for inspection (tests, diagnostics).
    pub fn file_data(&self, ino: Ino) -> Result<&FileData, Errno> {
        self.file(ino)
    }

    /// Size of regular file `ino`.
    pub fn size(&self, ino: Ino) -> Result<u64, Errno> {
        Ok(self.file(ino)?.size())
    }

    /// Reads from regular file `ino` at `off`; updates the access time the
    /// way Linux's default `relatime` does.
    pub fn read(&mut self, ino: Ino, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        // The inode looked up once for the read and its access time (a
        // read and then `touch_atime` walked the tree two or three times).
        let i = self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        let n = match &i.node {
            Node::File(f) => f.read(off, buf),
            Node::Dir(_) => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        };
        let t = Timespec::from_ns((self.clock)());
        if i.atime_due(t) {
            i.atime = t;
            self.journal.changed(heal::Change::Atime { ino, atime: t });
        }
        Ok(n)
    }

    /// The bytes of regular file `ino` at `off` (up to `max`) as a slice
    /// of the read-only root archive, when they still come from it
    /// ([`data::FileData::base_slice`]); `None` otherwise (read them with
    /// [`Fs::read`]). Does not touch the access time.
    pub fn base_slice(&self, ino: Ino, off: u64, max: usize) -> Option<&'static [u8]> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        self.file(ino).ok()?.base_slice(off, max)
    }

    /// Updates the access time of `ino` if it is older than its
    /// modification or change time, or than a day (`relatime`).
    pub fn touch_atime(&mut self, ino: Ino) {
        let t = self.now();
        let due = self.inodes.get(&ino).is_some_and(|i| i.atime_due(t));
        // Journalled (for vfs's call log) only when the access time
        // changes: under relatime most reads change nothing. And then as
        // the change itself (`heal::Change::Atime`), not the inode: a
        // read after a write (SQLite reads its database's header and its
        // journal's end in every transaction) would otherwise cost the
        // log a lookup and an export of the image.
        if due {
            if let Some(i) = self.inodes.get_mut(&ino) {
                i.atime = t;
                self.journal.changed(heal::Change::Atime { ino, atime: t });
            }
        }
    }

    /// Writes `data` to regular file `ino` at `off`.
    pub fn write(&mut self, ino: Ino, off: u64, data: &[u8]) -> Result<usize, Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        if data.is_empty() {
            self.file(ino)?;
            return Ok(0);
        }
        let t = self.now();
        // Looked up once and not journaled as touched here: the journal
        // gets the change itself (below), which tells the log all it
        // needs when no page was added.
        let i = self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        let f = match &mut i.node {
            Node::File(f) => f,
            Node::Dir(_) => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        };
        let (before, pages) = (f.size(), f.owned_pages());
        let n = f.write(off, data)?;
        let (size, grew) = (f.size(), f.owned_pages() != pages);
        i.mtime = t;
        i.ctime = t;
        // Writing clears set-user-ID and set-group-ID bits, as on Linux.
        i.perm &= !0o6000;
        let perm = i.perm;
        if size != before {
            self.note_resized(ino);
        }
        // Most writes (a database's pages, rewritten in place) add no
        // page: the log then updates its image from the change alone,
        // with no lookup of the inode or of its pages.
        if grew {
            self.journal.touched(ino);
            self.journal.changed(heal::Change::Write { ino, off, len: n as u64 });
        } else {
            self.journal.changed(heal::Change::InPlace { ino, size, time: t, perm });
        }
        Ok(n)
    }

    /// Sets the size of regular file `ino` (`EISDIR` for a directory,
    /// `EINVAL` for others).
    pub fn truncate(&mut self, ino: Ino, size: u64) -> Result<(), Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        let t = self.now();
        let f = self.file_mut(ino)?;
        let before = f.size();
        f.truncate(size)?;
        if size != before {
            self.note_resized(ino);
        }
        self.journal.changed(heal::Change::Truncate { ino, size });
        let i = self.inode_mut(ino)?;
        i.mtime = t;
        i.ctime = t;
        Ok(())
    }

    /// The target of symbolic link `ino` (`EINVAL` if it is not one).
    pub fn readlink(&self, ino: Ino) -> Result<&[u8], Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        match &self.inode(ino)?.node {
            Node::Symlink(b) => Ok(b.as_slice()),
            _ => Err(Errno::EINVAL),
        }
    }

    /// Lists directory `dir` from position `pos`: calls `f(next_pos, name,
    /// ino, d_type)` for `.`, `..` and each entry until `f` returns false.
    /// `ENOENT` if the directory was removed.
    pub fn readdir(&self, dir: Ino, pos: u64, mut f: impl FnMut(u64, &[u8], Ino, u8) -> bool) -> Result<(), Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        let d = self.live_dir(dir)?;
        let dt = FileType::Directory.dirent_type();
        if pos == dir::POS_DOT && !f(dir::POS_DOTDOT, b".", dir, dt) {
            return Ok(());
        }
        if pos <= dir::POS_DOTDOT && !f(dir::FIRST_COOKIE, b"..", d.parent, dt) {
            return Ok(());
        }
        for (next, name, ino) in d.entries_from(pos) {
            let t = self.inodes.get(&ino).map(|i| i.ftype().dirent_type()).unwrap_or(0);
            if !f(next, name, ino, t) {
                break;
            }
        }
        Ok(())
    }

    /// Sets the permission bits of `ino`.
    pub fn chmod(&mut self, ino: Ino, perm: u32) -> Result<(), Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        let t = self.now();
        let i = self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        i.perm = perm & 0o7777;
        i.ctime = t;
        // The change itself, not the inode (`heal::Change::Attr`).
        let c = heal::Change::Attr { ino, perm: i.perm, uid: i.uid, gid: i.gid, ctime: t };
        self.journal.changed(c);
        Ok(())
    }

    /// Sets the owner and group of `ino` (`None`: unchanged).
    pub fn chown(&mut self, ino: Ino, uid: Option<u32>, gid: Option<u32>) -> Result<(), Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        let t = self.now();
        let i = self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        if let Some(u) = uid {
            i.uid = u;
        }
        if let Some(g) = gid {
            i.gid = g;
        }
        i.ctime = t;
        // The change itself, not the inode (`heal::Change::Attr`).
        let c = heal::Change::Attr { ino, perm: i.perm, uid: i.uid, gid: i.gid, ctime: t };
        self.journal.changed(c);
        Ok(())
    }

    /// Sets the access and/or modification time (`None`: unchanged); the
    /// change time becomes now.
    pub fn set_times(&mut self, ino: Ino, atime: Option<Timespec>, mtime: Option<Timespec>) -> Result<(), Errno> {
        let _in = shoal_recover::enter(shoal_recover::id::RAMFS);
        let t = self.now();
        let i = self.inode_mut(ino)?;
        if let Some(a) = atime {
            i.atime = a;
        }
        if let Some(m) = mtime {
            i.mtime = m;
        }
        i.ctime = t;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
