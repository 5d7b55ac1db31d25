//! The leader's clock in the log: a leader opens its term with a leader-term entry, then appends a tick
//! whenever its clock passes the next deadline of the replicated state (a session's silence, a service's
//! timer) and nothing else carried its clock there. Every other member learns the time only from these
//! entries and the stamps of the others, so timeouts and timers happen at the same entry everywhere.
//!
//! # Invariants
//!
//! - Each term this member leads starts its session entries with exactly one leader-term entry: nothing
//!   of a client, and nothing the service offers, is applied as live before it.
//! - A tick is appended only once the leader's clock is at or past the deadline the node's reader last
//!   published, and not again for the same deadline until [`TICK_INTERVAL_NS`] has passed while the tick
//!   is in flight (appended, and no entry stamped as late applied yet): it covers that deadline. Once the
//!   reader has applied it, a deadline published at or before its stamp (a timer a callback scheduled for
//!   a time already passed) gets a tick at once: waiting out the interval would make such a timer up to
//!   50 ms late (the node simulator's service test found it, seeds 71000-71003 without remote clients).

use crate::agent::clock::NanoClock;
use crate::client::session::SessionEntry;
use crate::cluster::append::AppendStage;
use crate::storage::recording::catch_up::Nonces;

use super::SessionDeadline;

/// Least time between two ticks for one deadline (the tick for it is in the log but not yet applied, so
/// the reader still publishes it): a session closes, or a timer fires, at most this late after a lost tick.
const TICK_INTERVAL_NS: i64 = 50_000_000;

/// What the leader's clock keeper did in a duty cycle, for the client endpoint.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TermClock {
    /// The term's leader-term entry is in the log: client entries may follow.
    pub(crate) announced: bool,
    /// This leader's random value for its term: its sessions' ids derive from it.
    pub(crate) nonce: u64,
    /// Entries appended.
    pub(crate) appended: usize,
}

/// Keeps the leader's clock in the log; see the module documentation.
pub(crate) struct LeaderClock {
    clock: NanoClock,
    /// The replicated state's next deadline, as the node's reader applied it.
    deadline: SessionDeadline,
    /// The term whose entry this keeper appends (-1: none yet).
    term: i64,
    nonce: u64,
    announced: bool,
    last_tick_ns: i64,
    /// Where the term nonces come from.
    entropy: Nonces,
}

impl LeaderClock {
    pub(crate) fn new(clock: NanoClock, deadline: SessionDeadline, entropy: Nonces) -> Self {
        Self { clock, deadline, term: -1, nonce: 0, announced: false, last_tick_ns: i64::MIN, entropy }
    }

    /// On the leader of `term`: its leader-term entry first, then a tick when its clock passes the next
    /// deadline.
    pub(crate) fn keep_time(&mut self, stage: &mut AppendStage, term: i64) -> TermClock {
        if term != self.term {
            self.term = term;
            self.nonce = self.entropy.next_u64();
            self.announced = false;
            self.last_tick_ns = i64::MIN;
        }
        let appended = self.append_due(stage);
        stage.count_session_appends(appended);
        TermClock { announced: self.announced, nonce: self.nonce, appended }
    }

    fn append_due(&mut self, stage: &mut AppendStage) -> usize {
        let deadline = self.deadline.get();
        if self.announced && deadline == i64::MAX {
            // No session is open and no timer scheduled: no clock to read in this duty cycle.
            return 0;
        }
        let epoch_ns = self.clock.epoch_ns();
        if !self.announced {
            let entry =
                SessionEntry::LeaderTerm { leadership_term_id: self.term, nonce: self.nonce, timestamp_ns: epoch_ns };
            self.announced = append(stage, &entry);
            return usize::from(self.announced);
        }
        let in_flight = self.deadline.applied_time() < self.last_tick_ns;
        let covered =
            in_flight && self.last_tick_ns >= deadline && epoch_ns.saturating_sub(self.last_tick_ns) < TICK_INTERVAL_NS;
        if epoch_ns < deadline || covered {
            return 0;
        }
        if append(stage, &SessionEntry::Tick { timestamp_ns: epoch_ns }) {
            self.last_tick_ns = epoch_ns;
            return 1;
        }
        0
    }
}

/// Appends a session entry of no payload; false when the log has no room now (counted by the stage).
fn append(stage: &mut AppendStage, entry: &SessionEntry<'_>) -> bool {
    let (header, length) = entry.header();
    stage.append_session(&[&header[..length]]).is_ok()
}
