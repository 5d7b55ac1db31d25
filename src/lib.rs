//! # quorumcast
//!
//! Low-latency log replication: the send path of Aeron and the quorum commit of Aeron Cluster, rebuilt
//! in Rust and held to a throughput model, `peak_TPS = (S - C) / D x M_pkt` (see `MODEL.md` of the
//! project).
//!
//! The crate is built from small pieces, one per module, each of which states its invariants:
//!
//! - [`buffer`]: bounds-checked, explicitly ordered access to shared memory (the only raw-pointer code);
//! - [`frame`]: the wire and log frame formats;
//! - [`log_buffer`]: the memory-mapped log of three terms, its appender, scanner and reader;
//! - [`ring_buffer`]: many-to-one and one-to-one rings over shared memory;
//! - [`idle`]: idle strategies for duty-cycle agents;
//! - [`agent`]: agents, their runners, and threading modes;
//! - [`counters`]: labelled counters in a shared-memory file;
//! - [`directory`]: the node directory under `/dev/shm`;
//! - [`ipc`]: a publication and subscription over a shared-memory log.

pub mod agent;
pub mod buffer;
pub mod channel;
pub mod clock;
pub mod consensus;
pub mod counters;
pub mod directory;
pub mod fault;
pub mod flow_control;
pub mod frame;
pub mod idle;
pub mod image;
pub mod ipc;
pub mod log_buffer;
pub mod network_publication;
pub mod node;
pub mod receiver;
pub mod report;
pub mod retransmit;
pub mod ring_buffer;
pub mod sender;
pub mod transport;
