//! What the store says when it cannot do what was asked.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use super::SnapshotIdentity;

/// Why the store could not do what was asked; every message names the file and says what to do.
#[derive(Debug)]
pub enum SnapshotError {
    /// The file system failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The system's error.
        source: io::Error,
    },
    /// A snapshot file is damaged, truncated, or not a snapshot this build reads.
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A snapshot file belongs to another cluster or stream.
    Foreign {
        /// The file.
        path: PathBuf,
        /// Whose it is.
        found: SnapshotIdentity,
        /// This store's.
        expected: SnapshotIdentity,
    },
    /// [`SnapshotStore::install`](super::SnapshotStore::install) refused what it received; nothing was installed
    /// and nothing is left behind.
    Refused {
        /// Why, and what to do.
        reason: String,
    },
    /// The application's state machine failed to write or load its state.
    State {
        /// The snapshot file.
        path: PathBuf,
        /// What it was doing, and what became of the snapshot.
        action: &'static str,
        /// Its error.
        source: io::Error,
    },
    /// An argument out of its range.
    InvalidArgument {
        /// Which, and why.
        reason: String,
    },
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, action, source } => {
                write!(f, "snapshot store {}: cannot {action}: {source}", path.display())
            }
            Self::Invalid { path, reason } => write!(
                f,
                "snapshot {} {reason}: it is not used; delete it, or restore the data directory from a backup",
                path.display()
            ),
            Self::Foreign { path, found, expected } => write!(
                f,
                "snapshot {} belongs to {found}, this node's is {expected}: it is not used; if the data directory \
                 is another cluster's, give this node its own, else delete the file",
                path.display()
            ),
            Self::Refused { reason } => write!(f, "received snapshot refused, nothing was installed: {reason}"),
            Self::State { path, action, source } => {
                write!(f, "snapshot {}: the state machine failed to {action}: {source}", path.display())
            }
            Self::InvalidArgument { reason } => write!(f, "snapshot store: {reason}"),
        }
    }
}

impl std::error::Error for SnapshotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } | Self::State { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A maker of [`SnapshotError::Io`] for `path`, for `map_err`.
pub(super) fn io_error(path: &Path, action: &'static str) -> impl FnOnce(io::Error) -> SnapshotError {
    let path = path.to_path_buf();
    move |source| SnapshotError::Io { path, action, source }
}

/// What a skipped snapshot's error says in [`Restored::skipped`](super::Restored::skipped) and
/// [`ToSend::skipped`](super::ToSend::skipped).
pub(super) fn skip_reason(error: SnapshotError) -> String {
    match error {
        SnapshotError::Invalid { .. } | SnapshotError::Foreign { .. } => error.to_string(),
        _ => format!("{error}; the snapshot is not used: check the file system, or delete the file"),
    }
}
