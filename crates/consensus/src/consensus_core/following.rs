//! The follower's side: joining the leader's term, finding where the local log and the leader's agree,
//! truncating the rest, acknowledging, and learning the commit position.
//!
//! Rules:
//! - a follower acts on its leader's messages only in the leader's term, and trusts its log only once it
//!   is matched: its log is known to agree with the leader's up to its append position;
//! - matching compares term histories. The leader says "in my log, term `L` is followed by term `N`,
//!   which starts at `E`" (so it holds no term between them). With `F` the term of the follower's last
//!   byte: `F` = the current term means the bytes came from this leader, so they agree; `F = L` means
//!   they agree up to `min(append, E)`; `L < F < N` means the leader holds no byte of `F`, so the
//!   follower truncates `F` away and looks again; otherwise it asks about `F` ([`Message::TermQuery`]).
//!   Each step drops a term, so matching ends;
//! - a truncation below the commit position is refused (an error output), and the follower stays
//!   unmatched: committed bytes are in every later leader's log, so a correct leader never asks for it;
//! - once matched, the follower acknowledges its append position when it moves and at least every
//!   heartbeat interval, and commits `min(leader's commit, append position)`.

use super::machine::{ConsensusCore, Phase};
use super::message::Message;
use super::output::{Destination, Output};
use super::quorum::follower_commit;
use super::term_history::LeaderTerm;
use super::MemberId;

/// The outcome of comparing the local log with the leader's.
enum Agreement {
    /// The logs agree up to this position.
    UpTo(i64),
    /// The leader must be asked about the local log's last term.
    Ask,
    /// A needed truncation was refused.
    Refused,
}

impl ConsensusCore {
    /// The leader of `leadership_term_id` announces it, or answers a term query, saying `said` of its log.
    pub(super) fn on_new_leadership_term(
        &mut self,
        from: MemberId,
        leadership_term_id: i64,
        said: LeaderTerm,
        commit_position: i64,
        now_ns: u64,
        out: &mut Vec<Output>,
    ) {
        self.answer_older_leader(from, leadership_term_id, out);
        if !self.observe_term(leadership_term_id, now_ns, out) || !self.follow(from, now_ns, out) {
            return;
        }
        if self.is_matched() {
            self.counters.duplicate += 1;
            self.send_ack(now_ns, out);
            return;
        }
        match self.agreement(said, out) {
            Agreement::UpTo(position) => self.matched(from, position, commit_position, now_ns, out),
            Agreement::Ask => self.send_term_query(from, out),
            Agreement::Refused => {}
        }
    }

    pub(super) fn on_commit_position(
        &mut self,
        from: MemberId,
        term: i64,
        position: i64,
        now_ns: u64,
        out: &mut Vec<Output>,
    ) {
        self.answer_older_leader(from, term, out);
        if !self.observe_term(term, now_ns, out) || !self.follow(from, now_ns, out) {
            return;
        }
        if self.is_matched() {
            self.learn_commit(position, out);
        } else {
            self.send_term_query(from, out);
        }
    }

    /// The local log grew while following.
    pub(super) fn on_follower_append(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        if self.is_matched() {
            self.send_ack(now_ns, out);
            self.learn_commit(0, out);
        }
    }

    /// A matched follower's acknowledgement falls due every heartbeat interval.
    pub(super) fn tick_follower(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        if let Phase::Follower(following) = &self.phase {
            if following.matched && now_ns >= following.next_ack_ns {
                self.send_ack(now_ns, out);
            }
        }
    }

    /// Compares the local log with what the leader said of its own, truncating what the leader cannot
    /// hold. See the module docs for the rules.
    fn agreement(&mut self, said: LeaderTerm, out: &mut Vec<Output>) -> Agreement {
        loop {
            let last = self.history.last_term_id();
            if last == self.term {
                return Agreement::UpTo(self.append_position);
            }
            if last == said.log_term {
                return Agreement::UpTo(self.append_position.min(said.next_base));
            }
            if last <= said.log_term || last >= said.next_term {
                return Agreement::Ask;
            }
            let base = self.history.base_of(last).unwrap_or(0);
            if !self.truncate(base, out) {
                return Agreement::Refused;
            }
        }
    }

    /// The local log agrees with the leader's up to `position`: cut the rest, and replicate from there.
    fn matched(&mut self, leader: MemberId, position: i64, leader_commit: i64, now_ns: u64, out: &mut Vec<Output>) {
        if !self.truncate(position, out) {
            return;
        }
        if let Phase::Follower(following) = &mut self.phase {
            following.matched = true;
        }
        self.forget_configurations_past_end();
        let replicate = Output::ReplicateFrom {
            leader_member_id: leader,
            leadership_term_id: self.term,
            position: self.append_position,
        };
        out.push(replicate);
        self.send_ack(now_ns, out);
        self.learn_commit(leader_commit, out);
    }

    fn is_matched(&self) -> bool {
        matches!(&self.phase, Phase::Follower(following) if following.matched)
    }

    /// Commits up to what the leader committed, as far as the local log reaches.
    fn learn_commit(&mut self, leader_commit: i64, out: &mut Vec<Output>) {
        let Phase::Follower(following) = &mut self.phase else { return };
        following.leader_commit = following.leader_commit.max(leader_commit);
        let commit = follower_commit(following.leader_commit, self.append_position);
        self.advance_commit(commit, out);
    }

    fn send_ack(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        let Phase::Follower(following) = &mut self.phase else { return };
        let Some(leader) = following.leader else { return };
        following.next_ack_ns = now_ns.saturating_add(self.config.timers.heartbeat_interval_ns);
        let ack = Message::AppendPosition {
            leadership_term_id: self.term,
            log_position: self.append_position,
            commit_position: self.commit_position,
        };
        self.send(Destination::Member(leader), ack, out);
    }

    /// A leader of a term older than this member's is answered with this member's term, which the leader
    /// adopts, stepping down: a member that moved to a newer term none of whose messages reached the
    /// others (a candidate cut off from them) otherwise drops the leader's heartbeats as stale, while its
    /// canvasses are refused by members that hear the leader, and it never rejoins. etcd's raft answers a
    /// stale append the same way under pre-vote. Found by the node simulator: seed 1796437342204275117.
    ///
    /// The answer is a refused canvass, never an acknowledgement: delivered late, to a member that has
    /// since become leader of this member's term, an acknowledgement would count this member's log as
    /// held in that term without the match that makes it so (the membership simulation found that: seeds
    /// 500574 and 501639 committed on a minority); a refusal changes no count.
    fn answer_older_leader(&self, leader: MemberId, leadership_term_id: i64, out: &mut Vec<Output>) {
        if leadership_term_id >= self.term {
            return;
        }
        let answer =
            Message::CanvassReply { leadership_term_id: self.term, candidate_term_id: self.term, granted: false };
        self.send(Destination::Member(leader), answer, out);
    }

    fn send_term_query(&self, leader: MemberId, out: &mut Vec<Output>) {
        let (log_leadership_term_id, log_position) = self.log_tip();
        let query = Message::TermQuery { leadership_term_id: self.term, log_leadership_term_id, log_position };
        self.send(Destination::Member(leader), query, out);
    }
}
