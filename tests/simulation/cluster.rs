//! The simulated cluster: members (a consensus core, a log, what a restart keeps), the network, the
//! clocks, the faults and the clients, all driven from one seed. It executes the cores' outputs the way
//! a driver must (in order, persisting before anything after), moves log data from leader to followers
//! itself (standing in for the Sender and Receiver), and runs the checker after every step.

use std::fmt;

use quorumcast::consensus_core::{
    wire, Bugs, ConsensusCore, CoreConfig, Destination, DurableState, MemberId, Message, Output, Role, Timers,
};

use super::checker::{Check, Checker};
use super::log::{Entry, SimLog};
use super::network::{Faults, Network, Packet, Payload};
use super::prng::Rng;

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

/// How often each fault strikes during the chaos phase, per step.
#[derive(Clone, Copy, Debug)]
struct FaultRates {
    crash_per_million: u64,
    max_down_ns: u64,
    partition_per_million: u64,
    heal_per_million: u64,
    clock_jump_per_million: u64,
    junk_per_million: u64,
    /// A member that just persisted a vote for another crashes once the input is done (power lost
    /// right after the sync), and restarts at once or within 30 ms: where a forgotten vote would count twice.
    crash_after_vote_per_million: u64,
    /// A leader whose commit position just advanced crashes once the input is done: where a leader
    /// that committed an earlier term's entries by counting replicas would leave them to be lost.
    crash_after_commit_per_million: u64,
    /// A member that just won an election crashes once the input is done, before its term-start
    /// marker reaches anyone: its term's bytes then live in its log alone.
    crash_after_election_per_million: u64,
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
        let rates = FaultRates {
            crash_per_million: setup.pick(&[0, 1_000, 3_000, 10_000]),
            max_down_ns: setup.pick(&[20, 300, 1_000]) * MS,
            partition_per_million: setup.pick(&[0, 1_000, 4_000]),
            heal_per_million: setup.pick(&[2_000, 10_000]),
            clock_jump_per_million: setup.pick(&[0, 500, 2_000]),
            junk_per_million: setup.pick(&[0, 2_000]),
            crash_after_vote_per_million: setup.pick(&[0, 200_000, 1_000_000]),
            crash_after_commit_per_million: setup.pick(&[0, 2_000, 20_000]),
            crash_after_election_per_million: setup.pick(&[0, 100_000, 300_000]),
        };
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
    // Faults
    // -----------------------------------------------------------------------------------------------

    fn inject_faults(&mut self) -> Check {
        let rates = self.rates;
        if self.faults.chance(rates.crash_per_million) {
            let index = self.faults.below(self.nodes.len() as u64) as usize;
            let down = self.faults.between(MS, rates.max_down_ns);
            self.crash(index, self.now_ns + down);
        }
        if self.network.partitioned() {
            if self.faults.chance(rates.heal_per_million) {
                self.network.heal();
            }
        } else if self.faults.chance(rates.partition_per_million) {
            self.summary.partitions += 1;
            self.network.partition(&mut self.faults);
        }
        if self.faults.chance(rates.clock_jump_per_million) {
            let index = self.faults.below(self.nodes.len() as u64) as usize;
            let jump = self.faults.between(10, 1_000) * MS;
            self.nodes[index].clock_offset_ns += jump;
            self.trace(format_args!("member {}'s clock jumps {} ms forward", index + 1, jump / MS));
        }
        if self.faults.chance(rates.junk_per_million) {
            self.inject_junk()?;
        }
        Ok(())
    }

    fn crash(&mut self, index: usize, until_ns: u64) {
        self.trace(format_args!("member {} crashes until {} ms", index + 1, until_ns / MS));
        let node = &mut self.nodes[index];
        if node.core.take().is_some() {
            self.summary.crashes += 1;
        }
        node.replicate_from = None;
        node.down_until = Some(node.down_until.map_or(until_ns, |at| at.max(until_ns)));
        self.checker.forget_leader_log(node.id);
    }

    /// The faults stop: the network heals and loses nothing, clocks stop jumping, and every member
    /// restarts, except (in half the runs) a minority that stays down.
    fn heal(&mut self) {
        self.network.heal();
        self.network.faults = Faults::NONE;
        let minority = (self.nodes.len() - 1) / 2;
        let stay_down = if self.faults.below(2) == 0 { self.faults.between(0, minority as u64) as usize } else { 0 };
        for index in 0..self.nodes.len() {
            if index < stay_down {
                self.crash(index, u64::MAX);
            } else if self.nodes[index].down_until.is_some() {
                self.nodes[index].down_until = Some(self.now_ns);
            }
        }
        self.healed = Some(self.next_entry_id);
        self.trace(format_args!("faults stop; {stay_down} member(s) stay down; timers {:?}", self.timers));
    }

    fn restart_due(&mut self) -> Check {
        for index in 0..self.nodes.len() {
            if self.nodes[index].down_until.is_some_and(|at| at <= self.now_ns) {
                self.restart(index)?;
            }
        }
        Ok(())
    }

    /// Starts a core from what the member persisted: its term and vote, its log, and what it applied.
    fn restart(&mut self, index: usize) -> Check {
        let now = self.local_now(index);
        let node = &mut self.nodes[index];
        node.down_until = None;
        node.incarnation += 1;
        let config = CoreConfig {
            member_id: node.id,
            members: (1..=self.config.members as MemberId).collect(),
            timers: self.timers,
            seed: Rng::derive(self.config.seed, 1000 * node.id as u64 + node.incarnation).next_u64(),
            bugs: self.config.bugs,
        };
        let durable = DurableState {
            leadership_term_id: node.term,
            voted_for: node.vote,
            term_history: node.log.term_history(),
            append_position: node.log.end(),
            commit_position: node.applied_position,
        };
        let core = ConsensusCore::new(config, durable, now).map_err(|e| format!("member {} restart: {e}", node.id))?;
        node.core = Some(core);
        Ok(())
    }

    /// Junk a correct core must drop: undecodable bytes, messages from non-members, requests from a
    /// member configured with another member list.
    fn inject_junk(&mut self) -> Check {
        let index = self.faults.below(self.nodes.len() as u64) as usize;
        let Some(core) = &self.nodes[index].core else { return Ok(()) };
        let term = core.leadership_term_id();
        let members = self.config.members as MemberId;
        let before = *core.counters();
        match self.faults.below(3) {
            0 => {
                let length = self.faults.below(64) as usize;
                let bytes: Vec<u8> = (0..length).map(|_| self.faults.next_u64() as u8).collect();
                if let Ok((sender, message)) = wire::decode(&bytes) {
                    if !(1..=members).contains(&sender) {
                        self.input(index, |core, now, out| core.on_message(sender, message, now, out))?;
                    }
                }
            }
            1 => {
                let stranger = members + 1 + self.faults.below(100) as MemberId;
                let message = Message::NewLeadershipTerm {
                    leadership_term_id: term + 1,
                    log_leadership_term_id: 0,
                    next_leadership_term_id: term + 1,
                    next_term_base_position: 0,
                    commit_position: 0,
                };
                self.input(index, |core, now, out| core.on_message(stranger, message, now, out))?;
                self.expect_counted(index, before.non_member, |c| c.non_member)?;
            }
            _ => {
                let member = 1 + self.faults.below(members as u64) as MemberId;
                if member != self.nodes[index].id {
                    let message = Message::RequestVote {
                        candidate_term_id: term + 1,
                        log_leadership_term_id: i64::MAX / 2,
                        log_position: i64::MAX / 2,
                        membership_hash: 0xbad,
                    };
                    self.input(index, |core, now, out| core.on_message(member, message, now, out))?;
                    self.expect_counted(index, before.membership_mismatch, |c| c.membership_mismatch)?;
                    let after = self.nodes[index].core.as_ref().map_or(term, |c| c.leadership_term_id());
                    if after != term {
                        return Err(format!("a foreign vote request moved member {member}'s term to {after}"));
                    }
                }
            }
        }
        Ok(())
    }

    fn expect_counted(
        &self,
        index: usize,
        before: u64,
        counter: impl Fn(&quorumcast::consensus_core::CoreCounters) -> u64,
    ) -> Check {
        let after = self.nodes[index].core.as_ref().map_or(before + 1, |c| counter(c.counters()));
        if after == before + 1 {
            Ok(())
        } else {
            Err(format!("member {} did not count a junk message ({before} -> {after})", index + 1))
        }
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

    /// Each replicating follower asks its leader for the log past its end (the Receiver's stand-in).
    fn fetch(&mut self) {
        for index in 0..self.nodes.len() {
            let node = &self.nodes[index];
            if let (Some(_), Some((leader, term))) = (&node.core, node.replicate_from) {
                let fetch = Payload::Fetch { term, position: node.log.end() };
                let packet = Packet { from: node.id, to: leader, payload: fetch };
                self.network.send(packet, self.now_ns);
            }
        }
    }

    /// The leader of `term` sends its log from `position` (the Sender's stand-in).
    fn serve_fetch(&mut self, index: usize, to: MemberId, term: i64, position: i64) {
        let most = self.faults.pick(&FETCH_BATCHES);
        let batch = self.faults.between(1, most) as usize;
        let node = &self.nodes[index];
        let Some(core) = &node.core else { return };
        if core.role() != Role::Leader || core.leadership_term_id() != term {
            return;
        }
        if let Some(entries) = node.log.entries_from(position, batch).filter(|e| !e.is_empty()) {
            let payload = Payload::Data { term, position, entries: entries.to_vec() };
            let packet = Packet { from: node.id, to, payload };
            self.network.send(packet, self.now_ns);
        }
    }

    /// A follower appends its leader's log data, one term's run at a time, if it continues its log.
    fn accept_data(&mut self, index: usize, from: MemberId, term: i64, position: i64, entries: Vec<Entry>) -> Check {
        if self.nodes[index].replicate_from != Some((from, term)) || self.nodes[index].log.end() != position {
            return Ok(());
        }
        let mut rest = &entries[..];
        while let Some(first) = rest.first() {
            if self.nodes[index].replicate_from != Some((from, term)) {
                break;
            }
            let run = rest.iter().take_while(|e| e.term == first.term).count();
            let run_term = first.term;
            rest[..run].iter().for_each(|&entry| self.nodes[index].log.push(entry));
            rest = &rest[run..];
            let end = self.nodes[index].log.end();
            self.input(index, |core, now, out| core.on_append_position(run_term, end, now, out))?;
        }
        Ok(())
    }

    /// Half the steps, a client appends an entry at a member that leads and has started its term.
    fn client_append(&mut self) -> Check {
        if self.clients.below(2) == 0 {
            return Ok(());
        }
        let leaders: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| {
                let node = &self.nodes[i];
                node.core.as_ref().is_some_and(|c| {
                    c.role() == Role::Leader
                        && node.log.entries().last().map(|e| e.term) == Some(c.leadership_term_id())
                })
            })
            .collect();
        if leaders.is_empty() {
            return Ok(());
        }
        let index = leaders[self.clients.below(leaders.len() as u64) as usize];
        let term = self.nodes[index].core.as_ref().map_or(0, |c| c.leadership_term_id());
        let length = self.clients.between(1, 16) as i64 * 32;
        let log = &mut self.nodes[index].log;
        log.push(Entry { term, id: self.next_entry_id, length, client: true });
        self.next_entry_id += 1;
        let end = log.end();
        self.input(index, |core, now, out| core.on_append_position(term, end, now, out))
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
