//! The safety properties, checked as the simulation runs: each check runs where the state it reads
//! changes, and `after_step` re-checks the rest after every step.
//!
//! - election safety: at most one leader per leadership term;
//! - at most one vote per member per term, and persisted terms never go back (optional: off to prove
//!   the end-to-end properties catch a member that forgets its vote);
//! - commit positions never move backwards on any member, across restarts too;
//! - state machine safety: every member's applied sequence is a prefix of one common sequence;
//! - leader completeness: an entry committed in term `t` is in the log of every leader of a term after
//!   `t`;
//! - nothing committed is ever truncated;
//! - no committed entry is lost: from when it is first applied, every committed entry is held at its
//!   index by a majority of the members' logs (under `batch`, within what they synced), checked when it
//!   commits and whenever a log loses entries (a truncation, a cut un-synced tail, a power loss)
//!   (optional: off to prove the end-to-end properties catch a loss).

use std::collections::HashMap;

use quorumcast_consensus::consensus_core::MemberId;

use super::log::{Entry, SimLog};

#[derive(Default)]
pub struct Checker {
    check_votes: bool,
    leaders: HashMap<i64, MemberId>,
    votes: HashMap<(MemberId, i64), MemberId>,
    /// The longest applied sequence: entry ids in log order.
    pub committed: Vec<u64>,
    /// For each committed entry, the lowest term in which a member applied it.
    commit_terms: Vec<i64>,
    /// Per member: (term it leads, committed entries checked to be in its log).
    completeness: HashMap<MemberId, (i64, usize)>,
}

pub type Check = Result<(), String>;

impl Checker {
    pub fn new(check_votes: bool) -> Self {
        Self { check_votes, ..Self::default() }
    }

    pub fn on_leader(&mut self, member: MemberId, term: i64) -> Check {
        match self.leaders.insert(term, member) {
            Some(other) if other != member => Err(format!("two leaders in term {term}: {other} and {member}")),
            _ => Ok(()),
        }
    }

    pub fn on_persist(&mut self, member: MemberId, previous_term: i64, term: i64, vote: Option<MemberId>) -> Check {
        if !self.check_votes {
            return Ok(());
        }
        if term < previous_term {
            return Err(format!("member {member} persisted term {term} after {previous_term}"));
        }
        let Some(vote) = vote else { return Ok(()) };
        match self.votes.insert((member, term), vote) {
            Some(earlier) if earlier != vote => {
                Err(format!("member {member} voted for {earlier} and then {vote} in term {term}"))
            }
            _ => Ok(()),
        }
    }

    /// `member`, in `term`, applies the entry at `index` of its log.
    pub fn on_apply(&mut self, member: MemberId, term: i64, index: usize, id: u64) -> Check {
        if index < self.committed.len() {
            if self.committed[index] != id {
                let common = self.committed[index];
                return Err(format!("member {member} applied entry {id} at index {index}, others applied {common}"));
            }
            self.commit_terms[index] = self.commit_terms[index].min(term);
        } else if index == self.committed.len() {
            self.committed.push(id);
            self.commit_terms.push(term);
        } else {
            return Err(format!("member {member} applied index {index} past the common sequence"));
        }
        Ok(())
    }

    pub fn on_commit(&self, member: MemberId, previous: i64, position: i64, log: &SimLog) -> Check {
        if position <= previous {
            return Err(format!("member {member}'s commit position went from {previous} to {position}"));
        }
        if position > log.end() || log.count_at(position).is_none() {
            return Err(format!("member {member} committed {position}, not an entry boundary of its log"));
        }
        Ok(())
    }

    pub fn on_truncate(&mut self, member: MemberId, position: i64, applied_position: i64) -> Check {
        self.completeness.remove(&member);
        if position < applied_position {
            return Err(format!("member {member} truncated to {position}, below its commit {applied_position}"));
        }
        Ok(())
    }

    /// Leader completeness for a member leading `term`: every entry committed in an earlier term is in
    /// its log. Incremental: a leader's log only grows while it leads.
    pub fn check_leader_log(&mut self, member: MemberId, term: i64, log: &SimLog) -> Check {
        let checked = self.completeness.entry(member).or_insert((term, 0));
        if checked.0 != term {
            *checked = (term, 0);
        }
        while checked.1 < self.committed.len() && self.commit_terms[checked.1] < term {
            let index = checked.1;
            let held = log.entries().get(index).map(|e| e.id);
            if held != Some(self.committed[index]) {
                let (id, at) = (self.committed[index], self.commit_terms[index]);
                return Err(format!(
                    "leader {member} of term {term} lacks entry {id} (index {index}) committed in term {at}; it holds {held:?}"
                ));
            }
            checked.1 += 1;
        }
        Ok(())
    }

    /// No committed entry lost: each committed entry from index `from` on is at its index in a majority
    /// of `logs` (every member's, as far as it counts toward a commit).
    pub fn check_held(&self, from: usize, logs: &[&[Entry]]) -> Check {
        let majority = logs.len() / 2 + 1;
        for index in from..self.committed.len() {
            let id = self.committed[index];
            let held = logs.iter().filter(|log| log.get(index).is_some_and(|entry| entry.id == id)).count();
            if held < majority {
                let (term, members) = (self.commit_terms[index], logs.len());
                return Err(format!(
                    "committed entry {id} (index {index}, applied in term {term}) lost: held by {held} of {members} members' logs"
                ));
            }
        }
        Ok(())
    }

    /// No committed entry lost while the membership changes: each committed entry from index `from` on is
    /// at its index in enough of the logs of at least one of `groups` (the voters of a configuration) that
    /// every majority of that group includes a log holding it: a candidate needs such a majority's votes,
    /// and a voter holding the entry refuses a log without it (Leader Completeness). For an odd group that
    /// is a majority; for an even one, half: an entry committed by a majority of a configuration that was
    /// then cut away (appended, counted with, never committed) is held by half of the one before it, whose
    /// every majority still meets those (single-server changes: the two configurations' majorities
    /// overlap; seed 506439).
    pub fn check_held_by_any(&self, from: usize, groups: &[Vec<&[Entry]>]) -> Check {
        for index in from..self.committed.len() {
            if groups.iter().any(|logs| self.check_held_at(index, logs)) {
                continue;
            }
            let (id, term) = (self.committed[index], self.commit_terms[index]);
            return Err(format!(
                "committed entry {id} (index {index}, applied in term {term}) lost: some majority of each of the \
                 {} configurations that could have committed it holds no log with it",
                groups.len()
            ));
        }
        Ok(())
    }

    fn check_held_at(&self, index: usize, logs: &[&[Entry]]) -> bool {
        let id = self.committed[index];
        let held = logs.iter().filter(|log| log.get(index).is_some_and(|entry| entry.id == id)).count();
        // Every majority (of `n / 2 + 1`) meets the holders when the others are fewer than a majority.
        logs.len() - held < logs.len() / 2 + 1
    }

    pub fn forget_leader_log(&mut self, member: MemberId) {
        self.completeness.remove(&member);
    }
}
