//! Rebooting vfs and ramfs (VampOS's component reboot; docs/recovery.md): the call log,
//! its shrinking, and the replay that rebuilds the state after a reboot.
//!
//! **Why not the memory snapshot alone.** `shoal-recover` restores a
//! component's data and bss from its post-initialisation snapshot. For
//! vfs and ramfs that is not enough: their state — the descriptor table,
//! the open file descriptions, the inode tree, file contents — lives on
//! the shared kernel heap, reached from one `Global` in vfs's bss. After
//! the restore that `Global` points at the heap objects of the moment the
//! snapshot was taken, long since changed or freed. So a reboot
//! **abandons** the old heap objects (never dropped: they may be
//! corrupt; they leak) and builds a fresh state: ramfs's tree and vfs's
//! descriptors exactly as the kernel built them at boot, then the log
//! replayed over them.
//!
//! **The log** (kept in `shoal_recover::LOGS`, outside both components'
//! memory, so restoring their snapshots leaves it alone) records each
//! state-changing call by its *results*, per session, as VampOS shrinks
//! its logs:
//! - per **inode** a call changed (created, renamed, linked, truncated,
//!   written, its times, mode, owner or reference count changed): the
//!   inode's image after the call (`shoal_ramfs::heal::Image`: attributes,
//!   directory entries, link target) — a later call on the same inode
//!   supersedes it; an inode the program destroyed drops its entry (one
//!   that existed at boot leaves a tombstone). Most changes reach the
//!   image as the change itself, from ramfs's journal, never as a fresh
//!   export: a write in place, a reference count, a name added to or
//!   removed from a directory (one entry of the directory's image, not a
//!   walk over all of them), an access time a read moved, an empty file
//!   made (its image built from the change), an inode destroyed (its
//!   entry dropped without a lookup) — SQLite's journal file, made and
//!   removed each transaction, is logged that way;
//! - per **regular file** written since boot: its contents — not a copy,
//!   a second handle on the file's own pages (`shoal_ramfs::data::Mirror`: the
//!   pages are reference counted, the log's handle lists the same ones as
//!   the file's, with the size as of the last logged call). Each write's
//!   range and each truncation only bring the handle's page list in step
//!   (`Mirror::write`, `Mirror::truncate`: a page reference, never a byte,
//!   moves); removing the file drops it. (VampOS shrinks "a series of
//!   write() by preserving the offset and contents"; here the contents
//!   are the live file's, like a page cache under the log.) File data
//!   thus costs the log a few bytes per page, not the file's size again;
//! - per **descriptor** and **open file description**: the entry after
//!   the call (description, close-on-exec; target, status flags, offset):
//!   every read, write or `lseek` supersedes the offset in place, and
//!   closing a descriptor drops its entry (and its description's, with
//!   the last reference) — session-aware shrinking;
//! - one entry each for the working directory, umask, the enforced
//!   limits, the pipes' buffers, the advisory locks and the terminal
//!   settings.
//!
//! The log is updated when a call leaves vfs ([`crate::with`]), from the
//! journal ramfs keeps of what the call changed (`Fs::journal`) and
//! a comparison of those tables (descriptors, descriptions, pipes, locks)
//! the call borrowed mutably (each is a `Tracked` value, whose flag tells;
//! the others are not looked at; a read or write that only moved one
//! description's offset marks that entry alone, `Tracked::at_mut`): its
//! size is that of the live state it describes, never that of the
//! history, so there is no threshold to wait for (VampOS shrinks every
//! 100 entries because it appends first and prunes later).
//!
//! **Shrinking.** A closed session's records go when the call that
//! closed it is logged. `shoal run --log-shrink N` (VampOS's threshold,
//! its Table IV) keeps them instead — the description as it was when
//! its last descriptor closed — until N are pending, then drops them
//! together; `never` keeps them all. They are never replayed (the state
//! they describe is gone); the knob exists to measure what batching the
//! shrink costs and saves (`shoal bench recover --only
//! shrink-threshold`: memory grows with N, the calls cost the same).
//!
//! **Replay and encapsulated restoration.** A reboot runs vfs's
//! initialisation again — building the root file system from the archive,
//! the standard streams — feeding it the clock readings the boot made
//! (the time component is not asked again: its answers are the logged
//! ones), so every inode nobody changed comes back identical, with its
//! inode number and times. Then each entry is applied: inode images and
//! file contents imported, the next inode number set, the descriptor
//! tables and the rest put back. Nothing outside vfs and ramfs is called
//! during the replay: reference counts, pipe ends and lock owners are
//! taken from the log, not re-taken through the calls that made them.
//!
//! **Rejuvenation** (`--rejuvenate-every`) reboots a component that did
//! not fail: its state is sound, so [`before_reboot`] sets it aside, the
//! rebuilt tree takes the files' contents from it (the same pages: no
//! copy, and shared mappings stay coherent) and the rest of it is freed —
//! rejuvenation does not leak.
//!
//! **File data across a failure.** The rebuilt file gets the log's handle:
//! its pages and its size as of the last call that completed. So a
//! failure in the middle of a write leaves the bytes that call already
//! stored in the file's pages (the retried call stores the same bytes at
//! the same offset: descriptors' offsets and `O_APPEND`'s end of file
//! come from the log, not from the half-done call) and pages it added
//! past the end are not attached (the size is the logged one; the tail
//! of the last page is zeroed, `FileData::settle`). A failed truncation
//! loses no page: the log still holds those it dropped, and the retry
//! drops them again; only the tail of a partial last page, zeroed in
//! place, stays zeroed (the retry zeroes it anyway; a call that fails
//! twice returns `EIO` with that tail gone, as a failed write leaves its
//! bytes). Pages a program mapped `MAP_SHARED` are the
//! very pages the rebuilt file has, so the mapping stays coherent.
//! The price: file data is not the component's memory but shared,
//! application-visible data, like a page cache. A wild write of a failing
//! vfs or ramfs into a file's page is not undone by the reboot (which
//! rebuilds the metadata: the tree, the sizes, the page lists), just as a
//! kernel bug scribbling on Linux's page cache corrupts the file.
//!
//! **What is not restored.** Heap objects of a failed state leak (once
//! per failure), and with them the references the abandoned tree held on
//! file pages: pages of files that existed at the failure stay allocated
//! after those files are removed (the same memory as before this log
//! shared pages, when the abandoned tree's pages leaked instead).

use crate::tracked::Dirty;
use crate::{lock, pipe, FdEntry, Ofd, Target, Vfs};
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering::Relaxed};
use shoal_ramfs::data::Mirror;
use shoal_ramfs::heal::{Change, Exported, Image};
use shoal_ramfs::Ino;
use shoal_recover::id;

/// Where the file system's clock readings go (module documentation:
/// the boot's readings are fed back to a rebuild).
#[derive(Default)]
enum Clock {
    /// Read the clock.
    #[default]
    Live,
    /// Read it and keep what it said (while vfs initialises).
    Record(Vec<u64>),
    /// Answer from the boot's readings, in order (while rebuilding).
    Replay(Vec<u64>, usize),
}

#[cfg(not(test))]
static CLOCK: shoal_plat::ZeroGlobal<Clock> = shoal_plat::ZeroGlobal::new();

#[cfg(not(test))]
fn with_clock<R>(f: impl FnOnce(&mut Clock) -> R) -> Option<R> {
    CLOCK.try_with(f)
}

// Unit tests run in parallel threads, each with its own file systems.
#[cfg(test)]
std::thread_local! {
    static CLOCK: core::cell::RefCell<Clock> = const { core::cell::RefCell::new(Clock::Live) };
}

#[cfg(test)]
fn with_clock<R>(f: impl FnOnce(&mut Clock) -> R) -> Option<R> {
    CLOCK.with(|c| c.try_borrow_mut().ok().map(|mut c| f(&mut c)))
}

/// The file system's clock (see [`Clock`]).
pub(crate) fn clock(live: fn() -> u64) -> u64 {
    with_clock(|c| match c {
        Clock::Live => live(),
        Clock::Record(v) => {
            let t = live();
            v.push(t);
            t
        }
        Clock::Replay(v, i) => {
            let t = v.get(*i).copied().unwrap_or_else(live);
            *i += 1;
            t
        }
    })
    .unwrap_or_else(live)
}

/// Starts keeping the clock readings (vfs's initialisation).
pub(crate) fn record_clock() {
    with_clock(|c| *c = Clock::Record(Vec::new()));
}

/// The readings kept since [`record_clock`] (the clock is live again).
fn take_clock() -> Vec<u64> {
    match with_clock(|c| core::mem::replace(c, Clock::Live)) {
        Some(Clock::Record(v) | Clock::Replay(v, _)) => v,
        _ => Vec::new(),
    }
}

/// Feeds `boot` to the clock (a rebuild), until [`take_clock`].
fn replay_clock(boot: Vec<u64>) {
    with_clock(|c| *c = Clock::Replay(boot, 0));
}

/// The log entry of one inode.
struct InodeEntry {
    /// Its image after the last call that changed it; `None`: destroyed.
    image: Option<Image>,
    /// A regular file's contents: a handle on the file's own pages, in
    /// step with the file as of the last logged call (`Mirror`).
    data: Option<Mirror>,
}

/// The log's inode entries: inode number → a slot of `slots`. The map
/// holds small pairs and the entries (some 190 bytes: an image and a file
/// handle) stay put in their slots, so adding or removing one moves
/// neither it nor its neighbours in a tree node; the slot of a removed
/// entry, with its image's buffers, is the next new inode's (SQLite makes
/// and removes its journal file once per transaction). A reused slot's
/// image is stale until [`Fs::export_file_into`] refreshes it, which the
/// only caller of [`Entries::get_or_insert`] does at once.
///
/// [`Fs::export_file_into`]: shoal_ramfs::Fs::export_file_into
#[derive(Default)]
struct Entries {
    map: BTreeMap<Ino, usize>,
    slots: Vec<InodeEntry>,
    /// Slots of removed entries (their `data` moved to `spare`).
    free: Vec<usize>,
    /// Emptied file handles of removed entries, their lists' buffers
    /// kept for the next files (a few at most).
    spare: Vec<Mirror>,
}

impl Entries {
    fn get_mut(&mut self, ino: Ino) -> Option<&mut InodeEntry> {
        let i = *self.map.get(&ino)?;
        self.slots.get_mut(i)
    }

    /// The entry of `ino`, made if there is none (in a free slot, whose
    /// image is stale: see [`Entries`]).
    fn get_or_insert(&mut self, ino: Ino) -> &mut InodeEntry {
        Entries::slot_of(&mut self.map, &mut self.slots, &mut self.free, ino)
    }

    /// [`Entries::get_or_insert`] on the fields, so the caller may use
    /// `spare` beside the entry.
    fn slot_of<'a>(map: &mut BTreeMap<Ino, usize>, slots: &'a mut Vec<InodeEntry>, free: &mut Vec<usize>, ino: Ino) -> &'a mut InodeEntry {
        let i = match map.get(&ino) {
            Some(&i) => i,
            None => {
                let i = free.pop().unwrap_or_else(|| {
                    slots.push(InodeEntry { image: None, data: None });
                    slots.len() - 1
                });
                map.insert(ino, i);
                i
            }
        };
        &mut slots[i]
    }

    /// Drops the entry of `ino`: its file handle (the pages' references)
    /// now, its slot kept for the next new inode.
    fn remove(&mut self, ino: Ino) {
        if let Some(i) = self.map.remove(&ino) {
            if let Some(mut d) = self.slots.get_mut(i).and_then(|e| e.data.take()) {
                if self.spare.len() < SPARE_HANDLES {
                    d.clear();
                    self.spare.push(d);
                }
            }
            self.free.push(i);
        }
    }

    /// An empty file handle, a spare one if there is one.
    fn handle(&mut self) -> Mirror {
        self.spare.pop().unwrap_or_default()
    }

    /// The entries, by inode number.
    fn iter(&self) -> impl Iterator<Item = (Ino, &InodeEntry)> {
        self.map.iter().filter_map(|(&ino, &i)| self.slots.get(i).map(|e| (ino, e)))
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

/// Emptied file handles the log keeps for the next new files
/// ([`Entries::remove`]).
const SPARE_HANDLES: usize = 4;

/// What vfs holds besides its tables and ramfs's tree and that calls
/// change, as one entry. (The standard streams' inodes, `/proc/self/fd`
/// and the pipes' times are set at boot only: the rebuild makes them
/// again.)
#[derive(Clone, Copy, PartialEq)]
struct Scalars {
    cwd: Ino,
    umask: u32,
    nofile: usize,
    fsize: u64,
}

impl Scalars {
    fn of(v: &Vfs) -> Scalars {
        Scalars { cwd: v.cwd, umask: v.umask, nofile: v.nofile, fsize: v.fsize }
    }
}

/// The log of vfs and ramfs (module documentation).
pub(crate) struct Log {
    /// The clock readings of vfs's initialisation.
    boot_clock: Vec<u64>,
    /// Inodes below this number existed at boot.
    boot_next_ino: Ino,
    inodes: Entries,
    next_ino: Ino,
    fds: Vec<Option<FdEntry>>,
    ofds: Vec<Option<Ofd>>,
    scalars: Scalars,
    pipes: BTreeMap<Ino, pipe::Pipe>,
    locks: lock::Flat,
    termios: [u8; 36],
    /// `ops::termios_changes` when `termios` was copied.
    termios_changes: u64,
    /// State-changing calls logged since boot.
    calls: u64,
    /// The log-shrink threshold (`--log-shrink`, VampOS's Table IV): the
    /// records of closed sessions are dropped when this many are pending;
    /// 1 (the default): at close; `u32::MAX`: never.
    shrink_at: u32,
    /// Records of closed sessions not dropped yet (module documentation,
    /// "Shrinking"): the description as it was when its last descriptor
    /// closed.
    closed: Vec<Ofd>,
    /// Times the closed sessions were dropped.
    shrinks: u64,
    /// The name buffer of the last directory entry removed from an
    /// image, for the next one added (`DirImage::add`).
    spare_name: Option<Box<[u8]>>,
    /// A rejuvenation's sound state, set aside before the reboot: the
    /// rebuilt tree takes its files' contents (the same pages), the rest
    /// is freed.
    old: Option<Vfs>,
}

/// The log in its slot (`shoal_recover::LOGS`), found by [`start`]: the
/// `dyn Any` downcast that reaching it through the slot costs (an
/// indirect call and a comparison) is not paid after every call. Kept in
/// vfs's own data, which the snapshot taken after initialisation holds,
/// so a reboot restores it; the `Log` it points at never moves.
static LOG_AT: AtomicPtr<Log> = AtomicPtr::new(core::ptr::null_mut());
/// Set while [`slot`] lends the log out: a nested `slot` gets `None`, as
/// a borrowed cell would answer.
static LENT: AtomicBool = AtomicBool::new(false);

fn slot<R>(f: impl FnOnce(&mut Log) -> R) -> Option<R> {
    let p = LOG_AT.load(Relaxed);
    if p.is_null() || LENT.load(Relaxed) {
        return None;
    }
    LENT.store(true, Relaxed);
    // SAFETY: `start` set `p` to the `Log` boxed in vfs's slot of
    // `shoal_recover::LOGS`, which nothing replaces or frees afterwards;
    // `LENT` makes this the only reference to it (one flow of control).
    // A failure inside `f` abandons the reference and leaves `LENT` set,
    // but the reboot that follows restores vfs's data, clearing it.
    let r = f(unsafe { &mut *p });
    LENT.store(false, Relaxed);
    Some(r)
}

/// Starts the log right after vfs's initialisation (which ran after
/// [`record_clock`]): the state of `v` is the replay's base.
pub(crate) fn start(v: &mut Vfs) {
    let boot_clock = take_clock();
    // Only when vfs and ramfs are rebootable (`--recover-stateful`):
    // otherwise nothing would ever replay the log.
    if !shoal_recover::stateful() {
        return;
    }
    let mut log = Log::new(v, boot_clock);
    // The log's copy of the scalars is the live one.
    v.scalars_set = false;
    log.shrink_at = match (shoal_plat::boot::info().recover_flags >> shoal_abi::RECOVER_LOG_SHRINK_SHIFT) as u32 {
        0 => 1,
        n => n,
    };
    if let Some(cell) = shoal_recover::log_cell(id::VFS) {
        let p = cell.with(|s| s.insert(Box::new(log)).downcast_mut::<Log>().map(|l| l as *mut Log));
        LOG_AT.store(p.unwrap_or(core::ptr::null_mut()), Relaxed);
    }
}

/// Brings the log up to date with what the call that is leaving vfs
/// changed (called by [`crate::with`] after every call).
///
/// Most calls change nothing the log holds (`stat`, `fstat`,
/// `fdatasync`, a read at end of file, an `lseek` to where the file
/// is): they are told apart here, with a few loads and no borrow, before
/// [`Log::record`] — a large function whose entry and exit alone (its
/// saved registers and frame) cost more than these checks — is called.
/// Out of line: see `shoal_recover::log_cell`.
#[inline(never)]
pub(crate) fn commit(v: &mut Vfs) {
    let p = LOG_AT.load(Relaxed);
    if p.is_null() || LENT.load(Relaxed) {
        return;
    }
    // SAFETY: as in `slot` (the log is not lent: `LENT` is clear); only
    // read here, and the reference ends before `commit_changes` borrows it.
    let log = unsafe { &*p };
    if !changed_nothing(log, v) {
        commit_changes(v);
    }
}

/// Whether the call that is leaving vfs changed nothing the log holds
/// ([`commit`]'s check, before [`Log::record`]; the property test skips
/// `record` by the same check, so a change this misses fails it). One
/// word per thing a call may change — ramfs's journal (its two lengths),
/// each tracked table's mark, the scalars' flag — and the terminal
/// settings' count: no copy of the log is compared here. Combined into
/// one word with `|`, so the check is one branch: which part a call changed
/// varies from call to call, and a branch per part was mispredicted
/// often enough that the check cost ~30 cycles a call in SQLite's
/// inserts (a profile of the guest).
#[inline]
fn changed_nothing(log: &Log, v: &Vfs) -> bool {
    let (touched, changes) = v.fs.journal();
    let changed = (v.fds.mark() & v.ofds.mark() & v.pipes.mark() & v.locks.mark() ^ crate::tracked::CLEAN)
        | usize::from(v.scalars_set)
        | touched.len()
        | changes.len()
        | (log.termios_changes ^ crate::ops::termios_changes()) as usize;
    let quiet = changed == 0;
    // A change of the scalars that did not set their flag would be lost
    // for the log: the property test finds it here.
    #[cfg(test)]
    assert!(!quiet || log.scalars == Scalars::of(v), "cwd, umask or a limit changed without setting Vfs::scalars_set");
    quiet
}

/// Records the call that just left vfs in `log` (after
/// [`changed_nothing`] said it may have changed something; [`Log::record`]
/// clears the tables' marks and ramfs's journal, this the scalars' flag).
#[inline]
fn record_call(log: &mut Log, v: &mut Vfs) {
    log.record(v);
    v.scalars_set = false;
}

/// [`commit`] of a call that may have changed something: what it
/// changed goes into the log. Kept small — the calls that get here are
/// mostly a `write` or `lseek` that moved one description's offset, an
/// `F_SETLK`, a write into a file's pages, each changing one thing — so
/// the common cases are a few compares and copies here and each table's
/// whole comparison is a function of its own, called only when the call
/// changed that table (one large function with every case inlined paid
/// a wide frame and saved registers on every call).
#[inline(never)]
fn commit_changes(v: &mut Vfs) {
    let p = LOG_AT.load(Relaxed);
    if p.is_null() || LENT.load(Relaxed) {
        return;
    }
    LENT.store(true, Relaxed);
    // SAFETY: as in `slot` (`LENT` was clear and is set: this is the only
    // reference to the log until it is cleared below).
    record_call(unsafe { &mut *p }, v);
    LENT.store(false, Relaxed);
}

/// [`sync`] of the descriptor table, out of line (see [`commit_changes`]).
#[inline(never)]
fn sync_table(dst: &mut Vec<Option<FdEntry>>, src: &[Option<FdEntry>]) -> bool {
    sync(dst, src)
}

/// Makes `dst` equal to `src`, copying only the entries that differ;
/// whether any did (one pass, where comparing and then cloning the whole
/// table took two and copied every entry).
fn sync<T: Clone + PartialEq>(dst: &mut Vec<T>, src: &[T]) -> bool {
    let mut changed = dst.len() != src.len();
    dst.truncate(src.len());
    for (d, s) in dst.iter_mut().zip(src) {
        if d != s {
            d.clone_from(s);
            changed = true;
        }
    }
    let n = dst.len();
    dst.extend_from_slice(&src[n..]);
    changed
}

impl Log {
    /// The log of a state just built (`v`, whose build read the clock
    /// `boot_clock`): empty, `v` is the replay's base.
    fn new(v: &mut Vfs, boot_clock: Vec<u64>) -> Log {
        v.fs.set_journal(true);
        Log {
            boot_clock,
            boot_next_ino: v.fs.next_ino(),
            inodes: Entries::default(),
            next_ino: v.fs.next_ino(),
            fds: (*v.fds).clone(),
            ofds: (*v.ofds).clone(),
            scalars: Scalars::of(v),
            pipes: (*v.pipes).clone(),
            locks: {
                let mut f = lock::Flat::default();
                v.locks.flatten_into(&mut f);
                f
            },
            termios: crate::ops::termios(),
            termios_changes: crate::ops::termios_changes(),
            calls: 0,
            shrink_at: 1,
            closed: Vec::new(),
            shrinks: 0,
            spare_name: None,
            old: None,
        }
    }

    /// Records what the last call changed in `v` (see [`commit_changes`]).
    #[inline]
    fn record(&mut self, v: &mut Vfs) {
        let log = self;
        let mut changed = false;
        if !v.fs.journal_is_empty() {
            log.journal_changes(v);
            changed = true;
        }
        // Each table is compared with its copy only if the call borrowed it
        // mutably (`Tracked`): most calls leave most of them alone.
        changed |= match v.fds.take_dirty_entries() {
            Dirty::Clean => false,
            // One descriptor (an open, a close, a dup2): that entry alone.
            Dirty::One(i) if log.fds.len() == v.fds.len() => match (log.fds.get_mut(i), v.fds.get(i)) {
                (Some(d), Some(s)) if d != s => {
                    *d = *s;
                    true
                }
                _ => false,
            },
            _ => sync_table(&mut log.fds, &v.fds),
        };
        changed |= match v.ofds.take_dirty_entries() {
            Dirty::Clean => false,
            // One description (a read or write moved its offset): that entry
            // alone. (With a shrink threshold above 1 the whole table is
            // synced, which keeps the record of a session that ended.)
            Dirty::One(i) if log.ofds.len() == v.ofds.len() && log.shrink_at <= 1 => match (log.ofds.get_mut(i), v.ofds.get(i)) {
                // The offset first: the field a read or write moves, so the
                // whole comparison is rarely needed.
                (Some(d), Some(s)) if d.as_ref().map(|o| o.offset) != s.as_ref().map(|o| o.offset) || d != s => {
                    d.clone_from(s);
                    true
                }
                _ => false,
            },
            _ => log.sync_ofds(&v.ofds),
        };
        if v.pipes.is_dirty() || v.locks.is_dirty() || log.scalars != Scalars::of(v) || log.termios_changes != crate::ops::termios_changes() {
            changed |= log.record_rest(v);
        }
        if changed {
            log.calls += 1;
        }
    }

    /// The inodes and file data the last call changed, from ramfs's
    /// journal (read in place, then emptied).
    #[inline(never)]
    fn journal_changes(&mut self, v: &mut Vfs) {
        let (touched, changes) = v.fs.journal();
        // The common case — one write into pages the file had (a database
        // page, a journal record), or a reference taken or dropped —
        // applied here, without the general walk.
        let done = match (touched, changes) {
            ([], [c]) => self.apply_alone(c, v.fs.journal_names()),
            _ => false,
        };
        if done {
            self.next_ino = v.fs.next_ino();
        } else {
            self.inodes_changed(v, touched, changes);
        }
        v.fs.clear_journal();
    }

    /// Applies a change that comes without its inode
    /// (`Change::InPlace`, `Change::Refs`, a directory's
    /// `Change::Added` or `Change::Removed`, whose names are in `names`)
    /// to the log's image (and file handle); `false` if the log has no
    /// image of that inode yet (or the change is another kind), to be
    /// exported instead.
    fn apply_alone(&mut self, c: &Change, names: &[u8]) -> bool {
        match *c {
            Change::Created { ino, .. } => {
                let d = self.inodes.handle();
                let e = self.inodes.get_or_insert(ino);
                Image::new_file(c, &mut e.image);
                e.data = Some(d);
                true
            }
            // Destroyed: one made since boot leaves nothing; one from
            // boot leaves a tombstone (as `inodes_changed` does for a
            // touched inode that is gone).
            Change::Freed { ino } if ino >= self.boot_next_ino => {
                self.inodes.remove(ino);
                true
            }
            Change::Freed { ino } => {
                let e = self.inodes.get_or_insert(ino);
                (e.image, e.data) = (None, None);
                true
            }
            Change::Added { dir, .. } | Change::Removed { dir, .. } => match self.inodes.get_mut(dir) {
                Some(InodeEntry { image: Some(im), .. }) => im.apply_dirent(c, names, &mut self.spare_name),
                _ => false,
            },
            Change::InPlace { ino, size, .. } => match self.inodes.get_mut(ino) {
                Some(InodeEntry { image: Some(im), data: Some(d) }) if im.is_file() => {
                    im.apply_fields(c);
                    d.in_place(size);
                    true
                }
                _ => false,
            },
            Change::Refs { ino, .. } | Change::Attr { ino, .. } | Change::Atime { ino, .. } => match self.inodes.get_mut(ino) {
                Some(InodeEntry { image: Some(im), .. }) => im.apply_fields(c),
                _ => false,
            },
            _ => false,
        }
    }

    /// The pipes, locks, scalars and terminal settings the last call
    /// changed (of these only the locks change often, at each
    /// `F_SETLK`: out of line, see [`commit_changes`]).
    #[inline(never)]
    fn record_rest(&mut self, v: &mut Vfs) -> bool {
        let log = self;
        let mut changed = false;
        let s = Scalars::of(v);
        if log.scalars != s {
            log.scalars = s;
            changed = true;
        }
        if v.pipes.take_dirty() && log.pipes != *v.pipes {
            log.pipes.clone_from(&v.pipes);
            changed = true;
        }
        if v.locks.take_dirty() && v.locks.sync_into(&mut log.locks) {
            changed = true;
        }
        let n = crate::ops::termios_changes();
        if log.termios_changes != n {
            log.termios_changes = n;
            log.termios = crate::ops::termios();
            changed = true;
        }
        changed
    }

    /// Replays the log over `v`, the state as the boot built it (built
    /// again with the boot's clock readings); returns the number of
    /// entries applied.
    fn replay(&self, v: &mut Vfs, mut old: Option<&mut Vfs>) -> Result<u64, &'static str> {
        let fs = &mut v.fs;
        fs.set_journal(false);
        for (ino, e) in self.inodes.iter() {
            let data = match (&e.image, &e.data) {
                (Some(im), Some(d)) if im.is_file() => match old.as_mut().and_then(|o| o.fs.take_data(ino)) {
                    Some(moved) => Some(moved),
                    None => Some(d.to_file()),
                },
                _ => None,
            };
            fs.import(ino, e.image.as_ref().map(|im| (im, data))).map_err(|_| "a file's contents are missing from the log")?;
        }
        fs.set_next_ino(self.next_ino);
        let _ = fs.take_resized();
        fs.set_journal(true);
        v.fds.clone_from(&self.fds);
        v.ofds.clone_from(&self.ofds);
        let s = &self.scalars;
        (v.cwd, v.umask, v.nofile, v.fsize) = (s.cwd, s.umask, s.nofile, s.fsize);
        v.pipes.clone_from(&self.pipes);
        *v.locks = lock::Locks::from_flat(&self.locks);
        crate::ops::set_termios(self.termios);
        Ok(self.entries())
    }

    /// [`sync`] for the descriptions, keeping the record of each session
    /// that ended (a description gone, or its slot reused) while the
    /// shrink threshold is above 1, and dropping them all when it is
    /// reached.
    #[inline(never)]
    fn sync_ofds(&mut self, live: &[Option<Ofd>]) -> bool {
        if self.shrink_at > 1 {
            for (i, old) in self.ofds.iter().enumerate() {
                let Some(old) = old else { continue };
                let ended = match live.get(i) {
                    Some(Some(now)) => now.target != old.target,
                    _ => true,
                };
                if ended {
                    self.closed.push(old.clone());
                }
            }
            if self.closed.len() >= self.shrink_at as usize {
                self.closed.clear();
                self.shrinks += 1;
            }
        }
        sync(&mut self.ofds, live)
    }

    fn inodes_changed(&mut self, v: &Vfs, touched: &[Ino], changes: &[Change]) {
        for &ino in touched {
            let Entries { map, slots, free, spare } = &mut self.inodes;
            let e = Entries::slot_of(map, slots, free, ino);
            match v.fs.export_file_into(ino, &mut e.image) {
                Exported::File(live) => match &mut e.data {
                    // First change to this file since boot: a handle on
                    // all its pages now (the call's changes are in it).
                    None => {
                        let mut d = spare.pop().unwrap_or_default();
                        live.mirror_into(&mut d);
                        e.data = Some(d);
                    }
                    // The call's changes to this file, in order (every
                    // data change journals its inode, so each is reached
                    // here, from the lookup the export made).
                    Some(handle) => {
                        for c in changes {
                            match *c {
                                Change::Write { ino: i, off, len } if i == ino => handle.write(live, off, len),
                                Change::InPlace { ino: i, .. } if i == ino => handle.size_from(live),
                                Change::Truncate { ino: i, size } if i == ino => handle.truncate(live, size),
                                Change::Mapped { ino: i, off } if i == ino => handle.write(live, off, 1),
                                _ => {}
                            }
                        }
                    }
                },
                Exported::Other => e.data = None,
                // Destroyed: one made since boot leaves nothing; one from
                // boot leaves a tombstone (image None).
                Exported::Gone if ino >= self.boot_next_ino => {
                    self.inodes.remove(ino);
                }
                Exported::Gone => e.data = None,
            }
        }
        // Writes in place to files not otherwise changed by the call:
        // the image and the handle's size from the change itself (module
        // `shoal_ramfs::heal`, `Change::InPlace`); likewise a reference
        // count taken or dropped (`Change::Refs`) and a name added to or
        // removed from a directory (`Change::Added`, `Change::Removed`:
        // one entry of the directory's image, not a walk over all of
        // them). An inode the log has no image (or file handle) of yet is
        // exported as a touched one is — its state after the call, so
        // the directory changes that follow for it in this call are in
        // that image already and are not applied again.
        // (Rarely anything: a Vec allocates only when pushed to.)
        let mut exported: Vec<Ino> = Vec::new();
        let names = v.fs.journal_names();
        for c in changes {
            let (ino, dirent) = match *c {
                Change::InPlace { ino, .. }
                | Change::Refs { ino, .. }
                | Change::Attr { ino, .. }
                | Change::Atime { ino, .. }
                | Change::Created { ino, .. }
                | Change::Freed { ino }
                    if !touched.contains(&ino) =>
                {
                    (ino, false)
                }
                Change::Added { dir, .. } | Change::Removed { dir, .. } if !touched.contains(&dir) => (dir, true),
                _ => continue,
            };
            if dirent && exported.contains(&ino) {
                continue;
            }
            if !self.apply_alone(c, names) {
                self.inodes_changed(v, &[ino], &[]);
                if dirent {
                    exported.push(ino);
                }
            }
        }
        self.next_ino = v.fs.next_ino();
    }

    /// Bytes the log holds (an estimate of its heap use: entries, images,
    /// the page lists of the files' handles, tables). The pages those
    /// lists reference are the files' own, not counted here.
    fn bytes(&self) -> u64 {
        let mut b = core::mem::size_of::<Log>() + self.boot_clock.capacity() * 8;
        for (_, e) in self.inodes.iter() {
            b += core::mem::size_of::<InodeEntry>() + core::mem::size_of::<Image>() + 16;
            b += e.image.as_ref().map_or(0, |i| i.heap_bytes());
            b += e.data.as_ref().map_or(0, |d| d.owned_pages() as usize * PAGE_REF_BYTES);
        }
        // Free slots and emptied file handles, kept for the next new
        // inodes.
        for e in self.inodes.free.iter().filter_map(|&i| self.inodes.slots.get(i)) {
            b += core::mem::size_of::<InodeEntry>() + e.image.as_ref().map_or(0, |i| i.heap_bytes());
        }
        b += self.inodes.spare.iter().map(|d| d.heap_bytes()).sum::<usize>();
        b += self.fds.capacity() * core::mem::size_of::<Option<FdEntry>>();
        b += self.ofds.capacity() * core::mem::size_of::<Option<Ofd>>();
        b += self.pipes.values().map(|p| p.buf.capacity() + 64).sum::<usize>();
        b += self.closed.capacity() * core::mem::size_of::<Ofd>();
        b as u64
    }

    /// Entries the log holds (what a reboot replays).
    fn entries(&self) -> u64 {
        let live = |n: usize| n as u64;
        live(self.inodes.len())
            + self.inodes.iter().filter(|(_, e)| e.data.is_some()).count() as u64
            + self.fds.iter().filter(|e| e.is_some()).count() as u64
            + self.ofds.iter().filter(|e| e.is_some()).count() as u64
            + live(self.pipes.len())
            + live(self.closed.len())
            + 3
    }
}

/// What one page reference in a file handle's page list costs the log:
/// the list's entry (page index and pointer) and its share of the tree's
/// nodes.
const PAGE_REF_BYTES: usize = 32;

/// Tells recover the log's size (for the reboot line: measured when a
/// reboot replays it, not after every call, which would cost a walk over
/// the entries each time).
fn report() {
    if let Some(b) = slot(|l| l.bytes()) {
        shoal_recover::set_log_bytes(id::VFS, b);
        shoal_recover::set_log_bytes(id::RAMFS, b);
    }
}

/// Whether `--log-report` asked for the log's size at exit.
pub(crate) fn report_at_exit_wanted() -> bool {
    shoal_recover::stateful() && shoal_plat::boot::info().recover_flags & shoal_abi::RECOVER_LOG_REPORT != 0
}

/// Prints the log's size (`--log-report`, when the instance ends).
pub(crate) fn report_at_exit() {
    use core::fmt::Write;
    if let Some((bytes, entries, calls, pending, shrinks)) = slot(|l| (l.bytes(), l.entries(), l.calls, l.closed.len(), l.shrinks)) {
        let _ = writeln!(
            shoal_plat::console::Stderr,
            "shoal: recovery log at exit: vfs+ramfs {bytes} bytes, {entries} entries ({calls} calls logged, {pending} closed sessions pending, {shrinks} shrinks)"
        );
    }
}

/// The log's size in bytes and entries, and the calls it has logged
/// (tests, diagnostics); `None` without a log.
pub fn stats() -> Option<(u64, u64, u64)> {
    slot(|l| (l.bytes(), l.entries(), l.calls))
}

/// vfs's and ramfs's rejuvenation hook (`shoal_recover::set_rejuvenator`,
/// run before a rejuvenation only: their log is brought up to date as
/// each call leaves vfs, so an ordinary call needs nothing before it):
/// sets the sound state aside for the rebuild.
pub fn before_reboot() {
    if shoal_recover::rejuvenating() {
        if let Some(old) = crate::take_state() {
            slot(|log| log.old = Some(old));
        }
    }
}

/// After-reboot hook of vfs (`shoal_recover`): vfs's memory is its
/// snapshot again; the state is rebuilt from the log.
pub fn after_reboot(_count: u64) {
    rebuild();
}

/// After-reboot hook of ramfs: its tree is part of vfs's state (the
/// failed call was inside vfs, which holds it), so vfs's memory is
/// restored too and the whole state rebuilt from the log.
pub fn after_ramfs_reboot(_count: u64) {
    shoal_recover::restore_regions(id::VFS);
    rebuild();
}

fn fail(why: &str) -> ! {
    use core::fmt::Write;
    let _ = writeln!(shoal_plat::console::Stderr, "shoal: cannot rebuild the file system after a reboot: {why}");
    shoal_plat::halt(134)
}

/// Builds vfs's state afresh and replays the log over it (module
/// documentation), then installs it, abandoning the old one.
fn rebuild() {
    let Some(boot) = slot(|l| core::mem::take(&mut l.boot_clock)) else { fail("there is no log") };
    replay_clock(boot);
    let mut v = crate::boot_vfs();
    let boot = take_clock();
    let mut old = slot(|log| log.old.take()).flatten();
    let replayed = slot(|log| {
        log.boot_clock = boot;
        log.replay(&mut v, old.as_mut())
    });
    let n = match replayed {
        Some(Ok(n)) => n,
        Some(Err(why)) => fail(why),
        None => fail("the log is in use"),
    };
    crate::obj::set_live(v.ofds.iter().flatten().filter(|o| matches!(o.target, Target::Obj(_))).count());
    // The count of inotify watches lives in vfs's memory too: the owner of
    // the watches (net, not rebooted) tells it again.
    crate::obj::set_watches(crate::obj::ops().map_or(0, |o| o.watched().len()));
    crate::install_rebuilt(v);
    // A rejuvenation's old state, its files' contents moved out: sound,
    // so freed.
    drop(old);
    shoal_recover::set_replayed(n);
    report();
}

#[cfg(test)]
#[path = "heal_tests.rs"]
mod tests;
