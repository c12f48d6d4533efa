//! Reading and checking an image file (the static ELF executable `shoal
//! build` produced).
//!
//! Everything in the file is treated as hostile: every offset, size and
//! address is checked before it is used, and the checks a tender relies on
//! later (segments inside the guest image area, no writable-and-executable
//! memory, an entry point in code) are made here once.

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::Endianness;
use shoal_abi::{AbiNote, ABI_NOTE_MAGIC, ABI_NOTE_SECTION, ABI_VERSION, IMAGE_BASE, PAGE_SIZE, PHDR_OFFSET};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Highest address (exclusive) any segment may reach: the top of the
/// canonical lower half of the x86-64 address space.
pub const IMAGE_ADDR_LIMIT: u64 = 1 << 47;

/// Size of one ELF64 program header.
pub const PHDR_SIZE: u64 = 56;

/// Most program headers an image may have: their copy must fit in the rest
/// of the boot-info page after [`PHDR_OFFSET`].
pub const MAX_PHNUM: u64 = (PAGE_SIZE - PHDR_OFFSET) / PHDR_SIZE;

/// Why an image was refused. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The file could not be read.
    #[error("cannot read image {path}: {source}")]
    Io {
        /// The image file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file does not start with an ELF header.
    #[error("{path} is not an ELF file, so it is not a shoal image")]
    NotElf {
        /// The image file.
        path: PathBuf,
    },
    /// The file ends before a structure its headers announce.
    #[error("image {path} is truncated or corrupt: {what}")]
    Truncated {
        /// The image file.
        path: PathBuf,
        /// Which structure could not be read.
        what: String,
    },
    /// A 32-bit, big-endian or non-x86-64 ELF file.
    #[error("image {path} is {found}; shoal images are 64-bit little-endian x86-64")]
    WrongArch {
        /// The image file.
        path: PathBuf,
        /// What the file is instead.
        found: String,
    },
    /// Not a static executable (a relocatable object, a shared object or a
    /// position-independent executable).
    #[error("image {path} is {found}; shoal images are static executables linked at fixed addresses (ET_EXEC)")]
    NotExecutable {
        /// The image file.
        path: PathBuf,
        /// What the file is instead.
        found: &'static str,
    },
    /// The image has no `.note.shoal` section.
    #[error("{path} is not a shoal image (it has no {section} section; build it with `shoal build`)")]
    NotShoal {
        /// The image file.
        path: PathBuf,
        /// The section that is missing.
        section: &'static str,
    },
    /// The image was built for another ABI version.
    #[error("image {path} was built for shoal ABI version {found}, this tender speaks {expected}; rebuild it with this shoal")]
    AbiVersion {
        /// The image file.
        path: PathBuf,
        /// The image's version.
        found: u32,
        /// This tender's version.
        expected: u32,
    },
    /// A program header that cannot be loaded as it is.
    #[error("image {path} has an invalid segment {index}: {reason}")]
    BadSegment {
        /// The image file.
        path: PathBuf,
        /// Index of the program header.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A segment that is both writable and executable.
    #[error("image {path} has a segment that is both writable and executable (W+X, segment {index} at {vaddr:#x}); shoal refuses such images")]
    WritableAndExecutable {
        /// The image file.
        path: PathBuf,
        /// Index of the program header.
        index: usize,
        /// Its address.
        vaddr: u64,
    },
    /// Two loadable segments share memory.
    #[error("image {path} has overlapping segments: {first} and {second} share the page at {page:#x}")]
    Overlap {
        /// The image file.
        path: PathBuf,
        /// Index of one segment.
        first: usize,
        /// Index of the other.
        second: usize,
        /// A page both touch.
        page: u64,
    },
    /// No loadable segment.
    #[error("image {path} has no loadable segment")]
    Empty {
        /// The image file.
        path: PathBuf,
    },
    /// The entry point is not in an executable segment.
    #[error("image {path} has its entry point {entry:#x} outside its code")]
    BadEntry {
        /// The image file.
        path: PathBuf,
        /// The entry point.
        entry: u64,
    },
    /// The `PT_TLS` header names initial thread-local data outside the
    /// loaded segments (libc copies that data into every thread's TLS
    /// block, so it would read memory the image never loaded).
    #[error("image {path} has its TLS image ({filesz:#x} bytes at {vaddr:#x}, program header {index}) outside its loaded segments")]
    TlsOutsideSegments {
        /// The image file.
        path: PathBuf,
        /// Index of the `PT_TLS` program header.
        index: usize,
        /// Its address.
        vaddr: u64,
        /// Bytes of initialised TLS data.
        filesz: u64,
    },
    /// Too many program headers to hand to the guest.
    #[error("image {path} has {phnum} program headers; at most {MAX_PHNUM} fit in the boot-info page")]
    TooManyHeaders {
        /// The image file.
        path: PathBuf,
        /// How many it has.
        phnum: u64,
    },
}

/// The section of an image built around a Linux executable: the
/// kernel's system-call entry (8 bytes, little endian).
pub const EXEC_SECTION: &str = ".shoal.exec";

/// Access permissions of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Perms {
    /// Readable.
    pub read: bool,
    /// Writable.
    pub write: bool,
    /// Executable.
    pub exec: bool,
}

/// One `PT_LOAD` segment.
///
/// Only where its bytes are in the file is kept, not the bytes: a tender
/// reads them once, straight into guest memory ([`Image::read_segment`]),
/// and the front end, which only checks and plans, never reads them.
#[derive(Clone, Debug)]
pub struct Segment {
    /// Guest address of the first byte.
    pub vaddr: u64,
    /// Size in memory (the bytes past `filesz` are zero: bss).
    pub memsz: u64,
    /// Bytes from the file (`p_filesz`; at most `memsz`).
    pub filesz: u64,
    /// Where those bytes start in the file (`p_offset`; checked: the file
    /// held `[offset, offset + filesz)` when it was parsed).
    pub offset: u64,
    /// Access permissions.
    pub perms: Perms,
}

impl Segment {
    /// First page of the segment.
    pub fn page_start(&self) -> u64 {
        page_down(self.vaddr)
    }
    /// End of the segment's last page (exclusive).
    pub fn page_end(&self) -> u64 {
        // Cannot overflow: checked against IMAGE_ADDR_LIMIT at parse time.
        page_up(self.vaddr + self.memsz)
    }
}

/// Whole pages of a read-only segment whose bytes lie in the image file at
/// an offset congruent to their address ([`Image::file_ranges`]): what a
/// tender may map from the file (`MAP_PRIVATE`) instead of copying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileRange {
    /// Guest address of the first page.
    pub addr: u64,
    /// Bytes (whole pages).
    pub len: u64,
    /// Where the first page's bytes start in the file.
    pub offset: u64,
    /// Whether the segment is code.
    pub exec: bool,
}

/// The `PT_TLS` program header: the initial image of thread-local storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tls {
    /// Guest address of the initialised TLS data.
    pub vaddr: u64,
    /// Bytes of initialised data.
    pub filesz: u64,
    /// Total size (initialised data plus zeroed).
    pub memsz: u64,
    /// Alignment.
    pub align: u64,
}

/// Where the segments' bytes are read from.
#[derive(Clone, Debug)]
enum Source {
    /// The image file (read with `pread` when the segments are loaded).
    File(Arc<std::fs::File>),
    /// An image given as bytes (tests, the fuzzer).
    Bytes(Arc<[u8]>),
    /// Given back after loading ([`Image::release_data`]).
    Released,
}

/// A checked image, ready to load.
#[derive(Clone, Debug)]
pub struct Image {
    path: PathBuf,
    source: Source,
    entry: u64,
    segments: Vec<Segment>,
    phdrs: Vec<u8>,
    phnum: u64,
    tls: Option<Tls>,
    exec_entry: Option<u64>,
}

pub(crate) fn page_down(a: u64) -> u64 {
    a & !(PAGE_SIZE - 1)
}

/// How `object`'s `ReadCache` reads an image file while it is checked:
/// `pread` at a position kept here (a seek is no system call), and small
/// reads served from the last block read. `ReadCache` looks up each
/// section's name with a read of its own at the name's offset (an `lseek`
/// and a 256-byte `read` per section with `File`: about 120 system calls
/// per image, in the tender and again in the spt instance process, on
/// every cold start); with the block, the whole section-name table comes
/// from one `pread`.
struct BlockReader<'a> {
    file: &'a std::fs::File,
    pos: u64,
    /// The file's bytes from `block_at`.
    block: Vec<u8>,
    block_at: u64,
}

/// Bytes read at once for a small read (one page).
const BLOCK: usize = 4096;

impl<'a> BlockReader<'a> {
    fn new(file: &'a std::fs::File) -> BlockReader<'a> {
        BlockReader { file, pos: 0, block: Vec::new(), block_at: 0 }
    }
}

impl object::read::ReadCacheOps for BlockReader<'_> {
    fn len(&mut self) -> Result<u64, ()> {
        self.file.metadata().map(|m| m.len()).map_err(|_| ())
    }

    fn seek(&mut self, pos: u64) -> Result<u64, ()> {
        self.pos = pos;
        Ok(pos)
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<usize, ()> {
        let in_block = |r: &Self| r.pos >= r.block_at && r.pos < r.block_at + r.block.len() as u64;
        if !in_block(self) && buf.len() < BLOCK {
            self.block.resize(BLOCK, 0);
            let n = loop {
                match self.file.read_at(&mut self.block, self.pos) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    r => break r.map_err(|_| ())?,
                }
            };
            self.block.truncate(n);
            self.block_at = self.pos;
        }
        let n = if in_block(self) {
            let from = (self.pos - self.block_at) as usize;
            let n = buf.len().min(self.block.len() - from);
            buf[..n].copy_from_slice(&self.block[from..from + n]);
            n
        } else {
            loop {
                match self.file.read_at(buf, self.pos) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    r => break r.map_err(|_| ())?,
                }
            }
        };
        self.pos += n as u64;
        Ok(n)
    }

    fn read_exact(&mut self, mut buf: &mut [u8]) -> Result<(), ()> {
        while !buf.is_empty() {
            match self.read(buf)? {
                0 => return Err(()),
                n => buf = &mut buf[n..],
            }
        }
        Ok(())
    }
}

pub(crate) fn page_up(a: u64) -> u64 {
    a.saturating_add(PAGE_SIZE - 1) & !(PAGE_SIZE - 1)
}

impl Image {
    /// Reads and checks the image file at `path`.
    ///
    /// Only the headers and the ABI note are read (`object`'s
    /// `ReadCache`), neither the segments' bytes (read later, straight into
    /// guest memory, by whoever loads them) nor debug information, which is
    /// most of an image's file: a front end that only checks and plans
    /// touches a few pages, not the image's size twice over.
    pub fn open(path: &Path) -> Result<Image, ImageError> {
        let file = std::fs::File::open(path).map_err(|source| ImageError::Io { path: path.to_path_buf(), source })?;
        Image::from_file(file, path)
    }

    /// Reads and checks the image from an open file (the spt instance
    /// process gets its image as a descriptor); `path` only names it in
    /// messages.
    pub fn from_file(file: std::fs::File, path: &Path) -> Result<Image, ImageError> {
        let cache = object::ReadCache::new(BlockReader::new(&file));
        let mut image = Image::parse_from(path, &cache)?;
        drop(cache);
        image.source = Source::File(Arc::new(file));
        Ok(image)
    }

    /// Checks the image in `bytes` (and keeps a copy of them to load
    /// from); `path` only names it in messages.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Image, ImageError> {
        let mut image = Image::parse_from(path, bytes)?;
        image.source = Source::Bytes(Arc::from(bytes));
        Ok(image)
    }

    /// Checks the image readable through `data` (the returned image has no
    /// source yet: the caller sets it).
    fn parse_from<'data, R: object::ReadRef<'data>>(path: &Path, data: R) -> Result<Image, ImageError> {
        let p = || path.to_path_buf();
        let truncated = |what: &str| ImageError::Truncated { path: p(), what: what.to_string() };

        // The identification bytes first, so that each kind of wrong file
        // gets its own message (object's parser says only "unsupported").
        let len = data.len().map_err(|_| truncated("the file"))?;
        let ident = data.read_bytes_at(0, len.min(16)).map_err(|_| truncated("the ELF identification"))?;
        if ident.len() < 4 || ident[0..4] != elf::ELFMAG {
            return Err(ImageError::NotElf { path: p() });
        }
        if ident.len() < 16 {
            return Err(truncated("the ELF identification"));
        }
        let bytes = data;
        match ident[4] {
            elf::ELFCLASS64 => {}
            elf::ELFCLASS32 => return Err(ImageError::WrongArch { path: p(), found: "a 32-bit ELF file".into() }),
            c => return Err(ImageError::WrongArch { path: p(), found: format!("an ELF file of unknown class {c}") }),
        }
        if ident[5] != elf::ELFDATA2LSB {
            return Err(ImageError::WrongArch { path: p(), found: "a big-endian ELF file".into() });
        }
        let header = elf::FileHeader64::<Endianness>::parse(bytes).map_err(|_| truncated("the ELF header"))?;
        let endian = Endianness::Little;
        let machine = header.e_machine(endian);
        if machine != elf::EM_X86_64 {
            return Err(ImageError::WrongArch { path: p(), found: format!("an ELF file for machine {machine}") });
        }
        match header.e_type(endian) {
            elf::ET_EXEC => {}
            elf::ET_DYN => return Err(ImageError::NotExecutable { path: p(), found: "position independent (ET_DYN)" }),
            elf::ET_REL => return Err(ImageError::NotExecutable { path: p(), found: "a relocatable object (ET_REL)" }),
            _ => return Err(ImageError::NotExecutable { path: p(), found: "not an executable" }),
        }

        // The ABI note, before anything else about the contents: an image of
        // another ABI version may legitimately look different.
        let sections = header.sections(endian, bytes).map_err(|_| truncated("the section headers"))?;
        let (_, note) = sections.section_by_name(endian, ABI_NOTE_SECTION.as_bytes()).ok_or(ImageError::NotShoal { path: p(), section: ABI_NOTE_SECTION })?;
        let note_bytes = note.data(endian, bytes).map_err(|_| truncated("the .note.shoal section"))?;
        let note =
            AbiNote::from_bytes(note_bytes).filter(|n| n.magic == ABI_NOTE_MAGIC).ok_or(ImageError::NotShoal { path: p(), section: ABI_NOTE_SECTION })?;
        if note.abi_version != ABI_VERSION {
            return Err(ImageError::AbiVersion { path: p(), found: note.abi_version, expected: ABI_VERSION });
        }
        // An image `shoal-exec` built around a Linux executable: where its
        // kernel's system-call entry is (the spt trap path sends trapped
        // `syscall` instructions there).
        let exec_entry = sections
            .section_by_name(endian, EXEC_SECTION.as_bytes())
            .and_then(|(_, s)| s.data(endian, bytes).ok())
            .and_then(|d| d.get(..8))
            .map(|d| u64::from_le_bytes(d.try_into().unwrap_or_default()));

        let phdrs = header.program_headers(endian, bytes).map_err(|_| truncated("the program headers"))?;
        let phnum = phdrs.len() as u64;
        if phnum > MAX_PHNUM {
            return Err(ImageError::TooManyHeaders { path: p(), phnum });
        }
        let mut segments: Vec<(usize, Segment)> = Vec::new();
        let mut tls: Option<(usize, Tls)> = None;
        for (index, ph) in phdrs.iter().enumerate() {
            let bad = |reason: String| ImageError::BadSegment { path: p(), index, reason };
            let vaddr = ph.p_vaddr(endian);
            let memsz = ph.p_memsz(endian);
            let filesz = ph.p_filesz(endian);
            let flags = ph.p_flags(endian);
            match ph.p_type(endian) {
                elf::PT_LOAD => {}
                elf::PT_TLS => {
                    if filesz > memsz {
                        return Err(bad(format!("its TLS file size {filesz:#x} exceeds its memory size {memsz:#x}")));
                    }
                    if vaddr.checked_add(memsz).is_none_or(|e| e > IMAGE_ADDR_LIMIT) {
                        return Err(bad(format!("its TLS image at {vaddr:#x} is out of range")));
                    }
                    tls = Some((index, Tls { vaddr, filesz, memsz, align: ph.p_align(endian) }));
                    continue;
                }
                elf::PT_INTERP | elf::PT_DYNAMIC => return Err(bad("the image is dynamically linked; shoal images are static".into())),
                _ => continue,
            }
            if filesz > memsz {
                return Err(bad(format!("its file size {filesz:#x} exceeds its memory size {memsz:#x}")));
            }
            if memsz == 0 {
                continue;
            }
            if vaddr < IMAGE_BASE {
                return Err(bad(format!("it starts at {vaddr:#x}, below the image base {IMAGE_BASE:#x}")));
            }
            if vaddr.checked_add(memsz).is_none_or(|e| e > IMAGE_ADDR_LIMIT) {
                return Err(bad(format!("it ends beyond {IMAGE_ADDR_LIMIT:#x} (at {vaddr:#x}, {memsz:#x} bytes)")));
            }
            // The bytes themselves are not read here (see `open`): only
            // that the file holds them.
            let offset = ph.p_offset(endian);
            if offset.checked_add(filesz).is_none_or(|e| e > len) {
                return Err(truncated(&format!("segment {index} lies beyond the end of the file")));
            }
            let perms = Perms { read: flags & elf::PF_R != 0, write: flags & elf::PF_W != 0, exec: flags & elf::PF_X != 0 };
            if perms.write && perms.exec {
                return Err(ImageError::WritableAndExecutable { path: p(), index, vaddr });
            }
            segments.push((index, Segment { vaddr, memsz, filesz, offset, perms }));
        }
        if segments.is_empty() {
            return Err(ImageError::Empty { path: p() });
        }
        // Overlaps are checked page by page: the tender protects whole pages,
        // so two segments must not even share one.
        segments.sort_by_key(|(_, s)| s.vaddr);
        for w in segments.windows(2) {
            let (i, a) = &w[0];
            let (j, b) = &w[1];
            if b.page_start() < a.page_end() {
                return Err(ImageError::Overlap { path: p(), first: *i, second: *j, page: b.page_start() });
            }
        }
        let entry = header.e_entry(endian);
        let in_code = segments.iter().any(|(_, s)| s.perms.exec && entry >= s.vaddr && entry - s.vaddr < s.memsz);
        if !in_code {
            return Err(ImageError::BadEntry { path: p(), entry });
        }
        // The TLS image is what libc's start-up code copies (`filesz`
        // bytes from `vaddr`) into each thread's TLS block: it must be
        // loaded memory, inside one segment. (The zeroed rest up to `memsz`,
        // .tbss, takes no address space and is not checked.)
        // An image without initialised TLS data (filesz 0: the linker
        // still emits a PT_TLS, at 0 when there is no .tdata) has nothing
        // to copy.
        if let Some((index, t)) = tls.filter(|(_, t)| t.filesz > 0) {
            // No overflow: `vaddr + memsz` (>= `vaddr + filesz`) and each
            // segment's end were checked against IMAGE_ADDR_LIMIT above.
            let inside = segments.iter().any(|(_, s)| t.vaddr >= s.vaddr && t.vaddr + t.filesz <= s.vaddr + s.memsz);
            if !inside {
                return Err(ImageError::TlsOutsideSegments { path: p(), index, vaddr: t.vaddr, filesz: t.filesz });
            }
        }
        let phdr_bytes = object::pod::bytes_of_slice(phdrs).to_vec();
        Ok(Image {
            path: path.to_path_buf(),
            source: Source::Released,
            entry,
            segments: segments.into_iter().map(|(_, s)| s).collect(),
            phdrs: phdr_bytes,
            phnum,
            tls: tls.map(|(_, t)| t),
            exec_entry,
        })
    }

    /// For an image built around a Linux executable (`shoal-exec`): the
    /// kernel's system-call entry, where trapped `syscall` instructions go.
    pub fn exec_entry(&self) -> Option<u64> {
        self.exec_entry
    }

    /// The file the image was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The ELF entry point (the kernel's `_shoal_start`).
    pub fn entry(&self) -> u64 {
        self.entry
    }

    /// The image file, if the image was read from one and not released.
    pub fn file(&self) -> Option<&std::fs::File> {
        match &self.source {
            Source::File(f) => Some(f),
            _ => None,
        }
    }

    /// The whole pages of each read-only segment that hold only its file
    /// bytes, where the file offset is congruent to the address modulo the
    /// page size (as a linker lays segments out): mapped from the file,
    /// they read exactly as copied ones. A segment's first and last pages
    /// when partly outside its file bytes, and every writable segment, are
    /// not included (they must be copied: the rest of such a page reads
    /// as zero). Sorted by address, disjoint (segments share no page).
    pub fn file_ranges(&self) -> Vec<FileRange> {
        self.segments
            .iter()
            .filter(|s| !s.perms.write && s.vaddr.wrapping_sub(s.offset) % PAGE_SIZE == 0)
            .filter_map(|s| {
                let (lo, hi) = (page_up(s.vaddr), page_down(s.vaddr + s.filesz));
                (lo < hi).then(|| FileRange { addr: lo, len: hi - lo, offset: s.offset + (lo - s.vaddr), exec: s.perms.exec })
            })
            .collect()
    }

    /// Closes the image file (or frees the bytes it was parsed from) once
    /// the segments are in guest memory: a running tender keeps only
    /// addresses, sizes and permissions. [`Image::read_segment`] fails
    /// afterwards.
    pub fn release_data(&mut self) {
        self.source = Source::Released;
    }

    /// Reads `buf.len()` bytes of segment `s`'s file bytes, from `off`
    /// bytes into them, into `buf` (one `pread` for an image file; no
    /// allocation). Fails if the range is not in the segment's file bytes,
    /// if the file has shrunk since it was checked (`UnexpectedEof`), or
    /// after [`Image::release_data`].
    pub fn read_segment(&self, s: &Segment, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
        use std::io::{Error, ErrorKind};
        let len = buf.len() as u64;
        if off.checked_add(len).is_none_or(|e| e > s.filesz) {
            return Err(Error::from(ErrorKind::InvalidInput));
        }
        // No overflow: `offset + filesz` was checked against the file's
        // length at parse time.
        let at = s.offset + off;
        match &self.source {
            Source::File(f) => f.read_exact_at(buf, at),
            Source::Bytes(b) => {
                let src = usize::try_from(at).ok().and_then(|a| b.get(a..a + buf.len())).ok_or(Error::from(ErrorKind::UnexpectedEof))?;
                buf.copy_from_slice(src);
                Ok(())
            }
            Source::Released => Err(Error::from(ErrorKind::NotFound)),
        }
    }

    /// The file bytes of segment `s` in a new vector (for checks and tests;
    /// loading uses [`Image::read_segment`] into guest memory).
    pub fn segment_bytes(&self, s: &Segment) -> std::io::Result<Vec<u8>> {
        let len = usize::try_from(s.filesz).map_err(|_| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
        let mut v = vec![0u8; len];
        self.read_segment(s, 0, &mut v)?;
        Ok(v)
    }

    /// The loadable segments, sorted by address, none overlapping another's
    /// pages, none writable and executable.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The raw program header table (what `AT_PHDR` points at in the guest).
    pub fn phdrs(&self) -> &[u8] {
        &self.phdrs
    }

    /// Number of program headers.
    pub fn phnum(&self) -> u64 {
        self.phnum
    }

    /// The `PT_TLS` header, if the image has thread-local storage.
    pub fn tls(&self) -> Option<Tls> {
        self.tls
    }

    /// Lowest page of the image.
    pub fn start(&self) -> u64 {
        self.segments.first().map_or(IMAGE_BASE, Segment::page_start)
    }

    /// End of the image's highest page (exclusive).
    pub fn end(&self) -> u64 {
        self.segments.iter().map(Segment::page_end).max().unwrap_or(IMAGE_BASE)
    }
}
