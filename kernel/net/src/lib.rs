//! Kernel component `net` (docs/design.md "Networking", "Components and recovery"): sockets, and the readiness
//! descriptors — `epoll`, `eventfd`, `timerfd` — that work over every kind
//! of descriptor.
//!
//! **Where things live.** The objects (sockets, epoll instances, eventfds,
//! timerfds) are this component's state ([`Net`]); their descriptors are
//! in vfs's one descriptor table, as `Target::Obj(id)` descriptions, so
//! `dup`, `close`, `fcntl(F_SETFL, O_NONBLOCK)`, `fstat`, `poll` and
//! `select` treat them like files and pipes. The two components meet in
//! `shoal_vfs::obj`: this crate registers an [`ObjOps`] table at boot
//! ([`init`]) through which vfs asks for readiness, plain reads and writes,
//! and reports closed descriptions.
//!
//! **Sockets** (module `socket`) are served by a [`Backend`] per family:
//! `AF_UNIX` by module `unix`, entirely in the guest; `AF_NETLINK` route
//! sockets by module `netlink` (the instance's interfaces), in the guest
//! too. `AF_INET` and
//! `AF_INET6` sockets start in module `lo`, the instance's own loopback
//! (also entirely in the guest), and move to host-socket passthrough
//! (module `host`: each guest socket a host socket owned by the tender,
//! each operation a hypercall, installed with [`set_inet_backend`] when the
//! instance has network options) at the first `bind`, `listen`, `connect`
//! or addressed send that those options give to the host.
//!
//! Also here, as objects with descriptors in vfs: inotify instances
//! (module `inotify`, told of changes by vfs through the object table)
//! and pidfds (module `pidfd`).
//!
//! **Readiness** is one interface ([`shoal_vfs::obj::Readiness`]: epoll
//! bits plus an event generation) that files, pipes, the standard streams
//! and every object here answer; `poll`/`select` (vfs) and `epoll_wait`
//! (module `epoll`) are built on it.
//!
//! **Blocking.** A call that cannot go on waits in `shoal_vfs::wait`, the
//! scheduler's kernel wait queue: only the calling thread blocks; every
//! state change here wakes the waiters, which re-check. A wait that a
//! timer can end (a timerfd read, `epoll_wait` or `poll` over timerfds, a
//! timeout) carries the nearest deadline, so when every thread waits the
//! instance sleeps in the tender's poll hypercall until then and uses no
//! CPU. A host-socket backend will additionally have to make that idle
//! sleep wait for its host sockets (the poll hypercall's device set) and
//! wake the queue when one becomes ready.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod abi;
pub mod backend;
mod epoll;
mod eventfd;
pub mod heal;
pub mod host;
pub mod inotify;
pub mod lo;
pub mod netlink;
pub mod pidfd;
mod signalfd;
mod socket;
pub mod sys;
mod timerfd;
mod tracked;
pub mod unix;

use alloc::boxed::Box;
use shoal_plat::Errno;
use shoal_vfs::obj::{ObjMeta, ObjOps, Readiness};
use shoal_vfs::Vfs;

pub use backend::Backend;

/// A socket: which backend serves it and the backend's handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sock {
    pub fam: Fam,
    pub h: u64,
}

/// The families with a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fam {
    Unix,
    /// Internet sockets inside the instance (module `lo`).
    Lo,
    /// Internet sockets over host sockets (module `host`).
    Inet,
    /// `AF_NETLINK` route sockets (module `netlink`).
    Netlink,
}

/// An object behind a descriptor.
#[derive(Clone, PartialEq)]
pub(crate) enum Obj {
    Socket(Sock),
    Epoll(epoll::Epoll),
    Event(eventfd::EventFd),
    Timer(timerfd::TimerFd),
    Signal(signalfd::SignalFd),
    /// A process descriptor (module `pidfd`).
    Pid(pidfd::Pidfd),
    /// An inotify instance (module `inotify`).
    Notify(inotify::Inotify),
}

/// The state of the component.
pub(crate) struct Net {
    /// The objects by id (changes noted for the recovery log): a slab, so
    /// a socket's every read and write finds its object by an index.
    pub objs: tracked::TrackedSlab<Obj>,
    next: u64,
    pub unix: unix::Unix,
    /// The Internet sockets that stay inside the instance (loopback).
    pub lo: lo::Lo,
    /// The `AF_NETLINK` sockets.
    pub nl: netlink::Netlink,
    /// The `AF_INET`/`AF_INET6` backend, once a tender provides one.
    pub inet: Option<Box<dyn Backend>>,
}

impl Net {
    fn new() -> Net {
        Net { objs: Default::default(), next: 0, unix: unix::Unix::default(), lo: lo::Lo::default(), nl: netlink::Netlink::default(), inet: None }
    }

    /// Adds an object; returns its id (unique: the number of objects
    /// made so far and a slot of the table, see `tracked::TrackedSlab`).
    pub fn add(&mut self, o: Obj) -> u64 {
        self.next += 1;
        self.objs.add(self.next, o)
    }

    /// The backend of family `f` (`EAFNOSUPPORT` if there is none yet).
    pub fn backend(&mut self, f: Fam) -> Result<&mut (dyn Backend + 'static), Errno> {
        match f {
            Fam::Unix => Ok(&mut self.unix),
            Fam::Lo => Ok(&mut self.lo),
            Fam::Netlink => Ok(&mut self.nl),
            Fam::Inet => self.inet.as_deref_mut().ok_or(Errno::EAFNOSUPPORT),
        }
    }
}

// A `ZeroGlobal`: `None` of `Option<Net>` is a non-zero niche, which put
// net's `.data` on a page of its own in every instance.
static NET: shoal_plat::ZeroGlobal<Option<Net>> = shoal_plat::ZeroGlobal::new();

/// Runs `f` on the component's state. Never call vfs (`shoal_vfs::with`)
/// inside: vfs calls back into this component (see `shoal_vfs::obj`).
/// Marks the state as possibly changed, for the recovery log (`heal`).
pub(crate) fn with<R>(f: impl FnOnce(&mut Net) -> R) -> R {
    heal::touched();
    NET.with(|n| f(n.get_or_insert_with(Net::new)))
}

/// Tells every waiting thread that something here changed (they re-check).
pub(crate) fn wake() {
    shoal_vfs::wait::wake(0);
}

/// The wait queue of the blocking calls on host socket `h` (backend
/// handle; `socket::wait_for`): woken when `h` gains readiness (module
/// `host`), not at every change in the instance.
pub(crate) fn sock_key(h: u64) -> u64 {
    shoal_sched::KERNEL_KEY | 1 << 62 | (h & ((1 << 62) - 1))
}

/// Installs the `AF_INET`/`AF_INET6` backend (host-socket passthrough).
pub fn set_inet_backend(b: Box<dyn Backend>) {
    with(|n| n.inet = Some(b));
}

/// Registers the component with vfs. Called once at boot, after vfs.
pub fn init() {
    shoal_vfs::obj::register(&OPS);
    // A signal made pending may make a signalfd readable: waiters re-check.
    shoal_process::signal::set_on_signal(wake);
}

/// The table vfs calls (see `shoal_vfs::obj`).
struct Ops;
static OPS: Ops = Ops;

/// `st_dev` of sockets (sockfs, 0:8) and of anonymous inodes (0:15).
const SOCK_DEV: u64 = 8;
const ANON_DEV: u64 = 15;

impl ObjOps for Ops {
    fn ready(&self, id: u64, vfs: &Vfs) -> Readiness {
        enum K {
            Epoll,
            Other(Readiness),
        }
        let k = with(|n| {
            let now = || shoal_time::monotonic_ns();
            let r = match n.objs.get_mut(&id) {
                Some(Obj::Socket(s)) => {
                    let s = *s;
                    n.backend(s.fam).map(|b| b.ready(s.h)).unwrap_or_default()
                }
                Some(Obj::Event(e)) => e.ready(),
                Some(Obj::Timer(t)) => t.ready(now()),
                Some(Obj::Signal(s)) => s.ready(),
                Some(Obj::Notify(i)) => i.ready(),
                Some(Obj::Epoll(_)) => return K::Epoll,
                // The process it names is the caller's: it has not exited.
                Some(Obj::Pid(_)) | None => Readiness::default(),
            };
            K::Other(r)
        });
        match k {
            K::Other(r) => r,
            K::Epoll => epoll::ready(id, vfs),
        }
    }

    fn deadline(&self, id: u64, vfs: &Vfs) -> Option<u64> {
        let is_epoll = with(|n| match n.objs.get(&id) {
            Some(Obj::Timer(t)) => Err(t.deadline()),
            Some(Obj::Epoll(_)) => Ok(()),
            _ => Err(None),
        });
        match is_epoll {
            Ok(()) => epoll::deadline(id, vfs),
            Err(d) => d,
        }
    }

    fn read(&self, id: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        with(|n| match n.objs.get_mut(&id) {
            Some(Obj::Socket(s)) => {
                let s = *s;
                let r = n.backend(s.fam)?.recv(s.h, &mut [buf], 0)?;
                // Descriptions passed with the bytes have nowhere to go:
                // let go of later, outside vfs (see `unix::Unix::dropped`).
                n.unix.dropped.extend(r.fds);
                Ok(r.len)
            }
            Some(Obj::Event(e)) => e.read(buf),
            Some(Obj::Timer(t)) => t.read(buf, shoal_time::monotonic_ns()),
            Some(Obj::Signal(s)) => s.read(buf),
            Some(Obj::Notify(i)) => i.read(buf),
            _ => Err(Errno::EINVAL),
        })
    }

    fn write(&self, id: u64, data: &[u8]) -> Result<usize, Errno> {
        with(|n| match n.objs.get_mut(&id) {
            Some(Obj::Socket(s)) => {
                let s = *s;
                n.backend(s.fam)?.send(s.h, &[data], None, 0)
            }
            Some(Obj::Event(e)) => e.write(data),
            _ => Err(Errno::EINVAL),
        })
    }

    fn nread(&self, id: u64) -> Result<usize, Errno> {
        with(|n| match n.objs.get(&id) {
            Some(Obj::Socket(s)) => {
                let s = *s;
                Ok(n.backend(s.fam)?.nread(s.h))
            }
            Some(Obj::Notify(i)) => Ok(i.nread()),
            _ => Err(Errno::ENOTTY),
        })
    }

    fn meta(&self, id: u64) -> ObjMeta {
        with(|n| match n.objs.get(&id) {
            Some(Obj::Socket(_)) => ObjMeta { mode: 0o140777, ino: id, dev: SOCK_DEV },
            // pidfs's mode.
            Some(Obj::Pid(_)) => ObjMeta { mode: 0o700, ino: id, dev: ANON_DEV },
            _ => ObjMeta { mode: 0o600, ino: id, dev: ANON_DEV },
        })
    }

    fn release(&self, id: u64) -> alloc::vec::Vec<usize> {
        let held = with(|n| {
            match n.objs.remove(&id) {
                Some(Obj::Socket(s)) => {
                    if let Ok(b) = n.backend(s.fam) {
                        b.close(s.h);
                    }
                }
                Some(Obj::Notify(i)) if i.watches() > 0 => {
                    let left: usize = n.objs.iter().map(|(_, o)| if let Obj::Notify(i) = o { i.watches() } else { 0 }).sum();
                    shoal_vfs::obj::set_watches(left);
                }
                _ => {}
            }
            n.unix.take_dropped()
        });
        wake();
        held
    }

    fn fs_event(&self, ino: u64, mask: u32, cookie: u32, name: &[u8]) {
        inotify::fs_event(ino, mask, cookie, name);
    }

    fn watched(&self) -> alloc::vec::Vec<u64> {
        inotify::watched()
    }

    fn ofd_released(&self, ofd: usize) {
        with(|n| {
            n.objs.update_each(|o| match o {
                Obj::Epoll(e) => e.forget(ofd),
                _ => false,
            });
        });
    }
}

#[cfg(test)]
mod tests;
