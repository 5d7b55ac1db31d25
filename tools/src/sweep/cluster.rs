//! The load harness: a 3-node loopback cluster in this process, and the thread that loads it.
//!
//! The calling thread is the harness: the load generator (it offers through the leader's client) and the
//! applier of all three nodes (it calls `poll_committed` on each, so logs and receive windows drain). The
//! leader's Sender (with its idle Receiver) always runs on a thread of its own, with a core of its own where
//! the host has one: it is the stage the model describes. The rest is placed by a [`Layout`]:
//!
//! - on a host with fewer than 4 cores, everything else runs on the harness thread, with no context switch:
//!   the leader in `shared-network-invoker` mode and both followers in `invoker` mode, the harness invoking
//!   them in its loop and idling with the consensus idle strategy under test (this sets C: the consensus
//!   agent runs once per harness cycle);
//! - on 4 cores or more, the leader in `shared-network` mode with its consensus agent alone on a thread with
//!   the idle strategy under test, and each follower in `shared` mode on one more core, with `backoff`.
//!
//! Latency is taken when the harness applies an entry on the leader through [`Node::poll_service`],
//! which hands out only entries below the leader's commit position: "offer to commit" is offer to the
//! harness seeing the entry committed on the leader, which includes up to one harness loop of delay.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quorumcast::agent::ThreadingMode;
use quorumcast::channel::ChannelConfig;
use quorumcast::idle::{set_timer_slack, Idle, IdleStrategy, IdleStrategyConfig};
use quorumcast::node::{Client, ClientsConfig, Member, Node, NodeBuilder, OfferError};
use quorumcast::stats::Stats;
use quorumcast::transport::{SendMode, SocketOptions};

use crate::harness::{self, Applier};
use crate::probe::ProbeCores;

use super::profile::Control;
use super::SweepError;

/// How long the harness waits for a cluster to come up or drain.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(15);

/// Which core each thread of the harness runs on, and which agents the harness runs itself.
///
/// Invariant: busy-spinning threads never outnumber the host's cores. The Sender busy-spins (`noop`) only
/// when it gets a core of its own. When `invoked`, the harness is the only other thread and idles with the
/// consensus idle strategy under test (two busy threads at most, on two cores). Otherwise every other
/// thread yields or parks when idle, except a consensus agent whose idle strategy under test spins, which
/// has a core of its own (4 cores or more) or, in an explicit layout, shares one as
/// [`Layout::describe`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Cores the process may run on.
    pub cores: usize,
    /// The harness thread runs the leader's consensus agent and both followers through their invokers.
    pub invoked: bool,
    /// Core of the harness thread (load generator and appliers).
    pub harness: Option<usize>,
    /// Core of the leader's sender+receiver thread.
    pub sender: Option<usize>,
    /// Core of the leader's consensus thread.
    pub consensus: Option<usize>,
    /// Core of both followers' threads.
    pub followers: Option<usize>,
}

impl Layout {
    /// The layout that suits `cores` cores: the Sender alone on core 1 and the harness on core 0; with 4
    /// cores or more, the consensus agent on core 2 and the followers on core 3, else all of them invoked
    /// by the harness on core 0. One core: nothing pinned, everything but the Sender invoked. The cores are
    /// counted from 0 here; [`on_cores`](Self::on_cores) puts them on a process's own cores.
    pub fn for_cores(cores: usize) -> Self {
        match cores {
            0 | 1 => Self { cores, invoked: true, harness: None, sender: None, consensus: None, followers: None },
            2 | 3 => {
                Self { cores, invoked: true, harness: Some(0), sender: Some(1), consensus: Some(0), followers: Some(0) }
            }
            _ => Self {
                cores,
                invoked: false,
                harness: Some(0),
                sender: Some(1),
                consensus: Some(2),
                followers: Some(3),
            },
        }
    }

    /// This host's layout, on the cores this process may run on (a cpuset of cores 2 and 3 puts the
    /// harness on core 2 and the Sender on core 3, where pinning them to cores 0 and 1 would be refused).
    pub fn for_host() -> Self {
        let ids: Vec<usize> = core_affinity::get_core_ids().unwrap_or_default().iter().map(|c| c.id).collect();
        Self::for_cores(quorumcast::agent::available_cores()).on_cores(&ids)
    }

    /// This layout with its `i`-th core replaced by `ids[i]` (a core beyond `ids` stays as it is).
    pub fn on_cores(self, ids: &[usize]) -> Self {
        let map = |core: Option<usize>| core.map(|i| ids.get(i).copied().unwrap_or(i));
        Self {
            harness: map(self.harness),
            sender: map(self.sender),
            consensus: map(self.consensus),
            followers: map(self.followers),
            ..self
        }
    }

    /// No pinning at all, everything but the Sender invoked by the harness (the test suite's layout: it
    /// shares the machine with other tests).
    pub fn unpinned() -> Self {
        Self {
            cores: quorumcast::agent::available_cores(),
            invoked: true,
            harness: None,
            sender: None,
            consensus: None,
            followers: None,
        }
    }

    /// The C probe's layout: the leader's consensus agent on a thread and a core of its own, running its
    /// own duty cycle with the idle strategy under test (so C follows that strategy), and nothing else
    /// busy-spinning. With 4 cores or more, this layout already is such; on 2 or 3, the consensus agent
    /// takes the Sender's core and the Sender, the followers and the harness share the other, none of them
    /// spinning (the load is paced, well below capacity).
    pub fn for_c_probe(&self) -> Self {
        if !self.invoked || self.sender.is_none() {
            return *self;
        }
        Self { invoked: false, consensus: self.sender, sender: self.harness, followers: self.harness, ..*self }
    }

    /// The Sender's idle strategy this layout allows: `wanted` when the Sender has a core of its own or
    /// `wanted` does not spin, else `backoff`.
    pub fn sender_idle(&self, wanted: IdleStrategyConfig) -> IdleStrategyConfig {
        let shares_its_core = [self.harness, self.consensus, self.followers].contains(&self.sender);
        if wanted.is_busy() && (self.sender.is_none() || shares_its_core) {
            IdleStrategyConfig::default()
        } else {
            wanted
        }
    }

    /// The cores of the S probe's threads: sending where the Sender runs, draining where the harness
    /// (which runs the followers' receivers when invoked) runs.
    pub fn probe_cores(&self) -> ProbeCores {
        ProbeCores { sender: self.sender, drain: if self.invoked { self.harness } else { self.followers } }
    }

    /// One line per thread, and what the layout implies for S.
    pub fn describe(&self, sender_idle: IdleStrategyConfig) -> String {
        let core = |c: Option<usize>| c.map_or("unpinned".to_string(), |c| format!("core {c}"));
        let others = [self.harness, self.consensus, self.followers];
        let sender_alone = self.sender.is_some() && !others.contains(&self.sender);
        let sender = format!(
            "leader sender+receiver thread ({}): {}{}",
            self.sender_idle(sender_idle),
            core(self.sender),
            if sender_alone { " alone" } else { "" }
        );
        let rest = if self.invoked {
            format!(
                "harness thread: {}: load generator, apply of all 3 nodes, and the leader's consensus agent and \
                 both followers run through their invokers, idling with the consensus idle strategy under test \
                 (so C comes from one consensus cycle per harness cycle)",
                core(self.harness)
            )
        } else {
            format!(
                "harness (load generator + apply of all 3 nodes): {}; leader consensus thread (idle under test): \
                 {}; followers (shared mode, backoff, one thread each): {}",
                core(self.harness),
                core(self.consensus),
                core(self.followers)
            )
        };
        format!(
            "{} cores; {sender}; {rest}. S is probed with one sending thread and one draining thread; in the \
             cluster the Sender {}, and on loopback each sendmsg also runs the receive path on the Sender's CPU, \
             as in the probe.",
            self.cores,
            if sender_alone {
                "has its core to itself, so the probe's S applies"
            } else {
                "shares its CPU with other threads, so it gets less than the probe's S"
            },
        )
    }
}

/// What one cluster runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClusterSpec {
    /// MTU of the log channel.
    pub mtu: usize,
    /// Send mode of the log channel.
    pub send_mode: SendMode,
    /// How commits travel.
    pub control: Control,
    /// The leader's consensus idle strategy.
    pub consensus_idle: IdleStrategyConfig,
    /// The leader's Sender idle strategy (see [`Layout::sender_idle`]).
    pub sender_idle: IdleStrategyConfig,
    /// Message size, bytes (at least 8).
    pub msg: usize,
    /// Where the threads go.
    pub layout: Layout,
    /// Every node takes remote clients at its member's client endpoint
    /// (`NodeBuilder::clients(ClientsConfig::default())`; see [`LoadCluster::client_endpoints`]); the
    /// harness applies their messages beside its own and leaves them out of its counts (see
    /// [`Applier`]). Off in the sweep's default runs.
    pub clients: bool,
}

/// Log positions (bytes) along the leader's pipeline, in pipeline order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Positions {
    /// Appended to the log by the consensus agent.
    pub appended: i64,
    /// Sent by the Sender.
    pub sent: i64,
    /// How far flow control lets the Sender go (`snd-lmt`): the slowest follower's consumption plus its
    /// receiver window.
    pub limit: i64,
    /// Acknowledged by both followers (their slowest).
    pub acknowledged: i64,
    /// Committed (a quorum acknowledged it).
    pub committed: i64,
    /// Applied on the leader by the harness.
    pub applied: i64,
}

/// A running 3-node cluster and the harness state: next sequence number, entries applied per node.
pub struct LoadCluster {
    /// The leader first, then the two followers.
    nodes: Vec<Node>,
    /// Every member, by id (the leader is 0).
    members: Vec<Member>,
    client: Client,
    /// The harness runs every node's invoker each cycle (see [`Layout::invoked`]).
    invoked: bool,
    /// How the harness idles when a cycle found no work: the consensus idle strategy under test when it
    /// invokes the consensus agent, else `yield`.
    idle: Idle,
    payload: Vec<u8>,
    offered: u64,
    /// The leader's, then the followers'.
    appliers: [Applier; 3],
    warnings: Vec<String>,
}

impl std::fmt::Debug for LoadCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadCluster").field("offered", &self.offered).field("applied", &self.applied()).finish()
    }
}

static RUNS: AtomicU64 = AtomicU64::new(0);

/// How long [`LoadCluster::paused`] waits for each agent thread to park.
const PAUSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `work` on a fresh thread: the harness thread, which pins itself once its cluster has started.
/// Cluster nodes are started from it while it still has the caller's whole affinity mask (agent threads
/// inherit it, and a node checks its cores against it), and the caller is never pinned, so the next
/// cluster starts as unconstrained as the first.
pub fn on_harness_thread<T: Send>(work: impl FnOnce() -> Result<T, SweepError> + Send) -> Result<T, SweepError> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("sweep-harness".into())
            .spawn_scoped(scope, work)
            .map_err(SweepError::Io)?
            .join()
            .unwrap_or_else(|_| Err(SweepError::Cluster("the harness thread panicked".into())))
    })
}

/// The term length of the sweep's logs.
pub const TERM_LENGTH: usize = 16 << 20;

/// The followers' `SO_RCVBUF` the sweep wants: half a term.
pub const WANTED_RECEIVE_BUFFER: usize = TERM_LENGTH / 2;

/// The followers' `SO_RCVBUF` for this host: [`WANTED_RECEIVE_BUFFER`], or less where `net.core.rmem_max`
/// caps it (Linux's default cap is 208 KiB, which the sweep then uses, with a warning).
pub fn receive_buffer() -> usize {
    let rmem_max = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok())
        .unwrap_or(WANTED_RECEIVE_BUFFER);
    WANTED_RECEIVE_BUFFER.min(rmem_max)
}

/// The followers' receiver window for a receive buffer of `receive_buffer` bytes: half of it.
///
/// The kernel doubles `SO_RCVBUF` and charges each queued datagram its whole allocation (its `truesize`,
/// measured on Linux 6.18 over loopback: 832 B for a 64 B datagram, 1,280 B for 544 B, 2,304 B for 1,088
/// or 1,408 B, 16,640 B for 8,192 B). A window as large as `SO_RCVBUF` therefore overflows the socket when
/// datagrams fill less than half their allocation: at MTU 1408 with 512 B messages (two frames, 1,088 B a
/// datagram) a 4 MiB window over a 4 MiB buffer dropped 57-298 datagrams per follower in half the runs,
/// each a NAK and a stall of the commit. Half the buffer (a quarter of what the kernel accounts) holds any
/// datagram of 576 B or more, and so any full one. Status messages count the window from what has
/// arrived, so even 2 MiB rarely closes it.
pub fn receiver_window(receive_buffer: usize) -> usize {
    receive_buffer / 2
}

/// A warning when this host's `net.core.rmem_max` holds the followers' receive buffer, and so their window,
/// below what the sweep wants.
pub fn window_warning() -> Option<String> {
    let buffer = receive_buffer();
    (buffer < WANTED_RECEIVE_BUFFER).then(|| {
        format!(
            "net.core.rmem_max caps the followers' receive buffer at {} KiB and their window at {} KiB (the sweep \
             wants {} and {} KiB): flow control may hold the Sender back at high rates; as root: sysctl -w \
             net.core.rmem_max={WANTED_RECEIVE_BUFFER}",
            buffer >> 10,
            receiver_window(buffer) >> 10,
            WANTED_RECEIVE_BUFFER >> 10,
            receiver_window(WANTED_RECEIVE_BUFFER) >> 10
        )
    })
}

fn channel(spec: &ClusterSpec) -> ChannelConfig {
    let buffer = receive_buffer();
    ChannelConfig {
        mtu: spec.mtu,
        term_length: TERM_LENGTH,
        send_mode: spec.send_mode,
        // As large as this host lets the followers' socket buffers be, so flow control holds the Sender back
        // only when the followers' consumption really lags, and small enough never to overflow them.
        receiver_window: receiver_window(buffer),
        socket: SocketOptions { send_buffer: Some(4 << 20), receive_buffer: Some(buffer) },
        ..ChannelConfig::default()
    }
}

impl LoadCluster {
    /// Starts the followers, then the leader, pins the calling thread (the harness: call this on a thread
    /// of its own, see [`on_harness_thread`]), and commits a first message on every node so that timing
    /// starts with a live cluster.
    pub fn start(spec: &ClusterSpec) -> Result<Self, SweepError> {
        if spec.msg < super::profile::MIN_MESSAGE {
            return Err(SweepError::Config(format!("message size {} is below 8 bytes", spec.msg)));
        }
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        let members = harness::members_on(Ipv4Addr::LOCALHOST.into(), 3)?;
        let backoff = IdleStrategyConfig::default();
        let base = |id: i32| {
            let builder = NodeBuilder::new(id, members.clone());
            let builder = if spec.clients { builder.clients(ClientsConfig::default()) } else { builder };
            builder
                .leader(0)
                .timers(harness::patient_timers())
                .directory(harness::node_dir("sweep", run, id))
                .clean_stale(true)
                // The sweep measures the replication path MODEL.md describes: the log in memory (the cluster
                // bench measures the recorded log beside it).
                .memory_log()
                .channel(channel(spec))
                .commit_piggyback(spec.control == Control::Piggyback)
        };
        let layout = spec.layout;
        let sender_idle = layout.sender_idle(spec.sender_idle);
        let (follower_mode, leader_mode) = if layout.invoked {
            (ThreadingMode::Invoker, ThreadingMode::SharedNetworkInvoker)
        } else {
            (ThreadingMode::Shared, ThreadingMode::SharedNetwork)
        };
        let follower = |id: i32| {
            base(id)
                .threading(follower_mode)
                .idle([backoff; 4])
                .cores([layout.followers; 4])
                .start()
                .map_err(|e| SweepError::Cluster(format!("follower {id} did not start: {e}")))
        };
        let mut nodes = vec![follower(1)?, follower(2)?];
        let leader = base(0)
            .threading(leader_mode)
            .idle([spec.consensus_idle, sender_idle, sender_idle, backoff])
            .cores([layout.consensus, layout.sender, layout.sender, layout.followers])
            .start()
            .map_err(|e| SweepError::Cluster(format!("leader did not start: {e}")))?;
        nodes.insert(0, leader);
        let mut warnings: Vec<String> = nodes.iter().flat_map(|n| n.warnings().iter().cloned()).collect();
        if let Some(core) = layout.harness {
            if let Err(e) = quorumcast::agent::pin_current_thread(core) {
                warnings.push(format!("the harness thread runs unpinned: {e}"));
            }
        }
        let harness_idle = if layout.invoked { spec.consensus_idle } else { IdleStrategyConfig::Yield };
        let idle = harness_idle.to_idle().map_err(|e| SweepError::Config(format!("idle strategy: {e}")))?;
        if harness_idle.sleeps() {
            // As the agent runner does for its sleeping threads: park for the period asked, not 50 us more.
            if let Err(e) = set_timer_slack(Duration::from_nanos(1)) {
                warnings.push(format!("could not lower the harness thread's timer slack: {e}"));
            }
        }
        let client = nodes[0].client();
        let mut cluster = Self {
            nodes,
            members,
            client,
            invoked: layout.invoked,
            idle,
            payload: vec![0x5A; spec.msg],
            offered: 0,
            appliers: [Applier::default(); 3],
            warnings,
        };
        cluster.warm_up()?;
        Ok(cluster)
    }

    /// Waits for both followers' images, then commits one message everywhere.
    fn warm_up(&mut self) -> Result<(), SweepError> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        while self.nodes[1..].iter().any(|n| n.stats().receiver().images() < 1) {
            self.check(deadline, "the followers made no image of the leader's log")?;
            let work = self.poll(|_| {});
            self.idle(work);
        }
        while !self.offer()? {
            self.check(deadline, "the leader's ingress took no first message")?;
            let work = self.poll(|_| {});
            self.idle(work);
        }
        self.drain(SETTLE_TIMEOUT)
    }

    /// An error if an agent failed or `deadline` passed (`what` says what did not happen).
    fn check(&self, deadline: Instant, what: &str) -> Result<(), SweepError> {
        if let Some(failed) = self.agent_failure() {
            return Err(failed);
        }
        if Instant::now() > deadline {
            return Err(SweepError::Cluster(format!(
                "{what} within {} s (offered {}, applied {:?})",
                SETTLE_TIMEOUT.as_secs(),
                self.offered,
                self.applied()
            )));
        }
        Ok(())
    }

    /// The first agent failure of any node, as an error (`Ok` while every agent runs).
    pub fn failure(&self) -> Result<(), SweepError> {
        self.agent_failure().map_or(Ok(()), Err)
    }

    /// The first agent failure of any node, as an error.
    fn agent_failure(&self) -> Option<SweepError> {
        let failure = self.nodes.iter().flat_map(|n| n.failures()).next()?;
        Some(SweepError::Cluster(format!("an agent failed: {failure}")))
    }

    /// Offers the next message (its sequence number in the first 8 bytes). `Ok(false)` when the ingress
    /// is full (back pressure); an error when the node refuses for another reason.
    pub fn offer(&mut self) -> Result<bool, SweepError> {
        harness::number(&mut self.payload, self.offered);
        match self.client.offer(&self.payload) {
            Ok(_) => {
                self.offered += 1;
                Ok(true)
            }
            Err(OfferError::BackPressured) => Ok(false),
            Err(e) => Err(SweepError::Cluster(format!("offer refused: {e}"))),
        }
    }

    /// One harness cycle: runs every node's invoked agents (when [`Layout::invoked`]), then applies what is
    /// committed on every node, calling `on_commit(seq)` for each entry the leader applies. Returns the work
    /// done (agent work plus entries applied); pass it to [`idle`](Self::idle).
    pub fn poll(&mut self, mut on_commit: impl FnMut(u64)) -> usize {
        let mut work = 0;
        if self.invoked {
            for node in &mut self.nodes {
                // A failed agent is reported by `check` through `Node::failures`.
                work += node.invoke().unwrap_or(0);
            }
        }
        for (i, (node, applier)) in self.nodes.iter_mut().zip(&mut self.appliers).enumerate() {
            work += applier.poll(node, 4096, |seq| {
                if i == 0 {
                    on_commit(seq);
                }
            });
        }
        work
    }

    /// Idles after a harness cycle that did `work`, with the harness's idle strategy.
    pub fn idle(&mut self, work: usize) {
        self.idle.idle(work);
    }

    /// Runs `work` with every node's agent threads parked (see [`Node::pause_agents`]), so that the cores
    /// the cluster runs on are free for it (an S probe between two mu windows); the harness offers and
    /// invokes nothing meanwhile. Resumes the threads whatever `work` returns.
    pub fn paused<T>(&mut self, work: impl FnOnce() -> Result<T, SweepError>) -> Result<T, SweepError> {
        let parked = self.nodes.iter().filter(|n| !n.pause_agents(PAUSE_TIMEOUT)).count() == 0;
        let outcome = if parked {
            work()
        } else if let Some(failed) = self.agent_failure() {
            Err(failed) // a thread that ended cannot park: say why it ended
        } else {
            Err(SweepError::Cluster(format!(
                "the nodes' agent threads did not pause within {} s",
                PAUSE_TIMEOUT.as_secs()
            )))
        };
        for node in &self.nodes {
            node.resume_agents();
        }
        outcome
    }

    /// Polls until every node applied everything offered (and every remote client's message the leader
    /// applied), or `timeout` passes.
    pub fn drain(&mut self, timeout: Duration) -> Result<(), SweepError> {
        let deadline = Instant::now() + timeout;
        let behind = |c: &Self| {
            let client_messages = c.appliers[0].client_messages();
            c.appliers.iter().any(|a| a.applied() < c.offered || a.client_messages() < client_messages)
        };
        while behind(self) {
            self.check(deadline, "the cluster did not apply everything offered")?;
            let work = self.poll(|_| {});
            self.idle(work);
        }
        Ok(())
    }

    /// True when the harness runs the leader's consensus agent and the followers (see [`Layout::invoked`]).
    pub fn invokes_agents(&self) -> bool {
        self.invoked
    }

    /// Messages offered so far (the next sequence number).
    pub fn offered(&self) -> u64 {
        self.offered
    }

    /// Entries applied on the leader so far (committed).
    pub fn committed(&self) -> u64 {
        self.appliers[0].applied()
    }

    /// Entries applied on each node, the leader first.
    pub fn applied(&self) -> [u64; 3] {
        self.appliers.map(|a| a.applied())
    }

    /// Each member's id and client endpoint, the leader (0) first: where a remote client connects, when
    /// the cluster takes clients ([`ClusterSpec::clients`]).
    pub fn client_endpoints(&self) -> Vec<(i32, SocketAddr)> {
        self.members.iter().map(|m| (m.id, m.client)).collect()
    }

    /// Remote clients' messages the leader applied so far (they are not in [`committed`](Self::committed)).
    pub fn client_messages(&self) -> u64 {
        self.appliers[0].client_messages()
    }

    /// Entries applied out of sequence so far (must stay 0).
    pub fn out_of_order(&self) -> u64 {
        self.appliers.iter().map(Applier::out_of_order).sum()
    }

    /// Where the log stands on the leader: appended, sent, acknowledged by both followers, committed and
    /// applied by the harness.
    pub fn positions(&self) -> Positions {
        let stats = self.nodes[0].stats();
        Positions {
            appended: stats.consensus().append_position(),
            sent: stats.sender().position(),
            limit: stats.sender().limit(),
            acknowledged: stats.slowest_ack_position().unwrap_or(0),
            committed: stats.consensus().commit_position(),
            applied: self.nodes[0].applied_position(),
        }
    }

    /// Every node's counters, the leader first.
    pub fn stats(&self) -> [Stats; 3] {
        [self.nodes[0].stats(), self.nodes[1].stats(), self.nodes[2].stats()]
    }

    /// Start-up warnings of every node.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Stops every node (removing its directory); an error names any agent failure, or entries applied
    /// out of order.
    pub fn close(self) -> Result<(), SweepError> {
        let out_of_order = self.out_of_order();
        let mut errors = Vec::new();
        for node in self.nodes {
            if let Err(e) = node.close() {
                errors.push(e.to_string());
            }
        }
        if out_of_order > 0 {
            errors.push(format!("{out_of_order} entries were applied out of order"));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(SweepError::Cluster(errors.join("; ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_probe_gives_the_consensus_agent_a_core_of_its_own_and_nothing_else_spins() {
        let two = Layout::for_cores(2).for_c_probe();
        assert!(!two.invoked, "the consensus agent runs its own duty cycle");
        assert_eq!((two.consensus, two.sender, two.followers, two.harness), (Some(1), Some(0), Some(0), Some(0)));
        let noop: IdleStrategyConfig = "noop".parse().unwrap();
        assert_eq!(two.sender_idle(noop), IdleStrategyConfig::default(), "a Sender sharing a core backs off");
        let four = Layout::for_cores(4);
        assert_eq!(four.for_c_probe(), four, "with 4 cores the consensus agent has core 2 already");
        assert_eq!(four.sender_idle(noop), noop, "a Sender alone on its core may spin");
        let one = Layout::for_cores(1);
        assert_eq!(one.for_c_probe(), one, "one core: nothing to pin");
    }

    #[test]
    fn two_cores_give_the_sender_core_one_alone_and_invoke_the_rest() {
        let layout = Layout::for_cores(2);
        assert_eq!(layout.sender, Some(1));
        assert!(layout.invoked);
        assert_eq!((layout.harness, layout.consensus, layout.followers), (Some(0), Some(0), Some(0)));
        let text = layout.describe(IdleStrategyConfig::NoOp);
        assert!(text.contains("core 1 alone") && text.contains("through their invokers"), "{text}");
        assert_eq!(layout.sender_idle(IdleStrategyConfig::NoOp), IdleStrategyConfig::NoOp);
    }

    #[test]
    fn one_core_never_spins_the_sender() {
        let layout = Layout::for_cores(1);
        assert!(!layout.sender_idle(IdleStrategyConfig::NoOp).is_busy());
        assert!(layout.describe(IdleStrategyConfig::NoOp).contains("gets less than the probe's S"));
    }

    #[test]
    fn four_cores_spread_the_threads() {
        let layout = Layout::for_cores(4);
        assert!(!layout.invoked);
        assert_eq!(
            (layout.harness, layout.sender, layout.consensus, layout.followers),
            (Some(0), Some(1), Some(2), Some(3))
        );
        assert!(layout.describe(IdleStrategyConfig::NoOp).contains("leader consensus thread"));
    }

    #[test]
    fn a_layout_lands_on_the_process_s_own_cores() {
        let layout = Layout::for_cores(2).on_cores(&[2, 3]);
        assert_eq!(
            (layout.harness, layout.sender, layout.consensus, layout.followers),
            (Some(2), Some(3), Some(2), Some(2))
        );
        assert_eq!(layout.probe_cores().sender, Some(3));
        assert_eq!(Layout::for_cores(2).on_cores(&[0, 1]), Layout::for_cores(2));
        assert_eq!(Layout::for_cores(1).on_cores(&[5]), Layout::for_cores(1), "nothing pinned stays unpinned");
    }
}
