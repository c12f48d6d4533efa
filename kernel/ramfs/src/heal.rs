//! What recovery needs from ramfs (the log and the
//! replay are `shoal-vfs`'s module `heal`, see there for the design).
//!
//! - **The journal**: every inode a call changed (created, written,
//!   renamed into, destroyed, its times moved) and the ranges of file
//!   data it wrote or the sizes it truncated to, in order; a write into
//!   pages the file had, a reference taken or dropped, a mode or
//!   owner changed and an access time moved by a read come as the change
//!   alone ([`Change::InPlace`], [`Change::Refs`], [`Change::Attr`],
//!   [`Change::Atime`]), the inode not
//!   listed for them; so does a name added to or removed from a
//!   directory ([`Change::Added`], [`Change::Removed`]: the log edits its
//!   image of the directory by that one entry instead of exporting it).
//!   vfs reads it after each call ([`Fs::journal`]) into its log and
//!   empties it ([`Fs::clear_journal`]).
//! - **Images**: an inode without its file contents ([`Image`], from
//!   [`Fs::export`]), which the log keeps per inode; [`Fs::import`] puts one
//!   back (or removes the inode) when the file system is rebuilt after a
//!   reboot, with the contents the log kept: a second handle on the
//!   file's own pages ([`crate::data::Mirror`], made a file again by
//!   [`crate::data::Mirror::to_file`]), never a copy of them.

use super::{dir::DirImage, Bytes, Dir, FileData, Fs, Ino, Inode, Node, Timespec};
use alloc::vec::Vec;
use shoal_plat::Errno;

/// A change to file data, in the order the calls made them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// `len` bytes written at `off`.
    Write {
        /// The file.
        ino: Ino,
        /// Where.
        off: u64,
        /// How many bytes.
        len: u64,
    },
    /// Written in pages the file already had: no page was added (so a
    /// handle kept in step with the file — recovery's log — already
    /// holds every page the write touched). What else the write changed
    /// comes with it — the size, the modification and change time, the
    /// mode (set-ID bits cleared) — and the inode is *not* in the
    /// journal's `touched` list for it: the log updates its image of the
    /// file from these ([`Image::apply_fields`]) without looking the
    /// inode up and exporting it again. (If the same call changed the
    /// inode otherwise, it is in `touched` as well.)
    InPlace {
        /// The file.
        ino: Ino,
        /// Its size after the write.
        size: u64,
        /// Its new modification and change time.
        time: Timespec,
        /// Its mode after the write.
        perm: u32,
    },
    /// The page holding `off` was handed to a shared mapping (and made
    /// the file's own if it was not).
    Mapped {
        /// The file.
        ino: Ino,
        /// An offset in the page.
        off: u64,
    },
    /// A reference taken or dropped ([`Fs::get_ref`], [`Fs::put_ref`]:
    /// an open or close of the inode, the working directory moved): its
    /// count after the change. Like [`Change::InPlace`], the inode is not
    /// in `touched` for it — the log sets the count in its image without
    /// exporting the inode again (for a directory, a walk over its
    /// entries; SQLite opens and closes its database's directory once
    /// per transaction). An inode the drop freed is in `touched`.
    Refs {
        /// The inode.
        ino: Ino,
        /// Its reference count after the change.
        refs: u32,
    },
    /// A name added to directory `dir` (a file, directory, link or node
    /// created, a hard link made). Like [`Change::InPlace`], the
    /// directory is not in `touched` for it: the log adds the entry to
    /// its image of the directory ([`Image::apply_dirent`]) instead of
    /// exporting the directory again (a walk over all its entries).
    Added {
        /// The directory.
        dir: Ino,
        /// The entry's position ([`Dir::insert`]).
        cookie: u64,
        /// The inode it names.
        ino: Ino,
        /// Where its name is in the journal's name buffer
        /// ([`Fs::journal_names`]).
        name_at: u32,
        /// The name's length.
        name_len: u32,
        /// The directory's new modification and change time.
        time: Timespec,
        /// The directory's link count after the change.
        nlink: u32,
    },
    /// The name at position `cookie` removed from directory `dir` (an
    /// unlink, an rmdir); the directory is not in `touched` for it (see
    /// [`Change::Added`]).
    Removed {
        /// The directory.
        dir: Ino,
        /// The removed entry's position.
        cookie: u64,
        /// The directory's new modification and change time.
        time: Timespec,
        /// The directory's link count after the change.
        nlink: u32,
    },
    /// An empty regular file made ([`Fs::create_file`]), with what its
    /// image holds: the log builds the image and an empty file handle
    /// from this ([`Image::new_file`]) instead of looking the inode up
    /// and exporting it. The inode is not in `touched` for it (unless the
    /// same call changed it otherwise).
    Created {
        /// The file.
        ino: Ino,
        /// Its permission bits.
        perm: u32,
        /// Its four times.
        time: Timespec,
    },
    /// The inode was destroyed (its last name and reference gone): the
    /// log drops its entry without looking it up. Not in `touched` for
    /// it (unless the same call changed it before destroying it).
    Freed {
        /// The inode.
        ino: Ino,
    },
    /// The permission bits or the owner changed (`chmod`, `chown` and
    /// their kin; SQLite `fchown`s its journal every transaction): the
    /// attributes after the change. Like [`Change::InPlace`], the inode
    /// is not in `touched` for it: the log sets them in its image
    /// ([`Image::apply_fields`]) instead of exporting the inode again.
    Attr {
        /// The inode.
        ino: Ino,
        /// Its permission bits.
        perm: u32,
        /// Its owner.
        uid: u32,
        /// Its group.
        gid: u32,
        /// Its new change time.
        ctime: Timespec,
    },
    /// The access time moved (a read under `relatime`, [`Fs::touch_atime`]):
    /// its new value. Like [`Change::InPlace`], the inode is not in
    /// `touched` for it: the log sets it in its image
    /// ([`Image::apply_fields`]) instead of exporting the inode again.
    Atime {
        /// The inode.
        ino: Ino,
        /// Its access time after the read.
        atime: Timespec,
    },
    /// Truncated (or extended) to `size`.
    Truncate {
        /// The file.
        ino: Ino,
        /// The new size.
        size: u64,
    },
}

/// What changed since the journal was last drained.
#[derive(Debug, Default)]
pub struct Journal {
    on: bool,
    /// Inodes changed (each once; a call changes a handful).
    pub touched: Vec<Ino>,
    /// Data changes, in order.
    pub changes: Vec<Change>,
    /// The names of [`Change::Added`] entries, one after the other.
    pub names: Vec<u8>,
}

impl Journal {
    pub(crate) fn touched(&mut self, ino: Ino) {
        if self.on && !self.touched.contains(&ino) {
            self.touched.push(ino);
        }
    }

    pub(crate) fn changed(&mut self, c: Change) {
        if self.on {
            self.changes.push(c);
        }
    }

    /// Notes the entry `name` → `ino` added to `dir` at `cookie`
    /// ([`Change::Added`]).
    pub(crate) fn added(&mut self, dir: Ino, cookie: u64, ino: Ino, name: &[u8], time: Timespec, nlink: u32) {
        if self.on {
            let name_at = self.names.len() as u32;
            self.names.extend_from_slice(name);
            self.changes.push(Change::Added { dir, cookie, ino, name_at, name_len: name.len() as u32, time, nlink });
        }
    }
}

/// What [`Fs::export_file_into`] found.
pub enum Exported<'a> {
    /// The inode does not exist.
    Gone,
    /// A regular file, with its contents.
    File(&'a FileData),
    /// Another kind of inode.
    Other,
}

/// An inode as the log keeps it: its attributes and what it is, without
/// the contents of a regular file (the log keeps those apart).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    perm: u32,
    nlink: u32,
    refs: u32,
    uid: u32,
    gid: u32,
    atime: Timespec,
    mtime: Timespec,
    ctime: Timespec,
    btime: Timespec,
    node: NodeImage,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum NodeImage {
    File,
    Dir(DirImage),
    Symlink(Bytes),
    Fifo,
    CharDevice(u64),
    Socket,
}

impl Image {
    /// Applies a change of the inode's own fields: a write in place
    /// ([`Change::InPlace`], to the image of a regular file), a reference
    /// count ([`Change::Refs`]), attributes ([`Change::Attr`]) or an
    /// access time ([`Change::Atime`]); `false` (nothing changed) for
    /// another change, or a write in place to another kind of inode.
    pub fn apply_fields(&mut self, c: &Change) -> bool {
        match *c {
            Change::InPlace { time, perm, .. } if self.is_file() => (self.mtime, self.ctime, self.perm) = (time, time, perm),
            Change::Refs { refs, .. } => self.refs = refs,
            Change::Attr { perm, uid, gid, ctime, .. } => (self.perm, self.uid, self.gid, self.ctime) = (perm, uid, gid, ctime),
            Change::Atime { atime, .. } => self.atime = atime,
            _ => return false,
        }
        true
    }

    /// Applies a directory entry's change ([`Change::Added`],
    /// [`Change::Removed`]) to the image of that directory, `names` being
    /// the journal's name buffer ([`Fs::journal_names`]) and `spare` a
    /// name buffer to reuse or keep ([`DirImage::add`]); `false` (nothing
    /// changed) if this is not a directory's image, the removed entry is
    /// not in it or the change is another kind: the caller exports the
    /// directory instead.
    pub fn apply_dirent(&mut self, c: &Change, names: &[u8], spare: &mut Option<alloc::boxed::Box<[u8]>>) -> bool {
        let NodeImage::Dir(d) = &mut self.node else { return false };
        let (time, nlink) = match *c {
            Change::Added { cookie, ino, name_at, name_len, time, nlink, .. } => {
                let Some(name) = names.get(name_at as usize..name_at as usize + name_len as usize) else { return false };
                d.add(cookie, name, ino, spare);
                (time, nlink)
            }
            Change::Removed { cookie, time, nlink, .. } => {
                if !d.remove(cookie, spare) {
                    return false;
                }
                (time, nlink)
            }
            _ => return false,
        };
        (self.mtime, self.ctime, self.nlink) = (time, time, nlink);
        true
    }

    /// The image of a regular file just made ([`Change::Created`]),
    /// written into `slot` (replacing a stale image a reused slot holds);
    /// `false` for another change.
    pub fn new_file(c: &Change, slot: &mut Option<Image>) -> bool {
        let Change::Created { perm, time, .. } = *c else { return false };
        let im = Image { perm, nlink: 1, refs: 0, uid: 0, gid: 0, atime: time, mtime: time, ctime: time, btime: time, node: NodeImage::File };
        *slot = Some(im);
        true
    }

    /// Whether it is a regular file (its contents are kept apart).
    pub fn is_file(&self) -> bool {
        self.node == NodeImage::File
    }

    /// Bytes the image holds on the heap besides itself (directory
    /// entries, a link target): for the log's memory report.
    pub fn heap_bytes(&self) -> usize {
        match &self.node {
            NodeImage::Dir(d) => d.heap_bytes(),
            NodeImage::Symlink(Bytes::Owned(b)) => b.len(),
            _ => 0,
        }
    }
}

impl Fs {
    /// Turns the journal on or off (off: nothing is noted; it starts off,
    /// so building the file system at boot notes nothing).
    pub fn set_journal(&mut self, on: bool) {
        self.journal.on = on;
        if !on {
            self.clear_journal();
        }
    }

    /// The inodes changed and the data changes made since the journal
    /// was last emptied ([`Fs::clear_journal`]): read in place, where
    /// moving the lists out and back cost more.
    pub fn journal(&self) -> (&[Ino], &[Change]) {
        (&self.journal.touched, &self.journal.changes)
    }

    /// Empties the journal (its buffers kept).
    pub fn clear_journal(&mut self) {
        self.journal.touched.clear();
        self.journal.changes.clear();
        self.journal.names.clear();
    }

    /// The names of the journal's [`Change::Added`] entries (each
    /// change says where its name is).
    pub fn journal_names(&self) -> &[u8] {
        &self.journal.names
    }

    /// Whether the journal holds anything.
    pub fn journal_is_empty(&self) -> bool {
        self.journal.touched.is_empty() && self.journal.changes.is_empty()
    }

    /// The next inode number a creation takes.
    pub fn next_ino(&self) -> Ino {
        self.next_ino
    }

    /// Sets the next inode number (a rebuilt file system continues where
    /// the failed one was).
    pub fn set_next_ino(&mut self, ino: Ino) {
        self.next_ino = ino;
    }

    /// Takes the contents of regular file `ino` out (leaving it empty): a
    /// rejuvenation moves them into the rebuilt tree, so their pages (and
    /// shared mappings of them) stay where they are.
    pub fn take_data(&mut self, ino: Ino) -> Option<FileData> {
        match &mut self.inodes.get_mut(&ino)?.node {
            Node::File(f) => Some(core::mem::take(f)),
            _ => None,
        }
    }

    /// The image of `ino`, `None` if it does not exist.
    pub fn export(&self, ino: Ino) -> Option<Image> {
        let mut im = None;
        self.export_into(ino, &mut im);
        im
    }

    /// [`Fs::export_into`], telling what `ino` is: gone, a regular file
    /// (with its contents, found by the same lookup) or something else.
    pub fn export_file_into(&self, ino: Ino, slot: &mut Option<Image>) -> Exported<'_> {
        let Some(i) = self.inodes.get(&ino) else {
            *slot = None;
            return Exported::Gone;
        };
        fill_image(i, slot);
        match &i.node {
            Node::File(f) => Exported::File(f),
            _ => Exported::Other,
        }
    }

    /// Makes `slot` the image of `ino` (`None` if it does not exist),
    /// refreshing an image already there in place: a directory's entry
    /// list keeps its buffers ([`Dir::image_into`]), so the log's update
    /// after a call that created or removed a file does not copy the
    /// directory afresh. Whether `ino` exists.
    pub fn export_into(&self, ino: Ino, slot: &mut Option<Image>) -> bool {
        let Some(i) = self.inodes.get(&ino) else {
            *slot = None;
            return false;
        };
        fill_image(i, slot);
        true
    }
}

/// Makes `slot` the image of `i` (see [`Fs::export_into`]).
fn fill_image(i: &Inode, slot: &mut Option<Image>) {
    // The same kind of node as the image already there: refreshed in
    // place (a directory's list, the attributes).
    let in_place = match (&i.node, slot.as_mut().map(|im| &mut im.node)) {
        (Node::Dir(d), Some(NodeImage::Dir(di))) => {
            d.image_into(di);
            true
        }
        (Node::File(_), Some(NodeImage::File)) => true,
        _ => false,
    };
    match slot.as_mut() {
        Some(im) if in_place => {
            (im.perm, im.nlink, im.refs, im.uid, im.gid) = (i.perm, i.nlink, i.refs, i.uid, i.gid);
            (im.atime, im.mtime, im.ctime, im.btime) = (i.atime, i.mtime, i.ctime, i.btime);
        }
        _ => {
            let node = match &i.node {
                Node::File(_) => NodeImage::File,
                Node::Dir(d) => {
                    let mut di = DirImage::default();
                    d.image_into(&mut di);
                    NodeImage::Dir(di)
                }
                Node::Symlink(b) => NodeImage::Symlink(b.clone()),
                Node::Fifo => NodeImage::Fifo,
                Node::CharDevice(r) => NodeImage::CharDevice(*r),
                Node::Socket => NodeImage::Socket,
            };
            *slot = Some(Image {
                perm: i.perm,
                nlink: i.nlink,
                refs: i.refs,
                uid: i.uid,
                gid: i.gid,
                atime: i.atime,
                mtime: i.mtime,
                ctime: i.ctime,
                btime: i.btime,
                node,
            });
        }
    }
}

impl Fs {
    /// Makes `ino` what `image` says, with `data` as the contents of a
    /// regular file (`EINVAL` if a file image comes without contents), or
    /// removes it (`None`). Not journaled.
    pub fn import(&mut self, ino: Ino, image: Option<(&Image, Option<FileData>)>) -> Result<(), Errno> {
        let Some((im, data)) = image else {
            self.inodes.remove(&ino);
            return Ok(());
        };
        let node = match &im.node {
            NodeImage::File => Node::File(data.ok_or(Errno::EINVAL)?),
            NodeImage::Dir(d) => Node::Dir(Dir::from_image(d)),
            NodeImage::Symlink(b) => Node::Symlink(b.clone()),
            NodeImage::Fifo => Node::Fifo,
            NodeImage::CharDevice(r) => Node::CharDevice(*r),
            NodeImage::Socket => Node::Socket,
        };
        let inode = Inode {
            perm: im.perm,
            nlink: im.nlink,
            refs: im.refs,
            uid: im.uid,
            gid: im.gid,
            atime: im.atime,
            mtime: im.mtime,
            ctime: im.ctime,
            btime: im.btime,
            node,
        };
        self.inodes.insert(ino, inode);
        Ok(())
    }
}
