//! The consensus agent and the operator: administrative commands from the node directory's ring, or over
//! the network tagged with the operator key ([`crate::node::admin`]), carried out and answered the way
//! they came; a membership change once it commits.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use socket2::SockAddr;

use super::{ConsensusAgent, Current};
use crate::cluster::consensus_core::{MembershipChange, Role};
use crate::node::admin::{self, AdminBody, AdminCommand, AdminFrameError, AdminReplayGuard, AdminRings};
use crate::node::membership::MembershipRequest;

/// Where an administrative command came from, and so where its answer goes.
#[derive(Clone, Debug)]
pub(super) enum AdminReply {
    /// The node directory's answer ring.
    Ring,
    /// An operator over the network: the request's source and send time (echoed in the answer).
    Remote { to: SocketAddr, sent_unix_ms: i64 },
}

/// An operator's membership change appended and not yet committed.
pub(super) struct PendingAdmin {
    reply: AdminReply,
    correlation: u64,
    /// Where its entry ends.
    end: i64,
    /// The configuration it makes, for the answer.
    made: String,
}

/// The operator's commands as the consensus agent takes them: the command rings in the node directory,
/// the membership changes appended and not yet committed, and the requests over the network taken lately.
pub(super) struct Operator {
    /// The operator's command rings in the node directory.
    pub(super) rings: Option<AdminRings>,
    /// The operator's membership changes appended and not yet committed.
    pub(super) pending: Vec<PendingAdmin>,
    /// The operator's requests over the network taken lately (a replay is dropped).
    pub(super) replay: AdminReplayGuard,
}

impl Operator {
    pub(super) fn new(rings: Option<AdminRings>) -> Self {
        Self { rings, pending: Vec::new(), replay: AdminReplayGuard::default() }
    }
}

impl ConsensusAgent {
    /// Takes the operator's next command, if one waits, and answers the changes that committed.
    pub(super) fn poll_admin(&mut self, now_ns: u64) -> usize {
        let mut work = self.answer_committed();
        if let Some((correlation, command)) = self.operator.rings.as_ref().and_then(|rings| rings.take()) {
            work += 1;
            match command {
                Ok(command) => self.administer(AdminReply::Ring, correlation, command, now_ns),
                Err(why) => self.answer_admin(&AdminReply::Ring, correlation, Err(why)),
            }
        }
        work
    }

    /// An administrative request from the network: taken when its tag verifies with the operator key and it
    /// is no replay; a member without an operator key answers that it takes none this way. Anything else is
    /// dropped and counted, unanswered.
    pub(super) fn on_admin_datagram(&mut self, bytes: &[u8], source: Option<SocketAddr>, now_ns: u64) {
        let Some(source) = source else {
            self.counters.admin_refused.increment();
            return;
        };
        let id = self.wiring.config.id;
        let Some(key) = self.wiring.config.admin_key else {
            self.counters.admin_refused.increment();
            if let Ok(frame) = admin::decode(None, bytes) {
                let reply = AdminReply::Remote { to: source, sent_unix_ms: frame.sent_unix_ms };
                let why = format!(
                    "member {id} takes no administrative command over the network: it has no operator key \
                     ([admin] key in its node file); use its node directory on its host"
                );
                // Answered without a key to tag it with: an operator holding none learns why it is refused.
                self.send_admin_answer(&reply, None, frame.correlation, &Err(why));
            }
            return;
        };
        let frame = match admin::decode(Some(&key), bytes) {
            Ok(frame) => frame,
            Err(e) => {
                self.counters.admin_refused.increment();
                if !matches!(e, AdminFrameError::BadTag) {
                    log::warn!("member {id}: an administrative frame from {source} refused: {e}");
                }
                return;
            }
        };
        let AdminBody::Request(line) = frame.body else {
            self.counters.admin_refused.increment();
            return;
        };
        let now_unix_ms = self.clock.epoch_ns() / 1_000_000;
        if !self.operator.replay.admit(frame.correlation, frame.sent_unix_ms, now_unix_ms) {
            self.counters.admin_refused.increment();
            log::warn!("member {id}: an administrative request from {source} dropped: a replay, or sent too long ago");
            return;
        }
        self.counters.admin_taken.increment();
        let reply = AdminReply::Remote { to: source, sent_unix_ms: frame.sent_unix_ms };
        match admin::AdminCommand::parse(&line) {
            Ok(command) => self.administer(reply, frame.correlation, command, now_ns),
            Err(why) => self.answer_admin(&reply, frame.correlation, Err(why)),
        }
    }

    /// Answers `correlation` the way its command came.
    fn answer_admin(&mut self, reply: &AdminReply, correlation: u64, result: Result<String, String>) {
        match reply {
            AdminReply::Ring => {
                if let Some(rings) = &self.operator.rings {
                    rings.answer_with(correlation, result);
                }
            }
            AdminReply::Remote { .. } => {
                let key = self.wiring.config.admin_key;
                self.send_admin_answer(reply, key.as_ref(), correlation, &result)
            }
        }
    }

    fn send_admin_answer(
        &mut self,
        reply: &AdminReply,
        key: Option<&crate::media::auth::AuthKey>,
        correlation: u64,
        result: &Result<String, String>,
    ) {
        let AdminReply::Remote { to, sent_unix_ms } = *reply else { return };
        // Without a key, the answer is tagged with a key every operator can compute: it proves nothing,
        // and it says only that nothing is taken.
        let key = key.copied().unwrap_or(crate::media::auth::AuthKey::new([0; 32]));
        let bytes = admin::encode_answer(&key, correlation, sent_unix_ms, self.wiring.config.id, result);
        let _ = self.endpoint.socket.send(&bytes, Some(&SockAddr::from(to)));
        self.counters.frames_sent.increment();
    }

    fn administer(&mut self, reply: AdminReply, correlation: u64, command: AdminCommand, now_ns: u64) {
        let id = self.wiring.config.id;
        log::info!("member {id}: the operator asks: {command}");
        let change = match command {
            AdminCommand::AddMember(endpoints) => (MembershipChange::AddLearner(endpoints.id), Some(endpoints)),
            AdminCommand::Promote(member) => (MembershipChange::Promote(member), None),
            AdminCommand::RemoveMember(member) => (MembershipChange::Remove(member), None),
            AdminCommand::TransferLeadership(to) => {
                let answer = match self.core.role() {
                    Role::Leader => {
                        self.links.transfer.request(to);
                        Ok(format!(
                            "member {id} hands its leadership to {}",
                            to.map_or("the follower furthest along".into(), |t| format!("member {t}"))
                        ))
                    }
                    _ => Err(self.not_leader()),
                };
                return self.answer_admin(&reply, correlation, answer);
            }
            AdminCommand::Snapshot => {
                self.links.reader.snapshot_requested.store(true, Ordering::Release);
                let what = format!("member {id} takes a snapshot at its application's next poll");
                return self.answer_admin(&reply, correlation, Ok(what));
            }
            AdminCommand::Suspend | AdminCommand::Resume => {
                let suspend = command == AdminCommand::Suspend;
                self.links.offers.suspended.store(suspend, Ordering::Release);
                let what = if suspend { "takes no client entries" } else { "takes client entries again" };
                return self.answer_admin(&reply, correlation, Ok(format!("member {id} {what}")));
            }
            AdminCommand::Status => return self.answer_admin(&reply, correlation, Ok(self.status())),
        };
        let request = MembershipRequest { ticket: 0, change: change.0, endpoints: change.1 };
        match self.propose(&request, now_ns) {
            Ok((membership, end)) => {
                let made = format!(
                    "configuration {}: voters {:?}, learners {:?}",
                    membership.id, membership.voters, membership.learners
                );
                self.operator.pending.push(PendingAdmin { reply, correlation, end, made });
            }
            Err(why) => {
                let why = format!("member {id}: {} not made: {why}", change.0);
                self.answer_admin(&reply, correlation, Err(why))
            }
        }
    }

    /// Answers the operator's changes whose entries committed, and those whose leader stopped leading.
    fn answer_committed(&mut self) -> usize {
        if self.operator.pending.is_empty() {
            return 0;
        }
        let commit = self.core.commit_position();
        let leading = matches!(self.current, Current::Leading(_));
        let pending = std::mem::take(&mut self.operator.pending);
        let before = pending.len();
        for p in pending {
            if commit >= p.end {
                self.answer_admin(&p.reply, p.correlation, Ok(format!("{} committed", p.made)));
            } else if !leading {
                let why = format!("this member stopped leading before {} committed: it may still commit", p.made);
                self.answer_admin(&p.reply, p.correlation, Err(why));
            } else {
                self.operator.pending.push(p);
            }
        }
        before - self.operator.pending.len()
    }

    /// The member's view, as `status` answers it: `key=value` words a tool reads.
    fn status(&self) -> String {
        let membership = self.core.membership();
        format!(
            "member={} role={} term={} leader={} append={} commit={} applied={} snapshot={} configuration={} \
             voters={:?} learners={:?}",
            self.wiring.config.id,
            self.core.role(),
            self.core.leadership_term_id(),
            self.core.leader_member_id().map_or(-1, i64::from),
            self.core.append_position(),
            self.core.commit_position(),
            self.counters.applied.get(),
            self.counters.snapshot.get(),
            membership.id,
            membership.voters,
            membership.learners
        )
        .replace(", ", ",")
    }

    fn not_leader(&self) -> String {
        match self.core.leader_member_id() {
            Some(leader) => format!("member {} does not lead: ask member {leader}, the leader", self.wiring.config.id),
            None => format!("member {} does not lead, and knows no leader yet", self.wiring.config.id),
        }
    }
}
