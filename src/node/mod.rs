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
//! [`StateMachine`](crate::StateMachine) with [`Node::poll_state`]), across changes of leader, and after a restart first from
//! its recorded log, from the snapshot [`Node::restore`] loaded.
//!
//! Files, one concern each: `builder` (members, configuration and its rules, the builder), `start/`
//! (start-up: the directory, the recorded log and consensus core, the endpoints, the recorder; `wiring`,
//! what a role is made of and the threads; `slot`, an agent place whose agent changes with the role;
//! `seams`, the two seams with the media layer), `consensus_agent/` (the consensus agent's duty cycle and
//! its roles: `following`, `leading`, `catch_up`, `reconfiguring`, `administering`), `read/` (the read
//! path: committed entries handed to the application, `committed`, `replay` and `recovery`, and
//! snapshots), `sessions/` (remote clients: the replicated session table, and `ingress`, the client
//! endpoint, with its `admission` and `limits`), `local_client` (offers from any thread), `membership`
//! (membership changes asked of the consensus agent), `admin` (the operator's commands), `environment`
//! (what a node takes from outside), `error` (why a start or an offer fails); node files in TOML are read
//! by `node::config` (feature `config`).

pub mod admin;
mod builder;
#[cfg(feature = "config")]
pub mod config;
mod consensus_agent;
mod environment;
mod error;
mod local_client;
mod membership;
mod read;
mod sessions;
mod start;

pub use builder::{
    AddressRange, ClientEndpointConfig, LogStorage, Member, NodeBuilder, NodeConfig, PerAgent, ServiceConfig,
    StorageConfig, CLIENT_PORT_OFFSET, CONSENSUS_PORT_OFFSET,
};
#[cfg(feature = "sim")]
pub use environment::InlineLogCost;
#[cfg(feature = "sim")]
pub use environment::PlantedBugs;
pub use environment::{Environment, LogFiles};
pub use error::{LocalOfferError, LocalWaitError, NodeError};
pub use local_client::LocalClient;
pub use membership::{MembershipChangeError, PendingChange};

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::agent::{AgentFailure, AgentHandles};
use crate::cluster::consensus_core::Role;
use crate::cluster::consensus_core::TransferError;
use crate::shm::counters::CountersManager;
use crate::shm::directory::NodeDirectory;
use crate::shm::stats::Stats;

use self::consensus_agent::LeadershipTransfer;
use self::local_client::OfferGate;
use self::membership::MembershipDesk;
use self::read::{ReadPath, ReadRequests};
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

/// Role changes the consensus agent published, not yet handed to the application's callbacks.
#[derive(Default)]
struct RoleEvents {
    events: Mutex<Vec<RoleChange>>,
    generation: AtomicU64,
}

impl RoleEvents {
    /// Queues `change` for the callbacks.
    fn push(&self, change: RoleChange) {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).push(change);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The changes queued since generation `seen` was taken (which moves on to now), if any were.
    fn take_since(&self, seen: &mut u64) -> Option<Vec<RoleChange>> {
        let generation = self.generation.load(Ordering::Acquire);
        if generation == *seen {
            return None;
        }
        *seen = generation;
        Some(std::mem::take(&mut *self.events.lock().unwrap_or_else(|e| e.into_inner())))
    }
}

/// What the node's application side and its consensus agent share, one part per concern, each in the
/// module of that concern and each behind its own `Arc`: the node and the agent hold them all; every other
/// reader holds only its part (a [`LocalClient`] the offer gate, the reader of committed entries the read
/// requests).
#[derive(Clone, Default)]
struct Links {
    /// The role, term and leader the agent publishes, suspension and closing: what an offer checks.
    offers: Arc<OfferGate>,
    /// Role changes for the application's callbacks.
    roles: Arc<RoleEvents>,
    /// Log switches for the reader of committed entries, and an operator's snapshot request.
    reader: Arc<ReadRequests>,
    /// Membership changes asked of the agent, its answers, and the configuration in effect.
    membership: Arc<MembershipDesk>,
    /// A leadership transfer asked of the agent.
    transfer: Arc<LeadershipTransfer>,
}

/// A running cluster node.
pub struct Node {
    config: NodeConfig,
    /// What the node shares with its consensus agent.
    links: Links,
    /// The node's own client: the ingress ring, the offer gate, and the commit and append positions an
    /// offer waits on (each [`Node::client`] is a clone).
    client: LocalClient,
    /// The read path: committed entries, the session table, snapshots.
    read: ReadPath,
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
        self.client.clone()
    }

    /// This node's role.
    pub fn role(&self) -> Role {
        self.links.offers.role()
    }

    /// This node's member id.
    pub fn id(&self) -> i32 {
        self.config.id
    }

    /// The member id of the leader this node knows (`None` while it knows none: an election runs).
    pub fn leader_id(&self) -> Option<i32> {
        self.links.offers.leader()
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
        self.links.transfer.request(to);
        Ok(())
    }

    /// The leadership term this node is in.
    pub fn leadership_term_id(&self) -> i64 {
        self.links.offers.leadership_term_id()
    }

    /// Registers `callback` for changes of role, leadership term or leader. Callbacks run on the thread that
    /// calls [`Node::poll_committed`] (or [`Node::invoke`]), in the order the changes happened.
    pub fn on_role_change(&mut self, callback: impl FnMut(&RoleChange) + Send + 'static) {
        self.callbacks.push(Box::new(callback));
    }

    /// The commit position this node knows.
    pub fn commit_position(&self) -> i64 {
        self.client.commit.get()
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
        self.read.sessions.as_ref().map_or(0, ClientSessions::open)
    }

    /// Agent failures so far (an agent that failed has stopped; the node should be closed).
    pub fn failures(&self) -> Vec<AgentFailure> {
        self.handles.as_ref().map(AgentHandles::failures).unwrap_or_default()
    }

    /// Hands the role changes the consensus agent published since the last call to the registered callbacks,
    /// then to `also` (a state machine's `on_role_change`).
    fn deliver_role_changes(&mut self, mut also: impl FnMut(&RoleChange)) {
        let Some(events) = self.links.roles.take_since(&mut self.event_generation) else {
            return;
        };
        for event in &events {
            for callback in &mut self.callbacks {
                callback(event);
            }
            also(event);
        }
    }

    /// Stops the agents, removes the node directory and reports any agent failure.
    pub fn close(mut self) -> Result<(), NodeError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), NodeError> {
        self.links.offers.closed.store(true, Ordering::Release);
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
