//! The node simulator: 3 or 5 real [`Node`]s (the type an application embeds) in one thread, each in
//! invoker mode with a simulated clock, all on one [`SimNetwork`], every step's order and every fault drawn
//! from one seed, so that a seed replays exactly.
//!
//! A step moves the simulated time on by a drawn quantum, delivers what the network has due, and invokes
//! every running node's agents in a drawn order (a paused node, as `SIGSTOP` pauses a process, is skipped
//! while time goes on; with [`SimConfig::shuffle_agents`] each node's own agents run in a drawn order
//! too), then hands each node's committed entries to the checker. Meanwhile a client offers numbered
//! messages to whichever node leads, and (with [`SimConfig::clients`]) remote clients offer through
//! sessions ([`clients`]). Faults come and go during the first part of a run (loss, duplication, delay
//! and so reordering, links cut one way or both, a paused node, a clamped path MTU, restarts, clock
//! jumps, datagrams from a host outside the cluster, and under [`Schedule::Disk`] crashes, power losses
//! and failing disks; with [`SimConfig::hostile`] a hostile host, [`forge`]); then the network heals and
//! the run must make progress.
//!
//! What it checks after every step (its `check` module): one committed order (every node's applied
//! entries are a prefix of one sequence, none skipped, none changed); every entry applied is a message a
//! client offered, applied once; every snapshot loaded is the order's state at its position; what remote
//! clients are told agrees with the order; after the faults stop, a new message is applied on every node
//! within [`LIVENESS_BOUND_NS`].
//!
//! Each member has a [`SimDisk`] (its recorded log, vote file and snapshots). A follower the leader's log
//! in memory no longer reaches catches up from the leader's recording over a stream of the simulated
//! network (the catch-up connection TCP carries in production), in its recorder's duty cycles. Not
//! simulated: the log buffers in shared memory (real files under a scratch directory).

mod check;
pub mod clients;
pub mod disk;
pub mod forge;
mod membership;
pub mod network;
pub mod prng;
pub mod state;

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use quorumcast::SyncPolicy;
use quorumcast::{
    ClientEndpointConfig, Environment, InlineLogCost, Member, Node, NodeBuilder, PlantedBugs, StorageConfig,
};
use quorumcast_consensus::consensus_core::{Role, Timers};
use quorumcast_driver::agent::clock::{NanoClock, SimulatedTime};
use quorumcast_driver::agent::ThreadingMode;
use quorumcast_driver::media::auth::AuthKey;
use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_driver::media::transport::SharedNetwork;

use check::Checker;
pub use check::Violation;
use disk::{DiskFaults, SimDisk};
use network::{LinkFaults, SimNetwork};
use prng::Prng;

use crate::ScratchDir;

/// After the faults stop, a new message must be applied on every member within this much simulated time
/// (two election rounds at most, the time to elect, and a catch-up of a member left behind the leader's
/// log in memory).
pub const LIVENESS_BOUND_NS: u64 = 3_000_000_000;

/// The counter of the end of the log a member held before a loss it repairs (0: none).
const REPAIRING_TO: &str = "election repairing to";

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
            apply_per_step: 256,
            trace: false,
        }
    }
}

/// Which faults a run draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// The network's faults and paused nodes (the first schedule: seeds 1001, 1019, 1130 and 5088 were
    /// found with it).
    Network,
    /// Those, and restarts of any member (its process stopped and started again on its data directory),
    /// jumps of a member's clocks, and datagrams from a host outside the cluster (random bytes, and
    /// replays of members' datagrams from the outsider's address).
    Full,
    /// Those, and a member's process crashing without closing, power losses of one member or a majority
    /// (under `batch`), and a member's disk failing for a while.
    Disk,
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct SimReport {
    /// Steps taken.
    pub steps: u64,
    /// Simulated time at the end, ns.
    pub end_ns: u64,
    /// Messages offered and taken by a leader.
    pub offered: u64,
    /// Entries in the committed order.
    pub committed: u64,
    /// Leaders seen (one per term).
    pub leaderships: u64,
    /// Faults started.
    pub faults: u64,
    /// Members restarted.
    pub restarts: u64,
    /// Members stopped by a failing disk (and started again once it was healthy).
    pub stopped_by_disk: u64,
    /// Power losses.
    pub power_losses: u64,
    /// Writes that landed at another offset than asked (every member's disk, this process's and before).
    pub misdirected: u64,
    /// Restarts after which a member repaired its log: recovery found it damaged below what it had synced.
    pub repairs: u64,
    /// Members started again because they found their recording damaged while running (a replay, a cut).
    pub damage_restarts: u64,
    /// Runs that ended with a majority of the members repairing: damage to the disks of a majority lost
    /// what they had acknowledged, and the cluster refused to elect a leader that might lack a committed
    /// entry, as it must (liveness is promised only while a majority holds what it acknowledged).
    pub majority_damaged: u64,
    /// Datagrams a host outside the cluster sent.
    pub forged: u64,
    /// What the hostile host sent.
    pub hostile: forge::Forged,
    /// Catch-ups from a leader's recording that members finished.
    pub catch_ups: u64,
    /// Snapshots members loaded while running (installed by a catch-up; restores at restarts aside).
    pub snapshots_loaded: u64,
    /// What the remote clients did.
    pub clients: clients::ClientReport,
    /// Membership changes that committed, and those refused or given up on.
    pub membership_changes: u64,
    /// Membership changes refused (by the leader's rules) or given up on (no commit in time).
    pub membership_refused: u64,
    /// What happened, when traced.
    pub trace: String,
}

/// A run that broke a checked property: which, at which step, and the trace so far.
#[derive(Debug)]
pub struct SimFailure {
    /// The seed (replay it with `QC_NODE_SIM_SEED`).
    pub seed: u64,
    /// What was broken.
    pub violation: Violation,
    /// The step it was seen at.
    pub step: u64,
    /// Simulated time, ns.
    pub now_ns: u64,
}

impl std::fmt::Display for SimFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} failed at step {} ({} ms simulated): {} (replay: QC_NODE_SIM_SEED={} QC_NODE_SIM_TRACE=1)",
            self.seed,
            self.step,
            self.now_ns / 1_000_000,
            self.violation,
            self.seed
        )
    }
}

/// One member: its node (while it runs), its time, and its pause.
struct SimNode {
    node: Node,
    time: Arc<SimulatedTime>,
    /// Skipped (paused, as by `SIGSTOP`) until this time.
    paused_until_ns: u64,
    /// The role, term and leader last traced.
    seen: (Role, i64, Option<i32>),
    /// How far this member's monotonic clock is ahead of the simulation's (clock jumps add to it).
    skew_ns: u64,
    /// Simulated time its consensus thread was charged as busy during the last invoke (log files it made).
    busy_ns: Arc<std::sync::atomic::AtomicU64>,
    /// Its machine's disk.
    disk: SimDisk,
    /// Its disk is failing: no restart is drawn for it meanwhile.
    disk_failing: bool,
    /// Stopped (its agent failed on the failing disk): started again once the disk is healthy.
    down: bool,
    /// Its application (with [`SimConfig::snapshots`]).
    state: state::SimState,
}

/// A fault in force and when it ends.
#[derive(Clone, Debug)]
enum Fault {
    /// Loss, duplication and delay on every link.
    Lossy(LinkFaults),
    /// Links cut from one host to another, one way or both.
    Cut { from: usize, to: usize, both: bool },
    /// A member split from all the others, both ways.
    Isolate(usize),
    /// A member paused.
    Pause(usize),
    /// The path carries less than the MTU.
    ClampMtu(usize),
    /// A member's process stops and starts again (once, when drawn).
    Restart(usize),
    /// A member's process is killed (no close) and started again (once, when drawn).
    Crash(usize),
    /// These members' machines lose power at once and start again (once, when drawn).
    PowerLoss(Vec<usize>),
    /// A member's disk fails at these rates.
    FailingDisk(usize, DiskFaults),
    /// The leader is asked to hand its leadership to this member (or to the follower furthest along).
    Transfer(Option<usize>),
    /// A member's clocks jump (once, when drawn): its monotonic clock forward by `monotonic_ns` (as after
    /// the host stopped it), its wall clock by `wall_ns` either way (as NTP steps it).
    ClockJump { member: usize, monotonic_ns: u64, wall_ns: i64 },
}

/// How a member's process stops before it starts again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// Closed, as on a clean shutdown.
    Clean,
    /// Killed: nothing of its close path reaches the disk.
    Crash,
    /// Its machine lost power (its disk already lost what was not synced).
    PowerLoss,
}

/// The simulation.
pub struct Simulation {
    config: SimConfig,
    prng: Prng,
    network: SimNetwork,
    members: Vec<Member>,
    nodes: Vec<SimNode>,
    now_ns: u64,
    step: u64,
    checker: Checker,
    faults: Vec<(Fault, u64)>,
    next_message: u64,
    /// Offers the leader refused.
    refused: u64,
    report: SimReport,
    scratch: ScratchDir,
    forger: Option<forge::Forger>,
    remote: Option<clients::SimClients>,
    /// The remote clients' clock.
    client_time: Arc<SimulatedTime>,
    /// A membership change asked of a leader and not settled yet.
    asked: Option<membership::Asked>,
}

impl Simulation {
    /// Builds the cluster of `config` and starts its nodes (at simulated time 0).
    pub fn new(config: SimConfig) -> Self {
        // Unique per run: two runs of one seed (a regression test beside the loop) never share files.
        static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let scratch = ScratchDir::in_shared_memory(&format!("node-sim-{}x{}-{run}", config.seed, config.members));
        let nodes_count = config.members + usize::from(config.membership);
        let members: Vec<Member> = (0..nodes_count as i32).map(|id| Member::new(id, address(id, 40_100))).collect();
        let network = SimNetwork::new(config.seed ^ 0x0005_EED0_F0E7);
        let mut prng = Prng::new(config.seed);
        let mut nodes = Vec::new();
        for id in 0..nodes_count as i32 {
            let time = SimulatedTime::new(1_700_000_000_000_000_000 + prng.between(0, 1_000_000_000) as i64);
            let busy_ns = Arc::default();
            // Its own seed, not a draw: a seed's schedule stays what it was before disks were simulated.
            let disk = SimDisk::new(config.seed ^ (id as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let env = environment(&config, &network, id, &time, &busy_ns, &disk, prng.next_u64());
            let builder = node_builder(&scratch, id, node_file(&members, id, &config), &config);
            let node = builder.start_in(env).unwrap_or_else(|e| panic!("member {id} does not start: {e}"));
            let seen = (Role::Follower, -1, None);
            let (disk_failing, down, state) = (false, false, state::SimState::default());
            let member =
                SimNode { node, time, paused_until_ns: 0, seen, skew_ns: 0, busy_ns, disk, disk_failing, down, state };
            nodes.push(member);
        }
        let checker = Checker::new(nodes_count);
        let endpoints = members.iter().map(|m| (m.log, m.consensus)).collect();
        let client_endpoints = members.iter().map(|m| m.client).collect();
        let forger = config
            .hostile
            .then(|| forge::Forger::new(config.seed, endpoints, client_endpoints, config.auth, config.spoof_sessions));
        let client_time = SimulatedTime::new(1_700_000_000_000_000_000);
        let remote = (config.clients > 0).then(|| {
            let endpoints = members.iter().map(|m| (m.id, m.client)).collect();
            clients::SimClients::new(config.clients, endpoints, &network, &client_time, config.seed)
        });
        Self {
            config,
            prng,
            network,
            members,
            nodes,
            now_ns: 0,
            step: 0,
            checker,
            faults: Vec::new(),
            next_message: 0,
            refused: 0,
            report: SimReport::default(),
            scratch,
            forger,
            remote,
            client_time,
            asked: None,
        }
    }

    /// Runs the faults phase, heals everything, and waits for progress; checks after every step.
    pub fn run(mut self) -> Result<SimReport, SimFailure> {
        while self.now_ns < self.config.fault_ns {
            self.maybe_start_fault()?;
            self.maybe_change_membership();
            self.end_faults(false)?;
            self.step()?;
        }
        self.end_faults(true)?;
        self.trace(|| "faults over: every link healed".into());
        let healed_at = self.now_ns;
        let target = self.next_message + 1;
        while self.now_ns - healed_at < LIVENESS_BOUND_NS {
            self.step()?;
            if self.members_in_effect().iter().all(|&i| self.checker.has_applied(i, target)) {
                if let Some(Err(violation)) = self.remote.as_ref().map(|r| r.finish(&self.checker)) {
                    return Err(self.failure(violation));
                }
                let made = |n: &SimNode| crate::cluster::counter_value(&n.node, "recorder catch-ups made");
                self.report.catch_ups += self.nodes.iter().filter_map(made).sum::<i64>() as u64;
                self.report.hostile = self.forger.as_ref().map(forge::Forger::forged).unwrap_or_default();
                return Ok(self.finish_report());
            }
        }
        if self.majority_repairing() {
            // No leader can be elected safely: a majority lost (to damage on their disks) bytes they had
            // acknowledged, which may have been committed, and each refuses a log less up to date than the
            // one it held. An operator restores; the simulation checks that nothing wrong was decided.
            self.trace(|| "a majority repairs its log: no leader is elected, as none may be".into());
            self.report.majority_damaged += 1;
            return Ok(self.finish_report());
        }
        Err(self.failure(Violation::NoProgress {
            healed_ms: healed_at / 1_000_000,
            bound_ms: LIVENESS_BOUND_NS / 1_000_000,
            window_stall: self.leader_window_stalled(),
            state: self.describe(),
        }))
    }

    /// Steps for `ns` of simulated time drawing no new faults (the client still offers; faults in force
    /// run out): for scripted scenarios.
    pub fn settle(&mut self, ns: u64) -> Result<(), SimFailure> {
        let until = self.now_ns + ns;
        while self.now_ns < until {
            self.end_faults(false)?;
            self.step()?;
        }
        Ok(())
    }

    /// Pauses member `i` for `ns` of simulated time, as `SIGSTOP` and `SIGCONT` would.
    pub fn pause(&mut self, i: usize, ns: u64) {
        self.nodes[i].paused_until_ns = self.now_ns + ns;
        self.trace(|| format!("member {i} paused for {} ms", ns / 1_000_000));
    }

    /// Kills member `i` (as `kill -9` does): it runs nothing from now on, until [`revive`](Self::revive).
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].down = true;
        self.nodes[i].paused_until_ns = u64::MAX;
        self.trace(|| format!("member {i} killed"));
    }

    /// Starts killed member `i` again on its data directory (its disk lost nothing synced; what it wrote
    /// and did not sync survives in the page cache, as after a process crash).
    pub fn revive(&mut self, i: usize) -> Result<(), SimFailure> {
        let synced = self.synced_position(i);
        self.restart_holding(i, Stop::Crash, synced)?;
        self.trace(|| format!("member {i} started again"));
        Ok(())
    }

    /// The member that leads the newest term among those running, if one does.
    pub fn leader(&self) -> Option<usize> {
        let running = |i: &usize| !self.nodes[*i].down && self.nodes[*i].paused_until_ns <= self.now_ns;
        (0..self.nodes.len())
            .filter(running)
            .filter(|&i| self.nodes[i].node.role() == Role::Leader)
            .max_by_key(|&i| self.nodes[i].node.leadership_term_id())
    }

    /// The nodes of the configuration in effect on the leader (every node while none leads, or without
    /// [`SimConfig::membership`]).
    fn members_in_effect(&self) -> Vec<usize> {
        let all = (0..self.nodes.len()).collect();
        if !self.config.membership {
            return all;
        }
        let membership = self.leader().and_then(|i| self.nodes[i].node.membership());
        membership.map_or(all, |(m, _)| m.members().map(|id| id as usize).collect())
    }

    /// Now and then, asks the leader for the next membership change, unless one is still unsettled.
    fn maybe_change_membership(&mut self) {
        if !self.config.membership || self.asked.is_some() || !self.prng.chance(0.001) {
            return;
        }
        let Some(leader) = self.leader() else {
            return;
        };
        let (node, members, initial) = (&self.nodes[leader].node, &self.members, self.config.members);
        self.asked = membership::ask(node, leader, members, initial, &mut self.prng, self.now_ns);
        if let Some(asked) = &self.asked {
            let change = asked.pending.change();
            self.trace(|| format!("member {leader} asked: {change}"));
        }
    }

    /// Polls the membership change asked, and says how it settled.
    fn settle_membership_change(&mut self) {
        let Some(mut asked) = self.asked.take() else {
            return;
        };
        let change = asked.pending.change();
        match asked.pending.poll(&self.nodes[asked.leader].node) {
            Some(Ok(made)) => {
                self.report.membership_changes += 1;
                self.trace(|| {
                    format!(
                        "{change} committed: configuration {}, voters {:?}, learners {:?}",
                        made.id, made.voters, made.learners
                    )
                });
            }
            Some(Err(why)) => {
                self.report.membership_refused += 1;
                self.trace(|| format!("{change} not made: {why}"));
            }
            None if self.now_ns > asked.until_ns => {
                self.report.membership_refused += 1;
                self.trace(|| {
                    format!("{change} given up on (not committed within {} ms)", membership::SETTLE_NS / 1_000_000)
                });
            }
            None => self.asked = Some(asked),
        }
    }

    /// Entries in the committed order so far.
    pub fn committed(&self) -> u64 {
        self.checker.committed()
    }

    /// Member `i`'s node.
    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i].node
    }

    /// What the remote clients did so far.
    pub fn remote_clients(&self) -> clients::ClientReport {
        self.report.clients
    }

    /// Messages the client offered that a leader took.
    pub fn offered(&self) -> u64 {
        self.next_message
    }

    /// Whether the leader's Sender is at its flow-control limit with commits behind its append position.
    fn leader_window_stalled(&self) -> bool {
        self.nodes.iter().map(|n| &n.node).filter(|node| node.role() == Role::Leader).any(|node| {
            let read = |label: &str| crate::cluster::counter_value(node, label);
            let (position, limit) = (read("snd-pos"), read("snd-lmt"));
            let append = read("consensus append position").unwrap_or(0);
            let stalled = matches!((position, limit), (Some(p), Some(l)) if l - p < 1408);
            stalled && node.commit_position() < append
        })
    }

    /// One step: time moves, the network delivers, every running node is invoked in a drawn order, the
    /// client offers, the checker reads what every node applied.
    fn step(&mut self) -> Result<(), SimFailure> {
        self.step += 1;
        self.now_ns += self.prng.between(20_000, 400_000);
        for node in &self.nodes {
            node.time.advance_to(self.now_ns + node.skew_ns);
        }
        self.network.pump(self.now_ns);
        if self.config.schedule == Schedule::Full {
            self.maybe_forge();
        }
        if let Some(forger) = self.forger.as_mut() {
            forger.step(&self.network, self.now_ns);
            if self.step % 512 == 0 {
                self.check_bounds()?;
            }
        }
        let mut order: Vec<usize> = (0..self.nodes.len()).collect();
        self.prng.shuffle(&mut order);
        for i in order {
            if self.nodes[i].paused_until_ns > self.now_ns {
                continue;
            }
            for _ in 0..self.prng.between(1, 3) {
                if let Err(e) = self.nodes[i].node.invoke() {
                    if self.nodes[i].disk_failing {
                        // What it must do: stop rather than go on over writes it cannot make durable.
                        self.trace(|| format!("member {i} stopped on its failing disk: {e}"));
                        self.nodes[i].down = true;
                        self.nodes[i].paused_until_ns = u64::MAX;
                        self.report.stopped_by_disk += 1;
                        break;
                    }
                    let error = e.to_string();
                    if self.damage_found(i, &error) {
                        self.trace(|| format!("member {i} stopped on its damaged recording, restarted: {error}"));
                        self.report.damage_restarts += 1;
                        let synced = self.synced_position(i);
                        self.restart_holding(i, Stop::Crash, synced)?;
                        break;
                    }
                    return Err(self.failure(Violation::AgentFailed { member: i, error }));
                }
                let busy = self.nodes[i].busy_ns.swap(0, std::sync::atomic::Ordering::Relaxed);
                if busy > 0 {
                    self.nodes[i].paused_until_ns = self.now_ns + busy;
                    self.trace(|| format!("member {i} busy {} ms making a log file", busy / 1_000_000));
                    break;
                }
            }
            self.apply(i)?;
            self.trace_role(i);
            self.check_repairing(i)?;
        }
        self.offer();
        self.settle_membership_change();
        self.client_time.advance_to(self.now_ns);
        if let Some(remote) = self.remote.as_mut() {
            if let Err(violation) = remote.step(&mut self.checker, &mut self.report.clients) {
                return Err(self.failure(violation));
            }
        }
        Ok(())
    }

    /// What the network and the members hold stays bounded under forged traffic: datagrams waiting (a
    /// socket buffer's worth per endpoint), streams open (a member accepts a bounded number at once, and the
    /// forger holds some more), files in a node's directory (an image per log, never one per forged SETUP).
    fn check_bounds(&mut self) -> Result<(), SimFailure> {
        let n = self.nodes.len();
        let datagrams = (self.network.held(), 4096 * 8 * n);
        let streams = (self.network.streams(), 64 + 24 + 2 * n);
        if datagrams.0 > datagrams.1 {
            let what = "datagrams held by the network".to_string();
            return Err(self.failure(Violation::Unbounded { what, held: datagrams.0, bound: datagrams.1 }));
        }
        if streams.0 > streams.1 {
            let what = "streams open".to_string();
            return Err(self.failure(Violation::Unbounded { what, held: streams.0, bound: streams.1 }));
        }
        for i in 0..n {
            let sessions = self.nodes[i].node.client_sessions();
            let most = ClientEndpointConfig::default().max_sessions;
            if sessions > most {
                let what = format!("remote client sessions in member {i}'s table");
                return Err(self.failure(Violation::Unbounded { what, held: sessions, bound: most }));
            }
            let dir = self.scratch.join(format!("node-{i}"));
            let files = std::fs::read_dir(&dir).map_or(0, Iterator::count);
            if files > 24 {
                let what = format!("files in member {i}'s node directory");
                return Err(self.failure(Violation::Unbounded { what, held: files, bound: 24 }));
            }
        }
        Ok(())
    }

    /// Hands member `i`'s committed entries to the checker.
    fn apply(&mut self, i: usize) -> Result<(), SimFailure> {
        let mut applied = Vec::new();
        if self.config.snapshots {
            let member = &mut self.nodes[i];
            if let Err(e) = member.node.poll_state(&mut member.state, self.config.apply_per_step) {
                if !member.disk_failing {
                    let error = format!("poll_state: {e}");
                    return Err(self.failure(Violation::AgentFailed { member: i, error }));
                }
                // A snapshot it could not write (or load) on its failing disk: it stops, as it must, and a
                // state it was loading when the load failed is not used (the node said so).
                self.trace(|| format!("member {i} stopped on its failing disk: {e}"));
                self.nodes[i].state.loaded = None;
                self.nodes[i].down = true;
                self.nodes[i].paused_until_ns = u64::MAX;
                self.report.stopped_by_disk += 1;
            }
            if let Some((position, digest)) = self.nodes[i].state.loaded.take() {
                self.report.snapshots_loaded += 1;
                if let Err(violation) = self.checker.on_snapshot(i, position, digest) {
                    return Err(self.failure(violation));
                }
            }
            applied = std::mem::take(&mut self.nodes[i].state.applied);
            if let Some((session, got, expected)) = self.nodes[i].state.out_of_order.take() {
                return Err(self.failure(Violation::SessionOrder { member: i, session, got, expected }));
            }
        } else {
            self.nodes[i]
                .node
                .poll_positions(self.config.apply_per_step, |entry, end| applied.push((end, entry.to_vec())));
        }
        for (end, entry) in applied {
            if let Err(violation) = self.checker.on_applied(i, end, &entry) {
                return Err(self.failure(violation));
            }
        }
        if let Some(e) = self.nodes[i].node.recording_error() {
            // The reader of committed entries gave up on the recorded log: this member applies nothing more.
            let error = format!("its replay of the recorded log stopped: {e}");
            if self.nodes[i].disk_failing {
                // Its disk fails reads for longer than the replay waits: it stops applying and says so, as
                // it must; started again once the disk is healthy.
                self.trace(|| format!("member {i} stopped on its failing disk: {error}"));
                self.nodes[i].down = true;
                self.nodes[i].paused_until_ns = u64::MAX;
                self.report.stopped_by_disk += 1;
                return Ok(());
            }
            if !self.damage_found(i, &error) {
                return Err(self.failure(Violation::AgentFailed { member: i, error }));
            }
            // Its disk misdirected writes: the damage is real, and the node said so. Its operator starts it
            // again, and it repairs (it must not have lost what it synced without knowing it).
            self.trace(|| format!("member {i} restarted to repair its damaged recording: {error}"));
            self.report.damage_restarts += 1;
            let synced = self.synced_position(i);
            return self.restart_holding(i, Stop::Crash, synced);
        }
        Ok(())
    }

    /// Whether member `i` stopped (or stopped applying) on a block of its recording that does not verify,
    /// on a disk that misdirected writes: damage it must report and stop on (as it must on a failing
    /// disk), and repair once started again.
    fn damage_found(&self, i: usize, error: &str) -> bool {
        const DAMAGE: [&str; 6] = [
            "fails its checksum",
            "was expected",
            "no block header",
            "a block length of",
            "a block covering",
            "left in the file",
        ];
        self.nodes[i].disk.stats().misdirected > 0 && DAMAGE.iter().any(|why| error.contains(why))
    }

    /// The report of a run that ended as it may: where it ended, and what it committed and misdirected.
    fn finish_report(mut self) -> SimReport {
        self.report.end_ns = self.now_ns;
        self.report.steps = self.step;
        self.report.committed = self.checker.committed();
        self.report.misdirected = self.nodes.iter().map(|n| n.disk.stats().misdirected).sum();
        self.report
    }

    /// Whether a majority of the members repair their logs (each lost bytes it had synced and may have
    /// acknowledged toward a commit).
    fn majority_repairing(&self) -> bool {
        let repairing = self
            .nodes
            .iter()
            .filter(|n| crate::cluster::counter_value(&n.node, REPAIRING_TO).is_some_and(|held| held > 0))
            .count();
        repairing > self.nodes.len() / 2
    }

    /// A member repairing its log (it lost bytes it had synced) never stands or leads: its votes and its
    /// log no longer hold what it acknowledged.
    fn check_repairing(&self, i: usize) -> Result<(), SimFailure> {
        let node = &self.nodes[i].node;
        let role = node.role();
        if !matches!(role, Role::Candidate | Role::Leader) {
            return Ok(());
        }
        match crate::cluster::counter_value(node, REPAIRING_TO) {
            Some(held) if held > 0 => Err(self.failure(Violation::StoodWhileRepairing { member: i, role, held })),
            _ => Ok(()),
        }
    }

    /// Traces member `i`'s role, term or leader when one changed.
    fn trace_role(&mut self, i: usize) {
        if !self.config.trace {
            return;
        }
        let node = &self.nodes[i].node;
        let now = (node.role(), node.leadership_term_id(), node.leader_id());
        let (commit, applied) = (node.commit_position(), node.applied_position());
        if now != self.nodes[i].seen {
            self.nodes[i].seen = now;
            self.trace(|| {
                format!(
                    "member {i}: {} in term {} (leader {:?}), commit {commit} applied {applied}",
                    now.0, now.1, now.2
                )
            });
        }
    }

    /// Offers the next numbered message to whichever node leads, now and then.
    fn offer(&mut self) {
        if !self.prng.chance(0.3) {
            return;
        }
        let Some(leader) =
            self.nodes.iter().position(|n| n.node.role() == Role::Leader && n.paused_until_ns <= self.now_ns)
        else {
            return;
        };
        let message = crate::load::derived_message(self.next_message);
        match self.nodes[leader].node.client().offer(&message) {
            Ok(_) => {
                self.checker.offered(self.next_message, &message);
                self.next_message += 1;
                self.report.offered += 1;
            }
            Err(e) => {
                self.refused += 1;
                if self.refused.is_power_of_two() {
                    let seq = self.next_message;
                    self.trace(|| format!("member {leader} refused message {seq}: {e} ({} refusals)", seq));
                }
            }
        }
    }

    /// Starts a drawn fault, now and then, while fewer than two are in force.
    fn maybe_start_fault(&mut self) -> Result<(), SimFailure> {
        if self.faults.len() >= 2 || !self.prng.chance(0.002) {
            return Ok(());
        }
        let n = self.nodes.len();
        let duration = self.prng.between(50_000_000, 600_000_000);
        let kinds = match self.config.schedule {
            Schedule::Network => 5,
            Schedule::Full => 7,
            Schedule::Disk => 12,
        };
        let batch = self.config.storage == Some(SyncPolicy::Batch);
        let fault = match self.prng.below(kinds) {
            0 => Fault::Lossy(LinkFaults {
                loss: self.prng.between(1, 20) as f64 / 100.0,
                duplicate: self.prng.between(0, 10) as f64 / 100.0,
                min_delay_ns: 10_000,
                max_delay_ns: self.prng.between(50_000, 5_000_000),
            }),
            1 => {
                let from = self.prng.below(n);
                let to = (from + 1 + self.prng.below(n - 1)) % n;
                Fault::Cut { from, to, both: self.prng.chance(0.5) }
            }
            2 => Fault::Isolate(self.prng.below(n)),
            3 => Fault::Pause(self.prng.below(n)),
            // A path that carries exactly the MTU's datagrams (a smaller one stops the Sender's channel with an
            // error naming the MTU that fits, by design: tests/path_mtu.rs).
            // With a key, the tag rides after the MTU's bytes.
            4 => Fault::ClampMtu(1408 + if self.config.auth { quorumcast_driver::media::auth::TAG_LENGTH } else { 0 }),
            5 => Fault::Restart(self.prng.below(n)),
            6 => Fault::ClockJump {
                member: self.prng.below(n),
                monotonic_ns: self.prng.between(0, 2_000_000_000),
                wall_ns: self.prng.between(0, 20_000_000_000) as i64 - 10_000_000_000,
            },
            7 => Fault::Crash(self.prng.below(n)),
            8 if batch => Fault::PowerLoss(vec![self.prng.below(n)]),
            9 if batch => {
                let mut all: Vec<usize> = (0..n).collect();
                self.prng.shuffle(&mut all);
                all.truncate(n / 2 + 1);
                all.sort_unstable();
                Fault::PowerLoss(all)
            }
            8 | 9 => Fault::Crash(self.prng.below(n)),
            11 => Fault::Transfer(self.prng.chance(0.5).then(|| self.prng.below(n))),
            _ => {
                let member = self.prng.below(n);
                let rate = self.prng.between(1, 30) as f64 / 100.0;
                let faults = match self.prng.below(if self.config.misdirect { 5 } else { 4 }) {
                    0 => DiskFaults { write_error: rate, ..DiskFaults::default() },
                    1 => DiskFaults { write_error: rate, full: true, ..DiskFaults::default() },
                    // Under `none` a failed writeback loses acknowledged bytes as a power loss does, which
                    // that policy does not protect against (its docs say so): syncs fail only under `batch`.
                    2 if batch => DiskFaults { sync_error: rate, ..DiskFaults::default() },
                    2 => DiskFaults { write_error: rate, ..DiskFaults::default() },
                    3 => DiskFaults { read_flip: rate, ..DiskFaults::default() },
                    // Misdirected writes at a tenth of the rate (each one damages what was written before).
                    _ => DiskFaults { misdirect: rate / 10.0, ..DiskFaults::default() },
                };
                Fault::FailingDisk(member, faults)
            }
        };
        if let Fault::Restart(m) | Fault::Crash(m) = fault {
            if self.nodes[m].disk_failing || self.nodes[m].down {
                return Ok(());
            }
        }
        if let Fault::PowerLoss(members) = &fault {
            if members.iter().any(|&m| self.nodes[m].disk_failing || self.nodes[m].down) {
                return Ok(());
            }
        }
        if let Fault::FailingDisk(m, _) = fault {
            if self.faults.iter().any(|(f, _)| matches!(f, Fault::FailingDisk(o, _) if *o == m)) {
                return Ok(());
            }
        }
        let once = matches!(fault, Fault::Restart(_) | Fault::Crash(_) | Fault::PowerLoss(_) | Fault::Transfer(_));
        if once || matches!(fault, Fault::ClockJump { .. }) {
            // Done once, now: nothing to heal.
            self.trace(|| format!("fault: {fault:?}"));
            self.report.faults += 1;
            return self.apply_fault(&fault);
        }
        self.apply_fault(&fault)?;
        self.report.faults += 1;
        let until = self.now_ns + duration;
        self.trace(|| format!("fault until {} ms: {fault:?}", until / 1_000_000));
        self.faults.push((fault, until));
        Ok(())
    }

    fn apply_fault(&mut self, fault: &Fault) -> Result<(), SimFailure> {
        let host = |i: usize| address(i as i32, 0).ip();
        match fault {
            Fault::Lossy(faults) => self.network.set_faults(*faults),
            &Fault::Cut { from, to, both } => {
                self.network.cut(host(from), host(to));
                if both {
                    self.network.cut(host(to), host(from));
                }
            }
            &Fault::Isolate(member) => {
                for other in (0..self.nodes.len()).filter(|&o| o != member) {
                    self.network.cut(host(member), host(other));
                    self.network.cut(host(other), host(member));
                }
            }
            &Fault::Pause(member) => self.nodes[member].paused_until_ns = u64::MAX,
            &Fault::ClampMtu(payload) => self.network.clamp_payload(payload),
            // A member whose log is only in memory forgets what it acknowledged: Raft needs it kept.
            &Fault::Restart(member) if self.config.storage.is_some() => {
                self.restart_holding(member, Stop::Clean, self.synced_position(member))?
            }
            &Fault::Crash(member) if self.config.storage.is_some() => {
                self.restart_holding(member, Stop::Crash, self.synced_position(member))?
            }
            Fault::PowerLoss(members) if self.config.storage.is_some() => {
                let synced: Vec<Option<i64>> = members.iter().map(|&m| self.synced_position(m)).collect();
                for &member in members {
                    self.nodes[member].disk.power_loss();
                    self.report.power_losses += 1;
                }
                for (&member, synced) in members.iter().zip(synced) {
                    self.restart_holding(member, Stop::PowerLoss, synced)?;
                }
            }
            Fault::Restart(_) | Fault::Crash(_) | Fault::PowerLoss(_) => {}
            &Fault::Transfer(to) => {
                let leader = self.nodes.iter().position(|n| n.node.role() == Role::Leader && !n.down);
                if let Some(leader) = leader {
                    let result = self.nodes[leader].node.transfer_leadership(to.map(|t| t as i32));
                    self.trace(|| format!("member {leader} asked to hand its leadership to {to:?}: {result:?}"));
                }
            }
            &Fault::FailingDisk(member, faults) => {
                self.nodes[member].disk.set_faults(faults);
                self.nodes[member].disk_failing = true;
            }
            &Fault::ClockJump { member, monotonic_ns, wall_ns } => {
                let node = &mut self.nodes[member];
                node.skew_ns += monotonic_ns;
                node.time.jump_wall_clock(wall_ns);
            }
        }
        Ok(())
    }

    /// Member `i`'s recorder's synced position: what it may acknowledge, and must hold after any restart
    /// (`batch` only: under `none` it is what was written, which a failed writeback may lose).
    fn synced_position(&self, i: usize) -> Option<i64> {
        let batch = self.config.storage == Some(SyncPolicy::Batch);
        batch.then(|| crate::cluster::counter_value(&self.nodes[i].node, "recorder synced position")).flatten()
    }

    /// Restarts member `i` (as [`restart`](Self::restart)) and checks that its recorded log still reaches
    /// `synced`, what it reported synced before it stopped.
    fn restart_holding(&mut self, i: usize, stop: Stop, synced: Option<i64>) -> Result<(), SimFailure> {
        self.restart(i, stop)?;
        let recovered = crate::cluster::counter_value(&self.nodes[i].node, "recorder position");
        let repairing_to = crate::cluster::counter_value(&self.nodes[i].node, REPAIRING_TO).unwrap_or(0);
        if repairing_to > 0 {
            self.report.repairs += 1;
            self.trace(|| format!("member {i} repairs its log: it held up to {repairing_to}, now {recovered:?}"));
        }
        match (synced, recovered) {
            // A loss the member knows of: it repairs, and neither stands nor votes for a shorter log until
            // it holds what it synced again (checked at every step).
            (Some(synced), Some(_)) if repairing_to >= synced => Ok(()),
            (Some(synced), Some(recovered)) if recovered < synced => {
                Err(self.failure(Violation::LostDurable { member: i, synced, recovered }))
            }
            _ => Ok(()),
        }
    }

    /// Stops member `i`'s process as `stop` says (closed, killed, or its machine's power lost: then its
    /// disk already lost what was not synced), and starts it again on the same directories, disk and
    /// clock. A node that refuses to start on a healthy disk is a violation.
    fn restart(&mut self, i: usize, stop: Stop) -> Result<(), SimFailure> {
        let id = i as i32;
        if stop == Stop::Crash {
            self.nodes[i].disk.crash();
        }
        let time = Arc::clone(&self.nodes[i].time);
        let busy_ns = Arc::clone(&self.nodes[i].busy_ns);
        let disk = self.nodes[i].disk.clone();
        // The old process goes first: its endpoints and directory are free for the new one. Killed, its
        // close path runs but writes nothing: its disk handles fail.
        let builder = node_builder(&self.scratch, id, node_file(&self.members, id, &self.config), &self.config);
        let SimNode { node: old, skew_ns, .. } = self.nodes.remove(i);
        self.report.catch_ups += crate::cluster::counter_value(&old, "recorder catch-ups made").unwrap_or(0) as u64;
        drop(old);
        let env = environment(&self.config, &self.network, id, &time, &busy_ns, &disk, self.prng.next_u64());
        let node = match builder.start_in(env) {
            Ok(node) => node,
            Err(e) => {
                let failure = self.failure(Violation::RefusedStart { member: i, error: e.to_string() });
                return Err(failure);
            }
        };
        let seen = (Role::Follower, -1, None);
        let (disk_failing, down, mut state) = (false, false, state::SimState::default());
        let mut node = node;
        let restored = match self.config.snapshots {
            true => node.restore(&mut state),
            false => Ok(None),
        };
        let restarted =
            SimNode { node, time, paused_until_ns: 0, seen, skew_ns, busy_ns, disk, disk_failing, down, state };
        self.nodes.insert(i, restarted);
        self.checker.restarted(i);
        match restored {
            Ok(_) => {
                if let Some((position, digest)) = self.nodes[i].state.loaded.take() {
                    if let Err(violation) = self.checker.on_snapshot(i, position, digest) {
                        return Err(self.failure(violation));
                    }
                }
            }
            Err(e) => {
                let error = format!("restoring its snapshot: {e}");
                return Err(self.failure(Violation::RefusedStart { member: i, error }));
            }
        }
        self.report.restarts += 1;
        Ok(())
    }

    /// Now and then, a host outside the cluster sends a member random bytes, or a member's datagram it
    /// saw, from its own address: every member must count and drop it.
    fn maybe_forge(&mut self) {
        if !self.prng.chance(0.01) {
            return;
        }
        let outsider = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 200)), 40_100);
        let member = self.prng.below(self.nodes.len()) as i32;
        let port = [40_100, 40_200][self.prng.below(2)];
        let to = address(member, port);
        let bytes = match self.network.recent(self.prng.below(64)) {
            Some(seen) if self.prng.chance(0.7) => seen,
            _ => (0..self.prng.between(1, 1400)).map(|_| self.prng.next_u64() as u8).collect(),
        };
        self.network.inject(outsider, to, &bytes);
        self.report.forged += 1;
    }

    /// Ends the faults whose time is up (all of them with `all`): the network heals, a failing disk is
    /// healthy again (its member started again if it stopped), then the faults still in force are put back.
    fn end_faults(&mut self, all: bool) -> Result<(), SimFailure> {
        let now = self.now_ns;
        let ended: Vec<Fault> =
            self.faults.iter().filter(|(_, until)| all || *until <= now).map(|(f, _)| f.clone()).collect();
        if ended.is_empty() {
            return Ok(());
        }
        self.faults.retain(|(_, until)| !all && *until > now);
        for fault in &ended {
            self.trace(|| format!("fault over: {fault:?}"));
            match *fault {
                Fault::Pause(member) => self.nodes[member].paused_until_ns = 0,
                Fault::FailingDisk(member, _) => {
                    self.nodes[member].disk.set_faults(DiskFaults::default());
                    self.nodes[member].disk_failing = false;
                    if self.nodes[member].down {
                        self.trace(|| format!("member {member} starts again on its healthy disk"));
                        let synced = self.synced_position(member);
                        self.restart_holding(member, Stop::Crash, synced)?;
                    }
                }
                _ => {}
            }
        }
        self.network.heal();
        self.network.set_faults(LinkFaults::QUIET);
        self.network.clamp_payload(quorumcast_driver::frame::MAX_UDP_PAYLOAD_LENGTH);
        let still: Vec<Fault> = self.faults.iter().map(|(f, _)| f.clone()).collect();
        for fault in &still {
            if !matches!(fault, Fault::FailingDisk(..)) {
                self.apply_fault(fault)?;
            }
        }
        Ok(())
    }

    fn failure(&self, violation: Violation) -> SimFailure {
        SimFailure { seed: self.config.seed, violation, step: self.step, now_ns: self.now_ns }
    }

    /// Every node's role, term, leader, commit and applied positions.
    fn describe(&self) -> String {
        let mut text = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let node = &n.node;
            let _ = write!(
                text,
                "[member {i}: {} term {} leader {:?} commit {} applied {}{}] ",
                node.role(),
                node.leadership_term_id(),
                node.leader_id(),
                node.commit_position(),
                node.applied_position(),
                if n.paused_until_ns > self.now_ns { " paused" } else { "" }
            );
        }
        let _ = write!(text, "network {:?}", self.network.stats());
        if self.config.trace {
            let nodes: Vec<&Node> = self.nodes.iter().map(|n| &n.node).collect();
            for node in nodes {
                let _ = write!(text, "\n{}", crate::load::dump(std::slice::from_ref(node)));
            }
        }
        text
    }

    fn trace(&mut self, line: impl FnOnce() -> String) {
        if self.config.trace {
            let line = format!("{:>8.3} ms  {}", self.now_ns as f64 / 1e6, line());
            eprintln!("{line}");
            self.report.trace.push_str(&line);
            self.report.trace.push('\n');
        }
    }

    /// The members' addresses (for tests that forge traffic at them).
    pub fn members(&self) -> &[Member] {
        &self.members
    }
}

/// Member `id`'s environment: its simulated clock, the network, its disk, a seed, the planted bugs, and (with a log
/// cost) a charge for every log file its consensus thread makes itself.
fn environment(
    config: &SimConfig,
    network: &SimNetwork,
    id: i32,
    time: &Arc<SimulatedTime>,
    busy_ns: &Arc<std::sync::atomic::AtomicU64>,
    disk: &SimDisk,
    seed: u64,
) -> Environment {
    let mut env =
        Environment::deterministic(NanoClock::simulated(Arc::clone(time)), SharedNetwork::new(network.clone()), seed);
    env.disk = disk.process();
    env.bugs = config.bugs;
    env.shuffle_agents = config.shuffle_agents;
    if config.log_cost_ns_per_kib > 0 {
        let (network, host, busy, per_kib) =
            (network.clone(), address(id, 0).ip(), Arc::clone(busy_ns), config.log_cost_ns_per_kib);
        env.inline_log_cost = Some(InlineLogCost::new(move |bytes| {
            let cost = bytes as u64 / 1024 * per_kib;
            // What it sends from now on leaves when the file is made; it runs nothing else meanwhile.
            network.hold_host(host, cost);
            busy.fetch_add(cost, std::sync::atomic::Ordering::Relaxed);
        }));
    }
    env
}

/// Member `id`'s host: `10.77.0.<id + 1>`, with `port`.
fn address(id: i32, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 77, 0, id as u8 + 1)), port)
}

/// Member `id`'s node: invoker mode, the default timers, a small-term channel, the storage of `config`.
/// The members node `id`'s node file names (see [`SimConfig::narrow_node_files`]).
fn node_file<'a>(members: &'a [Member], id: i32, config: &SimConfig) -> &'a [Member] {
    if config.membership && config.narrow_node_files && (id as usize) < config.members {
        &members[..config.members]
    } else {
        members
    }
}

fn node_builder(scratch: &ScratchDir, id: i32, members: &[Member], config: &SimConfig) -> NodeBuilder {
    let term_length = config.term_length;
    let auth = config.auth.then(|| AuthKey::derive("node simulator", &config.seed.to_le_bytes()));
    let channel =
        ChannelConfig { mtu: 1408, term_length, receiver_window: term_length / 2, auth, ..ChannelConfig::default() };
    let mut builder = NodeBuilder::new(id, members.to_vec());
    if config.membership {
        builder = builder.initial_members((0..config.members as i32).collect());
    }
    let builder = builder
        .leader(0)
        .timers(Timers::default())
        .data_dir(scratch.join(format!("data-{id}")))
        .directory(scratch.join(format!("node-{id}")))
        .clean_stale(true)
        .channel(channel)
        .threading(ThreadingMode::Invoker)
        .idle_all("backoff");
    let builder = match config.clients {
        0 => builder,
        _ => builder.clients(ClientEndpointConfig::enabled(AuthKey::derive("node simulator sessions", &[]))),
    };
    match config.storage {
        Some(sync) if config.snapshots => builder.storage(StorageConfig {
            sync,
            segment_length: 64 << 10,
            snapshot_interval: Some(SNAPSHOT_INTERVAL),
            snapshots_kept: 2,
            ..StorageConfig::default()
        }),
        Some(sync) => builder.sync(sync),
        None => builder.memory_log(),
    }
}
