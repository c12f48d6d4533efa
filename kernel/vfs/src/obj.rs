//! Descriptors of objects another component owns (docs/design.md "Networking", "Components and recovery"):
//! sockets, epoll instances, eventfds and timerfds live in the `net`
//! component, but their descriptors live here, in the one descriptor table,
//! so that `dup`, `close`, `fcntl`, `fstat`, `poll` and `select` treat them
//! like every other descriptor.
//!
//! An open file description of such an object has the target
//! `Target::Obj(id)`; `id` means something only to the owner, which
//! registers one [`ObjOps`] table at boot ([`register`]). The table is the
//! interface between the two components (where a recovery gate can sit):
//! vfs asks it for readiness, plain reads and writes (`sendfile` and the
//! like), what `fstat` shows, and tells it when a description goes away.
//!
//! **Readiness** is one interface for every kind of descriptor:
//! [`Vfs::ofd_ready`] answers a [`Readiness`] (epoll bits and an event
//! generation) for files, pipes, the standard streams and objects alike.
//! The generation counts state changes that can make a descriptor newly
//! ready (data arrived, space freed, an end closed); edge-triggered epoll
//! reports a descriptor again only when it has moved on.
//!
//! **Re-entrancy.** vfs calls the table while it holds its own state, and
//! hands it `&Vfs` where the owner needs to ask about other descriptors
//! (an epoll set): the owner must therefore never call [`crate::with`]
//! from inside a table method, and must not hold its own state while it
//! calls into vfs.

use crate::{Target, Vfs};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};
use shoal_plat::{Errno, Global};

/// `EPOLLIN` / `POLLIN`.
pub const EPOLLIN: u32 = 0x001;
/// `EPOLLPRI`.
pub const EPOLLPRI: u32 = 0x002;
/// `EPOLLOUT`.
pub const EPOLLOUT: u32 = 0x004;
/// `EPOLLERR`.
pub const EPOLLERR: u32 = 0x008;
/// `EPOLLHUP`.
pub const EPOLLHUP: u32 = 0x010;
/// `EPOLLRDNORM`.
pub const EPOLLRDNORM: u32 = 0x040;
/// `EPOLLWRNORM`.
pub const EPOLLWRNORM: u32 = 0x100;
/// `EPOLLRDHUP`.
pub const EPOLLRDHUP: u32 = 0x2000;

/// What a descriptor is ready for now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// `EPOLL*` bits (the same values as `POLL*`).
    pub mask: u32,
    /// Changes whenever the descriptor may have become newly ready.
    pub gen: u64,
}

/// What `fstat` shows for an object.
#[derive(Clone, Copy, Debug)]
pub struct ObjMeta {
    /// `st_mode` (`S_IFSOCK | 0777` for a socket, `0600` for an
    /// anonymous inode such as an eventfd).
    pub mode: u32,
    /// `st_ino`.
    pub ino: u64,
    /// `st_dev`.
    pub dev: u64,
}

/// The operations vfs needs from the component that owns objects. None of
/// them blocks: "would block" is `EAGAIN`, and the caller waits.
pub trait ObjOps: Sync {
    /// Readiness of object `id`; `vfs` answers for other descriptors.
    fn ready(&self, id: u64, vfs: &Vfs) -> Readiness;
    /// The earliest monotonic time at which `id` may become ready by
    /// itself (a timer), so that a wait on it sleeps until then.
    fn deadline(&self, id: u64, vfs: &Vfs) -> Option<u64>;
    /// `read(2)` of one buffer (`EAGAIN`: nothing now).
    fn read(&self, id: u64, buf: &mut [u8]) -> Result<usize, Errno>;
    /// `write(2)` of one buffer (`EAGAIN`: no room now).
    fn write(&self, id: u64, data: &[u8]) -> Result<usize, Errno>;
    /// Bytes a read would return now (`FIONREAD`), `ENOTTY` if that means
    /// nothing for the object.
    fn nread(&self, id: u64) -> Result<usize, Errno>;
    /// What `fstat` shows.
    fn meta(&self, id: u64) -> ObjMeta;
    /// The last description of `id` was closed: the object goes.
    /// Returns the descriptions it held in flight (see
    /// [`Vfs::hold_fds`]), whose references vfs then drops.
    fn release(&self, id: u64) -> Vec<usize>;
    /// Description `ofd` (of any kind) was closed for good: forget it
    /// wherever it is watched (epoll sets).
    fn ofd_released(&self, ofd: usize);
    /// The file system changed (inotify's `IN_*` bits in `mask`): on
    /// inode `ino` itself (`name` empty), or on the child `name` of
    /// directory `ino`. Called only while [`set_watches`] says some
    /// watch exists.
    fn fs_event(&self, ino: u64, mask: u32, cookie: u32, name: &[u8]) {
        let _ = (ino, mask, cookie, name);
    }
    /// The inodes watched (to name a changed file to its directory).
    fn watched(&self) -> Vec<u64> {
        Vec::new()
    }
}

/// inotify watches that exist (the owner of objects keeps it up to
/// date): with none, a change costs one load and reports nothing.
static WATCHES: AtomicUsize = AtomicUsize::new(0);

/// Sets the number of inotify watches.
pub fn set_watches(n: usize) {
    WATCHES.store(n, Ordering::Relaxed);
}

/// Whether any inotify watch exists.
pub(crate) fn watching() -> bool {
    WATCHES.load(Ordering::Relaxed) != 0
}

static OPS: Global<Option<&'static dyn ObjOps>> = Global::new(None);
/// Objects' descriptions open, so that closing a plain file does not
/// consult the table when there is nothing to forget.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Sets the count of objects' descriptions (module `heal`, after a
/// reboot rebuilt the descriptions).
pub(crate) fn set_live(n: usize) {
    LIVE.store(n, Ordering::Relaxed);
}

/// Registers the owner of objects (once, at boot).
pub fn register(ops: &'static dyn ObjOps) {
    OPS.with(|o| *o = Some(ops));
}

pub(crate) fn ops() -> Option<&'static dyn ObjOps> {
    OPS.with(|o| *o)
}

/// The status flags an object's description starts with: read-write,
/// plus `O_NONBLOCK` if asked for.
const fn obj_flags(nonblock: bool) -> u32 {
    crate::abi::O_RDWR | if nonblock { crate::abi::O_NONBLOCK } else { 0 }
}

impl Vfs {
    /// Gives object `id` a new description and the lowest free descriptor.
    /// On failure (`EMFILE`) the description is closed again, which
    /// releases the object.
    pub fn install_obj(&mut self, id: u64, nonblock: bool, cloexec: bool) -> Result<i32, Errno> {
        let o = self.new_ofd(Target::Obj(id), obj_flags(nonblock));
        LIVE.fetch_add(1, Ordering::Relaxed);
        self.install(0, o, cloexec).map(|fd| fd as i32)
    }

    /// Takes a reference to the description behind each of `fds` for a
    /// message in flight (`SCM_RIGHTS`): the description stays open, as
    /// a descriptor would keep it, until [`Vfs::install_held`] gives it
    /// to a receiver or [`Vfs::drop_held`] lets it go. `EBADF` (and no
    /// reference taken) if one of them is not open; `O_PATH` descriptors
    /// may be passed, as on Linux.
    pub fn hold_fds(&mut self, fds: &[i32]) -> Result<Vec<usize>, Errno> {
        let held = fds.iter().map(|&fd| self.ofd_of(fd)).collect::<Result<Vec<usize>, Errno>>()?;
        for &i in &held {
            self.ofd_mut(i).refs += 1;
        }
        Ok(held)
    }

    /// Installs description `ofd` at the lowest free descriptor. With
    /// `take`, the reference a message in flight held ([`Vfs::hold_fds`])
    /// becomes the descriptor's; without, the message keeps its own (a
    /// `MSG_PEEK`). `EMFILE` leaves the held reference alone.
    pub fn install_held(&mut self, ofd: usize, cloexec: bool, take: bool) -> Result<i32, Errno> {
        if self.ofds.get(ofd).and_then(|o| o.as_ref()).is_none() {
            return Err(Errno::EBADF);
        }
        let fd = self.install(0, ofd, cloexec)?;
        if take {
            // Never the last reference: the descriptor has one.
            self.put_ofd(ofd);
        }
        Ok(fd as i32)
    }

    /// Drops the references of messages in flight that nobody will
    /// receive (a message dropped with its socket, descriptors that did
    /// not fit in the receiver's control buffer).
    pub fn drop_held(&mut self, held: &[usize]) {
        for &i in held {
            self.put_ofd(i);
        }
    }

    /// The object behind `fd` and whether its description is non-blocking:
    /// `EBADF` if `fd` is not open, `ENOTSOCK` if it is not an object.
    pub fn obj_of(&self, fd: i32) -> Result<(u64, bool), Errno> {
        let o = self.ofd(self.ofd_of(fd)?);
        match o.target {
            Target::Obj(id) if !o.is_path() => Ok((id, o.flags & crate::abi::O_NONBLOCK != 0)),
            _ => Err(Errno::ENOTSOCK),
        }
    }

    /// The open file description behind `fd`, for watching it (epoll):
    /// `EBADF` if not open, `EPERM` for regular files and directories
    /// (always ready, so Linux refuses to watch them). Also the object, if
    /// it is one.
    pub fn watchable(&self, fd: i32) -> Result<(usize, Option<u64>), Errno> {
        let i = self.ofd_of(fd)?;
        let o = self.ofd(i);
        if o.is_path() {
            return Err(Errno::EBADF);
        }
        match o.target {
            Target::Node(_) => Err(Errno::EPERM),
            Target::Obj(id) => Ok((i, Some(id))),
            _ => Ok((i, None)),
        }
    }

    /// The readiness-log source (`crate::readylog`) of description `ofd`
    /// when it is a pipe or FIFO; `None` for anything else.
    pub fn ofd_source(&self, ofd: usize) -> Option<u64> {
        match self.ofds.get(ofd)?.as_ref()?.target {
            Target::Fifo(ino) => Some(crate::readylog::pipe_src(ino)),
            _ => None,
        }
    }

    /// Every open description of an object, with the object.
    pub fn obj_ofds(&self) -> alloc::collections::BTreeMap<usize, u64> {
        let objs = self.ofds.iter().enumerate();
        objs.filter_map(|(i, o)| match o.as_ref()?.target {
            Target::Obj(id) => Some((i, id)),
            _ => None,
        })
        .collect()
    }

    /// The working directory's absolute path (to make a relative socket
    /// path absolute).
    pub fn cwd_path(&self) -> Result<alloc::vec::Vec<u8>, Errno> {
        self.path_of(self.cwd)
    }

    /// Readiness of open file description `ofd` (`None` if it is closed).
    pub fn ofd_ready(&self, ofd: usize) -> Option<Readiness> {
        let o = self.ofds.get(ofd)?.as_ref()?;
        Some(self.target_ready(o.target, o.flags, o.offset))
    }

    /// When description `ofd` may become ready by itself (see
    /// [`ObjOps::deadline`]).
    pub fn ofd_deadline(&self, ofd: usize) -> Option<u64> {
        match self.ofds.get(ofd)?.as_ref()?.target {
            Target::Obj(id) => ops()?.deadline(id, self),
            _ => None,
        }
    }

    /// The readiness of `target` opened with access `flags` (`offset`: the
    /// description's, for a FIFO the writers' open count when it was
    /// opened, see [`Vfs::new_ofd`]).
    pub(crate) fn target_ready(&self, target: Target, flags: u32, offset: u64) -> Readiness {
        const IN: u32 = EPOLLIN | EPOLLRDNORM;
        const OUT: u32 = EPOLLOUT | EPOLLWRNORM;
        let mask = match target {
            // Readable when the tender has input (or end of input) for it.
            Target::Stdin => {
                if shoal_plat::console::stdin_readable() {
                    IN
                } else {
                    0
                }
            }
            Target::Stdout | Target::Stderr => OUT,
            Target::Node(_) | Target::Dev(..) => IN | OUT,
            Target::Fifo(ino) => {
                let Some(p) = self.pipe(ino) else { return Readiness::default() };
                let mut m = 0;
                let acc = flags & crate::abi::O_ACCMODE;
                if acc != crate::abi::O_WRONLY {
                    if !p.buf.is_empty() {
                        m |= IN;
                    }
                    // Hung up once a writer has come and gone since this
                    // end was opened (Linux's `pipe_poll`): a reader that
                    // has seen no writer yet is not.
                    if p.writers == 0 && p.w_opened != offset {
                        m |= EPOLLHUP;
                    }
                }
                if acc != crate::abi::O_RDONLY {
                    if p.space() >= crate::pipe::PIPE_BUF {
                        m |= OUT;
                    }
                    if p.readers == 0 {
                        m |= EPOLLERR;
                    }
                }
                return Readiness { mask: m, gen: p.gen };
            }
            Target::Obj(id) => return ops().map(|t| t.ready(id, self)).unwrap_or_default(),
        };
        Readiness { mask, gen: 0 }
    }

    /// Tells the owner of objects that description `i` (of `target`) is
    /// gone. Called by `put_ofd` with the description already removed.
    /// Returns the descriptions the object held in flight (a socket's
    /// unread `SCM_RIGHTS` messages), which go with it: `put_ofd` drops
    /// them in a loop, not by recursion, as a chain of sockets each in
    /// flight inside the next can be as long as a program makes it.
    pub(crate) fn obj_released(&mut self, i: usize, target: Target) -> Vec<usize> {
        if LIVE.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let Some(t) = ops() else { return Vec::new() };
        let mut held = Vec::new();
        if let Target::Obj(id) = target {
            LIVE.fetch_sub(1, Ordering::Relaxed);
            held = t.release(id);
        }
        t.ofd_released(i);
        held
    }
}
