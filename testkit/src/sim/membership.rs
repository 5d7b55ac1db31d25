//! Membership changes among the simulation's faults ([`super::SimConfig::membership`]): the cluster has
//! one node more than its initial configuration (a spare, started with the others and a member of
//! nothing), and at random steps the leader is asked for the next change of a cycle that grows the
//! cluster and shrinks it again: the node outside the configuration is added as a learner, a learner is
//! promoted (or, now and then, removed), and once every node votes a voter is removed (the leader too,
//! sometimes), becoming the node outside, to be added again later with whatever its data directory held.
//!
//! The checker needs nothing new to catch what a wrong change would do: two leaders of one term, or a
//! commit decided by a quorum of an old configuration after the new one committed, shows as two committed
//! orders, and a removed member counted toward a commit as a committed entry a majority of the new
//! configuration does not hold (lost at the next election). The run ends when every member of the
//! configuration in effect applied the target.

use quorumcast::{Member, Node, PendingChange};
use quorumcast_consensus::consensus_core::{Membership, MembershipChange};

use super::prng::Prng;

/// A change asked of the leader and not yet settled.
pub(super) struct Asked {
    /// The node it was asked of.
    pub(super) leader: usize,
    pub(super) pending: PendingChange,
    /// When it is given up on (its leader lost its term, or the entry was cut).
    pub(super) until_ns: u64,
}

/// How long a change is waited for before it is given up on (the entry may be cut by a new leader).
pub(super) const SETTLE_NS: u64 = 2_000_000_000;

/// The next change of the cycle for a cluster whose configuration in effect is `membership`, of
/// `nodes` nodes, whose initial configuration had `initial` voters; `None` when there is none to make.
pub(super) fn next_change(
    membership: &Membership,
    nodes: usize,
    initial: usize,
    prng: &mut Prng,
) -> Option<MembershipChange> {
    if let Some(&learner) = membership.learners.first() {
        return Some(if prng.chance(0.8) {
            MembershipChange::Promote(learner)
        } else {
            MembershipChange::Remove(learner)
        });
    }
    let outside = (0..nodes as i32).find(|id| !membership.contains(*id));
    match outside {
        Some(id) => Some(MembershipChange::AddLearner(id)),
        None if membership.voters.len() > initial => {
            let voter = membership.voters[prng.below(membership.voters.len())];
            Some(MembershipChange::Remove(voter))
        }
        None => None,
    }
}

/// Asks `leader` (node index `index`) for the next change, if there is one to make.
pub(super) fn ask(
    node: &Node,
    index: usize,
    members: &[Member],
    initial: usize,
    prng: &mut Prng,
    now_ns: u64,
) -> Option<Asked> {
    let (membership, _) = node.membership()?;
    let change = next_change(&membership, members.len(), initial, prng)?;
    let member = match change {
        MembershipChange::AddLearner(id) => members.iter().find(|m| m.id == id),
        _ => None,
    };
    let pending = node.propose_membership(change, member);
    Some(Asked { leader: index, pending, until_ns: now_ns + SETTLE_NS })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cycle_grows_the_cluster_and_shrinks_it_again() {
        let mut prng = Prng::new(7);
        let initial = Membership::initial(&[0, 1, 2]);
        assert_eq!(next_change(&initial, 4, 3, &mut prng), Some(MembershipChange::AddLearner(3)));
        let added = initial.apply(MembershipChange::AddLearner(3)).unwrap();
        assert!(matches!(
            next_change(&added, 4, 3, &mut prng),
            Some(MembershipChange::Promote(3) | MembershipChange::Remove(3))
        ));
        let grown = added.apply(MembershipChange::Promote(3)).unwrap();
        let Some(MembershipChange::Remove(voter)) = next_change(&grown, 4, 3, &mut prng) else {
            panic!("a voter is removed once every node votes");
        };
        let shrunk = grown.apply(MembershipChange::Remove(voter)).unwrap();
        assert_eq!(next_change(&shrunk, 4, 3, &mut prng), Some(MembershipChange::AddLearner(voter)));
        assert_eq!(next_change(&initial, 3, 3, &mut prng), None, "no node outside, none to remove");
    }
}
