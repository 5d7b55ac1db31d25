//! A member's simulated log: entries of real byte sizes, so positions are positions.

use quorumcast::consensus_core::{TermBase, TermHistory};

/// One log entry: a client message or a term-start marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The leadership term it was appended in.
    pub term: i64,
    /// Unique over the run.
    pub id: u64,
    /// Its size in bytes.
    pub length: i64,
    /// A client message (not a term-start marker).
    pub client: bool,
}

/// The entries and where each ends.
#[derive(Clone, Debug, Default)]
pub struct SimLog {
    entries: Vec<Entry>,
    ends: Vec<i64>,
}

impl SimLog {
    pub fn end(&self) -> i64 {
        self.ends.last().copied().unwrap_or(0)
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn push(&mut self, entry: Entry) {
        self.ends.push(self.end() + entry.length);
        self.entries.push(entry);
    }

    /// How many entries end at or before `position`, when `position` is an entry boundary.
    pub fn count_at(&self, position: i64) -> Option<usize> {
        if position == 0 {
            return Some(0);
        }
        self.ends.binary_search(&position).ok().map(|i| i + 1)
    }

    /// Cuts the log at `position`; false when it is not an entry boundary.
    pub fn truncate(&mut self, position: i64) -> bool {
        let Some(count) = self.count_at(position) else { return false };
        self.entries.truncate(count);
        self.ends.truncate(count);
        true
    }

    /// Up to `max` entries from `position` (an entry boundary).
    pub fn entries_from(&self, position: i64, max: usize) -> Option<&[Entry]> {
        let first = self.count_at(position)?;
        let last = (first + max).min(self.entries.len());
        Some(&self.entries[first..last])
    }

    /// The log's terms, as a restarted member's driver reads them back from the log.
    pub fn term_history(&self) -> TermHistory {
        let mut terms: Vec<TermBase> = Vec::new();
        let mut base = 0;
        for (entry, end) in self.entries.iter().zip(&self.ends) {
            if terms.last().is_none_or(|t| t.leadership_term_id != entry.term) {
                terms.push(TermBase { leadership_term_id: entry.term, base_position: base });
            }
            base = *end;
        }
        TermHistory::from_terms(terms, self.end()).expect("a log's terms only grow")
    }
}
