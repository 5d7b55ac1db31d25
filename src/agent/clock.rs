//! The cached nanosecond clock of a duty cycle.
//!
//! An agent reads the clock once per duty cycle (`Instant::now` costs ~31 ns on an x86 host with an invariant TSC)
//! and passes `now_ns` to every step, as Aeron's agents do, so a cycle sees one consistent time.

use std::time::{Duration, Instant};

/// Nanoseconds since the clock was made, from the monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct NanoClock {
    origin: Instant,
}

impl Default for NanoClock {
    fn default() -> Self {
        Self::new()
    }
}

impl NanoClock {
    /// A clock whose zero is now.
    pub fn new() -> Self {
        Self { origin: Instant::now() }
    }

    /// Nanoseconds since the clock was made.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

/// Converts a duration to whole nanoseconds, saturating.
pub fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// What a duration written without a unit means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BareNumber {
    /// Nanoseconds (idle strategy texts, where `sleep-ns:1000` has always meant 1000 ns).
    Nanos,
    /// Refused: in a file a bare number is ambiguous, so the unit is required.
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    Refused,
}

/// Parses `<whole number><ns|us|ms|s>` (with [`BareNumber::Nanos`], the unit may be left out). The error
/// names the text and the units.
pub(crate) fn parse_duration(text: &str, bare: BareNumber) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let bad = || match bare {
        BareNumber::Nanos => format!("duration `{text}` is not a whole number with an optional ns, us, ms or s suffix"),
        BareNumber::Refused => {
            format!("duration `{text}` must be a whole number with a unit: ns, us, ms or s (e.g. \"10ms\")")
        }
    };
    let value: u64 = digits.parse().map_err(|_| bad())?;
    let ns_per_unit: u64 = match (unit.trim(), bare) {
        ("", BareNumber::Nanos) | ("ns", _) => 1,
        ("us", _) => 1_000,
        ("ms", _) => 1_000_000,
        ("s", _) => 1_000_000_000,
        _ => return Err(bad()),
    };
    value.checked_mul(ns_per_unit).map(Duration::from_nanos).ok_or_else(|| format!("duration `{text}` is too long"))
}
