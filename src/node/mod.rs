//! A cluster node: what an application embeds.
//!
//! ```no_run
//! use quorumcast::{Member, NodeBuilder};
//!
//! // Each member: its id, its log endpoint, and its consensus endpoint (here the default, port + 100).
//! let members = vec![
//!     Member::new(0, "127.0.0.1:40100".parse().unwrap()),
//!     Member::new(1, "127.0.0.1:40101".parse().unwrap()),
//!     Member::new(2, "127.0.0.1:40102".parse().unwrap()),
//! ];
//! let mut node = NodeBuilder::new(0, members).leader(0).mtu(8192).idle_all("backoff").start().unwrap();
//! node.on_role_change(|change| println!("now {} in term {}", change.role, change.leadership_term_id));
//! let client = node.client();
//! // Offers are taken only while this node leads; elsewhere they say who does.
//! if client.offer(b"set x = 1").is_ok() {
//!     node.poll_committed(10, |entry| println!("apply {entry:?}"));
//! }
//! node.close().unwrap();
//! ```
//!
//! Every node runs its agents in the configured threading mode: the consensus agent, which drives the
//! node's consensus core (elections, votes, commit; see [`crate::cluster::consensus_core`]), the places of the
//! Sender and the Receiver, which run what the role needs (`wiring`), and, with the log on disk (the
//! default), the recorder ([`crate::storage::recording`]). The members elect their leader;
//! it takes client messages from its ingress ring (any thread of the process, or another process,
//! through a [`LocalClient`]), appends each once into its log, replicates the log to the followers over UDP,
//! and commits by quorum. When it dies, the others elect another, which continues the same log. Every
//! node hands committed entries, in log order, to [`Node::poll_committed`] (or applies them to a
//! [`StateMachine`] with [`Node::poll_state`]), across changes of leader, and after a restart first from
//! its recorded log, from the snapshot [`Node::restore`] loaded.
//!
//! Files: `builder` (members, configuration and its rules, the builder), `client` (offers from any
//! thread, and what the node shares with its agents), `driver` (the consensus agent), `slot` (an agent
//! place whose agent changes with the role), `error` (why a start or an offer fails), `wiring` (what a
//! role is made of, and the threads), `recovery` (the recording opened at start), `replay` (committed
//! entries read from the recording); node files in TOML are read by `node::config` (feature
//! `config`).

pub mod admin;
mod builder;
mod catch_up;
mod client;
mod client_limits;
mod committed;
#[cfg(feature = "config")]
pub mod config;
mod driver;
mod environment;
mod error;
mod ingress;
mod membership;
mod recovery;
mod replay;
mod seams;
mod sessions;
mod settings;
mod slot;
mod start;
mod wiring;

pub use builder::{
    AddressRange, ClientEndpointConfig, LogStorage, Member, NodeBuilder, NodeConfig, PerAgent, StorageConfig,
    CLIENT_PORT_OFFSET, CONSENSUS_PORT_OFFSET,
};
pub use client::LocalClient;
#[cfg(feature = "sim")]
pub use environment::InlineLogCost;
#[cfg(feature = "sim")]
pub use environment::PlantedBugs;
pub use environment::{Environment, LogFiles};
pub use error::{LocalOfferError, LocalWaitError, NodeError};
pub use membership::{MembershipChangeError, PendingChange};

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::agent::{AgentFailure, AgentHandles};
use crate::client::session::Entry;
use crate::cluster::consensus_core::Role;
use crate::cluster::consensus_core::TransferError;
use crate::cluster::frames::SESSION_FLAG;
use crate::shm::counters::{Counter, CountersManager};
use crate::shm::directory::NodeDirectory;
use crate::shm::ring_buffer::ManyToOneRingBuffer;
use crate::shm::stats::Stats;
use crate::storage::snapshot::{SnapshotIdentity, SnapshotInfo, SnapshotStore, StateMachine};

use self::client::Shared;
use self::committed::CommittedReader;
use self::sessions::ClientSessions;

/// A change of this node's role, leadership term or known leader, as handed to
/// [`Node::on_role_change`] callbacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoleChange {
    /// The new role.
    pub role: Role,
    /// The leadership term it is in.
    pub leadership_term_id: i64,
    /// The leader this node knows in that term, if any.
    pub leader: Option<i32>,
}

/// A callback for role changes.
type RoleCallback = Box<dyn FnMut(&RoleChange) + Send>;

/// A running cluster node.
pub struct Node {
    config: NodeConfig,
    shared: Arc<Shared>,
    ingress: Arc<ManyToOneRingBuffer>,
    commit: Counter,
    /// The leader's append position (what [`LocalClient::offer_and_wait`] waits to see committed).
    append: Counter,
    /// What the application is handed: committed entries, in log order, from wherever they are.
    committed: CommittedReader,
    /// The position below which the recorder may delete segments (the oldest snapshot kept).
    compact_below: Counter,
    /// Remote clients' sessions, as the log builds them (taken while a poll runs).
    sessions: Option<ClientSessions>,
    /// The application's snapshots (opened by the first restore or snapshot), on `disk`.
    snapshots: Option<SnapshotStore>,
    /// The disk its data directory is on.
    disk: crate::storage::disk::SharedDisk,
    /// The position of the newest snapshot taken or restored (its counter, `state.snapshot_position`).
    last_snapshot: Counter,
    /// The applied position as the counter `state.applied_position` publishes it (after each poll and
    /// restore).
    applied: Counter,
    /// Committed entries were polled for (a restore after that is refused).
    polled: bool,
    event_generation: u64,
    callbacks: Vec<RoleCallback>,
    handles: Option<AgentHandles>,
    counters: CountersManager,
    directory: Option<NodeDirectory>,
    /// The data directory's lock, held while the node lives (`None` on a simulated disk).
    data_lock: Option<crate::shm::directory::DirectoryLock>,
    warnings: Vec<String>,
    logs: crate::event_log::RateLimited,
    /// The clock of the application's thread (rate-limited warnings).
    clock: crate::agent::clock::NanoClock,
    /// Bugs planted for the simulator's tests.
    bugs: environment::PlantedBugs,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node").field("id", &self.config.id).field("role", &self.role()).finish()
    }
}

impl Node {
    /// A client of this node.
    pub fn client(&self) -> LocalClient {
        LocalClient {
            ingress: Arc::clone(&self.ingress),
            shared: Arc::clone(&self.shared),
            commit: self.commit.clone(),
            append: self.append.clone(),
        }
    }

    /// This node's role.
    pub fn role(&self) -> Role {
        self.shared.role()
    }

    /// This node's member id.
    pub fn id(&self) -> i32 {
        self.config.id
    }

    /// The member id of the leader this node knows (`None` while it knows none: an election runs).
    pub fn leader_id(&self) -> Option<i32> {
        self.shared.leader()
    }

    /// Hands this leader's leadership to member `to`, or (with `None`) to the follower furthest along:
    /// the leader stops taking new entries, waits until the target holds its whole log, and tells it to
    /// stand at once (Raft's TimeoutNow), so the cluster is without a leader for a round of votes rather
    /// than an election timeout. The change shows as role changes ([`Node::on_role_change`]); a transfer
    /// whose target has not won within the minimum election timeout is abandoned, and this member leads
    /// on (the engine's log says why). Refused at once when this node does not lead.
    pub fn transfer_leadership(&self, to: Option<i32>) -> Result<(), TransferError> {
        if self.role() != Role::Leader {
            return Err(TransferError::NotLeader);
        }
        let voters = self.membership().map(|(m, _)| m.voters).unwrap_or_default();
        if let Some(id) = to.filter(|&id| id == self.config.id || !voters.contains(&id)) {
            return Err(TransferError::NotAFollower(id));
        }
        self.shared.request_transfer(to);
        Ok(())
    }

    /// The leadership term this node is in.
    pub fn leadership_term_id(&self) -> i64 {
        self.shared.leadership_term_id()
    }

    /// Registers `callback` for changes of role, leadership term or leader. Callbacks run on the thread that
    /// calls [`Node::poll_committed`] (or [`Node::invoke`]), in the order the changes happened.
    pub fn on_role_change(&mut self, callback: impl FnMut(&RoleChange) + Send + 'static) {
        self.callbacks.push(Box::new(callback));
    }

    /// The commit position this node knows.
    pub fn commit_position(&self) -> i64 {
        self.commit.get()
    }

    /// The log position this node has applied up to through [`Node::poll_committed`]: every message
    /// before it was handed out. It stops before the first fragments of a message not yet whole (a
    /// snapshot is taken here, and a restore reads them again).
    pub fn applied_position(&self) -> i64 {
        self.committed.applied()
    }

    /// Why the replay of the recorded log stopped (a damaged segment: the error names it and says what to
    /// do); committed entries are not handed out past it.
    pub fn recording_error(&self) -> Option<&crate::storage::recording::RecordingError> {
        self.committed.recording_error()
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

    /// In a mode that [invokes](crate::agent::ThreadingMode::invokes) agents, runs one duty cycle of every invoked agent on
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

    /// Remote clients' sessions open in the replicated session table, as this member has applied the log
    /// (the same on every member at the same applied position; at most `ClientEndpointConfig::max_sessions`).
    pub fn client_sessions(&self) -> usize {
        self.sessions.as_ref().map_or(0, ClientSessions::open)
    }

    /// Agent failures so far (an agent that failed has stopped; the node should be closed).
    pub fn failures(&self) -> Vec<AgentFailure> {
        self.handles.as_ref().map(AgentHandles::failures).unwrap_or_default()
    }

    /// Hands up to `fragment_limit` fragments' worth of committed entries, in log order, to `handler`;
    /// returns the fragments read. After a restart with a recorded log, the entries come first from the
    /// recording (from its start, or from the snapshot [`restore`](Self::restore) loaded), then from the
    /// log in memory. Entries below [`NodeConfig::resume_from`] are read and not handed on (the application
    /// has them). Role-change callbacks run first.
    pub fn poll_committed(&mut self, fragment_limit: usize, mut handler: impl FnMut(&[u8])) -> usize {
        self.poll_positions(fragment_limit, |entry, _| handler(entry))
    }

    /// As [`poll_committed`](Self::poll_committed), with the log position each entry ends at.
    pub fn poll_positions(&mut self, fragment_limit: usize, mut handler: impl FnMut(&[u8], i64)) -> usize {
        self.poll_service(fragment_limit, |entry, _| handler(entry.payload, entry.position))
    }

    /// As [`poll_committed`](Self::poll_committed), for a service of remote clients
    /// ([`ClusterClient`](crate::ClusterClient)): each entry with its position and, for a client's message, its session
    /// and number. A client's message is handed out exactly once whatever its client resends; what the
    /// handler writes to the response buffer goes back to the client with the message's commit (from the
    /// leader). Session entries (opens, keep-alives, closes) are applied to the replicated session table
    /// and not handed out.
    pub fn poll_service(&mut self, fragment_limit: usize, mut handler: impl FnMut(&Entry<'_>, &mut Vec<u8>)) -> usize {
        self.deliver_role_changes();
        self.polled = true;
        if let Some(position) = self.committed.pending_snapshot() {
            // Only poll_state can load it: nothing after it is handed out until then.
            self.logs.warn(self.clock.now_ns(), || {
                format!(
                    "a catch-up installed the leader's snapshot at {position}: this application polls without a \
                     StateMachine and cannot load it; use Node::poll_state"
                )
            });
            return 0;
        }
        let commit = if self.bugs.apply_uncommitted() { i64::MAX } else { self.commit.get() };
        let skip_below = self.config.resume_from.unwrap_or(0);
        let leading = (self.shared.role() == Role::Leader).then(|| self.shared.leadership_term_id());
        let mut sessions = self.sessions.take().expect("the session table is put back after every poll");
        let fragments = self.committed.poll(commit, fragment_limit, &mut |entry: &[u8], end: i64, flags: u8| {
            let handed = end > skip_below;
            if flags & SESSION_FLAG != 0 {
                sessions.on_entry(entry, end, leading, handed, &mut handler);
            } else {
                sessions.on_plain(entry, end, handed, &mut handler);
            }
        });
        sessions.flush();
        self.sessions = Some(sessions);
        self.applied.set(self.committed.applied());
        fragments
    }

    /// Restores `machine` from the newest snapshot that verifies (an older one when the newest fails its
    /// checks; each skip is logged), and makes the replay of the recorded log start at its position.
    /// Call it once, before the first poll. Returns the snapshot's position, or `None` when there is none
    /// (the replay starts at the recording's start, which must then be 0).
    pub fn restore(&mut self, machine: &mut impl StateMachine) -> Result<Option<i64>, NodeError> {
        if self.polled {
            return Err(NodeError::Snapshot("restore before the first poll: entries may have been applied".into()));
        }
        let (store, sessions) = self.store_and_sessions()?;
        let restored = store
            .restore(|reader| load_snapshot(sessions, machine, reader))
            .map_err(|e| NodeError::Snapshot(e.to_string()))?;
        for skipped in &restored.skipped {
            log::warn!("member {}: {skipped}", self.config.id);
            self.warnings.push(skipped.clone());
        }
        let start = self.committed.replay_start();
        match &restored.info {
            Some(info) if info.position < start => {
                return Err(NodeError::Snapshot(format!(
                    "{}: at position {}, below the recorded log's start {start}; the log between is gone: \
                     move the data directory away to start this member empty",
                    info.path.display(),
                    info.position
                )));
            }
            // With a recorded log, its replay starts at the snapshot; without one, there is nothing to replay.
            Some(info) => {
                self.committed.restart_replay_at(info.position);
                self.last_snapshot.set(info.position);
            }
            None if start > 0 => {
                return Err(NodeError::Snapshot(format!(
                    "no snapshot verifies, and the recorded log starts at {start}: the state before it cannot be \
                     rebuilt; restore a snapshot into {}, or move the data directory away to start this member empty",
                    self.config.snapshot_dir_path().display()
                )))
            }
            None => {}
        }
        self.applied.set(self.committed.applied());
        Ok(restored.info.map(|info| info.position))
    }

    /// As [`poll_committed`](Self::poll_committed), applying each entry to `machine`, and taking a snapshot
    /// each time [`StorageConfig::snapshot_interval`] more bytes of log have been applied, once the recorded
    /// log reaches the applied position (a snapshot is never ahead of the log this member holds).
    pub fn poll_state(&mut self, machine: &mut impl StateMachine, fragment_limit: usize) -> Result<usize, NodeError> {
        if let Some(position) = self.committed.newest_pending_snapshot().filter(|_| self.bugs.skip_snapshot_load()) {
            // The planted bug: the entries after the snapshot go to the state it should have replaced.
            self.committed.snapshot_loaded(position);
            self.last_snapshot.set(position);
        }
        if let Some(position) = self.committed.newest_pending_snapshot() {
            // A catch-up installed the leader's snapshot: the state becomes that, then goes on after it.
            let (store, sessions) = self.store_and_sessions()?;
            let restored = store
                .restore(|reader| load_snapshot(sessions, machine, reader))
                .map_err(|e| NodeError::Snapshot(e.to_string()))?;
            match restored.info.as_ref().map(|i| i.position) {
                Some(loaded) if loaded == position => {}
                // A newer catch-up installed a newer snapshot (and may have deleted this one) before its
                // switch was queued: nothing is handed out until that switch makes it the one pending.
                Some(loaded) if loaded > position => return Ok(0),
                loaded => {
                    return Err(NodeError::Snapshot(format!(
                        "the snapshot a catch-up installed at {position} does not load (the newest that loads is \
                         at {loaded:?}; skipped: {:?})",
                        restored.skipped
                    )))
                }
            }
            self.committed.snapshot_loaded(position);
            self.last_snapshot.set(position);
        }
        let fragments = self.poll_service(fragment_limit, |entry, response| machine.apply_entry(entry, response));
        let due = self
            .config
            .storage
            .snapshot_interval
            .is_some_and(|every| self.applied_position() - self.last_snapshot.get() >= every as i64)
            || self.shared.snapshot_requested.load(Ordering::Acquire);
        if due && self.committed.pending_snapshot().is_none() && self.committed.recorded_past(self.applied_position()) {
            self.take_snapshot(machine)?;
            self.shared.snapshot_requested.store(false, Ordering::Release);
        }
        Ok(fragments)
    }

    /// Takes a snapshot of `machine` at the applied position, keeps the newest
    /// [`StorageConfig::snapshots_kept`], and lets the recorder delete the log below the oldest kept.
    pub fn take_snapshot(&mut self, machine: &mut impl StateMachine) -> Result<SnapshotInfo, NodeError> {
        if let Some(position) = self.committed.pending_snapshot() {
            // The state is not yet the installed snapshot's: a snapshot of it now would be wrong.
            return Err(NodeError::Snapshot(format!(
                "the snapshot a catch-up installed at {position} is not loaded yet: poll_state first"
            )));
        }
        let position = self.applied_position();
        let term = self.leadership_term_id();
        let kept = self.config.storage.snapshots_kept;
        let (store, sessions) = self.store_and_sessions()?;
        let info = store
            .write(position, term, |writer| {
                sessions.write_snapshot(writer)?;
                machine.take_snapshot(writer)
            })
            .map_err(|e| NodeError::Snapshot(e.to_string()))?;
        if let Some(oldest) = store.retain(kept).map_err(|e| NodeError::Snapshot(e.to_string()))? {
            self.compact_below.set_max(oldest);
        }
        self.last_snapshot.set(position);
        Ok(info)
    }

    /// The snapshot store (opened the first time) and the session table, which every snapshot holds
    /// before the application's state.
    fn store_and_sessions(&mut self) -> Result<(&SnapshotStore, &mut ClientSessions), NodeError> {
        if self.snapshots.is_none() {
            let identity = SnapshotIdentity { membership: self.config.membership(), stream_id: self.config.stream_id };
            let store = SnapshotStore::open_on(self.disk.clone(), &self.config.snapshot_dir_path(), identity)
                .map_err(|e| NodeError::Snapshot(e.to_string()))?;
            self.snapshots = Some(store);
        }
        let sessions = self.sessions.as_mut().expect("the session table is put back after every poll");
        Ok((self.snapshots.as_ref().expect("opened"), sessions))
    }

    fn deliver_role_changes(&mut self) {
        let generation = self.shared.event_generation.load(Ordering::Acquire);
        if generation == self.event_generation {
            return;
        }
        self.event_generation = generation;
        let events = std::mem::take(&mut *self.shared.events.lock().unwrap_or_else(|e| e.into_inner()));
        for event in &events {
            for callback in &mut self.callbacks {
                callback(event);
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
        // The agents (the recorder among them) are stopped: the data directory is no longer written.
        drop(self.data_lock.take());
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

/// Loads a snapshot: the session table, then the application's state.
fn load_snapshot(
    sessions: &mut ClientSessions,
    machine: &mut impl StateMachine,
    reader: &mut dyn std::io::Read,
) -> std::io::Result<()> {
    sessions.read_snapshot(reader)?;
    machine.load_snapshot(reader)
}
