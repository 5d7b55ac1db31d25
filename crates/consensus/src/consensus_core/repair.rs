//! A member repairing its log: one whose recorded log, read back at a restart, was damaged below what it
//! had synced (a write that landed at the wrong offset, a sector gone bad), so that it now holds less than
//! it may have acknowledged and voted with.
//!
//! Its acknowledgements from before counted toward commits the rest of the cluster relies on: an entry
//! committed with its help may now be held by a minority only. Raft's safety (a leader's log holds every
//! committed entry) rests on every voter's log being at least what it acknowledged, so until it holds that
//! again the member:
//!
//! - does not canvass, stand, or answer a leader's request to stand at once;
//! - grants a canvass or a vote only to a candidate whose log is at least as up to date as the log it held
//!   before, `(term, held)`: `held` is the highest end of a block its recovery found past the damage (what
//!   it may have acknowledged, as far as recovery can tell: docs/ARCHITECTURE.md says what it cannot),
//!   and `term` its persisted term when the loss was found, at or past the term of any byte it held (a
//!   member adopts and persists a term before it takes bytes of it);
//! - acknowledges only what it holds now (its append position, as every follower): an acknowledgement
//!   claims bytes the member holds and has synced, so counting it is sound; what was unsound was counting
//!   the old ones for a log it then lost, and those are answered by the vote rule above.
//!
//! The repair ends (and the member votes and stands again by the ordinary rules) when either
//!
//! - its log reaches `held` again: it holds its leader's log up to there, and every entry committed with
//!   its old acknowledgements is at or below `held` and in every later leader's log at the same position;
//! - or its log is cut back (a leader's log disagrees with it at the cut): by log matching, the log it held
//!   before disagreed with that leader's from the cut on, so nothing it held past the cut was committed,
//!   and it still holds everything below.

use super::machine::ConsensusCore;

/// What a repairing member must hold again before it votes by the ordinary rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repair {
    /// Where the log it held before ended, at the most (what it may have acknowledged).
    pub held: i64,
    /// A term at or past the term of that log's last byte.
    pub term: i64,
}

impl Repair {
    /// Whether a log ending at `append` holds what this member held before.
    pub fn is_done(&self, append: i64) -> bool {
        append >= self.held
    }

    /// Whether a candidate whose log ends at `log` = (last term, position) is at least as up to date as the
    /// log this member held before.
    pub fn grants(&self, log: (i64, i64)) -> bool {
        log >= (self.term, self.held)
    }
}

impl ConsensusCore {
    /// This member's log was found damaged at start: it held up to `held` before (and may have acknowledged
    /// that far), and holds only up to its append position now. Until it holds `held` again (or its log is
    /// cut back by a leader's) it repairs: see the [module docs](self). No change when it holds `held`.
    pub fn start_repair(&mut self, held: i64) {
        if held > self.append_position {
            self.repair = Some(Repair { held, term: self.term });
        }
    }

    /// What this member must get back before it votes by the ordinary rules, while it repairs.
    pub fn repair(&self) -> Option<Repair> {
        self.repair
    }

    /// Ends the repair once the log holds what the member held before.
    pub(super) fn end_repair_if_done(&mut self) {
        if self.repair.is_some_and(|r| r.is_done(self.append_position)) {
            self.repair = None;
        }
    }
}
