//! Term-start markers a follower's Receiver has rebuilt, handed to the consensus agent.
//!
//! A follower's consensus core must know the leadership term of every byte of its log (it compares logs by
//! their last term in elections, and matches them by term with a new leader). The leader opens each term
//! with a marker frame ([`crate::frames::TERM_START_FLAG`]); the Receiver finds markers in the one walk it
//! makes of each datagram, and reports each as `(position, leadership term id)` here. The consensus agent
//! takes them once the follower's rebuilt position has passed them, so the Receiver's hot path takes a lock
//! only for a datagram that carries a marker: once per leadership term, plus repairs.
//!
//! Configuration entries ([`crate::configuration`]) are markers too: the Receiver reports each
//! with its payload, read from the image it was just copied into, and the consensus agent hands it to
//! its core before it feeds the rebuilt position past the entry.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Markers held before the consensus agent takes them; past this the sink is marked overflowed.
pub const MAX_PENDING_TERM_STARTS: usize = 1024;

/// The markers one follower's Receiver reported and its consensus agent has not taken yet.
#[derive(Debug, Default)]
pub struct TermStarts {
    /// Bumped after every report, so the consensus agent locks only when something is new.
    reported: AtomicU64,
    marks: Mutex<Vec<(i64, i64)>>,
    /// Configuration entries: where each starts and ends, and its payload.
    configurations: Mutex<Vec<ReportedConfiguration>>,
    overflowed: AtomicBool,
}

/// A configuration entry a Receiver rebuilt: the frame's position, the position after it, its payload.
pub type ReportedConfiguration = (i64, i64, Vec<u8>);

impl TermStarts {
    /// Reports a marker of `leadership_term_id` at `position` (duplicates are harmless).
    pub fn report(&self, position: i64, leadership_term_id: i64) {
        let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        if marks.len() < MAX_PENDING_TERM_STARTS {
            marks.push((position, leadership_term_id));
        } else {
            self.overflowed.store(true, Ordering::Release);
        }
        drop(marks);
        self.reported.fetch_add(1, Ordering::Release);
    }

    /// Reports the configuration entry `payload` whose frame is at `position` and ends at `end`
    /// (duplicates are harmless). Counted with the term starts against [`MAX_PENDING_TERM_STARTS`].
    pub fn report_configuration(&self, position: i64, end: i64, payload: &[u8]) {
        let mut entries = self.configurations.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() < MAX_PENDING_TERM_STARTS {
            entries.push((position, end, payload.to_vec()));
        } else {
            self.overflowed.store(true, Ordering::Release);
        }
        drop(entries);
        self.reported.fetch_add(1, Ordering::Release);
    }

    /// Moves the reported configuration entries into `into`.
    pub fn take_configurations(&self, into: &mut Vec<ReportedConfiguration>) {
        into.append(&mut self.configurations.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// How many reports were made so far (cheap: one atomic load).
    pub fn reported(&self) -> u64 {
        self.reported.load(Ordering::Acquire)
    }

    /// Moves the reported markers into `into`; true when some were lost to an overflow (the follower
    /// then cannot label its log's terms and must not vote on it).
    pub fn take(&self, into: &mut Vec<(i64, i64)>) -> bool {
        into.append(&mut self.marks.lock().unwrap_or_else(|e| e.into_inner()));
        self.overflowed.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_taken_once_and_overflow_is_flagged() {
        let starts = TermStarts::default();
        starts.report(64, 2);
        starts.report(0, 1);
        assert_eq!(starts.reported(), 2);
        let mut taken = Vec::new();
        assert!(!starts.take(&mut taken));
        assert_eq!(taken, vec![(64, 2), (0, 1)]);
        taken.clear();
        assert!(!starts.take(&mut taken));
        assert!(taken.is_empty());
        for i in 0..=MAX_PENDING_TERM_STARTS as i64 {
            starts.report(i * 64, 3);
        }
        assert!(starts.take(&mut taken), "one past the bound is flagged");
        assert_eq!(taken.len(), MAX_PENDING_TERM_STARTS);
    }
}
