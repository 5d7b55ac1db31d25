//! The consensus core's configuration: who the members are, the timers, the seed of the election
//! timeouts, and (for tests only) fault switches.

use std::fmt;
use std::time::Duration;

use crate::setting::{FrontEnd, SettingError};

use super::MemberId;

crate::section! {
    /// The consensus timers, in nanoseconds.
    ///
    /// Invariants checked by [`CoreConfig::validate`]: every timer is non-zero,
    /// `heartbeat_timeout_ns > heartbeat_interval_ns`, `election_timeout_min_ns <= election_timeout_max_ns`,
    /// and `heartbeat_timeout_ns < election_timeout_min_ns`: an election timeout above the heartbeat timeout
    /// keeps a follower from canvassing members that still hear the leader. The default: 10 ms heartbeats,
    /// a 100 ms heartbeat timeout, election timeouts of 150 to 300 ms.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Timers in pub mod timer_settings, built as ("NodeBuilder::timers(Timers { ", ", .. })"),
        checked with () {
        /// The leader sends its commit position (its heartbeat) at least this often, and a follower its
        /// append position.
        pub heartbeat_interval_ns: u64 = 10_000_000, shown "10000000", unit "ns",
            key [consensus] heartbeat_interval, file Nanos,
            check |t, _| (t.heartbeat_interval_ns == 0).then(|| ZERO.into());
        /// A follower that heard from its leader within this long refuses canvasses.
        pub heartbeat_timeout_ns: u64 = 100_000_000, shown "100000000", unit "ns",
            key [consensus] heartbeat_timeout, file Nanos,
            check |t: &Timers, _| {
                // Each comparison only once the timers it compares with are valid themselves, so that the
                // first refusal is the one the reader fixes first: zeros, then the order of the bounds.
                let ms = Duration::from_nanos;
                let others_set = t.election_timeout_min_ns != 0 && t.election_timeout_max_ns != 0;
                if t.heartbeat_timeout_ns == 0 {
                    Some(ZERO.into())
                } else if others_set && t.heartbeat_timeout_ns <= t.heartbeat_interval_ns {
                    Some(format!(
                        "({:?}) must be greater than {{consensus.heartbeat_interval}} ({:?}), or every follower \
                         times out between heartbeats",
                        ms(t.heartbeat_timeout_ns),
                        ms(t.heartbeat_interval_ns)
                    ))
                } else if others_set
                    && t.election_timeout_min_ns <= t.election_timeout_max_ns
                    && t.heartbeat_timeout_ns >= t.election_timeout_min_ns
                {
                    Some(format!(
                        "({:?}) must be below {{consensus.election_timeout_min}} ({:?}): a follower refuses to \
                         vote while it heard from its leader within the heartbeat timeout, so a member whose \
                         election timer fires first canvasses members that still count the leader alive, and \
                         elections fail; lower {{consensus.heartbeat_timeout}} or raise \
                         {{consensus.election_timeout_min}} (and {{consensus.election_timeout_max}} with it)",
                        ms(t.heartbeat_timeout_ns),
                        ms(t.election_timeout_min_ns)
                    ))
                } else {
                    None
                }
            };
        /// Shortest randomized election timeout; a leader that has not heard from a majority within this long
        /// steps down (no follower can have elected another leader sooner).
        pub election_timeout_min_ns: u64 = 150_000_000, shown "150000000", unit "ns",
            key [consensus] election_timeout_min, file Nanos,
            check |t: &Timers, _| {
                if t.election_timeout_min_ns == 0 {
                    Some(ZERO.into())
                } else if t.election_timeout_max_ns != 0 && t.election_timeout_min_ns > t.election_timeout_max_ns {
                    Some(format!(
                        "({:?}) must be at most {{consensus.election_timeout_max}} ({:?})",
                        Duration::from_nanos(t.election_timeout_min_ns),
                        Duration::from_nanos(t.election_timeout_max_ns)
                    ))
                } else {
                    None
                }
            };
        /// Longest randomized election timeout.
        pub election_timeout_max_ns: u64 = 300_000_000, shown "300000000", unit "ns",
            key [consensus] election_timeout_max, file Nanos,
            check |t, _| (t.election_timeout_max_ns == 0).then(|| ZERO.into());
    }
}

/// A timer's refusal when it is zero.
const ZERO: &str = "must be greater than zero";

impl Timers {
    /// The `latency` profile's timers: 5 ms heartbeats, a 50 ms heartbeat timeout, election timeouts of
    /// 75 to 150 ms. A failover takes about half what the defaults take; a host that starves the
    /// consensus agent for 50 ms (a loaded machine with fewer cores than busy threads) sees false
    /// elections.
    pub const fn latency() -> Self {
        Self {
            heartbeat_interval_ns: 5_000_000,
            heartbeat_timeout_ns: 50_000_000,
            election_timeout_min_ns: 75_000_000,
            election_timeout_max_ns: 150_000_000,
        }
    }
}

crate::planted_switches! {
    /// Faults the tests switch on to prove the simulation catches a broken core (the `sim` feature; an
    /// embedder's build has none). All off by default; never set them outside tests.
    pub struct Bugs {
        /// On restart, ignore the persisted vote (as if votes were not persisted).
        pub forget_vote_on_restart: bool,
        /// Grant votes (and canvasses) without comparing logs.
        pub skip_up_to_date_check: bool,
        /// A leader counts every member toward a commit, learners and members of no configuration
        /// included.
        pub count_non_voters: bool,
    }
}

/// Everything a member's consensus core is configured with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreConfig {
    /// This member's id: one of `members`, or a member that joins a running cluster (it does not vote
    /// until a configuration entry makes it a voter).
    pub member_id: MemberId,
    /// The initial configuration: the voters the cluster started with, without duplicates. Later
    /// configurations are entries in the log ([`Membership`](super::Membership)).
    pub members: Vec<MemberId>,
    /// The timers.
    pub timers: Timers,
    /// Seed of the PRNG the randomized election timeouts come from.
    pub seed: u64,
    /// Test-only fault switches (the `sim` feature).
    #[cfg(feature = "sim")]
    pub bugs: Bugs,
    #[cfg(not(feature = "sim"))]
    pub(crate) bugs: Bugs,
}

impl CoreConfig {
    /// A configuration with the default timers and seed 0, and no faults.
    pub fn new(member_id: MemberId, members: Vec<MemberId>) -> Self {
        Self { member_id, members, timers: Timers::default(), seed: 0, bugs: Bugs::default() }
    }

    /// Checks the configuration; the error names the offending key.
    pub fn validate(&self) -> Result<(), CoreConfigError> {
        if self.members.is_empty() {
            return Err(CoreConfigError::new("members", "must list at least one member".into()));
        }
        let mut sorted = self.members.clone();
        sorted.sort_unstable();
        if let Some(pair) = sorted.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(CoreConfigError::new("members", format!("lists member {} twice", pair[0])));
        }
        self.timers.validate().map_err(|e| CoreConfigError::new("timers", e.render(FrontEnd::Builder)))
    }

    /// The hash of the initial member list that canvass and vote requests carry: members configured with
    /// different initial lists (of different clusters) refuse each other. It does not follow membership
    /// changes: it names the cluster, not its configuration.
    pub fn membership_hash(&self) -> u64 {
        membership_hash(&self.members)
    }
}

impl Timers {
    /// Checks the timers; the error names the offending setting, and the others the rule involves, in
    /// whichever front end's terms the caller renders it.
    pub fn validate(&self) -> Result<(), SettingError> {
        self.check(&())
    }
}

/// FNV-1a over the sorted member ids: the same for the same set of members in any order.
pub fn membership_hash(members: &[MemberId]) -> u64 {
    let mut sorted = members.to_vec();
    sorted.sort_unstable();
    sorted
        .iter()
        .flat_map(|id| id.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// A configuration value the core refuses, and which key holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreConfigError {
    /// The offending key, e.g. `heartbeat_timeout_ns`.
    pub key: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl CoreConfigError {
    pub(crate) fn new(key: &'static str, message: String) -> Self {
        Self { key, message }
    }
}

impl fmt::Display for CoreConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "consensus core configuration: {} {}", self.key, self.message)
    }
}

impl std::error::Error for CoreConfigError {}
