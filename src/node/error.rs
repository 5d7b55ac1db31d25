//! Why a node could not start, and why an offer was not taken.

use std::fmt;

use crate::agent::{AgentFailure, LayoutError};
use crate::media::channel::ChannelConfigError;
use crate::media::network_publication::PublicationError;
use crate::shm::counters::CountersError;
use crate::shm::directory::DirectoryError;
use crate::shm::log_buffer::LogError;
use crate::shm::ring_buffer::RingError;
use crate::storage::recording::RecordingError;
use crate::storage::vote_file::VoteFileError;

/// Why a node could not start or failed.
#[derive(Debug)]
pub enum NodeError {
    /// The configuration breaks a rule.
    Config(String),
    /// A setting breaks a rule; rendered in the embedder's terms here, in a node file's by
    /// `node::config`.
    Setting(crate::setting::SettingError),
    /// The node directory is in use or stale.
    Directory(DirectoryError),
    /// An I/O error while making its files or sockets.
    Io(std::io::Error),
    /// The node's log could not be made or mapped (its file, the file system's room, the log's rules).
    Log(LogError),
    /// The node's counters file could not be made.
    Counters(CountersError),
    /// The log's network publication could not start (sockets, the path MTU to a follower).
    Publication(PublicationError),
    /// A ring buffer (client ingress, consensus-to-sender commands) could not be laid out.
    Ring(RingError),
    /// The agent layout was refused (too many busy threads for the cores).
    Layout(LayoutError),
    /// An agent failed.
    Agents(Vec<AgentFailure>),
    /// The persisted term and vote could not be read (a node that cannot read or write them never votes).
    Vote(VoteFileError),
    /// The recorded log cannot be used (a damaged or foreign file, a full disk); the message names the file
    /// and says what to do.
    Recording(RecordingError),
    /// A snapshot could not be written or none could be restored.
    Snapshot(String),
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => write!(f, "configuration: {e}"),
            Self::Setting(e) => write!(f, "configuration: {e}"),
            Self::Directory(e) => write!(f, "{e}"),
            Self::Io(e) => write!(f, "{e}"),
            Self::Log(e) => write!(f, "{e}"),
            Self::Counters(e) => write!(f, "counters: {e}"),
            Self::Publication(e) => write!(f, "log channel: {e}"),
            Self::Ring(e) => write!(f, "ring buffer: {e}"),
            Self::Layout(e) => write!(f, "{e}"),
            Self::Vote(e) => write!(f, "{e}"),
            Self::Recording(e) => write!(f, "recorded log: {e}"),
            Self::Snapshot(e) => write!(f, "snapshot: {e}"),
            Self::Agents(failures) => {
                write!(f, "agents failed:")?;
                for failure in failures {
                    write!(f, " {failure};")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for NodeError {}

impl From<std::io::Error> for NodeError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

impl From<crate::setting::SettingError> for NodeError {
    /// A refusal among every section of a node's settings: a rule may name a setting of another section.
    fn from(e: crate::setting::SettingError) -> Self {
        Self::Setting(super::builder::among_every_section(e))
    }
}

impl From<ChannelConfigError> for NodeError {
    fn from(e: ChannelConfigError) -> Self {
        e.0.into()
    }
}

impl From<LogError> for NodeError {
    fn from(e: LogError) -> Self {
        Self::Log(e)
    }
}

impl From<CountersError> for NodeError {
    fn from(e: CountersError) -> Self {
        Self::Counters(e)
    }
}

impl From<PublicationError> for NodeError {
    fn from(e: PublicationError) -> Self {
        Self::Publication(e)
    }
}

impl From<RingError> for NodeError {
    fn from(e: RingError) -> Self {
        Self::Ring(e)
    }
}

/// Why an offer was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalOfferError {
    /// The ingress is full: the leader's log is back-pressured. Retry later.
    BackPressured,
    /// This node is not the leader, and appended nothing: offer on `leader` (the member id of the leader
    /// this node knows, `None` while it knows none).
    NotLeader {
        /// The leader's member id, if known.
        leader: Option<i32>,
    },
    /// The node is closed.
    Closed,
    /// The message is longer than the ingress takes (capacity / 8).
    TooLong,
    /// The cluster is suspended: it takes no client entries until an operator resumes it.
    Suspended,
}

impl fmt::Display for LocalOfferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BackPressured => f.write_str("back pressured: the leader's ingress is full; retry"),
            Self::NotLeader { leader: Some(id) } => write!(f, "not the leader: offer on member {id}, the leader"),
            Self::NotLeader { leader: None } => f.write_str("not the leader, and no leader is known yet: retry"),
            Self::Closed => f.write_str("the node is closed"),
            Self::TooLong => f.write_str("message longer than the ingress takes (capacity / 8)"),
            Self::Suspended => {
                f.write_str("the cluster is suspended by its operator: it takes no entries until resumed")
            }
        }
    }
}

impl std::error::Error for LocalOfferError {}

/// Why [`LocalClient::offer_and_wait`](super::LocalClient::offer_and_wait) returned without a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalWaitError {
    /// Not offered: not the leader, closed, or too long.
    Offer(LocalOfferError),
    /// The timeout passed; with `offered`, the message is in the ingress or the log and may still be
    /// committed.
    TimedOut {
        /// Whether the message was offered before the timeout.
        offered: bool,
    },
    /// This node stopped leading (or a new term began) before the commit: the message may or may not be
    /// in the new leader's log. Offer through the new leader if it must be applied, and make it
    /// idempotent (or use a [`ClusterClient`](crate::ClusterClient) session, which applies exactly once).
    LeadershipLost,
}

impl fmt::Display for LocalWaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Offer(e) => write!(f, "not offered: {e}"),
            Self::TimedOut { offered: false } => f.write_str("timed out before the ingress took the message"),
            Self::TimedOut { offered: true } => f.write_str("timed out waiting for the commit (it may still come)"),
            Self::LeadershipLost => f.write_str("leadership changed before the commit: the outcome is unknown"),
        }
    }
}

impl std::error::Error for LocalWaitError {}
