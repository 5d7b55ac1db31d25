//! Node files: a node's configuration in TOML, and profiles laid over it (the `config` feature).
//!
//! `qc-node` starts a node from one; an application that embeds a node may too, or may build its
//! [`NodeConfig`] with [`NodeBuilder`] and have no file at all.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::agent::clock::{parse_duration, BareNumber};
use crate::agent::idle::IdleStrategyConfig;
use crate::agent::ThreadingMode;
use crate::client::credentials::ClientKey;
use crate::media::auth::AuthKey;
use crate::media::channel::ChannelConfig;
use crate::media::transport::faulty::FaultConfig;
use crate::media::transport::SendMode;
use crate::node::builder::{ClientsSection, ServiceSection, StorageSection};
use crate::node::{LogStorage, Member, NodeBuilder, NodeConfig, NodeError};
use crate::setting::FrontEnd;

/// A node configuration file in TOML, or a profile to merge over one.
///
/// Every key is optional in a file, so that a node file (identity, membership, channel) and a profile
/// (threading, idle strategies, cores) can each hold only their part: [`NodeFile::merge`] lays a profile
/// over a node file, and [`NodeFile::into_config`] demands the keys a node needs (`id`, `members`) and
/// takes [`NodeBuilder::new`]'s defaults for the rest. Unknown keys are an error that names
/// the key. The keys:
///
/// ```toml
/// id = 0                       # this node's member id (required)
/// leader = 0                   # the preferred first leader (optional: the members elect one anyway)
/// directory = "/dev/shm/quorumcast/node-0"   # default: /dev/shm/quorumcast/node-<id>
/// data_dir = "/var/lib/quorumcast/node-0"    # the persisted term and vote; default: <directory>-data
/// clean_stale = true           # remove a crashed run's directory instead of refusing to start
/// stream_id = 1001
/// commit_piggyback = true      # carry the commit position in data frames
/// sender_time_split = true     # split the leader Sender's time in its counters (a few clock reads per send)
/// ingress_capacity = "4MiB"    # client ingress ring, a power of two
/// members = [ { id = 0, log = "127.0.0.1:40501", consensus = "127.0.0.1:40601" },
///             { id = 1, log = "127.0.0.1:40502" } ]   # consensus: default the log port + 100
/// initial_members = [0, 1]     # the cluster's first voters (default: every member); a member joining a
///                              # running cluster lists itself in members, not here
/// promote_within = "4MiB"      # a learner is promoted only this close to the leader's log
///
/// [consensus]                  # elections; see docs/operating.md for how to choose
/// heartbeat_interval = "10ms"  # the leader's heartbeat (its commit position) at least this often
/// heartbeat_timeout = "100ms"  # a leader not heard from for this long may be replaced
/// election_timeout_min = "150ms"   # a follower canvasses after a random timeout in this range
/// election_timeout_max = "300ms"
///
/// [channel]
/// mtu = 8192
/// term_buffer_length = "16MiB" # one of the log's three term buffers (not a leadership term)        # sizes: a number of bytes, or a string with B, KiB, MiB or GiB
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
/// ack_gap = "20us"
///
/// [storage]
/// log = "disk"                 # disk (recorded by the recorder agent; the default) or memory
/// sync = "none"                # none (page cache) or batch (group commit with fdatasync)
/// recording_dir = "/var/lib/quorumcast/node-0/recording"   # default: recording in data_dir
/// segment_length = "128MiB"
/// page_cache_window = "64MiB"  # or "off": the recorded log kept cached behind its end
/// snapshot_interval = "256MiB"  # or "off": snapshots only on request
/// snapshots_kept = 2
///
/// [service]                    # what the replicated service may hold; the same on every member
/// max_timers = 1048576
/// max_response_length = "64KiB"   # longer ones go in pieces; at most 16 MiB
/// max_push_backlog = "256KiB"     # a client that leaves more unacknowledged is closed
///
/// [clients]                    # remote clients (cluster_client): each member's `client` endpoint
/// enabled = true               # default false; a member's client endpoint defaults to its port + 200
/// max_sessions = 1024          # the same on every member
/// session_timeout = "10s"      # the same on every member
/// window = 4096                # messages in flight per session
/// allow = ["10.0.0.0/8", "127.0.0.1"]   # default: any address
/// session_key = "<64 hex digits>"       # binds sessions to their clients; default: channel.auth_key
/// max_sessions_per_address = 256        # per IPv4 address, per IPv6 /64
/// max_sessions_per_prefix = 256         # per IPv4 /24, per IPv6 /48, all its addresses together
/// opens_per_second = 1000               # opens and reconnects per address per second
/// auth_key = "<64 hex digits>"          # optional: only clients holding it (as "default") get in
/// keys = [{ name = "billing", key = "<64 hex digits>" }]   # optional: named client keys, too
///
/// [admin]
/// key = "<64 hex digits>"      # the operator key: qc-cluster --connect commands carry its tag (default:
///                              # none, administration only through the node directory)
///
/// [agents]
/// threading = "dedicated"      # dedicated, shared-network, shared, invoker or shared-network-invoker
/// force_layout = false
/// idle = "backoff:10,5,1us,1ms"   # every agent without an idle of its own
/// consensus = { idle = "noop", core = 1 }
/// sender = { idle = "noop", core = 2 }
/// receiver = { idle = "noop", core = 3 }
/// recorder = { idle = "backoff", core = 4 }
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
    data_dir: Option<PathBuf>,
    clean_stale: Option<bool>,
    stream_id: Option<i32>,
    commit_piggyback: Option<bool>,
    sender_time_split: Option<bool>,
    ingress_capacity: Option<FileSize>,
    initial_members: Option<Vec<i32>>,
    promote_within: Option<FileSize>,
    #[serde(default)]
    channel: ChannelSection,
    #[serde(default)]
    timers: TimerSection,
    #[serde(default)]
    consensus: ConsensusSection,
    #[serde(default)]
    agents: AgentSection,
    #[serde(default)]
    storage: StorageSection,
    #[serde(default)]
    service: ServiceSection,
    #[serde(default)]
    clients: ClientsSection,
    #[serde(default)]
    admin: AdminSection,
}

/// The `[admin]` table.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AdminSection {
    key: Option<Parsed<AuthKey>>,
}

/// A `[[clients.keys]]` entry: a client key and the name its clients give.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClientKeyEntry {
    name: String,
    key: Parsed<AuthKey>,
}

/// A size in a file, or `off` (a snapshot interval, a page cache window).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct SizeOrOff(Option<u64>);

impl std::str::FromStr for SizeOrOff {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == "off" {
            return Ok(SizeOrOff(None));
        }
        let size = parse_size_text(text).map_err(|e| format!("{e}, or off"))?;
        Ok(SizeOrOff(Some(size as u64)))
    }
}

/// The `[consensus]` table: the election timers.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsensusSection {
    heartbeat_interval: Option<FileDuration>,
    heartbeat_timeout: Option<FileDuration>,
    election_timeout_min: Option<FileDuration>,
    election_timeout_max: Option<FileDuration>,
}

/// A `members` entry.
#[derive(Clone, Copy, Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberEntry {
    id: i32,
    /// The log endpoint (`endpoint`, its name before 0.1, is still read).
    #[serde(alias = "endpoint")]
    log: SocketAddr,
    consensus: Option<SocketAddr>,
    client: Option<SocketAddr>,
}

/// The `[channel]` table.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ChannelSection {
    mtu: Option<usize>,
    /// `term_length`, its name before 0.1, is still read.
    #[serde(alias = "term_length")]
    term_buffer_length: Option<FileSize>,
    send_mode: Option<Parsed<SendMode>>,
    batch_limit: Option<usize>,
    receiver_window: Option<FileSize>,
    send_buffer: Option<FileSize>,
    receive_buffer: Option<FileSize>,
    send_faults: Option<Parsed<FaultConfig>>,
    receive_faults: Option<Parsed<FaultConfig>>,
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
    ack_gap: Option<FileDuration>,
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
    recorder: AgentEntry,
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
        merge_fields!(self, over; id, leader, members, directory, data_dir, clean_stale, stream_id,
            commit_piggyback, sender_time_split, ingress_capacity, initial_members, promote_within);
        let (c, o) = (&mut self.consensus, over.consensus);
        merge_fields!(c, o; heartbeat_interval, heartbeat_timeout, election_timeout_min, election_timeout_max);
        let (c, o) = (&mut self.channel, over.channel);
        merge_fields!(c, o; mtu, term_buffer_length, send_mode, batch_limit, receiver_window, send_buffer,
            receive_buffer, send_faults, receive_faults, auth_key, max_retransmit_rate);
        let (t, o) = (&mut self.timers, over.timers);
        merge_fields!(t, o; status_interval, nak_delay, nak_retry_delay, retransmit_linger, receiver_timeout,
            heartbeat_interval, setup_interval, commit_heartbeat, ack_interval, ack_gap);
        let (a, o) = (&mut self.agents, over.agents);
        merge_fields!(a, o; threading, force_layout, idle);
        for (entry, over) in [
            (&mut a.consensus, o.consensus),
            (&mut a.sender, o.sender),
            (&mut a.receiver, o.receiver),
            (&mut a.recorder, o.recorder),
            (&mut a.application, o.application),
        ] {
            merge_fields!(entry, over; idle, core);
        }
        self.storage.merge(over.storage);
        self.service.merge(over.service);
        self.clients.merge(over.clients);
        let (a, o) = (&mut self.admin, over.admin);
        merge_fields!(a, o; key);
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

    /// The node configuration this file describes; fails when `id` or `members` is missing, or
    /// when the configuration breaks a rule of [`Node::start`](crate::node::Node::start) (checked here so a file is refused early).
    pub fn into_config(self) -> Result<NodeConfig, NodeError> {
        let missing = |key: &str, what: &str| NodeError::Config(format!("missing key `{key}` ({what})"));
        let id = self.id.ok_or_else(|| missing("id", "this node's member id"))?;
        let members = self.members.as_ref().ok_or_else(|| {
            missing(
                "members",
                "every member's id and log endpoint, e.g. members = [{ id = 0, log = \"127.0.0.1:40501\" }]",
            )
        })?;
        let members = members
            .iter()
            .map(|m| Member {
                consensus: m.consensus.unwrap_or(Member::new(m.id, m.log).consensus),
                client: m.client.unwrap_or(Member::new(m.id, m.log).client),
                ..Member::new(m.id, m.log)
            })
            .collect();
        let mut config = NodeBuilder::new(id, members).config().clone();
        config.leader = self.leader;
        config.data_dir = self.data_dir.clone();
        let agents = &self.agents;
        let entries = [agents.consensus, agents.sender, agents.receiver, agents.recorder];
        config.idle = entries.map(|entry| self.agent_idle(&entry)).into();
        config.cores = entries.map(|entry| entry.core).into();
        if let Some(mode) = agents.threading {
            config.threading = mode.0;
        }
        set(&mut config.force_layout, agents.force_layout);
        config.directory = self.directory.clone().or(config.directory);
        set(&mut config.clean_stale, self.clean_stale);
        set(&mut config.stream_id, self.stream_id);
        set(&mut config.commit_piggyback, self.commit_piggyback);
        set(&mut config.sender_time_split, self.sender_time_split);
        set(&mut config.ingress_capacity, self.ingress_capacity.map(|s| s.0));
        config.initial_members = self.initial_members.clone();
        set(&mut config.promote_within, self.promote_within.map(|s| s.0 as i64));
        config.admin_key = self.admin.key.map(|key| key.0);
        if !config.ingress_capacity.is_power_of_two() {
            return Err(NodeError::Config(format!(
                "ingress_capacity {} must be a power of two",
                config.ingress_capacity
            )));
        }
        self.channel.apply(&mut config.channel);
        self.timers.apply(&mut config);
        self.consensus.apply(&mut config);
        self.storage.apply(&mut config.storage);
        self.service.apply(&mut config.service);
        self.clients.apply(&mut config.clients);
        config.validate().map_err(in_file_terms)?;
        config.channel.validate().map_err(|e| in_file_terms(e.into()))?;
        Ok(config)
    }
}

/// A node's refusal in a node file's terms: a setting is named by its table and key.
fn in_file_terms(error: NodeError) -> NodeError {
    match error {
        NodeError::Setting(e) => NodeError::Config(e.render(FrontEnd::NodeFile)),
        other => other,
    }
}

impl ChannelSection {
    fn apply(&self, channel: &mut ChannelConfig) {
        set(&mut channel.mtu, self.mtu);
        if let Some(term_length) = self.term_buffer_length {
            channel.term_length = term_length.0;
            // As NodeBuilder::term_buffer_length: a small term shrinks the default window to fit.
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

impl ConsensusSection {
    fn apply(&self, config: &mut NodeConfig) {
        let ns = |t: Option<FileDuration>| t.map(|t| crate::agent::clock::nanos(t.0));
        let timers = &mut config.timers;
        set(&mut timers.heartbeat_interval_ns, ns(self.heartbeat_interval));
        set(&mut timers.heartbeat_timeout_ns, ns(self.heartbeat_timeout));
        set(&mut timers.election_timeout_min_ns, ns(self.election_timeout_min));
        set(&mut timers.election_timeout_max_ns, ns(self.election_timeout_max));
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
        set(&mut config.ack_gap, d(self.ack_gap));
    }
}

/// A value as a node file gives it, turned into the setting's type (the `file` form of a setting declared
/// with `section!`).
pub(crate) trait FileValue<T> {
    /// The setting's value.
    fn value(self) -> T;
}

macro_rules! file_value_as_is {
    ($($t:ty),*) => { $(impl FileValue<$t> for $t { fn value(self) -> $t { self } })* };
}
file_value_as_is!(bool, u32, u64, usize, LogStorage);

impl FileValue<Duration> for FileDuration {
    fn value(self) -> Duration {
        self.0
    }
}

impl FileValue<u64> for FileSize {
    fn value(self) -> u64 {
        self.0 as u64
    }
}

impl<T> FileValue<T> for Parsed<T> {
    fn value(self) -> T {
        self.0
    }
}

impl FileValue<Option<AuthKey>> for Parsed<AuthKey> {
    fn value(self) -> Option<AuthKey> {
        Some(self.0)
    }
}

impl FileValue<Option<u64>> for Parsed<SizeOrOff> {
    fn value(self) -> Option<u64> {
        self.0 .0
    }
}

impl FileValue<Option<PathBuf>> for PathBuf {
    fn value(self) -> Option<PathBuf> {
        Some(self)
    }
}

impl<T> FileValue<Vec<T>> for Vec<Parsed<T>> {
    fn value(self) -> Vec<T> {
        self.into_iter().map(|p| p.0).collect()
    }
}

impl FileValue<Vec<ClientKey>> for Vec<ClientKeyEntry> {
    fn value(self) -> Vec<ClientKey> {
        self.into_iter().map(|entry| ClientKey::new(entry.name, entry.key.0)).collect()
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
pub(crate) struct Parsed<T>(pub(crate) T);

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
pub(crate) struct FileDuration(Duration);

impl<'de> serde::Deserialize<'de> for FileDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_duration(&text, BareNumber::Refused).map(FileDuration).map_err(serde::de::Error::custom)
    }
}

/// A size in bytes: a whole number, or a string with a unit: `"16MiB"`, `"128KiB"`, `"1GiB"`, `"4096B"`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct FileSize(usize);

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
    use crate::client::credentials::DEFAULT_CLIENT_KEY_NAME;

    const NODE: &str = r#"
        id = 1
        leader = 0
        clean_stale = true
        members = [
            { id = 0, log = "127.0.0.1:40501" },
            { id = 1, log = "127.0.0.1:40502" },
            { id = 2, log = "127.0.0.1:40503" },
        ]
        [channel]
        mtu = 8192
        term_buffer_length = "16MiB"
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
        assert_eq!((config.id, config.leader, config.members.len()), (1, Some(0), 3));
        assert_eq!(config.members[2].log, "127.0.0.1:40503".parse().unwrap());
        assert!(config.clean_stale);
        assert_eq!((config.channel.mtu, config.channel.term_length), (8192, 16 << 20));
        assert_eq!(config.channel.socket.receive_buffer, Some(4 << 20));
        assert_eq!(config.channel.status_interval, Duration::from_millis(10));
        assert_eq!(config.channel.nak_delay, Duration::from_micros(100));
        assert_eq!(config.threading, ThreadingMode::Dedicated);
        assert_eq!(
            config.idle,
            [
                IdleStrategyConfig::NoOp,
                IdleStrategyConfig::BusySpin,
                IdleStrategyConfig::NoOp,
                IdleStrategyConfig::NoOp
            ]
            .into()
        );
        assert_eq!(config.cores, [None, Some(1), None, None].into());
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
        assert_eq!(config.idle, [backoff, IdleStrategyConfig::BusySpin, backoff, backoff].into());
        assert_eq!(config.cores, [None, Some(0), None, None].into());
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
    fn the_acknowledgement_gap_is_set_in_timers_and_refused_past_the_interval() {
        let gap = NODE.replace("nak_delay = \"100us\"", "nak_delay = \"100us\"\nack_gap = \"50us\"");
        assert_eq!(NodeConfig::from_toml(&gap).unwrap().ack_gap, Duration::from_micros(50));
        assert_eq!(NodeConfig::from_toml(NODE).unwrap().ack_gap, Duration::from_micros(20), "the default");
        let none = NODE.replace("nak_delay = \"100us\"", "nak_delay = \"100us\"\nack_gap = \"0us\"");
        assert_eq!(NodeConfig::from_toml(&none).unwrap().ack_gap, Duration::ZERO, "zero: every advance");
        let long = NODE.replace("nak_delay = \"100us\"", "nak_delay = \"100us\"\nack_gap = \"300ms\"");
        let e = NodeConfig::from_toml(&long).unwrap_err().to_string();
        assert!(e.contains("[timers] ack_gap: (300ms) must be at most [timers] ack_interval (200ms)"), "{e}");
    }

    #[test]
    fn a_refused_setting_is_named_by_its_table_and_key_in_the_file() {
        let timers = format!("{NODE}\n[consensus]\nheartbeat_timeout = \"200ms\"\nelection_timeout_min = \"150ms\"\n");
        let e = NodeConfig::from_toml(&timers).unwrap_err().to_string();
        assert!(
            e.contains("[consensus] heartbeat_timeout: (200ms) must be below [consensus] election_timeout_min"),
            "{e}"
        );
        assert!(!e.contains("_ns") && !e.contains("NodeBuilder"), "{e}");
        let clients = format!(
            "{NODE}\n[clients]\nenabled = true\nsession_key = \"{}\"\nsession_timeout = \"0s\"\n",
            "5".repeat(64)
        );
        let e = NodeConfig::from_toml(&clients).unwrap_err().to_string();
        assert!(e.contains("[clients] session_timeout: (0ns) must be more than 0"), "{e}");
        let e = NodeConfig::from_toml(&format!("{NODE}\n[clients]\nenabled = true\n")).unwrap_err().to_string();
        assert!(e.contains("[clients] session_key: is not set and [channel] auth_key is not either"), "{e}");
        // The same rule, broken through the builder, names the builder's method and field.
        let timers = crate::cluster::consensus_core::Timers { heartbeat_timeout_ns: 200_000_000, ..Default::default() };
        let members = vec![crate::node::Member::new(0, "127.0.0.1:40501".parse().unwrap())];
        let e = NodeBuilder::new(0, members).timers(timers).config().validate().unwrap_err().to_string();
        assert!(e.contains("NodeBuilder::timers(Timers { heartbeat_timeout_ns, .. }): (200ms) must be below"), "{e}");
        assert!(e.contains("election_timeout_min_ns") && !e.contains("[consensus]"), "{e}");
    }

    #[test]
    fn the_page_cache_window_is_a_size_or_off_and_too_small_a_one_is_refused_by_name() {
        assert_eq!(NodeConfig::from_toml(NODE).unwrap().storage.page_cache_window, Some(64 << 20));
        let with =
            |value: &str| NodeConfig::from_toml(&format!("{NODE}\n[storage]\npage_cache_window = \"{value}\"\n"));
        assert_eq!(with("256MiB").unwrap().storage.page_cache_window, Some(256 << 20));
        assert_eq!(with("off").unwrap().storage.page_cache_window, None);
        let e = with("4MiB").unwrap_err().to_string();
        assert!(e.contains("[storage] page_cache_window: (4194304) must be at least 8 MiB"), "{e}");
        let e = with("lots").unwrap_err().to_string();
        assert!(e.contains("page_cache_window") && e.contains("or off"), "{e}");
    }

    #[test]
    fn the_clients_table_sets_the_client_endpoint_and_its_limits() {
        let text = NODE.replace("{ id = 2, log = \"127.0.0.1:40503\" }", "{ id = 2, log = \"127.0.0.1:40503\", client = \"127.0.0.1:49000\" }")
            + "[clients]\nenabled = true\nsession_key = \"5555555555555555555555555555555555555555555555555555555555555555\"\nmax_sessions = 16\nsession_timeout = \"2s\"\nwindow = 64\nallow = [\"10.0.0.0/8\", \"::1\"]\n";
        let config = NodeConfig::from_toml(&text).unwrap();
        let clients = &config.clients;
        assert!(clients.enabled);
        assert_eq!((clients.max_sessions, clients.window), (16, 64));
        assert_eq!(clients.session_timeout, Duration::from_secs(2));
        assert!(clients.allows("10.1.2.3".parse().unwrap()));
        assert!(clients.allows("::1".parse().unwrap()));
        assert!(!clients.allows("11.0.0.1".parse().unwrap()));
        assert!(!clients.allows("127.0.0.1".parse().unwrap()));
        assert_eq!(config.members[2].client, "127.0.0.1:49000".parse().unwrap());
        assert_eq!(config.members[0].client, "127.0.0.1:40701".parse().unwrap(), "default: the log port + 200");
        // A profile may set the table too, and wins where it does.
        let profile = NodeFile::parse("[clients]\nmax_sessions = 8\n").unwrap();
        let merged = NodeFile::parse(&text).unwrap().merge(profile).into_config().unwrap();
        assert_eq!((merged.clients.enabled, merged.clients.max_sessions), (true, 8));
        let e = NodeConfig::from_toml(&(text.clone() + "max_sessions = 0\n").replace("max_sessions = 16\n", ""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("[clients] max_sessions: must be at least 1"), "{e}");
        let e = NodeFile::parse("[clients]\nallow = [\"10.0.0.0/40\"]\n").unwrap_err().to_string();
        assert!(e.contains("prefix"), "{e}");
        let session_key = format!("session_key = \"{}\"\n", "5".repeat(64));
        let e = NodeConfig::from_toml(&(NODE.to_string() + "[clients]\nenabled = true\n" + &session_key))
            .map(|_| ())
            .and_then(|_| {
                let clash = NODE.replace(
                    "{ id = 2, log = \"127.0.0.1:40503\" }",
                    "{ id = 2, log = \"127.0.0.1:40503\", client = \"127.0.0.1:40502\" }",
                ) + "[clients]\nenabled = true\n"
                    + &session_key;
                NodeConfig::from_toml(&clash).map(|_| ())
            })
            .unwrap_err()
            .to_string();
        assert!(e.contains("127.0.0.1:40502") && e.contains("client"), "{e}");
    }

    #[test]
    fn the_clients_table_takes_the_session_key_client_keys_and_per_address_limits() {
        let key = |digit: char| std::iter::repeat_n(digit, 64).collect::<String>();
        let text = format!(
            "{NODE}[clients]\nenabled = true\nsession_key = \"{}\"\nauth_key = \"{}\"\n\
             keys = [{{ name = \"billing\", key = \"{}\" }}]\nmax_sessions_per_address = 4\nopens_per_second = 20\n\
             max_sessions_per_prefix = 8\n",
            key('1'),
            key('2'),
            key('3')
        );
        let config = NodeConfig::from_toml(&text).unwrap();
        let clients = &config.clients;
        assert_eq!(clients.session_key, Some(key('1').parse().unwrap()));
        let names: Vec<_> = clients.keys.iter().map(ClientKey::name).collect();
        assert_eq!(names, [DEFAULT_CLIENT_KEY_NAME, "billing"]);
        assert_eq!(clients.keys[1].key(), &key('3').parse().unwrap());
        assert_eq!((clients.max_sessions_per_address, clients.opens_per_second), (4, 20));
        assert_eq!(clients.max_sessions_per_prefix, 8);
        // A network's share below one address's is refused, naming both keys.
        let e = NodeConfig::from_toml(&text.replace("max_sessions_per_prefix = 8", "max_sessions_per_prefix = 2"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("[clients] max_sessions_per_prefix") && e.contains("max_sessions_per_address"), "{e}");
        // Clients without a session key (nor the channel's auth_key) are refused, naming both keys.
        let e = NodeConfig::from_toml(&(NODE.to_string() + "[clients]\nenabled = true\n")).unwrap_err().to_string();
        assert!(e.contains("[clients] session_key") && e.contains("[channel] auth_key"), "{e}");
        let e = NodeFile::parse("[clients]\nauth_key = \"12\"\n").unwrap_err().to_string();
        assert!(e.contains("auth_key"), "{e}");
    }

    #[test]
    fn the_admin_table_takes_the_operator_key_which_must_not_be_the_channels() {
        let key = |digit: char| std::iter::repeat_n(digit, 64).collect::<String>();
        let config = NodeConfig::from_toml(&format!("{NODE}[admin]\nkey = \"{}\"\n", key('4'))).unwrap();
        assert_eq!(config.admin_key, Some(key('4').parse().unwrap()));
        assert_eq!(NodeConfig::from_toml(NODE).unwrap().admin_key, None, "none by default");
        let one = "id = 0\nmembers = [{ id = 0, log = \"127.0.0.1:40501\" }]\n";
        let same = format!("{one}[channel]\nauth_key = \"{}\"\n[admin]\nkey = \"{}\"\n", key('5'), key('5'));
        let e = NodeConfig::from_toml(&same).unwrap_err().to_string();
        assert!(e.contains("[admin] key") && e.contains("[channel] auth_key") && e.contains("a key of its own"), "{e}");
        let e = NodeFile::parse("[admin]\nkey = \"12\"\n").unwrap_err().to_string();
        assert!(e.contains("key"), "{e}");
    }

    #[test]
    fn durations_and_sizes_take_their_units() {
        assert_eq!(parse_duration("250us", BareNumber::Refused), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("3s", BareNumber::Refused), Ok(Duration::from_secs(3)));
        assert!(parse_duration("1.5ms", BareNumber::Refused).is_err());
        assert_eq!(parse_size_text("128KiB"), Ok(128 << 10));
        assert_eq!(parse_size_text("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size_text("4096"), Ok(4096));
        assert!(parse_size_text("-1").is_err());
    }
}
