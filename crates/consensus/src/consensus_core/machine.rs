//! The state machine: a member's consensus state, its inputs, and the transitions every role shares
//! (adopting a newer term, following a leader, announcing the role). The role-specific rules live in
//! `election.rs`, `leadership.rs` and `following.rs`.

use super::config::{CoreConfig, CoreConfigError};
use super::counters::CoreCounters;
use super::durable::DurableState;
use super::membership::{Membership, MembershipLog};
use super::message::Message;
use super::output::{CoreError, Destination, Output};
use super::prng::SplitMix64;
use super::quorum::AckRule;
use super::role::Role;
use super::term_history::{LeaderTerm, TermBase, TermHistory};
use super::transfer::Transfer;
use super::MemberId;

/// The grants collected in a canvass or an election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Ballot {
    /// The term the canvass or election is for.
    pub(super) term: i64,
    /// Members that granted, this one included; no duplicates.
    pub(super) granted: Vec<MemberId>,
    /// When the request is next sent again to the members that have not granted.
    pub(super) next_request_ns: u64,
}

impl Ballot {
    pub(super) fn new(term: i64, own_id: MemberId, next_request_ns: u64) -> Self {
        Self { term, granted: vec![own_id], next_request_ns }
    }

    /// Records a grant; false when `member` had already granted.
    pub(super) fn grant(&mut self, member: MemberId) -> bool {
        let new = !self.granted.contains(&member);
        if new {
            self.granted.push(member);
        }
        new
    }

    /// Counts `member`'s reply for `candidate_term_id`: a grant for this ballot's term once, a reply for
    /// another term as stale, a second grant as a duplicate.
    pub(super) fn tally(
        &mut self,
        member: MemberId,
        candidate_term_id: i64,
        granted: bool,
        counters: &mut CoreCounters,
    ) {
        if self.term != candidate_term_id {
            counters.stale_term += 1;
        } else if granted && !self.grant(member) {
            counters.duplicate += 1;
        }
    }
}

/// A follower's view of its leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Following {
    /// The leader of the current term, once heard from.
    pub(super) leader: Option<MemberId>,
    /// When the leader was last heard from.
    pub(super) last_contact_ns: u64,
    /// Whether the local log is known to agree with the leader's up to the append position.
    pub(super) matched: bool,
    /// The highest commit position heard from the leader.
    pub(super) leader_commit: i64,
    /// When the append position is next due to the leader even if it has not moved.
    pub(super) next_ack_ns: u64,
}

impl Following {
    pub(super) fn new(leader: Option<MemberId>, now_ns: u64) -> Self {
        Self { leader, last_contact_ns: now_ns, matched: false, leader_commit: 0, next_ack_ns: now_ns }
    }
}

/// What the leader knows of one other member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Peer {
    pub(super) id: MemberId,
    /// Highest position it acknowledged in this term: its log agrees with the leader's up to there.
    pub(super) matched_position: i64,
    /// Whether it has answered in this term (until it does, the term is announced to it again).
    pub(super) heard: bool,
    /// When it last answered (the start of the term until it does).
    pub(super) last_heard_ns: u64,
}

/// The leader's state for its term.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Leadership {
    /// Where the term starts: the leader's append position when it won.
    pub(super) term_base: i64,
    /// The term of the leader's last byte before the term started.
    pub(super) previous_term_id: i64,
    /// When the commit position is next due as a heartbeat.
    pub(super) next_heartbeat_ns: u64,
    /// Every other member.
    pub(super) peers: Vec<Peer>,
    /// Scratch for the quorum computation, one per peer.
    pub(super) positions: Vec<i64>,
    /// A leadership transfer in progress.
    pub(super) transfer: Option<Transfer>,
}

/// The role-specific state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Follower(Following),
    Canvass(Ballot),
    Candidate(Ballot),
    Leader(Leadership),
}

/// A member's consensus state machine; see the [module docs](super).
///
/// Invariants (each kept by the method that could break it):
/// - `leadership_term_id` never decreases, and every change of it or of the vote is pushed as an
///   [`Output::Persist`] before anything that depends on it;
/// - at most one vote per term (`voted_for` is only set when `None`, and reset only by a newer term);
/// - the commit position never decreases and never passes the append position;
/// - the log is never truncated below the commit position.
#[derive(Clone, Debug)]
pub struct ConsensusCore {
    pub(super) config: CoreConfig,
    pub(super) membership_hash: u64,
    /// The configurations in the local log; the latest is in effect.
    pub(super) membership: MembershipLog,
    pub(super) rng: SplitMix64,
    pub(super) term: i64,
    pub(super) voted_for: Option<MemberId>,
    pub(super) history: TermHistory,
    pub(super) append_position: i64,
    pub(super) commit_position: i64,
    pub(super) phase: Phase,
    pub(super) election_deadline_ns: u64,
    /// The role, term and leader last pushed as [`Output::RoleChange`].
    announced: (Role, i64, Option<MemberId>),
    pub(super) counters: CoreCounters,
    /// Why this member last stopped leading, until taken ([`take_step_down`](Self::take_step_down)).
    step_down: Option<StepDown>,
    /// What this member must hold again before it votes by the ordinary rules ([`super::repair`]).
    pub(super) repair: Option<super::repair::Repair>,
}

/// Why a leader stopped leading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepDown {
    /// No majority (itself included) was heard from within the shortest election timeout: each other member and
    /// how long ago it was last heard from, ns (`None`: never in this term).
    NoMajority {
        /// The other members, and the time since each was last heard from.
        heard: Vec<(MemberId, Option<u64>)>,
    },
    /// A message of a newer term arrived.
    NewerTerm {
        /// The newer term.
        leadership_term_id: i64,
    },
    /// A configuration without this member as a voter committed.
    Removed {
        /// The configuration.
        membership_id: u64,
    },
}

impl std::fmt::Display for StepDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoMajority { heard } => {
                write!(f, "no majority heard from within the shortest election timeout (")?;
                for (i, (member, ago)) in heard.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    match ago {
                        Some(ns) => write!(f, "{sep}member {member} last heard {} ms ago", ns / 1_000_000)?,
                        None => write!(f, "{sep}member {member} not heard in this term")?,
                    }
                }
                write!(f, ")")
            }
            Self::NewerTerm { leadership_term_id } => {
                write!(f, "a member spoke in the newer term {leadership_term_id}")
            }
            Self::Removed { membership_id } => {
                write!(f, "configuration {membership_id}, which this member does not vote in, committed")
            }
        }
    }
}

impl ConsensusCore {
    /// A core starting from `durable` (a new member: [`DurableState::default`]) at `now_ns`, as a
    /// follower that knows no leader (no [`Output::RoleChange`] is pushed for that). Refuses an invalid
    /// configuration or state, naming the key.
    pub fn new(config: CoreConfig, durable: DurableState, now_ns: u64) -> Result<Self, CoreConfigError> {
        config.validate()?;
        durable.validate()?;
        let voted_for = if config.bugs.forget_vote_on_restart() { None } else { durable.voted_for };
        let mut membership = MembershipLog::new(Membership::initial(&config.members));
        for (i, (end, entry)) in durable.memberships.iter().enumerate() {
            if i == 0 && entry.id > membership.latest().id + 1 {
                // The entries before it went with the log below it (compacted, so committed): it is the base.
                membership.reset(entry.clone());
                continue;
            }
            membership.push(*end, entry.clone()).map_err(|e| CoreConfigError::new("durable.memberships", e))?;
        }
        membership.compact(durable.commit_position);
        let mut core = Self {
            membership_hash: config.membership_hash(),
            membership,
            rng: SplitMix64::new(config.seed),
            config,
            term: durable.leadership_term_id,
            voted_for,
            history: durable.term_history,
            append_position: durable.append_position,
            commit_position: durable.commit_position,
            phase: Phase::Follower(Following::new(None, now_ns)),
            election_deadline_ns: 0,
            announced: (Role::Follower, durable.leadership_term_id, None),
            counters: CoreCounters::default(),
            step_down: None,
            repair: None,
        };
        core.reset_election_timer(now_ns);
        Ok(core)
    }

    // -----------------------------------------------------------------------------------------------
    // Inputs
    // -----------------------------------------------------------------------------------------------

    /// Handles `message` from member `from`. Messages claiming to be this member's own, malformed, stale,
    /// duplicated or out of place are counted in [`counters`](Self::counters) and dropped.
    ///
    /// A member of no configuration this member knows is heard (the driver vouches for who sends, by
    /// address and key): a member whose log stops at a configuration that removed the leader, or before
    /// the one that added it, must still follow that leader to learn the configurations after (Raft's
    /// rule: a server accepts AppendEntries from a leader outside its latest configuration). What such a
    /// member says counts for nothing it does not vote in: votes and acknowledgements count only from the
    /// voters of the configuration in effect.
    pub fn on_message(&mut self, from: MemberId, message: Message, now_ns: u64, out: &mut Vec<Output>) {
        if from == self.config.member_id {
            self.counters.non_member += 1;
            return;
        }
        if !message.is_well_formed() {
            self.counters.malformed += 1;
            return;
        }
        match message {
            Message::Canvass { candidate_term_id, log_leadership_term_id, log_position, membership_hash } => {
                let log = (log_leadership_term_id, log_position);
                self.on_canvass(from, candidate_term_id, log, membership_hash, now_ns, out)
            }
            Message::CanvassReply { leadership_term_id, candidate_term_id, granted } => {
                self.on_canvass_reply(from, leadership_term_id, candidate_term_id, granted, now_ns, out)
            }
            Message::RequestVote { candidate_term_id, log_leadership_term_id, log_position, membership_hash } => {
                let log = (log_leadership_term_id, log_position);
                self.on_request_vote(from, candidate_term_id, log, membership_hash, now_ns, out)
            }
            Message::Vote { leadership_term_id, candidate_term_id, granted } => {
                self.on_vote(from, leadership_term_id, candidate_term_id, granted, now_ns, out)
            }
            Message::NewLeadershipTerm {
                leadership_term_id,
                log_leadership_term_id,
                next_leadership_term_id,
                next_term_base_position,
                commit_position,
            } => {
                let said = LeaderTerm {
                    log_term: log_leadership_term_id,
                    next_term: next_leadership_term_id,
                    next_base: next_term_base_position,
                };
                self.on_new_leadership_term(from, leadership_term_id, said, commit_position, now_ns, out)
            }
            Message::TermQuery { leadership_term_id, log_leadership_term_id, .. } => {
                self.on_term_query(from, leadership_term_id, log_leadership_term_id, now_ns, out)
            }
            Message::AppendPosition { leadership_term_id, log_position, commit_position } => {
                self.on_append_ack(from, leadership_term_id, log_position, commit_position, now_ns, out)
            }
            Message::CommitPosition { leadership_term_id, log_position } => {
                self.on_commit_position(from, leadership_term_id, log_position, now_ns, out)
            }
            Message::TimeoutNow { leadership_term_id, log_position } => {
                self.on_timeout_now(from, leadership_term_id, log_position, now_ns, out)
            }
        }
    }

    /// Advances the timers to `now_ns`: heartbeats, acknowledgements, election timeouts, and the
    /// leader's check that a majority still answers. Call it at least every heartbeat interval.
    pub fn tick(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        match &self.phase {
            Phase::Leader(_) => self.tick_leader(now_ns, out),
            Phase::Follower(_) | Phase::Canvass(_) | Phase::Candidate(_) if now_ns >= self.election_deadline_ns => {
                if self.may_stand() {
                    self.start_canvass(now_ns, out)
                } else {
                    self.stand_aside(now_ns, out)
                }
            }
            Phase::Follower(_) => self.tick_follower(now_ns, out),
            Phase::Canvass(_) | Phase::Candidate(_) => self.repeat_request(now_ns, out),
        }
    }

    /// Canvasses now instead of at the election timeout, when this member follows no known leader: how a
    /// preferred first leader (Aeron's appointed leader) shortens the first election. The canvass is
    /// refused by members that hear a live leader, so a campaign cannot depose one; otherwise it is an
    /// election timeout that came early.
    pub fn campaign(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        if self.may_stand() && matches!(&self.phase, Phase::Follower(following) if following.leader.is_none()) {
            self.start_canvass(now_ns, out);
        }
    }

    /// The local log now ends at `position`, and the bytes since the previous append position are of
    /// `leadership_term_id` (report each term's bytes separately). Appends come from the driver; a
    /// position behind the known one, or a term older than the log's last, is refused as an
    /// [`Output::Error`].
    pub fn on_append_position(&mut self, leadership_term_id: i64, position: i64, now_ns: u64, out: &mut Vec<Output>) {
        if position < self.append_position {
            let append_position = self.append_position;
            out.push(Output::Error(CoreError::AppendPositionWentBack { append_position, position }));
            return;
        }
        let last_term_id = self.history.last_term_id();
        if leadership_term_id < last_term_id.max(1) {
            out.push(Output::Error(CoreError::AppendTermWentBack { last_term_id, leadership_term_id }));
            return;
        }
        if position == self.append_position {
            return;
        }
        self.history.append(leadership_term_id, self.append_position);
        let before = self.append_position;
        self.append_position = position;
        self.end_repair_if_done();
        self.on_append_moved(before, now_ns, out);
        match self.phase {
            Phase::Leader(_) => {
                self.update_commit(now_ns, out);
                self.send_timeout_now_if_due(now_ns, out);
            }
            Phase::Follower(_) => self.on_follower_append(now_ns, out),
            Phase::Canvass(_) | Phase::Candidate(_) => {}
        }
    }

    /// A follower installed its leader's snapshot at `position`, past its own log's end: its log now holds
    /// up to `position`, all of it committed, and its terms below `position` are the leader's, `history`
    /// (oldest first; the last is the term at `position`). Without this the bytes between the old end and
    /// `position` would count as the member's last term, and a leader it became would answer a
    /// follower's question about its terms wrongly. Refused (an [`Output::Error`]) below the log's end, or
    /// with a history that is not one.
    pub fn on_snapshot_installed(&mut self, position: i64, history: &[TermBase], out: &mut Vec<Output>) {
        let Some(installed) = TermHistory::from_terms(history.to_vec(), position.saturating_add(1)) else {
            out.push(Output::Error(CoreError::SnapshotHistory { position }));
            return;
        };
        if position < self.append_position {
            let append_position = self.append_position;
            out.push(Output::Error(CoreError::AppendPositionWentBack { append_position, position }));
            return;
        }
        self.history = installed;
        // Configurations the old log held past its commit position may not be the leader's: only the
        // committed ones stay, until the driver gives the snapshot's (`on_snapshot_membership`).
        let before = self.membership().id;
        self.membership.truncate(self.commit_position);
        self.append_position = position;
        self.end_repair_if_done();
        let membership_id = self.membership().id;
        if membership_id != before {
            // A follower's: no canvass to stop, no peer to drop.
            out.push(Output::MembershipChanged { membership_id });
        }
        self.advance_commit(position, out);
    }

    // -----------------------------------------------------------------------------------------------
    // State
    // -----------------------------------------------------------------------------------------------

    /// Why this member last stopped leading, once (the driver logs it with the role change).
    pub fn take_step_down(&mut self) -> Option<StepDown> {
        self.step_down.take()
    }

    /// This member's id.
    pub fn member_id(&self) -> MemberId {
        self.config.member_id
    }

    /// The current role.
    pub fn role(&self) -> Role {
        match self.phase {
            Phase::Follower(_) => Role::Follower,
            Phase::Canvass(_) => Role::Canvass,
            Phase::Candidate(_) => Role::Candidate,
            Phase::Leader(_) => Role::Leader,
        }
    }

    /// The current leadership term.
    pub fn leadership_term_id(&self) -> i64 {
        self.term
    }

    /// The leader of the current term, when known.
    pub fn leader_member_id(&self) -> Option<MemberId> {
        match &self.phase {
            Phase::Leader(_) => Some(self.config.member_id),
            Phase::Follower(following) => following.leader,
            Phase::Canvass(_) | Phase::Candidate(_) => None,
        }
    }

    /// The vote cast in the current term.
    pub fn voted_for(&self) -> Option<MemberId> {
        self.voted_for
    }

    /// The local log's end.
    pub fn append_position(&self) -> i64 {
        self.append_position
    }

    /// The commit position.
    pub fn commit_position(&self) -> i64 {
        self.commit_position
    }

    /// While leading: the position `member` acknowledged in this term (its log agrees with the leader's
    /// up to there), 0 until it does; this member's own append position for itself. `None` when not
    /// leading or not a member.
    pub fn acknowledged_position(&self, member: MemberId) -> Option<i64> {
        let Phase::Leader(leadership) = &self.phase else { return None };
        if member == self.config.member_id {
            return Some(self.append_position);
        }
        leadership.peers.iter().find(|peer| peer.id == member).map(|peer| peer.matched_position)
    }

    /// The other members, in the order a leader's publication sends to them (its destinations) and counts
    /// their acknowledgements.
    pub fn followers(&self) -> Vec<MemberId> {
        let me = self.config.member_id;
        self.membership().members().filter(|&id| id != me).collect()
    }

    /// The configuration in effect: the latest in the local log as far as the core knows the log (its
    /// append position), committed or not.
    pub fn membership(&self) -> &Membership {
        self.membership.at(self.append_position)
    }

    /// The configurations in the local log (after the initial one), with where each entry ends: what a
    /// restart gives back in [`DurableState::memberships`].
    pub fn membership_log(&self) -> &MembershipLog {
        &self.membership
    }

    /// Whether this member votes in the configuration in effect.
    pub fn is_voter(&self) -> bool {
        self.membership().is_voter(self.config.member_id)
    }

    /// Whether this member may canvass and stand: it is not repairing its log ([`super::repair`]), and it
    /// votes in the configuration in effect, or that configuration is not committed yet and it voted in
    /// the one before (a member being removed may hold the only log a majority can elect: it stands,
    /// counting the new configuration's votes, leads the change through and steps down, as a removed
    /// leader does).
    pub fn may_stand(&self) -> bool {
        let me = self.config.member_id;
        if self.repair.is_some() {
            return false;
        }
        self.is_voter()
            || self
                .membership
                .previous_at(self.append_position)
                .is_some_and(|(previous, end)| end > self.commit_position && previous.is_voter(me))
    }

    /// Which acknowledgements count for this member's log of `session_id` while it leads (see [`AckRule`]).
    pub fn ack_rule(&self, session_id: i32) -> AckRule {
        AckRule::new(session_id, self.followers())
    }

    /// The local log's terms.
    pub fn term_history(&self) -> &TermHistory {
        &self.history
    }

    /// What was dropped, and the elections taken part in.
    pub fn counters(&self) -> &CoreCounters {
        &self.counters
    }

    /// The configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    // -----------------------------------------------------------------------------------------------
    // Shared transitions
    // -----------------------------------------------------------------------------------------------

    /// Checks the term of a message that carries its sender's term: a newer term is adopted (as a
    /// follower that knows no leader yet); false for an older one, which is counted and dropped.
    pub(super) fn observe_term(&mut self, term: i64, now_ns: u64, out: &mut Vec<Output>) -> bool {
        if term < self.term {
            self.counters.stale_term += 1;
            return false;
        }
        if term > self.term {
            self.adopt_term(term, now_ns, out);
        }
        true
    }

    /// Moves to the newer `term` as a follower with no vote and no leader, persisting the term.
    pub(super) fn adopt_term(&mut self, term: i64, now_ns: u64, out: &mut Vec<Output>) {
        debug_assert!(term > self.term, "terms only grow");
        if matches!(self.phase, Phase::Leader(_)) {
            self.counters.step_downs += 1;
            self.step_down = Some(StepDown::NewerTerm { leadership_term_id: term });
        }
        self.term = term;
        self.voted_for = None;
        self.persist(out);
        self.phase = Phase::Follower(Following::new(None, now_ns));
        self.reset_election_timer(now_ns);
        self.announce(out);
    }

    /// Takes `leader` as the leader of the current term (the term was checked). False, counted as
    /// unexpected, when this member leads the term or follows another leader in it.
    pub(super) fn follow(&mut self, leader: MemberId, now_ns: u64, out: &mut Vec<Output>) -> bool {
        match &mut self.phase {
            Phase::Leader(_) => {
                self.counters.unexpected += 1;
                return false;
            }
            Phase::Follower(following) if following.leader == Some(leader) => following.last_contact_ns = now_ns,
            Phase::Follower(Following { leader: Some(_), .. }) => {
                self.counters.unexpected += 1;
                return false;
            }
            Phase::Follower(_) | Phase::Canvass(_) | Phase::Candidate(_) => {
                self.phase = Phase::Follower(Following::new(Some(leader), now_ns));
            }
        }
        self.reset_election_timer(now_ns);
        self.announce(out);
        true
    }

    /// Records why this member stopped leading, in place of what [`step_down`](Self::step_down) recorded.
    pub(super) fn replace_step_down(&mut self, reason: StepDown) {
        self.step_down = Some(reason);
    }

    /// Becomes a follower of the current term that knows no leader (a leader that lost its majority).
    pub(super) fn step_down(&mut self, now_ns: u64, out: &mut Vec<Output>) {
        self.counters.step_downs += 1;
        if let Phase::Leader(leadership) = &self.phase {
            let heard = leadership
                .peers
                .iter()
                .map(|p| (p.id, p.heard.then(|| now_ns.saturating_sub(p.last_heard_ns))))
                .collect();
            self.step_down = Some(StepDown::NoMajority { heard });
        }
        self.phase = Phase::Follower(Following::new(None, now_ns));
        self.reset_election_timer(now_ns);
        self.announce(out);
    }

    /// Pushes the term and vote to be persisted.
    pub(super) fn persist(&self, out: &mut Vec<Output>) {
        out.push(Output::Persist { leadership_term_id: self.term, voted_for: self.voted_for });
    }

    /// Pushes a [`Output::RoleChange`] when the role, term or leader differ from the last one pushed.
    pub(super) fn announce(&mut self, out: &mut Vec<Output>) {
        let now = (self.role(), self.term, self.leader_member_id());
        if now != self.announced {
            self.announced = now;
            out.push(Output::RoleChange { role: now.0, leadership_term_id: now.1, leader_member_id: now.2 });
        }
    }

    /// Draws the next randomized election timeout from now.
    pub(super) fn reset_election_timer(&mut self, now_ns: u64) {
        let timers = &self.config.timers;
        let timeout = self.rng.between(timers.election_timeout_min_ns, timers.election_timeout_max_ns);
        self.election_deadline_ns = now_ns.saturating_add(timeout);
    }

    /// Cuts the log back to `position`, unless that would drop committed log (then an error output,
    /// and false). A position at or past the end changes nothing.
    pub(super) fn truncate(&mut self, position: i64, out: &mut Vec<Output>) -> bool {
        if position < self.commit_position {
            let commit_position = self.commit_position;
            out.push(Output::Error(CoreError::TruncateBelowCommit { position, commit_position }));
            return false;
        }
        if position < self.append_position {
            let before = self.membership().id;
            self.history.truncate(position);
            self.append_position = position;
            self.counters.truncations += 1;
            // A leader's log disagrees with this one at `position`, and so with the log it held before a
            // loss it repairs: nothing of that log past here was committed (`repair`'s module docs).
            self.repair = None;
            out.push(Output::Truncate { position });
            self.membership.truncate(position);
            let membership_id = self.membership.at(position).id;
            if membership_id != before {
                // Only a follower truncates, so there is no canvass to stop and no peer to drop.
                out.push(Output::MembershipChanged { membership_id });
            }
        }
        true
    }

    /// Raises the commit position to `position`, never lowering it nor passing the append position.
    pub(super) fn advance_commit(&mut self, position: i64, out: &mut Vec<Output>) {
        let position = position.min(self.append_position);
        if position > self.commit_position {
            self.commit_position = position;
            self.membership.compact(position);
            out.push(Output::Commit { position });
        }
    }

    /// Sends `message` to `to`.
    pub(super) fn send(&self, to: Destination, message: Message, out: &mut Vec<Output>) {
        out.push(Output::Send { to, message });
    }

    /// The log's (last term, append position), what elections compare.
    pub(super) fn log_tip(&self) -> (i64, i64) {
        (self.history.last_term_id(), self.append_position)
    }
}
