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

//!
//! Files: `builder` (members, configuration and its rules, the builder), `client` (offers from any
//! thread), `error` (why a start or an offer fails), `wiring` (the agents a role is made of, and their
//! threads); node files in TOML are read by [`crate::config`] (feature `config`).

mod builder;
mod client;
mod error;
mod wiring;

pub use builder::{Member, NodeBuilder, NodeConfig};
pub use client::Client;
pub use error::{NodeError, OfferError};

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::agent::{AgentFailure, AgentHandles};
use crate::buffer::{AtomicBuffer, Region};
use crate::consensus::Role;
use crate::counters::{Counter, CountersManager};
use crate::directory::{NodeDirectory, StalePolicy};
use crate::log_buffer::MessageReader;
use crate::receiver::Subscription;
use crate::ring_buffer::{self, ManyToOneRingBuffer};
use crate::stats::Stats;

use self::client::Shared;
use self::wiring::{follower_parts, leader_parts, start_agents, Parts};

/// How this node reads its committed entries.
pub(super) enum CommittedReader {
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

impl Node {
    /// Starts a node from `config`.
    pub fn start(config: NodeConfig) -> Result<Node, NodeError> {
        config.validate()?;
        config.channel.validate()?;
        let path =
            config.directory.clone().unwrap_or_else(|| NodeDirectory::default_path(&format!("node-{}", config.id)));
        let policy = if config.clean_stale { StalePolicy::Clean } else { StalePolicy::Refuse };
        let directory = NodeDirectory::create(&path, policy).map_err(NodeError::Directory)?;
        let counters = CountersManager::create(directory.file("counters.dat"), 512)?;
        let ingress_path = directory.file("ingress.ring");
        let ingress_length = ring_buffer::required_length(config.ingress_capacity);
        let ingress_region = Region::create_file(&ingress_path, ingress_length, true).map_err(|e| {
            NodeError::Io(std::io::Error::new(e.kind(), format!("cannot create {}: {e}", ingress_path.display())))
        })?;
        let ingress = Arc::new(ManyToOneRingBuffer::new(AtomicBuffer::new(ingress_region))?);
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
