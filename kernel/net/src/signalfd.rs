//! `signalfd`, `signalfd4`: a descriptor that reads pending signals.
//!
//! Linux semantics: a read takes the calling thread's pending signals in
//! the descriptor's mask, lowest first (a queued real-time signal once per
//! send, each with its own information), as `struct signalfd_siginfo`
//! records of 128 bytes, as many as the buffer holds (`EINVAL` below
//! 128); with none it would block. Readable (`poll`, `select`, `epoll`)
//! while such a signal is pending for the thread that asks. The signals
//! are usually blocked, so that they stay pending for the descriptor
//! instead of running a handler. SIGKILL and SIGSTOP are never taken.

use shoal_plat::{umem, Errno, SysResult};
use shoal_process::signal;
use shoal_vfs::obj::*;

/// `SFD_NONBLOCK` (`O_NONBLOCK`).
const SFD_NONBLOCK: i32 = 0o4000;
/// `SFD_CLOEXEC` (`O_CLOEXEC`).
const SFD_CLOEXEC: i32 = 0o2_000_000;
/// Size of `struct signalfd_siginfo`.
const RECORD: usize = 128;

/// One signalfd: the signals it reads.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SignalFd {
    mask: u64,
}

impl SignalFd {
    /// Readable while the calling thread has a signal of the mask pending;
    /// the generation follows every signal the process generates.
    pub fn ready(&self) -> Readiness {
        let (_, pending) = shoal_sched::sig_state();
        Readiness { mask: if pending & self.mask != 0 { EPOLLIN | EPOLLRDNORM } else { 0 }, gen: signal::generated() }
    }

    /// Reads as many pending signals of the mask as `buf` holds records.
    pub fn read(&self, buf: &mut [u8]) -> Result<usize, Errno> {
        if buf.len() < RECORD {
            return Err(Errno::EINVAL);
        }
        let mut n = 0;
        while buf.len() - n >= RECORD {
            let Some((sig, info)) = signal::take_pending(self.mask) else { break };
            buf[n..n + RECORD].copy_from_slice(&record(sig, &info));
            n += RECORD;
        }
        if n == 0 {
            return Err(Errno::EAGAIN);
        }
        Ok(n)
    }
}

/// The `struct signalfd_siginfo` of signal `sig` with `info`.
fn record(sig: i32, info: &signal::Info) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    let si = info.siginfo(sig);
    r[0..4].copy_from_slice(&(sig as u32).to_ne_bytes()); // ssi_signo
    r[8..12].copy_from_slice(&si.si_code.to_ne_bytes()); // ssi_code
    r[12..16].copy_from_slice(&(si.si_pid as u32).to_ne_bytes()); // ssi_pid
    r[16..20].copy_from_slice(&si.si_uid.to_ne_bytes()); // ssi_uid
    r[44..48].copy_from_slice(&(info.b as u32).to_ne_bytes()); // ssi_int
    r[48..56].copy_from_slice(&info.b.to_ne_bytes()); // ssi_ptr
    r
}

/// `signalfd4(fd, mask, sizemask, flags)`: a new descriptor (`fd` -1) or
/// a new mask for an existing one (`EINVAL` if `fd` is not a signalfd).
pub fn signalfd4(fd: i32, mask: u64, size: u64, flags: i32) -> SysResult {
    if size != 8 || flags & !(SFD_NONBLOCK | SFD_CLOEXEC) != 0 {
        return Err(Errno::EINVAL);
    }
    let mask = umem::read::<u64>(mask)? & !signal::UNBLOCKABLE;
    if fd != -1 {
        let (id, _) = shoal_vfs::obj_of_fd(fd).map_err(|e| if e == Errno::ENOTSOCK { Errno::EINVAL } else { e })?;
        return crate::with(|n| match n.objs.get_mut(&id) {
            Some(crate::Obj::Signal(s)) => {
                s.mask = mask;
                Ok(fd as u64)
            }
            _ => Err(Errno::EINVAL),
        });
    }
    let id = crate::with(|n| n.add(crate::Obj::Signal(SignalFd { mask })));
    let fd = shoal_vfs::with(|v| v.install_obj(id, flags & SFD_NONBLOCK != 0, flags & SFD_CLOEXEC != 0))?;
    Ok(fd as u64)
}
