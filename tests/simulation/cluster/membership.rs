//! Membership changes among the other faults: a leader adds a spare as a learner, promotes a learner,
//! or removes a member (itself included), one change at a time as the core allows; followers hand their
//! cores the configuration entries they receive. The checks: a leader's commit is held by a majority of
//! the voters of the configuration it counted with (a removed member or a learner never counts), and no
//! committed entry is lost, by the majorities of the latest committed configuration or of the one that
//! follows it.

use quorumcast_consensus::consensus_core::{MemberId, MembershipChange, Role};

use super::super::checker::Check;
use super::super::log::Entry;
use super::Simulation;

/// How far behind a learner may be when it is promoted, in bytes.
const PROMOTE_WITHIN: i64 = 2048;
/// The length of a configuration entry.
const ENTRY_LENGTH: i64 = 64;

impl Simulation {
    /// One step in a hundred, a started leader proposes a random change; what the core refuses is dropped.
    pub(super) fn change_membership(&mut self) -> Check {
        if self.changes.below(100) != 0 {
            return Ok(());
        }
        let Some(index) = self.leader_for_change() else { return Ok(()) };
        let Some(core) = self.nodes[index].core.as_ref() else { return Ok(()) };
        let latest =
            core.membership_log().entries().last().map_or_else(|| core.membership().clone(), |(_, m)| m.clone());
        let spares: Vec<MemberId> = (1..=self.nodes.len() as MemberId).filter(|&id| !latest.contains(id)).collect();
        let change = match self.changes.below(3) {
            0 if !spares.is_empty() => {
                MembershipChange::AddLearner(spares[self.changes.below(spares.len() as u64) as usize])
            }
            1 if !latest.learners.is_empty() => {
                MembershipChange::Promote(latest.learners[self.changes.below(latest.learners.len() as u64) as usize])
            }
            _ => {
                let members: Vec<MemberId> = latest.members().collect();
                MembershipChange::Remove(members[self.changes.below(members.len() as u64) as usize])
            }
        };
        let now = self.local_now(index);
        let Ok(next) = core.propose_membership(change, PROMOTE_WITHIN, now) else { return Ok(()) };
        let term = core.leadership_term_id();
        self.trace(format_args!("member {}: {change} (configuration {})", self.nodes[index].id, next.id));
        let id = self.next_entry_id;
        self.next_entry_id += 1;
        self.summary.membership_changes += 1;
        self.configurations.insert(id, next.clone());
        self.nodes[index].log.push(Entry { membership: true, ..Entry::plain(term, id, ENTRY_LENGTH, false) });
        let end = self.nodes[index].log.end();
        self.input(index, |core, _, out| core.on_membership(end, next, out))?;
        self.written(index, term)
    }

    /// A leader that has started its term, drawn by the changes' generator.
    fn leader_for_change(&mut self) -> Option<usize> {
        let leaders = self.started_leaders();
        (!leaders.is_empty()).then(|| leaders[self.changes.below(leaders.len() as u64) as usize])
    }

    /// A follower appended `entry`, ending at `end`: a configuration entry goes to its core.
    pub(super) fn received(&mut self, index: usize, entry: Entry, end: i64) -> Check {
        if !entry.membership {
            return Ok(());
        }
        let membership = self.configurations[&entry.id].clone();
        self.input(index, |core, _, out| core.on_membership(end, membership, out))
    }

    /// Member `index` commits `position`: if it leads, a majority of the voters of its configuration in
    /// effect holds its entries up to there (within what they may count). A learner, a removed member or
    /// a member of no configuration counted toward the commit breaks it.
    pub(super) fn check_counted_voters(&self, index: usize, position: i64) -> Check {
        if !self.config.membership || !self.config.check_durability {
            return Ok(());
        }
        let node = &self.nodes[index];
        let Some(core) = node.core.as_ref().filter(|c| c.role() == Role::Leader) else { return Ok(()) };
        let Some(count) = node.log.count_at(position).filter(|&count| count > 0) else { return Ok(()) };
        if count <= self.checker.committed.len() {
            // Committed before (by a leader of an earlier term and its configuration then): a leader takes
            // a follower's commit past its own as it is, counting no one (`adopt_commit`); the check of
            // what is held (`check_held`) still covers it. Seeds 500574 and 501639: leader 3 took member
            // 1's commit, made by leader 4 with voters [1, 3, 4], under voters [1, 3] that had not synced
            // it yet.
            return Ok(());
        }
        let last = node.log.entries()[count - 1].id;
        let membership = core.membership();
        let held = membership
            .voters
            .iter()
            .filter(|&&voter| {
                let entries = self.durable_entries(&self.nodes[voter as usize - 1]);
                entries.get(count - 1).is_some_and(|entry| entry.id == last)
            })
            .count();
        if held < membership.majority() {
            return Err(format!(
                "leader {} committed {position} held by {held} of the voters {:?} of configuration {}: members that \
                 are not voters were counted",
                node.id, membership.voters, membership.id
            ));
        }
        Ok(())
    }

    /// The groups whose majority must hold each committed entry: the voters of the latest committed
    /// configuration, or of any configuration that follows it in some member's log (a leader counts
    /// with the new configuration from when it is appended).
    pub(super) fn voter_groups(&self) -> Vec<Vec<MemberId>> {
        let committed = self.committed_configurations.last().expect("the initial configuration");
        let mut groups = vec![committed.voters.clone()];
        for node in &self.nodes {
            for (id, _) in node.log.membership_entries() {
                let next = &self.configurations[&id];
                if next.id == committed.id + 1 && !groups.contains(&next.voters) {
                    groups.push(next.voters.clone());
                }
            }
        }
        groups
    }
}
