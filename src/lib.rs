//! # quorumcast
//!
//! Low-latency log replication: the send path of Aeron and the quorum commit of Aeron Cluster, rebuilt
//! in Rust and held to a throughput model, `peak_TPS = (S - C) / D x M_pkt` (see [`model`]).
//!
//! Start with [`node`]: a cluster member an application embeds (builder, client, `poll_committed`).
//! Underneath, one module per concept, each stating its invariants:
//!
//! - shared memory: [`buffer`] (the only raw-pointer code), [`log_buffer`], [`ring_buffer`], [`counters`],
//!   [`directory`] (the node directory under `/dev/shm`), [`ipc`] (publication and subscription over a
//!   shared log);
//! - agents: [`idle`] (idle strategies), [`agent`] (runners, composite agents, threading modes), [`clock`];
//! - the wire: [`frame`], [`transport`] (UDP sockets and the three send modes), [`channel`] (validated
//!   configuration), [`fault`] (in-process loss, duplication, reordering);
//! - the send path: [`network_publication`], [`flow_control`], [`retransmit`], [`sender`];
//! - the receive path: [`image`], [`receiver`];
//! - replication: [`consensus`] (append stage and quorum commit), [`consensus_core`] (elections and commit as
//!   one I/O-free state machine), [`node`];
//! - measurement: [`model`] (the throughput model), [`probe`] (this host's S), [`sweep`] (the model against a
//!   running cluster), [`report`] (the sweep report: JSON,
//!   `.hgrm`, Markdown and HTML).

pub mod agent;
pub mod auth;
pub mod buffer;
pub mod channel;
pub mod clock;
pub mod consensus;
pub mod consensus_core;
pub mod counters;
pub mod directory;
pub mod event_log;
pub mod fault;
pub mod flow_control;
pub mod frame;
pub mod idle;
pub mod image;
pub mod ipc;
pub mod log_buffer;
pub mod model;
pub mod network_publication;
pub mod node;
pub mod probe;
pub mod receiver;
pub mod report;
pub mod retransmit;
pub mod ring_buffer;
pub mod sender;
pub mod sweep;
pub mod transport;
