//! What a node keeps on disk: the recorded log, snapshots and the durable vote.
//!
//! [`recording`] (the log on disk, its recorder agent and catch-up), [`snapshot`] (the application's
//! state at a log position and the [`StateMachine`](snapshot::StateMachine) contract), [`vote_file`] (the
//! durable term and vote), [`disk`] (the file system all of them go through, real or simulated),
//! `atomic_file` (write-then-rename).
//!
//! This layer imports every layer below it: the foundation, [`crate::shm`], [`crate::agent`],
//! [`crate::media`], [`crate::cluster`] and [`crate::client`].

pub(crate) mod atomic_file;
pub mod disk;
pub mod recording;
pub mod snapshot;
pub mod vote_file;
