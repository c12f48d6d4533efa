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
    pub fn insert(&mut self, name: &[u8], ino: Ino) {
        let c = self.next_cookie;
        self.next_cookie += 1;
        self.by_cookie.insert(c, (Box::from(name), ino));
        self.by_name.insert(Box::from(name), c);
    }

    /// Removes `name`; returns its inode.
    pub fn remove(&mut self, name: &[u8]) -> Option<Ino> {
        let c = self.by_name.remove(name)?;
        self.by_cookie.remove(&c).map(|(_, ino)| ino)
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
}
