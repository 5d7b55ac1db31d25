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
//! within [`LIVENESS_BOUND_NS`]. With [`SimConfig::service`], the application is a service of timers,
//! sessions and entries of its own ([`service`]): what it finds broken at its callbacks, and its
//! callbacks, session events and state that differ between members at one position, or in a snapshot
//! from the members' at its position, fail the run.
//!
//! Each member has a [`SimDisk`] (its recorded log, vote file and snapshots). A follower the leader's log
//! in memory no longer reaches catches up from the leader's recording over a stream of the simulated
//! network (the catch-up connection TCP carries in production), in its recorder's duty cycles. Not
//! simulated: the log buffers in shared memory (real files under a scratch directory).
//!
//! Files: this one holds the [`Simulation`], its run and the controls a scripted scenario uses; `config`
//! what a run is, `report` what it did or broke, `step` one step and what is checked at it, `faults` the
//! fault schedule and the restarts it makes, `member` how each member's node is started.

mod check;
pub mod clients;
mod config;
pub mod disk;
mod faults;
pub mod forge;
mod member;
mod membership;
pub mod network;
pub mod prng;
mod report;
pub mod service;
pub mod state;
mod step;

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
pub use config::{Schedule, SimConfig, SNAPSHOT_INTERVAL};
use disk::{DiskFaults, SimDisk};
use faults::{Fault, Stop};
use member::{address, environment, node_builder, node_file};
use network::{LinkFaults, SimNetwork};
use prng::Prng;
pub use report::{SimFailure, SimReport};

use crate::ScratchDir;

/// After the faults stop, a new message must be applied on every member within this much simulated time
/// (two election rounds at most, the time to elect, and a catch-up of a member left behind the leader's
/// log in memory).
pub const LIVENESS_BOUND_NS: u64 = 3_000_000_000;

/// The counter of the end of the log a member held before a loss it repairs (0: none).
const REPAIRING_TO: &str = "election repairing to";

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
    /// The traffic from outside the cluster: the hostile forger and the remote clients.
    outside: Outside,
    /// A membership change asked of a leader and not settled yet.
    asked: Option<membership::Asked>,
}

/// What talks to the cluster from outside, beside the built-in client: a part of [`Simulation`].
struct Outside {
    forger: Option<forge::Forger>,
    remote: Option<clients::SimClients>,
    /// The remote clients' clock.
    client_time: Arc<SimulatedTime>,
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
            let (disk_failing, down, state) = (false, false, state::SimState::new(config.service));
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
            outside: Outside { forger, remote, client_time },
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
                if let Some(Err(violation)) = self.outside.remote.as_ref().map(|r| r.finish(&self.checker)) {
                    return Err(self.failure(violation));
                }
                let made = |n: &SimNode| crate::cluster::counter_value(&n.node, "recorder catch-ups made");
                self.report.catch_ups += self.nodes.iter().filter_map(made).sum::<i64>() as u64;
                self.report.hostile = self.outside.forger.as_ref().map(forge::Forger::forged).unwrap_or_default();
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

    /// The report of a run that ended as it may: where it ended, and what it committed and misdirected.
    fn finish_report(mut self) -> SimReport {
        self.report.end_ns = self.now_ns;
        self.report.steps = self.step;
        self.report.committed = self.checker.committed();
        self.report.misdirected = self.nodes.iter().map(|n| n.disk.stats().misdirected).sum();
        for counts in self.nodes.iter().filter_map(|n| n.state.service.as_ref().map(|s| s.counts)) {
            let most = &mut self.report.service;
            most.scheduled = most.scheduled.max(counts.scheduled);
            most.moved = most.moved.max(counts.moved);
            most.cancelled = most.cancelled.max(counts.cancelled);
            most.fired = most.fired.max(counts.fired);
            most.offered = most.offered.max(counts.offered);
            most.opened = most.opened.max(counts.opened);
            most.refused = most.refused.max(counts.refused);
            most.closed = most.closed.max(counts.closed);
            most.closed_by_service = most.closed_by_service.max(counts.closed_by_service);
        }
        self.report.timer_lateness_ns = std::mem::take(&mut self.checker.lateness_ns);
        self.report.timer_lateness_ns.sort_unstable();
        self.report
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
