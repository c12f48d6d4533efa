//! File-backed mappings.
//!
//! mm does not know files: the component that owns them (vfs) registers a
//! table of functions ([`FileOps`]) at boot, so mm depends on no file
//! system (vfs depends on mm, not the other way round).
//!
//! shoal has no page tables to change at run time (DESIGN §3), so a file
//! mapping is anonymous memory with the file's contents copied in:
//!
//! - `MAP_PRIVATE`, and `MAP_SHARED` without `PROT_WRITE`: the pages hold
//!   the file's bytes from the offset; past the end of the file, the rest
//!   of the last page reads as zero (touching pages wholly beyond the end
//!   does not raise `SIGBUS`: they read as zero too). Later changes of the
//!   file are not seen by the mapping (Linux would show them for shared
//!   mappings and for untouched private pages).
//! - `MAP_SHARED` with `PROT_WRITE`: as above, and the mapping is written
//!   back to the file by `msync`, `munmap`, `mremap` and a `MAP_FIXED`
//!   mapping over it — only pages whose protection still allows writing,
//!   only pages that differ from the file, and never past the file's
//!   current end (the file does not grow). Between those points, `read`
//!   does not see what the program stored in the mapping, and stores
//!   through `write` are overwritten by the write-back of pages the mapping
//!   changed too. This serves the single-process use of shared file
//!   mappings (SQLite's WAL index); two writable shared mappings of the
//!   same page do not see each other.
//! - `/dev/zero` maps as anonymous memory, as on Linux.
//!
//! Each file mapping keeps a reference to its file (it outlives `close`)
//! in a fixed table of [`MAX_FILE_MAPS`] entries; more is `ENOMEM`.

use shoal_plat::{Errno, Global};

use crate::space::{Use, PAGE, PROT_WRITE};

/// What a descriptor offers for mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mappable {
    /// A regular file (a reference is taken for the mapping; give it back
    /// with [`FileOps::release`]).
    File(u64),
    /// Anonymous memory (`/dev/zero`).
    Zero,
}

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
    /// Writes file `id` at `off` (never past its current end).
    pub write_at: fn(id: u64, off: u64, data: &[u8]) -> Result<usize, Errno>,
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
    /// `MAP_SHARED`: written back when writable.
    pub shared: bool,
}

/// One record of [`MAPS`]: a mapping, or empty (`end == 0`, which no
/// mapping has). An empty table is all zero bytes, so it lies in `.bss`
/// and costs an instance nothing until used; as `[Option<FileMap>; N]`
/// (whose `None` is the `bool`'s niche, not zero) it was 20 KiB of
/// `.data`, copied into every instance's memory at load.
#[derive(Clone, Copy)]
pub(crate) struct Slot(FileMap);

impl Slot {
    const EMPTY: Slot = Slot(FileMap { start: 0, end: 0, id: 0, off: 0, shared: false });

    fn get(self) -> Option<FileMap> {
        (self.0.end != 0).then_some(self.0)
    }

    fn set(&mut self, m: Option<FileMap>) {
        *self = m.map_or(Slot::EMPTY, Slot);
    }
}

pub(crate) static MAPS: Global<[Slot; MAX_FILE_MAPS]> = Global::new([Slot::EMPTY; MAX_FILE_MAPS]);

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

/// Writes back the part `[a, b)` of shared mapping `m`: each page whose
/// recorded protection allows writing and that differs from the file.
fn write_back(m: &FileMap, a: u64, b: u64) {
    let Ok(ops) = ops() else { return };
    let mut page = a;
    let mut tmp = [0u8; PAGE as usize];
    while page < b {
        let writable = crate::with_space(|s| matches!(s.use_at(page), Some(Use::Anon { prot }) if prot as u32 & PROT_WRITE != 0));
        if writable {
            let off = m.off + (page - m.start);
            let n = (ops.read_at)(m.id, off, &mut tmp).unwrap_or(0);
            // SAFETY: the page is part of the program's mapping `m`.
            let mem = unsafe { core::slice::from_raw_parts(page as *const u8, n) };
            if mem != &tmp[..n] {
                let _ = (ops.write_at)(m.id, off, mem);
            }
        }
        page += PAGE;
    }
}

/// Records a new file mapping (`ENOMEM` when the table is full). The
/// caller passes the reference it holds on the file to the record.
pub(crate) fn add(m: FileMap) -> Result<(), Errno> {
    MAPS.with(|t| {
        let slot = t.iter_mut().find(|s| s.get().is_none()).ok_or(Errno::ENOMEM)?;
        slot.set(Some(m));
        Ok(())
    })
}

/// Whether `n` more records fit.
pub(crate) fn room(n: usize) -> bool {
    MAPS.with(|t| t.iter().filter(|s| s.get().is_none()).count() >= n)
}

/// What [`detach`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Detach {
    /// Write shared mappings back, then drop the range from the records.
    WriteBack,
    /// Only write back (`msync`).
    Sync,
    /// Only drop the range from the records (its memory is gone already).
    Drop,
}

/// Detaches `[a, b)` from the file mappings: shared ones are written back
/// first. Records partly inside are trimmed or split. `ENOMEM` if a split
/// finds no free record (checked before anything changes).
pub(crate) fn detach(a: u64, b: u64, how: Detach) -> Result<(), Errno> {
    let sync = how == Detach::Sync;
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
    if !sync {
        let splits = hits.iter().filter(|&k| MAPS.with(|t| t[k].get().is_some_and(|m| m.start < a && m.end > b))).count();
        if !room(splits) {
            return Err(Errno::ENOMEM);
        }
    }
    for k in hits.iter() {
        let Some(m) = MAPS.with(|t| t[k].get()) else { continue };
        let (x, y) = (m.start.max(a), m.end.min(b));
        if m.shared && how != Detach::Drop {
            write_back(&m, x, y);
        }
        if sync {
            continue;
        }
        let left = (m.start < x).then_some(FileMap { end: x, ..m });
        let right = (y < m.end).then_some(FileMap { start: y, off: m.off + (y - m.start), ..m });
        MAPS.with(|t| t[k].set(left.or(right)));
        match (left, right) {
            (None, None) => {
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
