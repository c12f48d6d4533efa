//! The real-time interval timer: `setitimer`/`getitimer(ITIMER_REAL)` and
//! `alarm` (issue "Nginx and Redis on shoal": Redis arms and disarms its
//! watchdog with `setitimer`).
//!
//! One timer per process, on the monotonic clock: when it expires the
//! process gets `SIGALRM` (through the same path as the signals the tender
//! forwards, [`crate::raise_host_signals`]), and it re-arms itself with
//! its interval. Expiry is noticed when the instance next looks: after
//! every system call, and when it is idle — the scheduler and the single
//! thread's waits ([`deadline`]) wake by the expiry at the latest, so a
//! sleeping program is interrupted on time (`EINTR`), as on Linux. A
//! program computing without system calls sees it at its next call.
//! `ITIMER_VIRTUAL` and `ITIMER_PROF` (CPU-time timers) are `EINVAL`:
//! shoal does not account user and system time separately.

use shoal_plat::{umem, Args, Errno, Global, SysResult};

/// `SIGALRM`.
pub const SIGALRM: i32 = 14;
const ITIMER_REAL: i32 = 0;
const NS: u64 = 1_000_000_000;

/// The armed timer: expiry (monotonic ns) and interval (0: one shot).
pub(crate) static TIMER: Global<Option<(u64, u64)>> = Global::new(None);

/// `struct timeval`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timeval {
    /// Seconds.
    pub sec: i64,
    /// Microseconds.
    pub usec: i64,
}

/// `struct itimerval`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Itimerval {
    /// Period after each expiry (zero: none).
    pub interval: Timeval,
    /// Time to the next expiry (zero: disarmed).
    pub value: Timeval,
}

fn to_ns(t: Timeval) -> Result<u64, Errno> {
    if t.sec < 0 || !(0..1_000_000).contains(&t.usec) {
        return Err(Errno::EINVAL);
    }
    Ok((t.sec as u64).saturating_mul(NS).saturating_add(t.usec as u64 * 1000))
}

fn to_tv(ns: u64) -> Timeval {
    // Linux rounds a remaining time up to the next microsecond, so an
    // armed timer never reads as zero.
    let us = ns.div_ceil(1000);
    Timeval { sec: (us / 1_000_000) as i64, usec: (us % 1_000_000) as i64 }
}

/// The timer as `getitimer` reports it at `now`.
fn current(now: u64) -> Itimerval {
    TIMER.with(|t| match *t {
        Some((at, every)) => Itimerval { interval: to_tv(every), value: to_tv(at.saturating_sub(now).max(1)) },
        None => Itimerval::default(),
    })
}

/// Arms (a non-zero `value`) or disarms the timer at `now`; returns the
/// previous setting.
fn set(now: u64, new: Itimerval) -> Result<Itimerval, Errno> {
    let (value, interval) = (to_ns(new.value)?, to_ns(new.interval)?);
    let old = current(now);
    TIMER.with(|t| *t = if value == 0 { None } else { Some((now.saturating_add(value), interval)) });
    Ok(old)
}

/// The expiry of the armed timer, if any: waits end by it at the latest.
pub fn deadline() -> Option<u64> {
    TIMER.with(|t| t.map(|(at, _)| at))
}

/// Whether the timer is armed; inline, for the system-call table's way
/// out (see [`crate::raise_host_signals_after_call`]).
#[inline]
pub fn armed() -> bool {
    TIMER.with(|t| t.is_some())
}

/// Whether the timer expired by `now`; if so it is re-armed with its
/// interval (or disarmed) and the caller raises `SIGALRM` once (expiries
/// missed meanwhile coalesce, as pending signals do).
pub fn expired(now: u64) -> bool {
    TIMER.with(|t| match *t {
        Some((at, every)) if now >= at => {
            // A one-shot timer (interval 0) is disarmed; a periodic one
            // moves to its next expiry after `now`, on the original grid.
            *t = (now - at).checked_div(every).map(|late| (at.saturating_add((late + 1).saturating_mul(every)), every));
            true
        }
        _ => false,
    })
}

fn which(a: &Args) -> Result<(), Errno> {
    match a.int(0) {
        ITIMER_REAL => Ok(()),
        _ => Err(Errno::EINVAL),
    }
}

/// `getitimer(which, curr)`.
pub fn getitimer(a: &Args) -> SysResult {
    which(a)?;
    umem::write(a.u(1), current(shoal_time::monotonic_ns()))?;
    Ok(0)
}

/// `setitimer(which, new, old)`: `new` null disarms (as Linux allows).
pub fn setitimer(a: &Args) -> SysResult {
    which(a)?;
    let new: Itimerval = if a.u(1) == 0 { Itimerval::default() } else { umem::read(a.u(1))? };
    if a.u(2) != 0 {
        umem::check_write(a.u(2), core::mem::size_of::<Itimerval>() as u64)?;
    }
    let old = set(shoal_time::monotonic_ns(), new)?;
    // A lone thread that computes must be interrupted when it expires.
    crate::republish();
    if a.u(2) != 0 {
        umem::write(a.u(2), old)?;
    }
    Ok(0)
}

/// `alarm(seconds)`: a one-shot timer (0: disarm); returns the seconds
/// the previous one had left, rounded up (0 if none).
pub fn alarm(a: &Args) -> SysResult {
    let secs = a.u(0) & 0xffff_ffff;
    let new = Itimerval { interval: Timeval::default(), value: Timeval { sec: secs as i64, usec: 0 } };
    let old = set(shoal_time::monotonic_ns(), new)?;
    crate::republish();
    Ok(old.value.sec as u64 + u64::from(old.value.usec > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tv(sec: i64, usec: i64) -> Timeval {
        Timeval { sec, usec }
    }

    #[test]
    fn arm_read_expire_rearm_and_disarm() {
        let now = 1_000 * NS;
        let old = set(now, Itimerval { interval: tv(0, 500_000), value: tv(2, 0) }).unwrap();
        assert_eq!(old, Itimerval::default());
        assert_eq!(deadline(), Some(now + 2 * NS));
        assert_eq!(current(now + NS / 2), Itimerval { interval: tv(0, 500_000), value: tv(1, 500_000) });
        assert!(!expired(now + 2 * NS - 1));
        assert!(expired(now + 2 * NS));
        assert_eq!(deadline(), Some(now + 2 * NS + NS / 2), "re-armed with the interval");
        // Three intervals late: one expiry, next on the grid.
        assert!(expired(now + 4 * NS + 1));
        assert_eq!(deadline(), Some(now + 4 * NS + NS / 2));
        let old = set(now, Itimerval::default()).unwrap();
        assert_eq!(old.interval, tv(0, 500_000));
        assert_eq!(deadline(), None, "a zero value disarms");
        assert!(!expired(u64::MAX));
        // One shot.
        set(now, Itimerval { interval: tv(0, 0), value: tv(0, 1) }).unwrap();
        assert!(expired(now + 1000));
        assert_eq!(deadline(), None);
        assert_eq!(set(now, Itimerval { interval: tv(0, 0), value: tv(0, 1_000_000) }), Err(Errno::EINVAL));
        assert_eq!(set(now, Itimerval { interval: tv(-1, 0), value: tv(1, 0) }), Err(Errno::EINVAL));
    }

    #[test]
    fn syscalls_check_their_arguments() {
        umem::set_bounds(1, u64::MAX);
        let args = |v: [u64; 6]| Args(v);
        let mut cur = Itimerval::default();
        let p = &mut cur as *mut Itimerval as u64;
        assert_eq!(getitimer(&args([1, p, 0, 0, 0, 0])), Err(Errno::EINVAL), "ITIMER_VIRTUAL");
        assert_eq!(getitimer(&args([0, 0, 0, 0, 0, 0])), Err(Errno::EFAULT));
        let new = Itimerval { interval: tv(0, 0), value: tv(5, 0) };
        assert_eq!(setitimer(&args([0, &new as *const _ as u64, 0, 0, 0, 0])), Ok(0));
        assert!(deadline().is_some());
        // (The unit tests' clock is not calibrated: no remaining times here.)
        assert_eq!(getitimer(&args([0, p, 0, 0, 0, 0])), Ok(0));
        assert_eq!(cur.interval, tv(0, 0));
        assert!(alarm(&args([0, 0, 0, 0, 0, 0])).unwrap() >= 1, "alarm(0) disarms and returns what was left, rounded up");
        assert_eq!(deadline(), None);
        assert_eq!(setitimer(&args([0, 0, p, 0, 0, 0])), Ok(0), "a null new value disarms");
        assert_eq!(cur, Itimerval::default());
    }
}
