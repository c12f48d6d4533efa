//! Guest addresses and checked access to guest memory.
//!
//! In the style of `vm-memory` and Solo5's checked guest-physical addresses:
//! a [`GuestMemory`] is a view of the host mapping that backs guest memory,
//! and the only way to reach a guest byte is an accessor that first checks
//! that the whole range lies in `[BOOT_INFO_ADDR, size)` without overflow.
//! Guest-controlled numbers (hypercall arguments) go through the same
//! accessors, so a tender never forms a host pointer from a guest address it
//! has not checked.
//!
//! Nothing here allocates, so a tender may use it in a forked child and in
//! its hypercall handlers.

use shoal_abi::BOOT_INFO_ADDR;

/// An address in guest memory (guest-physical on hvt, guest-virtual equal
/// to host-virtual on spt).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GuestAddr(pub u64);

impl GuestAddr {
    /// `self + off`, if that does not overflow.
    pub fn checked_add(self, off: u64) -> Option<GuestAddr> {
        self.0.checked_add(off).map(GuestAddr)
    }
}

impl core::fmt::LowerHex for GuestAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::LowerHex::fmt(&self.0, f)
    }
}

/// A guest range that does not lie in guest memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the guest range [{addr:#x}, +{len:#x}) is outside guest memory [{low:#x}, {size:#x})")]
pub struct MemError {
    /// Start of the range.
    pub addr: u64,
    /// Its length.
    pub len: u64,
    /// Lowest accessible guest address.
    pub low: u64,
    /// Size of guest memory.
    pub size: u64,
}

/// Plain data that may be copied to and from guest memory as bytes: every
/// bit pattern is a valid value and there is no padding.
///
/// # Safety
/// Implement only for `#[repr(C)]` types made of integers and integer
/// arrays, without padding bytes.
pub unsafe trait Pod: Copy {}

// SAFETY: all of these are #[repr(C)] structures of u64/i64/u32 fields and
// byte arrays laid out without padding (shoal-abi's layout test checks the
// sizes), or plain integers.
unsafe impl Pod for shoal_abi::BootInfo {}
// SAFETY: as above.
unsafe impl Pod for shoal_abi::ConsoleWriteArgs {}
// SAFETY: as above.
unsafe impl Pod for shoal_abi::HaltArgs {}
// SAFETY: as above.
unsafe impl Pod for shoal_abi::PollArgs {}
// SAFETY: as above.
unsafe impl Pod for shoal_abi::FaultArgs {}
// SAFETY: as above.
unsafe impl Pod for shoal_abi::NetArgs {}
// SAFETY: as above (u32, u32, then 8-byte fields: no padding).
unsafe impl Pod for shoal_abi::NetOp {}
// SAFETY: as above.
unsafe impl Pod for shoal_abi::NetPollArgs {}
// SAFETY: as above (three 8-byte fields).
unsafe impl Pod for shoal_abi::ConsoleReadArgs {}
// SAFETY: as above (four 8-byte fields).
unsafe impl Pod for shoal_abi::ProtectArgs {}
// SAFETY: as above (five 8-byte fields).
unsafe impl Pod for shoal_abi::AliasArgs {}
// SAFETY: as above (four 8-byte fields).
unsafe impl Pod for shoal_abi::AliasListArgs {}
// SAFETY: as above (two 8-byte fields).
unsafe impl Pod for shoal_abi::AliasPair {}
// SAFETY: as above (three 8-byte fields).
unsafe impl Pod for shoal_abi::ReleaseArgs {}
// SAFETY: as above (two 8-byte fields).
unsafe impl Pod for shoal_abi::ReleaseRange {}
// SAFETY: as above (three 8-byte fields).
unsafe impl Pod for shoal_abi::ConsoleBufferArgs {}
// SAFETY: as above (two 8-byte fields).
unsafe impl Pod for shoal_abi::SignalWordArgs {}
// SAFETY: as above (one 8-byte field).
unsafe impl Pod for shoal_abi::ReadyArgs {}
// SAFETY: as above (three 8-byte fields).
unsafe impl Pod for shoal_abi::FaultHandlerArgs {}
// SAFETY: as above (three 8-byte fields).
unsafe impl Pod for shoal_abi::ProgramFaultArgs {}
// SAFETY: as above (24 8-byte fields).
unsafe impl Pod for shoal_abi::ProgramFaultArea {}
// SAFETY: as above (three 8-byte fields).
unsafe impl Pod for shoal_abi::VolumeSaveArgs {}
// SAFETY: as above (eight 8-byte fields).
unsafe impl Pod for shoal_abi::HostFsArgs {}
// SAFETY: as above (8-byte fields and four 4-byte ones in pairs: no padding).
unsafe impl Pod for shoal_abi::HostStat {}
// SAFETY: as above (five 8-byte fields).
unsafe impl Pod for shoal_abi::PreemptArgs {}
// SAFETY: as above (two u32 fields).
unsafe impl Pod for shoal_abi::ConsoleBufferHeader {}
// SAFETY: i32, i16, i16: 8 bytes, no padding.
unsafe impl Pod for shoal_abi::NetPollFd {}
// SAFETY: a plain integer.
unsafe impl Pod for u64 {}
// SAFETY: a plain integer.
unsafe impl Pod for i64 {}
// SAFETY: a byte array.
unsafe impl<const N: usize> Pod for [u8; N] {}

/// A view of guest memory `[BOOT_INFO_ADDR, size)` backed by a host mapping.
///
/// The view is `Copy`: it holds only the host address and the size. Reads
/// and writes use unaligned raw copies, never references into guest memory,
/// so a guest writing concurrently (hvt with several vCPUs) cannot break
/// Rust's aliasing rules — it can only see torn values, which every reader
/// of guest data must tolerate anyway.
#[derive(Clone, Copy, Debug)]
pub struct GuestMemory {
    /// Host address of guest address `BOOT_INFO_ADDR`.
    base: *mut u8,
    size: u64,
}

impl GuestMemory {
    /// The lowest guest address the view gives access to.
    pub const LOW: u64 = BOOT_INFO_ADDR;

    /// A view of guest memory of `size` bytes whose guest address
    /// [`GuestMemory::LOW`] is at host address `base`.
    ///
    /// # Safety
    /// `[base, base + size - LOW)` must be mapped readable and writable (or
    /// at least readable where the tender never writes) for as long as the
    /// view or any copy of it is used, and must not overlap memory Rust code
    /// holds references to.
    pub unsafe fn new(base: *mut u8, size: u64) -> GuestMemory {
        GuestMemory { base, size }
    }

    /// Size of guest memory (guest addresses are below it).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Checks that `[addr, addr + len)` lies in guest memory; returns the
    /// host pointer of `addr`.
    pub fn host_ptr(&self, addr: GuestAddr, len: u64) -> Result<*mut u8, MemError> {
        let err = MemError { addr: addr.0, len, low: Self::LOW, size: self.size };
        let end = addr.0.checked_add(len).ok_or(err)?;
        if addr.0 < Self::LOW || end > self.size {
            return Err(err);
        }
        let off = usize::try_from(addr.0 - Self::LOW).map_err(|_| err)?;
        // `wrapping_add` keeps this a safe computation; the range check above
        // makes the result lie within the mapping the constructor promised.
        Ok(self.base.wrapping_add(off))
    }

    /// Whether `[addr, addr + len)` lies in guest memory.
    pub fn contains(&self, addr: GuestAddr, len: u64) -> bool {
        self.host_ptr(addr, len).is_ok()
    }

    /// Copies `bytes` into guest memory at `addr`.
    pub fn write(&self, addr: GuestAddr, bytes: &[u8]) -> Result<(), MemError> {
        let dst = self.host_ptr(addr, bytes.len() as u64)?;
        // SAFETY: `host_ptr` checked that the whole range is inside the
        // mapping the constructor's caller vouched for; `bytes` is host
        // memory and cannot overlap guest memory (the constructor's contract).
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) };
        Ok(())
    }

    /// Copies guest memory at `addr` into `buf`.
    pub fn read(&self, addr: GuestAddr, buf: &mut [u8]) -> Result<(), MemError> {
        let src = self.host_ptr(addr, buf.len() as u64)?;
        // SAFETY: as in `write`, with the roles swapped.
        unsafe { core::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Asks the host kernel to back the pages of `[addr, addr + len)` with
    /// writable memory now (`MADV_POPULATE_WRITE`, Linux 5.14), in one
    /// system call instead of one page fault per page on the first write:
    /// for what the loader is about to write anyway. Only an
    /// optimisation: on an older kernel, a range outside guest memory or
    /// any other failure nothing happens and the writes fault as before.
    pub fn populate_write(&self, addr: GuestAddr, len: u64) {
        /// `MADV_POPULATE_WRITE` (include/uapi/asm-generic/mman-common.h).
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        let start = addr.0 & !(shoal_abi::PAGE_SIZE - 1);
        let Some(end) = addr.0.checked_add(len).and_then(|e| e.checked_next_multiple_of(shoal_abi::PAGE_SIZE)) else { return };
        let len = end - start;
        let Ok(ptr) = self.host_ptr(GuestAddr(start), len) else { return };
        let Ok(len) = usize::try_from(len) else { return };
        // SAFETY: madvise on a range `host_ptr` checked to lie in the
        // mapping the constructor's caller vouched for; populating changes
        // no byte of it (fresh pages read as zero, present pages are kept).
        // The host mapping is page aligned (mmap), so `start` is too.
        unsafe { libc::madvise(ptr.cast(), len, MADV_POPULATE_WRITE) };
    }

    /// Fills `[addr, addr + len)` with zeros.
    pub fn zero(&self, addr: GuestAddr, len: u64) -> Result<(), MemError> {
        let dst = self.host_ptr(addr, len)?;
        // SAFETY: range checked by `host_ptr`; `len` fits in usize because
        // the range lies within a host mapping.
        unsafe { core::ptr::write_bytes(dst, 0, len as usize) };
        Ok(())
    }

    /// Writes the plain-data value `v` at `addr` (no alignment needed).
    pub fn write_obj<T: Pod>(&self, addr: GuestAddr, v: &T) -> Result<(), MemError> {
        let dst = self.host_ptr(addr, core::mem::size_of::<T>() as u64)?;
        // SAFETY: range checked; unaligned write of a Pod value.
        unsafe { core::ptr::write_unaligned(dst.cast::<T>(), *v) };
        Ok(())
    }

    /// Reads a plain-data value at `addr` (no alignment needed).
    pub fn read_obj<T: Pod>(&self, addr: GuestAddr) -> Result<T, MemError> {
        let src = self.host_ptr(addr, core::mem::size_of::<T>() as u64)?;
        // SAFETY: range checked; any bit pattern is a valid `T` (Pod).
        Ok(unsafe { core::ptr::read_unaligned(src.cast::<T>()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accessor_checks_bounds() {
        let mut backing = vec![0u8; 0x2000];
        // SAFETY: the vector outlives the view and is not otherwise borrowed
        // while the view is used.
        let m = unsafe { GuestMemory::new(backing.as_mut_ptr(), GuestMemory::LOW + 0x2000) };
        assert!(m.write(GuestAddr(GuestMemory::LOW), b"abc").is_ok());
        assert!(m.write(GuestAddr(GuestMemory::LOW - 1), b"a").is_err());
        assert!(m.write(GuestAddr(GuestMemory::LOW + 0x1fff), b"ab").is_err());
        assert!(m.write(GuestAddr(GuestMemory::LOW + 0x1fff), b"a").is_ok());
        assert!(m.host_ptr(GuestAddr(u64::MAX), 2).is_err());
        assert!(m.host_ptr(GuestAddr(GuestMemory::LOW + 1), u64::MAX).is_err());
        assert!(m.host_ptr(GuestAddr(0), 0).is_err());
        m.write_obj(GuestAddr(GuestMemory::LOW + 3), &0x1122_3344_5566_7788u64).unwrap();
        assert_eq!(m.read_obj::<u64>(GuestAddr(GuestMemory::LOW + 3)).unwrap(), 0x1122_3344_5566_7788);
        let mut b = [0u8; 3];
        m.read(GuestAddr(GuestMemory::LOW), &mut b).unwrap();
        assert_eq!(&b, b"abc");
        drop(backing);
    }

    #[test]
    fn populating_changes_no_byte_and_ignores_what_it_cannot_do() {
        let len = 4 * shoal_abi::PAGE_SIZE as usize;
        // SAFETY: a fresh private anonymous mapping, unmapped below.
        let p = unsafe { libc::mmap(core::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the mapping outlives the view; nothing else uses it.
        let m = unsafe { GuestMemory::new(p.cast(), GuestMemory::LOW + len as u64) };
        let at = GuestAddr(GuestMemory::LOW + 100);
        m.write(at, b"kept").unwrap();
        // Unaligned start and length: whole pages around them.
        m.populate_write(GuestAddr(GuestMemory::LOW + 5), 2 * shoal_abi::PAGE_SIZE + 7);
        let mut b = [0u8; 4];
        m.read(at, &mut b).unwrap();
        assert_eq!(&b, b"kept");
        assert_eq!(m.read_obj::<u64>(GuestAddr(GuestMemory::LOW + shoal_abi::PAGE_SIZE)).unwrap(), 0);
        // Outside guest memory, overflowing, or on memory not page aligned:
        // nothing happens.
        m.populate_write(GuestAddr(GuestMemory::LOW + len as u64), shoal_abi::PAGE_SIZE);
        m.populate_write(GuestAddr(u64::MAX - 1), 16);
        let mut backing = vec![1u8; 64];
        // SAFETY: the vector outlives the view and is not otherwise borrowed.
        let v = unsafe { GuestMemory::new(backing.as_mut_ptr().wrapping_add(1), GuestMemory::LOW + 32) };
        v.populate_write(GuestAddr(GuestMemory::LOW), 32);
        assert!(backing.iter().all(|&x| x == 1));
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(p, len) };
    }
}
