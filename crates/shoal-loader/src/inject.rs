//! `--inject COMPONENT:KIND@N`: a fault the kernel injects into one of its
//! components at the N-th call into it (component-level
//! recovery). Tests and benchmarks use it to make a component fail on
//! purpose and watch the kernel reboot it; the kernel receives it in the
//! boot information ([`shoal_abi::Inject`]).

pub use shoal_abi::{Inject, DEFAULT_WATCHDOG_NS};
use shoal_abi::{COMPONENTS, INJECT_HANG, INJECT_PANIC, INJECT_WILD_WRITE};

/// An `--inject` value that cannot be used, in one sentence.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InjectError {
    /// Not of the form `COMPONENT:KIND@N`.
    #[error("--inject {0}: expected COMPONENT:KIND@N (e.g. time:panic@3)")]
    Syntax(String),
    /// A component the kernel does not have.
    #[error("--inject {0}: unknown component (one of: {list})", list = COMPONENTS.join(", "))]
    Component(String),
    /// A kind of fault not known, or not injected yet.
    #[error("--inject {0}: fault kind `{1}` is not supported (supported: panic, wild-write, hang)")]
    Kind(String, String),
    /// N is not a call number (1 or more).
    #[error("--inject {0}: N must be a call number, 1 or more")]
    At(String),
}

/// A `--rejuvenate-every` value that is not a period.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--rejuvenate-every {0}: expected seconds, more than 0 and at most 86400 (e.g. 30 or 0.5)")]
pub struct PeriodError(pub String);

/// Parses `--rejuvenate-every SECONDS` (decimals allowed) into
/// nanoseconds.
pub fn parse_period(s: &str) -> Result<u64, PeriodError> {
    let secs: f64 = s.trim().parse().map_err(|_| PeriodError(s.into()))?;
    if !(secs > 0.0 && secs <= 86_400.0) {
        return Err(PeriodError(s.into()));
    }
    Ok(((secs * 1e9) as u64).max(1))
}

/// A `--log-shrink` value that is not a threshold.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--log-shrink {0}: expected a number of closed sessions, 1 to 1000000, or `never` (e.g. 100)")]
pub struct LogShrinkError(pub String);

/// Parses `--log-shrink N|never` into the value of
/// [`shoal_abi::RECOVER_LOG_SHRINK_SHIFT`].
pub fn parse_log_shrink(s: &str) -> Result<u32, LogShrinkError> {
    if s.trim() == "never" {
        return Ok(shoal_abi::LOG_SHRINK_NEVER);
    }
    s.trim().parse().ok().filter(|n| (1..=1_000_000).contains(n)).ok_or_else(|| LogShrinkError(s.into()))
}

/// A `--watchdog` value that is not a limit.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--watchdog {0}: expected milliseconds, 1 to 3600000, or `off` (e.g. 1000)")]
pub struct WatchdogError(pub String);

/// Parses `--watchdog MS` (whole milliseconds, or `off`) into nanoseconds
/// (0: off).
pub fn parse_watchdog(s: &str) -> Result<u64, WatchdogError> {
    if s.trim() == "off" {
        return Ok(0);
    }
    let ms: u64 = s.trim().parse().ok().filter(|ms| (1..=3_600_000).contains(ms)).ok_or_else(|| WatchdogError(s.into()))?;
    Ok(ms * 1_000_000)
}

/// Parses `COMPONENT:KIND@N`.
pub fn parse(spec: &str) -> Result<Inject, InjectError> {
    let syntax = || InjectError::Syntax(spec.into());
    let (comp, rest) = spec.split_once(':').ok_or_else(syntax)?;
    let (kind, at) = rest.split_once('@').ok_or_else(syntax)?;
    let component = COMPONENTS.iter().position(|c| *c == comp).ok_or_else(|| InjectError::Component(spec.into()))?;
    let kind = match kind {
        "panic" => INJECT_PANIC,
        "wild-write" => INJECT_WILD_WRITE,
        "hang" => INJECT_HANG,
        k => return Err(InjectError::Kind(spec.into(), k.into())),
    };
    let at: u64 = at.parse().ok().filter(|n| *n >= 1).ok_or_else(|| InjectError::At(spec.into()))?;
    Ok(Inject { component: component as u32 + 1, kind, at })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        assert_eq!(parse("time:panic@3"), Ok(Inject { component: 6, kind: INJECT_PANIC, at: 3 }));
        assert_eq!(parse("plat:panic@1").map(|i| i.component), Ok(1));
        assert_eq!(parse("user:wild-write@2"), Ok(Inject { component: 9, kind: INJECT_WILD_WRITE, at: 2 }));
        assert_eq!(parse("time"), Err(InjectError::Syntax("time".into())));
        assert_eq!(parse("time:panic"), Err(InjectError::Syntax("time:panic".into())));
        assert_eq!(parse("disk:panic@1"), Err(InjectError::Component("disk:panic@1".into())));
        assert_eq!(parse("vfs:hang@1"), Ok(Inject { component: 4, kind: INJECT_HANG, at: 1 }));
        assert_eq!(parse("vfs:spin@1"), Err(InjectError::Kind("vfs:spin@1".into(), "spin".into())));
        assert_eq!(parse_watchdog("1000"), Ok(1_000_000_000));
        assert_eq!(parse_watchdog("off"), Ok(0));
        for bad in ["0", "-1", "x", "1.5", "3600001"] {
            assert_eq!(parse_watchdog(bad), Err(WatchdogError(bad.into())), "{bad}");
        }
        assert_eq!(parse("vfs:panic@0"), Err(InjectError::At("vfs:panic@0".into())));
        assert_eq!(parse("vfs:panic@x"), Err(InjectError::At("vfs:panic@x".into())));
        assert!(parse("disk:panic@1").unwrap_err().to_string().contains("one of: plat, mm"));
        assert_eq!(parse_period("30"), Ok(30_000_000_000));
        assert_eq!(parse_period("0.5"), Ok(500_000_000));
        for bad in ["0", "-1", "x", "NaN", "inf", "100000"] {
            assert_eq!(parse_period(bad), Err(PeriodError(bad.into())), "{bad}");
        }
    }
}
