//! The library pool (docs/design.md "Memory and sharing", memory mode `pool`; Spacer-Δ's "custom
//! loader with a shared library pool").
//!
//! The read-only pages (code and rodata) of each library version are kept
//! once, in files of up to [`PAGES_PER_FILE`] pages of one region under the
//! pool directory (`/dev/shm/shoal-pool/` unless `SHOAL_POOL_DIR` says
//! otherwise), named `NAME@VERSION-text-HASH` or `NAME@VERSION-rodata-HASH`
//! where `HASH` is derived from the page hashes of the image manifest
//! (content addressed: the same pages give the same name, in whatever image
//! they appear). A pool file holds its pages exactly as the loader would
//! put them in guest memory. Code and read-only data are separate files,
//! and regions are cut into runs, so that what is the same stays shared
//! when a few pages differ (the `aslr` policy's absolute pointers).
//!
//! At load, a tender maps each pool file `MAP_PRIVATE|MAP_FIXED` at the
//! library's guest address ([`PoolPlan`]); the frames come from the page
//! cache of the one shm file, so every instance that maps it shares them
//! from its first instruction, without a scanner. Writable sections are
//! still copied ([`crate::load_segments_except`]).
//!
//! # Threat model: pool files are not trusted
//!
//! `/dev/shm` is writable by every local user. What someone who can write
//! `/dev/shm` (but is not our user or root) could try, and what stops it:
//!
//! - *squat the pool directory* (create `/dev/shm/shoal-pool` first, or a
//!   symlink there, or one of its parents when `SHOAL_POOL_DIR` points
//!   elsewhere): the directory must be a real directory (not a symlink),
//!   owned by our effective uid, and not writable by group or others, and
//!   so must every directory on its path, unless sticky like `/dev/shm`
//!   ([`crate::hostdir`]); otherwise the pool refuses to use it;
//! - *plant or replace a pool file*: impossible in a directory only we can
//!   write; files are opened with `O_NOFOLLOW`, must be regular files owned
//!   by us with no write permission bit (mode 0444), one link, and of the
//!   exact size the manifest implies;
//! - *modify a pool file after it was checked*: needs write permission on
//!   the inode, which only its owner (who can `chmod` it) has — and a
//!   process of our own uid can ptrace the tender anyway, so it is outside
//!   what the pool can defend against; so is root.
//!
//! Besides these checks, **every page is verified when an instance maps
//! it**: the pool file's bytes must equal, byte for byte, the bytes the
//! image itself would load at that address (the bytes the manifest's
//! SHA-256 page hashes describe). So pool mode can never run a byte that
//! `copy` mode would not. Comparing with the image's bytes, which the
//! tender has in memory anyway, is cheaper than hashing the pages (a
//! `memcmp` of a few MiB, about 0.3 ms, against about 2 ms for SHA-256 with
//! SHA-NI) and needs no trust in the manifest: a lying manifest can only
//! make the check fail or pool fewer pages. ([`verify_cost`] measures both.)
//! A tampered, truncated or missing pool file is refused with a one-line
//! error ([`PoolError`]); a tender falls back to `copy` only when asked to.
//!
//! Pool files are written atomically: to a temporary file in the pool
//! directory, `fchmod` 0444, then `rename` over the final name. A pool file
//! may be removed (`shoal pool gc`) while instances map it: their mappings
//! keep the inode alive.

use crate::image::{page_down, Image};
use sha2::{Digest, Sha256};
use shoal_manifest::{Manifest, RegionKind, PAGE};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The pool directory when `SHOAL_POOL_DIR` is not set.
pub const DEFAULT_DIR: &str = "/dev/shm/shoal-pool";

/// Why a pool operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// A file operation failed.
    #[error("pool: cannot access {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The image's manifest is missing or invalid.
    #[error("pool: {0}")]
    Manifest(#[from] shoal_manifest::ManifestError),
    /// The manifest does not belong to the image.
    #[error("pool: the manifest beside {0} belongs to another image (its image_sha256 differs): rebuild the image, or copy it together with its manifest")]
    ManifestMismatch(PathBuf),
    /// The image itself cannot be loaded (its own error says why, with its
    /// path).
    #[error("pool: {0}")]
    Image(#[from] crate::image::ImageError),
    /// The manifest describes pages the image does not have.
    #[error("pool: the manifest of {image} describes {what}, which the image does not match")]
    BadRegion {
        /// The image.
        image: PathBuf,
        /// Which region.
        what: String,
    },
    /// The pool directory cannot be trusted.
    #[error("pool: refusing {path}: {reason}")]
    Unsafe {
        /// The directory or file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A library of the image is not in the pool.
    #[error("pool: {lib} is not in the pool ({path} is missing); run `shoal pool add IMAGE`")]
    Missing {
        /// `NAME@VERSION`.
        lib: String,
        /// The expected pool file.
        path: PathBuf,
    },
    /// A pool file has the wrong size.
    #[error("pool: {path} is truncated or corrupt: {size} bytes, expected {expected}")]
    Truncated {
        /// The pool file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The size the manifest implies.
        expected: u64,
    },
    /// A pool file's page differs from the image's.
    #[error("pool: {path} has been tampered with: its page for guest address {addr:#x} differs from the image")]
    Tampered {
        /// The pool file.
        path: PathBuf,
        /// Guest address of the first differing page.
        addr: u64,
    },
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> PoolError + '_ {
    move |source| PoolError::Io { path: path.to_path_buf(), source }
}

/// One pool file of an image: a run of consecutive read-only pages of one
/// region (text or rodata) of one library version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolLib {
    /// `NAME@VERSION`.
    pub lib: String,
    /// The pool file name (`NAME@VERSION-{text,rodata}-HASH`).
    pub file_name: String,
    /// Guest address of the first page.
    pub addr: u64,
    /// Number of pages.
    pub pages: u64,
    /// Code (mapped executable) or read-only data.
    pub exec: bool,
}

impl PoolLib {
    /// Size of the pool file.
    pub fn size(&self) -> u64 {
        self.pages * PAGE
    }

    /// Guest addresses of the pages, in file order.
    fn page_addrs(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.pages).map(move |i| self.addr + i * PAGE)
    }

    /// Checks that the manifest's pages are read-only pages of `image`.
    fn check_read_only(&self, image: &Image, image_path: &Path) -> Result<(), PoolError> {
        match self.page_addrs().find(|&addr| !read_only_page(image, addr)) {
            Some(addr) => Err(PoolError::BadRegion { image: image_path.into(), what: format!("a read-only page of {} at {addr:#x}", self.lib) }),
            None => Ok(()),
        }
    }
}

/// Keeps only characters that are harmless in a file name.
fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || "._+-@".contains(c) { c } else { '_' }).collect()
}

/// Pages per pool file: each read-only region is pooled in runs of this
/// many pages (the last run shorter), each its own content-addressed file.
/// A region that differs between two images in one page then costs the
/// pool one more run, not one more copy of the region: under the `aslr`
/// policy read-only data holds absolute addresses, so a few pages of a
/// library's rodata differ per image while the rest is the same (8 SQLite
/// images: pool 7.5 MiB with one file per region, 5.8 MiB with runs of 8
/// pages, 4.6 MiB with single pages). Shorter runs share more but cost an
/// open, a check and a mapping each at start (8 pages: ~100 mappings for
/// a SQLite image; for the `delta` policy the pool is the same size either
/// way).
pub const PAGES_PER_FILE: u64 = 8;

/// Pages per pool file of library `name`: 1 for the trampoline tables
/// (`tpl`, and `tpl-LIB` under `aslr`), [`PAGES_PER_FILE`] otherwise. A
/// table is a few pages whose entries differ per image by design, but
/// whose pages of entries no version redefines are the same in every
/// image (`shoal_toolchain` groups entries by change history); in runs,
/// the one differing page made every image's run a file of its own (8
/// SQLite images: the table's first page, the same in all 8, was 8 pages
/// of the pool).
///
/// An unmodified executable's segments (library `exec`, made by
/// `shoal-exec`) go in runs of [`EXEC_PAGES_PER_FILE`]: they are one
/// program's pages at one address in every image made of it, not
/// versions of a library that differ here and there, and a large one
/// (Debian's `node` maps 80 MiB) in runs of 8 pages was more files than
/// an instance may map.
fn pages_per_file(name: &str) -> usize {
    if name == "tpl" || name.starts_with("tpl-") {
        1
    } else if name == "exec" {
        EXEC_PAGES_PER_FILE as usize
    } else {
        PAGES_PER_FILE as usize
    }
}

/// Pages per pool file of an executable's segments (2 MiB runs: `node`'s
/// 80 MiB are about 45 files, each opened, checked and mapped at start).
pub const EXEC_PAGES_PER_FILE: u64 = 512;

/// The read-only regions of `manifest`'s libraries, as pool entries: runs
/// of up to [`PAGES_PER_FILE`] pages of one region of one library version
/// (`NAME@VERSION-text-HASH`, `NAME@VERSION-rodata-HASH`; the hash covers
/// the run's page hashes, so identical runs share a file). Code and
/// read-only data are pooled separately because they do not always change
/// together: under the `aslr` policy a library's code is the same in every
/// image while its read-only data holds absolute addresses that differ.
pub fn pool_libs(manifest: &Manifest) -> Vec<PoolLib> {
    let mut out = Vec::new();
    for l in &manifest.libraries {
        let lib = format!("{}@{}", l.info.name, l.info.version);
        for r in &l.regions {
            if !matches!(r.kind, RegionKind::Text | RegionKind::Rodata) || r.page_hashes.is_empty() {
                continue;
            }
            let exec = r.kind == RegionKind::Text;
            let kind = if exec { "text" } else { "rodata" };
            let per_file = pages_per_file(&l.info.name);
            for (i, run) in r.page_hashes.chunks(per_file).enumerate() {
                let pages = run.len() as u64;
                let mut h = Sha256::new();
                h.update(b"shoal-pool-4\0");
                h.update(if exec { b"T" } else { b"R" });
                h.update(pages.to_le_bytes());
                for ph in run {
                    h.update(ph.0);
                }
                let mut digest = String::with_capacity(16);
                for b in h.finalize().iter().take(8) {
                    let _ = write!(digest, "{b:02x}");
                }
                out.push(PoolLib {
                    file_name: format!("{}-{kind}-{digest}", sanitize(&lib)),
                    lib: lib.clone(),
                    addr: page_down(r.start) + (i * per_file) as u64 * PAGE,
                    pages,
                    exec,
                });
            }
        }
    }
    out
}

/// Copies the page at guest address `addr` as the loader would put it in
/// memory (file bytes of the segment covering it, zeros elsewhere) into
/// `out`; false if no segment covers any of it. Reads only this page's
/// bytes from the image file.
fn image_page(image: &Image, addr: u64, out: &mut [u8]) -> std::io::Result<bool> {
    image_bytes(image, addr, &mut out[..PAGE as usize])?;
    Ok(image.segments().iter().any(|s| s.page_start() <= addr && addr < s.page_end()))
}

/// Pages [`Pool::verify`] compares at a time (64 KiB).
const VERIFY_CHUNK: u64 = 16;

/// The bytes the image loads at `[addr, addr + out.len())` (zero where no
/// segment's file bytes are), into `out`: one read per segment it meets.
fn image_bytes(image: &Image, addr: u64, out: &mut [u8]) -> std::io::Result<()> {
    out.fill(0);
    let end = addr + out.len() as u64;
    for s in image.segments() {
        let lo = addr.max(s.vaddr);
        let hi = end.min(s.vaddr + s.filesz);
        if lo < hi {
            image.read_segment(s, lo - s.vaddr, &mut out[(lo - addr) as usize..(hi - addr) as usize])?;
        }
    }
    Ok(())
}

/// Whether a page of the image lies in a segment without write permission
/// (only such pages may come from the pool).
fn read_only_page(image: &Image, addr: u64) -> bool {
    image.segments().iter().any(|s| !s.perms.write && s.page_start() <= addr && addr < s.page_end())
}

/// Whether `manifest` was written for the image at `path` (its hash).
fn describes(manifest: &Manifest, path: &Path) -> Result<bool, PoolError> {
    Ok(manifest.describes(&std::fs::read(path).map_err(io_err(path))?))
}

/// A read-only view of a whole file (`mmap`), unmapped on drop.
struct FileMap {
    ptr: *mut u8,
    len: usize,
}

impl FileMap {
    fn new(fd: &OwnedFd, len: u64, path: &Path) -> Result<FileMap, PoolError> {
        Self::map(fd, len, path, 0)
    }
    fn map(fd: &OwnedFd, len: u64, path: &Path, flags: libc::c_int) -> Result<FileMap, PoolError> {
        if len == 0 {
            return Ok(FileMap { ptr: core::ptr::null_mut(), len: 0 });
        }
        let len = usize::try_from(len).map_err(|_| PoolError::Unsafe { path: path.into(), reason: "too large".into() })?;
        // SAFETY: a fresh shared read-only mapping of a file we opened; it
        // does not overlap anything Rust references.
        let p = unsafe { libc::mmap(core::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED | flags, fd.as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(io_err(path)(std::io::Error::last_os_error()));
        }
        Ok(FileMap { ptr: p.cast(), len })
    }
    /// Like [`FileMap::new`], with every page mapped at once
    /// (`MAP_POPULATE`) for a caller that reads them all.
    fn new_populated(fd: &OwnedFd, len: u64, path: &Path) -> Result<FileMap, PoolError> {
        Self::map(fd, len, path, libc::MAP_POPULATE)
    }
    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the mapping is `len` readable bytes and lives as long as
        // `self`. The file is ours and mode 0444 (checked before mapping), so
        // nobody but our own uid could change it underneath.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: our own mapping; `bytes()` borrows end before drop.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }
}

/// The library pool in a directory.
#[derive(Clone, Debug)]
pub struct Pool {
    dir: PathBuf,
}

/// What `Pool::add` did with one library.
#[derive(Clone, Debug)]
pub struct Added {
    /// `NAME@VERSION`.
    pub lib: String,
    /// The pool file.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Whether it was written now (false: it was there and intact).
    pub written: bool,
}

/// One file of the pool (`shoal pool ls`).
#[derive(Clone, Debug)]
pub struct Entry {
    /// File name.
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Processes that map it now.
    pub mapped_by: usize,
}

impl Pool {
    /// The pool in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Pool {
        Pool { dir: dir.into() }
    }

    /// The pool in `SHOAL_POOL_DIR`, or [`DEFAULT_DIR`].
    pub fn default_pool() -> Pool {
        Pool::new(std::env::var_os("SHOAL_POOL_DIR").map(PathBuf::from).unwrap_or_else(|| DEFAULT_DIR.into()))
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Checks that the directory is ours and only ours to write.
    fn check_dir(&self) -> Result<(), PoolError> {
        crate::hostdir::check_dir(&self.dir).map_err(Self::dir_err)
    }

    fn ensure_dir(&self) -> Result<(), PoolError> {
        crate::hostdir::ensure_dir(&self.dir, 0o755).map_err(Self::dir_err)
    }

    fn dir_err(e: crate::hostdir::HostDirError) -> PoolError {
        match e {
            crate::hostdir::HostDirError::Unsafe { path, reason } => PoolError::Unsafe { path, reason: reason.into() },
            crate::hostdir::HostDirError::Io { path, source } => PoolError::Io { path, source },
        }
    }

    /// Opens a pool file and checks what can be checked without reading it.
    fn open_checked(&self, lib: &PoolLib) -> Result<(OwnedFd, PathBuf), PoolError> {
        let path = self.dir.join(&lib.file_name);
        let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => PoolError::Missing { lib: lib.lib.clone(), path: path.clone() },
            _ => io_err(&path)(e),
        })?;
        let md = file.metadata().map_err(io_err(&path))?;
        let bad = |reason: &str| PoolError::Unsafe { path: path.clone(), reason: reason.into() };
        if !md.file_type().is_file() {
            return Err(bad("not a regular file"));
        }
        // SAFETY: geteuid has no preconditions.
        if md.uid() != unsafe { libc::geteuid() } {
            return Err(bad("owned by another user"));
        }
        if md.mode() & 0o222 != 0 {
            return Err(bad("writable (pool files are mode 0444)"));
        }
        if md.nlink() != 1 {
            return Err(bad("it has more than one link"));
        }
        if md.len() != lib.size() {
            return Err(PoolError::Truncated { path, size: md.len(), expected: lib.size() });
        }
        Ok((OwnedFd::from(file), path))
    }

    /// Checks every page of an opened pool file against the image.
    fn verify(lib: &PoolLib, fd: &OwnedFd, path: &Path, image: &Image, buf: &mut Vec<u8>) -> Result<(), PoolError> {
        // Every start verifies every pool page, so this is on the start
        // path: the pool file is mapped with its pages populated (one
        // system call, not a page fault per 16 pages) and the image is read
        // VERIFY_CHUNK pages at a time (not a `pread` per page).
        let map = FileMap::new_populated(fd, lib.size(), path)?;
        let bytes = map.bytes();
        buf.resize((lib.pages.min(VERIFY_CHUNK) * PAGE) as usize, 0);
        let mut done = 0u64;
        while done < lib.pages {
            let n = (lib.pages - done).min(VERIFY_CHUNK);
            let (addr, off, len) = (lib.addr + done * PAGE, (done * PAGE) as usize, (n * PAGE) as usize);
            let chunk = &mut buf[..len];
            image_bytes(image, addr, chunk).map_err(io_err(image.path()))?;
            match bytes.get(off..off + len) {
                Some(pooled) if pooled == &chunk[..] => {}
                // The first page that differs, for the message.
                _ => {
                    let bad = (0..n).find(|&i| {
                        let (a, b) = ((i * PAGE) as usize, ((i + 1) * PAGE) as usize);
                        bytes.get(off + a..off + b) != Some(&chunk[a..b])
                    });
                    return Err(PoolError::Tampered { path: path.to_path_buf(), addr: addr + bad.unwrap_or(0) * PAGE });
                }
            }
            done += n;
        }
        Ok(())
    }

    /// Whether a file of every pool entry of the image at `image_path` is
    /// in the pool (by name only: mapping them checks every page against
    /// the image, [`Pool::plan`]); false when its manifest cannot be read.
    /// Lets a start skip [`Pool::add`], which hashes the whole image (0.3 s
    /// of CPU for `node`'s 100 MB) and reads every pool file.
    pub fn holds(&self, image_path: &Path) -> bool {
        let Ok(manifest) = Manifest::read(&Manifest::path_for(image_path)) else { return false };
        pool_libs(&manifest).iter().all(|l| self.dir.join(&l.file_name).is_file())
    }

    /// Puts the read-only pages of every library version of `image` into
    /// the pool (files already there and intact are kept).
    pub fn add(&self, image_path: &Path) -> Result<Vec<Added>, PoolError> {
        let manifest = Manifest::read(&Manifest::path_for(image_path))?;
        if !describes(&manifest, image_path)? {
            return Err(PoolError::ManifestMismatch(image_path.to_path_buf()));
        }
        let image = Image::open(image_path)?;
        self.ensure_dir()?;
        let mut out = Vec::new();
        let mut page = vec![0u8; PAGE as usize];
        for lib in pool_libs(&manifest) {
            // Check the manifest against the image before writing anything.
            lib.check_read_only(&image, image_path)?;
            match self.open_checked(&lib).and_then(|(fd, path)| Self::verify(&lib, &fd, &path, &image, &mut Vec::new()).map(|_| path)) {
                Ok(path) => {
                    out.push(Added { lib: lib.lib.clone(), path, bytes: lib.size(), written: false });
                    continue;
                }
                Err(PoolError::Missing { .. }) => {}
                Err(PoolError::Io { path, source }) => return Err(PoolError::Io { path, source }),
                Err(_) => {} // a bad file: replaced below
            }
            let path = self.dir.join(&lib.file_name);
            let tmp = self.dir.join(format!(".tmp-{}-{}", std::process::id(), lib.file_name));
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp)
                .map_err(io_err(&tmp))?;
            let write = |f: &mut File, page: &mut Vec<u8>| -> Result<(), PoolError> {
                for addr in lib.page_addrs() {
                    image_page(&image, addr, page).map_err(io_err(image_path))?;
                    f.write_all(page).map_err(io_err(&tmp))?;
                }
                f.set_permissions(std::fs::Permissions::from_mode(0o444)).map_err(io_err(&tmp))?;
                Ok(())
            };
            if let Err(e) = write(&mut f, &mut page) {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
            drop(f);
            std::fs::rename(&tmp, &path).map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                io_err(&path)(e)
            })?;
            out.push(Added { lib: lib.lib.clone(), path, bytes: lib.size(), written: true });
        }
        Ok(out)
    }

    /// The pool's files, with how many processes map each.
    pub fn list(&self) -> Result<Vec<Entry>, PoolError> {
        if !self.dir.exists() {
            return Ok(Vec::new());
        }
        self.check_dir()?;
        let mapped = self.mapped_counts();
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir).map_err(io_err(&self.dir))? {
            let e = e.map_err(io_err(&self.dir))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let bytes = e.metadata().map(|m| m.len()).unwrap_or(0);
            let mapped_by = mapped.get(&self.dir.join(&name)).copied().unwrap_or(0);
            out.push(Entry { name, bytes, mapped_by });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// How many processes map each file of the pool (from `/proc/*/maps`).
    fn mapped_counts(&self) -> BTreeMap<PathBuf, usize> {
        let mut counts = BTreeMap::new();
        let Ok(procs) = std::fs::read_dir("/proc") else { return counts };
        for p in procs.flatten() {
            if !p.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let Ok(maps) = std::fs::read_to_string(p.path().join("maps")) else { continue };
            let mut seen = std::collections::BTreeSet::new();
            for line in maps.lines() {
                if let Some(i) = line.find(self.dir.to_str().unwrap_or("\0")) {
                    let path = line[i..].trim_end_matches(" (deleted)");
                    seen.insert(PathBuf::from(path));
                }
            }
            for s in seen {
                *counts.entry(s).or_insert(0) += 1;
            }
        }
        counts
    }

    /// Removes the pool files no process maps, and leftover temporary
    /// files; returns what was removed. Instances that map a removed file
    /// keep it alive; later instances need `shoal pool add` again.
    pub fn gc(&self) -> Result<Vec<Entry>, PoolError> {
        let mut removed = Vec::new();
        for e in self.list()? {
            if e.mapped_by == 0 {
                let path = self.dir.join(&e.name);
                std::fs::remove_file(&path).map_err(io_err(&path))?;
                removed.push(e);
            }
        }
        Ok(removed)
    }

    /// Opens and verifies the pool files of `image`'s libraries; the
    /// result says where to map them. The manifest next to the image only
    /// names the libraries and their pages: every page is compared with the
    /// image's own bytes.
    pub fn plan(&self, image: &Image) -> Result<PoolPlan, PoolError> {
        let manifest = Manifest::read(&Manifest::path_for(image.path()))?;
        self.plan_with(image, &manifest).map_err(|e| match e {
            // A pool file that is missing or differs may only mean that the
            // manifest beside the image is another image's (copied without
            // its image, or left from an older build): say that instead.
            // Hashing the image costs milliseconds, so only on this path.
            PoolError::Missing { .. } | PoolError::Tampered { .. } | PoolError::Truncated { .. } | PoolError::BadRegion { .. }
                if describes(&manifest, image.path()).is_ok_and(|d| !d) =>
            {
                PoolError::ManifestMismatch(image.path().to_path_buf())
            }
            e => e,
        })
    }

    fn plan_with(&self, image: &Image, manifest: &Manifest) -> Result<PoolPlan, PoolError> {
        let t0 = std::time::Instant::now();
        let libs = pool_libs(manifest);
        if !self.dir.exists() {
            if let Some(l) = libs.first() {
                return Err(PoolError::Missing { lib: l.lib.clone(), path: self.dir.join(&l.file_name) });
            }
        }
        self.check_dir()?;
        let mut plan = PoolPlan::default();
        let mut buf = Vec::new();
        for lib in libs {
            lib.check_read_only(image, image.path())?;
            let (fd, path) = self.open_checked(&lib)?;
            Self::verify(&lib, &fd, &path, image, &mut buf)?;
            let idx = plan.files.len();
            plan.maps.push(PoolMap { file: idx, addr: lib.addr, len: lib.size(), exec: lib.exec });
            plan.bytes += lib.size();
            plan.files.push(fd);
        }
        plan.verify_time = t0.elapsed();
        Ok(plan)
    }
}

/// One mapping of a pool file into guest memory.
#[derive(Clone, Copy, Debug)]
pub struct PoolMap {
    /// Index into [`PoolPlan::files`].
    pub file: usize,
    /// Guest address (page aligned).
    pub addr: u64,
    /// Length in bytes (whole pages): the whole file.
    pub len: u64,
    /// Code (R+X) or rodata (R).
    pub exec: bool,
}

/// The verified pool files of one image and where they go.
#[derive(Debug, Default)]
pub struct PoolPlan {
    /// Open pool files (read-only, verified).
    pub files: Vec<OwnedFd>,
    /// Where each goes, in address order of the manifest.
    pub maps: Vec<PoolMap>,
    /// Bytes mapped from the pool.
    pub bytes: u64,
    /// Time spent opening and verifying.
    pub verify_time: std::time::Duration,
}

impl PoolPlan {
    /// The guest ranges the pool provides, sorted and merged (what
    /// [`crate::load_segments_except`] must not copy).
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self.maps.iter().map(|m| (m.addr, m.addr + m.len)).collect();
        v.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (s, e) in v {
            match out.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => out.push((s, e)),
            }
        }
        out
    }

    /// Maps every pool file at `host_base + guest address` with
    /// `MAP_PRIVATE|MAP_FIXED` and the protection `prot(exec)` gives
    /// (spt: R+X for code, R for rodata; hvt: R+W, so that a host write —
    /// a hypercall result the guest pointed at its own rodata — copies the
    /// page privately as in `copy` mode instead of faulting; KVM's read
    /// faults do not break the sharing). Does not allocate.
    ///
    /// # Safety
    /// `[host_base + addr, +len)` of every mapping must lie in a mapping the
    /// caller owns and that no Rust reference points into (guest memory).
    pub unsafe fn map_into(&self, host_base: u64, prot: impl Fn(bool) -> libc::c_int) -> Result<(), (u64, i32)> {
        for m in &self.maps {
            let at = host_base + m.addr;
            // SAFETY: the caller vouches that the range is its own guest
            // memory; MAP_FIXED replaces exactly that range.
            let p = unsafe {
                libc::mmap(
                    at as usize as *mut libc::c_void,
                    m.len as usize,
                    prot(m.exec),
                    libc::MAP_PRIVATE | libc::MAP_FIXED,
                    self.files[m.file].as_raw_fd(),
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err((m.addr, std::io::Error::last_os_error().raw_os_error().unwrap_or(0)));
            }
        }
        Ok(())
    }
}

/// Measures, for `image`, what verifying its pool pages costs with the
/// scheme used (comparison with the image) and with SHA-256 against the
/// manifest's hashes: (compare, hash, bytes).
pub fn verify_cost(pool: &Pool, image: &Image) -> Result<(std::time::Duration, std::time::Duration, u64), PoolError> {
    let plan = pool.plan(image)?;
    let manifest = Manifest::read(&Manifest::path_for(image.path()))?;
    let t0 = std::time::Instant::now();
    let mut n = 0u64;
    for (lib, fd) in pool_libs(&manifest).iter().zip(&plan.files) {
        let map = FileMap::new(fd, lib.size(), Path::new("pool file"))?;
        for chunk in map.bytes().chunks(PAGE as usize) {
            n ^= Sha256::digest(chunk)[0] as u64;
        }
    }
    let hash = t0.elapsed();
    std::hint::black_box(n);
    Ok((plan.verify_time, hash, plan.bytes))
}

/// What a tender does for memory mode `pool`: plans the pool mappings of
/// `image` from `pool` (or the default pool). On a pool error it falls back
/// to `copy` only if `fallback` is set, returning the error as a warning
/// beside `None`; otherwise the error ends the run before anything started.
pub fn prepare(pool: Option<&Pool>, fallback: bool, image: &Image) -> Result<(Option<PoolPlan>, Option<PoolError>), PoolError> {
    let default;
    let pool = match pool {
        Some(p) => p,
        None => {
            default = Pool::default_pool();
            &default
        }
    };
    match pool.plan(image) {
        Ok(plan) => Ok((Some(plan), None)),
        Err(e) if fallback => Ok((None, Some(e))),
        Err(e) => Err(e),
    }
}
