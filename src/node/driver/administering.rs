//! The consensus agent and the operator: administrative commands from the node directory's ring
//! ([`crate::node::admin`]), carried out and answered; a membership change once it commits.

use std::sync::atomic::Ordering;

use super::{ConsensusAgent, Current};
use crate::cluster::consensus_core::{MembershipChange, Role};
use crate::node::admin::{AdminCommand, AdminRings};
use crate::node::membership::MembershipRequest;

/// An operator's membership change appended and not yet committed.
pub(super) struct PendingAdmin {
    correlation: u64,
    /// Where its entry ends.
    end: i64,
    /// The configuration it makes, for the answer.
    made: String,
}

impl ConsensusAgent {
    /// Takes the operator's next command, if one waits, and answers the changes that committed.
    pub(super) fn poll_admin(&mut self, now_ns: u64) -> usize {
        let Some(admin) = self.admin.take() else {
            return 0;
        };
        let mut work = self.answer_committed(&admin);
        if let Some((correlation, command)) = admin.take() {
            work += 1;
            match command {
                Ok(command) => self.administer(&admin, correlation, command, now_ns),
                Err(why) => admin.answer_with(correlation, Err(why)),
            }
        }
        self.admin = Some(admin);
        work
    }

    fn administer(&mut self, admin: &AdminRings, correlation: u64, command: AdminCommand, now_ns: u64) {
        let id = self.wiring.config.id;
        log::info!("member {id}: the operator asks: {command}");
        let change = match command {
            AdminCommand::AddMember(endpoints) => (MembershipChange::AddLearner(endpoints.id), Some(endpoints)),
            AdminCommand::Promote(member) => (MembershipChange::Promote(member), None),
            AdminCommand::RemoveMember(member) => (MembershipChange::Remove(member), None),
            AdminCommand::TransferLeadership(to) => {
                let answer = match self.core.role() {
                    Role::Leader => {
                        self.shared.request_transfer(to);
                        Ok(format!(
                            "member {id} hands its leadership to {}",
                            to.map_or("the follower furthest along".into(), |t| format!("member {t}"))
                        ))
                    }
                    _ => Err(self.not_leader()),
                };
                return admin.answer_with(correlation, answer);
            }
            AdminCommand::Snapshot => {
                self.shared.snapshot_requested.store(true, Ordering::Release);
                let what = format!("member {id} takes a snapshot at its application's next poll");
                return admin.answer_with(correlation, Ok(what));
            }
            AdminCommand::Suspend | AdminCommand::Resume => {
                let suspend = command == AdminCommand::Suspend;
                self.shared.suspended.store(suspend, Ordering::Release);
                let what = if suspend { "takes no client entries" } else { "takes client entries again" };
                return admin.answer_with(correlation, Ok(format!("member {id} {what}")));
            }
        };
        let request = MembershipRequest { ticket: 0, change: change.0, endpoints: change.1 };
        match self.propose(&request, now_ns) {
            Ok((membership, end)) => {
                let made = format!(
                    "configuration {}: voters {:?}, learners {:?}",
                    membership.id, membership.voters, membership.learners
                );
                self.pending_admin.push(PendingAdmin { correlation, end, made });
            }
            Err(why) => admin.answer_with(correlation, Err(format!("member {id}: {} not made: {why}", change.0))),
        }
    }

    /// Answers the operator's changes whose entries committed, and those whose leader stopped leading.
    fn answer_committed(&mut self, admin: &AdminRings) -> usize {
        let commit = self.core.commit_position();
        let leading = matches!(self.current, Current::Leading(_));
        let before = self.pending_admin.len();
        self.pending_admin.retain(|p| {
            if commit >= p.end {
                admin.answer_with(p.correlation, Ok(format!("{} committed", p.made)));
            } else if !leading {
                let why = format!("this member stopped leading before {} committed: it may still commit", p.made);
                admin.answer_with(p.correlation, Err(why));
            } else {
                return true;
            }
            false
        });
        before - self.pending_admin.len()
    }

    fn not_leader(&self) -> String {
        match self.core.leader_member_id() {
            Some(leader) => format!("member {} does not lead: ask member {leader}, the leader", self.wiring.config.id),
            None => format!("member {} does not lead, and knows no leader yet", self.wiring.config.id),
        }
    }
}
