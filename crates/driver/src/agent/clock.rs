//! The cached nanosecond clock of a duty cycle.
//!
//! An agent reads the clock once per duty cycle (`Instant::now` costs ~31 ns on an x86 host with an invariant TSC)
//! and passes `now_ns` to every step, as Aeron's agents do, so a cycle sees one consistent time.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Nanoseconds since the clock was made, from the monotonic clock, or from a [`SimulatedTime`] that a
/// simulator moves (every clock of one simulated node reads the same one).
///
/// Invariant: `now_ns` never goes back, whichever source it reads (a simulated time only moves forward;
/// a simulated clock jump is a jump forward, as a monotonic clock's is after a pause).
#[derive(Clone, Debug)]
pub struct NanoClock {
    origin: Instant,
    simulated: Option<Arc<SimulatedTime>>,
}

impl Default for NanoClock {
    fn default() -> Self {
        Self::new()
    }
}

impl NanoClock {
    /// A clock whose zero is now.
    pub fn new() -> Self {
        Self { origin: Instant::now(), simulated: None }
    }

    /// A clock that reads `time`.
    pub fn simulated(time: Arc<SimulatedTime>) -> Self {
        Self { origin: Instant::now(), simulated: Some(time) }
    }

    /// Another clock on the same source, whose zero is now (a monotonic clock), or the same simulated time.
    pub fn fresh(&self) -> Self {
        match &self.simulated {
            None => Self::new(),
            Some(time) => Self::simulated(Arc::clone(time)),
        }
    }

    /// Nanoseconds since the clock was made.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        match &self.simulated {
            None => self.origin.elapsed().as_nanos() as u64,
            Some(time) => time.now_ns(),
        }
    }

    /// Nanoseconds since the Unix epoch, from the wall clock (or the simulated one): for times that must be
    /// on one line across processes and hosts (session entries of successive leaders).
    pub fn epoch_ns(&self) -> i64 {
        match &self.simulated {
            None => {
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
            }
            Some(time) => time.epoch_ns(),
        }
    }
}

/// The time a simulator gives one node: a monotonic count it moves forward, and the wall clock's offset
/// from it (which a simulated clock jump moves either way, as NTP moves a wall clock).
#[derive(Debug, Default)]
pub struct SimulatedTime {
    now_ns: AtomicU64,
    epoch_offset_ns: AtomicI64,
}

impl SimulatedTime {
    /// A time at 0, its wall clock at `epoch_ns`.
    pub fn new(epoch_ns: i64) -> Arc<Self> {
        Arc::new(Self { now_ns: AtomicU64::new(0), epoch_offset_ns: AtomicI64::new(epoch_ns) })
    }

    /// The monotonic time.
    pub fn now_ns(&self) -> u64 {
        self.now_ns.load(Ordering::Acquire)
    }

    /// The wall clock.
    pub fn epoch_ns(&self) -> i64 {
        self.epoch_offset_ns.load(Ordering::Acquire).saturating_add(self.now_ns() as i64)
    }

    /// Moves the monotonic time to `now_ns` (never back: an earlier time is ignored).
    pub fn advance_to(&self, now_ns: u64) {
        self.now_ns.fetch_max(now_ns, Ordering::AcqRel);
    }

    /// Moves the wall clock by `by_ns` (either way), the monotonic time staying.
    pub fn jump_wall_clock(&self, by_ns: i64) {
        self.epoch_offset_ns.fetch_add(by_ns, Ordering::AcqRel);
    }
}

/// Converts a duration to whole nanoseconds, saturating.
pub fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// What a duration written without a unit means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BareNumber {
    /// Nanoseconds (idle strategy texts, where `sleep-ns:1000` has always meant 1000 ns).
    Nanos,
    /// Refused: in a file a bare number is ambiguous, so the unit is required.
    Refused,
}

/// Parses `<whole number><ns|us|ms|s>` (with [`BareNumber::Nanos`], the unit may be left out). The error
/// names the text and the units.
pub fn parse_duration(text: &str, bare: BareNumber) -> Result<Duration, String> {
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
