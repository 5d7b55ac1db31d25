//! Canvass (pre-vote) and election: how a member that lost its leader becomes one.
//!
//! Rules (Raft section 5.2 and 5.4, and the pre-vote of Ongaro's thesis, 9.6):
//! - a canvass asks for `term + 1` and changes no term anywhere; it is granted only by a member that
//!   would also vote (the log check below) and that has not heard from a live leader within the
//!   heartbeat timeout, so a member returning from a partition cannot depose a healthy leader;
//! - with a majority of canvass grants, the member moves to the next term, votes for itself, persists
//!   that, and requests votes;
//! - a vote is granted at most once per term, persisted before it is sent, and only to a candidate whose
//!   log is at least as up to date: (last term, position) compared lexicographically;
//! - canvass and vote requests carry the membership hash; a mismatch is refused and counted;
//! - a member repairing its log ([`super::repair`]) neither canvasses nor stands, and grants only to a
//!   candidate at least as up to date as the log it held before its loss.

use super::machine::{Ballot, ConsensusCore, Phase};
use super::message::Message;
use super::output::{Destination, Output};
use super::MemberId;

impl ConsensusCore {
    /// Starts a canvass for the next term (also when a canvass or an election timed out).
    pub(super) fn start_canvass(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        self.counters.canvasses += 1;
        let ballot = Ballot::new(self.term + 1, self.config.member_id, self.next_request_ns(now_ns));
        self.phase = Phase::Canvass(ballot);
        self.reset_election_timer(now_ns);
        self.announce(out);
        self.send(Destination::Others, self.ballot_request(), out);
        self.start_election_if_granted(now_ns, out);
    }

    /// The canvass or vote request of the current ballot.
    fn ballot_request(&self) -> Message {
        let (log_leadership_term_id, log_position) = self.log_tip();
        let membership_hash = self.membership_hash;
        match &self.phase {
            Phase::Canvass(ballot) => Message::Canvass {
                candidate_term_id: ballot.term,
                log_leadership_term_id,
                log_position,
                membership_hash,
            },
            _ => Message::RequestVote {
                candidate_term_id: self.term,
                log_leadership_term_id,
                log_position,
                membership_hash,
            },
        }
    }

    fn next_request_ns(&self, now_ns: u64) -> u64 {
        now_ns.saturating_add(self.config.timers.heartbeat_interval_ns)
    }

    /// Sends the canvass or vote request again, every heartbeat interval, to the members that have not
    /// granted it: requests and replies may be lost, and a lost one should not cost a whole election
    /// timeout.
    pub(super) fn repeat_request(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        let next = self.next_request_ns(now_ns);
        let (Phase::Canvass(ballot) | Phase::Candidate(ballot)) = &mut self.phase else { return };
        if now_ns < ballot.next_request_ns {
            return;
        }
        ballot.next_request_ns = next;
        let voters = &self.membership.at(self.append_position).voters;
        let missing: Vec<MemberId> = voters.iter().copied().filter(|id| !ballot.granted.contains(id)).collect();
        let request = self.ballot_request();
        for member in missing {
            self.send(Destination::Member(member), request, out);
        }
    }

    pub(super) fn on_canvass(
        &mut self,
        from: MemberId,
        candidate_term_id: i64,
        log: (i64, i64),
        membership_hash: u64,
        now_ns: u64,
        out: &mut Vec<Output>,
    ) {
        let granted = if membership_hash != self.membership_hash {
            self.counters.membership_mismatch += 1;
            false
        } else {
            candidate_term_id > self.term && self.is_up_to_date(log) && !self.hears_leader(now_ns)
        };
        let reply = Message::CanvassReply { leadership_term_id: self.term, candidate_term_id, granted };
        self.send(Destination::Member(from), reply, out);
    }

    pub(super) fn on_canvass_reply(
        &mut self,
        from: MemberId,
        term: i64,
        candidate_term_id: i64,
        granted: bool,
        now_ns: u64,
        out: &mut Vec<Output>,
    ) {
        if term > self.term {
            self.adopt_term(term, now_ns, out);
            return;
        }
        let Phase::Canvass(ballot) = &mut self.phase else {
            self.counters.stale_term += 1;
            return;
        };
        ballot.tally(from, candidate_term_id, granted, &mut self.counters);
        self.start_election_if_granted(now_ns, out);
    }

    /// With a majority of canvass grants, stands as candidate in the next term.
    fn start_election_if_granted(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        let Phase::Canvass(ballot) = &self.phase else { return };
        if self.votes_of(&ballot.granted) < self.membership.at(self.append_position).majority() {
            return;
        }
        self.stand(ballot.term, now_ns, out);
    }

    /// Stands as candidate in `term`: votes for itself, persists that, and requests votes.
    pub(super) fn stand(&mut self, term: i64, now_ns: u64, out: &mut Vec<Output>) {
        self.counters.elections += 1;
        self.term = term;
        self.voted_for = Some(self.config.member_id);
        self.persist(out);
        self.phase = Phase::Candidate(Ballot::new(self.term, self.config.member_id, self.next_request_ns(now_ns)));
        self.reset_election_timer(now_ns);
        self.announce(out);
        self.send(Destination::Others, self.ballot_request(), out);
        self.become_leader_if_elected(now_ns, out);
    }

    pub(super) fn on_request_vote(
        &mut self,
        from: MemberId,
        candidate_term_id: i64,
        log: (i64, i64),
        membership_hash: u64,
        now_ns: u64,
        out: &mut Vec<Output>,
    ) {
        if membership_hash != self.membership_hash {
            self.counters.membership_mismatch += 1;
            self.reply_vote(from, candidate_term_id, false, out);
            return;
        }
        if !self.observe_term(candidate_term_id, now_ns, out) {
            self.reply_vote(from, candidate_term_id, false, out);
            return;
        }
        let free = self.voted_for.is_none_or(|voted| voted == from);
        let granted = free && self.is_up_to_date(log);
        if granted {
            if self.voted_for.is_none() {
                self.voted_for = Some(from);
                self.counters.votes_granted += 1;
                self.persist(out);
            }
            self.reset_election_timer(now_ns);
        }
        self.reply_vote(from, candidate_term_id, granted, out);
    }

    fn reply_vote(&self, to: MemberId, candidate_term_id: i64, granted: bool, out: &mut Vec<Output>) {
        let vote = Message::Vote { leadership_term_id: self.term, candidate_term_id, granted };
        self.send(Destination::Member(to), vote, out);
    }

    pub(super) fn on_vote(
        &mut self,
        from: MemberId,
        term: i64,
        candidate_term_id: i64,
        granted: bool,
        now_ns: u64,
        out: &mut Vec<Output>,
    ) {
        if !self.observe_term(term, now_ns, out) {
            return;
        }
        let Phase::Candidate(ballot) = &mut self.phase else {
            self.counters.duplicate += 1;
            return;
        };
        ballot.tally(from, candidate_term_id, granted, &mut self.counters);
        self.become_leader_if_elected(now_ns, out);
    }

    /// With a majority of votes, leads the term.
    fn become_leader_if_elected(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        let Phase::Candidate(ballot) = &self.phase else { return };
        if self.votes_of(&ballot.granted) >= self.membership.at(self.append_position).majority() {
            self.become_leader(now_ns, out);
        }
    }

    /// Whether a log ending at `log` = (last term, position) is at least as up to date as this one (and,
    /// while this member repairs its log, as the one it held before: [`super::repair`]).
    fn is_up_to_date(&self, log: (i64, i64)) -> bool {
        self.config.bugs.skip_up_to_date_check()
            || (log >= self.log_tip() && self.repair.is_none_or(|repair| repair.grants(log)))
    }

    /// Whether this member leads, or heard from its leader within the heartbeat timeout.
    fn hears_leader(&self, now_ns: u64) -> bool {
        match &self.phase {
            Phase::Leader(_) => true,
            Phase::Follower(following) => {
                following.leader.is_some()
                    && now_ns.saturating_sub(following.last_contact_ns) < self.config.timers.heartbeat_timeout_ns
            }
            Phase::Canvass(_) | Phase::Candidate(_) => false,
        }
    }
}
