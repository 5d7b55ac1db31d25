//! # quorumcast-consensus
//!
//! Consensus over the media driver ([`quorumcast_driver`]): elections, quorum commit and the append stage.
//!
//! [`consensus_core`] (elections and commit as one I/O-free state machine, with its wire), [`append`]
//! (the leader's append stage and the quorum commit agent), [`term_starts`] (where each leadership term
//! starts in a follower's log), [`log_switch`] (how readers go from one leadership term's log to the next).
//!
//! This crate imports the driver's floors (its foundation, `shm`, `agent` and `media`), never the engine
//! above it.
//!
//! **Not a promised API.** This crate is public so that the engine, its benches, fuzz targets and tools
//! can reach the consensus core by name; an application embeds `quorumcast` and names what it needs from
//! that crate's root. Anything here may change in any release.

pub mod append;
pub mod configuration;
pub mod consensus_core;
pub mod frames;
pub mod introduction;
pub mod log_switch;
pub mod term_starts;

// The driver's floors under the names this crate's modules use for them.
pub(crate) use quorumcast_driver::{frame, planted_switches, section, setting, shm};
