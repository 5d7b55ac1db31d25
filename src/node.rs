//! A cluster node: what an application embeds.
//!
//! ```no_run
//! use quorumcast::node::{Member, NodeBuilder};
//!
//! let members = vec![
//!     Member { id: 0, endpoint: "127.0.0.1:40100".parse().unwrap() },
//!     Member { id: 1, endpoint: "127.0.0.1:40101".parse().unwrap() },
//!     Member { id: 2, endpoint: "127.0.0.1:40102".parse().unwrap() },
//! ];
//! let mut node = NodeBuilder::new(0, members).leader(0).mtu(8192).idle_all("backoff").start().unwrap();
//! let client = node.client();
//! client.offer(b"set x = 1").unwrap();
//! node.poll_committed(10, |entry| println!("apply {entry:?}"));
//! node.close().unwrap();
//! ```
//!
//! Every node runs three agents (consensus, sender, receiver) in the configured threading mode. The leader
//! takes client messages from its ingress ring (any thread of the process, or another process, through a
//! [`Client`]), appends each once into its log, replicates the log to the followers over UDP, and commits by
//! quorum. Every node hands committed entries, in log order, to [`Node::poll_committed`].

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::agent::{
    available_cores, Agent, AgentCounters, AgentFailure, AgentHandles, AgentLayout, AgentRole, AgentSpec, LayoutError,
    ThreadingMode, Warning,
};
use crate::auth::AuthKey;
use crate::buffer::{AtomicBuffer, Region};
use crate::channel::{membership_tag, validate_timer, ChannelConfig, ConfigError};
use crate::clock::nanos;
use crate::consensus::{
    ConsensusCounters, FollowerConsensus, LeaderConsensus, LeaderParts, LogIdentity, Role, INGRESS_MESSAGE,
};
use crate::counters::{Counter, CountersManager};
use crate::directory::{DirectoryError, NodeDirectory, StalePolicy};
use crate::flow_control::FlowControlMode;
use crate::frame::Frame;
use crate::idle::IdleStrategyConfig;
use crate::log_buffer::{LogBuffer, LogConfig, LogReader, MessageReader};
use crate::network_publication::{NetworkPublication, SenderCounters};
use crate::receiver::{FollowerLink, ReceiveChannelConfig, Receiver, ReceiverCounters, Subscription};
use crate::ring_buffer::{self, ManyToOneRingBuffer, OneToOneRingBuffer, RingError};
use crate::sender::Sender;
use crate::stats::{agent_type_of, type_of, Stats, TYPE_ACK_POSITION};
use crate::transport::SendMode;

/// One member of the cluster: its id and the endpoint its receiver listens on for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
pub struct Member {
    /// Member id, unique in the cluster.
    pub id: i32,
    /// Where this member receives the replicated log.
    pub endpoint: SocketAddr,
}

/// Everything a node is started from. Build it with [`NodeBuilder`].
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's member id.
    pub id: i32,
    /// Every member, this one included.
    pub members: Vec<Member>,
    /// The leader's id (fixed until elections exist).
    pub leader: i32,
    /// The node directory; `None` uses `/dev/shm/quorumcast/node-<id>`.
    pub directory: Option<PathBuf>,
    /// Remove a stale directory of a crashed run instead of refusing to start.
    pub clean_stale: bool,
    /// The log channel: MTU, term length, send mode, timers, socket buffers and faults.
    pub channel: ChannelConfig,
    /// Stream id of the log.
    pub stream_id: i32,
    /// Idle strategies of the consensus, sender and receiver agents.
    pub idle: [IdleStrategyConfig; 3],
    /// Cores to pin the consensus, sender and receiver agents to.
    pub cores: [Option<usize>; 3],
    /// How the agents are put on threads.
    pub threading: ThreadingMode,
    /// Start a layout with more busy-spinning threads than cores anyway (with a warning).
    pub force_layout: bool,
    /// Carry the commit position in data frames while data flows.
    pub commit_piggyback: bool,
    /// Resend an unchanged commit position this often.
    pub commit_heartbeat: Duration,
    /// A follower acknowledges its append position at least this often.
    pub ack_interval: Duration,
    /// Bytes of the client ingress ring (a power of two).
    pub ingress_capacity: usize,
    /// A follower that restarts with its log applied up to here asks the leader for the rest; a
    /// follower without it starts at position 0.
    pub resume_from: Option<i64>,
}

impl NodeConfig {
    pub(crate) fn validate(&self) -> Result<(), NodeError> {
        let ids: Vec<i32> = self.members.iter().map(|m| m.id).collect();
        if !ids.contains(&self.id) {
            return Err(NodeError::Config(format!("node id {} is not among the members {ids:?}", self.id)));
        }
        if !ids.contains(&self.leader) {
            return Err(NodeError::Config(format!("leader id {} is not among the members {ids:?}", self.leader)));
        }
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        if sorted.len() != ids.len() {
            return Err(NodeError::Config(format!("member ids must be unique: {ids:?}")));
        }
        for idle in &self.idle {
            idle.validate().map_err(|e| NodeError::Config(e.to_string()))?;
        }
        validate_timer("commit_heartbeat", self.commit_heartbeat)?;
        validate_timer("ack_interval", self.ack_interval)?;
        Ok(())
    }

    /// This cluster's member-list tag (see [`membership_tag`]).
    fn membership(&self) -> i64 {
        membership_tag(&self.members.iter().map(|m| (m.id, m.endpoint)).collect::<Vec<_>>())
    }

    fn leader_endpoint(&self) -> SocketAddr {
        self.members.iter().find(|m| m.id == self.leader).expect("validated").endpoint
    }

    fn role(&self) -> Role {
        if self.id == self.leader {
            Role::Leader
        } else {
            Role::Follower
        }
    }

    fn followers(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(move |m| m.id != self.leader)
    }
}

/// Builds a [`NodeConfig`] and starts the node.
#[derive(Clone, Debug)]
pub struct NodeBuilder {
    config: NodeConfig,
}

impl NodeBuilder {
    /// A node with member id `id` of the cluster `members`, led by the first member of `members` until
    /// [`leader`](Self::leader) names another.
    pub fn new(id: i32, members: Vec<Member>) -> Self {
        let backoff = IdleStrategyConfig::default();
        Self {
            config: NodeConfig {
                id,
                leader: members.first().map_or(0, |m| m.id),
                members,
                directory: None,
                clean_stale: false,
                channel: ChannelConfig::default(),
                stream_id: 1001,
                idle: [backoff, backoff, backoff],
                cores: [None; 3],
                threading: ThreadingMode::Dedicated,
                force_layout: false,
                commit_piggyback: false,
                commit_heartbeat: Duration::from_millis(100),
                ack_interval: Duration::from_millis(200),
                ingress_capacity: 4 << 20,
                resume_from: None,
            },
        }
    }

    /// A builder from a whole configuration.
    pub fn from_config(config: NodeConfig) -> Self {
        Self { config }
    }

    /// The leader's member id (by default the first member's).
    pub fn leader(mut self, id: i32) -> Self {
        self.config.leader = id;
        self
    }

    /// The node directory.
    pub fn directory(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.directory = Some(path.into());
        self
    }

    /// Remove a stale node directory left by a crashed run.
    pub fn clean_stale(mut self, clean: bool) -> Self {
        self.config.clean_stale = clean;
        self
    }

    /// The MTU of the log channel (1408 or 8192 are the presets).
    pub fn mtu(mut self, mtu: usize) -> Self {
        self.config.channel.mtu = mtu;
        self
    }

    /// The term length of the log.
    pub fn term_length(mut self, term_length: usize) -> Self {
        self.config.channel.term_length = term_length;
        self.config.channel.receiver_window = self.config.channel.receiver_window.min(term_length / 2);
        self
    }

    /// Tags and checks every datagram of the log channel with this shared key (every member needs it).
    pub fn auth_key(mut self, key: AuthKey) -> Self {
        self.config.channel.auth = Some(key);
        self
    }

    /// The send mode of the log channel.
    pub fn send_mode(mut self, mode: SendMode) -> Self {
        self.config.channel.send_mode = mode;
        self
    }

    /// The whole channel configuration (timers, socket buffers, faults); destinations are filled in.
    pub fn channel(mut self, channel: ChannelConfig) -> Self {
        self.config.channel = channel;
        self
    }

    /// The idle strategy of every agent, in its text form (`backoff`, `sleep-ns:1000`, `noop`, ...).
    ///
    /// # Panics
    /// On a string that is not an idle strategy; use [`NodeBuilder::idle`] to handle the error.
    pub fn idle_all(mut self, idle: &str) -> Self {
        let idle: IdleStrategyConfig = idle.parse().expect("an idle strategy");
        self.config.idle = [idle; 3];
        self
    }

    /// The idle strategies of the consensus, sender and receiver agents.
    pub fn idle(
        mut self,
        consensus: IdleStrategyConfig,
        sender: IdleStrategyConfig,
        receiver: IdleStrategyConfig,
    ) -> Self {
        self.config.idle = [consensus, sender, receiver];
        self
    }

    /// The cores of the consensus, sender and receiver agents.
    pub fn cores(mut self, consensus: Option<usize>, sender: Option<usize>, receiver: Option<usize>) -> Self {
        self.config.cores = [consensus, sender, receiver];
        self
    }

    /// The threading mode.
    pub fn threading(mut self, mode: ThreadingMode) -> Self {
        self.config.threading = mode;
        self
    }

    /// Start even when busy-spinning threads outnumber cores (a warning instead of a refusal).
    pub fn force_layout(mut self, force: bool) -> Self {
        self.config.force_layout = force;
        self
    }

    /// Carry the commit position in data frames while data flows.
    pub fn commit_piggyback(mut self, piggyback: bool) -> Self {
        self.config.commit_piggyback = piggyback;
        self
    }

    /// Bytes of the client ingress ring (a power of two).
    pub fn ingress_capacity(mut self, bytes: usize) -> Self {
        self.config.ingress_capacity = bytes;
        self
    }

    /// A follower restarting with its state applied up to `position` catches up from there.
    pub fn resume_from(mut self, position: i64) -> Self {
        self.config.resume_from = Some(position);
        self
    }

    /// The configuration built so far.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// Starts the node.
    pub fn start(self) -> Result<Node, NodeError> {
        Node::start(self.config)
    }
}

/// Why a node could not start or failed.
#[derive(Debug)]
pub enum NodeError {
    /// The configuration breaks a rule.
    Config(String),
    /// The node directory is in use or stale.
    Directory(DirectoryError),
    /// An I/O error while making its files or sockets.
    Io(std::io::Error),
    /// The agent layout was refused (too many busy threads for the cores).
    Layout(LayoutError),
    /// An agent failed.
    Agents(Vec<AgentFailure>),
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => write!(f, "configuration: {e}"),
            Self::Directory(e) => write!(f, "{e}"),
            Self::Io(e) => write!(f, "{e}"),
            Self::Layout(e) => write!(f, "{e}"),
            Self::Agents(failures) => {
                write!(f, "agents failed:")?;
                for failure in failures {
                    write!(f, " {failure};")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for NodeError {}

impl From<std::io::Error> for NodeError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

impl From<ConfigError> for NodeError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e.0)
    }
}

fn other<E: fmt::Display>(e: E) -> NodeError {
    NodeError::Config(e.to_string())
}

/// Why an offer was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OfferError {
    /// The ingress is full: the leader's log is back-pressured. Retry later.
    BackPressured,
    /// This node is not the leader, and appended nothing: offer on `leader` (the member id of the leader
    /// this node knows, `None` while it knows none).
    NotLeader {
        /// The leader's member id, if known.
        leader: Option<i32>,
    },
    /// The node is closed.
    Closed,
    /// The message is longer than the ingress takes (capacity / 8).
    TooLong,
}

impl fmt::Display for OfferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BackPressured => f.write_str("back pressured: the leader's ingress is full; retry"),
            Self::NotLeader { leader: Some(id) } => write!(f, "not the leader: offer on member {id}, the leader"),
            Self::NotLeader { leader: None } => f.write_str("not the leader, and no leader is known yet: retry"),
            Self::Closed => f.write_str("the node is closed"),
            Self::TooLong => f.write_str("message longer than the ingress takes (capacity / 8)"),
        }
    }
}

impl std::error::Error for OfferError {}

/// What nodes and their clients share.
#[derive(Debug)]
struct Shared {
    role: AtomicU8,
    /// The leader's member id as this node knows it (fixed by configuration until elections are wired).
    leader: i32,
    closed: AtomicBool,
}

impl Shared {
    fn leader(&self) -> Option<i32> {
        Some(self.leader)
    }

    fn role(&self) -> Role {
        if self.role.load(Ordering::Acquire) == 0 {
            Role::Leader
        } else {
            Role::Follower
        }
    }
}

/// A handle for offering messages to the cluster through a node; cheap to clone, usable from any thread.
#[derive(Clone, Debug)]
pub struct Client {
    ingress: Arc<ManyToOneRingBuffer>,
    shared: Arc<Shared>,
}

impl Client {
    fn check(&self) -> Result<(), OfferError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(OfferError::Closed);
        }
        if self.shared.role() != Role::Leader {
            return Err(OfferError::NotLeader { leader: self.shared.leader() });
        }
        Ok(())
    }

    /// Offers `message` for replication. Returns its ingress position (its place in the leader's ingress;
    /// the consensus agent appends it to the log in that order), or why it was not taken. Never blocks.
    pub fn offer(&self, message: &[u8]) -> Result<i64, OfferError> {
        self.check()?;
        match self.ingress.write(INGRESS_MESSAGE, message) {
            Ok(()) => Ok(self.ingress.producer_position()),
            Err(e) => Err(ring_error(e)),
        }
    }

    /// Claims room for a message of `length` bytes, to be written in place and committed; never blocks.
    pub fn try_claim(&self, length: usize) -> Result<ring_buffer::Claim<'_>, OfferError> {
        self.check()?;
        self.ingress.try_claim(INGRESS_MESSAGE, length).map_err(ring_error)
    }
}

fn ring_error(e: RingError) -> OfferError {
    match e {
        RingError::Full => OfferError::BackPressured,
        _ => OfferError::TooLong,
    }
}

/// How this node reads its committed entries.
enum CommittedReader {
    Leader(MessageReader),
    Follower { subscription: Subscription },
}

/// A running cluster node.
pub struct Node {
    config: NodeConfig,
    shared: Arc<Shared>,
    ingress: Arc<ManyToOneRingBuffer>,
    commit: Counter,
    reader: CommittedReader,
    handles: Option<AgentHandles>,
    counters: CountersManager,
    directory: Option<NodeDirectory>,
    warnings: Vec<String>,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node").field("id", &self.config.id).field("role", &self.role()).finish()
    }
}

/// The agents and endpoints a node is made of, before they are put on threads.
struct Parts {
    consensus: Box<dyn Agent>,
    sender: Sender,
    receiver: Receiver,
    commit: Counter,
    reader: CommittedReader,
    warnings: Vec<String>,
}

impl Node {
    /// Starts a node from `config`.
    pub fn start(config: NodeConfig) -> Result<Node, NodeError> {
        config.validate()?;
        config.channel.validate()?;
        let path =
            config.directory.clone().unwrap_or_else(|| NodeDirectory::default_path(&format!("node-{}", config.id)));
        let policy = if config.clean_stale { StalePolicy::Clean } else { StalePolicy::Refuse };
        let directory = NodeDirectory::create(&path, policy).map_err(NodeError::Directory)?;
        let counters = CountersManager::create(directory.file("counters.dat"), 512).map_err(other)?;
        let ingress_path = directory.file("ingress.ring");
        let ingress_length = ring_buffer::required_length(config.ingress_capacity);
        let ingress_region = Region::create_file(&ingress_path, ingress_length, true).map_err(|e| {
            NodeError::Io(std::io::Error::new(e.kind(), format!("cannot create {}: {e}", ingress_path.display())))
        })?;
        let ingress = Arc::new(ManyToOneRingBuffer::new(AtomicBuffer::new(ingress_region)).map_err(other)?);
        let parts = match config.role() {
            Role::Leader => leader_parts(&config, &directory, &ingress, &counters)?,
            Role::Follower => follower_parts(&config, &directory, &counters)?,
        };
        let Parts { consensus, sender, receiver, commit, reader, mut warnings } = parts;
        let handles = start_agents(&config, consensus, sender, receiver, &counters, &mut warnings)?;
        let role = if config.role() == Role::Leader { 0 } else { 1 };
        let shared =
            Arc::new(Shared { role: AtomicU8::new(role), leader: config.leader, closed: AtomicBool::new(false) });
        Ok(Node {
            config,
            shared,
            ingress,
            commit,
            reader,
            handles: Some(handles),
            counters,
            directory: Some(directory),
            warnings,
        })
    }

    /// A client of this node.
    pub fn client(&self) -> Client {
        Client { ingress: Arc::clone(&self.ingress), shared: Arc::clone(&self.shared) }
    }

    /// This node's role.
    pub fn role(&self) -> Role {
        self.shared.role()
    }

    /// This node's member id.
    pub fn id(&self) -> i32 {
        self.config.id
    }

    /// The member id of the leader this node knows (`None` while it knows none).
    pub fn leader_id(&self) -> Option<i32> {
        self.shared.leader()
    }

    /// The leadership term this node is in (0 while the leader is fixed by configuration).
    pub fn leadership_term_id(&self) -> i64 {
        0
    }

    /// The commit position this node knows.
    pub fn commit_position(&self) -> i64 {
        self.commit.get()
    }

    /// The log position this node has applied up to through [`Node::poll_committed`] (what a follower that
    /// restarts passes to [`NodeBuilder::resume_from`]).
    pub fn applied_position(&self) -> i64 {
        match &self.reader {
            CommittedReader::Leader(reader) => reader.position(),
            CommittedReader::Follower { subscription } => subscription.position().unwrap_or(0),
        }
    }

    /// Warnings from start-up (layout, socket buffers, send mode fallbacks).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The node's counters (for `qc-stat` in-process, and benchmarks).
    pub fn counters(&self) -> &CountersManager {
        &self.counters
    }

    /// The node's counters as read now, by what they count: `node.stats().sender().naks_received()`.
    pub fn stats(&self) -> Stats {
        Stats::read(&self.counters.reader())
    }

    /// The node directory.
    pub fn directory(&self) -> Option<&std::path::Path> {
        self.directory.as_ref().map(|d| d.path())
    }

    /// In a mode that [invokes](ThreadingMode::invokes) agents, runs one duty cycle of every invoked agent on
    /// the calling thread; returns the work done (0 in other modes).
    pub fn invoke(&mut self) -> Result<usize, NodeError> {
        match self.handles.as_mut().and_then(|h| h.invoker.as_mut()) {
            Some(invoker) => invoker.invoke().map_err(|f| NodeError::Agents(vec![f])),
            None => Ok(0),
        }
    }

    /// Parks the node's agent threads between duty cycles, waiting up to `timeout` for each, so that their
    /// cores are free (a measurement that needs them, maintenance); true when all parked. A paused node
    /// sends and reads nothing, and its peers see silence: resume well inside their liveness timeouts (a
    /// channel's `receiver_timeout`). Agents run by [`invoke`](Self::invoke) run only when invoked anyway.
    pub fn pause_agents(&self, timeout: Duration) -> bool {
        self.handles.as_ref().is_none_or(|h| h.pause(timeout))
    }

    /// Lets the agent threads that [`pause_agents`](Self::pause_agents) parked go on.
    pub fn resume_agents(&self) {
        if let Some(handles) = &self.handles {
            handles.resume();
        }
    }

    /// Agent failures so far (an agent that failed has stopped; the node should be closed).
    pub fn failures(&self) -> Vec<AgentFailure> {
        self.handles.as_ref().map(AgentHandles::failures).unwrap_or_default()
    }

    /// Hands up to `fragment_limit` fragments' worth of committed entries, in log order, to `handler`;
    /// returns the fragments read.
    pub fn poll_committed(&mut self, fragment_limit: usize, handler: impl FnMut(&[u8])) -> usize {
        let commit = self.commit.get();
        match &mut self.reader {
            CommittedReader::Follower { subscription } => subscription.poll_bounded(commit, fragment_limit, handler),
            CommittedReader::Leader(reader) => reader.poll_bounded(commit, fragment_limit, handler),
        }
    }

    /// Stops the agents, removes the node directory and reports any agent failure.
    pub fn close(mut self) -> Result<(), NodeError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), NodeError> {
        self.shared.closed.store(true, Ordering::Release);
        let result = match self.handles.take() {
            Some(handles) => handles.close().map_err(NodeError::Agents),
            None => Ok(()),
        };
        if let Some(directory) = self.directory.take() {
            directory.close().map_err(NodeError::Directory)?;
        }
        result
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn leader_parts(
    config: &NodeConfig,
    directory: &NodeDirectory,
    ingress: &Arc<ManyToOneRingBuffer>,
    counters: &CountersManager,
) -> Result<Parts, NodeError> {
    let allocate = |label: &str| node_counter(counters, label);
    let session_id = session_id_for(config.id);
    let log_config = LogConfig {
        session_id,
        stream_id: config.stream_id,
        pre_touch: true,
        ..LogConfig::new(config.channel.term_length, config.channel.mtu)
    };
    let log = LogBuffer::create(&directory.file("log.dat"), log_config).map_err(other)?;
    let appender = log.appender().map_err(other)?;
    let reader = LogReader::new(&log);
    let consumer = log.register_consumer(0).map_err(other)?;
    let followers: Vec<&Member> = config.followers().collect();
    // The leader sends from its member endpoint, the one source its followers accept, and waits for the
    // followers a commit needs (a majority, less itself), not for the slowest.
    let needed = config.members.len() / 2;
    let channel = ChannelConfig {
        destinations: followers.iter().map(|m| m.endpoint).collect(),
        source: Some(config.leader_endpoint()),
        membership: Some(config.membership()),
        flow_control: FlowControlMode::Quorum(needed),
        ..config.channel.clone()
    };
    let mut publication = NetworkPublication::new(log, channel, SenderCounters::new(allocate)).map_err(other)?;
    let mut warnings = publication.warnings().to_vec();
    let acks: Vec<Counter> = followers
        .iter()
        .map(|m| {
            let label = format!("ack position of member {}", m.id);
            counters.allocate_owned(&label, TYPE_ACK_POSITION, m.id.into()).expect("counters file has room")
        })
        .collect();
    let ack_members: Vec<(i32, Counter)> = followers.iter().map(|m| m.id).zip(acks.iter().cloned()).collect();
    let refused_acks = allocate("leader acknowledgements refused");
    publication.set_control_handler(Box::new(move |destination, frame| {
        // A follower acknowledges for itself only, and only this log: destination `d` is follower `d`.
        match (frame, ack_members.get(destination)) {
            (Frame::AppendPosition(ack), Some((id, counter)))
                if ack.member_id == *id && ack.session_id == session_id =>
            {
                counter.set_max(ack.log_position);
            }
            _ => refused_acks.increment(),
        }
    }));
    let command_buffer = AtomicBuffer::anonymous(ring_buffer::required_length(64 * 1024))?;
    let commands = OneToOneRingBuffer::new(command_buffer.clone()).map_err(other)?;
    let sender_commands = OneToOneRingBuffer::new(command_buffer).map_err(other)?;
    let mut sender = Sender::new(vec![publication]);
    sender.add_command_ring(sender_commands, 0);
    let counters = ConsensusCounters::new(allocate);
    let commit = counters.commit.clone();
    let consensus = LeaderConsensus::new(LeaderParts {
        ingress: ManyToOneRingBuffer::new(ingress.buffer().clone()).map_err(other)?,
        appender,
        acks,
        commands,
        identity: LogIdentity {
            session_id,
            stream_id: config.stream_id,
            leader_member_id: config.id,
            leadership_term_id: 0,
        },
        piggyback: config.commit_piggyback,
        piggyback_refresh: (config.channel.receiver_window / 4) as i64,
        commit_heartbeat_ns: nanos(config.commit_heartbeat),
        counters,
    });
    let (receiver, _, w) = Receiver::new(Vec::new(), ReceiverCounters::new(allocate))?;
    warnings.extend(w);
    Ok(Parts {
        consensus: Box::new(consensus),
        sender,
        receiver,
        commit,
        reader: CommittedReader::Leader(MessageReader::new(reader, consumer, 0)),
        warnings,
    })
}

fn follower_parts(
    config: &NodeConfig,
    directory: &NodeDirectory,
    counters: &CountersManager,
) -> Result<Parts, NodeError> {
    let allocate = |label: &str| node_counter(counters, label);
    let me = config.members.iter().find(|m| m.id == config.id).expect("validated");
    let commit = allocate("follower commit position");
    let mut channel = ReceiveChannelConfig::new(me.endpoint, config.stream_id);
    channel.channel = ChannelConfig { membership: Some(config.membership()), ..config.channel.clone() };
    // Only the leader's endpoint may send the log; the other members' datagrams are counted apart.
    channel.peers = vec![config.leader_endpoint()];
    channel.members = config.members.iter().map(|m| m.endpoint).filter(|e| *e != me.endpoint).collect();
    channel.image_dir = Some(directory.path().to_path_buf());
    // A follower's log must start where its state does (0 for a fresh one), never where the leader's
    // sender happens to be when the SETUP arrives: it would acknowledge and apply a log it does not have.
    channel.join_position = Some(config.resume_from.unwrap_or(0));
    channel.follower = Some(FollowerLink {
        member_id: config.id,
        commit: commit.clone(),
        piggyback: config.commit_piggyback,
        ack_interval: config.ack_interval,
    });
    let (receiver, mut subscriptions, warnings) = Receiver::new(vec![channel], ReceiverCounters::new(allocate))?;
    Ok(Parts {
        consensus: Box::new(FollowerConsensus),
        sender: Sender::new(Vec::new()),
        receiver,
        commit,
        reader: CommittedReader::Follower { subscription: subscriptions.remove(0) },
        warnings,
    })
}

fn start_agents(
    config: &NodeConfig,
    consensus: Box<dyn Agent>,
    sender: Sender,
    receiver: Receiver,
    counters: &CountersManager,
    warnings: &mut Vec<String>,
) -> Result<AgentHandles, NodeError> {
    let specs = vec![
        AgentSpec { role: AgentRole::Consensus, agent: consensus, idle: config.idle[0], core: config.cores[0] },
        AgentSpec { role: AgentRole::Sender, agent: Box::new(sender), idle: config.idle[1], core: config.cores[1] },
        AgentSpec { role: AgentRole::Receiver, agent: Box::new(receiver), idle: config.idle[2], core: config.cores[2] },
    ];
    let layout = AgentLayout::plan(config.threading, specs).map_err(NodeError::Layout)?;
    let layout_warnings = layout.check_cores(available_cores(), config.force_layout).map_err(NodeError::Layout)?;
    warnings.extend(layout_warnings.iter().map(Warning::to_string));
    let mut handles = layout
        .start(|name| {
            AgentCounters::new(|what| {
                counters
                    .allocate(&format!("{name} {what}"), agent_type_of(what))
                    .unwrap_or_else(|_| Counter::detached())
            })
        })
        .map_err(NodeError::Layout)?;
    warnings.extend(handles.warnings.iter().map(Warning::to_string));
    if let Some(invoker) = handles.invoker.as_mut() {
        invoker.start().map_err(|f| NodeError::Agents(vec![f]))?;
    }
    Ok(handles)
}

/// Allocates the node counter labelled `label`, with the type id the catalogue gives it.
fn node_counter(counters: &CountersManager, label: &str) -> Counter {
    counters.allocate(label, type_of(label)).expect("counters file has room")
}

/// A session id for the log of a leader: distinct per member and per start, so followers tell a restarted
/// leader's log from the old one.
fn session_id_for(member: i32) -> i32 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    (nanos as i32 & 0x7FFF_0000) | (member & 0xFFFF)
}
