//! Starting a node: its directory and counters, its recorded log and consensus core, its endpoints, its
//! recorder with the catch-up service, and its agents on their threads (or an invoker).

mod seams;
mod slot;
pub(super) mod wiring;

use std::sync::Arc;

use self::slot::Slot;
use self::wiring::{node_counter, start_agents, NodeAgents, NodeCounters, Wiring};
use super::admin::AdminRings;
use super::builder::NodeConfig;
use super::consensus_agent::{ConsensusAgent, ConsensusAgentCounters, ConsensusAgentParts, RecorderLink};
use super::environment::{Environment, LogFiles};
use super::error::NodeError;
use super::read::committed::CommittedReader;
use super::read::recovery::{self, Recovered};
use super::read::replay::Replay;
use super::read::ReadPath;
use super::sessions::clock::LeaderClock;
use super::sessions::ingress::{ClientIngress, IngressCounters, ReaderLink};
use super::sessions::{ClientSessions, SessionEventCounters};
use super::{Links, LocalClient, Node};
use crate::agent::Agent;
use crate::cluster::consensus_core::{ConsensusCore, CoreConfig, DurableState};
use crate::media::transport::{Binding, Network, Transport};
use crate::setting::SettingError;
use crate::shm::buffer::{AtomicBuffer, Region};
use crate::shm::counters::{Counter, CountersManager};
use crate::shm::directory::{DirectoryError, DirectoryLock, NodeDirectory, StalePolicy};
use crate::shm::log_buffer::LogBuffer;
use crate::shm::ring_buffer::{self, ManyToOneRingBuffer};
use crate::shm::stats::kinds;
use crate::storage::recording::catch_up::{CatchUpKey, CatchUpRuntime, CatchUpServer};
use crate::storage::recording::{Recorder, RecorderCounters, RecordingReader};
use crate::storage::snapshot::{SnapshotIdentity, SnapshotStore};
use crate::storage::vote_file::VoteFile;

/// Bytes of the egress ring from the node's reader to the client endpoint.
const EGRESS_CAPACITY: usize = 1 << 20;

/// The egress ring's capacity: room for at least 16 of the longest records (a ring takes records of up to
/// an eighth of it).
fn egress_capacity(max_response_length: usize) -> usize {
    EGRESS_CAPACITY.max((16 * (max_response_length + 64)).next_power_of_two())
}

/// The tail of the recorded log a restarted member rebuilt in memory, and where it starts.
type Tail = (LogBuffer, i64);

impl Node {
    /// Starts a node from `config`: a follower of no known leader, which elects or joins one.
    pub fn start(config: NodeConfig) -> Result<Node, NodeError> {
        Self::start_in(config, Environment::production())
    }

    /// As [`start`](Self::start), in `env`: its clock, its network and its seed (the node simulator's, or
    /// production's).
    pub fn start_in(config: NodeConfig, env: Environment) -> Result<Node, NodeError> {
        config.validate()?;
        config.channel.validate()?;
        let policy = if config.clean_stale { StalePolicy::Clean } else { StalePolicy::Refuse };
        let directory = NodeDirectory::create(config.directory_path(), policy).map_err(|e| match e {
            // The setting the caller has, in their terms (the builder method, or the node file's key).
            DirectoryError::Stale { path, pid, .. } => NodeError::from(SettingError::new(
                super::builder::node_settings::clean_stale,
                format!(
                    "{} was left by a node that is no longer running (pid {}): set {{node.clean_stale}} to true \
                     to remove it at start (every daemon that can crash needs it), or remove the directory",
                    path.display(),
                    pid.map_or("unknown".to_string(), |p| p.to_string()),
                ),
            )),
            e => NodeError::Directory(e),
        })?;
        let counters = CountersManager::create(directory.file("counters.dat"), 512)?;
        let ingress_path = directory.file("ingress.ring");
        let ingress_length = ring_buffer::required_length(config.ingress_capacity);
        let ingress_region = Region::create_file(&ingress_path, ingress_length, true).map_err(|e| {
            NodeError::Io(std::io::Error::new(e.kind(), format!("cannot create {}: {e}", ingress_path.display())))
        })?;
        let ingress = Arc::new(ManyToOneRingBuffer::new(AtomicBuffer::new(ingress_region))?);
        let data_lock = lock_data_dir(&config, &env)?;
        let recovered = if config.storage.records() { Some(recovery::open(&config, &env)?) } else { None };
        let (core, votes) = start_core(&config, recovered.as_ref(), &env)?;
        // The endpoints of members the recorded configuration entries name (added while the cluster ran).
        let recorded_endpoints: Vec<_> = recovered
            .iter()
            .flat_map(|r| r.configurations.iter().flat_map(|(_, c)| c.endpoints().iter().copied()))
            .collect();
        let (socket, mut warnings) = bind_consensus(&config, &env)?;
        let (clients, mut sessions) = start_clients(&config, &counters, &env)?;
        // The service layer's planted bugs (the simulator's own tests; never set in an embedder's build).
        sessions.timers_on_clock = env.bugs.timers_on_local_clock().then(|| env.clock.clone());
        sessions.snapshot_without_timers = env.bugs.snapshot_without_timers();
        let node_counters = NodeCounters::allocate(&config, &counters);
        let commit = node_counters.consensus.commit.clone();
        let append = node_counters.consensus.append.clone();
        let (sender, sender_handle) = Slot::new("sender");
        let (receiver, receiver_handle) = Slot::new("receiver");
        let links = Links::default();
        let recorder_link = RecorderLink::default();
        let compact_below = Counter::detached();
        let recorded = match recovered {
            Some(recovered) => Some(start_recorder(
                &config,
                &env,
                recovered,
                &counters,
                &recorder_link,
                &compact_below,
                &mut warnings,
            )?),
            None => None,
        };
        let (tail, replay, recorder, recorder_counters, recording_template) = match recorded {
            Some(r) => (r.tail, Some(r.replay), Some(r.agent), Some(r.counters), Some(r.template)),
            None => (None, None, None, None, None),
        };
        // A member acknowledges only what its recorder made durable as its policy says: synced under
        // `batch`, written (to the page cache) under `none`, so that a killed process never forgot what it
        // acknowledged.
        let synced = recorder_counters.as_ref().map(|c| c.synced_position.clone());
        let mut wiring = Wiring::new(
            env.clone(),
            config.clone(),
            directory.path().to_path_buf(),
            node_counters,
            sender_handle,
            receiver_handle,
        );
        wiring.learn(&recorded_endpoints);
        let driver_counters = ConsensusAgentCounters::new(config.id, |kind| node_counter(&counters, kind));
        // The application's positions, which the node sets and the consensus agent reports to `status`.
        let (applied, last_snapshot) = (driver_counters.applied.clone(), driver_counters.snapshot.clone());
        // Shown from the start: a member repairing its log says so before its agents first run.
        driver_counters.repairing_to.set(core.repair().map_or(0, |r| r.held));
        let agent = ConsensusAgent::new(ConsensusAgentParts {
            tail,
            synced,
            core,
            clock: env.clock.fresh(),
            wiring,
            socket,
            votes,
            clients,
            leader_clock: LeaderClock::new(env.clock.fresh(), sessions.deadline(), env.nonces(0x7E41_C10C)),
            ingress: ManyToOneRingBuffer::new(ingress.buffer().clone())?,
            links: links.clone(),
            recorder: recorder_link,
            counters: driver_counters,
            admin: Some(AdminRings::create(directory.path()).map_err(NodeError::Io)?),
        });
        let committed = CommittedReader::new(
            config.id,
            Arc::clone(&links.reader),
            replay,
            recorder_counters,
            recording_template,
            env.clock.fresh(),
        );
        applied.set(committed.applied());
        let order = env.agent_order(u64::from(config.id as u32));
        let agents = NodeAgents { consensus: Box::new(agent), sender, receiver, recorder };
        let handles = start_agents(&config, agents, &counters, order, &mut warnings)?;
        Ok(Node {
            config,
            client: LocalClient { ingress, gate: Arc::clone(&links.offers), commit, append },
            read: ReadPath {
                committed,
                compact_below,
                sessions: Some(sessions),
                snapshots: None,
                disk: env.disk.clone(),
                last_snapshot,
                applied,
                polled: false,
            },
            links,
            event_generation: 0,
            callbacks: Vec::new(),
            handles: Some(handles),
            counters,
            directory: Some(directory),
            data_lock,
            warnings,
            logs: crate::event_log::RateLimited::default(),
            clock: env.clock.fresh(),
            bugs: env.bugs,
        })
    }
}

/// What a node with its log on disk starts with: its recorder, the tail of the recorded log to lead from,
/// and the reader's replay of the recording.
struct Recorded {
    agent: Box<dyn Agent>,
    counters: RecorderCounters,
    tail: Option<Tail>,
    replay: Replay,
    template: RecordingReader,
}

/// The recorder of the log `recovered` holds, with its catch-up server and client when the environment
/// runs catch-ups.
fn start_recorder(
    config: &NodeConfig,
    env: &Environment,
    recovered: Recovered,
    counters: &CountersManager,
    link: &RecorderLink,
    compact_below: &Counter,
    warnings: &mut Vec<String>,
) -> Result<Recorded, NodeError> {
    let recorder_counters = RecorderCounters::new(|kind| node_counter(counters, kind));
    recorder_counters.torn_bytes.set(recovered.report.torn_bytes as i64);
    let report = &recovered.report;
    let cut = match (&report.damaged, &report.torn) {
        (Some(damaged), _) => Some(format!("cut the recorded log back where it is damaged: {damaged}")),
        (None, Some(torn)) => Some(format!("cut a torn end off the recorded log: {torn}")),
        (None, None) => None,
    };
    let repair = report.repair.map(|held| {
        format!(
            "it held its log up to {held} before: until it holds that again (fetched from the leader) it neither \
             stands nor votes for a log less up to date"
        )
    });
    for message in [cut, repair].into_iter().flatten() {
        let message = format!("member {}: {message}", config.id);
        log::warn!("{message}");
        warnings.push(message);
    }
    warn_if_memory_backed(config, warnings);
    let replay = Replay::new(recovered.recording.reader(recovered.recording.start()));
    let template = recovered.recording.reader(0);
    let switches = Arc::clone(&link.switches);
    let identity = SnapshotIdentity { membership: config.membership(), stream_id: config.stream_id };
    let snapshot_store = |config: &NodeConfig| {
        SnapshotStore::open_on(env.disk.clone(), &config.snapshot_dir_path(), identity)
            .map_err(|e| NodeError::Snapshot(e.to_string()))
    };
    // The node file's other members, until the consensus agent publishes the configuration its recording
    // holds (`publish_membership`), which may name members the node file does not.
    let others = config.members.iter().filter(|m| m.id != config.id).map(|m| (m.id, m.consensus.ip())).collect();
    link.members.set(others);
    let others = link.members.clone();
    let catch_up_key = CatchUpKey::new(config.channel.auth.as_ref(), config.membership());
    let mut agent = Recorder::new(recovered.recording, switches, recorder_counters.clone(), compact_below.clone())
        .with_write_coalescing(env.clock.fresh());
    #[cfg(feature = "sim")]
    if env.bugs.ack_before_sync() {
        agent = agent.plant_ack_before_sync();
    }
    if env.log_files == LogFiles::Threaded {
        agent = agent.with_group_commit_thread()?;
    }
    if env.catch_up {
        let local = config.me().consensus;
        let runtime = CatchUpRuntime {
            network: env.network.clone(),
            local: local.ip(),
            clock: env.clock.fresh(),
            nonces: env.nonces(u64::from(config.id as u32)),
            inline: env.log_files == LogFiles::Inline,
        };
        let server = env
            .network
            .clone()
            .listen(local)
            .map(|listener| {
                let (membership, store) = (config.membership(), snapshot_store(config));
                let clock = env.clock.fresh();
                store.map(|store| {
                    CatchUpServer::new(listener, others, membership, catch_up_key, store, clock, runtime.nonces.clone())
                })
            })
            .map_err(|e| {
                let message = format!(
                    "member {}: cannot serve catch-ups at {local} (tcp): {e}; followers far behind cannot \
                     catch up from this member",
                    config.id,
                );
                log::warn!("{message}");
                warnings.push(message);
            })
            .ok()
            .transpose()?;
        let (channel, store) = (Arc::clone(&link.catch_ups), snapshot_store(config)?);
        agent = agent.with_catch_up(server, channel, catch_up_key, store, runtime);
    }
    let tail = recovered.tail;
    Ok(Recorded { agent: Box::new(agent), counters: recorder_counters, tail, replay, template })
}

/// Creates the data directory and takes its lock (before anything in it is read or repaired): a second
/// node on the same data directory is refused, naming it and the pid that holds it.
fn lock_data_dir(config: &NodeConfig, env: &Environment) -> Result<Option<DirectoryLock>, NodeError> {
    let data_dir = config.data_dir_path();
    env.disk.create_dir_all(&data_dir).map_err(|e| {
        NodeError::Io(std::io::Error::new(
            e.kind(),
            format!("cannot create the data directory {}: {e}", data_dir.display()),
        ))
    })?;
    env.disk.lock_dir(&data_dir).map_err(|e| match e {
        DirectoryError::AlreadyRunning { pid, .. } => NodeError::Config(format!(
            "the data directory {} is in use by another node ({}): give each node its own data_dir",
            data_dir.display(),
            pid.map_or("unknown pid".to_string(), |p| format!("pid {p}")),
        )),
        e => NodeError::Directory(e),
    })
}

/// The consensus core of a starting node, from its persisted term and vote (the vote file it goes on
/// writing) and its recorded log, if it has one.
fn start_core(
    config: &NodeConfig,
    recovered: Option<&recovery::Recovered>,
    env: &Environment,
) -> Result<(ConsensusCore, VoteFile), NodeError> {
    let data_dir = config.data_dir_path();
    let votes = VoteFile::on(env.disk.clone(), &data_dir, config.id, config.membership());
    let mut durable = match votes.load().map_err(NodeError::Vote)? {
        Some(vote) => DurableState {
            leadership_term_id: vote.leadership_term_id,
            voted_for: vote.voted_for,
            ..DurableState::default()
        },
        None => DurableState::default(),
    };
    if let Some(recovered) = recovered.filter(|r| r.recording.end() > 0) {
        let end = recovered.recording.end();
        durable = DurableState {
            term_history: recovered.history.clone(),
            memberships: recovered.configurations.iter().map(|(end, c)| (*end, c.membership().clone())).collect(),
            append_position: end,
            leadership_term_id: durable.leadership_term_id.max(recovered.history.last_term_id()),
            ..durable
        };
        durable.validate().map_err(|e| {
            NodeError::Recording(crate::storage::recording::RecordingError {
                path: recovered.recording.dir().to_path_buf(),
                message: format!(
                    "its terms and end do not make a log a consensus core can start from ({e}): move the recording \
                     directory away to start this member empty (it catches up from the leader)"
                ),
            })
        })?;
        log::info!("member {}: recorded log recovered up to position {end}", config.id);
    }
    let seed = env.random(config.id as u64);
    let mut core_config = CoreConfig::new(config.id, config.initial_member_ids());
    core_config.timers = config.timers;
    core_config.seed = seed;
    #[cfg(feature = "sim")]
    {
        core_config.bugs.count_non_voters = env.bugs.count_non_voters;
    }
    let now_ns = env.clock.now_ns();
    let mut core = ConsensusCore::new(core_config, durable, now_ns).map_err(|e| NodeError::Config(e.to_string()))?;
    if let Some(held) = recovered.and_then(|r| r.report.repair).filter(|_| !env.bugs.forget_damage()) {
        // The recorded log was damaged below what this member synced (and may have acknowledged): it
        // repairs, voting only for logs as up to date as the one it held, until it holds that again.
        core.start_repair(held);
    }
    Ok((core, votes))
}

/// Warns when the recording would live in memory (tmpfs, `/dev/shm`): a machine restart loses it.
fn warn_if_memory_backed(config: &NodeConfig, warnings: &mut Vec<String>) {
    let dir = config.recording_dir_path();
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return;
    };
    let mut fs = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `path` is a NUL-terminated string and `fs` a buffer of the size statfs writes.
    let ok = unsafe { libc::statfs(path.as_ptr(), fs.as_mut_ptr()) } == 0;
    // SAFETY: statfs succeeded, so it initialised `fs`.
    if ok && unsafe { fs.assume_init() }.f_type == libc::TMPFS_MAGIC {
        warnings.push(format!(
            "the recorded log is in {}, on tmpfs: a machine restart loses it; set data_dir (or \
             storage.recording_dir) to a directory on disk",
            dir.display()
        ));
    }
}

/// Binds this member's consensus endpoint, after checking that its log endpoint can be bound too (the
/// Sender or Receiver of each role binds it later, beside each other with `SO_REUSEPORT`: an address
/// another program holds is refused now, naming it, not at the first election).
fn bind_consensus(config: &NodeConfig, env: &Environment) -> Result<(Box<dyn Transport>, Vec<String>), NodeError> {
    let me = config.me();
    let mut network = env.network.clone();
    let socket = &config.channel.socket;
    let log_endpoint = Binding { socket, auth: None, shared: true };
    drop(network.bind(me.log, &log_endpoint).map_err(|e| {
        NodeError::Io(std::io::Error::new(e.kind(), format!("cannot bind the log endpoint {}: {e}", me.log)))
    })?);
    let consensus = Binding { socket, auth: config.channel.auth, shared: false };
    network.bind(me.consensus, &consensus).map_err(|e| {
        NodeError::Io(std::io::Error::new(
            e.kind(),
            format!("cannot bind the consensus endpoint {}: {e}", me.consensus),
        ))
    })
}

/// The client endpoint (when `clients.enabled`) and the session table every node keeps.
fn start_clients(
    config: &NodeConfig,
    counters: &CountersManager,
    env: &Environment,
) -> Result<(Option<ClientIngress>, ClientSessions), NodeError> {
    let ingress_counters = IngressCounters::new(|kind| node_counter(counters, kind));
    let session_counters = SessionEventCounters {
        egress_dropped: ingress_counters.egress_dropped.clone(),
        duplicates: node_counter(counters, &kinds::clients::duplicates),
        responses_too_long: node_counter(counters, &kinds::clients::responses_too_long),
        malformed: ingress_counters.malformed_dropped.clone(),
    };
    let datagram_capacity = config.channel.mtu;
    let max_response = crate::client::wire::DatagramWriter::new(datagram_capacity).max_payload();
    let limits = crate::service::state::ServiceLimits {
        max_timers: config.service.max_timers,
        max_response_length: config.service.max_response_length as usize,
        max_push_backlog: usize::try_from(config.service.max_push_backlog).unwrap_or(usize::MAX),
    };
    if !config.clients.enabled {
        let sessions =
            ClientSessions::new(config.clients.session_config(), limits, None, max_response, session_counters);
        return Ok((None, sessions));
    }
    let egress = Arc::new(crate::shm::ring_buffer::OneToOneRingBuffer::new(AtomicBuffer::anonymous(
        ring_buffer::required_length(egress_capacity(config.service.max_response_length as usize)),
    )?)?);
    let me = config.me();
    let binding = Binding { socket: &config.channel.socket, auth: None, shared: false };
    let (socket, _) = env.network.clone().bind(me.client, &binding).map_err(|e| {
        NodeError::Io(std::io::Error::new(e.kind(), format!("cannot bind the client endpoint {}: {e}", me.client)))
    })?;
    let secret = config.clients.secret(config.channel.auth.as_ref()).ok_or_else(|| {
        NodeError::Config("clients need clients.session_key or channel.auth_key (checked at start)".into())
    })?;
    let mut sessions = ClientSessions::new(
        config.clients.session_config(),
        limits,
        Some(egress.clone()),
        max_response,
        session_counters,
    );
    let ingress = ClientIngress::new(
        socket,
        env.clock.fresh(),
        config.clients.clone(),
        (secret, env.nonces(0x5E55_1011)),
        datagram_capacity,
        ReaderLink { egress },
        ingress_counters,
    );
    sessions.apply_duplicates = env.bugs.apply_duplicates();
    Ok((Some(ingress), sessions))
}
