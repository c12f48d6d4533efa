//! File-backed mappings.
//!
//! mm does not know files: the component that owns them (vfs) registers a
//! table of functions ([`FileOps`]) at boot, so mm depends on no file
//! system (vfs depends on mm, not the other way round).
//!
//! - `MAP_PRIVATE`, and `/dev/zero`: anonymous memory with the file's
//!   contents copied in. Past the end of the file, the rest of the last
//!   page reads as zero (touching pages wholly beyond the end does not
//!   raise `SIGBUS`: they read as zero too). Later changes of the file are
//!   not seen by the mapping (Linux would show them for untouched pages).
//! - `MAP_SHARED` of a regular file: the mapping's pages *are* the file's
//!   pages. File data lives in page-aligned pages of the kernel heap
//!   (`shoal_ramfs`); the kernel asks the tender to make each page of the
//!   mapping show the file's page ([`shoal_abi::Hypercall::Alias`]: spt
//!   maps the same memory-file page twice, hvt points the page-table entry
//!   at the same guest-physical page). So a store through one mapping is
//!   seen at once through every other mapping of that page, by `read`, and
//!   by other threads; `write` and `pwrite` are seen by every mapping; no
//!   system call needs to synchronise anything, and `msync` has nothing to
//!   do. The part of a mapping past the end of the file (whole pages) is
//!   private zero memory, as Linux's would be `SIGBUS`; when the file
//!   grows into it (`write`, `ftruncate`), those pages start showing the
//!   file (what the program stored there before is lost: on Linux it would
//!   have faulted), and when it shrinks, the pages past the new end go
//!   back to private zeros (Linux: `SIGBUS`). The file's pages are never
//!   freed while mapped: the mapping holds a reference to the file, and a
//!   truncation takes them out of every mapping before the kernel heap can
//!   reuse them ([`resized`]).
//!
//! Each file mapping keeps a reference to its file (it outlives `close`)
//! in a fixed table of [`MAX_FILE_MAPS`] entries; more is `ENOMEM`.
//!
//! At most [`MAX_SHOWN_PAGES`] pages of all shared mappings together show
//! file pages: on spt each such page is a host mapping of its own, and the
//! host allows a process 65,530 (`vm.max_map_count`). Past that, the
//! tender's `mmap` and `mprotect` fail, so memory the kernel frees or
//! protects would keep a stale protection (CPython's `test_mmap` mapped
//! 256 MiB of a sparse file and crashed later on a read-only page it had
//! been given as fresh memory). A new shared mapping that would pass the
//! bound is `ENOMEM` before anything is shown; a file that grows into a
//! mapping past it leaves the new part private zeros, as when the file
//! cannot supply a page. Shared file pages are never executable
//! (`PROT_EXEC` is recorded, but the tenders alias pages read or
//! read-write only).

use shoal_plat::{Errno, Global};

use crate::space::{page_up, PAGE};

/// What a descriptor offers for mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mappable {
    /// A regular file (a reference is taken for the mapping; give it back
    /// with [`FileOps::release`]).
    File(u64),
    /// Anonymous memory (`/dev/zero`).
    Zero,
}

/// [`FileOps::page`]: `(address, never handed out)` of a file's page.
pub type PageFn = fn(id: u64, off: u64) -> Result<Option<(u64, bool)>, Errno>;

/// The file operations mm needs, provided by the file system.
pub struct FileOps {
    /// Looks descriptor `fd` up for a mapping; `shared_write`: a writable
    /// shared mapping is asked for. Linux's errors: `EBADF` (not open),
    /// `EACCES` (not readable, or not writable for `shared_write`, or
    /// append-only), `ENODEV` (not mappable: pipes, directories…).
    pub get: fn(fd: i32, shared_write: bool) -> Result<Mappable, Errno>,
    /// Takes another reference on file `id`.
    pub retain: fn(id: u64),
    /// Drops a reference on file `id`.
    pub release: fn(id: u64),
    /// Reads file `id` at `off` (short at the end of the file).
    pub read_at: fn(id: u64, off: u64, buf: &mut [u8]) -> Result<usize, Errno>,
    /// The size of file `id`.
    pub size: fn(id: u64) -> Result<u64, Errno>,
    /// The page of file `id` holding offset `off`: its address (a whole,
    /// page-aligned page that stays put while the file keeps it) and
    /// whether it was never handed out for mapping (`handed_out`); `None`
    /// past the end of the file.
    pub page: PageFn,
    /// Records that the page of file `id` holding `off` was made
    /// aliasable and handed out.
    pub handed_out: fn(id: u64, off: u64),
    /// Maps file `id` from `off` over the program's fresh memory `[addr,
    /// addr + len)` as the host's own pages (a mounted file: the host's
    /// page cache, shared between instances; read-only, or readable and
    /// executable with `exec`), returning the bytes mapped from `addr`
    /// (the file's whole pages); an error (any file that is not the
    /// host's) leaves the memory as it was.
    pub map_host: fn(id: u64, off: u64, addr: u64, len: u64, exec: bool) -> Result<u64, Errno>,
    /// Gives `[addr, addr + len)`, where `map_host` mapped, fresh zero
    /// memory with real protection `prot`.
    pub unmap_host: fn(addr: u64, len: u64, prot: u64) -> Result<(), Errno>,
}

static OPS: Global<Option<&'static FileOps>> = Global::new(None);

/// Registers the file system's operations (once, at boot).
pub fn register(ops: &'static FileOps) {
    OPS.with(|o| *o = Some(ops));
}

pub(crate) fn ops() -> Result<&'static FileOps, Errno> {
    OPS.with(|o| *o).ok_or(Errno::ENODEV)
}

/// Most file mappings alive at once.
pub const MAX_FILE_MAPS: usize = 512;

/// Most pages of shared mappings that show file pages at once (128 MiB):
/// half the host's default `vm.max_map_count`, the rest left to the
/// tender, the program's libraries and its own mappings. (16 in unit
/// tests, whose address spaces are small.)
pub const MAX_SHOWN_PAGES: u64 = if cfg!(test) { 16 } else { 32 * 1024 };

/// One file mapping: `[start, end)` holds file `id` from offset `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileMap {
    /// First byte.
    pub start: u64,
    /// One past the last byte (page aligned).
    pub end: u64,
    /// The file.
    pub id: u64,
    /// File offset of `start`.
    pub off: u64,
    /// `MAP_SHARED`: the pages show the file's pages.
    pub shared: bool,
    /// The end of the part that shows the file's pages (`[start, live)`):
    /// for a shared mapping the pages inside the file, the rest being
    /// private zero memory; for a private one the pages the host mapped
    /// from its own copy of a mounted file ([`FileOps::map_host`]), the
    /// rest being a copy (`start`: all of it).
    pub live: u64,
}

/// One record of [`MAPS`]: a mapping, or empty (`end == 0`, which no
/// mapping has). An empty table is all zero bytes, so it lies in `.bss`
/// and costs an instance nothing until used; as `[Option<FileMap>; N]`
/// (whose `None` is the `bool`'s niche, not zero) it was 20 KiB of
/// `.data`, copied into every instance's memory at load.
#[derive(Clone, Copy)]
pub(crate) struct Slot(FileMap);

impl Slot {
    const EMPTY: Slot = Slot(FileMap { start: 0, end: 0, id: 0, off: 0, shared: false, live: 0 });

    fn get(self) -> Option<FileMap> {
        (self.0.end != 0).then_some(self.0)
    }

    fn set(&mut self, m: Option<FileMap>) {
        *self = m.map_or(Slot::EMPTY, Slot);
    }
}

/// The table of [`MAPS`]: a cell without a borrow flag of its own (that is
/// [`MAPS_LOCK`]), so that an instance without file mappings never writes
/// its pages: it only reads them (the host's zero page). A `Global` would
/// put its flag, written at every look-up, in front of the table, on a
/// page of its own. The linker lays mm's statics out in the order of their
/// symbol names, which puts this one (`10MAPS_TABLE` in the mangled name)
/// first, at the page-aligned start of mm's bss, and the written cells
/// together after it: one private bss page less per instance (`bench
/// density`). Were the order ever different, a page would be lost, nothing
/// else.
struct MapsTable(core::cell::UnsafeCell<[Slot; MAX_FILE_MAPS]>);

// SAFETY: reached only through `Maps::with`/`try_with`, under a borrow of
// MAPS_LOCK (see `Global`: one flow of control runs kernel code at a time).
unsafe impl Sync for MapsTable {}

static MAPS_TABLE: MapsTable = MapsTable(core::cell::UnsafeCell::new([Slot::EMPTY; MAX_FILE_MAPS]));
static MAPS_LOCK: Global<()> = Global::new(());

/// The file mappings: [`MAPS_TABLE`] under [`MAPS_LOCK`].
pub(crate) struct Maps;

pub(crate) static MAPS: Maps = Maps;

impl Maps {
    /// Runs `f` with the table (a kernel panic if it is in use further up
    /// the stack, as `Global::with`).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut [Slot; MAX_FILE_MAPS]) -> R) -> R {
        // SAFETY: the lock's borrow makes this the only reference to the
        // table until `f` returns.
        MAPS_LOCK.with(|_| f(unsafe { &mut *MAPS_TABLE.0.get() }))
    }

    /// Runs `f` with the table, or `None` if it is in use further up the stack.
    pub(crate) fn try_with<R>(&self, f: impl FnOnce(&mut [Slot; MAX_FILE_MAPS]) -> R) -> Option<R> {
        // SAFETY: as in `with`.
        MAPS_LOCK.try_with(|_| f(unsafe { &mut *MAPS_TABLE.0.get() }))
    }
}

/// Copies the file range of `m` into its memory.
pub(crate) fn fill(m: &FileMap, from: u64, to: u64) -> Result<(), Errno> {
    let ops = ops()?;
    if from >= to {
        return Ok(());
    }
    // The mapping already has its real protection (read-only for a
    // PROT_READ mapping): lend the kernel write access while it copies the
    // file in. (Not inside `with_space`: the copy calls into vfs.)
    let lent = crate::with_space(|s| s.lend_write(from, to));
    // SAFETY: [from, to) is a mapping mm has just handed to the program
    // (zero-filled), inside guest memory, writable for now; nothing else
    // uses it.
    let buf = unsafe { core::slice::from_raw_parts_mut(from as *mut u8, (to - from) as usize) };
    let r = (ops.read_at)(m.id, m.off + (from - m.start), buf);
    if lent {
        crate::with_space(|s| s.restore(from, to));
    }
    r.map(|_| ())
}

/// Sets up new private mapping `m` (its memory is fresh and zero):
/// read-only or read-and-execute mappings of a mounted file show the
/// host's pages of the file, shared with every other instance that maps
/// it ([`FileOps::map_host`]; `ld.so` maps libraries so); the rest, and
/// every other mapping, gets a copy of the file. Returns the record.
pub(crate) fn set_up_private(mut m: FileMap) -> Result<FileMap, Errno> {
    let ops = ops()?;
    let prot = real_prot(m.start);
    let read = shoal_abi::PROT_READ;
    if prot == read || prot == read | shoal_abi::PROT_EXEC {
        if let Ok(n) = (ops.map_host)(m.id, m.off, m.start, m.end - m.start, prot & shoal_abi::PROT_EXEC != 0) {
            m.live = m.start + (n & !(PAGE - 1)).min(m.end - m.start);
        }
    }
    if let Err(e) = fill(&m, m.live, m.end) {
        forget_host(&m);
        return Err(e);
    }
    Ok(m)
}

/// Gives the pages of private mapping `m` that show the host's pages of
/// its file (`[start, live)`) fresh zero memory again, with the real
/// protection the table gives them now, before they leave the mapping.
pub(crate) fn forget_host(m: &FileMap) {
    give_host_pages_back(m.start, m.live);
}

fn give_host_pages_back(from: u64, to: u64) {
    let Ok(ops) = ops() else { return };
    let mut p = from;
    while p < to {
        let prot = real_prot(p);
        let mut q = p + PAGE;
        while q < to && real_prot(q) == prot {
            q += PAGE;
        }
        // A failure leaves the file's pages there: the kernel zeroes
        // dirty pages it hands out again, so nothing of the file shows.
        let _ = (ops.unmap_host)(p, q - p, prot);
        p = q;
    }
}

/// Private mapping `m` grew in place from `old_end` to `new_end` (the
/// pages above were free): its record covers them, copied from the file.
pub(crate) fn grow_private(m: &FileMap, old_end: u64, new_end: u64) -> Result<(), Errno> {
    if m.end == old_end {
        MAPS.with(|t| {
            if let Some(k) = t.iter().position(|s| s.get() == Some(*m)) {
                t[k].set(Some(FileMap { end: new_end, ..*m }));
            }
        });
    }
    fill(&FileMap { end: new_end, ..*m }, old_end, new_end)
}

/// Asks the tender to make `[dst, dst + len)` show `[src, src + len)`
/// with real protection `prot`. Without a tender (unit tests) the request
/// is only recorded.
fn alias(dst: u64, src: u64, len: u64, prot: u64) -> Result<(), Errno> {
    #[cfg(test)]
    ALIASED.with(|p| p.borrow_mut().push((dst, src, len)));
    if shoal_plat::boot::booted() {
        let r = shoal_plat::hypercall::alias(dst, src, len, prot);
        if r < 0 {
            return Err(Errno(-r as i32));
        }
    }
    Ok(())
}

#[cfg(test)]
std::thread_local! {
    /// Every alias requested `(dst, src, len)`, for the unit tests.
    pub static ALIASED: core::cell::RefCell<std::vec::Vec<(u64, u64, u64)>> = const { core::cell::RefCell::new(std::vec::Vec::new()) };
}

/// The real protection of the program's page at `p`.
fn real_prot(p: u64) -> u64 {
    crate::with_space(|s| s.use_at(p).map_or(shoal_abi::PROT_READ | shoal_abi::PROT_WRITE, |u| u.real_prot()))
}

/// Makes a file page that is handed out for the first time able to be
/// shown elsewhere: on spt its memory must come from the tender's memory
/// file, so it is re-backed in place (`src == dst` with
/// `ALIAS_SHAREABLE`), keeping its bytes.
fn make_aliasable(page: u64) -> Result<(), Errno> {
    if !shoal_plat::hypercall::needs_rebacking() {
        return Ok(());
    }
    let mut tmp = [0u8; PAGE as usize];
    // SAFETY: `page` is a whole kernel-heap page owned by the file system
    // for this file; nothing else runs while the kernel copies it.
    unsafe { core::ptr::copy_nonoverlapping(page as *const u8, tmp.as_mut_ptr(), PAGE as usize) };
    alias(page, page, PAGE, shoal_abi::PROT_READ | shoal_abi::PROT_WRITE | shoal_abi::ALIAS_SHAREABLE)?;
    // SAFETY: as above; the page is read-write kernel memory again.
    unsafe { core::ptr::copy_nonoverlapping(tmp.as_ptr(), page as *mut u8, PAGE as usize) };
    Ok(())
}

/// Pages sent to the tender in one `AliasList` request.
const BATCH: usize = 64;

/// Sends the pairs collected so far (all with protection `prot`).
fn send(pairs: &mut [shoal_abi::AliasPair; BATCH], n: &mut usize, prot: u64) -> Result<(), Errno> {
    if *n == 0 {
        return Ok(());
    }
    #[cfg(test)]
    ALIASED.with(|p| p.borrow_mut().extend(pairs[..*n].iter().map(|q| (q.dst, q.src, PAGE))));
    let r = if shoal_plat::boot::booted() { shoal_plat::hypercall::alias_list(&pairs[..*n], prot) } else { 0 };
    *n = 0;
    if r < 0 {
        return Err(Errno(-r as i32));
    }
    Ok(())
}

/// Makes the pages `[from, to)` of shared mapping `m` show the file's
/// pages (batched: one request per run of up to [`BATCH`] pages of equal
/// protection). Stops at the first error (the rest stays private).
fn show_file(m: &FileMap, from: u64, to: u64) -> Result<(), Errno> {
    let ops = ops()?;
    let mut pairs = [shoal_abi::AliasPair::default(); BATCH];
    let mut n = 0usize;
    let mut prot = 0;
    let mut p = from;
    while p < to {
        let off = m.off + (p - m.start);
        let Some((src, first)) = (ops.page)(m.id, off)? else { break };
        if first {
            make_aliasable(src)?;
            (ops.handed_out)(m.id, off);
        }
        // The tenders alias pages without execute (module docs).
        let want = real_prot(p) & !shoal_abi::PROT_EXEC;
        if n == BATCH || (n > 0 && want != prot) {
            send(&mut pairs, &mut n, prot)?;
        }
        prot = want;
        pairs[n] = shoal_abi::AliasPair { dst: p, src };
        n += 1;
        p += PAGE;
    }
    send(&mut pairs, &mut n, prot)
}

/// Gives the pages `[from, to)` of a shared mapping their own memory back,
/// zero-filled (past the end of the file, or leaving the mapping). spt
/// gives fresh private memory (zero already: the check below only reads);
/// hvt the pages' own guest-physical memory, which may hold old bytes.
fn show_own(from: u64, to: u64) {
    if from >= to {
        return;
    }
    let rw = shoal_abi::PROT_READ | shoal_abi::PROT_WRITE;
    if alias(from, from, to - from, rw).is_err() {
        return;
    }
    // SAFETY: the program's own pages of the mapping, read-write for now
    // and no longer showing the file: zero them as Linux would show them
    // (only pages that are not zero: untouched ones stay untouched).
    unsafe { crate::space::zero_range(from, to) };
    crate::with_space(|s| s.restore(from, to));
}

/// Where the part of shared mapping `m` that shows the file ends, for a
/// file of `size` bytes.
fn live_end(m: &FileMap, size: u64) -> u64 {
    let inside = page_up(size).unwrap_or(u64::MAX).saturating_sub(m.off);
    m.start.saturating_add(inside).min(m.end)
}

/// Sets up new shared mapping `m` (its memory is fresh and zero): the
/// pages inside the file show the file's pages. Returns the record to keep.
pub(crate) fn attach(mut m: FileMap) -> Result<FileMap, Errno> {
    let size = (ops()?.size)(m.id)?;
    let live = live_end(&m, size);
    if shown_pages(None) + (live - m.start) / PAGE > MAX_SHOWN_PAGES {
        return Err(Errno::ENOMEM);
    }
    if let Err(e) = show_file(&m, m.start, live) {
        show_own(m.start, live);
        return Err(e);
    }
    m.live = live;
    Ok(m)
}

/// Number of shared file mappings alive (0: nothing to look at).
static SHARED: Global<usize> = Global::new(0);

/// Pages of shared mappings that show file pages, leaving record `except`
/// out (see [`MAX_SHOWN_PAGES`]).
fn shown_pages(except: Option<usize>) -> u64 {
    if SHARED.with(|n| *n) == 0 {
        return 0;
    }
    MAPS.with(|t| {
        t.iter().enumerate().filter(|(k, _)| Some(*k) != except).filter_map(|(_, s)| s.get()).filter(|m| m.shared).map(|m| (m.live - m.start) / PAGE).sum()
    })
}

/// The file `id` changed size (vfs calls this after every system call
/// that changed a file's size, `None`: several files): every shared
/// mapping of it shows the file's pages exactly where the file now has
/// them. Pages that fell off the end go back to private zeros before the
/// kernel heap can reuse the file's freed pages.
pub fn resized(id: Option<u64>) {
    if SHARED.with(|n| *n) == 0 {
        return;
    }
    for k in 0..MAX_FILE_MAPS {
        let Some(m) = MAPS.with(|t| t[k].get()) else { continue };
        if m.shared && id.is_none_or(|i| i == m.id) {
            resize_one(k);
        }
    }
}

/// Brings shared mapping record `k` in step with its file's size.
fn resize_one(k: usize) {
    let Ok(ops) = ops() else { return };
    let Some(m) = MAPS.with(|t| t[k].get()) else { return };
    let Ok(size) = (ops.size)(m.id) else { return };
    let mut live = live_end(&m, size);
    if live > m.live {
        // Within the bound only; the rest stays private zeros.
        let room = MAX_SHOWN_PAGES.saturating_sub(shown_pages(Some(k)));
        live = live.min(m.start.saturating_add(room * PAGE)).max(m.live);
    }
    if live < m.live {
        show_own(live, m.live);
    } else if live > m.live && show_file(&m, m.live, live).is_err() {
        // The file could not supply a page (out of memory): the new part
        // stays the mapping's own zero memory.
        show_own(m.live, live);
        return;
    }
    MAPS.with(|t| t[k].set(Some(FileMap { live, ..m })));
}

/// The shared mapping ending at `old_end` grew in place to `new_end` (the
/// pages above were free): its record covers them, and those inside the
/// file show it.
pub(crate) fn grow(old_end: u64, new_end: u64) {
    let Some(k) = MAPS.with(|t| t.iter().position(|s| s.get().is_some_and(|m| m.shared && m.end == old_end))) else { return };
    MAPS.with(|t| {
        if let Some(m) = t[k].get() {
            t[k].set(Some(FileMap { end: new_end, ..m }));
        }
    });
    resize_one(k);
}

/// Whether `[addr, addr + len)` touches a page of a shared mapping that
/// shows a file page (plat asks before handing a buffer to hvt's VMM).
pub fn shows_file(addr: u64, len: u64) -> bool {
    if SHARED.try_with(|n| *n).unwrap_or(0) == 0 {
        return false;
    }
    let end = addr.saturating_add(len);
    // Asked while mm holds its table (never, today): take the copy.
    MAPS.try_with(|t| t.iter().filter_map(|s| s.get()).any(|m| m.shared && m.start < end && addr < m.live)).unwrap_or(true)
}

/// Calls `f(a, b)` for each part of `[a, b)` that does not show a file
/// page (`madvise(MADV_DONTNEED)` must not zero the file).
pub(crate) fn outside_shared(a: u64, b: u64, mut f: impl FnMut(u64, u64)) {
    let mut pos = a;
    while pos < b {
        let hit = MAPS
            .with(|t| t.iter().filter_map(|s| s.get()).filter(|m| m.shared && m.start < b && pos < m.live).map(|m| (m.start.max(pos), m.live.min(b))).min());
        match hit {
            Some((x, y)) => {
                if pos < x {
                    f(pos, x);
                }
                pos = y;
            }
            None => {
                f(pos, b);
                pos = b;
            }
        }
    }
}

/// Records a new file mapping (`ENOMEM` when the table is full). The
/// caller passes the reference it holds on the file to the record.
pub(crate) fn add(m: FileMap) -> Result<(), Errno> {
    MAPS.with(|t| {
        let slot = t.iter_mut().find(|s| s.get().is_none()).ok_or(Errno::ENOMEM)?;
        slot.set(Some(m));
        Ok(())
    })?;
    if m.shared {
        SHARED.with(|n| *n += 1);
    }
    Ok(())
}

/// Whether `n` more records fit.
pub(crate) fn room(n: usize) -> bool {
    MAPS.with(|t| t.iter().filter(|s| s.get().is_none()).count() >= n)
}

/// Detaches `[a, b)` from the file mappings: pages of shared ones stop
/// showing the file. Records partly inside are trimmed or split. `ENOMEM`
/// if a split finds no free record (checked before anything changes).
pub(crate) fn detach(a: u64, b: u64) -> Result<(), Errno> {
    let hits: heapless_list::List = MAPS.with(|t| {
        let mut l = heapless_list::List::new();
        for (k, s) in t.iter().enumerate() {
            if let Some(m) = s.get() {
                if m.start < b && a < m.end {
                    l.push(k);
                }
            }
        }
        l
    });
    if hits.is_empty() {
        return Ok(());
    }
    {
        let splits = hits.iter().filter(|&k| MAPS.with(|t| t[k].get().is_some_and(|m| m.start < a && m.end > b))).count();
        if !room(splits) {
            return Err(Errno::ENOMEM);
        }
    }
    for k in hits.iter() {
        let Some(m) = MAPS.with(|t| t[k].get()) else { continue };
        let (x, y) = (m.start.max(a), m.end.min(b));
        if m.shared {
            show_own(x, y.min(m.live));
        } else if x < m.live {
            give_host_pages_back(x, y.min(m.live));
        }
        let left = (m.start < x).then_some(FileMap { end: x, live: m.live.min(x), ..m });
        let right = (y < m.end).then_some(FileMap { start: y, off: m.off + (y - m.start), live: m.live.max(y), ..m });
        MAPS.with(|t| t[k].set(left.or(right)));
        match (left, right) {
            (None, None) => {
                if m.shared {
                    SHARED.with(|n| *n -= 1);
                }
                if let Ok(ops) = ops() {
                    (ops.release)(m.id);
                }
            }
            (Some(_), Some(r)) => {
                if let Ok(ops) = ops() {
                    (ops.retain)(m.id);
                }
                let _ = add(r);
            }
            _ => {}
        }
    }
    Ok(())
}

/// The file mapping that contains `addr`, if any.
pub fn find(addr: u64) -> Option<FileMap> {
    MAPS.with(|t| t.iter().filter_map(|s| s.get()).find(|m| m.start <= addr && addr < m.end))
}

/// A tiny fixed list of record indexes (no allocation: mm must not
/// allocate while the kernel heap may be growing).
mod heapless_list {
    pub struct List {
        items: [u16; super::MAX_FILE_MAPS],
        len: usize,
    }
    impl List {
        pub fn new() -> List {
            List { items: [0; super::MAX_FILE_MAPS], len: 0 }
        }
        pub fn push(&mut self, k: usize) {
            self.items[self.len] = k as u16;
            self.len += 1;
        }
        pub fn is_empty(&self) -> bool {
            self.len == 0
        }
        pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
            self.items[..self.len].iter().map(|&k| k as usize)
        }
    }
}
