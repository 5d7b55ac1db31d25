//! The leader's side: announcing the term, tracking each member's acknowledged position, committing by
//! quorum, heartbeats, and stepping down without a majority.
//!
//! Rules:
//! - the term starts at the leader's append position with a term-start marker; the leader never
//!   truncates its own log while it leads;
//! - the commit position is the quorum position of the acknowledged positions (the leader counting its
//!   own), and moves only once it is past the term's base: only then does a majority hold bytes of this
//!   term, which is what makes the earlier terms' bytes below it safe to call committed (figure 8);
//! - the commit position goes out when it moves and at least every heartbeat interval; members not
//!   heard from in this term get the announcement again with each heartbeat;
//! - a leader that has not heard from a majority (itself included) within the shortest election timeout
//!   steps down, so it stops refusing canvasses and the majority can elect a reachable leader. Not the
//!   heartbeat timeout: with one follower of three stopped, the leader's majority is the other alone, and
//!   a host that starves that follower (or the leader) for about the heartbeat timeout would depose a
//!   leader no follower could yet have replaced (the node simulator reproduced it: issue 26's anomaly 1);
//!   no member can have elected another before the shortest election timeout anyway.

use super::machine::{ConsensusCore, Leadership, Peer, Phase};
use super::message::Message;
use super::output::{Destination, Output};
use super::quorum::majority_position;
use super::MemberId;

impl ConsensusCore {
    /// Leads the current term: announces it, and asks for the term-start marker.
    pub(super) fn become_leader(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        self.counters.leaderships += 1;
        self.forget_configurations_past_end();
        let peers: Vec<Peer> = self
            .followers()
            .into_iter()
            .map(|id| Peer { id, matched_position: 0, heard: false, last_heard_ns: now_ns })
            .collect();
        let leadership = Leadership {
            term_base: self.append_position,
            previous_term_id: self.history.last_term_id(),
            next_heartbeat_ns: now_ns.saturating_add(self.config.timers.heartbeat_interval_ns),
            positions: Vec::with_capacity(peers.len() + 1),
            peers,
            transfer: None,
        };
        let announcement = self.announcement(&leadership);
        self.phase = Phase::Leader(leadership);
        self.announce(out);
        out.push(Output::AppendTermStart { leadership_term_id: self.term, position: self.append_position });
        self.send(Destination::Others, announcement, out);
    }

    /// The term's announcement: the leader's last term before this one ends at this term's base.
    fn announcement(&self, leadership: &Leadership) -> Message {
        Message::NewLeadershipTerm {
            leadership_term_id: self.term,
            log_leadership_term_id: leadership.previous_term_id,
            next_leadership_term_id: self.term,
            next_term_base_position: leadership.term_base,
            commit_position: self.commit_position,
        }
    }

    pub(super) fn tick_leader(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        let Phase::Leader(leadership) = &self.phase else { return };
        if now_ns >= leadership.next_heartbeat_ns {
            self.send_heartbeats(now_ns, out);
        }
        if !self.majority_heard(now_ns) {
            self.step_down(now_ns, out);
            return;
        }
        self.send_timeout_now_if_due(now_ns, out);
    }

    /// The commit position to everyone, and the term's announcement again to members not yet heard.
    fn send_heartbeats(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        let commit = Message::CommitPosition { leadership_term_id: self.term, log_position: self.commit_position };
        self.send(Destination::Others, commit, out);
        let Phase::Leader(leadership) = &self.phase else { return };
        let announcement = self.announcement(leadership);
        for peer in leadership.peers.iter().filter(|peer| !peer.heard) {
            out.push(Output::Send { to: Destination::Member(peer.id), message: announcement });
        }
        if let Phase::Leader(leadership) = &mut self.phase {
            leadership.next_heartbeat_ns = now_ns.saturating_add(self.config.timers.heartbeat_interval_ns);
        }
    }

    /// Whether a majority, this member included, was heard from within the shortest election timeout.
    fn majority_heard(&self, now_ns: u64) -> bool {
        let Phase::Leader(leadership) = &self.phase else { return false };
        let timeout = self.config.timers.election_timeout_min_ns;
        let current = self.membership.at(self.append_position);
        let live = leadership
            .peers
            .iter()
            .filter(|peer| current.is_voter(peer.id) && now_ns.saturating_sub(peer.last_heard_ns) < timeout)
            .count();
        live + usize::from(self.is_voter()) >= current.majority()
    }

    /// Records that `from` answered in this term; the peer, when this member leads.
    fn hear(&mut self, from: MemberId, now_ns: u64) -> Option<&mut Peer> {
        let Phase::Leader(leadership) = &mut self.phase else {
            self.counters.unexpected += 1;
            return None;
        };
        let peer = leadership.peers.iter_mut().find(|peer| peer.id == from)?;
        peer.heard = true;
        peer.last_heard_ns = peer.last_heard_ns.max(now_ns);
        Some(peer)
    }

    /// A follower acknowledges that its log agrees with this leader's up to `position`.
    pub(super) fn on_append_ack(
        &mut self,
        from: MemberId,
        term: i64,
        position: i64,
        commit: i64,
        now_ns: u64,
        out: &mut Vec<Output>,
    ) {
        if !self.observe_term(term, now_ns, out) {
            return;
        }
        let append_position = self.append_position;
        let Some(peer) = self.hear(from, now_ns) else { return };
        if position > append_position || commit > append_position {
            // In this term a follower's log is a prefix of the leader's, and what any member knows committed
            // is in it (Leader Completeness): an ack past it is not ours.
            self.counters.unexpected += 1;
            return;
        }
        let fresh = position >= peer.matched_position;
        if fresh {
            peer.matched_position = position;
        } else {
            self.counters.duplicate += 1;
        }
        self.adopt_commit(commit, now_ns, out);
        if fresh {
            self.update_commit(now_ns, out);
            self.send_timeout_now_if_due(now_ns, out);
        }
    }

    /// A follower's commit position, when it is past this leader's own: committed by a leader of an earlier
    /// term, so taken as it is (a leader counts acknowledgements only for its own term's entries, and one
    /// just elected or restarted knows no commit). It matters for liveness, not safety: a follower's receive
    /// window counts from what it applied, which only the commit moves, so followers that lag in commits
    /// could not take a new leader's log past its old uncommitted tail, and the new term could never commit
    /// (the node simulator's seed 1796377089329489059: a restarted leader of four voters, commit 0, two of
    /// its three followers held back below its term start).
    fn adopt_commit(&mut self, commit: i64, now_ns: u64, out: &mut Vec<Output>) {
        let Phase::Leader(leadership) = &mut self.phase else { return };
        if commit <= self.commit_position {
            return;
        }
        leadership.next_heartbeat_ns = now_ns.saturating_add(self.config.timers.heartbeat_interval_ns);
        self.advance_commit(commit, out);
        let commit = Message::CommitPosition { leadership_term_id: self.term, log_position: self.commit_position };
        self.send(Destination::Others, commit, out);
    }

    /// A follower asks where its last term ends in this leader's log.
    pub(super) fn on_term_query(
        &mut self,
        from: MemberId,
        term: i64,
        log_leadership_term_id: i64,
        now_ns: u64,
        out: &mut Vec<Output>,
    ) {
        if !self.observe_term(term, now_ns, out) || self.hear(from, now_ns).is_none() {
            return;
        }
        let (log_term, end, next_term) = self.history.floor(log_leadership_term_id, self.append_position, self.term);
        let answer = Message::NewLeadershipTerm {
            leadership_term_id: self.term,
            log_leadership_term_id: log_term,
            next_leadership_term_id: next_term,
            next_term_base_position: end,
            commit_position: self.commit_position,
        };
        self.send(Destination::Member(from), answer, out);
    }

    /// Recomputes the commit position from the acknowledged positions; sends it when it moved.
    pub(super) fn update_commit(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        let current = self.membership.at(self.append_position);
        let Phase::Leader(leadership) = &mut self.phase else { return };
        // The voters' positions, this leader's own among them while it is one (capacity kept: no allocation).
        leadership.positions.clear();
        if current.is_voter(self.config.member_id) {
            leadership.positions.push(self.append_position);
        }
        let counted = |peer: &&Peer| current.is_voter(peer.id) || self.config.bugs.count_non_voters();
        let voters = leadership.peers.iter().filter(counted);
        leadership.positions.extend(voters.map(|peer| peer.matched_position));
        let quorum = majority_position(&mut leadership.positions, current.majority()).min(self.append_position);
        if quorum <= leadership.term_base || quorum <= self.commit_position {
            return;
        }
        leadership.next_heartbeat_ns = now_ns.saturating_add(self.config.timers.heartbeat_interval_ns);
        self.advance_commit(quorum, out);
        let commit = Message::CommitPosition { leadership_term_id: self.term, log_position: self.commit_position };
        self.send(Destination::Others, commit, out);
        self.step_down_if_removed(now_ns, out);
    }
}
