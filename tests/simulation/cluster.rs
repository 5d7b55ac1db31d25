//! The simulated cluster: members (a consensus core, a log, what a restart keeps), the network, the
//! clocks, the faults and the clients, all driven from one seed. It executes the cores' outputs the way
//! a driver must (in order, persisting before anything after), moves log data from leader to followers
//! itself (standing in for the Sender and Receiver), and runs the checker after every step. The faults
//! are in `faults.rs`, the Sender, Receiver and client stand-ins in `replication.rs`.

use std::fmt;

use quorumcast::consensus_core::{wire, Bugs, ConsensusCore, Destination, MemberId, Message, Output, Role, Timers};

use super::checker::{Check, Checker};
use super::log::{Entry, SimLog};
use super::network::{Faults, Network, Packet, Payload};
use super::prng::Rng;

#[path = "faults.rs"]
mod faults;
#[path = "replication.rs"]
mod replication;

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

/// One run: its seed, and everything derived from it.
#[derive(Clone, Copy, Debug)]
pub struct SimConfig {
    pub seed: u64,
    pub members: usize,
    pub bugs: Bugs,
    /// The members' timers: the defaults, or a narrow election timeout range that splits more votes.
    pub timers: Timers,
    /// Check votes and persisted terms directly (off: leave it to the end-to-end properties).
    pub check_votes: bool,
    /// How long the faults run.
    pub chaos_ns: u64,
    /// Once the faults stop (a majority up, connected, no loss), a client entry must commit within this.
    pub liveness_bound_ns: u64,
    /// Print role changes, crashes and restarts (`QC_SIM_TRACE=1`, for replaying one seed).
    pub trace: bool,
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
            timers,
            check_votes: true,
            chaos_ns: Rng::derive(seed, 1).between(3_000, 5_000) * MS,
            // Time for the packets delayed before the faults stopped to arrive, for the slowest
            // member's heartbeat timeout and election timeout to run out, then nine more election
            // timeouts for split canvasses and votes and for a lagging member to catch up.
            liveness_bound_ns: MAX_DELAY_NS + timers.heartbeat_timeout_ns + 10 * timers.election_timeout_max_ns,
            trace: std::env::var_os("QC_SIM_TRACE").is_some(),
        }
    }
}

/// A property that failed, with what is needed to replay it.
#[derive(Clone, Debug)]
pub struct Violation {
    pub seed: u64,
    pub members: usize,
    pub bugs: Bugs,
    pub at_ns: u64,
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed {} ({} members) at {} ms: {}", self.seed, self.members, self.at_ns / MS, self.what)?;
        if self.bugs == Bugs::default() {
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
    pub partitions: u64,
    pub candidacies: u64,
    /// Uncommitted suffixes cut from followers' logs.
    pub truncations: u64,
    /// Terms with more than one candidate.
    pub contested_terms: u64,
}

/// A member: its core while it runs, and what it keeps across a crash.
struct Node {
    id: MemberId,
    core: Option<ConsensusCore>,
    /// Durable: the whole log.
    log: SimLog,
    /// Durable: the last persisted term and vote.
    term: i64,
    vote: Option<MemberId>,
    /// Durable (the state machine): entries applied, and the position they end at.
    applied: usize,
    applied_position: i64,
    /// Volatile: whose log data this member appends, set by `ReplicateFrom`.
    replicate_from: Option<(MemberId, i64)>,
    clock_offset_ns: u64,
    incarnation: u64,
    /// While crashed: when it restarts (`u64::MAX`: never).
    down_until: Option<u64>,
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
    /// Set while executing outputs: crash the member once its input is done.
    crash_after_input: bool,
    candidate_terms: std::collections::HashSet<i64>,
    summary: Summary,
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
            network: Network::new(Rng::derive(seed, 3), config.members, faults),
            checker: Checker::new(config.check_votes),
            faults: Rng::derive(seed, 4),
            clients: Rng::derive(seed, 5),
            rates,
            next_entry_id: 1,
            healed: None,
            live: false,
            crash_after_input: false,
            candidate_terms: std::collections::HashSet::new(),
            summary: Summary::default(),
        };
        for id in 1..=config.members as MemberId {
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
                Err(Violation { seed, members, bugs, at_ns: self.now_ns, what })
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
                self.heal();
            }
            self.restart_due()?;
            self.deliver()?;
            self.tick()?;
            self.fetch();
            self.client_append()?;
            self.after_step()?;
            if self.live {
                self.summary.simulated_ns = self.now_ns;
                self.summary.committed = self.checker.committed.len();
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
        if std::mem::take(&mut self.crash_after_input) && self.healed.is_none() {
            let down = if self.faults.below(3) > 0 { 0 } else { self.faults.between(MS, 30 * MS) };
            self.crash(index, self.now_ns + down);
        }
        Ok(())
    }

    /// Executes one output as a driver must; see `quorumcast::consensus_core::output`.
    fn execute(&mut self, index: usize, output: Output) -> Check {
        let id = self.nodes[index].id;
        match output {
            Output::Persist { leadership_term_id, voted_for } => {
                let node = &mut self.nodes[index];
                self.checker.on_persist(id, node.term, leadership_term_id, voted_for)?;
                node.term = leadership_term_id;
                node.vote = voted_for;
                if voted_for.is_some_and(|vote| vote != id) {
                    self.crash_after_input |= self.faults.chance(self.rates.crash_after_vote_per_million);
                }
            }
            Output::Send { to, message } => self.send(index, to, &message)?,
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
                    self.crash_after_input |= self.faults.chance(self.rates.crash_after_election_per_million);
                    self.summary.leaderships += 1;
                    self.checker.on_leader(id, leadership_term_id)?;
                } else {
                    self.checker.forget_leader_log(id);
                }
            }
            Output::AppendTermStart { leadership_term_id, position } => {
                let log = &mut self.nodes[index].log;
                if position != log.end() {
                    return Err(format!("member {id}: term start at {position}, but its log ends at {}", log.end()));
                }
                log.push(Entry { term: leadership_term_id, id: self.next_entry_id, length: 32, client: false });
                self.next_entry_id += 1;
                let end = log.end();
                self.input(index, |core, now, out| core.on_append_position(leadership_term_id, end, now, out))?;
            }
            Output::Truncate { position } => {
                let node = &mut self.nodes[index];
                self.checker.on_truncate(id, position, node.applied_position)?;
                self.summary.truncations += 1;
                if !node.log.truncate(position) {
                    return Err(format!("member {id}: truncation to {position}, not an entry boundary"));
                }
            }
            Output::ReplicateFrom { leader_member_id, leadership_term_id, position } => {
                let node = &mut self.nodes[index];
                if position != node.log.end() {
                    return Err(format!(
                        "member {id}: replicate from {position}, but its log ends at {}",
                        node.log.end()
                    ));
                }
                node.replicate_from = Some((leader_member_id, leadership_term_id));
            }
            Output::Commit { position } => {
                self.apply(index, position)?;
                if self.nodes[index].core.as_ref().is_some_and(|core| core.role() == Role::Leader) {
                    self.crash_after_input |= self.faults.chance(self.rates.crash_after_commit_per_million);
                }
            }
            Output::Error(error) => return Err(format!("member {id}: the core refused: {error}")),
        }
        Ok(())
    }

    /// Applies the log up to the new commit position, checking it against every other member's.
    fn apply(&mut self, index: usize, position: i64) -> Check {
        let node = &mut self.nodes[index];
        self.checker.on_commit(node.id, node.applied_position, position, &node.log)?;
        let term = node.core.as_ref().map_or(0, |c| c.leadership_term_id());
        let count = node.log.count_at(position).unwrap_or(node.applied);
        for entry_index in node.applied..count {
            let entry = node.log.entries()[entry_index];
            self.checker.on_apply(node.id, term, entry_index, entry.id)?;
            if entry.client && self.healed.is_some_and(|first| entry.id >= first) {
                self.live = true;
            }
        }
        node.applied = count;
        node.applied_position = position;
        Ok(())
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
                for to in (1..=self.config.members as MemberId).filter(|&to| to != from) {
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
            if core.append_position() != node.log.end() {
                return Err(format!(
                    "member {}: core append {} != log end {}",
                    node.id,
                    core.append_position(),
                    node.log.end()
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
