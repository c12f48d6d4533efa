//! The root file-system archive (docs/design.md "Tenders and hypercalls"; read by the kernel's `ramfs`).
//!
//! `shoal run --fs DIR` packs `DIR` into one archive; the tender maps it
//! read-only into guest memory and tells the kernel where it is
//! (`BootInfo::fs_archive_addr`). The kernel's `ramfs` serves its files and
//! keeps writes in memory (copy-on-write).
//!
//! The reader is `no_std` and validates everything before handing anything
//! out: the archive is produced by the host, but the kernel still never
//! trusts an offset it has not checked. The writer (feature `std`) packs a
//! host directory.
//!
//! # Format (all integers little-endian)
//!
//! ```text
//! header   magic "SHOALFS1" | version u32 | count u32 | strings_off u64 | strings_len u64
//! entries  count × { path_off u32 | path_len u32 | kind u32 | mode u32 | data_off u64 | size u64 }
//! strings  the paths, relative, '/'-separated, no leading '/', no "." or ".." parts
//! data     file contents and symlink targets, each 8-byte aligned
//! ```
//! Entries are sorted by path, and every parent directory of an entry is an
//! entry itself (listed before it).
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

#[cfg(feature = "alloc")]
mod encode;
#[cfg(feature = "alloc")]
pub use encode::{encode, Item, TooLarge};
#[cfg(feature = "std")]
mod writer;
#[cfg(feature = "std")]
pub use writer::{pack_dir, pack_with_volume, PackError};

/// First bytes of every archive.
pub const MAGIC: [u8; 8] = *b"SHOALFS1";
/// Version of the format this crate reads and writes.
pub const VERSION: u32 = 1;
/// Size of the header.
pub const HEADER_LEN: usize = 32;
/// Size of one entry.
pub const ENTRY_LEN: usize = 32;

/// What an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file; its data is the contents.
    File,
    /// A directory; no data.
    Dir,
    /// A symbolic link; its data is the target.
    Symlink,
}

impl Kind {
    fn from_u32(v: u32) -> Option<Kind> {
        match v {
            1 => Some(Kind::File),
            2 => Some(Kind::Dir),
            3 => Some(Kind::Symlink),
            _ => None,
        }
    }

    /// The number stored in the archive.
    pub fn to_u32(self) -> u32 {
        match self {
            Kind::File => 1,
            Kind::Dir => 2,
            Kind::Symlink => 3,
        }
    }
}

/// Why an archive was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchiveError {
    /// Shorter than its header or than what the header announces.
    Truncated,
    /// Does not start with [`MAGIC`].
    BadMagic,
    /// Written in another format version.
    BadVersion(u32),
    /// Entry `n` points outside the archive or has an invalid kind or path.
    BadEntry(u32),
    /// Entries are not strictly sorted, or a parent directory is missing.
    BadOrder(u32),
}

impl core::fmt::Display for ArchiveError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ArchiveError::Truncated => write!(f, "the file-system archive is truncated"),
            ArchiveError::BadMagic => write!(f, "the file-system archive has a wrong magic number"),
            ArchiveError::BadVersion(v) => {
                write!(f, "the file-system archive has format version {v}, expected {VERSION}")
            }
            ArchiveError::BadEntry(n) => write!(f, "entry {n} of the file-system archive is invalid"),
            ArchiveError::BadOrder(n) => {
                write!(f, "entry {n} of the file-system archive is out of order or lacks its parent")
            }
        }
    }
}

/// One entry of a validated archive.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    /// Path relative to the root, e.g. `b"etc/motd"`.
    pub path: &'a [u8],
    /// What the entry is.
    pub kind: Kind,
    /// Permission bits (`0o7777` at most).
    pub mode: u32,
    /// File contents or link target (empty for directories).
    pub data: &'a [u8],
}

/// A validated archive borrowed from memory.
#[derive(Clone, Copy, Debug)]
pub struct Archive<'a> {
    bytes: &'a [u8],
    count: u32,
    strings_off: usize,
    strings_len: usize,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    let s = b.get(off..off.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_le_bytes(a))
}

fn valid_path(p: &[u8]) -> bool {
    !p.is_empty() && p.split(|&c| c == b'/').all(|part| !part.is_empty() && part != b"." && part != b".." && !part.contains(&0))
}

fn parent(p: &[u8]) -> Option<&[u8]> {
    p.iter().rposition(|&c| c == b'/').map(|i| &p[..i])
}

impl<'a> Archive<'a> {
    /// Checks `bytes` completely and returns the archive they hold.
    pub fn parse(bytes: &'a [u8]) -> Result<Archive<'a>, ArchiveError> {
        if bytes.len() < HEADER_LEN {
            return Err(ArchiveError::Truncated);
        }
        if bytes[0..8] != MAGIC {
            return Err(ArchiveError::BadMagic);
        }
        let version = u32_at(bytes, 8).ok_or(ArchiveError::Truncated)?;
        if version != VERSION {
            return Err(ArchiveError::BadVersion(version));
        }
        let count = u32_at(bytes, 12).ok_or(ArchiveError::Truncated)?;
        let strings_off = u64_at(bytes, 16).ok_or(ArchiveError::Truncated)?;
        let strings_len = u64_at(bytes, 24).ok_or(ArchiveError::Truncated)?;
        let entries_end = (count as usize).checked_mul(ENTRY_LEN).and_then(|n| n.checked_add(HEADER_LEN)).ok_or(ArchiveError::Truncated)?;
        if entries_end > bytes.len() {
            return Err(ArchiveError::Truncated);
        }
        let strings_off = usize::try_from(strings_off).map_err(|_| ArchiveError::Truncated)?;
        let strings_len = usize::try_from(strings_len).map_err(|_| ArchiveError::Truncated)?;
        let strings_end = strings_off.checked_add(strings_len).ok_or(ArchiveError::Truncated)?;
        if strings_off < entries_end || strings_end > bytes.len() {
            return Err(ArchiveError::Truncated);
        }
        let archive = Archive { bytes, count, strings_off, strings_len };
        let mut prev: Option<&[u8]> = None;
        for i in 0..count {
            let e = archive.decode(i).ok_or(ArchiveError::BadEntry(i))?;
            if let Some(p) = prev {
                if p >= e.path {
                    return Err(ArchiveError::BadOrder(i));
                }
            }
            if let Some(dir) = parent(e.path) {
                // Sorted order puts a parent before its children, so a
                // binary search over the entries before `i` finds it.
                match archive.find_in(dir, i) {
                    Some(d) if d.kind == Kind::Dir => {}
                    _ => return Err(ArchiveError::BadOrder(i)),
                }
            }
            prev = Some(e.path);
        }
        Ok(archive)
    }

    /// Decodes entry `i`, checking every offset; `None` if it is invalid.
    fn decode(&self, i: u32) -> Option<Entry<'a>> {
        let base = HEADER_LEN + (i as usize) * ENTRY_LEN;
        let path_off = u32_at(self.bytes, base)? as usize;
        let path_len = u32_at(self.bytes, base + 4)? as usize;
        let kind = Kind::from_u32(u32_at(self.bytes, base + 8)?)?;
        let mode = u32_at(self.bytes, base + 12)?;
        let data_off = usize::try_from(u64_at(self.bytes, base + 16)?).ok()?;
        let size = usize::try_from(u64_at(self.bytes, base + 24)?).ok()?;
        if path_off.checked_add(path_len)? > self.strings_len || mode > 0o7777 {
            return None;
        }
        let path_start = self.strings_off + path_off;
        let path = &self.bytes[path_start..path_start + path_len];
        if !valid_path(path) {
            return None;
        }
        let data = self.bytes.get(data_off..data_off.checked_add(size)?)?;
        if kind == Kind::Dir && size != 0 {
            return None;
        }
        Some(Entry { path, kind, mode, data })
    }

    fn find_in(&self, path: &[u8], below: u32) -> Option<Entry<'a>> {
        let (mut lo, mut hi) = (0u32, below);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let e = self.decode(mid)?;
            match e.path.cmp(path) {
                core::cmp::Ordering::Equal => return Some(e),
                core::cmp::Ordering::Less => lo = mid + 1,
                core::cmp::Ordering::Greater => hi = mid,
            }
        }
        None
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether the archive has no entries.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Entry `i` (in path order).
    pub fn entry(&self, i: usize) -> Option<Entry<'a>> {
        if i >= self.count as usize {
            return None;
        }
        // Validated by `parse`.
        self.decode(i as u32)
    }

    /// The entry at `path` (relative, no leading '/').
    pub fn find(&self, path: &[u8]) -> Option<Entry<'a>> {
        self.find_in(path, self.count)
    }

    /// All entries in path order.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'a>> + '_ {
        (0..self.count as usize).filter_map(move |i| self.entry(i))
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;

    #[test]
    fn packs_and_reads_a_directory() {
        let dir = std::env::temp_dir().join(format!("shoal-archive-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("etc/sub")).unwrap();
        std::fs::write(dir.join("etc/motd"), b"hello\n").unwrap();
        std::fs::write(dir.join("etc/sub/empty"), b"").unwrap();
        std::fs::write(dir.join("top"), vec![7u8; 10000]).unwrap();
        std::os::unix::fs::symlink("etc/motd", dir.join("link")).unwrap();
        let bytes = pack_dir(&dir).unwrap();
        let a = Archive::parse(&bytes).unwrap();
        let motd = a.find(b"etc/motd").unwrap();
        assert_eq!(motd.kind, Kind::File);
        assert_eq!(motd.data, b"hello\n");
        assert_eq!(a.find(b"etc").unwrap().kind, Kind::Dir);
        assert_eq!(a.find(b"link").unwrap().data, b"etc/motd");
        assert_eq!(a.find(b"top").unwrap().data.len(), 10000);
        assert!(a.find(b"nothing").is_none());
        assert_eq!(a.entries().count(), 6);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A directory swapped for a symlink to a directory outside the tree
    /// while packing (`renameat2(RENAME_EXCHANGE)` in a loop, as a process
    /// in a container could do during `shoal-oci create`) never makes the
    /// packer read the outside file: each pack either stores what it
    /// opened or fails.
    #[test]
    fn a_symlink_swapped_in_while_packing_is_not_followed() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let base = std::env::temp_dir().join(format!("shoal-archive-swap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (root, outside) = (base.join("root"), base.join("outside"));
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("d/f"), b"inside").unwrap();
        std::fs::write(outside.join("f"), b"SECRET").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("x")).unwrap();
        let stop = AtomicBool::new(false);
        let (mut packed, mut failed) = (0, 0);
        std::thread::scope(|s| {
            s.spawn(|| {
                let d = std::ffi::CString::new(root.join("d").as_os_str().as_encoded_bytes()).unwrap();
                let x = std::ffi::CString::new(root.join("x").as_os_str().as_encoded_bytes()).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: two valid paths; renameat2 takes no other pointers.
                    unsafe { libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, d.as_ptr(), libc::AT_FDCWD, x.as_ptr(), libc::RENAME_EXCHANGE) };
                }
            });
            let t0 = std::time::Instant::now();
            while t0.elapsed() < std::time::Duration::from_secs(3) {
                match pack_dir(&root) {
                    Ok(bytes) => {
                        packed += 1;
                        let a = Archive::parse(&bytes).unwrap();
                        let leaked = a.entries().find(|e| e.data == b"SECRET").map(|e| String::from_utf8_lossy(e.path).into_owned());
                        if let Some(path) = leaked {
                            stop.store(true, Ordering::Relaxed);
                            panic!("the packer followed a symlink out of the tree: {path} holds the outside file");
                        }
                    }
                    Err(_) => failed += 1,
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        eprintln!("{packed} packs, {failed} refused (the tree changed under them)");
        assert!(packed > 0, "no pack succeeded in 3 s");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn rejects_damage() {
        assert_eq!(Archive::parse(b"short").unwrap_err(), ArchiveError::Truncated);
        let mut bad = vec![0u8; 64];
        assert_eq!(Archive::parse(&bad).unwrap_err(), ArchiveError::BadMagic);
        bad[0..8].copy_from_slice(&MAGIC);
        bad[8] = 9;
        assert_eq!(Archive::parse(&bad).unwrap_err(), ArchiveError::BadVersion(9));
        bad[8] = 1;
        bad[12] = 0xff; // 255 entries in a 64-byte archive
        assert_eq!(Archive::parse(&bad).unwrap_err(), ArchiveError::Truncated);
    }

    #[test]
    fn every_truncation_and_bit_flip_is_refused_or_valid() {
        let dir = std::env::temp_dir().join(format!("shoal-archive-flip-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("d")).unwrap();
        std::fs::write(dir.join("d/f"), b"data").unwrap();
        let bytes = pack_dir(&dir).unwrap();
        for n in 0..bytes.len() {
            let _ = Archive::parse(&bytes[..n]);
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                if let Ok(a) = Archive::parse(&b) {
                    for e in a.entries() {
                        assert!(valid_path(e.path));
                    }
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(all(test, feature = "std"))]
mod volume_tests {
    use super::*;

    #[test]
    fn a_volume_replaces_what_the_root_has_at_its_guest_path() {
        let base = std::env::temp_dir().join(format!("shoal-archive-vol-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (root, host) = (base.join("root"), base.join("host"));
        std::fs::create_dir_all(root.join("data/old")).unwrap();
        std::fs::write(root.join("etc"), b"x").unwrap();
        std::fs::create_dir_all(host.join("sub")).unwrap();
        std::fs::write(host.join("sub/n"), b"3").unwrap();
        let bytes = pack_with_volume(Some(&root), &host, "/data/v").unwrap();
        let a = Archive::parse(&bytes).unwrap();
        let paths: Vec<&[u8]> = a.entries().map(|e| e.path).collect();
        assert_eq!(paths, [&b"data"[..], b"data/old", b"data/v", b"data/v/sub", b"data/v/sub/n", b"etc"]);
        assert_eq!(a.find(b"data/v/sub/n").unwrap().data, b"3");
        let bytes = pack_with_volume(Some(&root), &host, "/data").unwrap();
        assert!(Archive::parse(&bytes).unwrap().find(b"data/old").is_none(), "the root's tree at the guest path is replaced");
        assert!(matches!(pack_with_volume(Some(&root), &host, "/etc/v"), Err(PackError::VolumeBlocked(p)) if p == "/etc"));
        for bad in ["data", "/", "/a/../b", "/a//b", "/a/"] {
            assert!(matches!(pack_with_volume(None, &host, bad), Err(PackError::BadGuestPath(_))), "{bad}");
        }
        let e = Archive::parse(&pack_with_volume(None, &host, "/v").unwrap()).unwrap().entries().count();
        assert_eq!(e, 3);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
