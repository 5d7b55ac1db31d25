//! What the core asks its driver to do.
//!
//! # Executing outputs
//!
//! A driver executes the outputs of one call in the order they were pushed, each completely before the
//! next:
//!
//! - [`Output::Persist`] must be durable (written and synced) before any later output is executed. A
//!   vote is always preceded by the persist of that vote, so a vote that reaches a candidate survives a
//!   crash of the voter; if the persist fails, the driver must stop the member rather than go on.
//! - [`Output::Truncate`] and [`Output::AppendTermStart`] change the local log; the core has already
//!   updated its own view of the log ([`Output::Truncate`]) or learns of the append through
//!   [`ConsensusCore::on_append_position`] when it is done.
//! - Log data from the leader may be appended only after [`Output::ReplicateFrom`] and until the next
//!   [`Output::RoleChange`], starting exactly at the position it names.
//! - Client messages may be appended only while the role is [`Role::Leader`] and
//!   after the term-start marker.
//!
//! Outputs of a call the driver makes while executing an output (`on_append_position` after
//! [`Output::AppendTermStart`]) may be executed at once or after the rest of the first call's; either
//! way every [`Output::Persist`] is executed before the outputs pushed after it. Nothing the core asks
//! for may be skipped, except a [`Output::Send`], which the network may lose anyway.

use std::fmt;

use super::message::Message;
use super::role::Role;
#[cfg(doc)]
use super::ConsensusCore;
use super::MemberId;

/// Where a message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// One member.
    Member(MemberId),
    /// Every other member (voter or learner) of the configuration in effect.
    Others,
}

/// One thing the driver must do, in order; see the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Store the term and vote durably before executing any later output.
    Persist {
        /// The current leadership term.
        leadership_term_id: i64,
        /// Who this member voted for in that term.
        voted_for: Option<MemberId>,
    },
    /// Send `message` (from this member) to `to`. Sends may be lost: the core repeats what matters.
    Send {
        /// The recipients.
        to: Destination,
        /// The message.
        message: Message,
    },
    /// The role, the term or the known leader changed. Stop accepting log data from any leader.
    RoleChange {
        /// The new role.
        role: Role,
        /// The current leadership term.
        leadership_term_id: i64,
        /// The leader, when known.
        leader_member_id: Option<MemberId>,
    },
    /// This member leads `leadership_term_id`: append a term-start marker (any non-empty entry of that
    /// term) at `position`, the end of the log, before any client message, and report it with
    /// `on_append_position`.
    AppendTermStart {
        /// The new term.
        leadership_term_id: i64,
        /// The log's append position, where the term starts.
        position: i64,
    },
    /// Cut the local log back to `position` (never below the commit position).
    Truncate {
        /// The new end of the log.
        position: i64,
    },
    /// The local log agrees with the leader's up to `position`: append the leader's log data from there.
    ReplicateFrom {
        /// The leader.
        leader_member_id: MemberId,
        /// Its term.
        leadership_term_id: i64,
        /// Where the leader's data is to be appended from (the local append position).
        position: i64,
    },
    /// The configuration in effect changed ([`ConsensusCore::membership`]): send to its members, and stop
    /// if this member is no longer one once it commits.
    MembershipChanged {
        /// The configuration now in effect.
        membership_id: u64,
    },
    /// The commit position advanced: the log up to `position` may be applied.
    Commit {
        /// The new commit position.
        position: i64,
    },
    /// The core refused to break an invariant; the input that asked for it is ignored.
    Error(CoreError),
}

/// An invariant the core was asked to break, reported instead of a panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreError {
    /// Truncating to `position` would drop committed log.
    TruncateBelowCommit {
        /// The truncation asked for.
        position: i64,
        /// The commit position.
        commit_position: i64,
    },
    /// `on_append_position` reported a position behind the log's append position.
    AppendPositionWentBack {
        /// The append position the core knows.
        append_position: i64,
        /// The position reported.
        position: i64,
    },
    /// `on_snapshot_installed` was given terms that do not make a history below the snapshot's position.
    SnapshotHistory {
        /// The snapshot's position.
        position: i64,
    },
    /// `on_membership` was given a configuration that does not follow the last one, or an entry that
    /// does not end past the log's known end.
    MembershipOutOfOrder {
        /// The configuration given.
        membership_id: u64,
        /// Where its entry was said to end.
        end: i64,
    },
    /// `on_append_position` reported bytes of a term older than the log's last term.
    AppendTermWentBack {
        /// The term of the log's last byte.
        last_term_id: i64,
        /// The term reported.
        leadership_term_id: i64,
    },
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::TruncateBelowCommit { position, commit_position } => {
                write!(f, "refused to truncate the log to {position}, below the commit position {commit_position}")
            }
            Self::AppendPositionWentBack { append_position, position } => write!(
                f,
                "append position reported as {position}, behind {append_position}; truncations come only from the core"
            ),
            Self::SnapshotHistory { position } => {
                write!(f, "the terms given with the snapshot installed at {position} do not make a history")
            }
            Self::MembershipOutOfOrder { membership_id, end } => write!(
                f,
                "configuration {membership_id} ending at {end} does not follow the log's last configuration and end"
            ),
            Self::AppendTermWentBack { last_term_id, leadership_term_id } => write!(
                f,
                "bytes of term {leadership_term_id} reported after term {last_term_id}; a log's terms only grow"
            ),
        }
    }
}

impl std::error::Error for CoreError {}
