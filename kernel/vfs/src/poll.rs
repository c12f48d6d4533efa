//! `poll`, `ppoll`, `select`, `pselect6`: readiness of descriptors.
//!
//! Regular files, directories and devices are always ready for reading
//! and writing (Linux's `DEFAULT_POLLMASK`); stdin is readable (a read
//! returns end of file at once); stdout and stderr are writable; a pipe is
//! readable when it holds data, writable when `PIPE_BUF` bytes fit, reports
//! `POLLHUP` on the reading side when no writer is left and `POLLERR` on
//! the writing side when no reader is left; objects (sockets, eventfds,
//! timerfds, epoll instances) answer through module `obj`, and a wait
//! wakes at the earliest timer among the descriptors waited on.
//!
//! The signal mask of `ppoll` and `pselect6` is the thread's mask for the
//! wait: a signal it lets through (already pending, or sent by another
//! thread meanwhile) ends the wait with `EINTR` when nothing is ready, is
//! delivered with that mask in force, and then the old mask comes back
//! (the syscall table restores it after delivery, Linux's saved sigmask);
//! on any other outcome the old mask comes back at once.

use alloc::vec::Vec;
use shoal_plat::{umem, Args, Errno, SysResult};

use crate::{Vfs, MAX_FDS};

pub const POLLIN: i16 = 0x1;
pub const POLLPRI: i16 = 0x2;
pub const POLLOUT: i16 = 0x4;
pub const POLLERR: i16 = 0x8;
pub const POLLHUP: i16 = 0x10;
pub const POLLNVAL: i16 = 0x20;
pub const POLLRDNORM: i16 = 0x40;
pub const POLLWRNORM: i16 = 0x100;

const IN: i16 = POLLIN | POLLRDNORM;
const OUT: i16 = POLLOUT | POLLWRNORM;

/// The earlier of two optional deadlines.
fn earlier(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// `struct pollfd`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PollFd {
    pub fd: i32,
    pub events: i16,
    pub revents: i16,
}

impl Vfs {
    /// Everything `fd` is ready for (`POLLNVAL` if it is not open): the
    /// readiness every kind of descriptor answers (module `obj`), as poll
    /// bits (`POLLRDHUP` is reported only where asked for, by the caller's
    /// mask).
    pub(crate) fn ready_mask(&self, fd: i32) -> i16 {
        let Ok(i) = self.ofd_of(fd) else { return POLLNVAL };
        let o = self.ofd(i);
        (self.target_ready(o.target, o.flags, o.offset).mask & 0x7fff) as i16
    }

    /// The earliest time one of the descriptors `fds` may become ready by
    /// itself (a timerfd), so that a wait for them wakes then.
    pub(crate) fn fds_deadline(&self, fds: impl Iterator<Item = i32>) -> Option<u64> {
        fds.filter_map(|fd| self.ofd_of(fd).ok().and_then(|i| self.ofd_deadline(i))).min()
    }

    /// Fills in `revents` of every entry; returns how many have any.
    pub(crate) fn poll_scan(&self, fds: &mut [PollFd]) -> usize {
        let mut n = 0;
        for p in fds.iter_mut() {
            p.revents = if p.fd < 0 { 0 } else { self.ready_mask(p.fd) & (p.events | POLLERR | POLLHUP | POLLNVAL) };
            if p.revents != 0 {
                n += 1;
            }
        }
        n
    }

    /// One pass of `select` over the three sets (each `nfds` bits, or
    /// absent); clears the bits that are not ready; returns the count.
    pub(crate) fn select_scan(&self, nfds: usize, sets: &mut [Option<Vec<u64>>; 3]) -> Result<usize, Errno> {
        let mut n = 0;
        for fd in 0..nfds {
            let (w, b) = (fd / 64, 1u64 << (fd % 64));
            let wanted = sets.iter().any(|s| s.as_ref().is_some_and(|s| s[w] & b != 0));
            if !wanted {
                continue;
            }
            let m = self.ready_mask(fd as i32);
            if m & POLLNVAL != 0 {
                return Err(Errno::EBADF);
            }
            let ok = [m & (IN | POLLHUP | POLLERR) != 0, m & (OUT | POLLERR) != 0, m & POLLPRI != 0];
            for (k, set) in sets.iter_mut().enumerate() {
                if let Some(s) = set {
                    if s[w] & b != 0 {
                        if ok[k] {
                            n += 1;
                        } else {
                            s[w] &= !b;
                        }
                    }
                }
            }
        }
        Ok(n)
    }
}

/// The deadline of a relative timeout of `ns` nanoseconds (`None`: none).
fn deadline(ns: Option<u64>) -> Option<u64> {
    ns.map(|ns| shoal_time::monotonic_ns().saturating_add(ns))
}

/// Nanoseconds left until `deadline`.
fn left(deadline: u64) -> u64 {
    deadline.saturating_sub(shoal_time::monotonic_ns())
}

/// The poll loop: scan, and while nothing is ready, wait until the
/// deadline. Returns the number of ready entries.
fn do_poll(fds_addr: u64, nfds: u64, dl: Option<u64>) -> SysResult {
    if nfds > MAX_FDS as u64 {
        return Err(Errno::EINVAL);
    }
    let bytes = umem::slice_mut(fds_addr, nfds as usize * core::mem::size_of::<PollFd>())?;
    let mut fds: Vec<PollFd> = (0..nfds as usize).map(|k| umem::read(fds_addr + 8 * k as u64)).collect::<Result<_, _>>()?;
    loop {
        let n = crate::with(|v| v.poll_scan(&mut fds));
        // As Linux: ready descriptors win over a signal, a signal over
        // the timeout.
        if n == 0 && shoal_sched::has_deliverable() {
            return Err(Errno::EINTR);
        }
        if n > 0 || dl.is_some_and(|d| left(d) == 0) {
            for (k, p) in fds.iter().enumerate() {
                bytes[8 * k + 6..8 * k + 8].copy_from_slice(&p.revents.to_ne_bytes());
            }
            return Ok(n as u64);
        }
        let timers = crate::with(|v| v.fds_deadline(fds.iter().map(|p| p.fd)));
        crate::wait::block("poll", earlier(dl, timers))?;
    }
}

/// `poll(fds, nfds, timeout_ms)`.
pub fn poll(a: &Args) -> SysResult {
    let ms = a.int(2);
    let dl = if ms < 0 { None } else { deadline(Some(ms as u64 * 1_000_000)) };
    do_poll(a.u(0), a.u(1), dl)
}

/// Reads a `struct timespec` timeout (`EINVAL` if malformed).
fn timespec_ns(addr: u64) -> Result<Option<u64>, Errno> {
    if addr == 0 {
        return Ok(None);
    }
    let [s, ns]: [i64; 2] = umem::read(addr)?;
    if s < 0 || !(0..1_000_000_000).contains(&ns) {
        return Err(Errno::EINVAL);
    }
    Ok(Some((s as u64).saturating_mul(1_000_000_000).saturating_add(ns as u64)))
}

/// Writes the time left back into a timespec (`ppoll`, `pselect6`) or a
/// timeval (`select`) as Linux does.
fn write_left(addr: u64, dl: Option<u64>, micro: bool) -> Result<(), Errno> {
    if let (Some(d), true) = (dl, addr != 0) {
        let l = left(d);
        let sub = if micro { (l % 1_000_000_000) / 1000 } else { l % 1_000_000_000 };
        umem::write(addr, [(l / 1_000_000_000) as i64, sub as i64])?;
    }
    Ok(())
}

/// SIGKILL and SIGSTOP, which no mask blocks.
const UNBLOCKABLE: u64 = (1 << 8) | (1 << 18);

/// Makes the mask at `addr` (`size` bytes; none if `addr` is 0) the
/// thread's for the wait; returns the mask it replaced.
fn apply_sigmask(addr: u64, size: u64) -> Result<Option<u64>, Errno> {
    if addr == 0 {
        return Ok(None);
    }
    if size != 8 {
        return Err(Errno::EINVAL);
    }
    let m: u64 = umem::read(addr)?;
    let (old, pending) = shoal_sched::sig_state();
    shoal_sched::set_sig_state(m & !UNBLOCKABLE, pending);
    Ok(Some(old))
}

/// Ends the temporary mask: interrupted by a signal, it stays until the
/// signal is delivered (the syscall table restores `old` then); otherwise
/// `old` is back at once.
fn end_sigmask(old: Option<u64>, r: &SysResult) {
    let Some(old) = old else { return };
    if *r == Err(Errno::EINTR) {
        shoal_sched::set_saved_mask(old);
    } else {
        let (_, pending) = shoal_sched::sig_state();
        shoal_sched::set_sig_state(old, pending);
    }
}

/// `ppoll(fds, nfds, timeout, sigmask, sigsetsize)`.
pub fn ppoll(a: &Args) -> SysResult {
    let dl = deadline(timespec_ns(a.u(2))?);
    let old = apply_sigmask(a.u(3), a.u(4))?;
    let r = do_poll(a.u(0), a.u(1), dl);
    end_sigmask(old, &r);
    write_left(a.u(2), dl, false)?;
    r
}

fn do_select(nfds: i32, addrs: [u64; 3], dl: Option<u64>) -> SysResult {
    if nfds < 0 {
        return Err(Errno::EINVAL);
    }
    let nfds = (nfds as usize).min(MAX_FDS);
    let words = nfds.div_ceil(64);
    let mut sets: [Option<Vec<u64>>; 3] = [None, None, None];
    for (k, &addr) in addrs.iter().enumerate() {
        if addr != 0 {
            let mut v = alloc::vec![0u64; words];
            let bytes = umem::slice(addr, nfds.div_ceil(8))?;
            for (i, b) in bytes.iter().enumerate() {
                v[i / 8] |= (*b as u64) << (8 * (i % 8));
            }
            // Bits at or above nfds are ignored.
            if !nfds.is_multiple_of(64) {
                v[words - 1] &= (1u64 << (nfds % 64)) - 1;
            }
            sets[k] = Some(v);
        }
    }
    loop {
        let mut out = sets.clone();
        let n = crate::with(|v| v.select_scan(nfds, &mut out))?;
        if n == 0 && shoal_sched::has_deliverable() {
            return Err(Errno::EINTR);
        }
        if n > 0 || dl.is_some_and(|d| left(d) == 0) {
            for (k, &addr) in addrs.iter().enumerate() {
                if let Some(v) = &out[k] {
                    let bytes = umem::slice_mut(addr, nfds.div_ceil(8))?;
                    for (i, b) in bytes.iter_mut().enumerate() {
                        *b = (v[i / 8] >> (8 * (i % 8))) as u8;
                    }
                }
            }
            return Ok(n as u64);
        }
        let wanted = |fd: &usize| sets.iter().any(|s| s.as_ref().is_some_and(|s| s[fd / 64] & (1 << (fd % 64)) != 0));
        let timers = crate::with(|v| v.fds_deadline((0..nfds).filter(wanted).map(|fd| fd as i32)));
        crate::wait::block("select", earlier(dl, timers))?;
    }
}

/// `select(nfds, readfds, writefds, exceptfds, timeout)`.
pub fn select(a: &Args) -> SysResult {
    let tv = a.u(4);
    let ns = if tv == 0 {
        None
    } else {
        let [s, us]: [i64; 2] = umem::read(tv)?;
        if s < 0 || !(0..1_000_000).contains(&us) {
            return Err(Errno::EINVAL);
        }
        Some((s as u64).saturating_mul(1_000_000_000).saturating_add(us as u64 * 1000))
    };
    let dl = deadline(ns);
    let r = do_select(a.int(0), [a.u(1), a.u(2), a.u(3)], dl);
    write_left(tv, dl, true)?;
    r
}

/// `pselect6(nfds, readfds, writefds, exceptfds, timeout, sigmask)`.
pub fn pselect6(a: &Args) -> SysResult {
    let dl = deadline(timespec_ns(a.u(4))?);
    // The sixth argument points to { const sigset_t *ss; size_t ss_len; }.
    let [ss, ss_len]: [u64; 2] = if a.u(5) != 0 { umem::read(a.u(5))? } else { [0, 0] };
    let old = apply_sigmask(ss, ss_len)?;
    let r = do_select(a.int(0), [a.u(1), a.u(2), a.u(3)], dl);
    end_sigmask(old, &r);
    write_left(a.u(4), dl, false)?;
    r
}
