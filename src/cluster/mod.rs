//! Consensus over the media layer: elections, quorum commit and the append stage.
//!
//! [`consensus_core`] (elections and commit as one I/O-free state machine, with its wire), [`append`]
//! (the leader's append stage and the quorum commit agent), [`term_starts`] (where each leadership term
//! starts in a follower's log), [`log_switch`] (how readers go from one leadership term's log to the next).
//!
//! This layer imports the foundation, [`crate::shm`], [`crate::agent`] and [`crate::media`].

pub mod append;
pub mod configuration;
pub mod consensus_core;
pub mod frames;
pub mod introduction;
pub mod log_switch;
pub mod term_starts;
