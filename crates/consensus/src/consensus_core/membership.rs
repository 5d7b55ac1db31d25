//! Membership as replicated state: who votes, who only receives the log, and how that changes one
//! member at a time.
//!
//! Rules (single-server changes, Ongaro's dissertation section 4.1, with the fix of section 4.1's
//! errata: a leader first commits an entry of its own term):
//! - the cluster starts from the initial configuration (the node files' `members`, all voters, id 0);
//!   every later configuration is an entry in the log, with the next id, and differs from the one before
//!   it by one member: a learner added, a learner promoted to voter, or a member removed;
//! - a member uses the latest configuration in its log, committed or not, from the moment it is appended
//!   (Raft's rule for configuration entries); a truncation that cuts the entry returns to the one before;
//! - only voters canvass and count toward a commit or an election (the leader counting itself only while
//!   it is one of them), and a member whose removal is not committed yet: it may hold the only log a
//!   majority can elect (its removal then commits under it, and it steps down). Learners receive the log
//!   and acknowledge it, so the leader knows how far behind they are;
//! - a change is proposed only by a leader that has committed an entry of its term, while no earlier
//!   change is uncommitted, and not when it would leave fewer live voters than a majority of the new
//!   configuration. Any two majorities of configurations one change apart overlap, which is what keeps one
//!   leader per term across a change.

use std::fmt;

use super::MemberId;

/// The format of an encoded [`Membership`]: refused by a member that does not know it.
pub const MEMBERSHIP_VERSION: u8 = 1;

/// The most members a configuration holds (voters and learners): what bounds a decoded one.
pub const MAX_MEMBERS: usize = 64;

/// One configuration of the cluster.
///
/// Invariants (kept by [`Membership::initial`], [`Membership::apply`] and [`Membership::decode`]): `voters`
/// is not empty; `voters` and `learners` are sorted, without duplicates, disjoint, and together hold at most
/// [`MAX_MEMBERS`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Membership {
    /// 0 for the initial configuration; one more with each change.
    pub id: u64,
    /// Members that vote and count toward a commit.
    pub voters: Vec<MemberId>,
    /// Members that receive the log and never vote or count.
    pub learners: Vec<MemberId>,
}

/// One change of the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MembershipChange {
    /// Adds a member as a learner.
    AddLearner(MemberId),
    /// Makes a learner a voter.
    Promote(MemberId),
    /// Removes a voter or a learner.
    Remove(MemberId),
}

impl fmt::Display for MembershipChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AddLearner(id) => write!(f, "add member {id} as a learner"),
            Self::Promote(id) => write!(f, "promote member {id} to voter"),
            Self::Remove(id) => write!(f, "remove member {id}"),
        }
    }
}

/// Why a change was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipError {
    /// This member does not lead: changes go to the leader.
    NotLeader {
        /// The leader, when known.
        leader: Option<MemberId>,
    },
    /// The leader has not committed an entry of its own term yet (retry shortly).
    TermNotCommitted,
    /// A leadership transfer runs.
    Transferring,
    /// An earlier change (configuration `id`) is not committed yet: one change at a time.
    ChangeInProgress {
        /// The uncommitted configuration.
        id: u64,
    },
    /// The member to add is already a voter or a learner.
    AlreadyMember(MemberId),
    /// The member to promote is not a learner.
    NotALearner(MemberId),
    /// The member to remove is neither a voter nor a learner.
    NotAMember(MemberId),
    /// The change would remove the last voter.
    LastVoter(MemberId),
    /// The configuration would hold more than [`MAX_MEMBERS`].
    TooManyMembers,
    /// The learner to promote has not answered the leader within the shortest election timeout.
    LearnerSilent(MemberId),
    /// The learner to promote is further behind the leader than the configured distance.
    LearnerBehind {
        /// The learner.
        member: MemberId,
        /// How far behind it is, in bytes of log.
        behind: i64,
        /// The most it may be behind.
        limit: i64,
    },
    /// Fewer voters of the new configuration answered within the shortest election timeout than a
    /// majority of it needs.
    TooFewLiveVoters {
        /// Voters of the new configuration that answered (the leader included, if it is one).
        live: usize,
        /// A majority of the new configuration.
        needed: usize,
    },
}

impl fmt::Display for MembershipError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotLeader { leader: Some(leader) } => {
                write!(f, "this member does not lead: send the change to member {leader}, the leader")
            }
            Self::NotLeader { leader: None } => f.write_str("this member does not lead, and knows no leader yet"),
            Self::TermNotCommitted => {
                f.write_str("the leader has not yet committed an entry of its term: retry in a moment")
            }
            Self::Transferring => f.write_str("a leadership transfer is running: retry once it ends"),
            Self::ChangeInProgress { id } => {
                write!(f, "configuration {id} is not committed yet: one membership change at a time")
            }
            Self::AlreadyMember(id) => write!(f, "member {id} is already a member"),
            Self::NotALearner(id) => write!(f, "member {id} is not a learner: add it as a learner first"),
            Self::NotAMember(id) => write!(f, "member {id} is not a member"),
            Self::LastVoter(id) => write!(f, "member {id} is the last voter: a cluster needs one"),
            Self::TooManyMembers => write!(f, "a configuration holds at most {MAX_MEMBERS} members"),
            Self::LearnerSilent(member) => {
                write!(f, "learner {member} has not answered the leader recently: start it, and retry once it runs")
            }
            Self::LearnerBehind { member, behind, limit } => write!(
                f,
                "learner {member} is {behind} bytes behind the leader, more than the {limit} a promotion allows: \
                 retry once it catches up"
            ),
            Self::TooFewLiveVoters { live, needed } => write!(
                f,
                "only {live} voters of the new configuration answered recently, and it needs {needed} to commit: \
                 bring members back first"
            ),
        }
    }
}

impl std::error::Error for MembershipError {}

impl Membership {
    /// The initial configuration: `voters` (any order), no learners, id 0.
    pub fn initial(voters: &[MemberId]) -> Self {
        let mut voters = voters.to_vec();
        voters.sort_unstable();
        voters.dedup();
        Self { id: 0, voters, learners: Vec::new() }
    }

    /// Whether `id` votes.
    pub fn is_voter(&self, id: MemberId) -> bool {
        self.voters.binary_search(&id).is_ok()
    }

    /// Whether `id` is a learner.
    pub fn is_learner(&self, id: MemberId) -> bool {
        self.learners.binary_search(&id).is_ok()
    }

    /// Whether `id` is a voter or a learner.
    pub fn contains(&self, id: MemberId) -> bool {
        self.is_voter(id) || self.is_learner(id)
    }

    /// How many voters make a majority.
    pub fn majority(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    /// Every member, voters first.
    pub fn members(&self) -> impl Iterator<Item = MemberId> + '_ {
        self.voters.iter().chain(&self.learners).copied()
    }

    /// The configuration after `change`, with the next id; the structural rules only (a member added
    /// once, only learners promoted, a voter always left).
    pub fn apply(&self, change: MembershipChange) -> Result<Membership, MembershipError> {
        let mut next = Membership { id: self.id + 1, ..self.clone() };
        match change {
            MembershipChange::AddLearner(id) => {
                if self.contains(id) {
                    return Err(MembershipError::AlreadyMember(id));
                }
                if self.voters.len() + self.learners.len() >= MAX_MEMBERS {
                    return Err(MembershipError::TooManyMembers);
                }
                insert_sorted(&mut next.learners, id);
            }
            MembershipChange::Promote(id) => {
                if !self.is_learner(id) {
                    return Err(MembershipError::NotALearner(id));
                }
                next.learners.retain(|&m| m != id);
                insert_sorted(&mut next.voters, id);
            }
            MembershipChange::Remove(id) => {
                if self.is_learner(id) {
                    next.learners.retain(|&m| m != id);
                } else if !self.is_voter(id) {
                    return Err(MembershipError::NotAMember(id));
                } else if self.voters.len() == 1 {
                    return Err(MembershipError::LastVoter(id));
                } else {
                    next.voters.retain(|&m| m != id);
                }
            }
        }
        Ok(next)
    }

    /// The encoded length of this configuration.
    pub fn encoded_length(&self) -> usize {
        16 + 4 * (self.voters.len() + self.learners.len())
    }

    /// Encodes it into `buffer` (at least [`encoded_length`](Self::encoded_length) bytes); returns the length.
    /// Layout, little-endian: version u8, 3 zero bytes, voters u16, learners u16, id u64, then the voters'
    /// and the learners' ids as i32.
    pub fn encode(&self, buffer: &mut [u8]) -> Result<usize, String> {
        let length = self.encoded_length();
        if buffer.len() < length {
            return Err(format!("a configuration of {length} bytes does not fit in {}", buffer.len()));
        }
        buffer[..4].copy_from_slice(&[MEMBERSHIP_VERSION, 0, 0, 0]);
        buffer[4..6].copy_from_slice(&(self.voters.len() as u16).to_le_bytes());
        buffer[6..8].copy_from_slice(&(self.learners.len() as u16).to_le_bytes());
        buffer[8..16].copy_from_slice(&self.id.to_le_bytes());
        for (slot, id) in buffer[16..length].chunks_exact_mut(4).zip(self.members()) {
            slot.copy_from_slice(&id.to_le_bytes());
        }
        Ok(length)
    }

    /// Decodes a configuration, refusing an unknown version, a count past [`MAX_MEMBERS`], a short buffer,
    /// and lists that break the invariants.
    pub fn decode(bytes: &[u8]) -> Result<Membership, String> {
        let Some(header) = bytes.get(..16) else {
            return Err(format!("a configuration entry of {} bytes is shorter than its 16-byte header", bytes.len()));
        };
        if header[0] != MEMBERSHIP_VERSION {
            return Err(format!(
                "configuration entry version {} is not known to this build (it reads version {MEMBERSHIP_VERSION}): \
                 upgrade this member before the cluster uses the newer format",
                header[0]
            ));
        }
        let voters = usize::from(u16::from_le_bytes([header[4], header[5]]));
        let learners = usize::from(u16::from_le_bytes([header[6], header[7]]));
        if voters == 0 || voters + learners > MAX_MEMBERS {
            return Err(format!("a configuration of {voters} voters and {learners} learners is not one"));
        }
        let id = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
        let Some(ids) = bytes.get(16..16 + 4 * (voters + learners)) else {
            return Err("a configuration entry ends before its member ids".into());
        };
        let ids: Vec<MemberId> =
            ids.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
        let membership = Membership { id, voters: ids[..voters].to_vec(), learners: ids[voters..].to_vec() };
        membership.check()?;
        Ok(membership)
    }

    /// Checks the invariants.
    fn check(&self) -> Result<(), String> {
        let sorted = |ids: &[MemberId]| ids.windows(2).all(|w| w[0] < w[1]);
        if self.voters.is_empty() || !sorted(&self.voters) || !sorted(&self.learners) {
            return Err("a configuration's voters must be non-empty, and both lists sorted without duplicates".into());
        }
        if self.learners.iter().any(|&id| self.is_voter(id)) {
            return Err("a configuration lists a member as both voter and learner".into());
        }
        Ok(())
    }
}

fn insert_sorted(ids: &mut Vec<MemberId>, id: MemberId) {
    let at = ids.binary_search(&id).unwrap_or_else(|at| at);
    ids.insert(at, id);
}

/// The configurations in the local log: the latest committed one (the base: the initial configuration
/// until a change commits) and the entries after it, with the position where each ends.
///
/// Invariants: ids grow by one from the base's; end positions strictly increase and are past the base's.
/// Entries at or below the commit position are folded into the base ([`compact`](Self::compact)), so the
/// log holds few entries however many changes a cluster goes through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipLog {
    base: Membership,
    entries: Vec<(i64, Membership)>,
}

impl MembershipLog {
    /// A log holding no configuration entry: `initial` is in effect.
    pub fn new(initial: Membership) -> Self {
        Self { base: initial, entries: Vec::new() }
    }

    /// The latest configuration in the log, in effect or not.
    pub fn latest(&self) -> &Membership {
        self.entries.last().map_or(&self.base, |(_, m)| m)
    }

    /// Where the latest configuration's entry ends (`None`: the base, folded or initial).
    pub fn latest_end(&self) -> Option<i64> {
        self.entries.last().map(|(end, _)| *end)
    }

    /// The configuration in effect once the log holds `position` (the latest whose entry ends at or
    /// before it). Positions below the last folded entry answer with the base.
    pub fn at(&self, position: i64) -> &Membership {
        self.entries.iter().rev().find(|(end, _)| *end <= position).map_or(&self.base, |(_, m)| m)
    }

    /// The configuration before the one in effect at `position`, and where the entry in effect ends;
    /// `None` when the base is in effect.
    pub fn previous_at(&self, position: i64) -> Option<(&Membership, i64)> {
        let in_effect = self.entries.iter().rposition(|(end, _)| *end <= position)?;
        let previous = if in_effect == 0 { &self.base } else { &self.entries[in_effect - 1].1 };
        Some((previous, self.entries[in_effect].0))
    }

    /// The configuration entries after the base, oldest first, with where each ends.
    pub fn entries(&self) -> &[(i64, Membership)] {
        &self.entries
    }

    /// Records the entry of `membership` ending at `end`; refused unless it is the next id, past the
    /// end of the last entry.
    pub fn push(&mut self, end: i64, membership: Membership) -> Result<(), String> {
        let latest = self.latest();
        if membership.id != latest.id + 1 || self.latest_end().is_some_and(|last| end <= last) {
            return Err(format!(
                "configuration {} ending at {end} does not follow configuration {} ending at {:?}",
                membership.id,
                latest.id,
                self.latest_end()
            ));
        }
        self.entries.push((end, membership));
        Ok(())
    }

    /// Drops the entries that end past `position` (the log was cut there; never below the commit
    /// position, so never into the base).
    pub fn truncate(&mut self, position: i64) {
        while self.entries.last().is_some_and(|(end, _)| *end > position) {
            self.entries.pop();
        }
    }

    /// Folds the entries at or below `committed` into the base: they can no longer be cut.
    pub fn compact(&mut self, committed: i64) {
        let folded = self.entries.iter().take_while(|(end, _)| *end <= committed).count();
        if folded > 0 {
            let (_, last) = self.entries.drain(..folded).next_back().expect("folded > 0");
            self.base = last;
        }
    }

    /// The local log was replaced up to `position` by a snapshot whose configuration is `membership`: it
    /// is the only configuration known from now on.
    pub fn reset(&mut self, membership: Membership) {
        self.entries.clear();
        self.base = membership;
    }

    /// Whether `id` is a member of a configuration in the log (messages from others are dropped).
    pub fn knows(&self, id: MemberId) -> bool {
        self.base.contains(id) || self.entries.iter().any(|(_, m)| m.contains(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_adds_promotes_or_removes_one_member() {
        let m = Membership::initial(&[3, 1, 2]);
        assert_eq!(m.voters, vec![1, 2, 3]);
        let added = m.apply(MembershipChange::AddLearner(4)).unwrap();
        assert_eq!((added.id, added.learners.clone()), (1, vec![4]));
        assert_eq!(added.apply(MembershipChange::AddLearner(4)), Err(MembershipError::AlreadyMember(4)));
        assert_eq!(added.apply(MembershipChange::Promote(3)), Err(MembershipError::NotALearner(3)));
        let promoted = added.apply(MembershipChange::Promote(4)).unwrap();
        assert_eq!((promoted.voters.clone(), promoted.learners.len()), (vec![1, 2, 3, 4], 0));
        let removed = promoted.apply(MembershipChange::Remove(1)).unwrap();
        assert_eq!((removed.id, removed.voters.clone()), (3, vec![2, 3, 4]));
        assert_eq!(removed.apply(MembershipChange::Remove(9)), Err(MembershipError::NotAMember(9)));
        let one = Membership::initial(&[5]);
        assert_eq!(one.apply(MembershipChange::Remove(5)), Err(MembershipError::LastVoter(5)));
    }

    #[test]
    fn a_configuration_round_trips_and_a_bad_one_is_refused() {
        let m = Membership { id: 7, voters: vec![1, 2, 5], learners: vec![9] };
        let mut buffer = [0u8; 64];
        let length = m.encode(&mut buffer).unwrap();
        assert_eq!(Membership::decode(&buffer[..length]), Ok(m.clone()));
        assert!(Membership::decode(&buffer[..length - 1]).is_err(), "short");
        let mut unknown = buffer;
        unknown[0] = 2;
        assert!(Membership::decode(&unknown[..length]).unwrap_err().contains("version 2"));
        let mut unsorted = buffer;
        unsorted[16..20].copy_from_slice(&6i32.to_le_bytes());
        assert!(Membership::decode(&unsorted[..length]).is_err(), "voters out of order");
        let mut huge = buffer;
        huge[4..6].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(Membership::decode(&huge[..length]).is_err(), "a count that would allocate without bound");
    }

    #[test]
    fn the_log_of_configurations_follows_truncation() {
        let mut log = MembershipLog::new(Membership::initial(&[1, 2, 3]));
        let one = log.latest().apply(MembershipChange::AddLearner(4)).unwrap();
        log.push(100, one.clone()).unwrap();
        assert!(log.push(90, one.apply(MembershipChange::Promote(4)).unwrap()).is_err(), "ends before the last");
        log.push(200, one.apply(MembershipChange::Promote(4)).unwrap()).unwrap();
        assert_eq!(log.latest().id, 2);
        assert_eq!(log.at(150).id, 1);
        assert_eq!(log.at(99).id, 0);
        log.truncate(150);
        assert_eq!(log.latest(), &one);
        assert!(log.knows(4) && log.knows(1) && !log.knows(5));
        log.compact(120);
        assert_eq!((log.entries().len(), log.at(0)), (0, &one), "a committed entry becomes the base");
        let removed = one.apply(MembershipChange::Remove(1)).unwrap();
        log.push(300, removed).unwrap();
        log.compact(400);
        assert!(!log.knows(1), "a member removed by a committed change is forgotten");
    }
}
