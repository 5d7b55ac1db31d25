//! Shared memory: mapped files and what is laid out in them.
//!
//! [`buffer`] (mapped memory and its atomic views), [`log_buffer`] (Aeron's three-term log: appender,
//! reader, rebuilder), [`ring_buffer`] (one-to-one and many-to-one rings), [`counters`] (values and
//! metadata another process reads), [`stats`] (the catalogue of every counter kind and typed readings),
//! [`directory`] (the node directory under `/dev/shm`), [`reclaim`] (large mappings unmapped off the
//! dropping thread).
//!
//! This layer imports only the foundation ([`crate::frame`], [`crate::event_log`], [`crate::setting`]).

pub mod buffer;
pub mod counters;
pub mod directory;
pub mod log_buffer;
pub mod reclaim;
pub mod ring_buffer;
pub mod stats;
