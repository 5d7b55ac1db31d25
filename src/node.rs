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
use crate::counters::{Counter, CountersManager, TYPE_USER_MIN};
use crate::directory::{DirectoryError, NodeDirectory, StalePolicy};
use crate::flow_control::FlowControlMode;
use crate::frame::Frame;
use crate::idle::IdleStrategyConfig;
use crate::log_buffer::{ConsumerPosition, FragmentAssembler, LogBuffer, LogConfig, LogReader};
use crate::network_publication::{NetworkPublication, SenderCounters};
use crate::receiver::{FollowerLink, ReceiveChannelConfig, Receiver, ReceiverCounters, Subscription};
use crate::ring_buffer::{self, ManyToOneRingBuffer, OneToOneRingBuffer, RingError};
use crate::sender::Sender;
use crate::transport::SendMode;

/// One member of the cluster: its id and the endpoint its receiver listens on for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
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
    fn validate(&self) -> Result<(), NodeError> {
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
    /// A node with member id `id` of the cluster `members`; member 0... is not assumed leader: set one.
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

    /// The leader's member id.
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
    /// This node is not the leader: offer on the leader.
    NotLeader,
    /// The node is closed.
    Closed,
    /// The message is longer than the ingress takes (capacity / 8).
    TooLong,
}

impl fmt::Display for OfferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::BackPressured => "back pressured: the leader's ingress is full; retry",
            Self::NotLeader => "not the leader: offer on the leader",
            Self::Closed => "the node is closed",
            Self::TooLong => "message longer than the ingress takes (capacity / 8)",
        })
    }
}

impl std::error::Error for OfferError {}

/// What nodes and their clients share.
#[derive(Debug)]
struct Shared {
    role: AtomicU8,
    closed: AtomicBool,
}

impl Shared {
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
            return Err(OfferError::NotLeader);
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
    Leader { reader: LogReader, consumer: ConsumerPosition, position: i64 },
    Follower { subscription: Subscription },
}

/// A running cluster node.
pub struct Node {
    config: NodeConfig,
    shared: Arc<Shared>,
    ingress: Arc<ManyToOneRingBuffer>,
    commit: Counter,
    reader: CommittedReader,
    reassembler: FragmentAssembler<()>,
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
        let allocate = |label: &str| counters.allocate(label, TYPE_USER_MIN).expect("counters file has room");
        let parts = match config.role() {
            Role::Leader => leader_parts(&config, &directory, &ingress, &allocate)?,
            Role::Follower => follower_parts(&config, &directory, &allocate)?,
        };
        let Parts { consensus, sender, receiver, commit, reader, mut warnings } = parts;
        let handles = start_agents(&config, consensus, sender, receiver, &counters, &mut warnings)?;
        let role = if config.role() == Role::Leader { 0 } else { 1 };
        let shared = Arc::new(Shared { role: AtomicU8::new(role), closed: AtomicBool::new(false) });
        Ok(Node {
            config,
            shared,
            ingress,
            commit,
            reader,
            reassembler: FragmentAssembler::new(()),
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

    /// The commit position this node knows.
    pub fn commit_position(&self) -> i64 {
        self.commit.get()
    }

    /// The log position this node has applied up to through [`Node::poll_committed`] (what a follower that
    /// restarts passes to [`NodeBuilder::resume_from`]).
    pub fn applied_position(&self) -> i64 {
        match &self.reader {
            CommittedReader::Leader { position, .. } => *position,
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
    pub fn poll_committed(&mut self, fragment_limit: usize, mut handler: impl FnMut(&[u8])) -> usize {
        let commit = self.commit.get();
        match &mut self.reader {
            CommittedReader::Follower { subscription } => subscription.poll_bounded(commit, fragment_limit, handler),
            CommittedReader::Leader { reader, consumer, position } => {
                let reassembler = &mut self.reassembler;
                let mut deliver = |payload: &[u8], _: &crate::frame::DataHeader| handler(payload);
                let mut fragments = 0;
                while fragments < fragment_limit {
                    let mut read = 0;
                    let next = reader.poll_bounded(*position, commit, fragment_limit - fragments, |payload, header| {
                        read += 1;
                        reassembler.on_fragment_with(payload, header, &mut deliver);
                    });
                    if next == *position {
                        break;
                    }
                    fragments += read;
                    *position = next;
                }
                consumer.set(*position);
                fragments
            }
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
    allocate: &dyn Fn(&str) -> Counter,
) -> Result<Parts, NodeError> {
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
    let acks: Vec<Counter> = followers.iter().map(|m| allocate(&format!("ack position of member {}", m.id))).collect();
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
        reader: CommittedReader::Leader { reader, consumer, position: 0 },
        warnings,
    })
}

fn follower_parts(
    config: &NodeConfig,
    directory: &NodeDirectory,
    allocate: &dyn Fn(&str) -> Counter,
) -> Result<Parts, NodeError> {
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
                counters.allocate(&format!("{name} {what}"), TYPE_USER_MIN).unwrap_or_else(|_| Counter::detached())
            })
        })
        .map_err(NodeError::Layout)?;
    warnings.extend(handles.warnings.iter().map(Warning::to_string));
    if let Some(invoker) = handles.invoker.as_mut() {
        invoker.start().map_err(|f| NodeError::Agents(vec![f]))?;
    }
    Ok(handles)
}

/// A session id for the log of a leader: distinct per member and per start, so followers tell a restarted
/// leader's log from the old one.
fn session_id_for(member: i32) -> i32 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    (nanos as i32 & 0x7FFF_0000) | (member & 0xFFFF)
}

// ---------------------------------------------------------------------------------------------------------
// Configuration files.
// ---------------------------------------------------------------------------------------------------------

/// A node configuration file in TOML, or a profile to merge over one.
///
/// Every key is optional in a file, so that a node file (identity, membership, channel) and a profile
/// (threading, idle strategies, cores) can each hold only their part: [`NodeFile::merge`] lays a profile
/// over a node file, and [`NodeFile::into_config`] demands the keys a node needs (`id`, `leader`,
/// `members`) and takes [`NodeBuilder::new`]'s defaults for the rest. Unknown keys are an error that names
/// the key. The keys:
///
/// ```toml
/// id = 0                       # this node's member id (required)
/// leader = 0                   # the leader's member id (required)
/// directory = "/dev/shm/quorumcast/node-0"   # default: /dev/shm/quorumcast/node-<id>
/// clean_stale = true           # remove a crashed run's directory instead of refusing to start
/// stream_id = 1001
/// commit_piggyback = true      # carry the commit position in data frames
/// ingress_capacity = "4MiB"    # client ingress ring, a power of two
/// members = [ { id = 0, endpoint = "127.0.0.1:40501" }, { id = 1, endpoint = "127.0.0.1:40502" } ]
///
/// [channel]
/// mtu = 8192
/// term_length = "16MiB"        # sizes: a number of bytes, or a string with B, KiB, MiB or GiB
/// send_mode = "classic"        # classic, mmsg or gso
/// batch_limit = 16
/// receiver_window = "128KiB"
/// send_buffer = "2MiB"         # SO_SNDBUF
/// receive_buffer = "2MiB"      # SO_RCVBUF
/// send_faults = "drop=0.01,seed=7"      # fault injection, for tests
/// receive_faults = ""
/// auth_key = "<64 hex digits>"  # tag every datagram with a keyed BLAKE3 (same key on every member)
/// max_retransmit_rate = "64MiB" # bytes per second NAKs may make the leader resend to one follower
///
/// [timers]                     # durations: a number with ns, us, ms or s
/// status_interval = "200ms"
/// nak_delay = "100us"
/// nak_retry_delay = "10ms"
/// retransmit_linger = "10ms"
/// receiver_timeout = "5s"
/// heartbeat_interval = "100ms"
/// setup_interval = "100ms"
/// commit_heartbeat = "100ms"
/// ack_interval = "200ms"
///
/// [agents]
/// threading = "dedicated"      # dedicated, shared-network, shared, invoker or shared-network-invoker
/// force_layout = false
/// idle = "backoff:10,5,1us,1ms"   # every agent without an idle of its own
/// consensus = { idle = "noop", core = 1 }
/// sender = { idle = "noop", core = 2 }
/// receiver = { idle = "noop", core = 3 }
/// application = { idle = "backoff", core = 0 }   # the embedding application's thread (see below)
/// ```
///
/// `agents.application` is not part of [`NodeConfig`]: it describes the thread of the program that embeds
/// the node (in `qc-node`, its main thread, which offers, applies, and in invoker mode runs the agents);
/// read it with [`NodeFile::application_idle`] and [`NodeFile::application_core`].
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFile {
    id: Option<i32>,
    leader: Option<i32>,
    members: Option<Vec<MemberEntry>>,
    directory: Option<PathBuf>,
    clean_stale: Option<bool>,
    stream_id: Option<i32>,
    commit_piggyback: Option<bool>,
    ingress_capacity: Option<FileSize>,
    #[serde(default)]
    channel: ChannelSection,
    #[serde(default)]
    timers: TimerSection,
    #[serde(default)]
    agents: AgentSection,
}

/// A `members` entry.
#[derive(Clone, Copy, Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberEntry {
    id: i32,
    endpoint: SocketAddr,
}

/// The `[channel]` table.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ChannelSection {
    mtu: Option<usize>,
    term_length: Option<FileSize>,
    send_mode: Option<Parsed<SendMode>>,
    batch_limit: Option<usize>,
    receiver_window: Option<FileSize>,
    send_buffer: Option<FileSize>,
    receive_buffer: Option<FileSize>,
    send_faults: Option<Parsed<crate::fault::FaultConfig>>,
    receive_faults: Option<Parsed<crate::fault::FaultConfig>>,
    auth_key: Option<Parsed<AuthKey>>,
    max_retransmit_rate: Option<FileSize>,
}

/// The `[timers]` table.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TimerSection {
    status_interval: Option<FileDuration>,
    nak_delay: Option<FileDuration>,
    nak_retry_delay: Option<FileDuration>,
    retransmit_linger: Option<FileDuration>,
    receiver_timeout: Option<FileDuration>,
    heartbeat_interval: Option<FileDuration>,
    setup_interval: Option<FileDuration>,
    commit_heartbeat: Option<FileDuration>,
    ack_interval: Option<FileDuration>,
}

/// The `[agents]` table.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentSection {
    threading: Option<Parsed<ThreadingMode>>,
    force_layout: Option<bool>,
    idle: Option<Parsed<IdleStrategyConfig>>,
    #[serde(default)]
    consensus: AgentEntry,
    #[serde(default)]
    sender: AgentEntry,
    #[serde(default)]
    receiver: AgentEntry,
    #[serde(default)]
    application: AgentEntry,
}

/// One agent's (or the application thread's) idle strategy and core.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentEntry {
    idle: Option<Parsed<IdleStrategyConfig>>,
    core: Option<usize>,
}

/// Lays `over`'s fields that are set over `base`'s, field by field.
macro_rules! merge_fields {
    ($base:expr, $over:expr; $($field:ident),* $(,)?) => {
        $( if $over.$field.is_some() { $base.$field = $over.$field; } )*
    };
}

impl NodeFile {
    /// Parses a node file or profile from TOML text. Fails on bad TOML, an unknown key (named), or a value
    /// that does not parse (an idle strategy, duration, size, address, mode), with TOML's line and column.
    pub fn parse(text: &str) -> Result<Self, NodeError> {
        toml::from_str(text).map_err(|e| NodeError::Config(e.to_string()))
    }

    /// Reads and parses the file at `path`; errors name the file.
    pub fn load(path: impl AsRef<std::path::Path>) -> Result<Self, NodeError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| NodeError::Config(format!("cannot read {}: {e}", path.display())))?;
        Self::parse(&text).map_err(|e| NodeError::Config(format!("{}: {e}", path.display())))
    }

    /// This file with every key that `over` sets replaced by `over`'s value (tables merge key by key,
    /// `members` is replaced whole). So `node.merge(profile)`: the profile wins where both set a key.
    pub fn merge(mut self, over: NodeFile) -> NodeFile {
        merge_fields!(self, over; id, leader, members, directory, clean_stale, stream_id, commit_piggyback,
            ingress_capacity);
        let (c, o) = (&mut self.channel, over.channel);
        merge_fields!(c, o; mtu, term_length, send_mode, batch_limit, receiver_window, send_buffer,
            receive_buffer, send_faults, receive_faults, auth_key, max_retransmit_rate);
        let (t, o) = (&mut self.timers, over.timers);
        merge_fields!(t, o; status_interval, nak_delay, nak_retry_delay, retransmit_linger, receiver_timeout,
            heartbeat_interval, setup_interval, commit_heartbeat, ack_interval);
        let (a, o) = (&mut self.agents, over.agents);
        merge_fields!(a, o; threading, force_layout, idle);
        for (entry, over) in [
            (&mut a.consensus, o.consensus),
            (&mut a.sender, o.sender),
            (&mut a.receiver, o.receiver),
            (&mut a.application, o.application),
        ] {
            merge_fields!(entry, over; idle, core);
        }
        self
    }

    /// The idle strategy of the application thread: `agents.application.idle`, else `agents.idle`, else
    /// the default backoff.
    pub fn application_idle(&self) -> IdleStrategyConfig {
        self.agent_idle(&self.agents.application)
    }

    /// The core of the application thread (`agents.application.core`), if set.
    pub fn application_core(&self) -> Option<usize> {
        self.agents.application.core
    }

    fn agent_idle(&self, entry: &AgentEntry) -> IdleStrategyConfig {
        entry.idle.or(self.agents.idle).map_or_else(IdleStrategyConfig::default, |p| p.0)
    }

    /// The node configuration this file describes; fails when `id`, `leader` or `members` is missing, or
    /// when the configuration breaks a rule of [`Node::start`] (checked here so a file is refused early).
    pub fn into_config(self) -> Result<NodeConfig, NodeError> {
        let missing = |key: &str, what: &str| NodeError::Config(format!("missing key `{key}` ({what})"));
        let id = self.id.ok_or_else(|| missing("id", "this node's member id"))?;
        let leader = self.leader.ok_or_else(|| missing("leader", "the leader's member id"))?;
        let members = self.members.as_ref().ok_or_else(|| {
            missing(
                "members",
                "every member's id and endpoint, e.g. members = [{ id = 0, endpoint = \"127.0.0.1:40501\" }]",
            )
        })?;
        let members = members.iter().map(|m| Member { id: m.id, endpoint: m.endpoint }).collect();
        let mut config = NodeBuilder::new(id, members).leader(leader).config().clone();
        let agents = &self.agents;
        config.idle = [agents.consensus, agents.sender, agents.receiver].map(|entry| self.agent_idle(&entry));
        config.cores = [agents.consensus.core, agents.sender.core, agents.receiver.core];
        if let Some(mode) = agents.threading {
            config.threading = mode.0;
        }
        set(&mut config.force_layout, agents.force_layout);
        config.directory = self.directory.clone().or(config.directory);
        set(&mut config.clean_stale, self.clean_stale);
        set(&mut config.stream_id, self.stream_id);
        set(&mut config.commit_piggyback, self.commit_piggyback);
        set(&mut config.ingress_capacity, self.ingress_capacity.map(|s| s.0));
        if !config.ingress_capacity.is_power_of_two() {
            return Err(NodeError::Config(format!(
                "ingress_capacity {} must be a power of two",
                config.ingress_capacity
            )));
        }
        self.channel.apply(&mut config.channel);
        self.timers.apply(&mut config);
        config.validate()?;
        config.channel.validate()?;
        Ok(config)
    }
}

impl ChannelSection {
    fn apply(&self, channel: &mut ChannelConfig) {
        set(&mut channel.mtu, self.mtu);
        if let Some(term_length) = self.term_length {
            channel.term_length = term_length.0;
            // As NodeBuilder::term_length: a small term shrinks the default window to fit.
            channel.receiver_window = channel.receiver_window.min(term_length.0 / 2);
        }
        set(&mut channel.send_mode, self.send_mode.map(|m| m.0));
        set(&mut channel.batch_limit, self.batch_limit);
        set(&mut channel.receiver_window, self.receiver_window.map(|s| s.0));
        if let Some(size) = self.send_buffer {
            channel.socket.send_buffer = Some(size.0);
        }
        if let Some(size) = self.receive_buffer {
            channel.socket.receive_buffer = Some(size.0);
        }
        set(&mut channel.send_faults, self.send_faults.map(|f| f.0));
        set(&mut channel.receive_faults, self.receive_faults.map(|f| f.0));
        if let Some(key) = self.auth_key {
            channel.auth = Some(key.0);
        }
        set(&mut channel.max_retransmit_rate, self.max_retransmit_rate.map(|r| r.0 as u64));
    }
}

impl TimerSection {
    fn apply(&self, config: &mut NodeConfig) {
        let c = &mut config.channel;
        let d = |t: Option<FileDuration>| t.map(|t| t.0);
        set(&mut c.status_interval, d(self.status_interval));
        set(&mut c.nak_delay, d(self.nak_delay));
        set(&mut c.nak_retry_delay, d(self.nak_retry_delay));
        set(&mut c.retransmit_linger, d(self.retransmit_linger));
        set(&mut c.receiver_timeout, d(self.receiver_timeout));
        set(&mut c.heartbeat_interval, d(self.heartbeat_interval));
        set(&mut c.setup_interval, d(self.setup_interval));
        set(&mut config.commit_heartbeat, d(self.commit_heartbeat));
        set(&mut config.ack_interval, d(self.ack_interval));
    }
}

fn set<T>(target: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *target = value;
    }
}

impl NodeConfig {
    /// The configuration a TOML node file describes (see [`NodeFile`] for the keys).
    pub fn from_toml(text: &str) -> Result<NodeConfig, NodeError> {
        NodeFile::parse(text)?.into_config()
    }
}

/// A value a file gives as a string in the form its type's `FromStr` takes (idle strategies, modes).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Parsed<T>(T);

impl<'de, T> serde::Deserialize<'de> for Parsed<T>
where
    T: std::str::FromStr,
    T::Err: fmt::Display,
{
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map(Parsed).map_err(serde::de::Error::custom)
    }
}

/// A duration written as a number with a unit: `100us`, `10ms`, `5s`, `500ns`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct FileDuration(Duration);

impl<'de> serde::Deserialize<'de> for FileDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_duration_text(&text).map(FileDuration).map_err(serde::de::Error::custom)
    }
}

/// Parses `<whole number><ns|us|ms|s>`; the unit is required (a bare number is ambiguous in a file).
fn parse_duration_text(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let bad = || format!("duration `{text}` must be a whole number with a unit: ns, us, ms or s (e.g. \"10ms\")");
    let value: u64 = digits.parse().map_err(|_| bad())?;
    let per_unit: u64 = match unit.trim() {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return Err(bad()),
    };
    value.checked_mul(per_unit).map(Duration::from_nanos).ok_or_else(|| format!("duration `{text}` is too long"))
}

/// A size in bytes: a whole number, or a string with a unit: `"16MiB"`, `"128KiB"`, `"1GiB"`, `"4096B"`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct FileSize(usize);

impl<'de> serde::Deserialize<'de> for FileSize {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SizeVisitor)
    }
}

struct SizeVisitor;

impl serde::de::Visitor<'_> for SizeVisitor {
    type Value = FileSize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a size: a whole number of bytes, or a string such as \"16MiB\", \"128KiB\", \"4096B\"")
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<FileSize, E> {
        usize::try_from(value).map(FileSize).map_err(|_| E::custom(format!("size {value} is too large")))
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<FileSize, E> {
        u64::try_from(value).map_err(|_| E::custom(format!("size {value} is negative"))).and_then(|v| self.visit_u64(v))
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<FileSize, E> {
        parse_size_text(text).map(FileSize).map_err(E::custom)
    }
}

/// Parses `<whole number>[B|KiB|MiB|GiB]`.
fn parse_size_text(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let bad = || format!("size `{text}` must be a whole number with an optional unit B, KiB, MiB or GiB");
    let value: usize = digits.parse().map_err(|_| bad())?;
    let per_unit: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return Err(bad()),
    };
    value.checked_mul(per_unit).ok_or_else(|| format!("size `{text}` is too large"))
}

#[cfg(test)]
mod file_tests {
    use super::*;

    const NODE: &str = r#"
        id = 1
        leader = 0
        clean_stale = true
        members = [
            { id = 0, endpoint = "127.0.0.1:40501" },
            { id = 1, endpoint = "127.0.0.1:40502" },
            { id = 2, endpoint = "127.0.0.1:40503" },
        ]
        [channel]
        mtu = 8192
        term_length = "16MiB"
        receive_buffer = 4194304
        [timers]
        status_interval = "10ms"
        nak_delay = "100us"
        [agents]
        threading = "dedicated"
        idle = "noop"
        sender = { idle = "busy-spin", core = 1 }
    "#;

    #[test]
    fn a_node_file_sets_every_part_of_the_config() {
        let config = NodeConfig::from_toml(NODE).unwrap();
        assert_eq!((config.id, config.leader, config.members.len()), (1, 0, 3));
        assert_eq!(config.members[2].endpoint, "127.0.0.1:40503".parse().unwrap());
        assert!(config.clean_stale);
        assert_eq!((config.channel.mtu, config.channel.term_length), (8192, 16 << 20));
        assert_eq!(config.channel.socket.receive_buffer, Some(4 << 20));
        assert_eq!(config.channel.status_interval, Duration::from_millis(10));
        assert_eq!(config.channel.nak_delay, Duration::from_micros(100));
        assert_eq!(config.threading, ThreadingMode::Dedicated);
        assert_eq!(config.idle, [IdleStrategyConfig::NoOp, IdleStrategyConfig::BusySpin, IdleStrategyConfig::NoOp]);
        assert_eq!(config.cores, [None, Some(1), None]);
    }

    #[test]
    fn a_profile_overrides_the_keys_it_sets_and_keeps_the_rest() {
        let profile = NodeFile::parse(
            r#"
            [agents]
            threading = "shared"
            idle = "backoff:10,5,1us,1ms"
            sender = { core = 0 }
            application = { idle = "yield" }
            "#,
        )
        .unwrap();
        let merged = NodeFile::parse(NODE).unwrap().merge(profile);
        assert_eq!(merged.application_idle(), IdleStrategyConfig::Yield);
        let config = merged.into_config().unwrap();
        assert_eq!(config.threading, ThreadingMode::Shared);
        let backoff: IdleStrategyConfig = "backoff:10,5,1us,1ms".parse().unwrap();
        // The sender's own idle from the node file stays (the profile set only its core).
        assert_eq!(config.idle, [backoff, IdleStrategyConfig::BusySpin, backoff]);
        assert_eq!(config.cores, [None, Some(0), None]);
        assert_eq!((config.id, config.channel.mtu), (1, 8192));
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = NodeFile::parse("id = 0\nmtu = 1408\n").unwrap_err().to_string();
        assert!(e.contains("`mtu`"), "{e}");
        let e = NodeFile::parse("[agents]\nthreads = \"shared\"\n").unwrap_err().to_string();
        assert!(e.contains("`threads`"), "{e}");
        let e = NodeFile::parse("[agents.sender]\ncores = 1\n").unwrap_err().to_string();
        assert!(e.contains("`cores`"), "{e}");
    }

    #[test]
    fn bad_values_and_missing_keys_say_what_to_write() {
        let e = NodeFile::parse("[timers]\nnak_delay = \"100\"\n").unwrap_err().to_string();
        assert!(e.contains("ns, us, ms or s"), "{e}");
        let e = NodeFile::parse("[agents]\nidle = \"sleepy\"\n").unwrap_err().to_string();
        assert!(e.contains("sleepy"), "{e}");
        let e = NodeFile::parse("[channel]\nterm_length = \"16MB\"\n").unwrap_err().to_string();
        assert!(e.contains("MiB"), "{e}");
        let e = NodeFile::parse("[agents]\nthreading = \"pooled\"\n").unwrap_err().to_string();
        assert!(e.contains("pooled"), "{e}");
        let e = NodeConfig::from_toml("id = 0\nleader = 0\n").unwrap_err().to_string();
        assert!(e.contains("`members`"), "{e}");
        let e = NodeConfig::from_toml(&NODE.replace("leader = 0", "leader = 7")).unwrap_err().to_string();
        assert!(e.contains("leader id 7"), "{e}");
        let e = NodeConfig::from_toml(&NODE.replace("mtu = 8192", "mtu = 1400")).unwrap_err().to_string();
        assert!(e.contains("multiple of 32"), "{e}");
    }

    #[test]
    fn durations_and_sizes_take_their_units() {
        assert_eq!(parse_duration_text("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration_text("3s"), Ok(Duration::from_secs(3)));
        assert!(parse_duration_text("1.5ms").is_err());
        assert_eq!(parse_size_text("128KiB"), Ok(128 << 10));
        assert_eq!(parse_size_text("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size_text("4096"), Ok(4096));
        assert!(parse_size_text("-1").is_err());
    }
}
