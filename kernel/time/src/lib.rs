//! Kernel component `time` (docs/design.md "Components and recovery"): the clocks and sleeping.
//!
//! Time needs no hypercall (docs/design.md "Tenders and hypercalls"): the kernel reads the TSC and
//! converts it with the calibration the tender put in the boot information
//! (`tsc_hz`, and the pair `tsc_at_boot` / `realtime_ns_at_boot` read
//! together). `CLOCK_MONOTONIC` is nanoseconds since that boot reading;
//! `CLOCK_REALTIME` is the boot wall-clock time plus the same; the clock is
//! not adjustable (no `clock_settime`). The vCPU sleeps ([`sleep_until`],
//! called by `sched` when no thread can run) in the tender's `poll`
//! hypercall, so an idle instance uses no CPU.
#![cfg_attr(not(test), no_std)]

pub mod sys;

use shoal_plat::Global;

/// Clock calibration and the last monotonic reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    /// TSC ticks per second.
    pub hz: u64,
    /// TSC at the boot reading.
    pub tsc0: u64,
    /// Realtime nanoseconds at the boot reading.
    pub real0: u64,
    /// `floor(10^9 * 2^64 / hz)` when that fits in 64 bits (`hz` above
    /// 1 GHz, every TSC today), else 0: [`Clock::ticks_to_ns`] multiplies
    /// by it instead of dividing (made by [`Clock::new`]).
    mult: u64,
}

impl Clock {
    /// The calibration `hz`, `tsc0`, `real0`.
    pub const fn new(hz: u64, tsc0: u64, real0: u64) -> Clock {
        let mult = if hz > NS_PER_SEC { (((NS_PER_SEC as u128) << 64) / hz as u128) as u64 } else { 0 };
        Clock { hz, tsc0, real0, mult }
    }

    /// Nanoseconds in `ticks` TSC ticks, exact (`floor(ticks * 10^9 /
    /// hz)`) and without overflow for any `ticks` (for `hz` up to 18 GHz).
    ///
    /// Programs read the clock several times per request (Redis: about
    /// five), and three 64-bit divisions were most of a read's cost after
    /// the `rdtsc`. With `mult` the estimate `ticks * mult >> 64` is the
    /// exact quotient or one less (`mult` is below `10^9 * 2^64 / hz` by
    /// less than one, so the product is below `ticks * 10^9 / hz` by less
    /// than `ticks / 2^64 < 1`); the remainder checks which. That
    /// remainder, `ticks * 10^9 - q * hz`, is below `2 * hz < 2^64`, so
    /// it comes out exact from two 64-bit products taken modulo `2^64`
    /// (two 64-bit multiplications instead of two of 128 bits, and no
    /// 128-bit compare).
    #[inline]
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        if self.mult != 0 {
            let q = ((ticks as u128 * self.mult as u128) >> 64) as u64;
            let r = ticks.wrapping_mul(NS_PER_SEC).wrapping_sub(q.wrapping_mul(self.hz));
            return q + (r >= self.hz) as u64;
        }
        // Whole seconds, then the rest.
        let secs = ticks / self.hz;
        let rest = ticks % self.hz; // < hz, so rest * 1e9 < 2^64 for hz < 1.8e10
        secs.saturating_mul(NS_PER_SEC).saturating_add(rest * NS_PER_SEC / self.hz)
    }

    /// Monotonic nanoseconds at TSC value `tsc` (0 before the boot reading).
    pub fn monotonic_at(&self, tsc: u64) -> u64 {
        self.ticks_to_ns(tsc.saturating_sub(self.tsc0))
    }
}

/// Nanoseconds per second.
pub const NS_PER_SEC: u64 = 1_000_000_000;

struct State {
    clock: Clock,
    last: u64,
    slept: u64,
}

static STATE: Global<State> = Global::new(State { clock: Clock::new(1, 0, 0), last: 0, slept: 0 });

/// Reads the calibration from the boot information. A tender that gives no
/// TSC frequency cannot run this kernel: halts with a message.
pub fn init() {
    let bi = shoal_plat::boot::info();
    if bi.tsc_hz == 0 || bi.tsc_hz >= 18_000_000_000 {
        use core::fmt::Write;
        let _ = writeln!(shoal_plat::console::Stderr, "shoal: boot info has an unusable TSC frequency ({} Hz)", bi.tsc_hz);
        shoal_plat::halt(255);
    }
    STATE.with(|s| {
        s.clock = Clock::new(bi.tsc_hz, bi.tsc_at_boot, bi.realtime_ns_at_boot);
        s.last = 0;
        s.slept = 0;
    });
}

/// The calibration in use.
pub fn clock() -> Clock {
    STATE.with(|s| s.clock)
}

/// `CLOCK_MONOTONIC` in nanoseconds since the tender's boot reading. Never
/// goes backwards (clamped to the last value returned).
pub fn monotonic_ns() -> u64 {
    let tsc = shoal_plat::cpu::rdtsc();
    STATE.with(|s| s.monotonic(tsc))
}

/// `CLOCK_REALTIME` in nanoseconds since the epoch: the boot wall-clock
/// time plus [`monotonic_ns`], in one access to the state (every file
/// write stamps its time with this).
pub fn realtime_ns() -> u64 {
    let tsc = shoal_plat::cpu::rdtsc();
    STATE.with(|s| s.clock.real0.saturating_add(s.monotonic(tsc)))
}

impl State {
    /// The monotonic time at `tsc`, clamped to the last one returned (and
    /// kept as the last).
    #[inline]
    fn monotonic(&mut self, tsc: u64) -> u64 {
        let now = self.clock.monotonic_at(tsc).max(self.last);
        self.last = now;
        now
    }
}

/// The realtime clock minus the monotonic one (constant: no adjustments).
pub fn realtime_offset_ns() -> u64 {
    STATE.with(|s| s.clock.real0)
}

/// Blocks the vCPU (every thread: use `shoal_sched::sleep_until` to block
/// one thread) until `CLOCK_MONOTONIC` reaches `deadline` (nanoseconds) or a
/// signal forwarded by the tender arrives. Loops, because a tender may wake
/// the guest early. The time spent blocked is accounted as not CPU time
/// (see [`cpu_ns`]).
pub fn sleep_until(deadline: u64) {
    loop {
        // Output first (hvt buffers it; the flush is a hypercall): a reader
        // that answers it with a signal must find the check below still
        // to come, not passed.
        shoal_plat::console::flush();
        let now = monotonic_ns();
        // A signal the tender forwarded (SIGTERM) cuts the sleep short: the
        // scheduler raises it at once instead of at the deadline.
        if now >= deadline || shoal_plat::hostsig::pending() {
            return;
        }
        // One that lands between this check and the tender's sleep does
        // not end that sleep: with forwarding on, sleep at most a second at
        // a time, so it is seen within a second (one wake-up a second for a
        // long sleeper).
        let step = if shoal_plat::hostsig::registered() { (deadline - now).min(FORWARD_CHECK_NS) } else { deadline - now };
        shoal_plat::hypercall::poll(step, 0);
        let after = monotonic_ns();
        STATE.with(|s| s.slept += after - now);
    }
}

/// The longest sleep in the tender while signals are forwarded
/// ([`sleep_until`]).
const FORWARD_CHECK_NS: u64 = 1_000_000_000;

/// Records `ns` spent blocked in the tender outside [`sleep_until`] (the
/// host-socket idle wait), so that [`cpu_ns`] does not count it.
pub fn account_sleep(ns: u64) {
    STATE.with(|s| s.slept += ns);
}

/// CPU time of the instance in nanoseconds: monotonic time since boot
/// minus the time spent blocked in the tender's `poll`. The kernel does not
/// see time the host spends running other processes, so this is an upper
/// bound of the real CPU time.
pub fn cpu_ns() -> u64 {
    let m = monotonic_ns();
    m.saturating_sub(STATE.with(|s| s.slept))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversion_is_exact() {
        let c = Clock::new(3_000_000_000, 1000, 0);
        assert_eq!(c.ticks_to_ns(3), 1);
        assert_eq!(c.ticks_to_ns(3_000_000_000), NS_PER_SEC);
        assert_eq!(c.ticks_to_ns(4_500_000_000), 1_500_000_000);
        assert_eq!(c.monotonic_at(1000 + 3_000_000_000 * 86_400), 86_400 * NS_PER_SEC);
        assert_eq!(c.monotonic_at(10), 0, "before the boot reading");
    }

    #[test]
    fn conversion_does_not_overflow() {
        for hz in [1u64, 1_000, 999_999_999, 1_000_000_000, 1_000_000_001, 2_399_999_999, 2_893_202_000, 3_000_000_000, 3_600_000_000, 17_999_999_999] {
            let c = Clock::new(hz, 0, 0);
            // u128 reference.
            for t in [0u64, 1, 2, 3, hz - 1, hz, hz + 1, 3 * hz - 1, 3 * hz, 1 << 40, u64::MAX / 3, u64::MAX - 1, u64::MAX]
                .into_iter()
                .chain((0..2000u64).map(|k| k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (k % 40)))
            {
                let exact = (t as u128 * NS_PER_SEC as u128 / hz as u128).min(u64::MAX as u128) as u64;
                assert_eq!(c.ticks_to_ns(t), exact, "hz {hz} ticks {t}");
            }
        }
    }

    #[test]
    fn with_global_state() {
        STATE.with(|s| s.clock = Clock::new(1_000_000_000, 0, 5));
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a);
        assert!(realtime_ns() >= b + 5);
        crate::sys::tests::uses_state();
        crate::sys::tests::syscalls_write_user_memory();
    }
}
