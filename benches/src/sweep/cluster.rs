//! The measuring cluster: a loopback cluster in this process (3 members; the cluster bench's five-member
//! rows run 5, see [`ClusterSpec::members`]), and the thread that loads it. The sweep, the cluster bench
//! and the client bench measure through it; its load (numbered messages, applied and checked in sequence
//! on every node) is the test kit's [`Driver`] (`quorumcast-testkit`), which the engine's tests use too.
//!
//! The calling thread is the harness: the load generator (it offers through the leader's client) and the
//! applier of the nodes (it calls `poll_service` on each, so logs and receive windows drain). Where the
//! threads go is a [`Layout`]:
//!
//! - the sweep's layouts keep the leader's Sender (with its idle Receiver) on a thread of its own, with a
//!   core of its own where the host has one: it is the stage the model describes. On a host with fewer
//!   than 4 cores, everything else runs on the harness thread, with no context switch: the leader in
//!   `shared-network-invoker` mode and both followers in `invoker` mode, the harness invoking them in its
//!   loop and idling with the consensus idle strategy under test (this sets C: the consensus agent runs
//!   once per harness cycle). On 4 cores or more, the leader runs in `shared-network` mode with its
//!   consensus agent alone on a thread with the idle strategy under test, and each follower in `shared`
//!   mode on one more core, with `backoff`;
//! - the C probe's layout ([`Layout::for_c_probe`]) gives the consensus agent a core and a duty cycle of
//!   its own;
//! - the cluster bench's layout ([`Layout::split`]) runs the whole leader on the harness thread and both
//!   followers on a second harness thread, all through their invokers.
//!
//! Latency is taken when the harness applies an entry on the leader through [`Node::poll_service`],
//! which hands out only entries below the leader's commit position: "offer to commit" is offer to the
//! harness seeing the entry committed on the leader, which includes up to one harness loop of delay.

mod layout;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use quorumcast::unstable::credentials::{ClientKey, DEFAULT_CLIENT_KEY_NAME};
use quorumcast::SyncPolicy;
use quorumcast::{ClientEndpointConfig, CloseReason, Cluster, Entry, LocalClient, Member, Node, NodeBuilder};
use quorumcast::{Role, SessionRefused, StateMachine};
use quorumcast_driver::agent::idle::{set_timer_slack, Idle, IdleStrategyConfig};
use quorumcast_driver::agent::ThreadingMode;
use quorumcast_driver::media::auth::AuthKey;
use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_driver::media::transport::{SendMode, SocketOptions};
use quorumcast_driver::shm::counters::CountersReader;
use quorumcast_driver::shm::stats::Stats;
use quorumcast_testkit::{Driver, Messages};

pub use layout::Layout;

use super::profile::Control;
use super::SweepError;

/// How long the harness waits for a cluster to come up or drain.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a new cluster waits for its members' spare log files before it is measured (see
/// `LoadCluster::warm_up`): a bound on the wait, not a budget; a cluster whose spares take longer is
/// measured anyway, with a warning.
pub const SPARE_WAIT: Duration = Duration::from_secs(3);

/// Where the cluster's nodes keep their log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Storage {
    /// In memory only: the replication path the model describes.
    Memory,
    /// Recorded to disk under `root` (member `i` in `root/i`), made durable by `sync`.
    Disk {
        /// The data directories' parent.
        root: PathBuf,
        /// When recorded bytes are synced.
        sync: SyncPolicy,
    },
}

/// Writes `key` as 64 hex digits to `path`, readable by its owner alone; returns the path.
fn write_key_file(path: &Path, key: &AuthKey) -> Result<PathBuf, SweepError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    writeln!(file, "{}", key.to_hex())?;
    Ok(path.to_path_buf())
}

/// What one cluster runs.
#[derive(Clone, Debug, PartialEq)]
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
    /// (`NodeBuilder::clients(ClientEndpointConfig::enabled(..))`, a fresh session key; see [`LoadCluster::client_endpoints`]); the
    /// harness applies their messages beside its own and leaves them out of its counts (see
    /// [`quorumcast_testkit::Applier`]). Off in the sweep's default runs.
    pub clients: bool,
    /// With [`clients`](Self::clients): the client key every client must hold (the cluster's one
    /// `ClientEndpointConfig::keys`, under [`DEFAULT_CLIENT_KEY_NAME`]); `None`: any client may open a session.
    /// A client process finds it in [`LoadCluster::client_key_file`].
    pub client_key: Option<AuthKey>,
    /// Where the nodes keep their log: in memory for the sweep (see [`Storage`]).
    pub storage: Storage,
    /// Members of the cluster: the leader (member 0) and `members - 1` followers, each log datagram sent to
    /// every follower (the model's `D = members - 1`). Odd, at least 3; 3 for the sweep.
    pub members: usize,
    /// The log channel, when not the sweep's own (`mtu` and `send_mode` above are then ignored): the
    /// cluster bench sets its own window, buffers, status interval and authentication.
    pub channel: Option<ChannelConfig>,
    /// The leader's Sender splits its time in its counters (`NodeBuilder::sender_time_split`: a few clock
    /// reads per send call): for the runs whose Sender budget is read ([`crate::budget`]), off elsewhere.
    pub time_split: bool,
}

impl ClusterSpec {
    /// The sweep's cluster: `msg`-byte messages at MTU `mtu`, classic sends, commits in their own frames,
    /// the default idle strategies, the log in memory, no remote clients, threads placed by `layout`.
    pub fn new(mtu: usize, msg: usize, layout: Layout) -> Self {
        Self {
            mtu,
            send_mode: SendMode::Classic,
            control: Control::Separate,
            consensus_idle: IdleStrategyConfig::default(),
            sender_idle: IdleStrategyConfig::default(),
            msg,
            layout,
            clients: false,
            client_key: None,
            storage: Storage::Memory,
            channel: None,
            members: 3,
            time_split: false,
        }
    }
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
    /// Acknowledged by every follower (their slowest).
    pub acknowledged: i64,
    /// Committed (a quorum acknowledged it).
    pub committed: i64,
    /// Applied on the leader by the harness.
    pub applied: i64,
}

/// A running cluster (3 members unless [`ClusterSpec::members`] says otherwise) and the harness state: the
/// load's [`Driver`] (next sequence number, entries applied per node), and in the [`Layout::split`] layout
/// the followers' thread.
pub struct LoadCluster {
    /// The leader first, then the followers; only the leader in the split layout.
    nodes: Vec<Node>,
    /// Every member, by id (the leader is 0).
    members: Vec<Member>,
    /// Each member's node directory, by id.
    dirs: Vec<PathBuf>,
    /// The file holding [`ClusterSpec::client_key`], when there is one; removed on close.
    client_key_file: Option<PathBuf>,
    client: LocalClient,
    /// The harness runs the invokers of the nodes in `nodes` each cycle (see [`Layout::invoked`]).
    invoked: bool,
    /// Members the harness does not run (see [`pause_member`](Self::pause_member)).
    paused: Vec<bool>,
    /// How the harness idles when a cycle found no work: the consensus idle strategy under test when it
    /// invokes the consensus agent, else `yield`.
    idle: Idle,
    /// Offers and applies; applier `i` is member `i`'s (the followers' thread has its own in the split
    /// layout).
    driver: Driver,
    followers: Option<FollowerThread>,
    /// The services the harness applies the members' entries to instead of its own handler (see
    /// [`set_services`](LoadCluster::set_services)); empty: its own handler.
    services: Vec<Box<dyn StateMachine + Send>>,
    /// The first error a service's poll returned (`Node::poll_state`), reported by [`failure`](LoadCluster::failure).
    service_error: Option<String>,
    warnings: Vec<String>,
}

/// A boxed service as `Node::poll_state` takes it (a sized [`StateMachine`]): every callback goes to the
/// box's, so the service sees exactly what it would applied directly.
struct Boxed<'a>(&'a mut (dyn StateMachine + Send));

impl StateMachine for Boxed<'_> {
    fn apply(&mut self, position: i64, entry: &[u8]) {
        self.0.apply(position, entry);
    }
    fn apply_entry(&mut self, entry: &Entry<'_>, response: &mut Vec<u8>) {
        self.0.apply_entry(entry, response);
    }
    fn on_message(&mut self, entry: &Entry<'_>, cluster: &mut Cluster<'_>) {
        self.0.on_message(entry, cluster);
    }
    fn on_session_open(&mut self, session_id: u64, cluster: &mut Cluster<'_>) -> Result<(), SessionRefused> {
        self.0.on_session_open(session_id, cluster)
    }
    fn on_session_close(&mut self, session_id: u64, reason: CloseReason, cluster: &mut Cluster<'_>) {
        self.0.on_session_close(session_id, reason, cluster);
    }
    fn on_timer(&mut self, correlation_id: u64, cluster: &mut Cluster<'_>) {
        self.0.on_timer(correlation_id, cluster);
    }
    fn on_role_change(&mut self, role: Role) {
        self.0.on_role_change(role);
    }
    fn take_snapshot(&mut self, writer: &mut dyn std::io::Write) -> std::io::Result<()> {
        self.0.take_snapshot(writer)
    }
    fn load_snapshot(&mut self, reader: &mut dyn std::io::Read) -> std::io::Result<()> {
        self.0.load_snapshot(reader)
    }
}

impl std::fmt::Debug for LoadCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadCluster").field("offered", &self.offered()).field("applied", &self.applied()).finish()
    }
}

/// What the followers' thread of the split layout publishes.
#[derive(Default)]
struct FollowerState {
    stop: AtomicBool,
    /// A follower whose flag is set is not run at all (a stopped process, as far as its peers can tell);
    /// follower `i` is member `i + 1`.
    paused: Vec<AtomicBool>,
    applied: Vec<AtomicU64>,
    bad_entries: AtomicU64,
    loops: AtomicU64,
    idle_loops: AtomicU64,
}

/// The split layout's second harness thread: it starts every follower, then runs and applies them until
/// stopped.
struct FollowerThread {
    state: Arc<FollowerState>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl FollowerThread {
    /// Starts the thread, which pins itself to `core`, starts the followers from `builders` and runs
    /// them; returns once all have started (an error if one did not), with the thread's and the
    /// followers' start-up warnings.
    fn start(builders: Vec<NodeBuilder>, core: Option<usize>, msg: usize) -> Result<(Self, Vec<String>), SweepError> {
        let followers = builders.len();
        let state = Arc::new(FollowerState {
            paused: (0..followers).map(|_| AtomicBool::new(false)).collect(),
            applied: (0..followers).map(|_| AtomicU64::new(0)).collect(),
            ..FollowerState::default()
        });
        let (ready_tx, ready_rx) = mpsc::channel();
        let shared = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("followers".into())
            .spawn(move || {
                let mut warnings = Vec::new();
                if let Some(core) = core {
                    if let Err(e) = quorumcast_driver::agent::pin_current_thread(core) {
                        warnings.push(format!("the followers' thread runs unpinned: {e}"));
                    }
                }
                let started: Vec<_> = builders.into_iter().map(NodeBuilder::start).collect();
                if started.iter().any(Result::is_err) {
                    let errors: Vec<String> = started
                        .iter()
                        .enumerate()
                        .filter_map(|(i, s)| s.as_ref().err().map(|e| format!("follower {}: {e}", i + 1)))
                        .collect();
                    let error = format!("followers did not start: {}", errors.join("; "));
                    let _ = ready_tx.send(Err(error.clone()));
                    return Err(error);
                }
                let nodes: Vec<Node> = started.into_iter().flatten().collect();
                warnings.extend(nodes.iter().flat_map(|n| n.warnings().iter().cloned()));
                let _ = ready_tx.send(Ok(warnings));
                Self::run(nodes, &shared, msg)
            })
            .map_err(SweepError::Io)?;
        let started = ready_rx.recv().unwrap_or_else(|_| Err("the followers' thread ended before starting".into()));
        let warnings = started.map_err(SweepError::Cluster)?;
        Ok((Self { state, thread: Some(thread) }, warnings))
    }

    /// The thread's loop: one cycle of each follower that is not paused and its apply, a yield after a
    /// loop that found no work.
    fn run(mut nodes: Vec<Node>, state: &FollowerState, msg: usize) -> Result<(), String> {
        let mut driver = Driver::new(nodes.len(), Messages::Fixed(msg));
        let (mut loops, mut idle_loops) = (0u64, 0u64);
        while !state.stop.load(Ordering::Acquire) {
            let mut work = 0;
            for (i, node) in nodes.iter_mut().enumerate() {
                if state.paused[i].load(Ordering::Acquire) {
                    continue;
                }
                work += node.invoke().map_err(|e| e.to_string())?;
                work += driver.apply(i, node, 4096, |_| {});
                state.applied[i].store(driver.applied(i), Ordering::Release);
            }
            loops += 1;
            if work == 0 {
                idle_loops += 1;
                std::thread::yield_now();
            }
            // Published often enough that a slow loop (four followers at saturation: a few thousand a
            // second) still shows in a window of a few hundred milliseconds.
            if loops % 64 == 0 {
                state.loops.store(loops, Ordering::Relaxed);
                state.idle_loops.store(idle_loops, Ordering::Relaxed);
            }
        }
        state.bad_entries.store(driver.bad_entries(), Ordering::Release);
        for node in nodes {
            node.close().map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Stops the thread and its followers; the entries they applied out of sequence.
    fn stop(mut self) -> Result<u64, String> {
        self.state.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.join().map_err(|_| "the followers' thread panicked".to_string())??;
        }
        Ok(self.state.bad_entries.load(Ordering::Acquire))
    }
}

impl Drop for FollowerThread {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
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
/// datagrams fill less than half their allocation, as at MTU 1408 with 512 B messages (two frames, 1,088 B
/// a datagram), and each datagram dropped is a NAK and a stall of the commit. Half the buffer (a quarter
/// of what the kernel accounts) holds any datagram of 576 B or more, and so any full one. Status messages
/// count the window from what has arrived, so even 2 MiB rarely closes it.
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
        if spec.members < 3 || spec.members % 2 == 0 {
            return Err(SweepError::Config(format!(
                "{} members: a cluster has an odd number, at least 3",
                spec.members
            )));
        }
        let n = spec.members as i32;
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        let members = quorumcast_testkit::members_on(Ipv4Addr::LOCALHOST.into(), n)?;
        let dirs: Vec<PathBuf> = (0..n).map(|id| quorumcast_testkit::node_dir("sweep", run, id)).collect();
        let backoff = IdleStrategyConfig::default();
        let channel = spec.channel.clone().unwrap_or_else(|| channel(spec));
        // The members' session key: fresh for each cluster, held by its members alone.
        let session_key = AuthKey::generate()?;
        let base = |id: i32| {
            let builder = NodeBuilder::new(id, members.clone());
            let clients = ClientEndpointConfig {
                keys: spec.client_key.map(|key| ClientKey::new(DEFAULT_CLIENT_KEY_NAME, key)).into_iter().collect(),
                ..ClientEndpointConfig::enabled(session_key)
            };
            let builder = if spec.clients { builder.clients(clients) } else { builder };
            let builder = builder
                .leader(0)
                .timers(quorumcast_testkit::patient_timers())
                .directory(&dirs[id as usize])
                .clean_stale(true)
                .channel(channel.clone())
                .commit_piggyback(spec.control == Control::Piggyback)
                .sender_time_split(spec.time_split);
            match &spec.storage {
                // The sweep measures the replication path of the model: the log in memory (the cluster
                // bench measures the recorded log beside it).
                Storage::Memory => builder.memory_log(),
                Storage::Disk { root, sync } => builder.data_dir(root.join(id.to_string())).sync(*sync),
            }
        };
        let layout = spec.layout;
        let sender_idle = layout.sender_idle(spec.sender_idle);
        let mut nodes = Vec::with_capacity(spec.members);
        let mut warnings = Vec::new();
        let followers = if layout.split {
            let builders = (1..n).map(|id| base(id).threading(ThreadingMode::Invoker)).collect();
            let (thread, thread_warnings) = FollowerThread::start(builders, layout.followers, spec.msg)?;
            warnings = thread_warnings;
            Some(thread)
        } else {
            let mode = if layout.invoked { ThreadingMode::Invoker } else { ThreadingMode::Shared };
            for id in 1..n {
                let follower = base(id).threading(mode).idle([backoff; 4]).cores([layout.followers; 4]).start();
                nodes.push(follower.map_err(|e| SweepError::Cluster(format!("follower {id} did not start: {e}")))?);
            }
            None
        };
        let leader = if layout.leader_shared {
            base(0).threading(ThreadingMode::Shared).idle([spec.consensus_idle; 4]).cores([layout.sender; 4])
        } else if layout.split || layout.whole {
            base(0).threading(ThreadingMode::Invoker)
        } else {
            let mode = if layout.invoked { ThreadingMode::SharedNetworkInvoker } else { ThreadingMode::SharedNetwork };
            base(0).threading(mode).idle([spec.consensus_idle, sender_idle, sender_idle, backoff]).cores([
                layout.consensus,
                layout.sender,
                layout.sender,
                layout.followers,
            ])
        };
        let leader = leader.start().map_err(|e| SweepError::Cluster(format!("leader did not start: {e}")))?;
        nodes.insert(0, leader);
        warnings.extend(nodes.iter().flat_map(|n| n.warnings().iter().cloned()));
        if let Some(core) = layout.harness {
            if let Err(e) = quorumcast_driver::agent::pin_current_thread(core) {
                warnings.push(format!("the harness thread runs unpinned: {e}"));
            }
        }
        let invokes_consensus = layout.invoked && !layout.split && !layout.leader_shared;
        let harness_idle = if invokes_consensus { spec.consensus_idle } else { IdleStrategyConfig::Yield };
        let idle = harness_idle.to_idle().map_err(|e| SweepError::Config(format!("idle strategy: {e}")))?;
        if harness_idle.sleeps() {
            // As the agent runner does for its sleeping threads: park for the period asked, not 50 us more.
            if let Err(e) = set_timer_slack(Duration::from_nanos(1)) {
                warnings.push(format!("could not lower the harness thread's timer slack: {e}"));
            }
        }
        let client = nodes[0].client();
        let client_key_file = match spec.client_key.filter(|_| spec.clients) {
            Some(key) => Some(write_key_file(&dirs[0].with_extension("client-key"), &key)?),
            None => None,
        };
        let mut cluster = Self {
            nodes,
            members,
            dirs,
            client_key_file,
            client,
            invoked: layout.invoked,
            paused: vec![false; spec.members],
            idle,
            driver: Driver::new(spec.members, Messages::Fixed(spec.msg)),
            followers,
            services: Vec::new(),
            service_error: None,
            warnings,
        };
        cluster.warm_up()?;
        Ok(cluster)
    }

    /// Waits for every follower's image, commits one message everywhere, then waits until every member
    /// has made the spare log file that replaces the one its first term took.
    ///
    /// Why the last wait: the members make their spares off their agents' threads, but on a host with
    /// no core free of the agents they still share one with the harness or the Sender, and they are made
    /// a few hundred milliseconds after a new cluster's first term settles, inside its first points. Then
    /// the `log-spare` threads take the harness's core for whole scheduler ticks, and their stalls land in
    /// those points' tails. A point measures the cluster settled, as it runs between terms, not its start.
    /// After [`SPARE_WAIT`] the sweep goes on, with a warning that says so.
    fn warm_up(&mut self) -> Result<(), SweepError> {
        self.drive("the followers make an image of the leader's log", SETTLE_TIMEOUT, |c| {
            Ok(c.stats()[1..].iter().all(|s| s.receiver().images() >= 1))
        })?;
        self.drive("the leader's ingress takes a first message", SETTLE_TIMEOUT, |c| c.offer())?;
        self.drain(SETTLE_TIMEOUT)?;
        // The members without a spare ready.
        let waiting = |c: &Self| -> Vec<String> {
            let stats = c.stats();
            (0..stats.len()).filter(|&i| stats[i].log_files().spare_ready() != 1).map(|i| i.to_string()).collect()
        };
        let until = std::time::Instant::now() + SPARE_WAIT;
        let mut left = waiting(self);
        while !left.is_empty() && std::time::Instant::now() < until {
            self.failure()?;
            // Sleeps rather than yields when idle: the harness's core is one the spares' threads can have.
            if self.poll(|_| {}) == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
            left = waiting(self);
        }
        if !left.is_empty() {
            self.warnings.push(format!(
                "after {SPARE_WAIT:?}, member(s) {} still make their spare log file (on cores the agents keep \
                 busy): the first points overlap it",
                left.join(", ")
            ));
        }
        Ok(())
    }

    /// Runs harness cycles (yielding after one that found no work) until `done` holds: an error naming
    /// `what` once `timeout` has passed, when an agent failed, or when `done` fails.
    fn drive(
        &mut self,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut(&mut Self) -> Result<bool, SweepError>,
    ) -> Result<(), SweepError> {
        let outcome = quorumcast_testkit::load::drive_until(what, timeout, self, |c| {
            if let Some(failed) = c.agent_failure() {
                return Err(failed.to_string());
            }
            if done(c).map_err(|e| e.to_string())? {
                return Ok(None);
            }
            Ok(Some(c.poll(|_| {})))
        });
        outcome
            .map_err(|e| SweepError::Cluster(format!("{e} (offered {}, applied {:?})", self.offered(), self.applied())))
    }

    /// The first agent failure of any node, as an error (`Ok` while every agent runs).
    pub fn failure(&self) -> Result<(), SweepError> {
        self.agent_failure().map_or(Ok(()), Err)
    }

    /// The first agent failure of any node, or the first error of a service's poll, as an error.
    fn agent_failure(&self) -> Option<SweepError> {
        if let Some(error) = &self.service_error {
            return Some(SweepError::Cluster(format!("a service's poll failed: {error}")));
        }
        let failure = self.nodes.iter().flat_map(|n| n.failures()).next()?;
        Some(SweepError::Cluster(format!("an agent failed: {failure}")))
    }

    /// From now on, the harness applies member `i`'s committed entries to `services[i]`
    /// (`Node::poll_state`: every callback of the service interface) instead of its own handler; an empty
    /// list goes back to its own handler. A service put in mid-log sees the entries from where the
    /// member's applied position is, with the session table and timers as the log made them: right for a
    /// bench that swaps services between runs, not for an application (its state would not be the log's).
    ///
    /// While services are in, the harness's own numbered messages go to them too and are not counted:
    /// offer none (the services' load comes from remote clients). Only where the harness applies every
    /// member (not the split layout, whose followers another thread applies); an error otherwise.
    pub fn set_services(&mut self, services: Vec<Box<dyn StateMachine + Send>>) -> Result<(), SweepError> {
        if !services.is_empty() && (self.followers.is_some() || services.len() != self.nodes.len()) {
            return Err(SweepError::Config(format!(
                "{} services for {} members the harness applies (the split layout's followers are another thread's)",
                services.len(),
                self.nodes.len()
            )));
        }
        self.services = services;
        Ok(())
    }

    /// Takes the services back (see [`set_services`](Self::set_services)): the harness applies with its
    /// own handler again.
    pub fn take_services(&mut self) -> Vec<Box<dyn StateMachine + Send>> {
        std::mem::take(&mut self.services)
    }

    /// Offers the next message (its sequence number in the first 8 bytes). `Ok(false)` when the ingress
    /// is full (back pressure); an error when the node refuses for another reason.
    #[inline]
    pub fn offer(&mut self) -> Result<bool, SweepError> {
        self.driver.offer(&self.client).map_err(|e| SweepError::Cluster(format!("offer refused: {e}")))
    }

    /// One harness cycle: runs the invokers of the nodes it runs (when [`Layout::invoked`]), then applies
    /// what is committed on each, calling `on_commit(seq)` for each entry the leader applies. Returns the
    /// work done (agent work plus entries applied); pass it to [`idle`](Self::idle).
    #[inline]
    pub fn poll(&mut self, mut on_commit: impl FnMut(u64)) -> usize {
        let mut work = 0;
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if self.paused[i] {
                continue;
            }
            if self.invoked {
                // A failed agent is reported by `failure` through `Node::failures`.
                work += node.invoke().unwrap_or(0);
            }
            if let Some(service) = self.services.get_mut(i) {
                match node.poll_state(&mut Boxed(service.as_mut()), 4096) {
                    Ok(fragments) => work += fragments,
                    Err(e) => {
                        self.service_error.get_or_insert_with(|| e.to_string());
                    }
                }
                continue;
            }
            work += self.driver.apply(i, node, 4096, |seq| {
                if i == 0 {
                    on_commit(seq);
                }
            });
        }
        work
    }

    /// Idles after a harness cycle that did `work`, with the harness's idle strategy.
    #[inline]
    pub fn idle(&mut self, work: usize) {
        self.idle.idle(work);
    }

    /// One harness cycle ([`poll`](Self::poll)) and the idle after it ([`idle`](Self::idle)); returns the
    /// work done.
    #[inline]
    pub fn cycle(&mut self, on_commit: impl FnMut(u64)) -> usize {
        let work = self.poll(on_commit);
        self.idle(work);
        work
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

    /// Stops running member `id` (a follower) until called again with `paused` false: to its peers, a
    /// stopped process. Only where the harness runs the followers (an invoked layout); an error otherwise.
    pub fn pause_member(&mut self, id: usize, paused: bool) -> Result<(), SweepError> {
        let follower = (1..self.members.len()).contains(&id);
        match &self.followers {
            Some(thread) if follower => thread.state.paused[id - 1].store(paused, Ordering::Release),
            None if follower && self.invoked => self.paused[id] = paused,
            _ => return Err(SweepError::Config(format!("member {id} cannot be paused in this layout"))),
        }
        Ok(())
    }

    /// Polls until every node applied everything offered (and every remote client's message the leader
    /// applied), or `timeout` passes.
    pub fn drain(&mut self, timeout: Duration) -> Result<(), SweepError> {
        self.drive("the cluster applies everything offered", timeout, |c| {
            let client_messages = c.driver.applier(0).client_messages();
            let clients_done = c.followers.is_some()
                || (1..c.size()).all(|i| c.driver.applier(i).client_messages() >= client_messages);
            Ok(c.applied().iter().all(|&a| a >= c.offered()) && clients_done)
        })
    }

    /// True when the harness runs the leader's consensus agent and the followers (see [`Layout::invoked`]).
    pub fn invokes_agents(&self) -> bool {
        self.invoked
    }

    /// Messages offered so far (the next sequence number).
    pub fn offered(&self) -> u64 {
        self.driver.offered()
    }

    /// Entries applied on the leader so far (committed).
    pub fn committed(&self) -> u64 {
        self.driver.applied(0)
    }

    /// The leader's commit position.
    pub fn commit_position(&self) -> i64 {
        self.nodes[0].commit_position()
    }

    /// Members of the cluster ([`ClusterSpec::members`]).
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Entries applied on each node, the leader first.
    pub fn applied(&self) -> Vec<u64> {
        match &self.followers {
            Some(thread) => std::iter::once(self.driver.applied(0))
                .chain(thread.state.applied.iter().map(|a| a.load(Ordering::Acquire)))
                .collect(),
            None => self.driver.applied_all(),
        }
    }

    /// The followers' thread's loops so far and those that found no work (split layout; zeros otherwise).
    pub fn follower_loops(&self) -> (u64, u64) {
        self.followers
            .as_ref()
            .map_or((0, 0), |t| (t.state.loops.load(Ordering::Relaxed), t.state.idle_loops.load(Ordering::Relaxed)))
    }

    /// The file of the client key every client must hold (`qc-client --client-key-file`), when the
    /// cluster requires one ([`ClusterSpec::client_key`]).
    pub fn client_key_file(&self) -> Option<&Path> {
        self.client_key_file.as_deref()
    }

    /// Each member's id and client endpoint, the leader (0) first: where a remote client connects, when
    /// the cluster takes clients ([`ClusterSpec::clients`]).
    pub fn client_endpoints(&self) -> Vec<(i32, SocketAddr)> {
        self.members.iter().map(|m| (m.id, m.client)).collect()
    }

    /// Remote clients' messages the leader applied so far (they are not in [`committed`](Self::committed)).
    pub fn client_messages(&self) -> u64 {
        self.driver.applier(0).client_messages()
    }

    /// Entries applied out of sequence so far on the nodes this thread applies (must stay 0).
    pub fn out_of_order(&self) -> u64 {
        self.driver.bad_entries()
    }

    /// Where the log stands on the leader: appended, sent, acknowledged by every follower, committed and
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

    /// Every node's counters, the leader first (a follower's read from its counters file when another
    /// thread runs it).
    pub fn stats(&self) -> Vec<Stats> {
        (0..self.size())
            .map(|i| match self.nodes.get(i) {
                Some(node) => node.stats(),
                None => {
                    CountersReader::open(self.dirs[i].join("counters.dat")).map(|c| Stats::read(&c)).unwrap_or_default()
                }
            })
            .collect()
    }

    /// Start-up warnings of every node.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Stops every node (removing its directory); an error names any agent failure, or entries applied
    /// out of order.
    pub fn close(self) -> Result<(), SweepError> {
        let mut errors = Vec::new();
        if let Some(path) = &self.client_key_file {
            let _ = std::fs::remove_file(path);
        }
        let mut bad = self.out_of_order();
        if let Some(thread) = self.followers {
            match thread.stop() {
                Ok(n) => bad += n,
                Err(e) => errors.push(e),
            }
        }
        for node in self.nodes {
            if let Err(e) = node.close() {
                errors.push(e.to_string());
            }
        }
        if bad > 0 {
            errors.push(format!("{bad} entries were applied out of order"));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(SweepError::Cluster(errors.join("; ")))
        }
    }
}

#[cfg(test)]
mod tests;
