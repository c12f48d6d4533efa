//! A template's mounted files mapped into guest memory, kept so that every
//! copy of the template maps them again at the same guest ranges
//! (crate::template; docs/architecture.md "Templates").
//!
//! `HOSTFS_MAP` (the libraries `ld.so` maps from a `--mount`) puts a
//! mounted file's pages over the VMM's mapping of guest memory, privately,
//! so that every instance shares the host's page cache of the file. In a
//! template that mapping hides the template's memory file, which holds
//! everything else the guest wrote: a copy, which maps the memory file,
//! would see whatever the file held there before (zeros, or an older
//! mapping's pages) instead of the libraries, and crash. So a template
//! records each file mapping as it is made (the file's descriptor, its
//! offset, the guest range); at the ready point it saves into its memory
//! file the pages of those ranges it wrote (the syscall sites the kernel
//! rewrote, copied on write from the file), found in `/proc/self/pagemap`
//! (present but no longer the file's); and a copy maps the files again
//! over the same ranges and the saved pages over those. A copy reads the
//! libraries from the page cache as the template does and owns only what
//! it writes.
//!
//! `HOSTFS_UNMAP` in a template gives the range back to the memory file
//! (zeroed: its pages freed with `FALLOC_FL_PUNCH_HOLE`) instead of to
//! anonymous memory, which a copy would not see either.
//!
//! What the guest controls is bounded: at most [`MAX_MAPS`] mappings are
//! kept (past that `HOSTFS_MAP` answers `ENOMEM` and the guest's kernel
//! copies the file in, into the memory file); ranges were checked by
//! `shoal_hostcall::hostfs` before they get here.

use crate::protect::Tables;
use shoal_abi::PAGE_SIZE;
use shoal_hostcall::hostfs::Mapper;
use std::cell::RefCell;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use vm_memory::{GuestMemoryRegion, GuestRegionMmap};

/// Most file mappings a template keeps (each holds a descriptor).
pub const MAX_MAPS: usize = 4096;

/// Why a template's file mappings could not be saved or made again.
#[derive(Debug, thiserror::Error)]
pub enum FileMapError {
    /// `/proc/self/pagemap` could not be read.
    #[error("cannot read which pages of the mapped files the template wrote (/proc/self/pagemap): {0}")]
    Pagemap(std::io::Error),
    /// The template's written pages could not be put in its memory file.
    #[error("cannot save the template's written pages of the mapped files: {0}")]
    Save(std::io::Error),
    /// A copy could not map a file or saved pages again.
    #[error("cannot map the template's mapped files again at guest address {addr:#x}: {source}")]
    Remap {
        /// Where.
        addr: u64,
        /// What the system said.
        source: std::io::Error,
    },
}

/// One mounted file mapped over guest range `[addr, addr + len)` from `off`.
struct Map {
    addr: u64,
    len: u64,
    file: Rc<OwnedFd>,
    off: u64,
}

/// A template's file mappings (and, in a copy after [`FileMaps::remake`],
/// nothing: a copy records none).
pub(crate) struct FileMaps {
    /// The template's memory file (guest-physical address = offset);
    /// `None` once this is a copy.
    memory: RefCell<Option<OwnedFd>>,
    maps: RefCell<Vec<Map>>,
    /// Guest ranges inside `maps` whose pages the template wrote, saved
    /// in the memory file at the ready point ([`FileMaps::save`]).
    written: RefCell<Vec<(u64, u64)>>,
}

fn last_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn errno() -> i32 {
    last_err().raw_os_error().unwrap_or(libc::EIO)
}

/// `dup(fd)`, close-on-exec.
fn dup(fd: RawFd) -> Result<OwnedFd, i32> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) only adds a descriptor.
    let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if d < 0 {
        return Err(errno());
    }
    // SAFETY: a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(d) })
}

/// `mmap(MAP_FIXED)` of `fd` from `off` over `region`'s guest-physical
/// `[addr, addr + len)`, read-write for the VMM (the guest's page tables
/// decide what the guest may do), private or shared.
fn map_at(region: &GuestRegionMmap<()>, addr: u64, len: u64, fd: RawFd, off: u64, shared: bool) -> std::io::Result<()> {
    let inside = addr.checked_add(len).is_some_and(|e| e <= region.len());
    let (Ok(at), Ok(n), Ok(off)) = (usize::try_from(addr), usize::try_from(len), libc::off_t::try_from(off)) else {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    if !inside {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let flags = if shared { libc::MAP_SHARED } else { libc::MAP_PRIVATE };
    // SAFETY: [at, at + n) lies inside `region` (checked above), guest
    // memory that no Rust reference points into across a hypercall;
    // MAP_FIXED replaces only those pages.
    let p = unsafe { libc::mmap(region.as_ptr().add(at).cast(), n, libc::PROT_READ | libc::PROT_WRITE, flags | libc::MAP_FIXED, fd, off) };
    if p == libc::MAP_FAILED {
        return Err(last_err());
    }
    Ok(())
}

impl FileMaps {
    /// Records for a template whose guest memory is the memory file `memory`.
    pub(crate) fn new(memory: RawFd) -> std::io::Result<FileMaps> {
        let memory = dup(memory).map_err(std::io::Error::from_raw_os_error)?;
        Ok(FileMaps { memory: RefCell::new(Some(memory)), maps: RefCell::new(Vec::new()), written: RefCell::new(Vec::new()) })
    }

    /// How many file mappings are kept.
    pub(crate) fn len(&self) -> usize {
        self.maps.borrow().len()
    }

    /// Forgets what lay in `[addr, addr + len)` (parts of mappings
    /// around it stay).
    fn cut(&self, addr: u64, len: u64) {
        let end = addr.saturating_add(len);
        let mut maps = self.maps.borrow_mut();
        let old = std::mem::take(&mut *maps);
        for m in old {
            let m_end = m.addr + m.len;
            if m_end <= addr || m.addr >= end {
                maps.push(m);
                continue;
            }
            if m.addr < addr {
                maps.push(Map { addr: m.addr, len: addr - m.addr, file: m.file.clone(), off: m.off });
            }
            if m_end > end {
                maps.push(Map { addr: end, len: m_end - end, file: m.file.clone(), off: m.off + (end - m.addr) });
            }
        }
    }

    /// At the ready point: the pages of the mapped ranges the template
    /// wrote go into its memory file (at their guest-physical address),
    /// for [`FileMaps::remake`] to map over the files in each copy.
    pub(crate) fn save(&self, region: &GuestRegionMmap<()>) -> Result<(), FileMapError> {
        let Some(memory) = &*self.memory.borrow() else { return Ok(()) };
        let maps = self.maps.borrow();
        if maps.is_empty() {
            return Ok(());
        }
        let pagemap = std::fs::File::open("/proc/self/pagemap").map_err(FileMapError::Pagemap)?;
        let memory = std::fs::File::from(memory.try_clone().map_err(FileMapError::Save)?);
        let base = region.as_ptr() as u64;
        let mut written: Vec<(u64, u64)> = Vec::new();
        let mut entries = vec![0u8; 8 * 512];
        for m in maps.iter() {
            let pages = m.len / PAGE_SIZE;
            let mut done = 0u64;
            while done < pages {
                let n = (pages - done).min(512);
                let buf = &mut entries[..(8 * n) as usize];
                pagemap.read_exact_at(buf, (base + m.addr) / PAGE_SIZE * 8 + done * 8).map_err(FileMapError::Pagemap)?;
                for (i, e) in buf.chunks_exact(8).enumerate() {
                    let e = u64::from_ne_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]);
                    // Present and no longer the file's page (copied on a
                    // write), or swapped out (only a copied page is).
                    let (present, swapped, file) = (e >> 63 & 1 == 1, e >> 62 & 1 == 1, e >> 61 & 1 == 1);
                    if !(present && !file || swapped) {
                        continue;
                    }
                    let page = m.addr + (done + i as u64) * PAGE_SIZE;
                    match written.last_mut() {
                        Some((a, l)) if *a + *l == page => *l += PAGE_SIZE,
                        _ => written.push((page, PAGE_SIZE)),
                    }
                }
                done += n;
            }
        }
        for &(a, l) in &written {
            // SAFETY: [a, a + l) lies inside the mapping `m` it came from,
            // inside guest memory; the guest does not run now (the ready
            // point), so nothing writes it while it is read.
            let bytes = unsafe { core::slice::from_raw_parts(region.as_ptr().add(a as usize), l as usize) };
            memory.write_all_at(bytes, a).map_err(FileMapError::Save)?;
        }
        *self.written.borrow_mut() = written;
        Ok(())
    }

    /// In a copy, after the template's memory file was mapped (private)
    /// over guest memory: the files again over their ranges, then the
    /// template's written pages of them from the memory file. Then this
    /// records nothing more (a copy's later mappings are its own).
    pub(crate) fn remake(&self, region: &GuestRegionMmap<()>) -> Result<(), FileMapError> {
        let Some(memory) = self.memory.borrow_mut().take() else { return Ok(()) };
        let maps = std::mem::take(&mut *self.maps.borrow_mut());
        let written = std::mem::take(&mut *self.written.borrow_mut());
        for m in &maps {
            map_at(region, m.addr, m.len, m.file.as_raw_fd(), m.off, false).map_err(|source| FileMapError::Remap { addr: m.addr, source })?;
        }
        for (a, l) in written {
            map_at(region, a, l, memory.as_raw_fd(), a, false).map_err(|source| FileMapError::Remap { addr: a, source })?;
        }
        Ok(())
    }
}

/// The `HOSTFS_MAP` mapper of a template: hvt's ([`Tables`]), recording
/// each file mapping while the run is a template.
pub(crate) struct Recording<'a> {
    /// The VM's mapper.
    pub tables: &'a Tables<'a>,
    /// What is recorded.
    pub maps: &'a FileMaps,
}

impl Mapper for Recording<'_> {
    fn free_memory(&self, addr: u64, len: u64) -> bool {
        self.tables.free_memory(addr, len)
    }

    fn exec_allowed(&self) -> bool {
        self.tables.exec_allowed()
    }

    fn map_file(&self, fd: RawFd, off: u64, addr: u64, len: u64, prot: u64) -> Result<(), i32> {
        if self.maps.memory.borrow().is_none() {
            return self.tables.map_file(fd, off, addr, len, prot);
        }
        // A split may leave two where one was, and this one is added.
        if self.maps.len() + 2 > MAX_MAPS {
            return Err(libc::ENOMEM);
        }
        let file = dup(fd)?;
        self.tables.map_file(fd, off, addr, len, prot)?;
        self.maps.cut(addr, len);
        self.maps.maps.borrow_mut().push(Map { addr, len, file: Rc::new(file), off });
        Ok(())
    }

    fn map_zero(&self, addr: u64, len: u64, prot: u64) -> Result<(), i32> {
        let memory = self.maps.memory.borrow();
        let Some(memory) = &*memory else { return self.tables.map_zero(addr, len, prot) };
        let (Ok(a), Ok(n)) = (libc::off_t::try_from(addr), libc::off_t::try_from(len)) else { return Err(libc::EINVAL) };
        // SAFETY: fallocate on the template's own memory file: the pages
        // of [addr, addr + len) (checked to be the guest's free memory)
        // read as zeros from now on, as fresh memory must.
        if unsafe { libc::fallocate(memory.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, a, n) } != 0 {
            return Err(errno());
        }
        map_at(self.tables.low, addr, len, memory.as_raw_fd(), addr, true).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        self.maps.cut(addr, len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd() -> Rc<OwnedFd> {
        Rc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()))
    }

    fn ranges(f: &FileMaps) -> Vec<(u64, u64, u64)> {
        let mut v: Vec<(u64, u64, u64)> = f.maps.borrow().iter().map(|m| (m.addr, m.len, m.off)).collect();
        v.sort();
        v
    }

    /// A cut keeps what lies around it, each part at its own file offset.
    #[test]
    fn a_cut_keeps_the_parts_around_it_at_their_offsets() {
        let null = std::fs::File::open("/dev/null").unwrap();
        let f = FileMaps::new(null.as_raw_fd()).unwrap();
        let p = PAGE_SIZE;
        f.maps.borrow_mut().push(Map { addr: 10 * p, len: 10 * p, file: fd(), off: 4 * p });
        f.maps.borrow_mut().push(Map { addr: 30 * p, len: 2 * p, file: fd(), off: 0 });
        f.cut(12 * p, 3 * p);
        assert_eq!(ranges(&f), vec![(10 * p, 2 * p, 4 * p), (15 * p, 5 * p, 9 * p), (30 * p, 2 * p, 0)]);
        // Over the end of one and the start of another.
        f.cut(19 * p, 12 * p);
        assert_eq!(ranges(&f), vec![(10 * p, 2 * p, 4 * p), (15 * p, 4 * p, 9 * p), (31 * p, p, p)]);
        // Around a whole mapping, and touching but not overlapping.
        f.cut(9 * p, 3 * p);
        f.cut(19 * p, 12 * p);
        assert_eq!(ranges(&f), vec![(15 * p, 4 * p, 9 * p), (31 * p, p, p)]);
    }
}
