//! The interpreter of a dynamically linked Linux executable, started as
//! Linux's `execve` starts it (`load_elf_interp`).
//!
//! The tender loaded the executable itself (at its link address, or a PIE
//! at `shoal_exec::PIE_BASE`: a fixed base, so its pages are the same in
//! every instance). If its program headers hold `PT_INTERP`, the kernel
//! opens that path (`/lib64/ld-linux-x86-64.so.2`) in the instance's own
//! file system, maps its segments with the ordinary `mmap` of that file
//! (private copies; executable where the segment is), zeroes its `.bss`,
//! and the program starts at the interpreter's entry with `AT_BASE` = the
//! interpreter's base and `AT_ENTRY` still the program's, so `ld.so` finds
//! the program through `AT_PHDR` and maps the libraries itself with
//! `openat` and `mmap`. Everything goes through the same system calls the
//! program could make, so the file system's checks apply to the
//! interpreter as to any file.

use shoal_plat::{umem, Args, Errno};

const PT_LOAD: u32 = 1;
const PT_INTERP: u32 = 3;
const ET_DYN: u16 = 3;
const EM_X86_64: u16 = 62;
const PAGE: u64 = 4096;

const NR_CLOSE: u64 = 3;
const NR_MMAP: u64 = 9;
const NR_PREAD64: u64 = 17;
const NR_OPENAT: u64 = 257;
const AT_FDCWD: i64 = -100;
const O_RDONLY_CLOEXEC: u64 = 0o2_000_000;
const MAP_PRIVATE: u64 = 0x02;
const MAP_FIXED: u64 = 0x10;
const MAP_ANONYMOUS: u64 = 0x20;

/// Why the interpreter could not be loaded, as `strerror` says it (the
/// errors opening and mapping a file can give), for the one-line message.
pub fn reason(e: Errno) -> Option<&'static str> {
    Some(match e.0 {
        2 => "No such file or directory",
        8 => "Exec format error",
        12 => "Cannot allocate memory",
        13 => "Permission denied",
        20 => "Not a directory",
        21 => "Is a directory",
        36 => "File name too long",
        40 => "Too many levels of symbolic links",
        _ => return None,
    })
}

/// Most bytes of the interpreter's ELF header and program headers read.
const HEAD: usize = 1024;

/// A program header (the fields used here).
#[derive(Clone, Copy)]
struct Phdr {
    p_type: u32,
    flags: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
    memsz: u64,
}

fn phdr_at(b: &[u8]) -> Phdr {
    let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64_at = |o: usize| u64::from(u32_at(o)) | (u64::from(u32_at(o + 4)) << 32);
    Phdr { p_type: u32_at(0), flags: u32_at(4), offset: u64_at(8), vaddr: u64_at(16), filesz: u64_at(32), memsz: u64_at(40) }
}

fn call(n: u64, a: [u64; 6]) -> Result<u64, Errno> {
    let r = super::dispatch(n, &Args(a));
    if r < 0 {
        Err(Errno(-r as i32))
    } else {
        Ok(r as u64)
    }
}

fn page_down(a: u64) -> u64 {
    a & !(PAGE - 1)
}

fn page_up(a: u64) -> Option<u64> {
    a.checked_add(PAGE - 1).map(|v| v & !(PAGE - 1))
}

/// The address of the program's interpreter name (`PT_INTERP`, NUL
/// terminated; shoal-exec checked it lies in a loaded segment), given its
/// program headers at `phdr` (`phnum` of them) and its load bias.
pub fn find(phdr: u64, phnum: u64, bias: u64) -> Result<Option<u64>, Errno> {
    for i in 0..phnum.min(256) {
        let raw: [u8; 56] = umem::read(phdr + i * 56)?;
        let p = phdr_at(&raw);
        if p.p_type == PT_INTERP {
            return Ok(Some(p.vaddr.wrapping_add(bias)));
        }
    }
    Ok(None)
}

/// Loads the interpreter named by the string at `name`; returns its base
/// (`AT_BASE`) and entry point.
pub fn load(name: u64) -> Result<(u64, u64), Errno> {
    let fd = call(NR_OPENAT, [AT_FDCWD as u64, name, O_RDONLY_CLOEXEC, 0, 0, 0])?;
    let r = load_fd(fd);
    let _ = call(NR_CLOSE, [fd, 0, 0, 0, 0, 0]);
    r
}

fn load_fd(fd: u64) -> Result<(u64, u64), Errno> {
    let mut head = [0u8; HEAD];
    let got = call(NR_PREAD64, [fd, head.as_mut_ptr() as u64, HEAD as u64, 0, 0, 0])? as usize;
    let h = &head[..got.min(HEAD)];
    if h.len() < 64 || &h[..4] != b"\x7fELF" || h[4] != 2 || h[5] != 1 {
        return Err(Errno::ENOEXEC);
    }
    let u16_at = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]);
    let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().unwrap_or_default());
    if u16_at(16) != ET_DYN || u16_at(18) != EM_X86_64 || u16_at(54) != 56 {
        return Err(Errno::ENOEXEC);
    }
    let (entry, phoff, phnum) = (u64_at(24), u64_at(32), usize::from(u16_at(56)));
    let phoff = usize::try_from(phoff).map_err(|_| Errno::ENOEXEC)?;
    if phnum == 0 || phoff.checked_add(phnum * 56).is_none_or(|e| e > h.len()) {
        return Err(Errno::ENOEXEC);
    }
    let loads = || (0..phnum).map(|i| phdr_at(&h[phoff + i * 56..])).filter(|p| p.p_type == PT_LOAD);
    let lo = loads().map(|p| page_down(p.vaddr)).min().ok_or(Errno::ENOEXEC)?;
    let mut hi = lo;
    for p in loads() {
        if p.filesz > p.memsz || p.offset % PAGE != p.vaddr % PAGE {
            return Err(Errno::ENOEXEC);
        }
        hi = hi.max(p.vaddr.checked_add(p.memsz).and_then(page_up).ok_or(Errno::ENOEXEC)?);
    }
    if hi - lo > 1 << 30 {
        return Err(Errno::ENOEXEC);
    }
    // The whole span reserved first (no access), so the segments keep
    // their distances, then each segment mapped over it.
    let at = call(NR_MMAP, [0, hi - lo, 0, MAP_PRIVATE | MAP_ANONYMOUS, u64::MAX, 0])?;
    let bias = at - lo;
    for p in loads() {
        let prot = u64::from(p.flags & 4 != 0) | (u64::from(p.flags & 2 != 0) << 1) | (u64::from(p.flags & 1 != 0) << 2);
        let start = bias + page_down(p.vaddr);
        let file_end = bias + p.vaddr + p.filesz;
        let mem_end = bias + page_up(p.vaddr + p.memsz).ok_or(Errno::ENOEXEC)?;
        let mut mapped_end = start;
        if p.filesz > 0 {
            let len = page_up(file_end).ok_or(Errno::ENOEXEC)? - start;
            call(NR_MMAP, [start, len, prot, MAP_PRIVATE | MAP_FIXED, fd, page_down(p.offset)])?;
            mapped_end = start + len;
            // The rest of the last file page is the start of .bss: zero
            // (the mapping copied the file's next bytes there).
            if p.memsz > p.filesz && file_end < mapped_end {
                if p.flags & 2 == 0 {
                    return Err(Errno::ENOEXEC);
                }
                umem::slice_mut(file_end, (mapped_end - file_end) as usize)?.fill(0);
            }
        }
        if mem_end > mapped_end {
            call(NR_MMAP, [mapped_end, mem_end - mapped_end, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, u64::MAX, 0])?;
        }
    }
    Ok((bias, bias.wrapping_add(entry)))
}
