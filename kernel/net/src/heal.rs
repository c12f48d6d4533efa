//! Rebooting net (VampOS's component reboot; docs/recovery.md): its log and the rebuild
//! after a reboot.
//!
//! **What must survive.** net's state is the objects behind descriptors
//! ([`crate::Net`]: sockets with their family and backend handle, epoll
//! instances with their interest sets and ready lists, eventfd counters,
//! timerfd settings), the `AF_UNIX` sockets with their names, queues and
//! buffered bytes, the loopback sockets (module `lo`: an `AF_UNIX` table of
//! their own plus ports, addresses and options), and the host backend's table of guest sockets over
//! host handles (flags, options, bound and listening state, the
//! handed-over listeners each took) — all on the shared heap, reached from
//! two `Global`s in net's bss. Restoring net's snapshot makes those point
//! at the heap objects of boot, long since changed or freed; descriptors
//! in vfs's table name objects by id, host sockets are the tender's and
//! stay open. So the state is rebuilt from a log, with the same ids and
//! the same host handles.
//!
//! **The log** (kept in `shoal_recover::LOGS`, outside net's memory) holds
//! net's state as of the end of the last system call — its *results*,
//! never the calls: one entry per live object, per `AF_UNIX` socket and
//! per host socket, each superseded in place when a call changes it, and
//! dropped when the socket is closed (VampOS's session-aware shrinking:
//! an object's entries live exactly as long as the object). Its size is
//! that of the live state, so it is bounded without a threshold, and the
//! reboot line reports it.
//!
//! **When it is brought up to date.** net's state changes in its own
//! calls (`socket`, `accept`, `recv`, `epoll_wait`, …) but also in calls
//! into vfs that reach it through vfs's object table (`close` releases a
//! socket, `poll` refreshes readiness) and in the scheduler's idle wait
//! (host readiness reports). So the gate runs [`commit`] after *every*
//! gated system call (`shoal_recover::set_committer`); it does anything
//! only when something touched the state since the last time (every
//! access through `crate::with` or the host backend's sets a flag): a
//! `read` of a file, which passes net's gate, costs a load. Then it
//! copies only the entries the call touched: the maps of objects,
//! `AF_UNIX` sockets and names, host sockets and handles note the key of
//! every mutable access, insertion and removal (`crate::tracked`), and an
//! entry is copied only if it differs from the log's — a server's idle
//! connections cost nothing.
//!
//! **Replay and encapsulated restoration.** A reboot restores net's
//! snapshot, then [`after_reboot`] installs a copy of the log's state
//! (the old heap objects are abandoned, never dropped: they may be
//! corrupt) and gives the eventfd serial counter back. No host call is
//! repeated: host handles are reattached as the log has them, nothing is
//! reopened, re-bound or re-listened, and no connection is re-accepted;
//! the only host call is one zero-timeout `NetPoll` per 64 sockets to ask
//! their current readiness, since the tender's edge-triggered watch set
//! may have reported a change to the abandoned state (see
//! `host::install_image`). Every waiting thread is woken to re-check.
//! The gate then retries the call that failed, from the state it began
//! with (an injected fault fails a call before it does anything).
//!
//! **What is not restored.** A call that fails after it made a host
//! operation loses that operation's effect in the guest (an accepted
//! connection's host socket stays open in the tender, unused; bytes a
//! send handed to the host are sent again by the retry). The heap objects
//! of a failed state leak (once per failure); a rejuvenation frees them.
//! The `AF_INET` backend is rebuilt as the host-socket backend (the only
//! one there is). An epoll instance is one entry: a wait that changed its
//! ready list copies the whole instance (its interest set included). The
//! log holds a second copy of the bytes buffered in `AF_UNIX` sockets, and
//! a call that changes a socket's unread bytes copies all of them.

use crate::host;
use crate::{eventfd, Net, Obj, NET};
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use core::sync::atomic::{AtomicBool, Ordering::Relaxed};
use shoal_recover::id;

/// Set by every access to net's state since the last [`commit`].
static TOUCHED: AtomicBool = AtomicBool::new(false);

/// Whether the log runs: the maps of net's state note changed entries
/// only then (`crate::tracked`).
static LOGGING: AtomicBool = AtomicBool::new(false);

/// Whether the log runs (see [`LOGGING`]).
#[inline]
pub(crate) fn logging() -> bool {
    LOGGING.load(Relaxed)
}

/// net's state was (or may have been) changed: the next [`commit`]
/// copies it. The gate learns it from recover's pending word, told once
/// per commit (not on every access: net's own flag is the common check).
#[inline]
pub(crate) fn touched() {
    if !TOUCHED.load(Relaxed) {
        TOUCHED.store(true, Relaxed);
        shoal_recover::set_pending(id::NET);
    }
}

/// A copy of net's state (module documentation).
struct Image {
    objs: BTreeMap<u64, Obj>,
    next: u64,
    unix: crate::unix::Unix,
    lo: crate::lo::Lo,
    nl: crate::netlink::Netlink,
    /// Whether the `AF_INET` backend was installed.
    inet: bool,
    host: Option<host::State>,
    /// `eventfd::serial()`.
    serial: u64,
}

/// Brings map `log` up to date with `live`: entries gone from `live`
/// are dropped, changed ones copied over, new ones added. Comparing
/// allocates nothing; only what changed is copied (a server's idle
/// connections cost a comparison each, not a copy).
pub(crate) fn sync_map<K: Ord + Clone, V: PartialEq + Clone>(log: &mut BTreeMap<K, V>, live: &BTreeMap<K, V>) {
    if log.len() > live.len() || log.keys().any(|k| !live.contains_key(k)) {
        log.retain(|k, _| live.contains_key(k));
    }
    for (k, v) in live {
        match log.get_mut(k) {
            Some(l) if l == v => {}
            Some(l) => l.clone_from(v),
            None => {
                log.insert(k.clone(), v.clone());
            }
        }
    }
}

impl Image {
    /// A whole copy of the live state (the log's start); `None` while it
    /// is borrowed. Later calls bring it up to date ([`Image::update`]).
    fn take() -> Option<Image> {
        let net = NET.try_with(|n| {
            n.as_mut().map(|n| {
                // Whole copies: what was noted is in them.
                n.objs.forget_notes();
                n.unix.forget_notes();
                n.lo.forget_notes();
                (n.objs.to_map(), n.next, n.unix.clone(), n.lo.clone(), n.nl.clone(), n.inet.is_some())
            })
        })?;
        let (objs, next, unix, lo, nl, inet) = net.unwrap_or_default();
        let mut host = None;
        host::sync_image(&mut host)?;
        Some(Image { objs, next, unix, lo, nl, inet, host, serial: eventfd::serial() })
    }

    /// Brings the copy up to date with the live state (see [`sync_map`]);
    /// `None` while it is borrowed (then the copy may be half updated: the
    /// caller tries again at the next call).
    fn update(&mut self) -> Option<()> {
        NET.try_with(|n| match n {
            Some(n) => {
                n.objs.sync_into(&mut self.objs);
                self.next = n.next;
                self.unix.sync_from(&mut n.unix);
                self.lo.sync_from(&mut n.lo);
                // Small, and changed only by netlink calls: copied whole
                // when it differs.
                if self.nl != n.nl {
                    self.nl.clone_from(&n.nl);
                }
                self.inet = n.inet.is_some();
            }
            None => {
                self.objs.clear();
                self.next = 0;
                self.unix = Default::default();
                self.lo = Default::default();
                self.nl = Default::default();
                self.inet = false;
            }
        })?;
        host::sync_image(&mut self.host)?;
        self.serial = eventfd::serial();
        Some(())
    }

    /// Bytes the copy holds (an estimate of its heap use).
    fn bytes(&self) -> u64 {
        let per_obj = core::mem::size_of::<Obj>() + 32;
        let mut b = core::mem::size_of::<Log>() + self.objs.len() * per_obj;
        for o in self.objs.values() {
            if let Obj::Epoll(e) = o {
                b += e.heap_bytes();
            }
        }
        b += self.unix.heap_bytes();
        b += self.lo.heap_bytes();
        b += self.nl.heap_bytes();
        b += self.host.as_ref().map_or(0, |h| h.heap_bytes());
        b as u64
    }

    /// Entries it holds: objects, `AF_UNIX` sockets, host sockets.
    fn entries(&self) -> u64 {
        (self.objs.len() + self.unix.len() + self.lo.len() + self.nl.len() + self.host.as_ref().map_or(0, |h| h.len())) as u64
    }
}

/// The log of net (module documentation).
struct Log {
    image: Image,
    /// Calls whose changes were copied since boot.
    calls: u64,
}

fn slot<R>(f: impl FnOnce(&mut Log) -> R) -> Option<R> {
    shoal_recover::log_cell(id::NET)?.try_with(|s| s.as_mut().and_then(|b| b.downcast_mut::<Log>()).map(f)).flatten()
}

/// Starts the log at the end of kernel initialisation (only when net is
/// rebootable: `--recover-stateful`) and registers [`commit`] with the
/// gate.
pub fn start() {
    if !shoal_recover::stateful() {
        return;
    }
    start_log();
    shoal_recover::set_committer(id::NET, commit);
}

/// Starts the log: the state now is its first entry.
pub(crate) fn start_log() {
    LOGGING.store(true, Relaxed);
    let Some(image) = Image::take() else { return };
    TOUCHED.store(false, Relaxed);
    if let Some(cell) = shoal_recover::log_cell(id::NET) {
        cell.with(|s| *s = Some(Box::new(Log { image, calls: 0 })));
    }
}

/// Brings the log up to date if net's state was touched since the last
/// copy (the gate calls this after every system call).
pub fn commit() {
    // A load, not a swap: the common case (nothing touched) must not pay
    // for a locked instruction on every system call.
    if !TOUCHED.load(Relaxed) {
        return;
    }
    TOUCHED.store(false, Relaxed);
    // Borrowed (a thread switched out inside a call holds no borrow, so
    // this means a failed call abandoned one): the copy waits.
    let done = slot(|log| {
        let ok = log.image.update().is_some();
        log.calls += u64::from(ok);
        ok
    });
    if done != Some(true) {
        touched();
    }
}

/// net's rejuvenation hook (`shoal_recover::set_rejuvenator`: it runs
/// before a rejuvenation only, never before an ordinary call): brings the
/// log up to date and frees the sound state (the reboot
/// installs the log's copy): rejuvenation does not leak.
pub fn before_reboot() {
    commit();
    if shoal_recover::rejuvenating() && slot(|_| ()).is_some() {
        drop(NET.try_with(|n| n.take()).flatten());
        host::drop_state();
    }
}

/// After-reboot hook of net (`shoal_recover`): net's memory is its
/// snapshot again; the state is rebuilt from the log.
pub fn after_reboot(_count: u64) {
    let Some(Some((n, bytes))) = slot(|log| rebuild(&log.image).map(|n| (n, log.image.bytes()))) else {
        use core::fmt::Write;
        let _ = writeln!(shoal_plat::console::Stderr, "shoal: cannot rebuild net after a reboot: its log is unavailable");
        shoal_plat::halt(134)
    };
    shoal_recover::set_replayed(n);
    shoal_recover::set_log_bytes(id::NET, bytes);
}

/// Installs a copy of `img` as net's state (module documentation);
/// returns the number of entries applied (`None`: net's state is in use).
fn rebuild(img: &Image) -> Option<u64> {
    let mut net = Net::new();
    net.objs = crate::tracked::TrackedSlab::from_map(img.objs.clone());
    net.next = img.next;
    net.unix = img.unix.clone();
    net.lo = img.lo.clone();
    net.nl = img.nl.clone();
    if img.inet {
        net.inet = Some(Box::new(host::HostBackend));
    }
    // The restored cells point at boot's heap objects: abandoned.
    NET.try_with(|n| core::mem::forget(n.replace(net)))?;
    host::install_image(img.host.as_ref().map(|h| h.image()));
    eventfd::set_serial(img.serial);
    TOUCHED.store(false, Relaxed);
    crate::wake();
    Some(img.entries())
}

/// The log's size in bytes and entries, and the calls it has copied
/// (tests, diagnostics); `None` without a log.
pub fn stats() -> Option<(u64, u64, u64)> {
    slot(|l| (l.image.bytes(), l.image.entries(), l.calls))
}

/// Unit tests: net's memory restored from a snapshot taken before any
/// socket existed (the state is forgotten, as a reboot abandons it), then
/// the hook.
#[cfg(test)]
pub(crate) fn simulate_reboot() {
    NET.with(|n| core::mem::forget(n.take()));
    host::install_image(None);
    eventfd::set_serial(0);
    after_reboot(1);
}

#[cfg(test)]
#[path = "heal_tests.rs"]
mod tests;
