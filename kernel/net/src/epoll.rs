//! `epoll_create`, `epoll_create1`, `epoll_ctl`, `epoll_wait`,
//! `epoll_pwait`, `epoll_pwait2` over every kind of descriptor (DESIGN
//! §3.1).
//!
//! An epoll instance is a set of watched *open file descriptions* (as on
//! Linux: the key is the description and the descriptor number it was
//! added with), each with its event mask and user data. There is no ready
//! list kept up to date by callbacks: `epoll_wait` asks each watched
//! description for its [`Readiness`] (the one interface of
//! `shoal_vfs::obj`), which is cheap in one address space and cannot miss
//! an event. Semantics follow Linux:
//!
//! - level-triggered: reported while ready;
//! - `EPOLLET`: reported when ready and its event generation has moved on
//!   since the last report — i.e. again only after new data (or space, or a
//!   hang-up) arrived, however much is still unread;
//! - `EPOLLONESHOT`: after one report the entry is disabled until
//!   `EPOLL_CTL_MOD` re-arms it;
//! - `EPOLLERR` and `EPOLLHUP` are always reported; `EPOLLRDHUP` when asked
//!   for; `EPOLLEXCLUSIVE` is accepted (it only matters for wake-ups of
//!   several waiters, and every waiter here re-checks anyway) with Linux's
//!   argument checks; `EPOLLWAKEUP` is accepted and ignored;
//! - closing the last descriptor of a description removes it from every
//!   set (vfs tells us, `ObjOps::ofd_released`); closing one of several
//!   `dup`s does not;
//! - adding an epoll instance to itself, or making a cycle, is `ELOOP`;
//!   regular files and directories are `EPERM`.
//!
//! The signal mask of `epoll_pwait` is not applied (as `ppoll` in vfs).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};
use shoal_plat::{umem, Errno, SysResult};
use shoal_vfs::obj::*;
use shoal_vfs::Vfs;

use crate::abi::*;
use crate::{Net, Obj};

/// Nesting depth of epoll instances Linux allows (`EP_MAX_NESTS`).
const MAX_NESTS: u32 = 4;
/// `sizeof(struct epoll_event)` on x86-64 (packed).
const EVENT_SIZE: usize = 12;

#[derive(Clone, Copy, Debug)]
struct Item {
    events: u32,
    data: u64,
    /// ET: the generation last reported.
    seen: Option<u64>,
    /// ONESHOT: false once reported, until re-armed.
    armed: bool,
    /// Whether the description can become ready by itself at a deadline
    /// (a timerfd or an epoll instance; what it is never changes), so
    /// [`deadline`] asks only these instead of every entry.
    timed: bool,
    /// The host-backend handle, for an `AF_INET`/`AF_INET6` socket.
    host: Option<u64>,
    /// A host socket found with nothing to report (nothing ready, or, ET,
    /// nothing new) at the last scan: skipped until the backend logs a
    /// gain for it ([`Backend::gains_since`](crate::Backend::gains_since)).
    quiet: bool,
}

/// An entry: its (description, descriptor) key and what it watches.
type Entry = ((usize, i32), Item);

/// One epoll instance.
#[derive(Debug, Default)]
pub(crate) struct Epoll {
    /// Watched (description, descriptor) pairs.
    items: BTreeMap<(usize, i32), Item>,
    /// The host backend's gain sequence number at the last scan: every
    /// `quiet` entry was quiet then and has logged no gain since.
    synced: u64,
}

impl Epoll {
    /// Drops every entry of description `ofd` (it was closed for good).
    pub fn forget(&mut self, ofd: usize) {
        self.items.retain(|&(o, _), _| o != ofd);
    }
}

fn epoll_mut(n: &mut Net, id: u64) -> Option<&mut Epoll> {
    match n.objs.get_mut(&id) {
        Some(Obj::Epoll(e)) => Some(e),
        _ => None,
    }
}

/// How deep nested epoll readiness checks have gone (an epoll inside an
/// epoll); guards against runaway recursion (cycles are refused anyway).
static DEPTH: AtomicU32 = AtomicU32::new(0);

/// Scans epoll `id`: the events to report, at most `max`. With `consume`,
/// records what was reported (ET generations, ONESHOT disarming).
///
/// A server's set holds mostly idle connections, so asking every entry
/// for its readiness on every wait costs time in proportion to all of
/// them. Host sockets found with nothing to report are marked `quiet` and
/// skipped by later scans until the host backend's gain log names them;
/// the log is asked first (it also brings the backend's readiness up to
/// date). An entry not looked at (the scan stopped at `max`, or it is
/// disarmed) loses its mark, so every mark is as recent as `synced`.
fn scan(id: u64, vfs: &Vfs, max: usize, consume: bool) -> Vec<(u32, u64)> {
    if DEPTH.fetch_add(1, Ordering::Relaxed) > MAX_NESTS {
        DEPTH.fetch_sub(1, Ordering::Relaxed);
        return Vec::new();
    }
    let (items, synced): (Vec<Entry>, u64) =
        crate::with(|n| epoll_mut(n, id).map(|e| (e.items.iter().map(|(k, v)| (*k, *v)).collect(), e.synced)).unwrap_or_default());
    let any_quiet = items.iter().any(|(_, it)| it.quiet);
    let any_host = items.iter().any(|(_, it)| it.host.is_some());
    let (now, gains) = if any_host { crate::with(|n| n.inet.as_ref().map(|b| b.gains_since(synced)).unwrap_or((0, None))) } else { (0, None) };
    let gained: Option<alloc::collections::BTreeSet<u64>> = if any_quiet { gains.map(|g| g.into_iter().collect()) } else { None };
    let mut out = Vec::new();
    // (key, generation reported, quiet now)
    let mut marks: Vec<((usize, i32), Option<u64>, bool)> = Vec::new();
    let mut stopped = items.len();
    for (i, (key, it)) in items.iter().enumerate() {
        if out.len() >= max {
            stopped = i;
            break;
        }
        if !it.armed {
            if it.quiet {
                marks.push((*key, None, false));
            }
            continue;
        }
        if it.quiet {
            if let (Some(h), Some(g)) = (it.host, &gained) {
                if !g.contains(&h) {
                    continue;
                }
            }
        }
        let Some(r) = vfs.ofd_ready(key.0) else { continue };
        let m = r.mask & (it.events | EPOLLERR | EPOLLHUP);
        let et_seen = it.events & EPOLLET != 0 && it.seen == Some(r.gen);
        if m == 0 || et_seen {
            let quiet = it.host.is_some();
            if quiet != it.quiet {
                marks.push((*key, None, quiet));
            }
            continue;
        }
        out.push((m, it.data));
        // Reported: an ET entry has nothing new once consumed.
        marks.push((*key, Some(r.gen), consume && it.host.is_some() && it.events & EPOLLET != 0));
    }
    DEPTH.fetch_sub(1, Ordering::Relaxed);
    crate::with(|n| {
        if let Some(e) = epoll_mut(n, id) {
            for (key, gen, quiet) in marks {
                if let Some(it) = e.items.get_mut(&key) {
                    if let (Some(gen), true) = (gen, consume) {
                        it.seen = Some(gen);
                        if it.events & EPOLLONESHOT != 0 {
                            it.armed = false;
                        }
                    }
                    it.quiet = quiet;
                }
            }
            for (key, _) in &items[stopped..] {
                if let Some(it) = e.items.get_mut(key) {
                    it.quiet = false;
                }
            }
            e.synced = now;
        }
    });
    out
}

/// Readiness of epoll `id` itself: readable when a wait would report
/// something. Its generation sums its entries' (so an epoll watched
/// edge-triggered reports again when one of them moves on).
pub(crate) fn ready(id: u64, vfs: &Vfs) -> Readiness {
    let any = !scan(id, vfs, 1, false).is_empty();
    let ofds: Vec<usize> = crate::with(|n| epoll_mut(n, id).map(|e| e.items.keys().map(|k| k.0).collect()).unwrap_or_default());
    let gen = ofds.into_iter().filter_map(|o| vfs.ofd_ready(o)).fold(0u64, |a, r| a.wrapping_add(r.gen));
    Readiness { mask: if any { EPOLLIN | EPOLLRDNORM } else { 0 }, gen }
}

/// The earliest deadline among the descriptions epoll `id` watches.
pub(crate) fn deadline(id: u64, vfs: &Vfs) -> Option<u64> {
    if DEPTH.fetch_add(1, Ordering::Relaxed) > MAX_NESTS {
        DEPTH.fetch_sub(1, Ordering::Relaxed);
        return None;
    }
    let ofds: Vec<usize> = crate::with(|n| epoll_mut(n, id).map(|e| e.items.iter().filter(|(_, it)| it.timed).map(|(k, _)| k.0).collect()).unwrap_or_default());
    let d = ofds.into_iter().filter_map(|o| vfs.ofd_deadline(o)).min();
    DEPTH.fetch_sub(1, Ordering::Relaxed);
    d
}

/// `epoll_create1(flags)`.
pub fn create1(flags: i32) -> SysResult {
    if flags & !EPOLL_CLOEXEC != 0 {
        return Err(Errno::EINVAL);
    }
    let id = crate::with(|n| n.add(Obj::Epoll(Epoll::default())));
    let fd = shoal_vfs::with(|v| v.install_obj(id, false, flags & EPOLL_CLOEXEC != 0))?;
    Ok(fd as u64)
}

/// The epoll instance behind `epfd` (`EINVAL` if it is not one).
fn epoll_of(epfd: i32) -> Result<u64, Errno> {
    let (id, _) = shoal_vfs::with(|v| v.obj_of(epfd)).map_err(|e| if e == Errno::ENOTSOCK { Errno::EINVAL } else { e })?;
    crate::with(|n| epoll_mut(n, id).map(|_| id).ok_or(Errno::EINVAL))
}

/// Whether epoll `from` reaches epoll `to` through watched epolls.
fn reaches(n: &mut Net, from: u64, to: u64, vfs_obj: &dyn Fn(usize) -> Option<u64>, depth: u32) -> Result<bool, Errno> {
    if from == to {
        return Ok(true);
    }
    if depth > MAX_NESTS {
        return Err(Errno::ELOOP);
    }
    let ofds: Vec<usize> = epoll_mut(n, from).map(|e| e.items.keys().map(|k| k.0).collect()).unwrap_or_default();
    for o in ofds {
        if let Some(id) = vfs_obj(o) {
            if epoll_mut(n, id).is_some() && reaches(n, id, to, vfs_obj, depth + 1)? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// `epoll_ctl(epfd, op, fd, event)`.
pub fn ctl(epfd: i32, op: i32, fd: i32, event: u64) -> SysResult {
    let ev = if op == EPOLL_CTL_DEL {
        None
    } else {
        let b: [u8; EVENT_SIZE] = umem::read(event)?;
        let events = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
        let mut d = [0u8; 8];
        d.copy_from_slice(&b[4..12]);
        Some((events, u64::from_ne_bytes(d)))
    };
    let ep = epoll_of(epfd)?;
    let (ofd, obj) = shoal_vfs::with(|v| v.watchable(fd))?;
    if fd == epfd {
        return Err(Errno::EINVAL);
    }
    // Descriptions that are epoll instances, for the cycle check (vfs is
    // asked before our state is borrowed).
    let target_is_epoll = obj.is_some_and(|id| crate::with(|n| epoll_mut(n, id).is_some()));
    let timed = obj.is_some_and(|id| crate::with(|n| matches!(n.objs.get(&id), Some(Obj::Timer(_) | Obj::Epoll(_)))));
    let host = obj.and_then(|id| {
        crate::with(|n| match n.objs.get(&id) {
            Some(Obj::Socket(s)) if s.fam == crate::Fam::Inet => Some(s.h),
            _ => None,
        })
    });
    if let Some((events, _)) = ev {
        if events & EPOLLEXCLUSIVE != 0 && (op == EPOLL_CTL_MOD || target_is_epoll || events & EPOLLONESHOT != 0) {
            return Err(Errno::EINVAL);
        }
    }
    if op == EPOLL_CTL_ADD && target_is_epoll {
        let map: BTreeMap<usize, u64> = shoal_vfs::with(|v| v.obj_ofds());
        let look = |o: usize| map.get(&o).copied();
        let target = obj.unwrap_or(0);
        if crate::with(|n| reaches(n, target, ep, &look, 0))? {
            return Err(Errno::ELOOP);
        }
    }
    let key = (ofd, fd);
    crate::with(|n| {
        let e = epoll_mut(n, ep).ok_or(Errno::EINVAL)?;
        match (op, ev) {
            (EPOLL_CTL_ADD, Some((events, data))) => {
                if e.items.contains_key(&key) {
                    return Err(Errno::EEXIST);
                }
                e.items.insert(key, Item { events, data, seen: None, armed: true, timed, host, quiet: false });
            }
            (EPOLL_CTL_MOD, Some((events, data))) => {
                let it = e.items.get_mut(&key).ok_or(Errno::ENOENT)?;
                if it.events & EPOLLEXCLUSIVE != 0 {
                    return Err(Errno::EINVAL);
                }
                *it = Item { events, data, seen: None, armed: true, timed, host, quiet: false };
            }
            (EPOLL_CTL_DEL, None) => {
                e.items.remove(&key).ok_or(Errno::ENOENT)?;
            }
            _ => return Err(Errno::EINVAL),
        }
        Ok(())
    })?;
    // A waiter on this instance re-checks.
    crate::wake();
    Ok(0)
}

/// The earlier of two optional deadlines.
fn earlier(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// `epoll_wait` with a deadline (`None`: forever; `Some(0)`-like past
/// deadlines: just look).
pub fn wait(epfd: i32, events: u64, max: i32, timeout_ns: Option<u64>) -> SysResult {
    if max <= 0 || max as usize > (i32::MAX as usize) / EVENT_SIZE {
        return Err(Errno::EINVAL);
    }
    let max = max as usize;
    umem::check_write(events, (max * EVENT_SIZE) as u64)?;
    let ep = epoll_of(epfd)?;
    let dl = timeout_ns.map(|t| shoal_time::monotonic_ns().saturating_add(t));
    loop {
        let got = shoal_vfs::with(|v| scan(ep, v, max, true));
        if !got.is_empty() {
            let out = umem::slice_mut(events, got.len() * EVENT_SIZE)?;
            for (k, (m, data)) in got.iter().enumerate() {
                out[k * EVENT_SIZE..k * EVENT_SIZE + 4].copy_from_slice(&m.to_ne_bytes());
                out[k * EVENT_SIZE + 4..(k + 1) * EVENT_SIZE].copy_from_slice(&data.to_ne_bytes());
            }
            return Ok(got.len() as u64);
        }
        if dl.is_some_and(|d| shoal_time::monotonic_ns() >= d) {
            return Ok(0);
        }
        let timers = shoal_vfs::with(|v| deadline(ep, v));
        shoal_vfs::wait::block("epoll_wait", earlier(dl, timers))?;
        // The instance may have been closed meanwhile (by another thread).
        epoll_of(epfd)?;
    }
}
