//! Advisory file locks with Linux's semantics: POSIX record locks
//! (`F_SETLK`, `F_SETLKW`, `F_GETLK`), open-file-description locks
//! (`F_OFD_*`) and `flock`.
//!
//! **Owners.** A POSIX record lock belongs to the process — there is one,
//! so POSIX locks never conflict with each other (threads share them, as
//! on Linux) — and an OFD lock to the open file description it was taken
//! through; both kinds live in one list per file and conflict with each
//! other when their owners differ. `flock` locks are a separate list (on
//! Linux they never interact with record locks) owned by descriptions.
//!
//! **Release.** POSIX locks of a file go when the process closes *any*
//! descriptor of that file (`close`, or `dup2` over it); OFD and `flock`
//! locks when the last descriptor of their description closes. Every
//! release wakes the waiters of the file-system wait queue
//! ([`crate::wait`]), who retry.
//!
//! **Waiting.** The operations here never block: a conflict is `EAGAIN`
//! (`EWOULDBLOCK` for `flock`), and `F_SETLKW`, `F_OFD_SETLKW` and `flock`
//! without `LOCK_NB` wait in [`crate::sys`] with the state released, so
//! only the calling thread blocks. Linux's `EDEADLK` detection covers only
//! POSIX owners waiting on POSIX owners; with one process that cycle
//! cannot form, so no wait here ever reports it (a single thread waiting
//! on a lock nobody else can release gets `wait`'s `EDEADLK`).

use crate::abi::*;
use crate::{Target, Vfs};
use alloc::vec::Vec;
use shoal_plat::{umem, Args, Errno, SysResult};

/// Who holds a record lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// The process (POSIX record lock).
    Process,
    /// An open file description (OFD lock).
    Ofd(usize),
}

/// One record lock: `[start, end)`; `end == u64::MAX` reaches "to the end
/// of the file, however it grows".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub owner: Owner,
    pub write: bool,
    pub start: u64,
    pub end: u64,
}

impl Range {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start < end && start < self.end
    }
}

/// The locks of the process's files, by file ([`key`]).
#[derive(Clone, Default, Debug, PartialEq, Eq)]
pub(crate) struct Locks {
    /// Record locks (POSIX and OFD), sorted by start.
    records: alloc::collections::BTreeMap<u64, Vec<Range>>,
    /// `flock` locks: (description, exclusive).
    flocks: alloc::collections::BTreeMap<u64, Vec<(usize, bool)>>,
}

/// The file a description's locks are kept under: its inode, or for the
/// targets without one (standard streams, objects) a key of their own.
pub(crate) fn key(t: Target) -> u64 {
    match t {
        Target::Node(i) | Target::Fifo(i) | Target::Dev(i, _) => i,
        Target::Stdin => 1 << 62,
        Target::Stdout => (1 << 62) | 1,
        Target::Stderr => (1 << 62) | 2,
        Target::Obj(id) => (1 << 63) | id,
    }
}

/// [`Locks`] as two flat lists, in key order: how recovery's log keeps
/// them (module `heal`). Refilling it after a call that changed a lock
/// reuses its buffers, where a clone of `Locks` would allocate its maps
/// and lists again on every `fcntl(F_SETLK)`.
#[derive(Clone, Default, Debug, PartialEq, Eq)]
pub(crate) struct Flat {
    records: Vec<(u64, Range)>,
    flocks: Vec<(u64, (usize, bool))>,
}

impl Locks {
    fn flat_records(&self) -> impl Iterator<Item = (u64, Range)> + '_ {
        self.records.iter().flat_map(|(k, v)| v.iter().map(move |r| (*k, *r)))
    }

    fn flat_flocks(&self) -> impl Iterator<Item = (u64, (usize, bool))> + '_ {
        self.flocks.iter().flat_map(|(k, v)| v.iter().map(move |f| (*k, *f)))
    }

    /// Makes `f` hold these locks in one pass, overwriting only the
    /// entries that differ; whether any did (the log's update after a
    /// call that may have changed a lock: comparing first and then
    /// copying walked the map twice).
    ///
    /// The record locks (SQLite's, changed by nearly every `F_SETLK`)
    /// are walked list by list and copied field by field: through the
    /// flattening iterator each entry was built on the stack and copied
    /// with overlapping partial loads (a store-forwarding stall per
    /// changed entry).
    pub(crate) fn sync_into(&self, f: &mut Flat) -> bool {
        let mut changed = false;
        let mut n = 0;
        for (&k, list) in &self.records {
            for r in list {
                match f.records.get_mut(n) {
                    Some((dk, d)) => {
                        if *dk != k || d != r {
                            *dk = k;
                            (d.owner, d.write, d.start, d.end) = (r.owner, r.write, r.start, r.end);
                            changed = true;
                        }
                    }
                    None => {
                        f.records.push((k, *r));
                        changed = true;
                    }
                }
                n += 1;
            }
        }
        if f.records.len() != n {
            f.records.truncate(n);
            changed = true;
        }
        changed | sync_list(&mut f.flocks, self.flat_flocks())
    }

    /// Makes `f` hold these locks (no allocation once its lists have
    /// grown to the number of locks).
    pub(crate) fn flatten_into(&self, f: &mut Flat) {
        f.records.clear();
        f.records.extend(self.flat_records());
        f.flocks.clear();
        f.flocks.extend(self.flat_flocks());
    }

    /// The locks `f` holds.
    pub(crate) fn from_flat(f: &Flat) -> Locks {
        let mut l = Locks::default();
        for (k, r) in &f.records {
            l.records.entry(*k).or_default().push(*r);
        }
        for (k, x) in &f.flocks {
            l.flocks.entry(*k).or_default().push(*x);
        }
        l
    }
}

/// Makes `dst` the items of `src`, writing only those that differ;
/// whether any did.
fn sync_list<T: PartialEq>(dst: &mut Vec<T>, src: impl Iterator<Item = T>) -> bool {
    let mut changed = false;
    let mut n = 0;
    for x in src {
        match dst.get_mut(n) {
            Some(d) if *d == x => {}
            Some(d) => {
                *d = x;
                changed = true;
            }
            None => {
                dst.push(x);
                changed = true;
            }
        }
        n += 1;
    }
    if dst.len() != n {
        dst.truncate(n);
        changed = true;
    }
    changed
}

impl Locks {
    /// The first lock of another owner than `owner` that conflicts with
    /// a lock of kind `write` on `[start, end)` of file `k`.
    pub fn conflict(&self, k: u64, owner: Owner, write: bool, start: u64, end: u64) -> Option<Range> {
        let list = self.records.get(&k)?;
        list.iter().find(|r| r.owner != owner && (write || r.write) && r.overlaps(start, end)).copied()
    }

    /// Sets (or with `kind == None` removes) `owner`'s lock on `[start,
    /// end)` of `k` after the caller checked for conflicts: the owner's
    /// ranges there are cut away, the new one inserted and merged with
    /// adjacent or overlapping ranges of the same owner and kind, as
    /// Linux does.
    ///
    /// In place: the ranges that stay are appended behind the old ones,
    /// which are then drained, so no list is allocated per call (SQLite
    /// takes and drops a lock some ten times per transaction).
    pub fn set(&mut self, k: u64, owner: Owner, kind: Option<bool>, start: u64, end: u64) {
        if kind.is_none() && !self.records.contains_key(&k) {
            // Unlocking a file without locks: nothing to cut (and no
            // list to make and drop again).
            return;
        }
        let list = self.records.entry(k).or_default();
        let n = list.len();
        let (mut s, mut e) = (start, end);
        for i in 0..n {
            let r = list[i];
            if r.owner != owner {
                list.push(r);
                continue;
            }
            // Same owner, same kind, touching or overlapping: merge.
            if let Some(w) = kind {
                if r.write == w && r.start <= e && s <= r.end {
                    s = s.min(r.start);
                    e = e.max(r.end);
                    continue;
                }
            }
            if !r.overlaps(start, end) {
                list.push(r);
                continue;
            }
            if r.start < start {
                list.push(Range { end: start, ..r });
            }
            if r.end > end {
                list.push(Range { start: end, ..r });
            }
        }
        list.drain(..n);
        if let Some(w) = kind {
            list.push(Range { owner, write: w, start: s, end: e });
        }
        list.sort_by_key(|r| (r.start, r.end));
        if list.is_empty() {
            self.records.remove(&k);
        }
    }

    /// Whether file `k` has any lock (record or `flock`): a close looks
    /// before it releases, so closing a file without locks leaves the
    /// table unborrowed (and the log with nothing to compare).
    pub fn any_on(&self, k: u64) -> bool {
        self.records.contains_key(&k) || self.flocks.contains_key(&k)
    }

    /// Drops every record lock of `owner` on `k`; whether there were any.
    pub fn release(&mut self, k: u64, owner: Owner) -> bool {
        let Some(list) = self.records.get_mut(&k) else { return false };
        let n = list.len();
        list.retain(|r| r.owner != owner);
        let gone = list.len() != n;
        if list.is_empty() {
            self.records.remove(&k);
        }
        gone
    }

    /// `flock(LOCK_SH/LOCK_EX)` by description `ofd` on `k`. As on Linux,
    /// converting a held lock first drops it (so a failed conversion
    /// leaves none). Returns whether a held lock was dropped, and the
    /// outcome (`EAGAIN` on a conflict).
    pub fn flock(&mut self, k: u64, ofd: usize, excl: bool) -> (bool, Result<(), Errno>) {
        let list = self.flocks.entry(k).or_default();
        let mut dropped = false;
        if let Some(p) = list.iter().position(|&(o, _)| o == ofd) {
            if list[p].1 == excl {
                return (false, Ok(()));
            }
            list.remove(p);
            dropped = true;
        }
        let r = if list.iter().any(|&(_, x)| x || excl) {
            Err(Errno::EAGAIN)
        } else {
            list.push((ofd, excl));
            Ok(())
        };
        if list.is_empty() {
            self.flocks.remove(&k);
        }
        (dropped, r)
    }

    /// `flock(LOCK_UN)`, or the last close of `ofd`: whether a lock went.
    pub fn funlock(&mut self, k: u64, ofd: usize) -> bool {
        let Some(list) = self.flocks.get_mut(&k) else { return false };
        let n = list.len();
        list.retain(|&(o, _)| o != ofd);
        let gone = list.len() != n;
        if list.is_empty() {
            self.flocks.remove(&k);
        }
        gone
    }
}

/// `l_pid` reported for a conflicting OFD lock (Linux: -1).
const OFD_PID: i32 = -1;
/// `l_pid` reported for a conflicting POSIX lock: the process (pid 1).
const PID: i32 = 1;

impl Vfs {
    /// The range `fl` names on description `i`: `[start, end)`.
    fn lock_range(&self, i: usize, fl: &Flock) -> Result<(u64, u64), Errno> {
        let o = self.ofd(i);
        let base: i64 = match fl.l_whence as u32 {
            SEEK_SET => 0,
            SEEK_CUR => i64::try_from(o.offset).map_err(|_| Errno::EOVERFLOW)?,
            SEEK_END => match o.target {
                Target::Node(ino) => i64::try_from(self.fs.size(ino)?).map_err(|_| Errno::EOVERFLOW)?,
                _ => 0,
            },
            _ => return Err(Errno::EINVAL),
        };
        let start = base.checked_add(fl.l_start).ok_or(Errno::EOVERFLOW)?;
        let (s, e) = if fl.l_len > 0 {
            // Linux: the last byte, start + len - 1, must fit in off_t.
            let last = start.checked_add(fl.l_len - 1).ok_or(Errno::EOVERFLOW)?;
            (start, last as u64 + 1)
        } else if fl.l_len < 0 {
            (start.checked_add(fl.l_len).ok_or(Errno::EINVAL)?, start as u64)
        } else {
            (start, u64::MAX)
        };
        if s < 0 {
            return Err(Errno::EINVAL);
        }
        Ok((s as u64, e))
    }

    /// `F_GETLK`, `F_SETLK`, `F_SETLKW` and their `F_OFD_` forms on
    /// description `i`. Never blocks: a conflict is `EAGAIN` (the entry
    /// point waits for the `W` forms).
    pub(crate) fn record_lock(&mut self, i: usize, cmd: i32, addr: u64) -> SysResult {
        let o = self.ofd(i);
        if o.is_path() {
            return Err(Errno::EBADF);
        }
        let (readable, writable, target) = (o.readable(), o.writable(), o.target);
        let mut fl: Flock = umem::read(addr)?;
        let ofd_cmd = matches!(cmd, F_OFD_GETLK | F_OFD_SETLK | F_OFD_SETLKW);
        if ofd_cmd && fl.l_pid != 0 {
            return Err(Errno::EINVAL);
        }
        let owner = if ofd_cmd { Owner::Ofd(i) } else { Owner::Process };
        let getlk = matches!(cmd, F_GETLK | F_OFD_GETLK);
        let kind = match fl.l_type {
            F_RDLCK => Some(false),
            F_WRLCK => Some(true),
            F_UNLCK if !getlk => None,
            _ => return Err(Errno::EINVAL),
        };
        let (start, end) = self.lock_range(i, &fl)?;
        let k = key(target);
        if getlk {
            match self.locks.conflict(k, owner, kind == Some(true), start, end) {
                None => fl.l_type = F_UNLCK,
                Some(r) => {
                    fl.l_type = if r.write { F_WRLCK } else { F_RDLCK };
                    fl.l_whence = SEEK_SET as i16;
                    fl.l_start = r.start as i64;
                    fl.l_len = if r.end == u64::MAX { 0 } else { (r.end - r.start) as i64 };
                    fl.l_pid = match r.owner {
                        Owner::Process => PID,
                        Owner::Ofd(_) => OFD_PID,
                    };
                }
            }
            umem::write(addr, fl)?;
            return Ok(0);
        }
        match kind {
            Some(false) if !readable => return Err(Errno::EBADF),
            Some(true) if !writable => return Err(Errno::EBADF),
            Some(w) if self.locks.conflict(k, owner, w, start, end).is_some() => return Err(Errno::EAGAIN),
            _ => {}
        }
        self.locks.set(k, owner, kind, start, end);
        // Unlocking or downgrading may let a waiter in.
        if kind != Some(true) {
            crate::wait::wake(k);
        }
        Ok(0)
    }

    /// `flock(fd, op)` without waiting: `EAGAIN` (= `EWOULDBLOCK`) on a
    /// conflict.
    pub(crate) fn flock(&mut self, a: &Args) -> SysResult {
        const LOCK_SH: u32 = 1;
        const LOCK_EX: u32 = 2;
        const LOCK_NB: u32 = 4;
        const LOCK_UN: u32 = 8;
        let i = self.ofd_of(a.int(0))?;
        let o = self.ofd(i);
        if o.is_path() {
            return Err(Errno::EBADF);
        }
        let k = key(o.target);
        let (dropped, r) = match a.uint(1) & !LOCK_NB {
            LOCK_SH => self.locks.flock(k, i, false),
            LOCK_EX => self.locks.flock(k, i, true),
            LOCK_UN => (self.locks.funlock(k, i), Ok(())),
            _ => return Err(Errno::EINVAL),
        };
        // A lock that went (unlocked, or dropped by a conversion) may let
        // a waiter in.
        if dropped {
            crate::wait::wake(k);
        }
        r.map(|_| 0)
    }

    /// A descriptor of `target` is being closed: the process's POSIX locks
    /// on that file go (Linux drops them on any close).
    pub(crate) fn locks_fd_closed(&mut self, target: Target) {
        if self.locks.any_on(key(target)) && self.locks.release(key(target), Owner::Process) {
            crate::wait::wake(key(target));
        }
    }

    /// Description `i` of `target` was closed for good: its OFD and
    /// `flock` locks go.
    pub(crate) fn locks_ofd_released(&mut self, i: usize, target: Target) {
        let k = key(target);
        if !self.locks.any_on(k) {
            return;
        }
        let a = self.locks.release(k, Owner::Ofd(i));
        let b = self.locks.funlock(k, i);
        if a || b {
            crate::wait::wake(k);
        }
    }
}
