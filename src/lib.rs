//! # quorumcast
//!
//! Low-latency log replication: the send path of Aeron and the quorum commit of Aeron Cluster, in Rust.
//! A cluster of three (or five) members elects a leader; the leader appends each message to a
//! memory-mapped log, one Sender thread sends it to every follower, and the members apply it, in the same
//! order, once it is committed by a majority. The log is recorded on disk, a dead leader is replaced, and
//! remote clients are served exactly once.
//!
//! An application embeds a [`Node`] per member and implements a [`StateMachine`]:
//!
//! ```
//! use std::io::{Read, Write};
//! use std::net::UdpSocket;
//! use quorumcast::{Idle, Member, NodeBuilder, Role, StateMachine, ThreadingMode};
//!
//! /// The replicated state: a sum of the committed messages' first bytes.
//! #[derive(Default)]
//! struct Sum(u64);
//!
//! impl StateMachine for Sum {
//!     fn apply(&mut self, _position: i64, entry: &[u8]) {
//!         self.0 += u64::from(entry[0]);
//!     }
//!     fn take_snapshot(&mut self, writer: &mut dyn Write) -> std::io::Result<()> {
//!         writer.write_all(&self.0.to_le_bytes())
//!     }
//!     fn load_snapshot(&mut self, reader: &mut dyn Read) -> std::io::Result<()> {
//!         let mut bytes = [0; 8];
//!         reader.read_exact(&mut bytes)?;
//!         self.0 = u64::from_le_bytes(bytes);
//!         Ok(())
//!     }
//! }
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // A real application installs a logger first (env_logger, for one): without one, quorumcast's
//!     // warnings and role changes are printed nowhere.
//!     let endpoint = UdpSocket::bind("127.0.0.1:0")?.local_addr()?;
//!     # let scratch = std::env::temp_dir().join(format!("quorumcast-front-page-{}", std::process::id()));
//!     let members = vec![Member::new(0, endpoint)]; // one member here; three or five in production
//!     let mut node = NodeBuilder::new(0, members)
//!         # .directory(scratch.join("shm")).data_dir(scratch.join("data"))
//!         .clean_stale(true) // after a crash (kill -9), start again instead of refusing
//!         .threading(ThreadingMode::Invoker) // this thread runs the node's agents: see "small host"
//!         .start()?;
//!     let mut sum = Sum::default();
//!     node.restore(&mut sum)?; // the newest snapshot, if any
//!     let mut idle = Idle::backoff();
//!     let mut offered = false;
//!     while sum.0 < 42 {
//!         let mut work = node.invoke()?;
//!         if node.role() == Role::Leader && !offered {
//!             offered = node.client().offer(&[42]).is_ok();
//!         }
//!         work += node.poll_state(&mut sum, 64)?;
//!         idle.idle(work);
//!     }
//!     node.close()?;
//!     # std::fs::remove_dir_all(&scratch).ok();
//!     Ok(())
//! }
//! ```
//!
//! The four types an embedder needs: [`NodeBuilder`] (the members, this node's id and every setting,
//! each with its default stated), [`Node`] (invoke, apply what is committed, snapshot, close),
//! [`StateMachine`] (what the application's state implements) and [`LocalClient`] (offers from any
//! thread, [`LocalClient::offer_and_wait`] to block until committed). A client on another host uses a
//! [`ClusterClient`] ([`ClusterClient::offer_and_wait`] returns the service's response), or from async
//! code an [`AsyncClient`] (`client.offer(bytes).await` resolves to the response, under any runtime); a
//! member serves remote clients when its [`ClientEndpointConfig`] enables them.
//!
//! ## On a small host
//!
//! A node runs four agents (consensus, sender, receiver, recorder). [`ThreadingMode::Dedicated`] gives
//! each its own thread, for a host with a core per agent. On fewer cores, [`ThreadingMode::Invoker`]
//! runs them all on the application's thread: call [`Node::invoke`] in the application's loop and idle
//! with an [`Idle`] ([`Idle::backoff`]) when a round did nothing, never with a bare
//! `std::thread::yield_now` loop, which takes a whole core. Three nodes of a test cluster then share two
//! cores. Agents on their own threads idle as [`NodeBuilder::idle_all`] says (`backoff` by default).
//!
//! ## Logging
//!
//! quorumcast logs through the [`log`](https://docs.rs/log) facade (see [`event_log`]): warnings at start,
//! role changes, refused peers. Nothing is printed unless the application installs a logger.
//!
//! ## Underneath
//!
//! The engine stands on two crates of its own, and Cargo keeps every dependency pointing down:
//! `quorumcast-driver` (Aeron's frames, shared memory: mapped buffers, log buffers, ring buffers,
//! counters; duty-cycle agents and idle strategies; the media: transports, the Sender, the Receiver, with
//! no cluster concepts) under `quorumcast-consensus` (the I/O-free consensus core, its frames, the
//! cluster configuration and the append stage) under this crate (sessions and the client wire, the
//! recorded log, snapshots and the vote file, and the node that wires them). This crate's root is the
//! embedder's API and nothing else; its modules are private. The tools, benches, fuzz targets and tests
//! beside it reach the inner modules through `unstable` (feature `unstable`) and the floors through
//! their crates, none of it a promised API. `docs/ARCHITECTURE.md` in the repository draws them.
//!
//! Raw-pointer code is confined to the driver (`shm::buffer`, mapped memory and its atomic views;
//! `media::transport`, the `sendmmsg`, `recvmmsg` and GSO calls); the other `unsafe` blocks are single
//! libc calls, each stating what makes it sound.

// The floors below, under the names the engine's modules use for them: the media driver's layers and the
// consensus crate (the `cluster` layer).
pub(crate) use quorumcast_consensus as cluster;
pub(crate) use quorumcast_driver::{agent, frame, media, planted_switches, setting, shm};

// What only the tools and tests beside this crate call (through `unstable`) is unused in an embedder's
// build, which does not have that feature.
#[cfg_attr(not(feature = "unstable"), allow(dead_code, unused_imports))]
mod client;
#[cfg_attr(not(feature = "unstable"), allow(dead_code, unused_imports))]
mod node;
mod service;
#[cfg_attr(not(feature = "unstable"), allow(dead_code, unused_imports))]
mod storage;

pub use quorumcast_driver::event_log;

pub use crate::agent::idle::{set_timer_slack, Idle, IdleStrategy, IdleStrategyConfig};
pub use crate::agent::ThreadingMode;
pub use crate::client::async_client::{AsyncClient, AsyncConfig, AsyncDriver, CommitError, CommitFuture};
pub use crate::client::session::Entry;
pub use crate::client::{ClientConfig, ClientOfferError, ClusterClient, Committed, ConnectError, Event, WaitError};
pub use crate::cluster::consensus_core::{Role, Timers, TransferError};
pub use crate::media::auth::AuthKey;
pub use crate::media::channel::ChannelConfig;
pub use crate::media::transport::SendMode;
#[cfg(feature = "config")]
pub use crate::node::config::NodeFile;
pub use crate::node::{
    AddressRange, ClientEndpointConfig, LocalClient, LocalOfferError, LocalWaitError, LogStorage, Member, Node,
    NodeBuilder, NodeConfig, NodeError, PerAgent, RoleChange, ServiceConfig, StorageConfig,
};
pub use crate::service::{CloseReason, Cluster, ClusterTime, SessionRefused, TimerError};
pub use crate::setting::{Setting, SettingError};
pub use crate::shm::stats::Stats;
pub use crate::storage::recording::SyncPolicy;
pub use crate::storage::snapshot::{SnapshotInfo, StateMachine};
// Every type in the public signatures of the types above, so that an embedder names each from the root.
pub use crate::agent::clock::NanoClock;
pub use crate::agent::AgentFailure;
pub use crate::client::wire::RefusalCode;
pub use crate::client::{ClientEnvironment, ClientStats, ClosedReason};
pub use crate::cluster::configuration::MemberEndpoints;
pub use crate::cluster::consensus_core::{Membership, MembershipChange};
pub use crate::media::transport::SharedNetwork;
pub use crate::node::{Environment, LogFiles, MembershipChangeError, PendingChange};
#[cfg(feature = "sim")]
pub use crate::node::{InlineLogCost, PlantedBugs};
pub use crate::node::{CLIENT_PORT_OFFSET, CONSENSUS_PORT_OFFSET};
pub use crate::shm::counters::CountersManager;
pub use crate::shm::ring_buffer::Claim;
pub use crate::storage::disk::SharedDisk;
pub use crate::storage::recording::RecordingError;

/// The engine's inner modules, for the tools, benches, fuzz targets and tests beside this crate (feature
/// `unstable`).
///
/// **Not a promised API**: an embedder names what it needs from the crate root, and a build without the
/// `unstable` feature has none of this. The floors below the engine are crates of their own, equally
/// unpromised: `quorumcast-driver` (frames, shared memory, agents, the Sender and the Receiver) and
/// `quorumcast-consensus` (the consensus core, its frames, the append stage).
#[cfg(feature = "unstable")]
pub mod unstable {
    pub use crate::client::{credentials, session, wire};
    pub use crate::node::admin;
    pub use crate::storage::{disk, recording, snapshot, vote_file};
}
