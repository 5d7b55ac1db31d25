//! A node's members and configuration, the rules a configuration keeps, and the builder.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::agent::idle::IdleStrategyConfig;
use crate::agent::ThreadingMode;
use crate::client::credentials::{ClientKey, SessionSecret};
use crate::cluster::consensus_core::Timers;
use crate::media::auth::AuthKey;
use crate::media::channel::{membership_tag, timer_rule, ChannelConfig};
use crate::media::transport::SendMode;
use crate::media::transport::SocketOptions;
use crate::setting::{Setting, SettingError};

use crate::shm::directory::NodeDirectory;

use super::{Node, NodeError};
use crate::storage::recording::{SyncPolicy, MIN_PAGE_CACHE_WINDOW};

/// Where a node keeps its log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize), serde(rename_all = "lowercase"))]
pub enum LogStorage {
    /// Recorded on disk by the recorder agent, in the data directory. The default.
    #[default]
    Disk,
    /// In memory only (the mapped log buffers of the node directory): a restarted member starts empty.
    Memory,
}

quorumcast_driver::section! {
    /// Where and how a node keeps its log, and when it snapshots the application.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct StorageConfig in pub(crate) mod storage, built as ("StorageConfig::", ""),
        checked with NodeConfig {
        /// Recorded on disk, or in memory only.
        pub log: LogStorage = LogStorage::Disk, shown "Disk",
            key [storage] log, file Plain;
        /// When recorded bytes are made durable (see [`SyncPolicy`] for what each can lose).
        pub sync: SyncPolicy = SyncPolicy::None, shown "None",
            key [storage] sync, file Text;
        /// The recording's directory; `None` uses `recording` in the data directory.
        pub recording_dir: Option<PathBuf> = None, shown "None",
            key [storage] recording_dir, file Plain;
        /// A new segment file starts once the current one holds this many bytes (64 KiB to 1 TiB).
        pub segment_length: u64 = 128 << 20, shown "134217728", unit "bytes",
            key [storage] segment_length, file Size,
            check |storage, _| {
                let length = storage.segment_length;
                (!(1 << 16..=1 << 40).contains(&length)).then(|| format!("({length}) must be between 64 KiB and 1 TiB"))
            };
        /// How many bytes behind the end of the log the recorder keeps in the page cache: older ones are
        /// written back as they are written (`sync_file_range`, 4 MiB at a time) and their pages dropped
        /// (`POSIX_FADV_DONTNEED`) once this far behind, so the recorder's writes reuse the same memory instead
        /// of taking new pages for every byte and leaving the kernel to reclaim them. Catch-ups and recovery
        /// read older bytes from the disk. `None` (`"off"` in a node file): everything stays cached until
        /// reclaimed (a host with memory to spare whose catch-ups read far back). At least 8 MiB.
        pub page_cache_window: Option<u64> = Some(64 << 20), shown "Some(67108864)", unit "bytes",
            key [storage] page_cache_window, file SizeOrOff,
            check |storage, _| {
                let window = storage.page_cache_window.filter(|&w| w < MIN_PAGE_CACHE_WINDOW)?;
                Some(format!("({window}) must be at least 8 MiB (two steps of the writeback), or off"))
            };
        /// [`Node::poll_state`] takes a snapshot of the application each time this many more bytes of log
        /// have been applied since the last (`None`, `"off"` in a node file: only on request,
        /// [`Node::take_snapshot`]).
        pub snapshot_interval: Option<u64> = Some(256 << 20), shown "Some(268435456)", unit "bytes",
            key [storage] snapshot_interval, file SizeOrOff,
            check |storage, _| (storage.snapshot_interval == Some(0)).then(|| "must be more than 0 bytes".into());
        /// Snapshots kept (at least 1); the recorded log below the oldest kept is deleted.
        pub snapshots_kept: usize = 2, shown "2", unit "snapshots",
            key [storage] snapshots_kept, file Plain,
            check |storage, _| (storage.snapshots_kept == 0).then(|| "must be at least 1".into());
    }
}

quorumcast_driver::section! {
    /// What the replicated service may hold ([`StateMachine`](crate::StateMachine)'s callbacks, the
    /// [`Cluster`](crate::Cluster) handle). The same on every member: a limit reached on one is reached on
    /// all at the same entry.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ServiceConfig in pub(crate) mod service, built as ("ServiceConfig::", ""),
        checked with NodeConfig {
        /// Timers scheduled at once, at most ([`Cluster::schedule_timer`](crate::Cluster::schedule_timer)
        /// refuses one more). Each takes about 64 bytes of the replicated state and of every snapshot.
        pub max_timers: usize = crate::service::DEFAULT_MAX_TIMERS, shown "1048576", unit "timers",
            key [service] max_timers, file Plain,
            check |service, _| (service.max_timers == 0).then(|| "must be at least 1".into());
        /// The longest response to a client's message and the longest push, in bytes: one longer than a
        /// datagram goes in pieces. A response past it is not sent (its client is told, and counted in
        /// `client responses too long`); a push past it is refused. At most 16 MiB.
        pub max_response_length: u64 = 64 << 10, shown "65536", unit "bytes",
            key [service] max_response_length, file Size,
            check |service, _| {
                (!(1..=16 << 20).contains(&service.max_response_length)).then(|| "must be between 1 byte and 16 MiB".into())
            };
        /// Bytes of pushes ([`Cluster::push`](crate::Cluster::push)) a session's client may leave
        /// unacknowledged: one more closes its session. Every open session may hold this much in the
        /// replicated state (and in every snapshot), so `clients.max_sessions` times this bounds it.
        pub max_push_backlog: u64 = 256 << 10, shown "262144", unit "bytes",
            key [service] max_push_backlog, file Size,
            check |service, _| (service.max_push_backlog < 1 << 12).then(|| "must be at least 4 KiB".into());
    }
}

impl StorageConfig {
    /// True when the log is recorded on disk.
    pub fn records(&self) -> bool {
        self.log == LogStorage::Disk
    }
}

/// One member of the cluster: its id, the endpoint its receiver listens on for the log, and the endpoint
/// its consensus agent listens on for elections and heartbeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
pub struct Member {
    /// Member id, unique in the cluster.
    pub id: i32,
    /// The log endpoint: where this member receives the replicated log (and, while it leads, sends it
    /// from). Node files call it `log`.
    pub log: SocketAddr,
    /// Where this member's consensus agent sends and receives election and heartbeat frames (Aeron
    /// Cluster's consensus channel).
    pub consensus: SocketAddr,
    /// Where this member takes remote clients' datagrams (Aeron Cluster's ingress channel), when
    /// [`ClientEndpointConfig::enabled`]; a member that does not lead redirects them to the leader's.
    pub client: SocketAddr,
}

impl Member {
    /// Its endpoints, as a configuration entry carries them.
    pub fn endpoints(&self) -> crate::cluster::configuration::MemberEndpoints {
        crate::cluster::configuration::MemberEndpoints {
            id: self.id,
            log: self.log,
            consensus: self.consensus,
            client: self.client,
        }
    }
}

/// How far above its log endpoint's port a member's consensus endpoint is when not given.
pub const CONSENSUS_PORT_OFFSET: u16 = 100;
/// How far above its log endpoint's port a member's client endpoint is when not given.
pub const CLIENT_PORT_OFFSET: u16 = 200;

impl Member {
    /// Member `id` with its log endpoint at `log`, its consensus endpoint [`CONSENSUS_PORT_OFFSET`] ports
    /// above it and its client endpoint [`CLIENT_PORT_OFFSET`] above it, on the same address (members on
    /// consecutive ports do not collide); give them explicitly where ports are assigned.
    pub fn new(id: i32, log: SocketAddr) -> Self {
        let above = |offset: u16| SocketAddr::new(log.ip(), log.port().wrapping_add(offset));
        Self { id, log, consensus: above(CONSENSUS_PORT_OFFSET), client: above(CLIENT_PORT_OFFSET) }
    }

    /// This member with its consensus endpoint at `consensus`.
    pub fn with_consensus(self, consensus: SocketAddr) -> Self {
        Self { consensus, ..self }
    }

    /// This member with its client endpoint at `client`.
    pub fn with_client(self, client: SocketAddr) -> Self {
        Self { client, ..self }
    }
}

quorumcast_driver::section! {
    /// Remote clients ([`ClusterClient`](crate::ClusterClient)): whether members take them, and the limits
    /// every member applies to them. `max_sessions` and `session_timeout` decide what the replicated session
    /// table does, so every member must have the same. The rules are checked only when `enabled`.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ClientEndpointConfig in pub(crate) mod clients, built as ("ClientEndpointConfig::", ""),
        checked with NodeConfig {
        /// Members bind their client endpoints and take sessions. Off by default.
        pub enabled: bool = false, shown "false",
            key [clients] enabled, file Plain;
        /// Sessions open at once, at most; an open past it is refused (with a reason), never stored.
        pub max_sessions: usize = 1024, shown "1024", unit "sessions",
            key [clients] max_sessions, file Plain,
            check |clients, _| (clients.max_sessions == 0).then(|| "must be at least 1".into());
        /// A session that sends nothing for this long (the leader's clock, as written into the log) is
        /// closed; its client is told, and may open a new one.
        pub session_timeout: Duration = Duration::from_secs(10), shown "10s",
            key [clients] session_timeout, file Duration,
            check |clients, _| {
                timer_rule(clients.session_timeout)
            };
        /// How far past the last message applied a session's message may be numbered (messages in flight);
        /// further is refused as `WindowExceeded`.
        pub window: u64 = 4096, shown "4096", unit "messages",
            key [clients] window, file Plain,
            check |clients, _| (clients.window == 0).then(|| "must be at least 1 message".into());
        /// Client datagrams are taken only from these address ranges (empty: from anywhere).
        pub allow: Vec<AddressRange> = Vec::new(), shown "[]",
            key [clients] allow, file TextList;
        /// The root of the members' secret that binds each session to its client (session ids, tokens,
        /// challenges: see the client wire in `docs/ARCHITECTURE.md`): the same on every member, never written
        /// to the log or a file. `None`: derived from the channel's `auth_key`; a node that takes clients
        /// needs one of the two.
        pub session_key: Option<AuthKey> = None, shown "None",
            key [clients] session_key, file SomeText,
            check |clients, node| (clients.session_key.is_none() && node.channel.auth.is_none()).then(|| {
                "is not set and {channel.auth_key} is not either: a node that takes clients needs a key every \
                 member holds, to bind each session to its client; set {clients.session_key} (the same 64 \
                 hexadecimal digits on every member; make one with `openssl rand -hex 32`), or \
                 {channel.auth_key}"
                    .into()
            });
        /// Client keys: when any is given, every client datagram must be tagged with one of them (or, in a
        /// session, with a token only a holder of one was given), and anything else is counted and dropped.
        /// Empty (the default): any client may open a session. A node file gives named keys
        /// (`keys = [{ name, key }]`) and, beside them, `auth_key`: a key its clients give as `default`.
        pub keys: Vec<ClientKey> = Vec::new(), shown "[]",
            key [clients] keys, file Entries,
            check |clients, _| {
                let mut ids: Vec<(u32, &str)> = clients.keys.iter().map(|k| (k.id(), k.name())).collect();
                ids.sort();
                let pair = ids.windows(2).find(|pair| pair[0].0 == pair[1].0)?;
                Some(format!(
                    "the names {:?} and {:?} are the same or hash to the same key id: rename one",
                    pair[0].1, pair[1].1
                ))
            };
        /// Sessions one address (an IPv4 address, an IPv6 /64) may hold at once; an open past it is refused.
        pub max_sessions_per_address: usize = 256, shown "256", unit "sessions",
            key [clients] max_sessions_per_address, file Plain,
            check |clients, _| (clients.max_sessions_per_address == 0).then(|| "must be at least 1".into());
        /// Sessions the addresses of one network (an IPv4 /24, an IPv6 /48) may hold together; an open past
        /// it is refused, so that one network's many addresses cannot hold the cluster.
        pub max_sessions_per_prefix: usize = 256, shown "256", unit "sessions",
            key [clients] max_sessions_per_prefix, file Plain,
            check |clients, _| (clients.max_sessions_per_prefix < clients.max_sessions_per_address).then(|| {
                "is below {clients.max_sessions_per_address}: a network holds at least what one of its \
                 addresses may; raise it"
                    .into()
            });
        /// Opens and reconnects one address may make per second (a burst of as many, refilled over the
        /// second); past it they are refused, counted, and append nothing.
        pub opens_per_second: u32 = 1000, shown "1000", unit "opens per second",
            key [clients] opens_per_second, file Plain,
            check |clients, _| (clients.opens_per_second == 0).then(|| "must be at least 1".into());
    }
}

impl ClientEndpointConfig {
    /// Clients enabled, with `session_key` as the root of the session secret, the other settings their
    /// defaults.
    pub fn enabled(session_key: AuthKey) -> Self {
        Self { enabled: true, session_key: Some(session_key), ..Self::default() }
    }

    /// True when `ip` may send client datagrams.
    pub fn allows(&self, ip: std::net::IpAddr) -> bool {
        self.allow.is_empty() || self.allow.iter().any(|range| range.contains(ip))
    }

    /// The members' session secret: from `session_key`, else from the channel's key `channel_auth`.
    pub(crate) fn secret(&self, channel_auth: Option<&AuthKey>) -> Option<SessionSecret> {
        self.session_key.as_ref().or(channel_auth).map(SessionSecret::new)
    }

    /// The client key with id `id`, if the cluster has it.
    pub(crate) fn key(&self, id: u32) -> Option<&ClientKey> {
        self.keys.iter().find(|k| k.id() == id)
    }

    /// The rules of the replicated session table.
    pub(crate) fn session_config(&self) -> crate::client::session::SessionConfig {
        crate::client::session::SessionConfig {
            max_sessions: self.max_sessions,
            timeout_ns: self.session_timeout.as_nanos().min(i64::MAX as u128) as i64,
        }
    }
}

/// A range of IP addresses: `10.0.0.0/8`, `fd00::/8`, or one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressRange {
    network: std::net::IpAddr,
    prefix: u8,
}

impl AddressRange {
    /// True when `ip` is in the range.
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        let ip = match (self.network, ip) {
            (IpAddr::V6(_), IpAddr::V4(v4)) => IpAddr::V6(v4.to_ipv6_mapped()),
            (IpAddr::V4(_), IpAddr::V6(v6)) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            _ => ip,
        };
        let bits = |ip: IpAddr| match ip {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32u32),
            IpAddr::V6(v6) => (u128::from(v6), 128u32),
        };
        let ((network, width), (address, other)) = (bits(self.network), bits(ip));
        if width != other {
            return false;
        }
        let host_bits = width - u32::from(self.prefix);
        host_bits >= 128 || (network >> host_bits) == (address >> host_bits)
    }
}

impl std::str::FromStr for AddressRange {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (address, prefix) = text.split_once('/').unwrap_or((text, ""));
        let network: std::net::IpAddr =
            address.trim().parse().map_err(|_| format!("{text:?} is not an address range like 10.0.0.0/8"))?;
        let width = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix.trim() {
            "" => width,
            bits => bits
                .parse::<u8>()
                .ok()
                .filter(|&b| b <= width)
                .ok_or_else(|| format!("{text:?}: the prefix must be 0 to {width} bits"))?,
        };
        Ok(Self { network, prefix })
    }
}

impl std::fmt::Display for AddressRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// One setting per agent of a node: where each agent goes (its idle strategy, its core), by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerAgent<T> {
    /// The consensus agent's (elections, the append stage, client ingress).
    pub consensus: T,
    /// The Sender's (the leader's log to every follower).
    pub sender: T,
    /// The Receiver's (a follower's image of the leader's log).
    pub receiver: T,
    /// The recorder's (the log on disk; a node with a recorded log only).
    pub recorder: T,
}

impl<T: Clone> PerAgent<T> {
    /// The same for every agent.
    pub fn all(value: T) -> Self {
        Self { consensus: value.clone(), sender: value.clone(), receiver: value.clone(), recorder: value }
    }
}

impl<T> PerAgent<T> {
    /// Each agent's, in the order consensus, sender, receiver, recorder.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        [&self.consensus, &self.sender, &self.receiver, &self.recorder].into_iter()
    }
}

impl<T> From<[T; 4]> for PerAgent<T> {
    /// Consensus, sender, receiver and recorder, in that order.
    fn from([consensus, sender, receiver, recorder]: [T; 4]) -> Self {
        Self { consensus, sender, receiver, recorder }
    }
}

quorumcast_driver::section! {
    /// Everything a node is started from. Build it with [`NodeBuilder`], or read it from a node file
    /// ([`NodeConfig::from_toml`], feature `config`).
    #[derive(Clone, Debug)]
    pub struct NodeConfig in pub(crate) mod node_settings, built as ("NodeBuilder::", ""),
        checked with (), defaults in fn defaults {
        /// This node's member id (required: [`NodeBuilder::new`] takes it).
        pub id: i32 = 0, shown "0",
            key [] id, file Plain, built as ("NodeBuilder::new(", ", members)");
        /// Every member, this one included (required: [`NodeBuilder::new`] takes them; node files list them
        /// in `members`).
        pub members: Vec<Member> = Vec::new(), shown "[]";
        /// The preferred first leader, if any: it stands for election at start instead of after an election
        /// timeout. Any member may lead later; the members elect their leader.
        pub leader: Option<i32> = None, shown "None",
            key [] leader, file Plain;
        /// The consensus timers: heartbeat interval, heartbeat timeout, election timeout range.
        pub timers: Timers = Timers::default(), shown "as its type documents";
        /// The node directory; `None` uses `/dev/shm/quorumcast/node-<id>`.
        pub directory: Option<PathBuf> = None, shown "None",
            key [] directory, file Plain;
        /// Where what must outlive the node directory is kept: the persisted term and vote, the recorded log
        /// and the snapshots. `None` uses `quorumcast-data/<node directory's path, flattened>` in the system's
        /// temporary directory (`$TMPDIR`, else `/tmp`): on disk on most hosts, but give every production node
        /// a directory of its own on a disk that survives a restart. A clean shutdown removes the node
        /// directory, never this one.
        pub data_dir: Option<PathBuf> = None, shown "None",
            key [] data_dir, file Plain;
        /// Where and how the log is kept: recorded on disk (the default) or in memory only, its sync policy,
        /// segments and snapshots.
        pub storage: StorageConfig = StorageConfig::default(), shown "as its type documents";
        /// What the replicated service may hold: its timers.
        pub service: ServiceConfig = ServiceConfig::default(), shown "as its type documents";
        /// Remove a stale directory of a crashed run instead of refusing to start.
        pub clean_stale: bool = false, shown "false",
            key [] clean_stale, file Plain;
        /// The log channel: MTU, term length, send mode, timers, socket buffers and faults.
        pub channel: ChannelConfig = ChannelConfig::default(), shown "as its type documents";
        /// Stream id of the log.
        pub stream_id: i32 = 1001, shown "1001",
            key [] stream_id, file Plain, built as ("NodeBuilder::from_config(NodeConfig { ", ", .. })");
        /// Idle strategies of the consensus, sender, receiver and recorder agents: each agent's default is
        /// the `backoff:10,5,1us,1ms` of [`IdleStrategyConfig::default`]. Node files: `[agents] idle` for
        /// every agent, and an agent's own in `[agents] <agent> = { idle }`.
        pub idle: PerAgent<IdleStrategyConfig> = PerAgent::all(IdleStrategyConfig::default()),
            shown "as its type documents";
        /// Cores to pin the consensus, sender, receiver and recorder agents to: by default none is pinned.
        /// Node files: `[agents] <agent> = { core }`.
        pub cores: PerAgent<Option<usize>> = PerAgent::all(None), shown "as its type documents";
        /// How the agents are put on threads.
        pub threading: ThreadingMode = ThreadingMode::Dedicated, shown "Dedicated",
            key [agents] threading, file Text;
        /// Start a layout with more busy-spinning threads than cores anyway (with a warning).
        pub force_layout: bool = false, shown "false",
            key [agents] force_layout, file Plain;
        /// Carry the commit position in data frames while data flows.
        pub commit_piggyback: bool = false, shown "false",
            key [] commit_piggyback, file Plain;
        /// Split the leader Sender's time into data calls, control calls, own code, idle and the time between
        /// its duty cycles, in its counters (see [`crate::media::time_split`]): a few clock reads per send call,
        /// for measuring its capacity as a budget.
        pub sender_time_split: bool = false, shown "false",
            key [] sender_time_split, file Plain;
        /// Resend an unchanged commit position this often.
        pub commit_heartbeat: Duration = Duration::from_millis(100), shown "100ms",
            key [timers] commit_heartbeat, file Duration,
            built as ("NodeBuilder::from_config(NodeConfig { ", ", .. })"),
            check |node, _| timer_rule(node.commit_heartbeat);
        /// A follower acknowledges its append position at least this often.
        pub ack_interval: Duration = Duration::from_millis(200), shown "200ms",
            key [timers] ack_interval, file Duration,
            built as ("NodeBuilder::from_config(NodeConfig { ", ", .. })"),
            check |node, _| timer_rule(node.ack_interval);
        /// A follower acknowledges an advance of its append position no sooner than this after its last
        /// acknowledgement (an advance within it goes out when it ends; one after a quiet spell at once), so
        /// a busy follower sends at most one acknowledgement per gap and the leader's Sender reads as few.
        /// Zero acknowledges every advance. At most `ack_interval`.
        pub ack_gap: Duration = Duration::from_micros(20), shown "20µs",
            key [timers] ack_gap, file Duration,
            built as ("NodeBuilder::from_config(NodeConfig { ", ", .. })"),
            check |node: &NodeConfig, _| (node.ack_gap > node.ack_interval).then(|| {
                format!(
                    "({:?}) must be at most {{timers.ack_interval}} ({:?}): an acknowledgement goes out at least \
                     every {{timers.ack_interval}} whatever the gap; a gap of a few microseconds bounds a busy \
                     follower's acknowledgements (0 sends one at every advance)",
                    node.ack_gap, node.ack_interval
                )
            });
        /// Bytes of the client ingress ring (a power of two).
        pub ingress_capacity: usize = 4 << 20, shown "4194304", unit "bytes",
            key [] ingress_capacity, file Size;
        /// A follower that restarts with its log applied up to here asks the leader for the rest; a
        /// follower without it starts at position 0.
        pub resume_from: Option<i64> = None, shown "None";
        /// Remote clients: off by default.
        pub clients: ClientEndpointConfig = ClientEndpointConfig::default(), shown "as its type documents";
        /// The ids of the cluster's initial configuration (its voters when it first started), each listed in
        /// `members`; every later configuration is an entry in the log. A member that joins a running cluster
        /// (added as a learner with [`Node::add_learner`](crate::node::Node::add_learner)) lists itself in
        /// `members` and not here. Every member of a cluster must give the same list. `None`: every member in
        /// `members`.
        pub initial_members: Option<Vec<i32>> = None, shown "None",
            key [] initial_members, file Plain;
        /// A learner is promoted to voter only when it is at most this many bytes behind the leader's log.
        pub promote_within: i64 = 4 << 20, shown "4194304", unit "bytes",
            key [] promote_within, file Size;
        /// The operator key: administrative commands over the network (`qc-cluster --connect`) must carry its
        /// tag (what `qc-cluster` sends); distinct from the channel's `auth_key`. Without one, the node takes
        /// administrative commands only through its directory.
        pub admin_key: Option<AuthKey> = None, shown "None",
            key [admin] key, file SomeText,
            check |node: &NodeConfig, _| (node.admin_key.is_some() && node.admin_key == node.channel.auth).then(|| {
                "is the same key as {channel.auth_key}: the operator's key must be a key of its own, so that \
                 holding the members' key does not administer the cluster; make one with `openssl rand -hex 32`"
                    .into()
            });
    }
}

impl NodeConfig {
    pub(crate) fn validate(&self) -> Result<(), NodeError> {
        let ids: Vec<i32> = self.members.iter().map(|m| m.id).collect();
        if !ids.contains(&self.id) {
            return Err(NodeError::Config(format!("node id {} is not among the members {ids:?}", self.id)));
        }
        if let Some(leader) = self.leader.filter(|l| !ids.contains(l)) {
            return Err(NodeError::Config(format!("leader id {leader} is not among the members {ids:?}")));
        }
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        if sorted.len() != ids.len() {
            return Err(NodeError::Config(format!("member ids must be unique: {ids:?}")));
        }
        if let Some(initial) = &self.initial_members {
            if initial.is_empty() || initial.iter().any(|id| !ids.contains(id)) {
                return Err(NodeError::Config(format!(
                    "initial_members {initial:?} must name at least one member, each listed in members {ids:?}"
                )));
            }
        }
        if self.promote_within < 0 {
            return Err(NodeError::Config(format!("promote_within ({}) must be 0 or more bytes", self.promote_within)));
        }
        let client = |m: &Member| Some(m.client).filter(|_| self.clients.enabled);
        let mut endpoints: Vec<SocketAddr> =
            self.members.iter().flat_map(|m| [Some(m.log), Some(m.consensus), client(m)]).flatten().collect();
        endpoints.sort();
        if let Some(pair) = endpoints.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(NodeError::Config(format!(
                "endpoint {} is given twice among the members' log, consensus and client endpoints: every \
                 member needs endpoints of its own",
                pair[0]
            )));
        }
        for idle in self.idle.iter() {
            idle.validate().map_err(|e| NodeError::Config(e.to_string()))?;
        }
        self.timers.validate()?;
        // The node's own settings (its timers, its operator key), each by its declared rule.
        self.check(&())?;
        self.storage.check(self)?;
        self.service.check(self)?;
        if self.clients.enabled {
            self.clients.check(self)?;
        }
        Ok(())
    }

    /// This cluster's member-list tag (see [`membership_tag`]): of its initial configuration, which names
    /// the cluster however its members change.
    pub(super) fn membership(&self) -> i64 {
        let initial = self.initial_member_ids();
        let members: Vec<_> = self.members.iter().filter(|m| initial.contains(&m.id)).map(|m| (m.id, m.log)).collect();
        membership_tag(&members)
    }

    /// The ids of the initial configuration: [`initial_members`](Self::initial_members), or every member.
    pub(super) fn initial_member_ids(&self) -> Vec<i32> {
        self.initial_members.clone().unwrap_or_else(|| self.members.iter().map(|m| m.id).collect())
    }

    /// This node's member entry.
    pub(super) fn me(&self) -> &Member {
        self.members.iter().find(|m| m.id == self.id).expect("validated")
    }

    /// The node directory's path.
    pub(super) fn directory_path(&self) -> PathBuf {
        self.directory.clone().unwrap_or_else(|| NodeDirectory::default_path(&format!("node-{}", self.id)))
    }

    /// The data directory's path.
    pub(super) fn data_dir_path(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(|| {
            // One data directory per node directory: its whole path, flattened, names it.
            let directory = self.directory_path();
            let name: String = directory
                .to_string_lossy()
                .trim_start_matches('/')
                .chars()
                .map(|c| if c == '/' { '-' } else { c })
                .collect();
            std::env::temp_dir().join("quorumcast-data").join(name)
        })
    }

    /// The recording's directory (with a recorded log).
    pub(super) fn recording_dir_path(&self) -> PathBuf {
        self.storage.recording_dir.clone().unwrap_or_else(|| self.data_dir_path().join("recording"))
    }

    /// The snapshots' directory.
    pub(super) fn snapshot_dir_path(&self) -> PathBuf {
        self.data_dir_path().join("snapshots")
    }
}

/// Builds a [`NodeConfig`] and starts the node.
#[derive(Clone, Debug)]
pub struct NodeBuilder {
    config: NodeConfig,
}

impl NodeBuilder {
    /// A node with member id `id` of the cluster `members`; the members elect their leader.
    pub fn new(id: i32, members: Vec<Member>) -> Self {
        Self { config: NodeConfig { id, members, ..NodeConfig::defaults() } }
    }

    /// A builder from a whole configuration.
    pub fn from_config(config: NodeConfig) -> Self {
        Self { config }
    }

    /// The preferred first leader: it stands for election as soon as it starts (by default every member
    /// waits an election timeout first).
    pub fn leader(mut self, id: i32) -> Self {
        self.config.leader = Some(id);
        self
    }

    /// The consensus timers (see [`Timers`]; the `latency` profile's are [`Timers::latency`]).
    pub fn timers(mut self, timers: Timers) -> Self {
        self.config.timers = timers;
        self
    }

    /// Where the persisted term and vote are kept (see [`NodeConfig::data_dir`]).
    pub fn data_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.data_dir = Some(path.into());
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

    /// The length of each of the log's three term buffers (Aeron's term length; a log-buffer term, not a
    /// leadership term): a power of two from 64 KiB to 1 GiB. Node files: `[channel] term_buffer_length`.
    pub fn term_buffer_length(mut self, term_length: usize) -> Self {
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
        self.config.idle = PerAgent::all(idle);
        self
    }

    /// The idle strategies of the consensus, sender, receiver and recorder agents (a [`PerAgent`], or
    /// an array in that order).
    pub fn idle(mut self, agents: impl Into<PerAgent<IdleStrategyConfig>>) -> Self {
        self.config.idle = agents.into();
        self
    }

    /// The cores of the consensus, sender, receiver and recorder agents (a [`PerAgent`], or an array in
    /// that order).
    pub fn cores(mut self, agents: impl Into<PerAgent<Option<usize>>>) -> Self {
        self.config.cores = agents.into();
        self
    }

    /// Where and how the log is kept (see [`StorageConfig`]).
    pub fn storage(mut self, storage: StorageConfig) -> Self {
        self.config.storage = storage;
        self
    }

    /// What the replicated service may hold (see [`ServiceConfig`]).
    pub fn service(mut self, service: ServiceConfig) -> Self {
        self.config.service = service;
        self
    }

    /// Keeps the log in memory only (no recording, no recorder agent): what a restart cannot recover.
    pub fn memory_log(mut self) -> Self {
        self.config.storage.log = LogStorage::Memory;
        self
    }

    /// Records the log on disk with `sync` (the default storage, with sync `none`).
    pub fn sync(mut self, sync: SyncPolicy) -> Self {
        self.config.storage.log = LogStorage::Disk;
        self.config.storage.sync = sync;
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

    /// The ids of the cluster's initial configuration (see [`NodeConfig::initial_members`]): a member that
    /// joins a running cluster lists itself among the members, and not here.
    pub fn initial_members(mut self, ids: Vec<i32>) -> Self {
        self.config.initial_members = Some(ids);
        self
    }

    /// The operator key: administrative commands over the network must carry its tag (distinct from the
    /// channel's `auth_key`). Node files: `[admin] key`.
    pub fn admin_key(mut self, key: AuthKey) -> Self {
        self.config.admin_key = Some(key);
        self
    }

    /// How far behind the leader's log a learner may be when it is promoted, in bytes.
    pub fn promote_within(mut self, bytes: i64) -> Self {
        self.config.promote_within = bytes;
        self
    }

    /// Carry the commit position in data frames while data flows.
    pub fn commit_piggyback(mut self, piggyback: bool) -> Self {
        self.config.commit_piggyback = piggyback;
        self
    }

    /// Split the leader Sender's time in its counters (see [`NodeConfig::sender_time_split`]).
    pub fn sender_time_split(mut self, split: bool) -> Self {
        self.config.sender_time_split = split;
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

    /// Takes remote clients ([`ClusterClient`](crate::ClusterClient)) at each member's client endpoint, with `clients`'
    /// limits (`enabled` is set).
    pub fn clients(mut self, clients: ClientEndpointConfig) -> Self {
        self.config.clients = ClientEndpointConfig { enabled: true, ..clients };
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

    /// Starts the node in `env` (see [`Node::start_in`]).
    pub fn start_in(self, env: super::Environment) -> Result<Node, NodeError> {
        Node::start_in(self.config, env)
    }
}

/// `error` with its placeholders resolved among every section of a node's settings (a rule of one section
/// may name a setting of another).
pub(crate) fn among_every_section(error: SettingError) -> SettingError {
    EVERY_SECTION.into_iter().fold(error, SettingError::among)
}

/// The settings of every section of a node, each section's declared with its type.
pub(crate) const EVERY_SECTION: [&[Setting]; 7] = [
    NodeConfig::SETTINGS,
    ChannelConfig::SETTINGS,
    SocketOptions::SETTINGS,
    Timers::SETTINGS,
    StorageConfig::SETTINGS,
    ServiceConfig::SETTINGS,
    ClientEndpointConfig::SETTINGS,
];

#[cfg(test)]
mod every_section {
    use super::*;
    use crate::setting::FrontEnd;

    #[test]
    fn every_setting_has_a_distinct_id_and_file_key() {
        let all: Vec<Setting> = EVERY_SECTION.concat();
        let mut ids: Vec<_> = all.iter().map(|s| s.id()).collect();
        let mut keys: Vec<_> = all.iter().map(|s| s.name(FrontEnd::NodeFile)).collect();
        ids.sort();
        ids.dedup();
        keys.sort();
        keys.dedup();
        assert_eq!((ids.len(), keys.len()), (all.len(), all.len()));
    }
}
