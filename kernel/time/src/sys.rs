//! The time system calls.
//!
//! Clocks: `CLOCK_REALTIME`, `CLOCK_TAI` (TAI offset 0, as a Linux system
//! whose offset was never set) and `*_ALARM` read the realtime clock;
//! `CLOCK_MONOTONIC`, `_RAW`, `_COARSE` and `CLOCK_BOOTTIME` read the
//! monotonic one (no suspend, no adjustments, so they are equal; the
//! coarse clocks are as precise as the fine ones, and `clock_getres` says
//! 1 ns for all). CPU-time clocks (`CLOCK_PROCESS_CPUTIME_ID`,
//! `CLOCK_THREAD_CPUTIME_ID`, and the clock ids of our own process or thread
//! from `clock_getcpuclockid`) report monotonic time since boot minus the
//! time spent blocked in the tender ([`crate::cpu_ns`]): the one thread owns
//! the vCPU, but time the host gives to other processes is counted too.
//!
//! `nanosleep` and `clock_nanosleep` block only the calling thread, so
//! they are `sched`'s (`shoal_sched::sys`), built on [`deadline`]; this
//! crate's [`crate::sleep_until`] blocks the whole vCPU and is what the
//! scheduler calls when no thread can run.

use crate::{monotonic_ns, realtime_offset_ns, NS_PER_SEC};
use shoal_plat::{umem, Args, Errno, SysResult};

/// `struct timespec`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timespec {
    /// Seconds.
    pub tv_sec: i64,
    /// Nanoseconds, `0..1e9`.
    pub tv_nsec: i64,
}

/// `struct timeval`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timeval {
    /// Seconds.
    pub tv_sec: i64,
    /// Microseconds.
    pub tv_usec: i64,
}

/// `struct timezone` (obsolete; always zero).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Timezone {
    /// Minutes west of Greenwich.
    pub tz_minuteswest: i32,
    /// DST correction type.
    pub tz_dsttime: i32,
}

impl Timespec {
    /// The timespec of `ns` nanoseconds.
    pub fn from_ns(ns: u64) -> Timespec {
        Timespec { tv_sec: (ns / NS_PER_SEC) as i64, tv_nsec: (ns % NS_PER_SEC) as i64 }
    }

    /// Nanoseconds (saturating); `EINVAL` for a negative or malformed value.
    pub fn to_ns(self) -> Result<u64, Errno> {
        if self.tv_sec < 0 || !(0..NS_PER_SEC as i64).contains(&self.tv_nsec) {
            return Err(Errno::EINVAL);
        }
        Ok((self.tv_sec as u64).saturating_mul(NS_PER_SEC).saturating_add(self.tv_nsec as u64))
    }
}

/// Clock ids.
pub const CLOCK_REALTIME: i32 = 0;
/// Monotonic clock.
pub const CLOCK_MONOTONIC: i32 = 1;
/// CPU time of the process.
pub const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
/// CPU time of the thread.
pub const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
/// Monotonic, not slewed.
pub const CLOCK_MONOTONIC_RAW: i32 = 4;
/// Coarse realtime.
pub const CLOCK_REALTIME_COARSE: i32 = 5;
/// Coarse monotonic.
pub const CLOCK_MONOTONIC_COARSE: i32 = 6;
/// Monotonic including suspend.
pub const CLOCK_BOOTTIME: i32 = 7;
/// Realtime (alarm variant).
pub const CLOCK_REALTIME_ALARM: i32 = 8;
/// Boottime (alarm variant).
pub const CLOCK_BOOTTIME_ALARM: i32 = 9;
/// International Atomic Time.
pub const CLOCK_TAI: i32 = 11;
/// `clock_nanosleep` flag: the time is absolute.
pub const TIMER_ABSTIME: i32 = 1;

/// What a clock id reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Wall-clock time.
    Real,
    /// Time since boot.
    Mono,
    /// CPU time (see [`crate::cpu_ns`]).
    Cpu,
}

/// Classifies clock id `id`; `EINVAL` for unknown ones and for the CPU
/// clocks of other processes or threads (there are none).
pub fn kind(id: i32) -> Result<Kind, Errno> {
    match id {
        CLOCK_REALTIME | CLOCK_REALTIME_COARSE | CLOCK_REALTIME_ALARM | CLOCK_TAI => Ok(Kind::Real),
        CLOCK_MONOTONIC | CLOCK_MONOTONIC_RAW | CLOCK_MONOTONIC_COARSE | CLOCK_BOOTTIME | CLOCK_BOOTTIME_ALARM => Ok(Kind::Mono),
        CLOCK_PROCESS_CPUTIME_ID | CLOCK_THREAD_CPUTIME_ID => Ok(Kind::Cpu),
        id if id < 0 => {
            // Dynamic CPU clock: ~pid << 3 | thread << 2 | which (which < 3).
            let pid = !(id >> 3);
            if id & 3 == 3 || !(pid == 0 || pid == 1) {
                return Err(Errno::EINVAL);
            }
            Ok(Kind::Cpu)
        }
        _ => Err(Errno::EINVAL),
    }
}

/// Reads a clock of kind `k`, in nanoseconds.
pub fn read(k: Kind) -> u64 {
    match k {
        Kind::Real => crate::realtime_ns(),
        Kind::Mono => monotonic_ns(),
        Kind::Cpu => crate::cpu_ns(),
    }
}

/// `clock_gettime(id, tp)`.
pub fn clock_gettime(a: &Args) -> SysResult {
    let k = kind(a.int(0))?;
    umem::write(a.u(1), Timespec::from_ns(read(k)))?;
    Ok(0)
}

/// `clock_getres(id, res)`: 1 ns for every clock (`res` may be NULL).
pub fn clock_getres(a: &Args) -> SysResult {
    kind(a.int(0))?;
    if a.u(1) != 0 {
        umem::write(a.u(1), Timespec { tv_sec: 0, tv_nsec: 1 })?;
    }
    Ok(0)
}

/// `clock_settime(id, tp)`: only `CLOCK_REALTIME` is settable on Linux
/// (`EINVAL` for the others); the instance's clock is the host's, and the
/// instance has no `CAP_SYS_TIME`, so a valid time is `EPERM`, as in a
/// container.
pub fn clock_settime(a: &Args) -> SysResult {
    if a.int(0) != CLOCK_REALTIME {
        return Err(Errno::EINVAL);
    }
    let t: Timespec = umem::read(a.u(1))?;
    if t.tv_sec < 0 || !(0..NS_PER_SEC as i64).contains(&t.tv_nsec) {
        return Err(Errno::EINVAL);
    }
    Err(Errno::EPERM)
}

/// `gettimeofday(tv, tz)`: either may be NULL; the time zone is UTC.
pub fn gettimeofday(a: &Args) -> SysResult {
    if a.u(0) != 0 {
        let ns = crate::realtime_ns();
        umem::write(a.u(0), Timeval { tv_sec: (ns / NS_PER_SEC) as i64, tv_usec: (ns % NS_PER_SEC / 1000) as i64 })?;
    }
    if a.u(1) != 0 {
        umem::write(a.u(1), Timezone::default())?;
    }
    Ok(0)
}

/// `time(tloc)`: seconds since the epoch, also stored at `tloc` if not NULL.
pub fn time(a: &Args) -> SysResult {
    let secs = crate::realtime_ns() / NS_PER_SEC;
    if a.u(0) != 0 {
        umem::write(a.u(0), secs as i64)?;
    }
    Ok(secs)
}

/// The monotonic deadline of a sleep on clock `id` with `flags` and `t`.
pub fn deadline(id: i32, flags: i32, t: Timespec) -> Result<u64, Errno> {
    let k = kind(id)?;
    if k == Kind::Cpu || id == CLOCK_MONOTONIC_RAW || id == CLOCK_MONOTONIC_COARSE || id == CLOCK_REALTIME_COARSE {
        // Linux cannot sleep on these either (CPU clocks: see the module
        // doc; we do not offer sleeping on them).
        return Err(Errno::EINVAL);
    }
    let ns = t.to_ns()?;
    if flags & TIMER_ABSTIME == 0 {
        return Ok(monotonic_ns().saturating_add(ns));
    }
    Ok(match k {
        Kind::Real => ns.saturating_sub(realtime_offset_ns()),
        _ => ns,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn layouts() {
        assert_eq!(core::mem::size_of::<Timespec>(), 16);
        assert_eq!(core::mem::size_of::<Timeval>(), 16);
        assert_eq!(core::mem::size_of::<Timezone>(), 8);
    }

    #[test]
    fn timespec_conversions() {
        assert_eq!(Timespec::from_ns(1_500_000_001), Timespec { tv_sec: 1, tv_nsec: 500_000_001 });
        assert_eq!(Timespec { tv_sec: 2, tv_nsec: 3 }.to_ns(), Ok(2_000_000_003));
        assert_eq!(Timespec { tv_sec: -1, tv_nsec: 0 }.to_ns(), Err(Errno::EINVAL));
        assert_eq!(Timespec { tv_sec: 0, tv_nsec: 1_000_000_000 }.to_ns(), Err(Errno::EINVAL));
        assert_eq!(Timespec { tv_sec: i64::MAX, tv_nsec: 0 }.to_ns(), Ok(u64::MAX));
    }

    #[test]
    fn clock_kinds() {
        assert_eq!(kind(CLOCK_REALTIME), Ok(Kind::Real));
        assert_eq!(kind(CLOCK_BOOTTIME), Ok(Kind::Mono));
        assert_eq!(kind(CLOCK_THREAD_CPUTIME_ID), Ok(Kind::Cpu));
        assert_eq!(kind(10), Err(Errno::EINVAL));
        assert_eq!(kind(99), Err(Errno::EINVAL));
        // musl's clock_getcpuclockid(0) and pthread_getcpuclockid(tid 1).
        assert_eq!(kind((-1i32 as u32).wrapping_mul(8).wrapping_add(2) as i32), Ok(Kind::Cpu));
        assert_eq!(kind((-2i32 as u32).wrapping_mul(8).wrapping_add(6) as i32), Ok(Kind::Cpu));
        assert_eq!(kind((-3i32 as u32).wrapping_mul(8).wrapping_add(2) as i32), Err(Errno::EINVAL), "pid 2 does not exist");
    }

    /// Everything that uses the global clock state, in one test (tests run
    /// in parallel threads; kernel state is single-threaded).
    pub(crate) fn uses_state() {
        crate::STATE.with(|s| s.clock = crate::Clock::new(1_000_000_000, 0, 1_000 * NS_PER_SEC));
        let t = Timespec { tv_sec: 1_005, tv_nsec: 0 };
        assert_eq!(deadline(CLOCK_REALTIME, TIMER_ABSTIME, t), Ok(5 * NS_PER_SEC));
        assert_eq!(deadline(CLOCK_MONOTONIC, TIMER_ABSTIME, t), Ok(1_005 * NS_PER_SEC));
        assert_eq!(deadline(CLOCK_PROCESS_CPUTIME_ID, 0, t), Err(Errno::EINVAL));
        assert!(deadline(CLOCK_MONOTONIC, 0, t).unwrap() >= 1_005 * NS_PER_SEC);
    }

    pub(crate) fn syscalls_write_user_memory() {
        shoal_plat::umem::set_bounds(1, u64::MAX);
        let mut ts = Timespec::default();
        let p = &mut ts as *mut Timespec as u64;
        assert_eq!(clock_getres(&Args([CLOCK_MONOTONIC as u64, p, 0, 0, 0, 0])), Ok(0));
        assert_eq!(ts, Timespec { tv_sec: 0, tv_nsec: 1 });
        assert_eq!(clock_gettime(&Args([CLOCK_REALTIME as u64, p, 0, 0, 0, 0])), Ok(0));
        assert!(ts.tv_sec > 0);
        assert_eq!(clock_gettime(&Args([77, p, 0, 0, 0, 0])), Err(Errno::EINVAL));
        assert_eq!(gettimeofday(&Args([0, 0, 0, 0, 0, 0])), Ok(0));
    }
}
