//! What the core dropped and why, and the elections it took part in.

/// Counts kept by the core; they only grow (a restart starts them again from zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreCounters {
    /// Messages claiming this member's own id: dropped.
    pub non_member: u64,
    /// Messages with a negative term or position: dropped.
    pub malformed: u64,
    /// Messages of a term older than the current one: dropped.
    pub stale_term: u64,
    /// Messages that repeat what the core already knows (a second vote, an announcement of a term
    /// already joined): dropped.
    pub duplicate: u64,
    /// Messages that make no sense in the current role and term (an acknowledgement to a follower, a
    /// second leader in one term): dropped.
    pub unexpected: u64,
    /// Canvass and vote requests from members configured with a different member list: refused.
    pub membership_mismatch: u64,
    /// Canvasses started.
    pub canvasses: u64,
    /// Elections stood in as a candidate.
    pub elections: u64,
    /// Terms led.
    pub leaderships: u64,
    /// Votes granted.
    pub votes_granted: u64,
    /// Truncations asked of the driver.
    pub truncations: u64,
    /// Leaderships given up for want of a majority (or because a higher term appeared).
    pub step_downs: u64,
    /// Leadership transfers started.
    pub transfers: u64,
    /// Leadership transfers abandoned (the target did not win within the minimum election timeout).
    pub transfers_abandoned: u64,
}
