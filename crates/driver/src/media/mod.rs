//! The media driver: sending a log and rebuilding it, with no knowledge of what the log means.
//!
//! - sockets: [`transport`] (the [`Transport`](transport::Transport) trait, UDP with its three send modes,
//!   an in-memory network, and the [faulty](transport::faulty) interceptor that injects loss, duplication
//!   and reordering over any of them), [`auth`] (datagram tags), [`channel`] (a validated channel);
//! - the send path: [`network_publication`], [`flow_control`], [`retransmit`], [`sender`] (its
//!   [`time_split`]: where its time goes);
//! - the receive path: [`image`], [`receiver`];
//! - one host: [`ipc`] (a publication and its subscriptions over one shared log).
//!
//! This layer imports the foundation, [`crate::shm`] and [`crate::agent`], never the cluster above it.

pub mod auth;
pub mod channel;
pub mod flow_control;
pub mod image;
pub mod ipc;
pub mod network_publication;
pub mod receiver;
pub mod retransmit;
pub mod sender;
pub mod time_split;
pub mod transport;
