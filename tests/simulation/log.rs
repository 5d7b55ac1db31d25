//! A member's simulated log: entries of real byte sizes, so positions are positions, and the storage
//! under them: what is synced (survives a power loss), and the one sync in flight.

use quorumcast_consensus::consensus_core::{TermBase, TermHistory};

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
    /// A remote client's session entry: its session (0: none, a plain client entry or a marker).
    pub session: u64,
    /// With a session: 0 for its open, else the message's correlation id.
    pub correlation: u64,
    /// A configuration entry (its configuration is in the simulation's table, under the entry's id).
    pub membership: bool,
}

impl Entry {
    /// A plain entry (a client message without a session, or a marker).
    pub fn plain(term: i64, id: u64, length: i64, client: bool) -> Self {
        Self { term, id, length, client, session: 0, correlation: 0, membership: false }
    }
}

/// An fsync in flight: it makes durable what was written before it started (group commit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sync {
    /// The log's end when it started, lowered by any truncation since.
    pub target: i64,
    /// When it completes, in simulated time.
    pub done_at_ns: u64,
}

/// The entries, where each ends, and how much of them is synced.
///
/// Invariant: `synced` is an entry boundary at or below the end; so is a sync's target.
#[derive(Clone, Debug, Default)]
pub struct SimLog {
    entries: Vec<Entry>,
    ends: Vec<i64>,
    synced: i64,
    syncing: Option<Sync>,
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

    /// Cuts the log at `position`; false when it is not an entry boundary. The cut is durable at once
    /// (the driver syncs a truncation before it writes past it), so the synced position and a sync in
    /// flight come down to it too.
    pub fn truncate(&mut self, position: i64) -> bool {
        let Some(count) = self.count_at(position) else { return false };
        self.entries.truncate(count);
        self.ends.truncate(count);
        self.synced = self.synced.min(position);
        if let Some(sync) = &mut self.syncing {
            sync.target = sync.target.min(position);
        }
        true
    }

    /// The end of what a power loss cannot take: written and synced.
    pub fn synced(&self) -> i64 {
        self.synced
    }

    /// The sync in flight.
    pub fn syncing(&self) -> Option<Sync> {
        self.syncing
    }

    /// Starts a sync of everything written so far, done at `done_at_ns`; false (and nothing changes)
    /// while one is in flight or when everything is synced.
    pub fn start_sync(&mut self, done_at_ns: u64) -> bool {
        if self.syncing.is_some() || self.synced == self.end() {
            return false;
        }
        self.syncing = Some(Sync { target: self.end(), done_at_ns });
        true
    }

    /// Completes the sync in flight if it is due at `now_ns`; true when it completed.
    pub fn complete_sync(&mut self, now_ns: u64) -> bool {
        match self.syncing {
            Some(sync) if sync.done_at_ns <= now_ns => {
                self.syncing = None;
                self.synced = self.synced.max(sync.target);
                true
            }
            _ => false,
        }
    }

    /// Everything written is synced at once (a restarted member's driver syncs the log it reads back),
    /// and a sync in flight is forgotten (its process is gone).
    pub fn sync_all(&mut self) {
        self.synced = self.end();
        self.syncing = None;
    }

    /// How many entries lie past the synced position.
    pub fn unsynced_entries(&self) -> usize {
        self.entries.len() - self.count_at(self.synced).expect("synced is an entry boundary")
    }

    /// A power loss: of the entries past the synced position, only the first `kept` survive (what the
    /// operating system happened to write back; a torn entry is cut at recovery), and what survived is
    /// on disk.
    pub fn lose_unsynced(&mut self, kept: usize) {
        let count = self.count_at(self.synced).expect("synced is an entry boundary") + kept;
        self.entries.truncate(count);
        self.ends.truncate(count);
        self.sync_all();
    }

    /// The run of entries of one term from `position` (an entry boundary) up to at most `limit`: its
    /// term and where it ends; `None` when no entry from `position` ends by `limit`.
    pub fn term_run(&self, position: i64, limit: i64) -> Option<(i64, i64)> {
        let first = self.count_at(position)?;
        let term = self.entries.get(first)?.term;
        let mut end = None;
        for (entry, &entry_end) in self.entries[first..].iter().zip(&self.ends[first..]) {
            if entry.term != term || entry_end > limit {
                break;
            }
            end = Some(entry_end);
        }
        end.map(|end| (term, end))
    }

    /// Up to `max` entries from `position` (an entry boundary).
    pub fn entries_from(&self, position: i64, max: usize) -> Option<&[Entry]> {
        let first = self.count_at(position)?;
        let last = (first + max).min(self.entries.len());
        Some(&self.entries[first..last])
    }

    /// The configuration entries: each entry's id and where it ends, oldest first.
    pub fn membership_entries(&self) -> impl Iterator<Item = (u64, i64)> + '_ {
        self.entries.iter().zip(&self.ends).filter(|(entry, _)| entry.membership).map(|(entry, end)| (entry.id, *end))
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
