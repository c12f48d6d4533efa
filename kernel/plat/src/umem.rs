//! Checked access to application memory named in syscall arguments.
//!
//! The application and the kernel share one address space (that is the
//! point of a unikernel), so the application is not an adversary here; but
//! a wrong pointer must still come back as `EFAULT`, as on Linux, rather
//! than crash the kernel. Every access goes through these functions, which
//! check that the range lies inside guest memory without overflow.

use crate::Errno;
use core::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(test))]
static LOW: AtomicU64 = AtomicU64::new(u64::MAX);
#[cfg(not(test))]
static HIGH: AtomicU64 = AtomicU64::new(0);
// Unit tests run on the host and pass host pointers.
#[cfg(test)]
static LOW: AtomicU64 = AtomicU64::new(1);
#[cfg(test)]
static HIGH: AtomicU64 = AtomicU64::new(u64::MAX);

/// Sets guest memory to `[low, high)`. `boot::init` calls it; host unit
/// tests of other crates call `set_bounds(1, u64::MAX)` so that host
/// pointers pass the checks (in plat's own tests that is the default).
pub fn set_bounds(low: u64, high: u64) {
    LOW.store(low, Ordering::Relaxed);
    HIGH.store(high, Ordering::Relaxed);
}

/// Checks that `[addr, addr + len)` lies inside guest memory.
pub fn check(addr: u64, len: u64) -> Result<(), Errno> {
    if len == 0 {
        return Ok(());
    }
    let end = addr.checked_add(len).ok_or(Errno::EFAULT)?;
    if addr < LOW.load(Ordering::Relaxed) || end > HIGH.load(Ordering::Relaxed) {
        return Err(Errno::EFAULT);
    }
    Ok(())
}

/// The application's bytes `[addr, addr + len)`.
pub fn slice(addr: u64, len: usize) -> Result<&'static [u8], Errno> {
    if len == 0 {
        return Ok(&[]);
    }
    check(addr, len as u64)?;
    // SAFETY: the range is inside guest memory (checked above), which is
    // mapped for the whole life of the instance; the kernel runs one flow of
    // control at a time, so nothing writes it while the syscall uses it.
    Ok(unsafe { core::slice::from_raw_parts(addr as *const u8, len) })
}

/// The application's bytes `[addr, addr + len)`, writable.
pub fn slice_mut(addr: u64, len: usize) -> Result<&'static mut [u8], Errno> {
    if len == 0 {
        return Ok(&mut []);
    }
    check(addr, len as u64)?;
    // SAFETY: as in `slice`; the syscall that asked for this buffer is its
    // only user until it returns.
    Ok(unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, len) })
}

/// Reads a `T` (a plain-old-data syscall structure) from `addr`.
pub fn read<T: Copy>(addr: u64) -> Result<T, Errno> {
    check(addr, core::mem::size_of::<T>() as u64)?;
    // SAFETY: the range is inside guest memory (checked); `T: Copy` is a
    // plain-data syscall structure for which any bit pattern the
    // application wrote is acceptable; the read is unaligned-safe.
    Ok(unsafe { core::ptr::read_unaligned(addr as *const T) })
}

/// Writes `v` to `addr`.
pub fn write<T: Copy>(addr: u64, v: T) -> Result<(), Errno> {
    check(addr, core::mem::size_of::<T>() as u64)?;
    // SAFETY: the range is inside guest memory (checked); the write is
    // unaligned-safe.
    unsafe { core::ptr::write_unaligned(addr as *mut T, v) };
    Ok(())
}

/// The NUL-terminated string at `addr`, without its NUL. Longer than `max`
/// bytes: `ENAMETOOLONG`.
pub fn cstr(addr: u64, max: usize) -> Result<&'static [u8], Errno> {
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let mut n = 0usize;
    loop {
        let p = addr.checked_add(n as u64).ok_or(Errno::EFAULT)?;
        let b: u8 = read(p)?;
        if b == 0 {
            return slice(addr, n);
        }
        n += 1;
        if n > max {
            return Err(Errno::ENAMETOOLONG);
        }
    }
}
