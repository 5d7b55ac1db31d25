//! Changing the membership while the cluster runs: what the leader checks before it appends a
//! configuration entry, and what every member does when its log gains or loses one. The rules are in
//! [`membership`](super::membership).
//!
//! A driver that appends a configuration entry (the leader, for a change it proposed; a follower, for one
//! it received) calls [`ConsensusCore::on_membership`] with the entry's end position before it reports the
//! append position past it, so that the configuration takes effect as it enters the log.

use super::machine::{ConsensusCore, Following, Peer, Phase, StepDown};
use super::membership::{Membership, MembershipChange, MembershipError};
use super::output::{CoreError, Output};
use super::MemberId;

impl ConsensusCore {
    /// The configuration after `change`, if this leader may append it now: it leads, has committed an entry
    /// of its term, runs no transfer, has no uncommitted change, and enough voters of the new configuration
    /// answered within the shortest election timeout to commit it; a learner to promote is at most
    /// `promote_within` bytes behind the leader's log. Changes nothing: the driver appends the entry and
    /// reports it with [`on_membership`](Self::on_membership).
    pub fn propose_membership(
        &self,
        change: MembershipChange,
        promote_within: i64,
        now_ns: u64,
    ) -> Result<Membership, MembershipError> {
        let Phase::Leader(leadership) = &self.phase else {
            return Err(MembershipError::NotLeader { leader: self.leader_member_id() });
        };
        if leadership.transfer.is_some() {
            return Err(MembershipError::Transferring);
        }
        if self.commit_position <= leadership.term_base {
            return Err(MembershipError::TermNotCommitted);
        }
        if self.membership.latest_end().is_some_and(|end| end > self.commit_position) {
            return Err(MembershipError::ChangeInProgress { id: self.membership.latest().id });
        }
        let next = self.membership.latest().apply(change)?;
        let peer = |id: MemberId| leadership.peers.iter().find(|p| p.id == id);
        let timeout = self.config.timers.election_timeout_min_ns;
        if let MembershipChange::Promote(member) = change {
            // A learner that has not answered within the election timeout is not known to hold anything
            // (a log shorter than the promotion distance would otherwise let a silent one through).
            if !peer(member).is_some_and(|p| p.heard && now_ns.saturating_sub(p.last_heard_ns) < timeout) {
                return Err(MembershipError::LearnerSilent(member));
            }
            let behind = self.append_position - peer(member).map_or(0, |p| p.matched_position);
            if behind > promote_within {
                return Err(MembershipError::LearnerBehind { member, behind, limit: promote_within });
            }
        }
        let me = self.config.member_id;
        let live = next
            .voters
            .iter()
            .filter(|&&v| {
                v == me || peer(v).is_some_and(|p| p.heard && now_ns.saturating_sub(p.last_heard_ns) < timeout)
            })
            .count();
        if live < next.majority() {
            return Err(MembershipError::TooFewLiveVoters { live, needed: next.majority() });
        }
        Ok(next)
    }

    /// The local log gained the entry of `membership`, ending at `end` (past the append position the core
    /// knows): it is in effect once the append position reaches `end` (`on_append_position`: under a
    /// sync policy that counts only synced bytes, once it is synced). Refused (an [`Output::Error`]) unless it is the next
    /// configuration, past the last entry and the log's known end.
    pub fn on_membership(&mut self, end: i64, membership: Membership, out: &mut Vec<Output>) {
        let membership_id = membership.id;
        if end <= self.append_position {
            out.push(Output::Error(CoreError::MembershipOutOfOrder { membership_id, end }));
            return;
        }
        if self.membership.push(end, membership).is_err() {
            out.push(Output::Error(CoreError::MembershipOutOfOrder { membership_id, end }));
        }
    }

    /// A follower installed its leader's snapshot at `position`, which carries `membership` (the leader's
    /// configuration at that position): the local log's configurations are the snapshot's from now on.
    /// Call it after [`on_snapshot_installed`](Self::on_snapshot_installed).
    pub fn on_snapshot_membership(&mut self, membership: Membership, now_ns: u64, out: &mut Vec<Output>) {
        let before = self.membership().id;
        self.membership.reset(membership);
        if self.membership().id != before {
            self.on_membership_changed(now_ns, out);
        }
    }

    /// The core is about to name its append position as its log's end (a term start, or where to
    /// replicate from), and the driver cuts whatever its log holds past it (under a sync policy that
    /// counts only synced bytes, entries written but not synced): configurations in that tail go with it.
    /// Those configurations were not in effect yet.
    pub(super) fn forget_configurations_past_end(&mut self) {
        self.membership.truncate(self.append_position);
    }

    /// The append position moved from `before` (bytes appended, or a snapshot installed): a configuration
    /// entry it passed is in effect now.
    pub(super) fn on_append_moved(&mut self, before: i64, now_ns: u64, out: &mut Vec<Output>) {
        if self.membership.at(before).id != self.membership().id {
            self.refresh_peers(now_ns);
            self.on_membership_changed(now_ns, out);
        }
    }

    /// After the configuration in effect changed: tells the driver, and a member that may no longer stand
    /// stops any canvass or candidacy it runs.
    pub(super) fn on_membership_changed(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        out.push(Output::MembershipChanged { membership_id: self.membership().id });
        if !self.may_stand() && matches!(self.phase, Phase::Canvass(_) | Phase::Candidate(_)) {
            self.stand_aside(now_ns, out);
        }
    }

    /// A leader sends to, and tracks, every other member of the configuration in effect: members that
    /// joined start unheard (so the term is announced to them), members that left are dropped.
    pub(super) fn refresh_peers(&mut self, now_ns: u64) {
        let others = self.followers();
        let Phase::Leader(leadership) = &mut self.phase else { return };
        let mut peers = Vec::with_capacity(others.len());
        for id in others {
            let kept = leadership.peers.iter().find(|p| p.id == id).cloned();
            peers.push(kept.unwrap_or(Peer { id, matched_position: 0, heard: false, last_heard_ns: now_ns }));
        }
        leadership.positions = Vec::with_capacity(peers.len() + 1);
        leadership.peers = peers;
        let current = self.membership.at(self.append_position);
        if leadership.transfer.as_ref().is_some_and(|t| !current.is_voter(t.target)) {
            leadership.transfer = None;
        }
    }

    /// A leader that is no voter of the configuration in effect steps down once that configuration
    /// commits (it led the change through; Raft's rule for a removed leader).
    pub(super) fn step_down_if_removed(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        let in_effect = self.membership().id;
        let committed = self.membership.at(self.commit_position).id == in_effect;
        if matches!(self.phase, Phase::Leader(_)) && committed && !self.is_voter() {
            self.step_down(now_ns, out);
            self.replace_step_down(StepDown::Removed { membership_id: in_effect });
        }
    }

    /// How many of `granted` vote in the configuration in effect.
    pub(super) fn votes_of(&self, granted: &[MemberId]) -> usize {
        let current = self.membership();
        granted.iter().filter(|&&id| current.is_voter(id)).count()
    }

    /// A member that does not vote and whose election timer ran out: it stays (or becomes) a follower
    /// that knows no leader, and waits for one, without canvassing.
    pub(super) fn stand_aside(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        if !matches!(self.phase, Phase::Follower(_)) {
            self.phase = Phase::Follower(Following::new(None, now_ns));
            self.announce(out);
        }
        self.reset_election_timer(now_ns);
    }
}
