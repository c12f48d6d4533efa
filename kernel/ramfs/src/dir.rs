//! Directory contents with stable positions.
//!
//! Every entry gets a *cookie* when it is added, from a counter that only
//! grows; the position of a directory stream (what `getdents64` reports in
//! `d_off` and `lseek` accepts) is a cookie. Listing from position `p`
//! yields the entries whose cookie is `>= p` in cookie order, so entries
//! added or removed between two `getdents64` calls never make the stream
//! skip or repeat an entry that was there all along. Positions 0 and 1 are
//! `.` and `..`.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::Ino;

/// Position of `.`.
pub const POS_DOT: u64 = 0;
/// Position of `..`.
pub const POS_DOTDOT: u64 = 1;
/// First cookie of a real entry.
pub const FIRST_COOKIE: u64 = 2;

/// The entries of one directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dir {
    /// The parent directory (the root is its own parent).
    pub parent: Ino,
    next_cookie: u64,
    by_cookie: BTreeMap<u64, (Box<[u8]>, Ino)>,
    by_name: BTreeMap<Box<[u8]>, u64>,
}

impl Dir {
    /// An empty directory inside `parent`.
    pub fn new(parent: Ino) -> Dir {
        Dir { parent, next_cookie: FIRST_COOKIE, by_cookie: BTreeMap::new(), by_name: BTreeMap::new() }
    }

    /// The inode named `name`.
    pub fn get(&self, name: &[u8]) -> Option<Ino> {
        self.by_name.get(name).map(|c| self.by_cookie[c].1)
    }

    /// Whether the directory has no entries (besides `.` and `..`).
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Adds `name` → `ino`; the caller checked that `name` is free.
    /// Returns the entry's position (cookie).
    pub fn insert(&mut self, name: &[u8], ino: Ino) -> u64 {
        let c = self.next_cookie;
        self.next_cookie += 1;
        self.by_cookie.insert(c, (Box::from(name), ino));
        self.by_name.insert(Box::from(name), c);
        c
    }

    /// Removes `name`; returns its inode.
    pub fn remove(&mut self, name: &[u8]) -> Option<Ino> {
        self.remove_entry(name).map(|(_, ino)| ino)
    }

    /// Removes `name`; returns its position (cookie) and inode.
    pub fn remove_entry(&mut self, name: &[u8]) -> Option<(u64, Ino)> {
        let c = self.by_name.remove(name)?;
        self.by_cookie.remove(&c).map(|(_, ino)| (c, ino))
    }

    /// Points the existing entry `name` at `ino` (keeps its position).
    pub fn replace(&mut self, name: &[u8], ino: Ino) -> Option<Ino> {
        let c = *self.by_name.get(name)?;
        let e = self.by_cookie.get_mut(&c)?;
        Some(core::mem::replace(&mut e.1, ino))
    }

    /// The name under which `ino` appears (first one, for getcwd).
    pub fn name_of(&self, ino: Ino) -> Option<&[u8]> {
        self.by_cookie.values().find(|(_, i)| *i == ino).map(|(n, _)| &n[..])
    }

    /// Entries at positions `>= pos`, with the position that follows each.
    pub fn entries_from(&self, pos: u64) -> impl Iterator<Item = (u64, &[u8], Ino)> + '_ {
        self.by_cookie.range(core::cmp::max(pos, FIRST_COOKIE)..).map(|(c, (n, i))| (c + 1, &n[..], *i))
    }

    /// Makes `im` this directory's image, reusing its buffers: an entry
    /// whose name has the same length keeps its allocation, so refreshing
    /// the image after a call that added or removed one entry allocates
    /// at most that entry's name.
    pub fn image_into(&self, im: &mut DirImage) {
        im.parent = self.parent;
        im.next_cookie = self.next_cookie;
        let mut n = 0;
        for (c, (name, ino)) in &self.by_cookie {
            match im.entries.get_mut(n) {
                Some(e) => {
                    e.0 = *c;
                    e.2 = *ino;
                    if e.1 != *name {
                        e.1.clone_from(name);
                    }
                }
                None => im.entries.push((*c, name.clone(), *ino)),
            }
            n += 1;
        }
        im.entries.truncate(n);
    }

    /// The directory `im` is the image of.
    pub fn from_image(im: &DirImage) -> Dir {
        let mut d = Dir { parent: im.parent, next_cookie: im.next_cookie, by_cookie: BTreeMap::new(), by_name: BTreeMap::new() };
        for (c, name, ino) in &im.entries {
            d.by_cookie.insert(*c, (name.clone(), *ino));
            d.by_name.insert(name.clone(), *c);
        }
        d
    }
}

/// A directory as recovery's log keeps it (`crate::heal`): its entries
/// in position order in one list, refreshed in place ([`Dir::image_into`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirImage {
    parent: Ino,
    next_cookie: u64,
    entries: Vec<(u64, Box<[u8]>, Ino)>,
}

impl DirImage {
    /// Adds the entry `name` → `ino` at position `cookie` (what
    /// [`Dir::insert`] did), taking `spare`'s buffer for the name when it
    /// has the same length (the name a removal left: SQLite removes and
    /// makes again the same journal file each transaction).
    pub fn add(&mut self, cookie: u64, name: &[u8], ino: Ino, spare: &mut Option<Box<[u8]>>) {
        let name = match spare.take() {
            Some(mut b) if b.len() == name.len() => {
                b.copy_from_slice(name);
                b
            }
            _ => Box::from(name),
        };
        // Positions only grow, so a new entry is almost always the last.
        let at = match self.entries.last() {
            Some(e) if e.0 >= cookie => self.entries.partition_point(|e| e.0 < cookie),
            _ => self.entries.len(),
        };
        self.entries.insert(at, (cookie, name, ino));
        self.next_cookie = self.next_cookie.max(cookie + 1);
    }

    /// Removes the entry at position `cookie` (what [`Dir::remove_entry`]
    /// did), its name's buffer kept in `spare`; `false` if there is none.
    pub fn remove(&mut self, cookie: u64, spare: &mut Option<Box<[u8]>>) -> bool {
        match self.entries.binary_search_by_key(&cookie, |e| e.0) {
            Ok(i) => {
                *spare = Some(self.entries.remove(i).1);
                true
            }
            Err(_) => false,
        }
    }

    /// Bytes it holds on the heap (for the log's memory report).
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * core::mem::size_of::<(u64, Box<[u8]>, Ino)>() + self.entries.iter().map(|e| e.1.len()).sum::<usize>()
    }
}
