//! The Receiver's counters.

use super::*;

/// The counters of a receiver.
#[derive(Clone, Debug)]
pub struct ReceiverCounters {
    /// Datagrams received (before any check).
    pub datagrams: Counter,
    /// Bytes received.
    pub bytes: Counter,
    /// `recvmmsg` calls.
    pub recv_syscalls: Counter,
    /// Status messages sent.
    pub status_messages: Counter,
    /// NAKs sent.
    pub naks: Counter,
    /// Acknowledgements (append positions) sent.
    pub acknowledgements: Counter,
    /// SETUP frames received.
    pub setups: Counter,
    /// Heartbeats received.
    pub heartbeats: Counter,
    /// Datagrams that had all arrived before.
    pub duplicates: Counter,
    /// Datagrams beyond the window.
    pub out_of_window: Counter,
    /// Malformed or truncated datagrams.
    pub malformed: Counter,
    /// Datagrams from sources that are not configured peers (strangers and members alike).
    pub foreign: Counter,
    /// Of `foreign`, those from a configured member that is not a peer (a member claiming to lead).
    pub foreign_members: Counter,
    /// Of `foreign`, data, pad and heartbeat frames.
    pub foreign_data: Counter,
    /// Of `foreign`, SETUP frames.
    pub foreign_setups: Counter,
    /// Of `foreign`, commit-position frames.
    pub foreign_commits: Counter,
    /// SETUPs refused: a term length or MTU other than the channel's, or another member list.
    pub setups_refused: Counter,
    /// SETUPs of a new session refused because the follower's log already holds another session's data.
    pub sessions_refused: Counter,
    /// Commit-position frames for a session other than the image's.
    pub commits_refused: Counter,
    /// Datagrams whose authentication tag was missing or wrong (with a shared key configured).
    pub forged: Counter,
    /// Image log files removed because their session ended (a newer image replaced them).
    pub images_removed: Counter,
    /// BEHIND_RETAINED frames received: the publisher no longer retains this receiver's position.
    pub behind_retained: Counter,
    /// Datagrams for another stream or a session without an image.
    pub unknown_stream: Counter,
    /// Images created.
    pub images: Counter,
    /// Receive calls that failed with an unexpected error.
    pub recv_errors: Counter,
    /// Status messages, NAKs and acknowledgements the socket did not take (full, or an error): the timers
    /// send the next one.
    pub feedback_send_failures: Counter,
    /// Commit-position frames received.
    pub commits: Counter,
}

impl ReceiverCounters {
    /// Allocates every counter with `allocate(kind)`, its kind from the [catalogue](crate::shm::stats::kinds).
    pub fn new(mut allocate: impl FnMut(&CounterKind) -> Counter) -> Self {
        Self {
            datagrams: allocate(&kinds::receiver::datagrams),
            bytes: allocate(&kinds::receiver::bytes),
            recv_syscalls: allocate(&kinds::receiver::recv_syscalls),
            status_messages: allocate(&kinds::receiver::status_messages_sent),
            naks: allocate(&kinds::receiver::naks_sent),
            acknowledgements: allocate(&kinds::receiver::acknowledgements_sent),
            setups: allocate(&kinds::receiver::setups_received),
            heartbeats: allocate(&kinds::receiver::heartbeats_received),
            duplicates: allocate(&kinds::receiver::duplicates_dropped),
            out_of_window: allocate(&kinds::receiver::out_of_window_dropped),
            malformed: allocate(&kinds::receiver::malformed_dropped),
            foreign: allocate(&kinds::receiver::foreign_source_dropped),
            foreign_members: allocate(&kinds::receiver::foreign_member_dropped),
            foreign_data: allocate(&kinds::receiver::foreign_data_dropped),
            foreign_setups: allocate(&kinds::receiver::foreign_setups_dropped),
            foreign_commits: allocate(&kinds::receiver::foreign_commits_dropped),
            setups_refused: allocate(&kinds::receiver::setups_refused),
            sessions_refused: allocate(&kinds::receiver::new_sessions_refused),
            commits_refused: allocate(&kinds::receiver::commits_refused),
            images_removed: allocate(&kinds::receiver::images_removed),
            forged: allocate(&kinds::receiver::forged_dropped),
            behind_retained: allocate(&kinds::receiver::behind_retained_received),
            unknown_stream: allocate(&kinds::receiver::unknown_stream_dropped),
            images: allocate(&kinds::receiver::images),
            recv_errors: allocate(&kinds::receiver::recv_errors),
            feedback_send_failures: allocate(&kinds::receiver::feedback_send_failures),
            commits: allocate(&kinds::receiver::commit_frames_received),
        }
    }

    /// Counters in private memory, for tests.
    pub fn detached() -> Self {
        Self::new(|_| Counter::detached())
    }
}
