//! The cached nanosecond clock of a duty cycle.
//!
//! An agent reads the clock once per duty cycle (`Instant::now` costs ~31 ns on this host, see HOST.md)
//! and passes `now_ns` to every step, as Aeron's agents do, so a cycle sees one consistent time.

use std::time::Instant;

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
pub fn nanos(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}
