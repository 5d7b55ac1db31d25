//! What counts toward a commit, in one place: the leader's quorum rule ([`majority_position`] over the
//! voters' positions; [`quorum_position`] when every member votes), a follower's commit rule
//! ([`follower_commit`]), and which acknowledgement counts for which leader's log ([`AckRule`]). The
//! consensus core decides with them, and so do the threads that apply a decision early for latency (a
//! follower's Receiver, the leader's Sender): there is one rule, whoever runs it.

use super::MemberId;

/// The commit position of a cluster: the `(n / 2 + 1)`-th highest append position over all `n` members,
/// the leader counting as one with its own position, and never above the leader's own position.
///
/// `followers` holds each follower's last acknowledged position (0 for one never heard from). The case of
/// [`majority_position`] where every member votes, the leader among them (it allocates: not for a hot path).
pub fn quorum_position(leader: i64, followers: &[i64]) -> i64 {
    let mut positions: Vec<i64> = std::iter::once(leader).chain(followers.iter().copied()).collect();
    let majority = positions.len() / 2 + 1;
    majority_position(&mut positions, majority).min(leader)
}

/// The highest position a majority of voters holds: the `majority`-th highest of `positions` (one per
/// voter; reordered in place, no allocation). 0 when fewer positions than a majority are given.
pub fn majority_position(positions: &mut [i64], majority: usize) -> i64 {
    if majority == 0 || positions.len() < majority {
        return 0;
    }
    positions.sort_unstable_by(|a, b| b.cmp(a));
    positions[majority - 1].max(0)
}

/// A follower's commit position: what the leader has committed, as far as this member holds the leader's
/// log (`held`: the contiguous end of what it has of that log). Never above either: a follower cannot apply
/// bytes it does not have, nor bytes the leader did not commit.
#[inline]
pub fn follower_commit(leader_commit: i64, held: i64) -> i64 {
    leader_commit.min(held)
}

/// Which acknowledgements count for one leader's log: destination `d` of its publication is follower
/// `followers[d]`, and an acknowledgement counts only from that member, for that log's session.
///
/// Invariant: a follower acknowledges for itself only and for this term's log only; anything else (another
/// member's id, a previous term's session, a destination past the list) counts for nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckRule {
    session_id: i32,
    followers: Vec<MemberId>,
}

impl AckRule {
    /// The rule for the log of `session_id`, sent to `followers` in this order.
    pub fn new(session_id: i32, followers: Vec<MemberId>) -> Self {
        Self { session_id, followers }
    }

    /// The followers, in destination order.
    pub fn followers(&self) -> &[MemberId] {
        &self.followers
    }

    /// The log's session.
    pub fn session_id(&self) -> i32 {
        self.session_id
    }

    /// Whether an acknowledgement that came from `destination`, saying it is `member_id`'s for the log of
    /// `session_id`, counts.
    #[inline]
    pub fn counts(&self, destination: usize, member_id: MemberId, session_id: i32) -> bool {
        session_id == self.session_id && self.followers.get(destination) == Some(&member_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_commits_what_the_leader_committed_as_far_as_it_holds_the_log() {
        assert_eq!(follower_commit(100, 60), 60);
        assert_eq!(follower_commit(40, 60), 40);
    }

    #[test]
    fn an_acknowledgement_counts_only_from_its_destination_s_member_for_this_log() {
        let rule = AckRule::new(7, vec![1, 2]);
        assert!(rule.counts(0, 1, 7));
        assert!(rule.counts(1, 2, 7));
        assert!(!rule.counts(0, 2, 7), "another member's id from destination 0");
        assert!(!rule.counts(1, 2, 6), "a previous term's log");
        assert!(!rule.counts(2, 2, 7), "no such destination");
    }
    use proptest::prelude::*;

    #[test]
    fn three_and_five_members() {
        assert_eq!(quorum_position(100, &[50, 70]), 70);
        assert_eq!(quorum_position(100, &[150, 0]), 100, "never above the leader's own position");
        assert_eq!(quorum_position(100, &[0, 0]), 0);
        assert_eq!(quorum_position(100, &[100, 0]), 100);
        assert_eq!(quorum_position(100, &[90, 80, 10, 0]), 80);
        assert_eq!(quorum_position(5, &[]), 5, "a cluster of one commits what it appends");
    }

    proptest! {
        /// The commit position never passes the quorum: a majority of members (the leader included) has
        /// acknowledged at least it, and it is the highest such position, capped at the leader's.
        #[test]
        fn commit_never_passes_the_quorum(leader in 0i64..1_000_000, followers in prop::collection::vec(0i64..1_000_000, 0..8)) {
            let commit = quorum_position(leader, &followers);
            let members = followers.len() + 1;
            let at_or_above = |p: i64| (leader >= p) as usize + followers.iter().filter(|&&f| f >= p).count();
            prop_assert!(commit <= leader);
            prop_assert!(commit == 0 || at_or_above(commit) > members / 2, "a majority has {commit}");
            // Nothing higher than the commit (up to the leader's position) has a majority.
            let mut all: Vec<i64> = followers.iter().copied().chain([leader]).filter(|&p| p > commit && p <= leader).collect();
            all.sort();
            for p in all {
                prop_assert!(at_or_above(p) <= members / 2, "{p} has a majority but commit is {commit}");
            }
        }
    }
}
