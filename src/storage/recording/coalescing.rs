//! When the recorder writes what the log holds past the recording's end: at once, or held back for one
//! larger write.
//!
//! A write into the page cache costs a fixed part (the system call, a folio's allocation and the zeroing
//! of the block it ends in) beside its copy: measured here, 0.31-0.34 ns per byte in writes of 23 KiB,
//! 0.19 in writes of 256 KiB. A recorder that writes whatever each duty cycle finds writes small blocks
//! when the log streams in faster than it cycles. So while the log streams in fast (the last look found
//! bytes, and this one finds at least [`MIN_GROWTH`] more that came since), the recorder holds back a run
//! shorter than [`COALESCE_BYTES`], for at most [`MAX_HOLD_NS`]; a look that finds less new (the log
//! paused or slowed: a lone message, the end of a burst, a moderate load), a run that ends its term, or
//! the time up, writes it.
//!
//! # Invariants
//!
//! - A run is held only while bytes keep arriving fast: a message offered alone is written by the first
//!   look that finds it, as without coalescing, and so is a load that brings less than [`MIN_GROWTH`]
//!   between two looks (its acknowledgements, and so its commits, are not held back).
//! - Nothing is held longer than [`MAX_HOLD_NS`] from the first look that held it.
//! - The decision reads no clock and does no I/O: the time is passed in.

/// Runs at least this long are written at once.
pub const COALESCE_BYTES: usize = 256 << 10;
/// A look holds only if at least this much came since the last one.
pub const MIN_GROWTH: usize = 4 << 10;
/// The longest a run is held back, in nanoseconds.
pub const MAX_HOLD_NS: u64 = 200_000;

/// What the recorder saw at its last looks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Coalescing {
    /// Bytes of whole frames held back at the recording's end (already scanned).
    held: usize,
    /// When the run was first held.
    since_ns: u64,
    /// The last look found bytes.
    streaming: bool,
}

/// What to do with the run found at the recording's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    /// Write it.
    Write,
    /// Hold it back until a later look.
    Hold,
}

impl Coalescing {
    /// Bytes already scanned and held at the recording's end: the next look scans on from there.
    pub(super) fn held(&self) -> usize {
        self.held
    }

    /// Decides for the run at the recording's end, `available` bytes of whole frames of which `new` came
    /// since the last look, and whether it `ends_term` (a PAD frame or the term's end follows it); `now_ns`
    /// is asked for the time only when the decision depends on it.
    pub(super) fn decide(
        &mut self,
        available: usize,
        new: usize,
        ends_term: bool,
        now_ns: impl FnOnce() -> u64,
    ) -> Decision {
        let streaming = std::mem::replace(&mut self.streaming, available > 0);
        if !streaming || new < MIN_GROWTH || ends_term || available >= COALESCE_BYTES {
            self.held = 0;
            return Decision::Write;
        }
        let now_ns = now_ns();
        if self.held == 0 {
            self.since_ns = now_ns;
        } else if now_ns.saturating_sub(self.since_ns) >= MAX_HOLD_NS {
            self.held = 0;
            return Decision::Write;
        }
        self.held = available;
        Decision::Hold
    }

    /// The recording was cut or replaced: nothing is held.
    pub(super) fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_message_is_written_by_the_first_look_that_finds_it() {
        let mut c = Coalescing::default();
        assert_eq!(c.decide(0, 0, false, || 0), Decision::Write, "nothing there");
        assert_eq!(c.decide(160, 160, false, || 10), Decision::Write);
        assert_eq!(c.held(), 0);
    }

    #[test]
    fn a_log_streaming_in_fast_is_held_until_it_slows_grows_long_enough_or_the_time_is_up() {
        let g = MIN_GROWTH;
        let mut c = Coalescing::default();
        assert_eq!(c.decide(g, g, false, || 0), Decision::Write, "the first look: not streaming yet");
        assert_eq!(c.decide(g, g, false, || 1_000), Decision::Hold);
        assert_eq!(c.held(), g);
        assert_eq!(c.decide(2 * g, g, false, || 2_000), Decision::Hold);
        assert_eq!(c.decide(2 * g + 160, 160, false, || 3_000), Decision::Write, "the log slowed");
        assert_eq!(c.decide(g, g, false, || 3_500), Decision::Hold);
        assert_eq!(c.decide(g, 0, false, || 3_600), Decision::Write, "the log paused");
        // Long enough.
        assert_eq!(c.decide(g, g, false, || 4_000), Decision::Hold);
        assert_eq!(c.decide(COALESCE_BYTES, COALESCE_BYTES - g, false, || 5_000), Decision::Write);
        // The time up, counted from the first look that held.
        assert_eq!(c.decide(g, g, false, || 10_000), Decision::Hold);
        assert_eq!(c.decide(2 * g, g, false, || 10_000 + MAX_HOLD_NS - 1), Decision::Hold);
        assert_eq!(c.decide(3 * g, g, false, || 10_000 + MAX_HOLD_NS), Decision::Write);
        // The end of a term.
        assert_eq!(c.decide(g, g, false, || 1_000_000), Decision::Hold);
        assert_eq!(c.decide(2 * g + 32, g + 32, true, || 1_000_001), Decision::Write);
    }

    #[test]
    fn a_moderate_load_is_written_look_by_look() {
        let mut c = Coalescing::default();
        for look in 1..100u64 {
            assert_eq!(c.decide(1536, 1536, false, || look * 1_000), Decision::Write, "16 messages a look");
        }
    }
}
