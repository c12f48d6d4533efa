//! Unmodified Linux x86-64 executables as shoal instances.
//!
//! An executable given to `shoal run` is untrusted input. This crate reads
//! it ([`analyse`]): it accepts a statically linked `ET_EXEC`, a
//! static-PIE (`ET_DYN` without `PT_INTERP`) or a dynamically linked one
//! (`PT_INTERP`: the kernel loads the interpreter from the instance's file
//! system at start, `kernel/syscall/src/exec.rs`), refuses anything whose
//! segments overlap, reach into the addresses shoal keeps for itself, are
//! absurdly large or whose entry point is not in its code, and finds every
//! `syscall` instruction with a real decoder. It then builds an instance
//! image ([`combine`]): the shoal kernel's image (a kernel with no
//! application) plus the executable's segments at their link addresses (a
//! PIE at [`PIE_BASE`]), in which the instructions right before a
//! `syscall` (`mov eax, imm32`, or moves such as Go's `Syscall6` makes
//! into the argument registers, when they can run elsewhere unchanged and
//! nothing branches between them) are replaced by a `jmp` to a per-site
//! trampoline that runs them and enters the kernel's
//! system-call entry the way the CPU's `syscall` would (return address in
//! `rcx`, nothing pushed on the program's stack, whose red zone and small
//! goroutine stacks belong to the program). Every other site keeps its
//! `syscall` and takes the tender's trap path. [`prepare`] caches the
//! built image by the content of both inputs, so a second start does no
//! work; [`cache`] keeps that cache within a size bound.

pub mod cache;
mod combine;
mod scan;

pub use combine::{combine, KernelImage};
pub use scan::{analyse, Executable, Kind, Segment, Site};

use std::path::{Path, PathBuf};

/// Where a static-PIE is loaded: a fixed base per file, so that its
/// rewritten pages are the same in every instance.
pub const PIE_BASE: u64 = 0x40_0000;

/// Lowest address an executable may use: everything below belongs to
/// shoal (the tender's pages, the boot information, the kernel image).
pub const LOWEST_ADDRESS: u64 = 0x40_0000;

/// Most address space an executable's segments may span (its largest
/// address minus its lowest).
pub const MAX_SPAN: u64 = 1 << 30;

/// Bytes of one site's trampoline.
pub const TRAMPOLINE_SIZE: u64 = 32;

/// What went wrong with an executable (one sentence each).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not an ELF file.
    #[error("{path} is not an ELF executable")]
    NotElf {
        /// The file.
        path: PathBuf,
    },
    /// An ELF file for another machine or class.
    #[error("{path} is {found}; shoal runs 64-bit little-endian x86-64 executables")]
    WrongArch {
        /// The file.
        path: PathBuf,
        /// What it is.
        found: String,
    },
    /// An object file or something else that is not an executable.
    #[error("{path} is {found}, not an executable")]
    NotExecutable {
        /// The file.
        path: PathBuf,
        /// What it is.
        found: &'static str,
    },
    /// The headers point outside the file or are inconsistent.
    #[error("{path} is truncated or corrupt: {what}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// A loadable segment that makes no sense.
    #[error("{path} has an invalid segment {index}: {reason}")]
    BadSegment {
        /// The file.
        path: PathBuf,
        /// Its program header index.
        index: usize,
        /// Why.
        reason: String,
    },
    /// Two segments share a page.
    #[error("{path} has overlapping segments {first} and {second} (both use the page at {page:#x})")]
    Overlap {
        /// The file.
        path: PathBuf,
        /// One program header index.
        first: usize,
        /// The other.
        second: usize,
        /// The shared page.
        page: u64,
    },
    /// A segment below [`LOWEST_ADDRESS`].
    #[error("{path} has segment {index} at {vaddr:#x}, inside the addresses shoal keeps for itself (below {LOWEST_ADDRESS:#x})")]
    OverShoal {
        /// The file.
        path: PathBuf,
        /// Its program header index.
        index: usize,
        /// Its address.
        vaddr: u64,
    },
    /// The segments span more than [`MAX_SPAN`].
    #[error("{path} spans {span:#x} bytes of address space; at most {MAX_SPAN:#x} are accepted")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its span.
        span: u64,
    },
    /// A segment both writable and executable.
    #[error("{path} has a segment that is both writable and executable (segment {index} at {vaddr:#x}); shoal refuses such executables")]
    WritableAndExecutable {
        /// The file.
        path: PathBuf,
        /// Its program header index.
        index: usize,
        /// Its address.
        vaddr: u64,
    },
    /// No loadable segment.
    #[error("{path} has no loadable segment")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The entry point is not in an executable segment's file bytes.
    #[error("{path} has its entry point {entry:#x} outside its code")]
    BadEntry {
        /// The file.
        path: PathBuf,
        /// The entry point (after the PIE base).
        entry: u64,
    },
    /// The program headers are not in any loaded segment (libc finds
    /// its TLS through them).
    #[error("{path} does not load its own program headers")]
    NoPhdrs {
        /// The file.
        path: PathBuf,
    },
    /// Something the kernel image lacks (a shoal build problem).
    #[error("the kernel image {path} cannot take an executable: {what}")]
    Kernel {
        /// The kernel image.
        path: PathBuf,
        /// What is missing.
        what: String,
    },
    /// `SHOAL_EXEC_CACHE_MAX` is not a size.
    #[error("SHOAL_EXEC_CACHE_MAX: {0}")]
    CacheLimit(#[from] cache::BadSize),
    /// The cache directory could not be written.
    #[error("cannot write the prepared image {path}: {source}")]
    Cache {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// [`is_linux_executable`] of the file at `path`, reading only its ELF
/// header, section headers and section names (node is 99 MB: reading it
/// whole twice per start cost more than the rest of the start); a file
/// whose headers do not parse is read whole and judged by
/// [`is_linux_executable`].
pub fn is_linux_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::FileExt;
    let Ok(f) = std::fs::File::open(path) else { return false };
    let mut h = [0u8; 64];
    if f.read_exact_at(&mut h, 0).is_err() || h[..4] != *b"\x7fELF" {
        return false;
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
    let quick = || -> Option<bool> {
        if h[4] != object::elf::ELFCLASS64 || h[5] != object::elf::ELFDATA2LSB {
            return None;
        }
        let (shoff, shentsize, shnum, shstrndx) = (u64_at(&h, 40), usize::from(u16_at(&h, 58)), usize::from(u16_at(&h, 60)), usize::from(u16_at(&h, 62)));
        if shentsize != 64 || shnum == 0 || shnum > 4096 || shstrndx >= shnum {
            return None;
        }
        let mut sh = vec![0u8; shnum * 64];
        f.read_exact_at(&mut sh, shoff).ok()?;
        let sec = |i: usize| &sh[i * 64..(i + 1) * 64];
        let names = sec(shstrndx);
        let (noff, nsize) = (u64_at(names, 24), u64_at(names, 32));
        if nsize > 1 << 20 {
            return None;
        }
        let mut strtab = vec![0u8; nsize as usize];
        f.read_exact_at(&mut strtab, noff).ok()?;
        Some(!(0..shnum).any(|i| {
            let name = u32_at(sec(i), 0) as usize;
            strtab.get(name..).is_some_and(|n| n.split(|&c| c == 0).next() == Some(b".note.shoal".as_slice())) && u32_at(sec(i), 4) != 0
        }))
    };
    match quick() {
        Some(answer) => answer,
        None => std::fs::read(path).is_ok_and(|b| is_linux_executable(&b)),
    }
}

/// Whether `bytes` start like an ELF file that is not a shoal image (no
/// `.note.shoal` section): what `shoal run` treats as a Linux executable.
pub fn is_linux_executable(bytes: &[u8]) -> bool {
    use object::read::elf::{FileHeader, SectionHeader};
    if bytes.len() < 4 || &bytes[..4] != b"\x7fELF" {
        return false;
    }
    let Ok(h) = object::elf::FileHeader64::<object::LittleEndian>::parse(bytes) else {
        return false;
    };
    let e = object::LittleEndian;
    let Ok(sections) = h.sections(e, bytes) else {
        return true;
    };
    !sections.iter().any(|s| sections.section_name(e, s).is_ok_and(|n| n == b".note.shoal") && s.sh_type(e) != 0)
}

/// Builds (or finds in `cache_dir`) the instance image for the executable
/// at `exe`, on the kernel image at `kernel`; returns its path.
pub fn prepare(exe: &Path, kernel: &Path, cache_dir: &Path) -> Result<PathBuf, ExecError> {
    use sha2::{Digest, Sha256};
    let read = |p: &Path| std::fs::read(p).map_err(|source| ExecError::Io { path: p.to_path_buf(), source });
    let exe_bytes = read(exe)?;
    let kernel_bytes = read(kernel)?;
    // SHOAL_EXEC_REWRITE=pairs rewrites only `mov eax, imm32; syscall`
    // pairs, as shoal did at first: how `shoal bench exec` measures what
    // moving other instructions into the trampolines gains.
    let pairs_only = std::env::var_os("SHOAL_EXEC_REWRITE").is_some_and(|v| v == "pairs");
    let mut h = Sha256::new();
    h.update(b"shoal-exec 3\0");
    h.update([u8::from(pairs_only)]);
    h.update((exe_bytes.len() as u64).to_le_bytes());
    h.update(&exe_bytes);
    h.update(&kernel_bytes);
    let key: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let out = cache_dir.join(format!("{key}.img"));
    // A cached image was built from these very bytes, which passed the
    // checks then: no second analysis (decoding node's 50 MB of code
    // took seconds at every start).
    if out.is_file() {
        cache::mark_used(&out);
        return Ok(out);
    }
    let max = cache::limit()?;
    let mut analysed = analyse(exe, &exe_bytes)?;
    if pairs_only {
        for s in analysed.sites.iter_mut().filter(|s| !s.is_pair()) {
            *s = Site { addr: s.addr, moved: 0, nr: None };
        }
    }
    let k = KernelImage::parse(kernel, &kernel_bytes)?;
    let image = combine(&k, &analysed, &exe_bytes)?;
    let cache = |source| ExecError::Cache { path: out.clone(), source };
    std::fs::create_dir_all(cache_dir).map_err(cache)?;
    // The manifest first, then the image: a start that finds the image
    // finds its manifest (the pool needs it; copy mode does not).
    let kernel_manifest = shoal_manifest::Manifest::read(&shoal_manifest::Manifest::path_for(kernel)).ok();
    if let Some(m) = kernel_manifest.and_then(|m| manifest(m, &image, &key[..16])) {
        let tmp = cache_dir.join(format!(".{key}.{}.manifest.tmp", std::process::id()));
        m.write(&tmp).map_err(|e| ExecError::Cache { path: tmp.clone(), source: std::io::Error::other(e.to_string()) })?;
        std::fs::rename(&tmp, shoal_manifest::Manifest::path_for(&out)).map_err(cache)?;
    }
    let tmp = cache_dir.join(format!(".{key}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, &image).map_err(cache)?;
    std::fs::rename(&tmp, &out).map_err(cache)?;
    // Best effort: a cache that cannot be pruned still serves this start.
    let _ = cache::prune(cache_dir, max, Some(&out));
    Ok(out)
}

/// What identifies a file's version without reading it: its device,
/// inode, size, modification and status-change times (a rewrite in place
/// changes the times, a replacement by rename the inode).
pub fn stat_key(p: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some(format!("{}:{}:{}:{}.{}:{}.{}", m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()))
}

/// The name under which `prepared` remembers the built image of `exe` on
/// `kernel` by their [`stat_key`]s.
fn remembered(exe: &Path, kernel: &Path, cache_dir: &Path) -> Option<PathBuf> {
    use sha2::{Digest, Sha256};
    let pairs_only = std::env::var_os("SHOAL_EXEC_REWRITE").is_some_and(|v| v == "pairs");
    let mut h = Sha256::new();
    h.update(b"shoal-exec stat 1\0");
    h.update([u8::from(pairs_only)]);
    for p in [exe, kernel] {
        h.update(std::fs::canonicalize(p).ok()?.as_os_str().as_encoded_bytes());
        h.update(b"\0");
        h.update(stat_key(p)?.as_bytes());
        h.update(b"\0");
    }
    let key: String = h.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect();
    Some(cache_dir.join("by-stat").join(key))
}

/// The built image of `exe` on `kernel` if [`prepared`] made or found it
/// for these very files before (same path, inode, size and times of
/// both): found without reading either. A file changed in any way has
/// other times, and is not found here.
pub fn cached(exe: &Path, kernel: &Path, cache_dir: &Path) -> Option<PathBuf> {
    let name = std::fs::read_to_string(remembered(exe, kernel, cache_dir)?).ok()?;
    // Only a name of the cache's own form is followed.
    let ok = name.len() == 68 && name.ends_with(".img") && name[..64].bytes().all(|b| b.is_ascii_hexdigit());
    let img = cache_dir.join(name);
    let found = ok && img.is_file();
    if found {
        cache::mark_used(&img);
    }
    found.then_some(img)
}

/// [`prepare`] for a start that needs only the built image, remembered by
/// the [`stat_key`]s of both files so that the next start finds it with
/// [`cached`] instead of reading and hashing them again.
pub fn prepared(exe: &Path, kernel: &Path, cache_dir: &Path) -> Result<PathBuf, ExecError> {
    let img = prepare(exe, kernel, cache_dir)?;
    if let (Some(note), Some(name)) = (remembered(exe, kernel, cache_dir), img.file_name()) {
        // Best effort: without the note the next start hashes again.
        let dir = cache_dir.join("by-stat");
        let tmp = dir.join(format!(".{}.tmp", std::process::id()));
        if std::fs::create_dir_all(&dir).is_ok() && std::fs::write(&tmp, name.as_encoded_bytes()).is_ok() {
            let _ = std::fs::rename(&tmp, &note);
        }
    }
    Ok(img)
}

/// The manifest of the built image `image`: the kernel image's libraries
/// (at the same addresses, with the same read-only pages) and one library
/// `exec` (version: the start of the cache key) whose regions are the
/// executable's read-only segments and the trampolines, each only when no
/// writable segment shares its pages. `None` if the built image cannot
/// be read back (it was just written by [`combine`]).
fn manifest(kernel: shoal_manifest::Manifest, image: &[u8], version: &str) -> Option<shoal_manifest::Manifest> {
    use object::read::elf::{FileHeader, ProgramHeader};
    use sha2::{Digest, Sha256};
    use shoal_manifest::{Library, LibraryInfo, LibraryKind, PageHash, Region, RegionKind};
    let e = object::LittleEndian;
    let h = object::elf::FileHeader64::<object::LittleEndian>::parse(image).ok()?;
    let loads: Vec<(u64, u64, u64, u64, u32)> = h
        .program_headers(e, image)
        .ok()?
        .iter()
        .filter(|p| p.p_type(e) == object::elf::PT_LOAD)
        .map(|p| (p.p_vaddr(e), p.p_memsz(e), p.p_offset(e), p.p_filesz(e), p.p_flags(e)))
        .collect();
    let page_down = |a: u64| a & !0xfff;
    let page_up = |a: u64| (a + 0xfff) & !0xfff;
    let mut regions = Vec::new();
    for &(vaddr, memsz, off, filesz, flags) in loads.iter().filter(|l| l.0 >= LOWEST_ADDRESS && l.4 & object::elf::PF_W == 0) {
        let (lo, hi) = (page_down(vaddr), page_up(vaddr + memsz));
        if loads.iter().any(|o| o.4 & object::elf::PF_W != 0 && page_down(o.0) < hi && lo < page_up(o.0 + o.1)) {
            continue;
        }
        let mut page_hashes = Vec::new();
        let mut a = lo;
        while a < hi {
            let mut page = [0u8; 0x1000];
            let (from, to) = (a.max(vaddr), (a + 0x1000).min(vaddr + filesz));
            if from < to {
                let src = (off + from - vaddr) as usize;
                page[(from - a) as usize..(to - a) as usize].copy_from_slice(image.get(src..src + (to - from) as usize)?);
            }
            page_hashes.push(PageHash::of(&page));
            a += 0x1000;
        }
        let kind = if flags & object::elf::PF_X != 0 { RegionKind::Text } else { RegionKind::Rodata };
        regions.push(Region { kind, start: vaddr, end: vaddr + memsz, page_hashes });
    }
    let mut libraries = kernel.libraries;
    libraries.push(Library { info: LibraryInfo { name: "exec".into(), version: version.into(), kind: LibraryKind::App }, regions });
    let image_sha256 = Sha256::digest(image).iter().map(|b| format!("{b:02x}")).collect();
    Some(shoal_manifest::Manifest { format: kernel.format, layout: kernel.layout, entry: kernel.entry, image_sha256, libraries })
}

#[cfg(test)]
mod file_tests {
    /// The header-only check answers as the whole-file one, for an
    /// executable, this test binary and a file that is not ELF.
    #[test]
    fn the_file_check_agrees_with_the_bytes_check() {
        let dir = tempfile_dir();
        let not_elf = dir.join("text");
        std::fs::write(&not_elf, b"not an ELF file at all").unwrap();
        let me = std::env::current_exe().unwrap();
        for p in [std::path::PathBuf::from("/bin/true"), me, not_elf] {
            let whole = std::fs::read(&p).is_ok_and(|b| super::is_linux_executable(&b));
            assert_eq!(super::is_linux_executable_file(&p), whole, "{}", p.display());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("shoal-exec-file-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
