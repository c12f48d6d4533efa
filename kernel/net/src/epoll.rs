//! `epoll_create`, `epoll_create1`, `epoll_ctl`, `epoll_wait`,
//! `epoll_pwait`, `epoll_pwait2` over every kind of descriptor (DESIGN
//! §3.1).
//!
//! An epoll instance is a set of watched *open file descriptions* (as on
//! Linux: the key is the description and the descriptor number it was
//! added with), each with its event mask and user data, and a **ready
//! list**: the entries that may have something to report, in the order
//! they became so. `epoll_wait` looks only at the ready list, never at
//! every entry, so a server's many idle connections cost it nothing:
//!
//! - an entry goes on the list when it is added or modified, and when its
//!   source notes a change that can make it newly ready: host sockets in
//!   the host backend's gain log ([`Backend::gains_since`](crate::Backend::gains_since),
//!   fed by the tender's watch set), pipes and FIFOs, `AF_UNIX` sockets and
//!   eventfds in vfs's readiness log (`shoal_vfs::readylog`). Each wait
//!   first reads both logs from where this instance last read them and
//!   queues the entries of every source named (an index maps sources to
//!   entries); a log that forgot (it is a bounded ring) queues every entry
//!   of its kind once;
//! - entries whose readiness can change with no such note (timerfds and
//!   nested epolls, which become ready at a deadline; the standard
//!   streams and devices) are kept apart and asked at every wait; there
//!   are few of them;
//! - a wait that may block, when no other thread could run, first looks
//!   only at what is already known (no zero-timeout `NetPoll` to the
//!   tender for the host sockets, see `crate::host::without_refresh`); if
//!   that has nothing to report it blocks at once — the idle wait asks the
//!   tender with the wait's deadline — otherwise it asks the tender and
//!   reports as usual, so a socket that stays ready cannot hide news;
//! - a queued entry is asked for its [`Readiness`] (the one interface of
//!   `shoal_vfs::obj`) when the wait reaches it: with nothing to report it
//!   leaves the list; level-triggered entries that were reported go to the
//!   back of the list (they are asked again next time, as Linux re-queues
//!   them, and leave once drained), edge-triggered and one-shot ones leave
//!   it until their source notes a new change.
//!
//! Semantics follow Linux:
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

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};
use shoal_plat::{umem, Errno, Global, SysResult, ZeroGlobal};
use shoal_vfs::obj::*;
use shoal_vfs::Vfs;

use crate::abi::*;
use crate::{Net, Obj};

/// Nesting depth of epoll instances Linux allows (`EP_MAX_NESTS`).
const MAX_NESTS: u32 = 4;
/// `sizeof(struct epoll_event)` on x86-64 (packed).
const EVENT_SIZE: usize = 12;

/// Where an entry learns that it may have become ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Src {
    /// A host socket: the host backend's gain log names its handle.
    Host(u64),
    /// A pipe, FIFO, `AF_UNIX` socket or eventfd: vfs's readiness log
    /// names this key.
    Local(u64),
    /// Nothing notes its changes (timerfds and epolls, which become ready
    /// at a deadline; the standard streams; devices): asked at every wait.
    Always,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Item {
    events: u32,
    data: u64,
    /// ET: the generation last reported.
    seen: Option<u64>,
    /// ONESHOT: false once reported, until re-armed.
    armed: bool,
    /// Whether the description can become ready by itself at a deadline
    /// (a timerfd or an epoll instance; what it is never changes), so
    /// [`deadline`] asks only these.
    timed: bool,
    /// Where its changes are noted.
    src: Src,
    /// On the ready list.
    queued: bool,
}

type Key = (usize, i32);

/// One epoll instance.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Epoll {
    /// Watched (description, descriptor) pairs.
    items: BTreeMap<Key, Item>,
    /// The ready list (entries with `queued`), oldest first.
    queue: VecDeque<Key>,
    /// Entries by source, for the logs' notes (`Src::Always` ones too).
    by_src: BTreeSet<(Src, Key)>,
    /// Number of host-socket entries (whether to read the host log).
    hosts: usize,
    /// Number of always-asked entries (`Src::Always`): with none, a scan
    /// skips looking them up in `by_src` (most servers watch only
    /// sockets).
    always: usize,
    /// The host backend's gain sequence number read up to.
    synced_host: u64,
    /// vfs's readiness-log sequence number read up to.
    synced_local: u64,
}

impl Epoll {
    /// Bytes its tables take on the heap (an estimate, for the recovery
    /// log's size).
    pub fn heap_bytes(&self) -> usize {
        self.items.len() * (core::mem::size_of::<(Key, Item)>() + 16)
            + self.queue.capacity() * core::mem::size_of::<Key>()
            + self.by_src.len() * (core::mem::size_of::<(Src, Key)>() + 16)
    }

    /// Drops every entry of description `ofd` (it was closed for good);
    /// whether there was one.
    pub fn forget(&mut self, ofd: usize) -> bool {
        let keys: Vec<Key> = self.items.range((ofd, i32::MIN)..=(ofd, i32::MAX)).map(|(k, _)| *k).collect();
        for k in &keys {
            self.remove(k);
        }
        !keys.is_empty()
    }

    fn insert(&mut self, key: Key, it: Item) {
        match it.src {
            Src::Host(_) => self.hosts += 1,
            Src::Always => self.always += 1,
            Src::Local(_) => {}
        }
        self.by_src.insert((it.src, key));
        self.items.insert(key, Item { queued: false, ..it });
        self.enqueue(key);
    }

    fn remove(&mut self, key: &Key) -> Option<Item> {
        let it = self.items.remove(key)?;
        match it.src {
            Src::Host(_) => self.hosts -= 1,
            Src::Always => self.always -= 1,
            Src::Local(_) => {}
        }
        self.by_src.remove(&(it.src, *key));
        if it.queued {
            self.queue.retain(|k| k != key);
        }
        Some(it)
    }

    /// Puts `key` on the ready list (if armed and not there yet; entries
    /// asked at every wait never go there).
    fn enqueue(&mut self, key: Key) {
        if let Some(it) = self.items.get_mut(&key) {
            if !it.queued && it.armed && it.src != Src::Always {
                it.queued = true;
                self.queue.push_back(key);
            }
        }
    }

    /// Queues every entry of source `src` ([`Epoll::enqueue`] for each; done
    /// in place, as this runs for every readiness gain a wait reads).
    fn enqueue_src(&mut self, src: Src) {
        if src == Src::Always {
            return;
        }
        for (_, key) in self.by_src.range((src, (0, i32::MIN))..=(src, (usize::MAX, i32::MAX))) {
            if let Some(it) = self.items.get_mut(key) {
                if !it.queued && it.armed {
                    it.queued = true;
                    self.queue.push_back(*key);
                }
            }
        }
    }

    /// Queues every entry whose source matches `pred` (a log forgot).
    fn enqueue_all(&mut self, pred: impl Fn(Src) -> bool) {
        let keys: Vec<Key> = self.items.iter().filter(|(_, it)| pred(it.src)).map(|(k, _)| *k).collect();
        for k in keys {
            self.enqueue(k);
        }
    }
}

fn epoll_mut(n: &mut Net, id: u64) -> Option<&mut Epoll> {
    match n.objs.get_mut(&id) {
        Some(Obj::Epoll(e)) => Some(e),
        _ => None,
    }
}

/// [`epoll_mut`] for reading (not noted as a change for the recovery log).
fn epoll_ref(n: &Net, id: u64) -> Option<&Epoll> {
    match n.objs.get(&id) {
        Some(Obj::Epoll(e)) => Some(e),
        _ => None,
    }
}

/// How deep nested epoll readiness checks have gone (an epoll inside an
/// epoll); guards against runaway recursion (cycles are refused anyway).
static DEPTH: AtomicU32 = AtomicU32::new(0);

/// The lists a scan builds, kept from one wait to the next so that a
/// wait allocates nothing once they have grown to the server's size. A
/// scan takes them and gives them back; a nested scan meanwhile (an epoll
/// inside an epoll) finds them taken and starts with empty ones. Not
/// state: nothing in them outlives a call, so the recovery log ignores
/// them (a reboot restores them empty).
struct Scratch {
    /// Sockets the host log named.
    hosts: Vec<u64>,
    /// Sources vfs's readiness log named.
    locals: Vec<u64>,
    /// The entries to look at, in order.
    cands: Vec<(Key, Item)>,
    /// What became of each: (key, generation reported, stays on the list).
    looked: Vec<(Key, Option<u64>, bool)>,
    /// Entries asked but not consumed (they keep their places).
    front: Vec<Key>,
    /// Reported level-triggered entries (to the back of the list).
    back: Vec<Key>,
}

impl Scratch {
    const fn new() -> Scratch {
        Scratch { hosts: Vec::new(), locals: Vec::new(), cands: Vec::new(), looked: Vec::new(), front: Vec::new(), back: Vec::new() }
    }

    /// Takes the kept lists (empty ones if a scan has them). Boxed, so
    /// taking and giving back move a pointer, not the lists.
    fn take() -> Box<Scratch> {
        SCRATCH.try_with(|s| s.take()).flatten().unwrap_or_else(|| Box::new(Scratch::new()))
    }

    /// Gives the lists back, emptied (their memory kept).
    fn give(mut self: Box<Self>) {
        self.hosts.clear();
        self.locals.clear();
        self.cands.clear();
        self.looked.clear();
        self.front.clear();
        self.back.clear();
        SCRATCH.try_with(|s| *s = Some(self));
    }
}

static SCRATCH: Global<Option<Box<Scratch>>> = Global::new(None);

/// The events a wait found, kept from one wait to the next (as
/// [`Scratch`]; a wait in another thread meanwhile starts with an empty
/// list). A `ZeroGlobal`: an empty `Vec` is not all zero, and this cell
/// alone put net's `.data` on a page of its own in every instance.
static EVENTS: ZeroGlobal<Vec<(u32, u64)>> = ZeroGlobal::new();

/// Reads the host backend's gain log and vfs's readiness log from where
/// epoll `id` last read them and queues the entries they name.
fn catch_up(id: u64, sc: &mut Scratch) {
    let (hosts, synced_host, synced_local) = crate::with(|n| epoll_ref(n, id).map(|e| (e.hosts, e.synced_host, e.synced_local)).unwrap_or_default());
    sc.hosts.clear();
    sc.locals.clear();
    let host = if hosts > 0 { crate::with(|n| n.inet.as_ref().map(|b| b.gains_since(synced_host, &mut sc.hosts))) } else { None };
    let (local_now, local_all) = shoal_vfs::readylog::since_into(synced_local, &mut sc.locals);
    if host.is_none_or(|(now, all)| all && now == synced_host) && local_all && sc.locals.is_empty() && local_now == synced_local {
        // Nothing new in either log: the instance is as it was.
        return;
    }
    crate::with(|n| {
        let Some(e) = epoll_mut(n, id) else { return };
        if let Some((now, all)) = host {
            if all {
                sc.hosts.iter().for_each(|&h| e.enqueue_src(Src::Host(h)));
            } else {
                e.enqueue_all(|s| matches!(s, Src::Host(_)));
            }
            e.synced_host = now;
        }
        if local_all {
            sc.locals.iter().for_each(|&s| e.enqueue_src(Src::Local(s)));
        } else {
            e.enqueue_all(|s| matches!(s, Src::Local(_)));
        }
        e.synced_local = local_now;
    });
}

/// Scans epoll `id`'s ready list (and its always-asked entries): appends
/// to `out` the events to report, at most `max`. With `consume`, records
/// what was reported (ET generations, ONESHOT disarming) and moves
/// reported level-triggered entries to the back of the list; entries
/// found with nothing to report leave the list either way.
fn scan(id: u64, vfs: &Vfs, max: usize, consume: bool, out: &mut Vec<(u32, u64)>) {
    if DEPTH.fetch_add(1, Ordering::Relaxed) > MAX_NESTS {
        DEPTH.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    let mut sc = Scratch::take();
    catch_up(id, &mut sc);
    // The list as it is now, then the always-asked entries.
    crate::with(|n| {
        if let Some(e) = epoll_ref(n, id) {
            sc.cands.extend(e.queue.iter().filter_map(|&k| e.items.get(&k).map(|it| (k, *it))));
            if e.always > 0 {
                let always = e.by_src.range((Src::Always, (0, i32::MIN))..).map(|(_, k)| *k);
                sc.cands.extend(always.filter_map(|k| e.items.get(&k).map(|it| (k, *it))));
            }
        }
    });
    let first = out.len();
    for &(key, it) in &sc.cands {
        if out.len() - first >= max {
            break;
        }
        if !it.armed {
            sc.looked.push((key, None, false));
            continue;
        }
        // A host socket's entry asks the backend directly (what vfs would
        // reach through the description and the object table; the entry
        // leaves the set when its description closes).
        let r = match it.src {
            Src::Host(h) => crate::with(|n| n.backend(crate::Fam::Inet).ok().map(|b| b.ready(h))),
            _ => vfs.ofd_ready(key.0),
        };
        let Some(r) = r else {
            sc.looked.push((key, None, false));
            continue;
        };
        let m = r.mask & (it.events | EPOLLERR | EPOLLHUP);
        let et_seen = it.events & EPOLLET != 0 && it.seen == Some(r.gen);
        if m == 0 || et_seen {
            sc.looked.push((key, None, false));
            continue;
        }
        out.push((m, it.data));
        // Reported: level-triggered entries stay (at the back when
        // consumed); edge-triggered and one-shot ones leave once consumed.
        let stays = !consume || it.events & (EPOLLET | EPOLLONESHOT) == 0;
        sc.looked.push((key, Some(r.gen), stays));
    }
    DEPTH.fetch_sub(1, Ordering::Relaxed);
    let Scratch { looked, front, back, .. } = &mut *sc;
    // A scan that looked at nothing changes nothing (no borrow marked as
    // a change for the recovery log).
    if !looked.is_empty() {
        crate::with(|n| {
            let Some(e) = epoll_mut(n, id) else { return };
            // The entries looked at from the list are the list's first
            // ones, in order (nothing else changes this instance's list
            // meanwhile: a nested epoll's scan changes only its own).
            for &(key, gen, stays) in looked.iter() {
                let Some(it) = e.items.get_mut(&key) else { continue };
                if let (Some(gen), true) = (gen, consume) {
                    it.seen = Some(gen);
                    if it.events & EPOLLONESHOT != 0 {
                        it.armed = false;
                    }
                }
                if it.src == Src::Always || !it.queued {
                    continue;
                }
                if e.queue.front() == Some(&key) {
                    e.queue.pop_front();
                } else {
                    e.queue.retain(|k| *k != key);
                }
                it.queued = false;
                match (stays, consume) {
                    (true, false) => front.push(key),
                    (true, true) => back.push(key),
                    (false, _) => {}
                }
            }
            // Asked but not consumed: they keep their places.
            for &key in front.iter().rev() {
                if let Some(it) = e.items.get_mut(&key) {
                    it.queued = true;
                    e.queue.push_front(key);
                }
            }
            for &key in back.iter() {
                e.enqueue(key);
            }
        });
    }
    sc.give();
}

/// The length of epoll `epfd`'s ready list (tests: that idle entries stay
/// off it).
#[cfg(test)]
pub(crate) fn queued(epfd: i32) -> usize {
    let id = epoll_of(epfd).unwrap();
    crate::with(|n| epoll_mut(n, id).map_or(0, |e| e.queue.len()))
}

/// Readiness of epoll `id` itself: readable when a wait would report
/// something. Its generation sums its entries' (so an epoll watched
/// edge-triggered reports again when one of them moves on).
pub(crate) fn ready(id: u64, vfs: &Vfs) -> Readiness {
    let mut one = Vec::new();
    scan(id, vfs, 1, false, &mut one);
    let any = !one.is_empty();
    let ofds: Vec<usize> = crate::with(|n| epoll_ref(n, id).map(|e| e.items.keys().map(|k| k.0).collect()).unwrap_or_default());
    let gen = ofds.into_iter().filter_map(|o| vfs.ofd_ready(o)).fold(0u64, |a, r| a.wrapping_add(r.gen));
    Readiness { mask: if any { EPOLLIN | EPOLLRDNORM } else { 0 }, gen }
}

/// The earliest deadline among the descriptions epoll `id` watches.
pub(crate) fn deadline(id: u64, vfs: &Vfs) -> Option<u64> {
    if DEPTH.fetch_add(1, Ordering::Relaxed) > MAX_NESTS {
        DEPTH.fetch_sub(1, Ordering::Relaxed);
        return None;
    }
    let ofds: Vec<usize> = crate::with(|n| {
        epoll_ref(n, id)
            .filter(|e| e.always > 0)
            .map(|e| e.by_src.range((Src::Always, (0, i32::MIN))..).filter(|(_, k)| e.items.get(k).is_some_and(|it| it.timed)).map(|(_, k)| k.0).collect())
            .unwrap_or_default()
    });
    let d = ofds.into_iter().filter_map(|o| vfs.ofd_deadline(o)).min();
    DEPTH.fetch_sub(1, Ordering::Relaxed);
    d
}

/// `epoll_create1(flags)`.
pub fn create1(flags: i32) -> SysResult {
    if flags & !EPOLL_CLOEXEC != 0 {
        return Err(Errno::EINVAL);
    }
    let ep = Epoll { synced_local: shoal_vfs::readylog::now(), ..Epoll::default() };
    let id = crate::with(|n| n.add(Obj::Epoll(ep)));
    let fd = shoal_vfs::with(|v| v.install_obj(id, false, flags & EPOLL_CLOEXEC != 0))?;
    Ok(fd as u64)
}

/// The epoll instance behind `epfd` (`EINVAL` if it is not one).
fn epoll_of(epfd: i32) -> Result<u64, Errno> {
    let (id, _) = shoal_vfs::obj_of_fd(epfd).map_err(|e| if e == Errno::ENOTSOCK { Errno::EINVAL } else { e })?;
    crate::with(|n| epoll_ref(n, id).map(|_| id).ok_or(Errno::EINVAL))
}

/// Whether epoll `from` reaches epoll `to` through watched epolls.
fn reaches(n: &mut Net, from: u64, to: u64, vfs_obj: &dyn Fn(usize) -> Option<u64>, depth: u32) -> Result<bool, Errno> {
    if from == to {
        return Ok(true);
    }
    if depth > MAX_NESTS {
        return Err(Errno::ELOOP);
    }
    let ofds: Vec<usize> = epoll_ref(n, from).map(|e| e.items.keys().map(|k| k.0).collect()).unwrap_or_default();
    for o in ofds {
        if let Some(id) = vfs_obj(o) {
            if epoll_ref(n, id).is_some() && reaches(n, id, to, vfs_obj, depth + 1)? {
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
    let (ofd, obj) = shoal_vfs::with_ref(|v| v.watchable(fd))?;
    if fd == epfd {
        return Err(Errno::EINVAL);
    }
    // Descriptions that are epoll instances, for the cycle check (vfs is
    // asked before our state is borrowed).
    let target_is_epoll = obj.is_some_and(|id| crate::with(|n| epoll_ref(n, id).is_some()));
    let timed = obj.is_some_and(|id| crate::with(|n| matches!(n.objs.get(&id), Some(Obj::Timer(_) | Obj::Epoll(_)))));
    let src = match obj {
        Some(id) => crate::with(|n| match n.objs.get(&id) {
            Some(Obj::Socket(s)) if s.fam == crate::Fam::Inet => Src::Host(s.h),
            Some(Obj::Socket(s)) if s.fam == crate::Fam::Unix => Src::Local(crate::unix::unix_src(s.h)),
            // A loopback socket's readiness log is the AF_UNIX one (its
            // twin there); one that may still move to the host (not yet
            // bound, connected or listening) is asked at every wait.
            Some(Obj::Socket(s)) if s.fam == crate::Fam::Lo && n.lo.unsettled(s.h).is_none() => Src::Local(crate::unix::unix_src(s.h)),
            Some(Obj::Event(e)) => Src::Local(e.src),
            _ => Src::Always,
        }),
        None => shoal_vfs::with_ref(|v| v.ofd_source(ofd)).map_or(Src::Always, Src::Local),
    };
    if let Some((events, _)) = ev {
        if events & EPOLLEXCLUSIVE != 0 && (op == EPOLL_CTL_MOD || target_is_epoll || events & EPOLLONESHOT != 0) {
            return Err(Errno::EINVAL);
        }
    }
    if op == EPOLL_CTL_ADD && target_is_epoll {
        let map: BTreeMap<usize, u64> = shoal_vfs::with_ref(|v| v.obj_ofds());
        let look = |o: usize| map.get(&o).copied();
        let target = obj.unwrap_or(0);
        if crate::with(|n| reaches(n, target, ep, &look, 0))? {
            return Err(Errno::ELOOP);
        }
    }
    let key = (ofd, fd);
    crate::with(|n| {
        let e = epoll_mut(n, ep).ok_or(Errno::EINVAL)?;
        let fresh = |events, data| Item { events, data, seen: None, armed: true, timed, src, queued: false };
        match (op, ev) {
            (EPOLL_CTL_ADD, Some((events, data))) => {
                if e.items.contains_key(&key) {
                    return Err(Errno::EEXIST);
                }
                e.insert(key, fresh(events, data));
            }
            (EPOLL_CTL_MOD, Some((events, data))) => {
                let it = e.items.get(&key).ok_or(Errno::ENOENT)?;
                if it.events & EPOLLEXCLUSIVE != 0 {
                    return Err(Errno::EINVAL);
                }
                e.remove(&key);
                e.insert(key, fresh(events, data));
            }
            (EPOLL_CTL_DEL, None) => {
                e.remove(&key).ok_or(Errno::ENOENT)?;
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
    // A wait that may block, with no other thread to run: if what is
    // known already has nothing to report, block at once. Blocking goes
    // straight to the idle wait, which asks the tender for the host
    // sockets with this wait's deadline (returning at once if one is
    // ready), so asking it first with a zero timeout, as the scan below
    // does, would be one more host call per wake-up for nothing. Anything
    // known is reported only after that ask (the scan below), so a socket
    // that stays ready cannot hide new arrivals elsewhere.
    let mut got = EVENTS.try_with(core::mem::take).unwrap_or_default();
    got.clear();
    let mut known_empty = timeout_ns != Some(0)
        && !shoal_sched::others_runnable()
        && crate::host::without_refresh(|| {
            shoal_vfs::with(|v| scan(ep, v, 1, false, &mut got));
            got.is_empty()
        });
    let r = loop {
        if !known_empty {
            got.clear();
            shoal_vfs::with(|v| scan(ep, v, max, true, &mut got));
            if !got.is_empty() {
                let out = match umem::slice_mut(events, got.len() * EVENT_SIZE) {
                    Ok(o) => o,
                    Err(e) => break Err(e),
                };
                for (k, (m, data)) in got.iter().enumerate() {
                    out[k * EVENT_SIZE..k * EVENT_SIZE + 4].copy_from_slice(&m.to_ne_bytes());
                    out[k * EVENT_SIZE + 4..(k + 1) * EVENT_SIZE].copy_from_slice(&data.to_ne_bytes());
                }
                break Ok(got.len() as u64);
            }
            if dl.is_some_and(|d| shoal_time::monotonic_ns() >= d) {
                break Ok(0);
            }
        }
        known_empty = false;
        let timers = shoal_vfs::with(|v| deadline(ep, v));
        if let Err(e) = shoal_vfs::wait::block("epoll_wait", earlier(dl, timers)) {
            break Err(e);
        }
        // The instance may have been closed meanwhile (by another thread).
        if let Err(e) = epoll_of(epfd) {
            break Err(e);
        }
    };
    got.clear();
    EVENTS.try_with(|g| *g = got);
    r
}
