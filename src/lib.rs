//! # quorumcast
//!
//! Low-latency log replication: the send path of Aeron and the quorum commit of Aeron Cluster, rebuilt
//! in Rust and held to a throughput model, `peak_TPS = (S - C) / D x M_pkt` (the calculator, the host probe and
//! the sweep that measures the model are in the `quorumcast-tools` crate beside this one).
//!
//! Start with [`node`]: a cluster member an application embeds (builder, client, `poll_committed`).
//! Underneath, one module per concept, each stating its invariants:
//!
//! - shared memory: [`buffer`], [`log_buffer`], [`ring_buffer`], [`counters`], [`directory`] (the node
//!   directory under `/dev/shm`), [`ipc`] (publication and subscription over a shared log);
//! - agents: [`idle`] (idle strategies), [`agent`] (runners, composite agents, threading modes), [`clock`];
//! - the wire: [`frame`], [`transport`] (UDP sockets and the three send modes), [`channel`] (validated
//!   configuration), [`auth`] (datagram tags), [`fault`] (in-process loss, duplication, reordering);
//! - the send path: [`network_publication`], [`flow_control`], [`retransmit`], [`sender`];
//! - the receive path: [`image`], [`receiver`];
//! - replication: [`consensus`] (append stage and quorum commit), [`consensus_core`] (elections and commit as
//!   one I/O-free state machine), [`node`], [`stats`] (its counters by type); with the `config` feature,
//!   `config` (node files in TOML);
//! - keeping the log: [`recording`] (the log on disk and its recorder agent), [`log_switch`] (how readers
//!   of the log go from one leadership term's log to the next), [`vote_file`] (the durable term and vote),
//!   [`snapshot`] (the application's state stored at a log position, so that the log before it can go);
//! - remote clients: [`session`] (client sessions as replicated state: exactly-once apply across resends).
//!
//! Raw-pointer code is confined to [`buffer`] (mapped memory and its atomic views) and [`transport`] (the
//! `sendmmsg`, `recvmmsg` and GSO calls); the other `unsafe` blocks are single libc calls (`flock` in
//! [`directory`], `prctl` in [`idle`], `posix_fallocate` in [`buffer`], `statfs` in [`node`]). Each
//! states what makes it sound.

pub mod event_log;
pub mod frame;
pub mod setting;

pub mod agent;
pub mod client;
pub mod cluster;
pub mod media;
pub mod node;
pub mod shm;
pub mod storage;
