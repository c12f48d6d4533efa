//! Stopping a guest from the host when its kernel does not take the
//! signal (`shoal run --stop-timeout SECONDS`; docs/architecture.md
//! "Signals from the host").
//!
//! SIGTERM and SIGHUP to the tender are the guest's: they land in the word
//! its kernel registered, which the kernel swaps to 0 when it takes them.
//! A kernel that never returns (a hang with the watchdog off, a kernel
//! bug that loops) never takes them, and the tender would wait forever.
//! So both tenders give an untaken signal a grace period: still in the
//! word after it, or a second forwarded signal while it is, the tender
//! ends the instance itself, with the status of death by that signal
//! (128 + n) and one line saying why. Once taken, the program's handler
//! may run as long as it likes (Redis saving its snapshot): the grace
//! counts only while the signal waits in the word.

/// The grace period's default: `docker stop`'s 10 s is for a program's
/// handler; this one only waits for the kernel to *take* the signal,
/// which a working kernel does within a system call or a preemption tick
/// (microseconds to milliseconds), so 5 s is long even on a loaded host.
pub const DEFAULT_STOP_TIMEOUT_NS: u64 = 5_000_000_000;

/// The longest grace accepted (a day).
const MAX_SECONDS: u64 = 86_400;

/// A `--stop-timeout` value that is not a number of seconds.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--stop-timeout {0}: expected whole seconds, 1 to 86400 (e.g. 5)")]
pub struct StopTimeoutError(pub String);

/// Parses `--stop-timeout SECONDS` (whole seconds, as `docker stop -t`)
/// into nanoseconds.
pub fn parse_stop_timeout(s: &str) -> Result<u64, StopTimeoutError> {
    let secs: u64 = s.trim().parse().ok().filter(|n| (1..=MAX_SECONDS).contains(n)).ok_or_else(|| StopTimeoutError(s.into()))?;
    Ok(secs * 1_000_000_000)
}

/// Why the tender stopped the guest itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotTaken {
    /// The signal stayed untaken for the grace period (ns).
    Timeout(u64),
    /// A second forwarded signal came while the first was untaken.
    Second,
}

/// The exit status of an instance stopped for signal `sig`: that of a
/// death by it, as the guest's own default action gives.
pub fn status(sig: i32) -> i32 {
    128 + sig
}

/// The one line (without `shoal: ` and the newline) that says why.
pub fn message(sig: i32, why: NotTaken) -> String {
    let mut m = String::new();
    let _ = write_message(&mut m, sig, why);
    m
}

/// [`message`] into any writer (no allocation: spt's signal handlers
/// write it into a buffer on their stack).
pub fn write_message(w: &mut impl core::fmt::Write, sig: i32, why: NotTaken) -> core::fmt::Result {
    let name = signal_name(sig);
    match why {
        NotTaken::Timeout(ns) => {
            write!(w, "the guest did not take {name} within {} s (its kernel is not returning); stopping it", ns.div_ceil(1_000_000_000))
        }
        NotTaken::Second => write!(w, "the guest did not take {name} before a second signal came (its kernel is not returning); stopping it"),
    }
}

/// The name of a forwarded signal.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        15 => "SIGTERM",
        _ => "a signal",
    }
}

/// The signal of the lowest bit of a word of signals (bit `signal - 1`);
/// 0 for none.
pub fn first_signal(bits: u64) -> i32 {
    if bits == 0 {
        0
    } else {
        bits.trailing_zeros() as i32 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_whole_seconds() {
        assert_eq!(parse_stop_timeout("5"), Ok(5_000_000_000));
        assert_eq!(parse_stop_timeout(" 1 "), Ok(1_000_000_000));
        for bad in ["0", "-1", "1.5", "", "x", "86401"] {
            assert_eq!(parse_stop_timeout(bad), Err(StopTimeoutError(bad.into())), "{bad}");
        }
    }

    #[test]
    fn says_why() {
        assert_eq!(
            message(15, NotTaken::Timeout(DEFAULT_STOP_TIMEOUT_NS)),
            "the guest did not take SIGTERM within 5 s (its kernel is not returning); stopping it"
        );
        assert!(message(1, NotTaken::Second).starts_with("the guest did not take SIGHUP before a second signal came"));
        assert_eq!(status(15), 143);
        assert_eq!((first_signal(0), first_signal(1 << 14), first_signal((1 << 14) | 1)), (0, 15, 1));
    }
}
