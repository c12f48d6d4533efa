//! TSC calibration: the guest keeps time by reading the TSC (docs/design.md "Tenders and hypercalls"), so
//! the tender tells it the TSC frequency and one (TSC, wall clock) pair.
//!
//! Measuring the frequency takes about 20 ms, too much for every cold start,
//! so it is done once per host boot and cached in a small file keyed by
//! `/proc/sys/kernel/random/boot_id`: `tsc` in shoal's private runtime
//! directory ([`crate::hostdir::runtime_dir`]: `/dev/shm/shoal-UID`, mode
//! 0700, every component of its path checked). The file is written as a new
//! `O_EXCL|O_NOFOLLOW` temporary file renamed into place and read only if it
//! is a regular file we own holding a plausible frequency; if the directory
//! is unsafe (another user made it, or a symbolic link stands there), the
//! frequency is measured and not cached.

use crate::hostdir;
use std::path::{Path, PathBuf};

/// How long the calibration measures.
pub const CALIBRATION_NS: u64 = 20_000_000;
/// Plausible TSC frequencies (100 MHz to 20 GHz): anything else in a cache
/// file is ignored.
pub const PLAUSIBLE_HZ: core::ops::RangeInclusive<u64> = 100_000_000..=20_000_000_000;

/// Why the clock could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TscError {
    /// The measurement gave an impossible frequency.
    #[error("the TSC calibration measured {0} Hz, which is implausible; is the TSC stable on this host?")]
    Implausible(u64),
}

/// Clock information for the boot info.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clock {
    /// TSC ticks per second.
    pub tsc_hz: u64,
    /// A TSC value ...
    pub tsc_at_boot: u64,
    /// ... and CLOCK_REALTIME (ns since the epoch) read right next to it.
    pub realtime_ns_at_boot: u64,
}

impl Clock {
    /// Reads the (TSC, realtime) pair now, for a calibration of `tsc_hz`.
    /// Does not allocate; uses only `clock_gettime` (normally the vDSO).
    pub fn now(tsc_hz: u64) -> Clock {
        let (tsc_at_boot, realtime_ns_at_boot) = tsc_pair(libc::CLOCK_REALTIME);
        Clock { tsc_hz, tsc_at_boot, realtime_ns_at_boot }
    }
}

/// Reads the TSC.
pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no memory effects and exists on every x86-64 CPU;
    // Linux allows it in user mode unless a process disabled it (PR_SET_TSC),
    // which shoal never does.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// `clock_gettime(clock)` in nanoseconds.
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clocks used here
    // always exist on Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// A TSC value and `clock` read as closely together as possible: the read
/// with the shortest TSC bracket out of a few tries.
fn tsc_pair(clock: libc::clockid_t) -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..5 {
        let t0 = rdtsc();
        let ns = clock_ns(clock);
        let t1 = rdtsc();
        let gap = t1.wrapping_sub(t0);
        if gap < best.0 {
            best = (gap, t0 + gap / 2, ns);
        }
    }
    (best.1, best.2)
}

/// Measures the TSC frequency against CLOCK_MONOTONIC_RAW over
/// [`CALIBRATION_NS`].
pub fn measure_tsc_hz() -> Result<u64, TscError> {
    let (tsc0, ns0) = tsc_pair(libc::CLOCK_MONOTONIC_RAW);
    std::thread::sleep(std::time::Duration::from_nanos(CALIBRATION_NS));
    let (tsc1, ns1) = tsc_pair(libc::CLOCK_MONOTONIC_RAW);
    let dns = ns1.saturating_sub(ns0).max(1);
    let hz = (u128::from(tsc1.wrapping_sub(tsc0)) * 1_000_000_000 / u128::from(dns)) as u64;
    if !PLAUSIBLE_HZ.contains(&hz) {
        return Err(TscError::Implausible(hz));
    }
    // Round to 100 kHz: the measurement is not more precise than that, and
    // identical values across instances are nicer to look at.
    Ok((hz + 50_000) / 100_000 * 100_000)
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`): the key of the
/// per-boot caches (this one, and hvt's CPUID list).
pub fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = id.trim();
    (!id.is_empty() && id.len() <= 64).then(|| id.to_string())
}

/// Name of the cache file in the runtime directory.
const CACHE_FILE: &str = "tsc";

/// Where the calibration is cached: `tsc` in the runtime directory, if
/// that directory is safe to use (it is created if missing).
pub fn cache_path() -> Option<PathBuf> {
    hostdir::runtime_dir().ok().map(|d| d.join(CACHE_FILE))
}

fn read_cache(dir: &Path, boot_id: &str) -> Option<u64> {
    let bytes = hostdir::read_owned(&dir.join(CACHE_FILE), 256).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    let mut words = text.split_whitespace();
    let (id, hz) = (words.next()?, words.next()?);
    let hz: u64 = hz.parse().ok()?;
    (id == boot_id && PLAUSIBLE_HZ.contains(&hz)).then_some(hz)
}

/// The TSC frequency, cached in `dir` (which must have passed
/// [`hostdir::check_dir`]): from the cache, or measured and written.
pub fn tsc_hz_cached_in(dir: Option<&Path>) -> Result<u64, TscError> {
    let id = boot_id();
    if let (Some(id), Some(dir)) = (&id, dir) {
        if let Some(hz) = read_cache(dir, id) {
            return Ok(hz);
        }
    }
    let hz = measure_tsc_hz()?;
    if let (Some(id), Some(dir)) = (&id, dir) {
        // Best effort: a failure only means measuring again next time.
        let _ = hostdir::write_atomic(dir, CACHE_FILE, format!("{id} {hz}\n").as_bytes(), 0o600);
    }
    Ok(hz)
}

/// The TSC frequency: from the per-boot cache, or measured (about 20 ms)
/// and cached. Without a safe runtime directory it is measured every time.
pub fn tsc_hz() -> Result<u64, TscError> {
    let dir = hostdir::runtime_dir().ok();
    tsc_hz_cached_in(dir.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A symbolic link planted where the cache goes is
    /// never followed, and a runtime directory someone else could have made
    /// is not used.
    #[test]
    fn tsc_cache_symlink_is_not_followed() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let s = std::env::temp_dir().join(format!("shoal-tsc-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&s);
        std::fs::create_dir(&s).unwrap();
        let victim = s.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        // A link where the runtime directory goes: refused, nothing written.
        let link = s.join("rt");
        symlink(&s, &link).unwrap();
        assert!(hostdir::ensure_private_dir(&link).is_err());
        // A link at the cache file inside a good directory: replaced.
        let dir = s.join("good");
        hostdir::ensure_private_dir(&dir).unwrap();
        symlink(&victim, dir.join(CACHE_FILE)).unwrap();
        let hz = tsc_hz_cached_in(Some(&dir)).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(dir.join(CACHE_FILE)).unwrap().file_type().is_file());
        assert_eq!(std::fs::metadata(dir.join(CACHE_FILE)).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(tsc_hz_cached_in(Some(&dir)).unwrap(), hz);
        std::fs::remove_dir_all(&s).unwrap();
    }

    #[test]
    fn calibration_is_plausible_and_cached() {
        let hz = tsc_hz().unwrap();
        assert!(PLAUSIBLE_HZ.contains(&hz));
        let t = std::time::Instant::now();
        assert_eq!(tsc_hz().unwrap(), hz);
        if boot_id().is_some() && cache_path().is_some_and(|p| p.is_file()) {
            assert!(t.elapsed() < std::time::Duration::from_millis(15), "cached calibration is slow");
        }
        let c = Clock::now(hz);
        assert!(c.realtime_ns_at_boot > 1_600_000_000_000_000_000);
    }
}
