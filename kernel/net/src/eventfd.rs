//! `eventfd`, `eventfd2`: a 64-bit counter as a descriptor (docs/design.md "Networking").
//!
//! Linux semantics: a read needs an 8-byte buffer and returns the counter
//! and zeroes it (with `EFD_SEMAPHORE`: returns 1 and decrements it), or
//! would block at 0; a write adds its 8-byte value, or would block while
//! the sum would exceed `0xffff_ffff_ffff_fffe`; writing `u64::MAX` is
//! `EINVAL`. Readable while the counter is non-zero, writable while 1 more
//! fits.

use shoal_plat::{Errno, SysResult};
use shoal_vfs::obj::*;

use crate::abi::*;

/// The largest value the counter holds.
const MAX: u64 = u64::MAX - 1;

/// One eventfd.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct EventFd {
    count: u64,
    semaphore: bool,
    gen: u64,
    /// Its readiness-log source key (`shoal_vfs::readylog::TAG_EVENT`).
    pub src: u64,
}

/// Serial numbers of eventfds, for their readiness-log keys.
static SERIAL: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// The last serial number given (the recovery log keeps it: a rebooted
/// component must not hand out a readiness-log tag again).
pub(crate) fn serial() -> u64 {
    SERIAL.load(core::sync::atomic::Ordering::Relaxed)
}

/// Sets the last serial number given (after a reboot, from the log).
pub(crate) fn set_serial(n: u64) {
    SERIAL.store(n, core::sync::atomic::Ordering::Relaxed);
}

impl EventFd {
    pub fn new(init: u64, semaphore: bool) -> EventFd {
        let serial = SERIAL.fetch_add(1, core::sync::atomic::Ordering::Relaxed) + 1;
        let src = shoal_vfs::readylog::TAG_EVENT | (serial & (shoal_vfs::readylog::TAG_PIPE - 1));
        EventFd { count: init, semaphore, gen: 0, src }
    }

    /// Its state changed: the generation moves on, waiters and the
    /// readiness log learn of it.
    fn changed(&mut self) {
        self.gen += 1;
        shoal_vfs::readylog::note(self.src);
        crate::wake();
    }

    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, Errno> {
        let out = buf.get_mut(..8).ok_or(Errno::EINVAL)?;
        if self.count == 0 {
            return Err(Errno::EAGAIN);
        }
        let v = if self.semaphore { 1 } else { self.count };
        self.count -= v;
        out.copy_from_slice(&v.to_ne_bytes());
        self.changed();
        Ok(8)
    }

    pub fn write(&mut self, data: &[u8]) -> Result<usize, Errno> {
        let b: [u8; 8] = data.get(..8).and_then(|b| b.try_into().ok()).ok_or(Errno::EINVAL)?;
        let v = u64::from_ne_bytes(b);
        if v == u64::MAX {
            return Err(Errno::EINVAL);
        }
        if MAX - self.count < v {
            return Err(Errno::EAGAIN);
        }
        self.count += v;
        self.changed();
        Ok(8)
    }

    pub fn ready(&self) -> Readiness {
        let mut m = 0;
        if self.count > 0 {
            m |= EPOLLIN | EPOLLRDNORM;
        }
        if self.count < MAX {
            m |= EPOLLOUT | EPOLLWRNORM;
        }
        Readiness { mask: m, gen: self.gen }
    }
}

/// `eventfd2(initval, flags)`.
pub fn eventfd2(init: u32, flags: i32) -> SysResult {
    if flags & !(EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC) != 0 {
        return Err(Errno::EINVAL);
    }
    let id = crate::with(|n| n.add(crate::Obj::Event(EventFd::new(init as u64, flags & EFD_SEMAPHORE != 0))));
    let fd = shoal_vfs::with(|v| v.install_obj(id, flags & EFD_NONBLOCK != 0, flags & EFD_CLOEXEC != 0))?;
    Ok(fd as u64)
}
