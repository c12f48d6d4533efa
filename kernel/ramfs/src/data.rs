//! File contents: page-sized chunks over an optional read-only base.
//!
//! A file that came from the root archive starts as a *base*: a borrowed
//! slice of the archive bytes, which the tender mapped read-only and which
//! live as long as the instance. Nothing is copied at boot. The first write
//! into a [`CHUNK`]-sized page copies that page (its part of the base) into
//! an owned chunk and writes there: copy-on-write at page granularity, so a
//! large archive file that is patched in one place costs one page of memory.
//!
//! Invariants: `base_len <= size`; bytes of an owned chunk at or beyond
//! `size` are zero; a page that has no chunk reads as the base where
//! `offset < base_len` and as zeros elsewhere (a hole). Together they make
//! truncation, extension and writes past the end (sparse files) zero-fill
//! exactly as Linux does, without storing the holes.
//!
//! Owned chunks are whole, page-aligned guest pages ([`Chunk`]) that stay
//! where they are until the file (and recovery's log, which references
//! the same pages instead of copying them: [`Mirror`]) drops
//! them: a `MAP_SHARED` mapping of the file maps these very pages (`shoal_mm::file`), so loads and stores
//! through the mapping and `read`/`write` touch the same bytes. Because a
//! mapping may store past the end of the file in the last page, growing
//! the file zeroes that page's tail first, so the invariant above holds.

use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use core::alloc::Layout;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering::Relaxed};
use shoal_plat::Errno;

/// Size of a storage chunk (one page).
pub const CHUNK: usize = 4096;
const CHUNK64: u64 = CHUNK as u64;

/// Largest file size (Linux's `MAX_LFS_FILESIZE` on 64-bit).
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// The contents of a regular file.
#[derive(Debug, Default)]
pub struct FileData {
    /// Read-only bytes from the archive (never written).
    base: &'static [u8],
    /// How much of `base` is still part of the file (shrinks on truncate).
    base_len: u64,
    /// Owned pages, by page index.
    chunks: BTreeMap<u64, Chunk>,
    /// File size in bytes.
    size: u64,
}

/// One owned page of file data: a zero-filled, page-aligned page of the
/// kernel heap, which never moves while anyone holds it (shared mappings
/// map it by address). Reference counted: recovery's log (`crate::heal`)
/// holds the same pages as the live file instead of a copy of them, so a
/// page lives until the file *and* the log have let it go.
#[derive(Debug, Clone)]
pub struct Chunk(Arc<Page>);

/// The page behind a [`Chunk`] and whether it was handed out for mapping
/// (a property of the page, so a file rebuilt around the same pages after
/// a reboot keeps it).
#[derive(Debug)]
struct Page {
    ptr: NonNull<u8>,
    handed_out: AtomicBool,
}

const CHUNK_LAYOUT: Layout = match Layout::from_size_align(CHUNK, CHUNK) {
    Ok(l) => l,
    Err(_) => panic!("page layout"),
};

impl Chunk {
    fn new() -> Result<Chunk, Errno> {
        // SAFETY: CHUNK_LAYOUT has a non-zero size.
        let p = unsafe { alloc::alloc::alloc_zeroed(CHUNK_LAYOUT) };
        NonNull::new(p).map(|ptr| Chunk(Arc::new(Page { ptr, handed_out: AtomicBool::new(false) }))).ok_or(Errno::ENOSPC)
    }

    /// The page's address.
    pub fn addr(&self) -> u64 {
        self.0.ptr.as_ptr() as u64
    }

    /// Whether `self` and `other` are the same page.
    fn same(&self, other: &Chunk) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl core::ops::Deref for Chunk {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the page holds CHUNK initialised bytes at ptr and lives
        // as long as any Chunk refers to it.
        unsafe { core::slice::from_raw_parts(self.0.ptr.as_ptr(), CHUNK) }
    }
}

impl core::ops::DerefMut for Chunk {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref. The page may have other holders (the log's
        // image of the file, a shared mapping), but none of them reads or
        // writes it while the kernel holds this borrow: the kernel runs
        // one flow of control, the log only ever reads the page when a
        // reboot rebuilds the file, and the program does not run while
        // the kernel holds this.
        unsafe { core::slice::from_raw_parts_mut(self.0.ptr.as_ptr(), CHUNK) }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: allocated in Chunk::new with CHUNK_LAYOUT; the last
        // reference frees it, once.
        unsafe { alloc::alloc::dealloc(self.ptr.as_ptr(), CHUNK_LAYOUT) }
    }
}

// SAFETY: a Page owns its allocation like a Box does.
unsafe impl Send for Page {}
// SAFETY: as above; the kernel runs one flow of control, and shared
// access only reads (writes go through `&mut Chunk`, see DerefMut).
unsafe impl Sync for Page {}

impl FileData {
    /// An empty file.
    pub fn new() -> FileData {
        FileData::default()
    }

    /// A file whose contents are `base` (borrowed, not copied).
    pub fn from_base(base: &'static [u8]) -> FileData {
        FileData { base, base_len: base.len() as u64, chunks: BTreeMap::new(), size: base.len() as u64 }
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Number of pages still served from the read-only base (not copied).
    pub fn base_pages(&self) -> u64 {
        let pages = self.base_len.div_ceil(CHUNK64);
        pages - self.chunks.range(..pages).count() as u64
    }

    /// Number of owned (copied or written) pages.
    pub fn owned_pages(&self) -> u64 {
        self.chunks.len() as u64
    }

    /// Space used, in 512-byte blocks (`st_blocks`); holes use none.
    pub fn blocks(&self) -> u64 {
        (self.base_pages() + self.owned_pages()) * (CHUNK64 / 512)
    }

    /// Reads at `off` into `buf`; returns the number of bytes read (0 at or
    /// past the end).
    pub fn read(&self, off: u64, buf: &mut [u8]) -> usize {
        if off >= self.size {
            return 0;
        }
        let n = core::cmp::min(buf.len() as u64, self.size - off) as usize;
        let mut done = 0usize;
        while done < n {
            let pos = off + done as u64;
            let page = pos / CHUNK64;
            let in_page = (pos % CHUNK64) as usize;
            let len = core::cmp::min(CHUNK - in_page, n - done);
            let dst = &mut buf[done..done + len];
            if let Some(c) = self.chunks.get(&page) {
                dst.copy_from_slice(&c[in_page..in_page + len]);
            } else {
                // From the base up to base_len, zeros after.
                let from_base = if pos < self.base_len { core::cmp::min(len as u64, self.base_len - pos) as usize } else { 0 };
                if from_base > 0 {
                    let p = pos as usize;
                    dst[..from_base].copy_from_slice(&self.base[p..p + from_base]);
                }
                dst[from_base..].fill(0);
            }
            done += len;
        }
        n
    }

    /// The bytes at `off`, up to `max`, as a slice of the read-only base
    /// when they all still come from it (none of their pages was written
    /// since): what `sendfile` writes straight from the base instead of
    /// copying through a buffer. `None` at or past the end of the base, or
    /// when the page at `off` is an owned copy; otherwise the slice stops
    /// before the first owned page.
    pub fn base_slice(&self, off: u64, max: usize) -> Option<&'static [u8]> {
        let end = core::cmp::min(self.base_len, self.size);
        if off >= end || max == 0 {
            return None;
        }
        let mut stop = core::cmp::min(end, off.saturating_add(max as u64));
        if let Some((&page, _)) = self.chunks.range(off / CHUNK64..stop.div_ceil(CHUNK64)).next() {
            stop = core::cmp::min(stop, page * CHUNK64);
        }
        if stop <= off {
            return None;
        }
        let base: &'static [u8] = self.base;
        base.get(off as usize..stop as usize)
    }

    /// The owned chunk for `page`, creating it (copy of the base page) if
    /// needed. One walk of the tree either way (the entry API): a write
    /// into a page the file owns, the common case (a database's pages
    /// rewritten in place), looked it up twice before, and a new page
    /// three times.
    fn chunk_mut(&mut self, page: u64) -> Result<&mut Chunk, Errno> {
        use alloc::collections::btree_map::Entry;
        match self.chunks.entry(page) {
            Entry::Occupied(e) => Ok(e.into_mut()),
            Entry::Vacant(v) => {
                let mut c = Chunk::new()?;
                let start = page * CHUNK64;
                if start < self.base_len {
                    let len = core::cmp::min(CHUNK64, self.base_len - start) as usize;
                    let s = start as usize;
                    c[..len].copy_from_slice(&self.base[s..s + len]);
                }
                Ok(v.insert(c))
            }
        }
    }

    /// Writes `data` at `off`, extending the file (holes read as zeros).
    /// Returns the number of bytes written (all of them, or an error).
    pub fn write(&mut self, off: u64, data: &[u8]) -> Result<usize, Errno> {
        if data.is_empty() {
            return Ok(0);
        }
        let end = off.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        if off > self.size {
            self.zero_tail();
        }
        let mut done = 0usize;
        while done < data.len() {
            let pos = off + done as u64;
            let page = pos / CHUNK64;
            let in_page = (pos % CHUNK64) as usize;
            let len = core::cmp::min(CHUNK - in_page, data.len() - done);
            let c = match self.chunk_mut(page) {
                Ok(c) => c,
                Err(e) if done == 0 => return Err(e),
                Err(_) => break, // short write: out of memory part-way
            };
            c[in_page..in_page + len].copy_from_slice(&data[done..done + len]);
            done += len;
            self.size = core::cmp::max(self.size, pos + len as u64);
        }
        Ok(done)
    }

    /// Zeroes the last page past the end of the file: a shared mapping may
    /// have stored there, and growing must show zeros (called before the
    /// file grows past a gap).
    fn zero_tail(&mut self) {
        let in_page = (self.size % CHUNK64) as usize;
        if in_page != 0 {
            if let Some(c) = self.chunks.get_mut(&(self.size / CHUNK64)) {
                c[in_page..].fill(0);
            }
        }
    }

    /// The address of the owned page that holds offset `off` (page
    /// aligned), made owned first (a copy of the archive's bytes, or zeros
    /// for a hole), and whether it was never handed out for mapping
    /// ([`FileData::page_handed_out`]); `None` when the page lies wholly past the end of the file. The
    /// page stays at that address until the file drops it (truncation
    /// below it, or the file's removal).
    pub fn page_addr(&mut self, off: u64) -> Result<Option<(u64, bool)>, Errno> {
        let page = off / CHUNK64;
        if page.saturating_mul(CHUNK64) >= self.size {
            return Ok(None);
        }
        let c = self.chunk_mut(page)?;
        Ok(Some((c.addr(), !c.0.handed_out.load(Relaxed))))
    }

    /// Records that the page holding `off` has been handed out for mapping
    /// (so [`FileData::page_addr`] no longer calls it the first time).
    pub fn page_handed_out(&mut self, off: u64) {
        if let Some(c) = self.chunks.get(&(off / CHUNK64)) {
            c.0.handed_out.store(true, Relaxed);
        }
    }

    /// A [`Mirror`] of these contents, its list in `into`'s buffer (the
    /// pages referenced, not copied).
    pub fn mirror_into(&self, into: &mut Mirror) {
        (into.base, into.base_len, into.size) = (self.base, self.base_len, self.size);
        into.pages.clear();
        into.pages.extend(self.chunks.iter().map(|(p, c)| (*p, c.clone())));
    }

    /// Zeroes what lies past the end of the file in its last page: a file
    /// rebuilt after a reboot from the log's handle may find bytes there
    /// that the failed call wrote before its size was logged (the retried
    /// call writes them again).
    pub fn settle(&mut self) {
        self.zero_tail();
    }

    /// Sets the size to `size`: shrinking drops the contents past it,
    /// growing adds zeros.
    pub fn truncate(&mut self, size: u64) -> Result<(), Errno> {
        if size > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        if size < self.size {
            self.base_len = core::cmp::min(self.base_len, size);
            let first_gone = size.div_ceil(CHUNK64);
            let _ = self.chunks.split_off(&first_gone);
            let in_page = (size % CHUNK64) as usize;
            if in_page != 0 {
                if let Some(c) = self.chunks.get_mut(&(size / CHUNK64)) {
                    c[in_page..].fill(0);
                }
            }
        } else if size > self.size {
            self.zero_tail();
        }
        self.size = size;
        Ok(())
    }
}

/// Recovery's handle on a regular file's contents (`crate::heal`, the
/// log in `shoal-vfs`): the same base and the same pages as the file —
/// references, never copies — as one flat list sorted by page index,
/// with the size as of the last logged call. Kept in step after each
/// call ([`Mirror::write`], [`Mirror::truncate`], …) and made a file
/// again when a reboot rebuilds it ([`Mirror::to_file`]).
///
/// A list rather than the file's own tree: the log's common files are
/// small and grow at their end (SQLite's journal file: three pages,
/// made and removed each transaction), where a tree allocated a node for
/// each new file and looked every page up twice; a list takes a page at
/// its end in one comparison, and an emptied one keeps its buffer
/// ([`Mirror::clear`]) for the next file, so the log allocates nothing
/// in that loop. A page put between others moves those after it (a
/// file written back to front: the list's length in moves per page).
#[derive(Debug, Default)]
pub struct Mirror {
    base: &'static [u8],
    base_len: u64,
    size: u64,
    pages: alloc::vec::Vec<(u64, Chunk)>,
}

impl Mirror {
    /// Empty (size 0, no pages), its buffer kept.
    pub fn clear(&mut self) {
        (self.base, self.base_len, self.size) = (&[], 0, 0);
        self.pages.clear();
    }

    /// Number of pages it references.
    pub fn owned_pages(&self) -> u64 {
        self.pages.len() as u64
    }

    /// Bytes its list's buffer holds (for the log's memory report).
    pub fn heap_bytes(&self) -> usize {
        self.pages.capacity() * core::mem::size_of::<(u64, Chunk)>()
    }

    /// Where page `page` is in the list (`Err`: where it would go); the
    /// last first, where a growing file's pages land.
    fn find(&self, page: u64) -> Result<usize, usize> {
        match self.pages.last() {
            None => Err(0),
            Some((p, _)) if *p < page => Err(self.pages.len()),
            Some((p, _)) if *p == page => Ok(self.pages.len() - 1),
            _ => self.pages.binary_search_by_key(&page, |e| e.0),
        }
    }

    /// Brings pages `[first, end)` in step with `live` (the file): the
    /// same page where `live` has one, none where it has none; then the
    /// size. Only page references move, never bytes.
    fn pages_from(&mut self, live: &FileData, first: u64, end: u64) {
        for page in first..end {
            match (self.find(page), live.chunks.get(&page)) {
                (Ok(i), Some(b)) => {
                    if !self.pages[i].1.same(b) {
                        self.pages[i].1 = b.clone();
                    }
                }
                (Err(i), Some(b)) => self.pages.insert(i, (page, b.clone())),
                (Ok(i), None) => {
                    self.pages.remove(i);
                }
                (Err(_), None) => {}
            }
        }
        self.size = live.size;
        self.base_len = live.base_len;
    }

    /// After `live` (the file) was written `len` bytes at `off`: takes
    /// its pages in that range.
    pub fn write(&mut self, live: &FileData, off: u64, len: u64) {
        let first = off / CHUNK64;
        let end = off.saturating_add(len).div_ceil(CHUNK64);
        self.pages_from(live, first, end);
    }

    /// After `live` was written in pages both already hold: takes its size.
    pub fn size_from(&mut self, live: &FileData) {
        self.size = live.size;
        self.base_len = live.base_len;
    }

    /// After the file was written in pages both already hold
    /// ([`crate::heal::Change::InPlace`], which brings the size): takes
    /// that size. (A write never moves `base_len`.)
    pub fn in_place(&mut self, size: u64) {
        self.size = size;
    }

    /// After `live` was truncated (or extended) to `size`: drops the
    /// pages past it and takes those `live` has there now (written later
    /// in the same call). The partial page at `size` is the same page in
    /// both.
    pub fn truncate(&mut self, live: &FileData, size: u64) {
        let first = size.div_ceil(CHUNK64);
        let keep = self.pages.partition_point(|e| e.0 < first);
        self.pages.truncate(keep);
        self.pages.extend(live.chunks.range(first..).map(|(p, c)| (*p, c.clone())));
        self.size = live.size;
        self.base_len = live.base_len;
    }

    /// The file these contents make (a reboot's rebuild), with what lies
    /// past the end in its last page zeroed ([`FileData::settle`]).
    pub fn to_file(&self) -> FileData {
        let mut f = FileData { base: self.base, base_len: self.base_len, chunks: self.pages.iter().map(|(p, c)| (*p, c.clone())).collect(), size: self.size };
        f.settle();
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::boxed::Box;
    use alloc::vec::Vec;

    fn leak(v: Vec<u8>) -> &'static [u8] {
        Box::leak(v.into_boxed_slice())
    }

    fn all(f: &FileData) -> Vec<u8> {
        let mut b = vec![0xAA; f.size() as usize + 10];
        let n = f.read(0, &mut b);
        b.truncate(n);
        b
    }

    #[test]
    fn copy_on_write_per_page() {
        let base: Vec<u8> = (0..3 * CHUNK + 100).map(|i| (i % 251) as u8).collect();
        let b = leak(base.clone());
        let mut f = FileData::from_base(b);
        assert_eq!(f.owned_pages(), 0);
        assert_eq!(f.base_pages(), 4);
        assert_eq!(all(&f), base);
        f.write(CHUNK64 + 10, b"XYZ").unwrap();
        assert_eq!(f.owned_pages(), 1);
        assert_eq!(f.base_pages(), 3);
        let mut expect = base.clone();
        expect[CHUNK + 10..CHUNK + 13].copy_from_slice(b"XYZ");
        assert_eq!(all(&f), expect);
        // The archive bytes are untouched.
        assert_eq!(b, &base[..]);
    }

    #[test]
    fn base_slice_stops_at_written_pages_and_the_end() {
        let base: Vec<u8> = (0..3 * CHUNK + 100).map(|i| (i % 251) as u8).collect();
        let mut f = FileData::from_base(leak(base.clone()));
        assert_eq!(f.base_slice(10, usize::MAX), Some(&base[10..]));
        assert_eq!(f.base_slice(10, 5), Some(&base[10..15]));
        assert_eq!(f.base_slice(base.len() as u64, 5), None);
        f.write(CHUNK64 + 10, b"XYZ").unwrap();
        // Up to the owned page; none inside it; the base again after it.
        assert_eq!(f.base_slice(0, usize::MAX), Some(&base[..CHUNK]));
        assert_eq!(f.base_slice(CHUNK64, 10), None);
        assert_eq!(f.base_slice(2 * CHUNK64, usize::MAX), Some(&base[2 * CHUNK..]));
        // A truncated file ends the slice at its size.
        f.truncate(2 * CHUNK64 + 5).unwrap();
        assert_eq!(f.base_slice(2 * CHUNK64, usize::MAX), Some(&base[2 * CHUNK..2 * CHUNK + 5]));
    }

    #[test]
    fn truncate_then_extend_zero_fills() {
        let base: Vec<u8> = vec![7u8; 2 * CHUNK];
        let mut f = FileData::from_base(leak(base));
        f.write(10, b"abc").unwrap();
        f.truncate(5).unwrap();
        f.truncate(CHUNK64 * 3).unwrap();
        let d = all(&f);
        assert_eq!(d.len(), 3 * CHUNK);
        assert_eq!(&d[..5], &[7u8; 5]);
        assert!(d[5..].iter().all(|&x| x == 0));
    }

    /// The pages shared mappings show are page aligned,
    /// stay put and hold the file's bytes; what a mapping stored past the
    /// end of the file is zeroed when the file grows over it.
    #[test]
    fn mappable_pages_stay_put_and_growth_zeroes_the_tail() {
        let base: Vec<u8> = vec![7u8; CHUNK + 10];
        let mut f = FileData::from_base(leak(base));
        let (p1, first) = f.page_addr(CHUNK64 + 3).unwrap().unwrap();
        assert!(first && p1 % CHUNK64 == 0);
        assert_eq!(f.page_addr(CHUNK64).unwrap(), Some((p1, true)), "not handed out yet");
        f.page_handed_out(CHUNK64 + 9);
        assert_eq!(f.page_addr(CHUNK64).unwrap(), Some((p1, false)));
        assert_eq!(f.page_addr(2 * CHUNK64).unwrap(), None, "past the end");
        f.write(CHUNK64 + 5, b"xy").unwrap();
        // SAFETY: the file's own page.
        let page = unsafe { core::slice::from_raw_parts_mut(p1 as *mut u8, CHUNK) };
        assert_eq!(&page[..12], b"\x07\x07\x07\x07\x07xy\x07\x07\x07\0\0");
        // A mapping stores past the end; growing shows zeros there.
        page[100] = 9;
        f.truncate(CHUNK64 + 200).unwrap();
        let mut b = [1u8; 1];
        f.read(CHUNK64 + 100, &mut b);
        assert_eq!(b, [0]);
        page[300] = 9;
        f.write(CHUNK64 + 400, b"z").unwrap();
        f.read(CHUNK64 + 300, &mut b);
        assert_eq!(b, [0], "write past a gap");
        assert_eq!(f.page_addr(CHUNK64).unwrap(), Some((p1, false)), "never moved");
    }

    #[test]
    fn sparse_write_far_past_end() {
        let mut f = FileData::new();
        f.write(0, b"head").unwrap();
        f.write(1 << 40, b"tail").unwrap();
        assert_eq!(f.size(), (1 << 40) + 4);
        assert_eq!(f.owned_pages(), 2);
        let mut b = [1u8; 8];
        assert_eq!(f.read(1 << 30, &mut b), 8);
        assert_eq!(b, [0; 8]);
        assert_eq!(f.read((1 << 40) - 4, &mut b), 8);
        assert_eq!(&b, b"\0\0\0\0tail");
        assert_eq!(f.read((1 << 40) + 4, &mut b), 0);
        assert_eq!(f.write(MAX_FILE_SIZE, b"x"), Err(Errno::EFBIG));
    }

    /// Recovery's handle ([`Mirror`]) references the file's pages; its
    /// calls keep its page list and size in step with the file's without
    /// copying a byte, through writes, truncation, holes and pages put
    /// between others, and an emptied handle serves another file.
    #[test]
    fn a_mirror_follows_the_file_by_reference() {
        let same = |h: &Mirror, f: &FileData| {
            let g = h.to_file();
            assert_eq!(all(&g), all(f));
            assert_eq!(h.owned_pages(), f.owned_pages());
            for (p, c) in &f.chunks {
                assert!(g.chunks[p].same(c), "page {p} is the file's own");
            }
        };
        let mut f = FileData::from_base(leak(vec![3u8; CHUNK + 7]));
        f.write(5, b"abc").unwrap();
        let mut h = Mirror::default();
        f.mirror_into(&mut h);
        same(&h, &f);
        // A write past a hole, then a truncation and a rewrite in one call.
        f.write(5 * CHUNK64 + 1, b"far").unwrap();
        h.write(&f, 5 * CHUNK64 + 1, 3);
        same(&h, &f);
        f.truncate(CHUNK64 + 2).unwrap();
        f.write(3 * CHUNK64, b"again").unwrap();
        h.truncate(&f, CHUNK64 + 2);
        h.write(&f, 3 * CHUNK64, 5);
        same(&h, &f);
        // Pages put between and before others, back to front.
        for p in [2u64, 1, 0, 4] {
            f.write(p * CHUNK64 + 9, b"mid").unwrap();
            h.write(&f, p * CHUNK64 + 9, 3);
            same(&h, &f);
        }
        // Pages the file no longer has in a range brought in step are
        // dropped from the handle too.
        let mut t = FileData::new();
        t.write(0, &[1; 4 * CHUNK]).unwrap();
        let mut k = Mirror::default();
        t.mirror_into(&mut k);
        t.truncate(CHUNK64).unwrap();
        k.write(&t, 0, 4 * CHUNK64);
        same(&k, &t);
        // Emptied, it serves a new file.
        h.clear();
        let mut n = FileData::new();
        n.mirror_into(&mut h);
        for p in [0u64, 1, 2] {
            n.write(p * CHUNK64, &[7; CHUNK]).unwrap();
            h.write(&n, p * CHUNK64, CHUNK64);
        }
        same(&h, &n);
        // Bytes a half-done write left past the logged size: the file
        // made from the handle has them zeroed in the shared last page.
        n.truncate(2 * CHUNK64 + 5).unwrap();
        h.truncate(&n, 2 * CHUNK64 + 5);
        let size = n.size();
        n.write(size, b"zz").unwrap();
        let g = h.to_file();
        assert_eq!(g.size(), size);
        let mut b = [9u8; 2];
        n.read(size, &mut b);
        assert_eq!(b, [0, 0]);
    }
}
