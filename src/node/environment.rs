//! What a node takes from the world outside it: the time, the network, the disk, and its randomness.
//!
//! A node reads every time it uses (timers, session times, the wall clock of session entries) from its
//! [`Environment`]'s clock, binds every endpoint (consensus, clients, the log's Sender and Receiver) and
//! opens every catch-up stream on its network, keeps its recorded log, vote file and snapshots on its
//! disk, and draws every random choice (election jitter, log session ids, receiver ids, catch-up nonces)
//! from its seed. Production uses the monotonic and wall clocks, UDP and TCP sockets, the file system and a
//! seed from the time; the node simulator gives a simulated time, network and disk and a fixed seed, and
//! so runs the very `Node` an application embeds, deterministically.
//!
//! Not behind it: the log buffers in shared memory (the real ones under the simulator too; a power loss
//! removes them as a reboot empties `/dev/shm`).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::agent::clock::NanoClock;
use crate::media::transport::SharedNetwork;
use crate::storage::disk::SharedDisk;

/// How log files are made: a leader's spare log, a follower's image of its leader's log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFiles {
    /// On threads of their own, while the node runs (production: neither a failover nor a follower's
    /// join waits on the file system's reservation of a large log); so do catch-ups, and the recorder's
    /// group commits under `batch` (its `fdatasync` never blocks the agents that share its thread).
    #[default]
    Threaded,
    /// On the agent's thread that needs one, when it needs it (deterministic: for the simulator); so do
    /// catch-ups and group commits, in the recorder's duty cycles.
    Inline,
}

crate::planted_switches! {
    /// Bugs planted on purpose, for the tests that prove the node simulator catches them (the `sim`
    /// feature; an embedder's build has none). All off unless a test turns one on; not part of the API.
    pub struct PlantedBugs {
        /// The node hands out entries past its commit position, as far as its log reaches.
        pub apply_uncommitted: bool,
        /// A leader appends past its commit position without the uncommitted bound.
        pub unbounded_uncommitted: bool,
        /// A node starts without a spare log file, so its first term makes its log on the consensus
        /// thread (the behaviour before the first spare was made at start).
        pub no_first_spare: bool,
        /// Under `batch`, the recorder reports what it wrote as synced before its `fdatasync`.
        pub ack_before_sync: bool,
        /// After a catch-up from the leader's recording, the node's reader of committed entries goes on
        /// where the fetch ended instead of where it began.
        pub catch_up_wrong_offset: bool,
        /// The session table hands a remote client's resend that was applied before to the application
        /// again.
        pub apply_duplicates: bool,
        /// `poll_state` does not load a snapshot a catch-up installed: the entries after it are applied
        /// to the state it should have replaced.
        pub skip_snapshot_load: bool,
        /// The consensus core counts learners (and members a change removed) toward commits and
        /// elections.
        pub count_non_voters: bool,
        /// A member whose recorded log was found damaged below what it synced does not repair: its
        /// consensus core starts from the cut log as if nothing were lost.
        pub forget_damage: bool,
        /// Replicated timers fire when this member's own clock passes their deadline, instead of the
        /// cluster time stamped on the entry being applied.
        pub timers_on_local_clock: bool,
        /// A snapshot's service state holds no timers (the ones scheduled are not written).
        pub snapshot_without_timers: bool,
    }
}

/// Told the bytes of every log file a node makes on its consensus thread (no spare ready), as it makes it:
/// the simulator charges them as time that thread is busy. Clones call the same function. Only with the
/// `sim` feature.
#[cfg(feature = "sim")]
#[derive(Clone)]
pub struct InlineLogCost(Arc<dyn Fn(usize) + Send + Sync>);

#[cfg(feature = "sim")]
impl fmt::Debug for InlineLogCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InlineLogCost(..)")
    }
}

#[cfg(feature = "sim")]
impl InlineLogCost {
    /// Calls `charge` with the bytes of each log file made on the consensus thread.
    pub fn new(charge: impl Fn(usize) + Send + Sync + 'static) -> Self {
        Self(Arc::new(charge))
    }

    /// A log file of `bytes` is being made.
    pub fn add(&self, bytes: usize) {
        (self.0)(bytes)
    }
}

/// The clock, network and seed of a node. Clones share the network and the seed's sequence.
#[derive(Clone)]
pub struct Environment {
    /// Every time the node reads.
    pub clock: NanoClock,
    /// Every endpoint the node binds.
    pub network: SharedNetwork,
    /// Where the recorded log and the vote file are kept.
    pub disk: SharedDisk,
    /// How log files are made.
    pub log_files: LogFiles,
    /// Whether followers far behind catch up from the leader's recording (and this member serves such
    /// catch-ups), over a stream of `network` (TCP in production). Under [`LogFiles::Inline`] a catch-up
    /// runs in the recorder's duty cycles instead of on a thread of its own.
    pub catch_up: bool,
    /// Bugs planted for the simulator's own tests (none by default; only with the `sim` feature).
    #[cfg(feature = "sim")]
    pub bugs: PlantedBugs,
    #[cfg(not(feature = "sim"))]
    pub(crate) bugs: PlantedBugs,
    /// Where log files made on the consensus thread are counted (the simulator's cost model); `None` in
    /// production. Only with the `sim` feature.
    #[cfg(feature = "sim")]
    pub inline_log_cost: Option<InlineLogCost>,
    /// In a seeded environment, the node's invoked agents run in an order drawn from the seed each duty
    /// cycle (the simulator's), instead of their fixed order. Only with the `sim` feature.
    #[cfg(feature = "sim")]
    pub shuffle_agents: bool,
    /// The seed of every random choice; `None` takes one from the wall clock and the member id.
    seed: Option<u64>,
    /// Draws taken from the seed.
    draws: Arc<AtomicU64>,
}

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Environment")
            .field("network", &self.network)
            .field("disk", &self.disk)
            .field("log_files", &self.log_files)
            .field("seed", &self.seed)
            .finish()
    }
}

impl Default for Environment {
    fn default() -> Self {
        Self::production()
    }
}

impl Environment {
    /// The monotonic clock, UDP sockets, log files made on threads, a seed from the wall clock.
    pub fn production() -> Self {
        Self {
            clock: NanoClock::new(),
            network: SharedNetwork::udp(),
            disk: SharedDisk::os(),
            log_files: LogFiles::Threaded,
            catch_up: true,
            bugs: PlantedBugs::default(),
            #[cfg(feature = "sim")]
            inline_log_cost: None,
            #[cfg(feature = "sim")]
            shuffle_agents: false,
            seed: None,
            draws: Arc::default(),
        }
    }

    /// `clock` and `network`, log files made inline, every random choice drawn from `seed`: a node that
    /// does the same thing each time it is given the same inputs.
    pub fn deterministic(clock: NanoClock, network: SharedNetwork, seed: u64) -> Self {
        Self {
            clock,
            network,
            disk: SharedDisk::os(),
            log_files: LogFiles::Inline,
            catch_up: true,
            bugs: PlantedBugs::default(),
            #[cfg(feature = "sim")]
            inline_log_cost: None,
            #[cfg(feature = "sim")]
            shuffle_agents: false,
            seed: Some(seed),
            draws: Arc::default(),
        }
    }

    /// Where a catch-up's nonces come from: the operating system's randomness, or (seeded) draws from the
    /// seed salted with `salt`.
    pub(super) fn nonces(&self, salt: u64) -> crate::storage::recording::catch_up::Nonces {
        use crate::storage::recording::catch_up::Nonces;
        match self.seed {
            None => Nonces::Os,
            Some(_) => {
                let env = self.clone();
                Nonces::Seeded(Arc::new(move || env.random(salt ^ 0xC47C_0000)))
            }
        }
    }

    /// A log file of `bytes` is being made on the consensus thread: the simulator's cost model is told
    /// (with the `sim` feature; nothing otherwise).
    pub(super) fn charge_inline_log(&self, bytes: usize) {
        #[cfg(feature = "sim")]
        if let Some(cost) = &self.inline_log_cost {
            cost.add(bytes);
        }
        #[cfg(not(feature = "sim"))]
        let _ = bytes;
    }

    /// The order a node's invoked agents run in each duty cycle: drawn from the seed (a permutation per
    /// cycle, salted with `salt`) in a seeded environment, the fixed order otherwise.
    pub(super) fn agent_order(&self, salt: u64) -> Option<crate::agent::AgentOrder> {
        #[cfg(feature = "sim")]
        let shuffle = self.shuffle_agents;
        #[cfg(not(feature = "sim"))]
        let shuffle = false;
        if !shuffle {
            return None;
        }
        self.seed?;
        let env = self.clone();
        Some(Arc::new(move |order: &mut [usize]| {
            // Fisher-Yates from the seed's draws.
            for i in (1..order.len()).rev() {
                let j = (env.random(salt ^ 0x0A6E_0000) % (i as u64 + 1)) as usize;
                order.swap(i, j);
            }
        }))
    }

    /// Whether this is the production environment's network (bare UDP sockets).
    pub(super) fn is_udp(&self) -> bool {
        self.network.is_udp()
    }

    /// A random 64-bit value, different on every call: from the seed, or from the wall clock mixed with
    /// `salt` (a member id) when there is none.
    pub(super) fn random(&self, salt: u64) -> u64 {
        let draw = self.draws.fetch_add(1, Ordering::Relaxed);
        let base = match self.seed {
            Some(seed) => seed,
            None => self.clock.epoch_ns() as u64,
        };
        mix(base ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ draw.wrapping_mul(0xD1B5_4A32_D192_ED03))
    }
}

/// SplitMix64's finaliser: spreads every input bit over the output.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seeded_environment_draws_the_same_sequence_and_each_draw_differs() {
        let time = crate::agent::clock::SimulatedTime::new(0);
        let env =
            |seed| Environment::deterministic(NanoClock::simulated(Arc::clone(&time)), SharedNetwork::udp(), seed);
        let (a, b) = (env(7), env(7));
        let first: Vec<u64> = (0..4).map(|_| a.random(1)).collect();
        let second: Vec<u64> = (0..4).map(|_| b.random(1)).collect();
        assert_eq!(first, second);
        assert!(first.windows(2).all(|w| w[0] != w[1]));
        assert_ne!(env(8).random(1), first[0]);
    }
}
