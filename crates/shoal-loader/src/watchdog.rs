//! The hang watchdog's bookkeeping (component recovery), shared by both tenders'
//! preemption-tick handlers: at each tick the tender reads the kernel's
//! `watch` and `watch_seq` words (`shoal_abi::PreemptArea`) and [`step`]
//! ages the gated call in progress; a call that is still the same one
//! after ticks worth `limit` nanoseconds is a hang, and the tender sends
//! the guest to the kernel's fault entry with `shoal_abi::FAULT_HANG`.
//!
//! Ages are counted in tick periods, never from a clock: a call that was
//! seen at two ticks ran for at least the period between them, so a hang is
//! never declared early (a loaded host that delivers ticks late only makes
//! it later). The words are the guest's: a guest that lies in them can
//! only get itself sent to its own fault entry. Pure and allocation-free,
//! so spt can run it in a signal handler (its state then lives in
//! atomics).

/// What the tender remembers between two ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Watch {
    /// `watch_seq` at the last tick (or when the tick was armed for the
    /// watchdog).
    pub seq: u64,
    /// How long the call numbered `seq` has been in progress, at least
    /// (ns); 0 when no call was in progress.
    pub age_ns: u64,
}

/// What one tick found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No gated call in progress (or no watchdog).
    Idle,
    /// A gated call in progress, younger than the limit.
    Young,
    /// A gated call in progress for at least the limit.
    Hang,
}

/// One tick: `watch` and `seq` as read from the guest's area now,
/// `period_ns` the tick's period since the last tick, `limit_ns` the
/// watchdog's limit (0: off). Returns the state to keep and the verdict.
pub fn step(prev: Watch, watch: u64, seq: u64, period_ns: u64, limit_ns: u64) -> (Watch, Verdict) {
    if limit_ns == 0 || watch == 0 {
        return (Watch { seq, age_ns: 0 }, Verdict::Idle);
    }
    if seq != prev.seq {
        // A call that began since the last tick: of unknown age, up to one
        // period; counted from now.
        return (Watch { seq, age_ns: 0 }, Verdict::Young);
    }
    let age_ns = prev.age_ns.saturating_add(period_ns);
    (Watch { seq, age_ns }, if age_ns >= limit_ns { Verdict::Hang } else { Verdict::Young })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn one_long_call_is_a_hang_once_its_ticks_reach_the_limit() {
        // Armed for the watchdog while call 7 was in progress.
        let w = Watch { seq: 7, age_ns: 0 };
        let (w, v) = step(w, 6, 7, 500 * MS, 1000 * MS);
        assert_eq!((w.age_ns, v), (500 * MS, Verdict::Young));
        let (w, v) = step(w, 6, 7, 500 * MS, 1000 * MS);
        assert_eq!((w.age_ns, v), (1000 * MS, Verdict::Hang));
    }

    #[test]
    fn many_short_calls_are_never_a_hang() {
        let mut w = Watch::default();
        for seq in 1..1000 {
            let (next, v) = step(w, 6, seq, 10 * MS, 20 * MS);
            assert_eq!(v, Verdict::Young, "a new call each tick");
            w = next;
        }
        let (w, v) = step(w, 0, 1000, 10 * MS, 20 * MS);
        assert_eq!((w, v), (Watch { seq: 1000, age_ns: 0 }, Verdict::Idle));
    }

    #[test]
    fn a_call_first_seen_at_a_tick_is_counted_from_that_tick() {
        let (w, v) = step(Watch { seq: 1, age_ns: 0 }, 8, 2, 10 * MS, 25 * MS);
        assert_eq!((w.age_ns, v), (0, Verdict::Young));
        let (w, _) = step(w, 8, 2, 10 * MS, 25 * MS);
        let (w, v) = step(w, 8, 2, 10 * MS, 25 * MS);
        assert_eq!((w.age_ns, v), (20 * MS, Verdict::Young));
        assert_eq!(step(w, 8, 2, 10 * MS, 25 * MS).1, Verdict::Hang);
    }

    #[test]
    fn off_or_idle_is_never_a_hang() {
        assert_eq!(step(Watch { seq: 3, age_ns: u64::MAX }, 6, 3, u64::MAX, 0).1, Verdict::Idle);
        assert_eq!(step(Watch { seq: 3, age_ns: u64::MAX }, 0, 3, u64::MAX, 1).1, Verdict::Idle);
        // Saturates instead of wrapping.
        assert_eq!(step(Watch { seq: 3, age_ns: u64::MAX }, 6, 3, u64::MAX, u64::MAX).1, Verdict::Hang);
    }
}
