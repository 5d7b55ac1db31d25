//! The simulated cluster: members (a consensus core, a log and its storage, what a restart keeps), the
//! network, the clocks, the faults and the clients, all driven from one seed. It executes the cores'
//! outputs the way a driver must (in order, persisting before anything after), moves log data from
//! leader to followers itself (standing in for the Sender and Receiver), syncs the logs as the run's
//! sync policy says, and runs the checker after every step. The faults are in `cluster/faults.rs`, the
//! Sender, Receiver and client stand-ins in `cluster/replication.rs`, the storage's syncs in
//! `cluster/storage.rs`.

use std::fmt;

use quorumcast_consensus::consensus_core::{
    wire, Bugs, ConsensusCore, Destination, MemberId, Membership, Message, Output, Role, Timers,
};

use super::checker::{Check, Checker};
use super::log::{Entry, SimLog};
use super::network::{Faults, Network, Packet, Payload};
use super::prng::Rng;

mod faults;
mod membership;
mod replication;
mod sessions;
mod storage;

use faults::FaultRates;

/// One simulated millisecond per step.
pub const STEP_NS: u64 = 1_000_000;
const MS: u64 = 1_000_000;
/// Most entries a leader sends per fetch: each fetch sends a random number up to one of these, so
/// acknowledgements stop anywhere (a new term's base included) and a member back from a long crash
/// still catches up within the liveness bound.
const FETCH_BATCHES: [u64; 2] = [16, 256];
/// The longest a packet is delayed (see `Network::schedule`): packets sent before the faults stopped
/// may arrive this much later.
const MAX_DELAY_NS: u64 = 150 * MS;

/// When a member's log writes become durable, and when it may count them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Writes go to the page cache only (Aeron Archive's default): a process crash keeps them, a power
    /// loss keeps only what the operating system happened to write back. A member counts (the leader)
    /// and acknowledges (a follower) its log's end.
    None,
    /// Group commit: one fsync at a time covers everything written before it started. A member counts
    /// and acknowledges only its synced position, so a commit survives the power loss of any number of
    /// members.
    Batch,
}

/// A run's storage: its sync policy, how long a sync takes, and how often power is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Storage {
    pub policy: SyncPolicy,
    /// Each fsync takes between 0.1 ms and this (syncs complete at the step boundary after).
    pub max_sync_ns: u64,
    /// Per step of the chaos phase: one member, at random, loses power.
    pub power_loss_per_million: u64,
    /// Per step of the chaos phase: a majority of the members (all of them in half the cases) lose power
    /// at once.
    pub majority_power_loss_per_million: u64,
    /// The share of the other crashes (at random, and right after a vote, a commit or an election) that
    /// are power losses instead of process crashes.
    pub power_crash_share_per_million: u64,
}

impl Storage {
    /// Page cache only, and no power losses: what `none` promises to survive.
    pub const NONE: Storage = Storage {
        policy: SyncPolicy::None,
        max_sync_ns: MS,
        power_loss_per_million: 0,
        majority_power_loss_per_million: 0,
        power_crash_share_per_million: 0,
    };

    /// The storage of `seed`'s run: half the seeds sync in batches and lose power (some of them, a
    /// majority at once); the other half keep the page cache alone, which survives process crashes
    /// only, so they get no power losses (`none` promises nothing across one: see the tests that show it).
    pub fn for_seed(seed: u64) -> Self {
        let mut rng = Rng::derive(seed, 7);
        // Fast and slow disks; the slowest leaves a leader's last few entries un-synced for a while.
        let max_sync_ns = rng.pick(&[300_000, MS, 3 * MS, 20 * MS]);
        if rng.below(2) == 0 {
            return Storage { max_sync_ns, ..Storage::NONE };
        }
        Storage {
            policy: SyncPolicy::Batch,
            max_sync_ns,
            power_loss_per_million: rng.pick(&[0, 1_000, 3_000]),
            majority_power_loss_per_million: rng.pick(&[0, 300, 1_000]),
            power_crash_share_per_million: rng.pick(&[0, 300_000, 1_000_000]),
        }
    }
}

/// One run: its seed, and everything derived from it.
#[derive(Clone, Copy, Debug)]
pub struct SimConfig {
    pub seed: u64,
    pub members: usize,
    pub bugs: Bugs,
    pub storage: Storage,
    /// The members' timers: the defaults, or a narrow election timeout range that splits more votes.
    pub timers: Timers,
    /// Check votes and persisted terms directly (off: leave it to the end-to-end properties).
    pub check_votes: bool,
    /// Check directly that every committed entry is held by a majority of the logs (within what they
    /// synced, under `batch`), and that a power loss under `batch` leaves every member what it applied
    /// (off: leave it to the end-to-end properties).
    pub check_durability: bool,
    /// A driver broken on purpose: under `batch` it still syncs in batches, but hands its core the log's
    /// end as under `none`, so members count and acknowledge writes not yet synced.
    pub ack_unsynced: bool,
    /// How long the faults run.
    pub chaos_ns: u64,
    /// Once the faults stop (a majority up, connected, no loss), a client entry must commit within this.
    pub liveness_bound_ns: u64,
    /// Print role changes, crashes and restarts (`QC_SIM_TRACE=1`, for replaying one seed).
    pub trace: bool,
    /// Remote clients with sessions append beside the plain clients, and every member applies their
    /// entries to the session table (`cluster/sessions.rs`). Off in the default runs, whose seeds keep the
    /// trajectories their regressions were found on.
    pub sessions: bool,
    /// A member broken on purpose: it hands out every session message it applies, without asking its
    /// session table (so a resend is applied again).
    pub sessions_without_table: bool,
    /// Two spare members join the run, and leaders change the membership one member at a time during the
    /// faults (`cluster/membership.rs`). Off in the default runs, whose seeds keep their trajectories.
    pub membership: bool,
}

impl SimConfig {
    /// Even seeds run 3 members, odd seeds 5; faults for 3 to 5 simulated seconds.
    pub fn for_seed(seed: u64) -> Self {
        let timers = match Rng::derive(seed, 6).below(4) {
            0 => Timers::default(),
            1 => Timers { election_timeout_min_ns: 150 * MS, election_timeout_max_ns: 165 * MS, ..Timers::default() },
            // Hardly any randomization: members time out, canvass and stand in the same term together.
            2 => Timers { election_timeout_min_ns: 150 * MS, election_timeout_max_ns: 160 * MS, ..Timers::default() },
            _ => Timers {
                heartbeat_interval_ns: 5 * MS,
                heartbeat_timeout_ns: 25 * MS,
                election_timeout_min_ns: 30 * MS,
                election_timeout_max_ns: 36 * MS,
            },
        };
        Self {
            seed,
            members: if seed % 2 == 0 { 3 } else { 5 },
            bugs: Bugs::default(),
            storage: Storage::for_seed(seed),
            timers,
            check_votes: true,
            check_durability: true,
            ack_unsynced: false,
            chaos_ns: Rng::derive(seed, 1).between(3_000, 5_000) * MS,
            // Time for the packets delayed before the faults stopped to arrive, for the slowest
            // member's heartbeat timeout and election timeout to run out, then nine more election
            // timeouts for split canvasses and votes and for a lagging member to catch up.
            liveness_bound_ns: MAX_DELAY_NS + timers.heartbeat_timeout_ns + 10 * timers.election_timeout_max_ns,
            trace: std::env::var_os("QC_SIM_TRACE").is_some(),
            sessions: false,
            sessions_without_table: false,
            membership: false,
        }
    }
}

impl SimConfig {
    /// The members of the run: the initial configuration, and two spares that may join it.
    pub fn nodes(&self) -> usize {
        self.members + if self.membership { 2 } else { 0 }
    }
}

/// A property that failed, with what is needed to replay it.
#[derive(Clone, Debug)]
pub struct Violation {
    pub seed: u64,
    pub members: usize,
    pub bugs: Bugs,
    pub storage: Storage,
    pub ack_unsynced: bool,
    pub at_ns: u64,
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (seed, members, policy) = (self.seed, self.members, self.storage.policy);
        write!(f, "seed {seed} ({members} members, sync {policy:?}) at {} ms: {}", self.at_ns / MS, self.what)?;
        if self.storage != Storage::for_seed(seed) || self.ack_unsynced {
            let ack_unsynced = if self.ack_unsynced { ", acknowledging un-synced writes" } else { "" };
            write!(f, " (storage set by the test: {:?}{ack_unsynced})", self.storage)?;
            if self.bugs == Bugs::default() && !self.ack_unsynced && self.storage.policy == SyncPolicy::Batch {
                write!(f, "\n  replay: QC_SIM_SEED={seed} cargo test --test simulation batch_loses_nothing")?;
            }
            Ok(())
        } else if self.bugs == Bugs::default() {
            write!(f, "\n  replay: QC_SIM_SEED={} cargo test --test simulation", self.seed)
        } else {
            write!(f, " (core broken on purpose: {:?})", self.bugs)
        }
    }
}

/// What a run that held every property did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Summary {
    pub simulated_ns: u64,
    pub leaderships: u64,
    pub committed: usize,
    pub crashes: u64,
    /// Power losses (each member's, running or not), and the events where a majority lost power at once.
    pub power_losses: u64,
    pub majority_power_losses: u64,
    /// Un-synced entries that power losses took.
    pub lost_entries: u64,
    pub syncs: u64,
    /// Un-synced tails cut because the core did not know them (at a term start, or where a follower
    /// replicates from).
    pub cut_tails: u64,
    /// Whether the run synced in batches.
    pub batch: bool,
    pub partitions: u64,
    pub candidacies: u64,
    /// Uncommitted suffixes cut from followers' logs.
    pub truncations: u64,
    /// Terms with more than one candidate.
    pub contested_terms: u64,
    /// With sessions: messages the members' tables delivered, and resends they answered as duplicates.
    pub session_delivered: u64,
    pub session_duplicates: u64,
    /// With membership changes: configuration entries appended, and those committed.
    pub membership_changes: u64,
    pub committed_configurations: u64,
}

/// A member: its core while it runs, and what it keeps across a crash.
struct Node {
    id: MemberId,
    core: Option<ConsensusCore>,
    /// The log: a process crash keeps it whole, a power loss keeps what was synced (and maybe some of the
    /// rest).
    log: SimLog,
    /// Durable (synced before `Persist` returns): the last persisted term and vote.
    term: i64,
    vote: Option<MemberId>,
    /// The state machine: entries applied, and the position they end at. A process crash keeps it; a
    /// power loss keeps what the surviving log still holds (the application rebuilds from the log).
    applied: usize,
    applied_position: i64,
    /// Volatile: whose log data this member appends, set by `ReplicateFrom`.
    replicate_from: Option<(MemberId, i64)>,
    clock_offset_ns: u64,
    incarnation: u64,
    /// While crashed: when it restarts (`u64::MAX`: never).
    down_until: Option<u64>,
    /// Its application of remote clients' session entries (with `SimConfig::sessions`).
    sessions: sessions::SessionState,
}

pub struct Simulation {
    config: SimConfig,
    timers: Timers,
    now_ns: u64,
    nodes: Vec<Node>,
    network: Network,
    checker: Checker,
    faults: Rng,
    clients: Rng,
    rates: FaultRates,
    next_entry_id: u64,
    /// Once the faults stopped: the first entry id appended after.
    healed: Option<u64>,
    live: bool,
    /// Set while executing outputs: crash the member once its input is done (true: a power loss).
    crash_after_input: Option<bool>,
    /// Sync latencies.
    sync_latency: Rng,
    candidate_terms: std::collections::HashSet<i64>,
    summary: Summary,
    /// Remote clients with sessions (with `SimConfig::sessions`).
    sim_clients: Vec<sessions::SimClient>,
    /// Membership changes (with `SimConfig::membership`): the generator, every configuration appended
    /// (by its entry's id), and the committed ones in commit order.
    changes: Rng,
    configurations: std::collections::HashMap<u64, Membership>,
    committed_configurations: Vec<Membership>,
}

impl Simulation {
    pub fn new(config: SimConfig) -> Self {
        let seed = config.seed;
        let mut setup = Rng::derive(seed, 2);
        let faults = Faults {
            loss_per_million: setup.pick(&[0, 10_000, 50_000, 200_000]),
            duplicate_per_million: setup.pick(&[0, 10_000, 50_000]),
            max_delay_ns: setup.pick(&[MS, 5 * MS, 30 * MS, MAX_DELAY_NS]),
        };
        let rates = FaultRates::draw(&mut setup);
        let mut simulation = Self {
            config,
            timers: config.timers,
            now_ns: 0,
            nodes: Vec::new(),
            network: Network::new(Rng::derive(seed, 3), config.nodes(), faults),
            checker: Checker::new(config.check_votes),
            faults: Rng::derive(seed, 4),
            clients: Rng::derive(seed, 5),
            rates,
            next_entry_id: 1,
            healed: None,
            live: false,
            crash_after_input: None,
            sync_latency: Rng::derive(seed, 8),
            candidate_terms: std::collections::HashSet::new(),
            summary: Summary { batch: config.storage.policy == SyncPolicy::Batch, ..Summary::default() },
            sim_clients: if config.sessions { sessions::clients() } else { Vec::new() },
            changes: Rng::derive(seed, 9),
            configurations: std::collections::HashMap::new(),
            committed_configurations: vec![Membership::initial(&(1..=config.members as MemberId).collect::<Vec<_>>())],
        };
        for id in 1..=config.nodes() as MemberId {
            simulation.nodes.push(Node {
                id,
                core: None,
                log: SimLog::default(),
                term: 0,
                vote: None,
                applied: 0,
                applied_position: 0,
                replicate_from: None,
                clock_offset_ns: 0,
                incarnation: 0,
                down_until: Some(0),
                sessions: sessions::SessionState::default(),
            });
        }
        simulation
    }

    /// Runs until a client entry appended after the faults stopped is committed; the first property
    /// that fails ends the run.
    pub fn run(mut self) -> Result<Summary, Violation> {
        match self.run_steps() {
            Ok(()) => Ok(self.summary),
            Err(what) => {
                let (seed, members, bugs) = (self.config.seed, self.config.members, self.config.bugs);
                let storage = self.config.storage;
                let ack_unsynced = self.config.ack_unsynced;
                Err(Violation { seed, members, bugs, storage, ack_unsynced, at_ns: self.now_ns, what })
            }
        }
    }

    fn run_steps(&mut self) -> Check {
        let deadline = self.config.chaos_ns + self.config.liveness_bound_ns;
        while self.now_ns < deadline {
            self.now_ns += STEP_NS;
            if self.now_ns < self.config.chaos_ns {
                self.inject_faults()?;
            } else if self.healed.is_none() {
                self.heal()?;
            }
            self.restart_due()?;
            self.complete_syncs()?;
            self.deliver()?;
            self.tick()?;
            self.fetch();
            self.client_append()?;
            if self.config.membership && self.now_ns < self.config.chaos_ns {
                self.change_membership()?;
            }
            if self.config.sessions {
                self.session_clients()?;
            }
            self.after_step()?;
            if self.live {
                self.check_sessions()?;
                self.summary.simulated_ns = self.now_ns;
                self.summary.committed = self.checker.committed.len();
                self.summary.committed_configurations = self.committed_configurations.len() as u64 - 1;
                return Ok(());
            }
        }
        Err(format!(
            "liveness: the faults stopped at {} ms, and no client entry appended since committed within {} ms",
            self.config.chaos_ns / MS,
            self.config.liveness_bound_ns / MS
        ))
    }

    // -----------------------------------------------------------------------------------------------
    // Driving the cores
    // -----------------------------------------------------------------------------------------------

    fn trace(&self, event: fmt::Arguments<'_>) {
        if self.config.trace {
            eprintln!("{:>8.3} ms  {event}", self.now_ns as f64 / MS as f64);
        }
    }

    fn local_now(&self, index: usize) -> u64 {
        self.now_ns + self.nodes[index].clock_offset_ns
    }

    /// Gives a running member's core one input and executes its outputs.
    fn input(&mut self, index: usize, f: impl FnOnce(&mut ConsensusCore, u64, &mut Vec<Output>)) -> Check {
        let now = self.local_now(index);
        let Some(core) = self.nodes[index].core.as_mut() else { return Ok(()) };
        let mut out = Vec::new();
        f(core, now, &mut out);
        out.into_iter().try_for_each(|output| self.execute(index, output))?;
        if let Some(power) = self.crash_after_input.take().filter(|_| self.healed.is_none()) {
            let down = if self.faults.below(3) > 0 { 0 } else { self.faults.between(MS, 30 * MS) };
            if power {
                self.power_loss(&[index], self.now_ns + down)?;
            } else {
                self.crash(index, self.now_ns + down);
            }
        }
        Ok(())
    }

    /// Executes one output as a driver must; see `quorumcast_consensus::consensus_core::output`.
    fn execute(&mut self, index: usize, output: Output) -> Check {
        let id = self.nodes[index].id;
        match output {
            Output::Persist { leadership_term_id, voted_for } => {
                let node = &mut self.nodes[index];
                self.checker.on_persist(id, node.term, leadership_term_id, voted_for)?;
                node.term = leadership_term_id;
                node.vote = voted_for;
                if voted_for.is_some_and(|vote| vote != id) {
                    self.crash_after(self.rates.crash_after_vote_per_million);
                }
            }
            Output::Send { to, message } => {
                self.send(index, to, &message)?;
                if matches!(message, Message::AppendPosition { .. }) {
                    self.crash_after(self.rates.crash_after_ack_per_million);
                }
            }
            Output::RoleChange { role, leadership_term_id, leader_member_id } => {
                self.trace(format_args!(
                    "member {id}: {role} in term {leadership_term_id}, leader {leader_member_id:?}"
                ));
                self.nodes[index].replicate_from = None;
                if role == Role::Candidate {
                    self.summary.candidacies += 1;
                    if !self.candidate_terms.insert(leadership_term_id) {
                        self.summary.contested_terms += 1;
                    }
                }
                if role == Role::Leader {
                    self.crash_after(self.rates.crash_after_election_per_million);
                    self.summary.leaderships += 1;
                    self.checker.on_leader(id, leadership_term_id)?;
                } else {
                    self.checker.forget_leader_log(id);
                }
            }
            Output::AppendTermStart { leadership_term_id, position } => {
                self.cut_unknown_tail(index, position, "term start")?;
                let log = &mut self.nodes[index].log;
                log.push(Entry::plain(leadership_term_id, self.next_entry_id, 32, false));
                self.next_entry_id += 1;
                self.written(index, leadership_term_id)?;
            }
            Output::Truncate { position } => {
                let node = &mut self.nodes[index];
                self.checker.on_truncate(id, position, node.applied_position)?;
                self.summary.truncations += 1;
                if !node.log.truncate(position) {
                    return Err(format!("member {id}: truncation to {position}, not an entry boundary"));
                }
                self.check_held_after_cut(index, "a truncation")?;
            }
            Output::ReplicateFrom { leader_member_id, leadership_term_id, position } => {
                self.cut_unknown_tail(index, position, "replicate")?;
                self.nodes[index].replicate_from = Some((leader_member_id, leadership_term_id));
            }
            Output::Commit { position } => {
                self.check_counted_voters(index, position)?;
                self.apply(index, position)?;
                if self.nodes[index].core.as_ref().is_some_and(|core| core.role() == Role::Leader) {
                    self.crash_after(self.rates.crash_after_commit_per_million);
                }
            }
            Output::MembershipChanged { membership_id } => {
                if let Some(core) = &self.nodes[index].core {
                    let m = core.membership();
                    let (voters, learners) = (&m.voters, &m.learners);
                    self.trace(format_args!(
                        "member {id}: configuration {membership_id}: voters {voters:?}, learners {learners:?}"
                    ));
                }
            }
            Output::Error(error) => return Err(format!("member {id}: the core refused: {error}")),
        }
        Ok(())
    }

    /// Sets the member to crash once the current input is done, with probability `per_million`: a
    /// power loss for the run's share of crashes.
    fn crash_after(&mut self, per_million: u64) {
        if self.crash_after_input.is_none() && self.faults.chance(per_million) {
            let power = self.faults.chance(self.config.storage.power_crash_share_per_million);
            self.crash_after_input = Some(power);
        }
    }

    /// Applies the log up to the new commit position, checking it against every other member's.
    fn apply(&mut self, index: usize, position: i64) -> Check {
        let node = &mut self.nodes[index];
        self.checker.on_commit(node.id, node.applied_position, position, &node.log)?;
        let term = node.core.as_ref().map_or(0, |c| c.leadership_term_id());
        let count = node.log.count_at(position).unwrap_or(node.applied);
        let known = self.checker.committed.len();
        for entry_index in node.applied..count {
            let entry = node.log.entries()[entry_index];
            self.checker.on_apply(node.id, term, entry_index, entry.id)?;
            if entry.membership && entry_index >= known {
                self.committed_configurations.push(self.configurations[&entry.id].clone());
            }
            if entry.client && self.healed.is_some_and(|first| entry.id >= first) {
                self.live = true;
            }
        }
        node.applied = count;
        node.applied_position = position;
        self.apply_sessions(index, count)?;
        // Entries committed for the first time: held by a majority, and under `batch` synced by one.
        self.check_held(known, "commit")
    }

    /// Sends through the wire format, as a real driver would.
    fn send(&mut self, index: usize, to: Destination, message: &Message) -> Check {
        let from = self.nodes[index].id;
        let mut bytes = [0u8; wire::MAX_CONSENSUS_FRAME_LENGTH];
        let length = wire::encode(from, message, &mut bytes).map_err(|e| format!("encode {message:?}: {e}"))?;
        let frame = bytes[..length].to_vec();
        let now = self.now_ns;
        match to {
            Destination::Member(to) => {
                self.network.send(Packet { from, to, payload: Payload::Frame(frame) }, now);
            }
            Destination::Others => {
                // Every other member of the sender's configuration in effect.
                let others = self.nodes[index].core.as_ref().map(|core| core.followers()).unwrap_or_default();
                for to in others {
                    self.network.send(Packet { from, to, payload: Payload::Frame(frame.clone()) }, now);
                }
            }
        }
        Ok(())
    }

    fn deliver(&mut self) -> Check {
        while let Some(packet) = self.network.next_due(self.now_ns) {
            let index = packet.to as usize - 1;
            if self.nodes[index].core.is_none() {
                continue;
            }
            match packet.payload {
                Payload::Frame(bytes) => {
                    let (sender, message) = wire::decode(&bytes).map_err(|e| format!("decode: {e}"))?;
                    if sender != packet.from {
                        return Err(format!("a frame from {} decoded as from {sender}", packet.from));
                    }
                    self.input(index, |core, now, out| core.on_message(sender, message, now, out))?;
                }
                Payload::Fetch { term, position } => self.serve_fetch(index, packet.from, term, position),
                Payload::Data { term, position, entries } => {
                    self.accept_data(index, packet.from, term, position, entries)?
                }
            }
        }
        Ok(())
    }

    fn tick(&mut self) -> Check {
        (0..self.nodes.len()).try_for_each(|index| self.input(index, |core, now, out| core.tick(now, out)))
    }

    /// The checks that read state the step may have changed anywhere.
    fn after_step(&mut self) -> Check {
        for node in &self.nodes {
            let Some(core) = &node.core else { continue };
            let known = self.known_end(node);
            if core.append_position() != known {
                let (append, end, synced) = (core.append_position(), node.log.end(), node.log.synced());
                return Err(format!(
                    "member {}: core append {append} != {known} (log end {end}, synced {synced})",
                    node.id
                ));
            }
            if core.commit_position() != node.applied_position {
                let (commit, applied) = (core.commit_position(), node.applied_position);
                return Err(format!("member {}: core commit {commit} != applied {applied}", node.id));
            }
            if core.role() == Role::Leader {
                self.checker.check_leader_log(node.id, core.leadership_term_id(), &node.log)?;
            }
        }
        Ok(())
    }
}
