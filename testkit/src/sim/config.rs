//! What one simulated run is ([`SimConfig`]) and which faults it draws ([`Schedule`]).

use super::*;

/// What one simulated run is.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The seed every draw comes from.
    pub seed: u64,
    /// Members: 3 or 5.
    pub members: usize,
    /// Simulated time with faults, ns.
    pub fault_ns: u64,
    /// The term length of the log (small, so that terms rotate often).
    pub term_length: usize,
    /// Where the log is kept: recorded (`Some(sync)`, the default storage) or only in memory (`None`).
    pub storage: Option<SyncPolicy>,
    /// Bugs planted in every node (to prove the checker catches them).
    pub bugs: PlantedBugs,
    /// The modelled time a node's consensus thread is busy per byte of a log file it makes itself (no
    /// spare ready), ns per KiB: its sends meanwhile leave when it is done, and it runs nothing else.
    /// 0: free.
    pub log_cost_ns_per_kib: u64,
    /// Which faults are drawn (a seed's run depends on it: regression seeds keep the one they were found
    /// with).
    pub schedule: Schedule,
    /// A hostile host forges members' frames and holds catch-up streams open (see [`forge`]); off in the
    /// regression seeds, which keep the schedule they were found with.
    pub hostile: bool,
    /// Every datagram of the log and consensus channels is authenticated with a shared key, and the
    /// hostile host also spoofs members' addresses.
    pub auth: bool,
    /// Without a key, the hostile host spoofs members' log endpoints with frames of sessions of its own
    /// (off in the regression seeds found before).
    pub spoof_sessions: bool,
    /// Each node's own agents run in an order drawn from the seed in every duty cycle (as a node whose
    /// agents have threads of their own interleaves them), instead of their fixed order; off in the
    /// regression seeds, which keep the schedule they were found with.
    pub shuffle_agents: bool,
    /// Members apply through `Node::poll_state` to a [`state::SimState`], snapshot it every
    /// [`SNAPSHOT_INTERVAL`] bytes of log in 64 KiB segments (so the recording is compacted below the
    /// snapshots and a member far behind is sent a snapshot), and restore it at every restart; off in the
    /// regression seeds found before (they apply through `poll_positions`, with no snapshot).
    pub snapshots: bool,
    /// A failing disk may misdirect writes (the bytes land at another offset of the file, silently):
    /// drawn beside its other faults under [`Schedule::Disk`]; off in the regression seeds found before.
    pub misdirect: bool,
    /// Remote clients ([`clients`]) offering through sessions beside the local client (the members serve
    /// clients at their client endpoints).
    pub clients: usize,
    /// Membership changes at random steps (the simulator's `membership` module): one node more than
    /// `members` (a spare outside the initial configuration), added, promoted and removed in turn while the
    /// faults run.
    pub membership: bool,
    /// With [`membership`](Self::membership): the node files of the initial configuration's members name
    /// only those members (as an operator's node files do when a member is added later), the spare's
    /// names every node; a member then learns the spare's endpoints from the configuration entries its
    /// log holds, at a restart too. Off in the membership regression seeds found before.
    pub narrow_node_files: bool,
    /// The members' application is a service ([`service`]): timers, sessions refused and closed by it,
    /// entries of its own, each callback checked and compared across members. Needs
    /// [`snapshots`](Self::snapshots) (it runs through `Node::poll_state`); off in the seeds found before.
    pub service: bool,
    /// Fragments each member's application takes from its node per step (256): fewer make a slow
    /// application, whose replay of a recorded log outlasts an election after a restart.
    pub apply_per_step: usize,
    /// Print what happened, step by step, to stderr.
    pub trace: bool,
}

/// How much log a member applies between two snapshots, when [`SimConfig::snapshots`] is on.
pub const SNAPSHOT_INTERVAL: u64 = 96 << 10;

impl SimConfig {
    /// A run of `members` nodes from `seed`, 2 s of faults, 64 KiB terms, the log recorded with sync `none`.
    pub fn new(seed: u64, members: usize) -> Self {
        Self {
            seed,
            members,
            fault_ns: 2_000_000_000,
            term_length: 64 * 1024,
            storage: Some(SyncPolicy::None),
            schedule: Schedule::Full,
            bugs: PlantedBugs::default(),
            log_cost_ns_per_kib: 0,
            hostile: false,
            auth: false,
            spoof_sessions: false,
            shuffle_agents: false,
            snapshots: false,
            misdirect: false,
            clients: 0,
            membership: false,
            narrow_node_files: false,
            service: false,
            apply_per_step: 256,
            trace: false,
        }
    }
}

/// Which faults a run draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// The network's faults and paused nodes (the first schedule, kept so that the regression seeds found
    /// with it replay as they were found).
    Network,
    /// Those, and restarts of any member (its process stopped and started again on its data directory),
    /// jumps of a member's clocks, and datagrams from a host outside the cluster (random bytes, and
    /// replays of members' datagrams from the outsider's address).
    Full,
    /// Those, and a member's process crashing without closing, power losses of one member or a majority
    /// (under `batch`), and a member's disk failing for a while.
    Disk,
}
