//! Leadership transfer (Raft's TimeoutNow, thesis section 3.10): a leader hands its leadership to a
//! chosen follower, so that maintenance costs a round of votes instead of an election timeout.
//!
//! Rules:
//! - only the leader transfers, and only to another member; while a transfer runs the leader takes no
//!   new entries ([`ConsensusCore::is_transferring`]: the driver holds them back), so the target can
//!   reach the end of its log;
//! - once the leader's whole log is durable on it and the target acknowledged all of it, the leader sends
//!   the target [`Message::TimeoutNow`]
//!   (again every heartbeat interval until the transfer ends);
//! - the target, told by its leader in the current term and holding the log up to the position told,
//!   stands for the next term at once, without a canvass (a canvass would be refused: every member
//!   hears a live leader). Votes are granted by the usual rules (one per term, an up-to-date log), so a
//!   transfer never elects a member an election could not; the old leader steps down on the request's
//!   higher term, as on any;
//! - a transfer that has not ended within the minimum election timeout is abandoned: the leader takes
//!   entries again (Raft's bound, so that a dead target does not keep the cluster from its log).

use std::fmt;

use super::machine::{ConsensusCore, Phase};
use super::message::Message;
use super::output::{Destination, Output};
use super::MemberId;

/// A transfer in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Transfer {
    pub(super) target: MemberId,
    /// Where the leader's log ends: TimeoutNow waits until the leader's own append position (what it
    /// made durable) and the target's acknowledgement both reach it, so that no member holds more of the
    /// log than the target and every vote can go to it.
    pub(super) log_end: i64,
    /// Abandoned at this time.
    pub(super) deadline_ns: u64,
    /// When TimeoutNow is next due (0: as soon as the target caught up).
    pub(super) next_send_ns: u64,
}

/// Why a transfer was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferError {
    /// This member does not lead.
    NotLeader,
    /// The target is this member, or not a voter.
    NotAFollower(MemberId),
    /// No follower was heard from within the heartbeat timeout, so none can be chosen.
    NoLiveFollower,
}

impl fmt::Display for TransferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotLeader => f.write_str("this member does not lead: ask the leader to transfer its leadership"),
            Self::NotAFollower(id) => write!(f, "member {id} is not another voting member of this cluster"),
            Self::NoLiveFollower => {
                f.write_str("no follower answered within the heartbeat timeout: there is no one to hand over to")
            }
        }
    }
}

impl std::error::Error for TransferError {}

impl ConsensusCore {
    /// Starts handing this leader's leadership to `target`, or (with `None`) to the live follower
    /// furthest along; returns the target. `log_end` is where the leader's log ends (the driver appends
    /// nothing more while [`is_transferring`](Self::is_transferring); a driver whose append position is
    /// its log's end passes [`append_position`](Self::append_position)). A transfer already running is
    /// replaced.
    pub fn transfer_leadership(
        &mut self,
        target: Option<MemberId>,
        log_end: i64,
        now_ns: u64,
        out: &mut Vec<Output>,
    ) -> Result<MemberId, TransferError> {
        let me = self.config.member_id;
        let timeout = self.config.timers.heartbeat_timeout_ns;
        let deadline_ns = now_ns.saturating_add(self.config.timers.election_timeout_min_ns);
        let current = self.membership.at(self.append_position);
        let Phase::Leader(leadership) = &mut self.phase else { return Err(TransferError::NotLeader) };
        let target = match target {
            Some(id) if id == me || !current.is_voter(id) || !leadership.peers.iter().any(|p| p.id == id) => {
                return Err(TransferError::NotAFollower(id))
            }
            Some(id) => id,
            None => leadership
                .peers
                .iter()
                .filter(|p| current.is_voter(p.id) && now_ns.saturating_sub(p.last_heard_ns) < timeout)
                .max_by_key(|p| (p.matched_position, std::cmp::Reverse(p.id)))
                .map(|p| p.id)
                .ok_or(TransferError::NoLiveFollower)?,
        };
        leadership.transfer = Some(Transfer { target, log_end, deadline_ns, next_send_ns: 0 });
        self.counters.transfers += 1;
        self.send_timeout_now_if_due(now_ns, out);
        Ok(target)
    }

    /// Whether this leader is handing its leadership over (it takes no new entries meanwhile).
    pub fn is_transferring(&self) -> bool {
        matches!(&self.phase, Phase::Leader(leadership) if leadership.transfer.is_some())
    }

    /// The transfer's step on every tick and acknowledgement: abandoned past its deadline, TimeoutNow to
    /// a target that holds the whole log.
    pub(super) fn send_timeout_now_if_due(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        let append_position = self.append_position;
        let (term, interval) = (self.term, self.config.timers.heartbeat_interval_ns);
        let Phase::Leader(leadership) = &mut self.phase else { return };
        let Some(transfer) = &mut leadership.transfer else { return };
        if now_ns >= transfer.deadline_ns {
            leadership.transfer = None;
            self.counters.transfers_abandoned += 1;
            return;
        }
        let end = transfer.log_end.max(append_position);
        let caught_up = append_position >= transfer.log_end
            && leadership.peers.iter().any(|p| p.id == transfer.target && p.matched_position >= end);
        if !caught_up || now_ns < transfer.next_send_ns {
            return;
        }
        transfer.next_send_ns = now_ns.saturating_add(interval);
        let message = Message::TimeoutNow { leadership_term_id: term, log_position: append_position };
        out.push(Output::Send { to: Destination::Member(transfer.target), message });
    }

    /// The leader of this term tells this member to stand now.
    pub(super) fn on_timeout_now(
        &mut self,
        from: MemberId,
        term: i64,
        position: i64,
        now_ns: u64,
        out: &mut Vec<Output>,
    ) {
        let from_leader = matches!(&self.phase, Phase::Follower(f) if f.leader == Some(from));
        // The next term must leave a next one (every term id stays below `i64::MAX`).
        let refused = !from_leader || !self.is_voter() || self.repair.is_some() || self.append_position < position;
        if term != self.term || refused || term >= i64::MAX - 2 {
            self.counters.unexpected += 1;
            return;
        }
        self.stand(self.term + 1, now_ns, out);
    }
}
