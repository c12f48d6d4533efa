//! `timerfd_create`, `timerfd_settime`, `timerfd_gettime` (docs/design.md "Networking").
//!
//! A timer keeps its next expiry on the monotonic clock (a
//! `CLOCK_REALTIME` absolute time is converted with the constant offset
//! between the clocks: shoal's clock is never set). Expirations are counted
//! lazily, whenever the timer is looked at: `read` returns the count as a
//! native-endian `u64` and resets it, or would block at 0; readiness is
//! `EPOLLIN` while the count is non-zero, and its generation is the number
//! of expirations ever, so edge-triggered epoll reports each new one. A
//! wait on a timer carries its next expiry as the deadline, so the instance
//! sleeps in the tender until then.

use shoal_plat::{umem, Errno, SysResult};
use shoal_vfs::obj::*;

use crate::abi::*;

const NS: u64 = 1_000_000_000;

/// One timerfd.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TimerFd {
    clock: i32,
    /// Next expiry (monotonic ns), if armed.
    next: Option<u64>,
    /// Period (ns); 0 for a one-shot timer.
    interval: u64,
    /// Expirations not read yet.
    ticks: u64,
    /// Expirations ever (the readiness generation).
    fired: u64,
}

impl TimerFd {
    pub fn new(clock: i32) -> TimerFd {
        TimerFd { clock, next: None, interval: 0, ticks: 0, fired: 0 }
    }

    /// Counts the expirations up to `now`.
    fn expire(&mut self, now: u64) {
        let Some(n) = self.next else { return };
        if now < n {
            return;
        }
        let k = match (now - n).checked_div(self.interval) {
            Some(q) => {
                let k = q + 1;
                self.next = Some(n.saturating_add(k.saturating_mul(self.interval)));
                k
            }
            None => {
                self.next = None;
                1
            }
        };
        self.ticks = self.ticks.saturating_add(k);
        self.fired = self.fired.wrapping_add(k);
    }

    pub fn read(&mut self, buf: &mut [u8], now: u64) -> Result<usize, Errno> {
        let out = buf.get_mut(..8).ok_or(Errno::EINVAL)?;
        self.expire(now);
        if self.ticks == 0 {
            return Err(Errno::EAGAIN);
        }
        out.copy_from_slice(&self.ticks.to_ne_bytes());
        self.ticks = 0;
        Ok(8)
    }

    pub fn ready(&mut self, now: u64) -> Readiness {
        self.expire(now);
        let mask = if self.ticks > 0 { EPOLLIN | EPOLLRDNORM } else { 0 };
        Readiness { mask, gen: self.fired }
    }

    /// Arms the timer at `now` for `value` ns with period `interval` (unit
    /// tests, which have no user memory to pass an `itimerspec` from).
    #[cfg(test)]
    pub fn test_arm(&mut self, now: u64, value: u64, interval: u64) {
        self.set(now, false, interval, value);
    }

    pub fn deadline(&self) -> Option<u64> {
        self.next
    }

    /// `(interval, value)` as `timerfd_gettime` reports them, in ns.
    fn get(&mut self, now: u64) -> (u64, u64) {
        self.expire(now);
        (self.interval, self.next.map_or(0, |n| n.saturating_sub(now).max(1)))
    }

    /// Arms (or with a zero value disarms) the timer.
    fn set(&mut self, now: u64, abs: bool, interval: u64, value: u64) {
        self.ticks = 0;
        self.interval = interval;
        self.next = if value == 0 {
            None
        } else if abs {
            let mono = if self.clock == CLOCK_REALTIME { value.saturating_sub(shoal_time::realtime_offset_ns()) } else { value };
            Some(mono)
        } else {
            Some(now.saturating_add(value))
        };
        crate::wake();
    }
}

/// `timerfd_create(clockid, flags)`.
pub fn create(clock: i32, flags: i32) -> SysResult {
    // The alarm clocks (8, 9) behave like their plain ones here: there is
    // no suspend to wake from.
    let clock = match clock {
        CLOCK_REALTIME | 8 => CLOCK_REALTIME,
        CLOCK_MONOTONIC | CLOCK_BOOTTIME | 9 => CLOCK_MONOTONIC,
        _ => return Err(Errno::EINVAL),
    };
    if flags & !(TFD_NONBLOCK | TFD_CLOEXEC) != 0 {
        return Err(Errno::EINVAL);
    }
    let id = crate::with(|n| n.add(crate::Obj::Timer(TimerFd::new(clock))));
    let fd = shoal_vfs::with(|v| v.install_obj(id, flags & TFD_NONBLOCK != 0, flags & TFD_CLOEXEC != 0))?;
    Ok(fd as u64)
}

/// Runs `f` on the timer behind `fd` (`EINVAL` if it is not one).
fn with_timer<R>(fd: i32, f: impl FnOnce(&mut TimerFd) -> R) -> Result<R, Errno> {
    let (id, _) = shoal_vfs::obj_of_fd(fd).map_err(|e| if e == Errno::ENOTSOCK { Errno::EINVAL } else { e })?;
    crate::with(|n| match n.objs.get_mut(&id) {
        Some(crate::Obj::Timer(t)) => Ok(f(t)),
        _ => Err(Errno::EINVAL),
    })
}

/// A `struct timespec` in ns (`EINVAL` if malformed).
fn ts_ns(s: i64, ns: i64) -> Result<u64, Errno> {
    if s < 0 || !(0..NS as i64).contains(&ns) {
        return Err(Errno::EINVAL);
    }
    Ok((s as u64).saturating_mul(NS).saturating_add(ns as u64))
}

fn itimerspec((interval, value): (u64, u64)) -> [i64; 4] {
    [(interval / NS) as i64, (interval % NS) as i64, (value / NS) as i64, (value % NS) as i64]
}

/// `timerfd_settime(fd, flags, new, old)`.
pub fn settime(fd: i32, flags: i32, new: u64, old: u64) -> SysResult {
    if flags & !(TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET) != 0 {
        return Err(Errno::EINVAL);
    }
    let [is, ins, vs, vns]: [i64; 4] = umem::read(new)?;
    let (interval, value) = (ts_ns(is, ins)?, ts_ns(vs, vns)?);
    if old != 0 {
        umem::check_write(old, 32)?;
    }
    let now = shoal_time::monotonic_ns();
    let prev = with_timer(fd, |t| {
        let prev = t.get(now);
        t.set(now, flags & TFD_TIMER_ABSTIME != 0, interval, value);
        prev
    })?;
    if old != 0 {
        umem::write(old, itimerspec(prev))?;
    }
    Ok(0)
}

/// `timerfd_gettime(fd, cur)`.
pub fn gettime(fd: i32, cur: u64) -> SysResult {
    umem::check_write(cur, 32)?;
    let now = shoal_time::monotonic_ns();
    let v = with_timer(fd, |t| t.get(now))?;
    umem::write(cur, itimerspec(v))?;
    Ok(0)
}
