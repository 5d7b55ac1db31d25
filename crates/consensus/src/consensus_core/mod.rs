//! The consensus core: every consensus decision of a member (elections, votes, acknowledgements,
//! commit) in one deterministic state machine with no I/O.
//!
//! [`ConsensusCore`] has no socket, thread, clock or randomness of its own. Its inputs are method calls,
//! [`ConsensusCore::on_message`], [`ConsensusCore::tick`] and [`ConsensusCore::on_append_position`],
//! each given the time, and its decisions come back as [`Output`]s pushed into a caller's `Vec`. The
//! randomized election timeouts come from a PRNG seeded by [`CoreConfig::seed`]. So the same inputs
//! always give the same outputs, which is what lets `tests/simulation/` drive thousands of clusters
//! through crashes, partitions and lost messages from one seed each.
//!
//! It follows Raft (Ongaro and Ousterhout, section 5) over Aeron Cluster's log of bytes:
//!
//! - a member is a follower, a canvasser (Raft's pre-vote, Aeron's canvass), a candidate or the leader
//!   ([`Role`]); leadership term ids only grow, and a member votes at most once per term;
//! - a follower that has not heard from a leader for a randomized election timeout first canvasses: the
//!   canvass does not change any term, and a member that heard from a live leader within the heartbeat
//!   timeout refuses it, so a member cut off by a partition cannot depose a healthy leader when it
//!   returns; with a majority of canvass grants it becomes a candidate in the next term;
//! - a member grants a vote only to a candidate whose log is at least as up to date as its own, compared
//!   by (last leadership term id in the log, log position); the vote is persisted before it is sent
//!   ([`Output::Persist`]);
//! - the leader's log continues the one log of the cluster at its own append position: its new term
//!   starts with a term-start marker ([`Output::AppendTermStart`]), and it commits by quorum only once a
//!   majority holds a position past that marker, so nothing of an earlier term is committed by counting
//!   replicas alone (Raft's figure 8);
//! - a follower finds where its log and the leader's agree from the two term histories
//!   ([`Message::NewLeadershipTerm`], [`Message::TermQuery`]), truncates the rest, which is never committed
//!   ([`Output::Truncate`]), and replicates from there ([`Output::ReplicateFrom`]);
//! - the leader's heartbeats are its commit positions, sent at least every heartbeat interval; a leader
//!   that has not heard from a majority for the shortest election timeout steps down;
//! - a leader hands its leadership to a follower on request ([`ConsensusCore::transfer_leadership`]):
//!   it takes no new entries, and once the follower holds its whole log tells it to stand at once
//!   ([`Message::TimeoutNow`]);
//! - the membership is replicated state ([`membership`]): configuration entries in the log, changed one
//!   member at a time ([`ConsensusCore::propose_membership`]), learners that receive the log without
//!   voting or counting.
//!
//! # Driving a core
//!
//! A driver feeds the core its inputs and executes the outputs in order ([`output`] says how): here a
//! member alone, which elects itself, appends its term-start marker, and commits it.
//!
//! ```
//! use quorumcast_consensus::consensus_core::{ConsensusCore, CoreConfig, DurableState, Output, Role};
//!
//! let mut core = ConsensusCore::new(CoreConfig::new(7, vec![7]), DurableState::default(), 0).unwrap();
//! let now_ns = 1_000_000_000; // past any election timeout
//! let mut pending = Vec::new();
//! core.tick(now_ns, &mut pending);
//! let mut log_end = 0;
//! while !pending.is_empty() {
//!     for output in std::mem::take(&mut pending) {
//!         match output {
//!             Output::Persist { .. } => {} // write and sync it before anything that follows
//!             Output::Send { .. } => {}    // wire::encode it and send it
//!             Output::AppendTermStart { leadership_term_id, position } => {
//!                 log_end = position + 32; // append a 32-byte marker of the new term
//!                 core.on_append_position(leadership_term_id, log_end, now_ns, &mut pending);
//!             }
//!             Output::Commit { position } => assert_eq!(position, log_end),
//!             _ => {}
//!         }
//!     }
//! }
//! assert_eq!((core.role(), core.leadership_term_id(), core.commit_position()), (Role::Leader, 1, 32));
//! ```
//!
//! Files: [`config`] (membership, timers, validation), [`message`] (what members say to each other),
//! [`wire`] (their frames), [`output`] (what the driver must do), [`term_history`] (the log's terms),
//! [`durable`] (what survives a restart), [`counters`] (what was dropped and why), [`prng`] (election
//! timeouts), [`membership`] (configurations and their log), and the state machine itself: [`machine`] (state, inputs, role changes), `election.rs`
//! (canvass and votes), `leadership.rs` (the leader's side), `following.rs` (the follower's side),
//! `reconfiguration.rs` (membership changes), `transfer.rs` (leadership transfer) and [`repair`] (a
//! member that lost part of its recorded log),
//! each opening with the rules it keeps.

pub mod config;
pub mod counters;
pub mod durable;
mod election;
mod following;
mod leadership;
pub mod machine;
pub mod membership;
pub mod message;
pub mod output;
pub mod prng;
mod quorum;
mod reconfiguration;
pub mod repair;
mod role;
pub mod term_history;
mod transfer;
pub mod wire;

#[cfg(test)]
mod tests;

#[cfg(feature = "sim")]
pub use config::Bugs;
pub use config::{CoreConfig, CoreConfigError, Timers};
pub use counters::CoreCounters;
pub use durable::DurableState;
pub use machine::{ConsensusCore, StepDown};
pub use membership::{Membership, MembershipChange, MembershipError, MembershipLog, MAX_MEMBERS};
pub use message::Message;
pub use output::{CoreError, Destination, Output};
pub use quorum::{follower_commit, majority_position, quorum_position, AckRule};
pub use repair::Repair;
pub use role::Role;
pub use term_history::{TermBase, TermHistory};
pub use transfer::TransferError;

/// A cluster member's id, as carried in the consensus frames.
pub type MemberId = i32;
