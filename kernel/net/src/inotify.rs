//! `inotify` (`inotify_init1`, `inotify_add_watch`, `inotify_rm_watch`):
//! what Node's `fs.watch` (libuv) asks for, answered for the changes the
//! instance itself makes to its file system.
//!
//! An inotify instance is an object of this component (its descriptor in
//! vfs, like an eventfd's) holding its watches (inode and mask) and its
//! queue of events. vfs reports each change through the object table
//! (`ObjOps::fs_event`, only while some watch exists: `shoal_vfs::obj::
//! set_watches`), and the events are laid out as Linux's `struct
//! inotify_event` when read.
//!
//! Reported, as Linux reports them: `IN_CREATE`, `IN_DELETE`,
//! `IN_MOVED_FROM`/`IN_MOVED_TO` (one cookie per rename), `IN_MODIFY`,
//! `IN_ATTRIB`, `IN_DELETE_SELF`, `IN_MOVE_SELF`, `IN_IGNORED` when a
//! watch goes (removed, its inode deleted, or `IN_ONESHOT`), `IN_ISDIR`,
//! and an event on a watched directory's child also to the directory,
//! with the child's name. An event equal to the last one queued and
//! unread is merged into it; past 16,384 queued events one
//! `IN_Q_OVERFLOW` ends the queue (Linux's `max_queued_events`).
//! Not reported: `IN_ACCESS`, `IN_OPEN`, `IN_CLOSE_*` (accepted in masks,
//! never queued); changes made on the host to a mounted directory (no
//! host notification reaches the instance); a child of a directory of a
//! host mount is not named to its parent's watch.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use shoal_plat::{Args, Errno, SysResult};
use shoal_vfs::obj::*;

use crate::Obj;

/// Event and flag bits (`<sys/inotify.h>`); vfs reports the events
/// (`shoal_vfs`'s module `notify`).
const IN_DELETE_SELF: u32 = 0x400;
const IN_ALL_EVENTS: u32 = 0xfff;
const IN_Q_OVERFLOW: u32 = 0x4000;
const IN_IGNORED: u32 = 0x8000;
const IN_ONLYDIR: u32 = 0x0100_0000;
const IN_DONT_FOLLOW: u32 = 0x0200_0000;
const IN_EXCL_UNLINK: u32 = 0x0400_0000;
const IN_MASK_CREATE: u32 = 0x1000_0000;
const IN_MASK_ADD: u32 = 0x2000_0000;
const IN_ISDIR: u32 = 0x4000_0000;
const IN_ONESHOT: u32 = 0x8000_0000;
/// `IN_NONBLOCK`, `IN_CLOEXEC`.
const IN_NONBLOCK: i32 = 0o4000;
const IN_CLOEXEC: i32 = 0o2000000;
/// `fs.inotify.max_queued_events`.
const MAX_EVENTS: usize = 16384;
/// `sizeof(struct inotify_event)`.
const EVENT: usize = 16;

/// One queued event.
#[derive(Clone, Debug, PartialEq)]
struct Event {
    wd: i32,
    mask: u32,
    cookie: u32,
    name: Vec<u8>,
}

impl Event {
    /// Its `struct inotify_event` length: the name with at least one NUL,
    /// padded to a multiple of the header's size, as Linux pads it.
    fn len(&self) -> usize {
        EVENT + self.name_len()
    }
    fn name_len(&self) -> usize {
        if self.name.is_empty() {
            0
        } else {
            (self.name.len() + 1).div_ceil(EVENT) * EVENT
        }
    }
}

/// A watch: its descriptor, inode and mask.
#[derive(Clone, Debug, PartialEq)]
struct Watch {
    wd: i32,
    ino: u64,
    mask: u32,
}

/// One inotify instance.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Inotify {
    watches: Vec<Watch>,
    next_wd: i32,
    q: VecDeque<Event>,
    queued: usize,
    gen: u64,
}

impl Inotify {
    pub(crate) fn ready(&self) -> Readiness {
        Readiness { mask: if self.q.is_empty() { 0 } else { EPOLLIN | EPOLLRDNORM }, gen: self.gen }
    }

    /// Bytes a read would return at most (`FIONREAD`).
    pub(crate) fn nread(&self) -> usize {
        self.queued
    }

    fn push(&mut self, ev: Event) {
        if self.q.back() == Some(&ev) {
            return;
        }
        if self.q.len() >= MAX_EVENTS {
            return;
        }
        let ev = if self.q.len() == MAX_EVENTS - 1 { Event { wd: -1, mask: IN_Q_OVERFLOW, cookie: 0, name: Vec::new() } } else { ev };
        self.queued += ev.len();
        self.q.push_back(ev);
        self.gen += 1;
    }

    /// Whole events into `buf`; `EINVAL` if the first does not fit.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> Result<usize, Errno> {
        let first = self.q.front().ok_or(Errno::EAGAIN)?;
        if first.len() > buf.len() {
            return Err(Errno::EINVAL);
        }
        let mut n = 0;
        while let Some(ev) = self.q.front() {
            let l = ev.len();
            if n + l > buf.len() {
                break;
            }
            let out = &mut buf[n..n + l];
            out[0..4].copy_from_slice(&ev.wd.to_ne_bytes());
            out[4..8].copy_from_slice(&ev.mask.to_ne_bytes());
            out[8..12].copy_from_slice(&ev.cookie.to_ne_bytes());
            out[12..16].copy_from_slice(&(ev.name_len() as u32).to_ne_bytes());
            out[16..].fill(0);
            out[16..16 + ev.name.len()].copy_from_slice(&ev.name);
            n += l;
            self.queued -= l;
            self.q.pop_front();
        }
        Ok(n)
    }

    /// Queues what change `mask` on inode `ino` (named `name` in it, for a
    /// directory's child) means to the watches on `ino`.
    pub(crate) fn event(&mut self, ino: u64, mask: u32, cookie: u32, name: &[u8]) {
        let mut gone = Vec::new();
        for i in 0..self.watches.len() {
            let w = &self.watches[i];
            if w.ino != ino || w.mask & mask & IN_ALL_EVENTS == 0 {
                continue;
            }
            let (wd, oneshot) = (w.wd, w.mask & IN_ONESHOT != 0);
            self.push(Event { wd, mask: mask & (IN_ALL_EVENTS | IN_ISDIR), cookie, name: name.to_vec() });
            if oneshot {
                gone.push(wd);
            }
        }
        // The inode is gone: so are its watches.
        if mask & IN_DELETE_SELF != 0 && name.is_empty() {
            gone.extend(self.watches.iter().filter(|w| w.ino == ino).map(|w| w.wd));
        }
        for wd in gone {
            self.drop_watch(wd);
        }
    }

    fn drop_watch(&mut self, wd: i32) -> bool {
        let Some(i) = self.watches.iter().position(|w| w.wd == wd) else { return false };
        self.watches.remove(i);
        self.push(Event { wd, mask: IN_IGNORED, cookie: 0, name: Vec::new() });
        true
    }

    /// The inodes watched.
    pub(crate) fn watched(&self, out: &mut Vec<u64>) {
        out.extend(self.watches.iter().map(|w| w.ino));
    }

    pub(crate) fn watches(&self) -> usize {
        self.watches.len()
    }
}

/// Tells vfs how many watches exist (it reports changes only then).
fn count_watches(n: &crate::Net) {
    let c = n.objs.iter().map(|(_, o)| if let Obj::Notify(i) = o { i.watches() } else { 0 }).sum();
    shoal_vfs::obj::set_watches(c);
}

/// `inotify_init1(flags)`.
pub fn inotify_init1(a: &Args) -> SysResult {
    let flags = a.int(0);
    if flags & !(IN_NONBLOCK | IN_CLOEXEC) != 0 {
        return Err(Errno::EINVAL);
    }
    let i = Inotify { watches: Vec::new(), next_wd: 1, q: VecDeque::new(), queued: 0, gen: 0 };
    let id = crate::with(|n| n.add(Obj::Notify(i)));
    let fd = shoal_vfs::with(|v| v.install_obj(id, flags & IN_NONBLOCK != 0, flags & IN_CLOEXEC != 0))?;
    Ok(fd as u64)
}

/// `inotify_init()`.
pub fn inotify_init(_: &Args) -> SysResult {
    inotify_init1(&Args([0; 6]))
}

/// The inotify object behind `fd`: `EBADF` if it is not open, `EINVAL`
/// if it is something else.
fn inotify_of(fd: i32) -> Result<u64, Errno> {
    let id = match shoal_vfs::obj_of_fd(fd) {
        Ok((id, _)) => id,
        Err(Errno::EBADF) => return Err(Errno::EBADF),
        Err(_) => return Err(Errno::EINVAL),
    };
    crate::with(|n| matches!(n.objs.get(&id), Some(Obj::Notify(_)))).then_some(id).ok_or(Errno::EINVAL)
}

/// `inotify_add_watch(fd, path, mask)`.
pub fn inotify_add_watch(a: &Args) -> SysResult {
    let (fd, path, mask) = (a.int(0), a.u(1), a.uint(2));
    if mask & IN_MASK_ADD != 0 && mask & IN_MASK_CREATE != 0 {
        return Err(Errno::EINVAL);
    }
    if mask & IN_ALL_EVENTS == 0 {
        return Err(Errno::EINVAL);
    }
    let id = inotify_of(fd)?;
    let ino = shoal_vfs::with_ref(|v| v.watch_target(path, mask & IN_DONT_FOLLOW == 0, mask & IN_ONLYDIR != 0))?;
    let keep = mask & (IN_ALL_EVENTS | IN_ONESHOT | IN_EXCL_UNLINK);
    let wd = crate::with(|n| {
        let Some(Obj::Notify(i)) = n.objs.get_mut(&id) else { return Err(Errno::EINVAL) };
        let wd = match i.watches.iter_mut().find(|w| w.ino == ino) {
            Some(_) if mask & IN_MASK_CREATE != 0 => return Err(Errno::EEXIST),
            Some(w) => {
                w.mask = if mask & IN_MASK_ADD != 0 { w.mask | keep } else { keep };
                w.wd
            }
            None => {
                let wd = i.next_wd;
                i.next_wd = i.next_wd.checked_add(1).ok_or(Errno::ENOSPC)?;
                i.watches.push(Watch { wd, ino, mask: keep });
                wd
            }
        };
        count_watches(n);
        Ok(wd)
    })?;
    Ok(wd as u64)
}

/// `inotify_rm_watch(fd, wd)`.
pub fn inotify_rm_watch(a: &Args) -> SysResult {
    let (fd, wd) = (a.int(0), a.int(1));
    let id = inotify_of(fd)?;
    crate::with(|n| {
        let Some(Obj::Notify(i)) = n.objs.get_mut(&id) else { return Err(Errno::EINVAL) };
        if !i.drop_watch(wd) {
            return Err(Errno::EINVAL);
        }
        count_watches(n);
        Ok(())
    })?;
    crate::wake();
    Ok(0)
}

/// A change vfs reports (`ObjOps::fs_event`): to every instance.
pub(crate) fn fs_event(ino: u64, mask: u32, cookie: u32, name: &[u8]) {
    let any = crate::with(|n| {
        let mut any = false;
        n.objs.update_each(|o| match o {
            Obj::Notify(i) => {
                let before = i.gen;
                i.event(ino, mask, cookie, name);
                any |= i.gen != before;
                i.gen != before
            }
            _ => false,
        });
        if any && mask & IN_DELETE_SELF != 0 {
            count_watches(n);
        }
        any
    });
    if any {
        crate::wake();
    }
}

/// The inodes some instance watches (`ObjOps::watched`).
pub(crate) fn watched() -> Vec<u64> {
    crate::with(|n| {
        let mut out = Vec::new();
        for (_, o) in n.objs.iter() {
            if let Obj::Notify(i) = o {
                i.watched(&mut out);
            }
        }
        out
    })
}
