//! The commit position of a cluster: the highest position a majority of its members holds.

/// The commit position of a cluster: the `(n / 2 + 1)`-th highest append position over all `n` members,
/// the leader counting as one with its own position, and never above the leader's own position.
///
/// `followers` holds each follower's last acknowledged position (0 for one never heard from).
pub fn quorum_position(leader: i64, followers: &[i64]) -> i64 {
    let members = followers.len() + 1;
    let majority = members / 2 + 1;
    // The majority-th highest: count, for a candidate, how many members are at or above it. Small n, no
    // allocation: try each member's position as the candidate, keep the highest that a majority reaches.
    let mut best = i64::MIN;
    for candidate in std::iter::once(leader).chain(followers.iter().copied()) {
        let at_or_above = (candidate <= leader) as usize + followers.iter().filter(|&&p| p >= candidate).count();
        if at_or_above >= majority && candidate > best {
            best = candidate;
        }
    }
    best.min(leader).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;
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
