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

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
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
    chunks: BTreeMap<u64, Box<[u8]>>,
    /// File size in bytes.
    size: u64,
}

fn new_chunk() -> Result<Box<[u8]>, Errno> {
    let mut v: Vec<u8> = Vec::new();
    v.try_reserve_exact(CHUNK).map_err(|_| Errno::ENOSPC)?;
    v.resize(CHUNK, 0);
    Ok(v.into_boxed_slice())
}

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
                let from_base = if pos < self.base_len {
                    core::cmp::min(len as u64, self.base_len - pos) as usize
                } else {
                    0
                };
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

    /// The owned chunk for `page`, creating it (copy of the base page) if
    /// needed.
    fn chunk_mut(&mut self, page: u64) -> Result<&mut Box<[u8]>, Errno> {
        if !self.chunks.contains_key(&page) {
            let mut c = new_chunk()?;
            let start = page * CHUNK64;
            if start < self.base_len {
                let len = core::cmp::min(CHUNK64, self.base_len - start) as usize;
                let s = start as usize;
                c[..len].copy_from_slice(&self.base[s..s + len]);
            }
            self.chunks.insert(page, c);
        }
        Ok(self.chunks.get_mut(&page).expect("chunk just inserted"))
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
        }
        self.size = size;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
