//! Consensus on the leader's data path: the append stage, and the quorum rule.
//!
//! Every decision (who leads, in which term, what is committed) is the consensus core's
//! ([`crate::consensus_core`]); the node's consensus agent feeds it and carries out what it says. While
//! the core says this member leads, the agent runs an [`AppendStage`] per duty cycle:
//! 1. it takes client messages from the many-to-one ingress ring and appends each exactly once into the
//!    log (the consensus append stage); a message the log has no room for yet stays in the ring;
//! 2. when the core's commit position moved, it hands one commit-position frame to the Sender. So a commit
//!    update goes out at most once per duty cycle: a spinning agent sends many small updates, a sleeping
//!    or backing-off one coalesces them, which is what sets the model's C.
//!
//! With `commit_piggyback`, the commit position rides in the reserved value of every data frame appended,
//! and a separate commit frame is sent only on a cycle that appended nothing, or when the commit moved
//! `piggyback_refresh` bytes past the last commit frame: a data frame carries the commit of the moment it
//! was appended, so behind a deep send queue its value is stale by the queue's depth, and followers that
//! apply (and so free their flow-control window) only up to the commit they know would hold the Sender
//! back for it. When the commit position has not moved for `commit_heartbeat`, it is sent again, so a
//! lost commit frame delays followers' apply by at most that much.

use std::fmt;

use crate::frame::{MARKER_FLAG, UNFRAGMENTED};
use crate::frames::{CommitPositionFrame, SESSION_FLAG, TERM_START_FLAG};
use crate::shm::counters::Counter;
use crate::shm::log_buffer::{AppendError, ExclusiveAppender};
use crate::shm::ring_buffer::{ManyToOneRingBuffer, OneToOneRingBuffer};
use crate::shm::stats::{kinds, CounterKind};

/// Message type of client messages in the ingress ring.
pub const INGRESS_MESSAGE: i32 = 1;

/// Message type of session entries in the ingress ring (an entry a node's service offered itself): appended
/// flagged [`SESSION_FLAG`], as the client endpoint's are.
pub const INGRESS_SESSION_ENTRY: i32 = 2;

/// Message type of control frames in the consensus-to-sender command ring.
pub const COMMAND_CONTROL_FRAME: i32 = 1;

/// Most ingress messages taken per duty cycle.
pub const INGRESS_DRAIN_LIMIT: usize = 1024;

/// The counters of a node's consensus agent.
#[derive(Clone, Debug)]
pub struct ConsensusCounters {
    /// The commit position (what the state machine may apply up to).
    pub commit: Counter,
    /// The leader's append position.
    pub append: Counter,
    /// Client messages appended.
    pub appended: Counter,
    /// Client messages refused by the log (longer than the largest message): dropped and counted.
    pub rejected: Counter,
    /// Duty cycles on which the log was full and ingress had to wait.
    pub back_pressured: Counter,
    /// Commit-position frames handed to the Sender.
    pub commit_frames: Counter,
}

impl ConsensusCounters {
    /// Allocates every counter with `allocate(kind)`, its kind from the [catalogue](crate::shm::stats::kinds).
    pub fn new(mut allocate: impl FnMut(&CounterKind) -> Counter) -> Self {
        Self {
            commit: allocate(&kinds::consensus::commit_position),
            append: allocate(&kinds::consensus::append_position),
            appended: allocate(&kinds::consensus::messages_appended),
            rejected: allocate(&kinds::consensus::messages_rejected),
            back_pressured: allocate(&kinds::consensus::back_pressure),
            commit_frames: allocate(&kinds::consensus::commit_frames),
        }
    }

    /// Counters in private memory.
    pub fn detached() -> Self {
        Self::new(|_| Counter::detached())
    }
}

/// Identity of the replicated log, written into commit frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogIdentity {
    /// Session of the log publication (new for every leadership term).
    pub session_id: i32,
    /// Stream of the log.
    pub stream_id: i32,
    /// The leader's member id.
    pub leader_member_id: i32,
    /// The leadership term.
    pub leadership_term_id: i64,
}

/// The leader's append stage for one leadership term: client messages from the ingress ring into the
/// log, each exactly once, and commit-position frames to the Sender.
///
/// It decides nothing: the commit position it sends is the consensus core's, and it appends only while
/// the core says this member leads and has started its term.
pub struct AppendStage {
    appender: ExclusiveAppender,
    commands: OneToOneRingBuffer,
    identity: LogIdentity,
    piggyback: bool,
    piggyback_refresh: i64,
    commit_heartbeat_ns: u64,
    next_heartbeat_ns: u64,
    /// The commit position last handed to [`AppendStage::on_commit`].
    commit: i64,
    /// The commit position of the last commit frame handed to the Sender.
    frame_commit: i64,
    /// Whether the commit moved since the last duty cycle's decision to send a frame or not.
    owed: bool,
    /// Most bytes past the commit position appended (see [`uncommitted_bound`]).
    max_uncommitted: i64,
    counters: ConsensusCounters,
}

impl fmt::Debug for AppendStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppendStage")
            .field("identity", &self.identity)
            .field("commit", &self.commit)
            .field("append", &self.appender.position())
            .finish()
    }
}

/// Everything an [`AppendStage`] is made of.
#[derive(Debug)]
pub struct AppendParts {
    /// The term's log appender, at the end of the log.
    pub appender: ExclusiveAppender,
    /// Where commit frames go to the Sender.
    pub commands: OneToOneRingBuffer,
    /// Identity written into commit frames.
    pub identity: LogIdentity,
    /// Carry the commit position in data frames.
    pub piggyback: bool,
    /// With `piggyback`, also send a commit frame when the commit moved this many bytes past the last one
    /// (a quarter of the followers' receiver window keeps their window from closing on a stale commit).
    pub piggyback_refresh: i64,
    /// Resend an unchanged commit position this often.
    pub commit_heartbeat_ns: u64,
    /// The commit position when the term starts.
    pub commit: i64,
    /// Most bytes of log past the commit position a leader appends (see [`uncommitted_bound`]).
    pub max_uncommitted: i64,
    /// Counters.
    pub counters: ConsensusCounters,
}

/// The bound on a leader's uncommitted log: its followers' receiver window, less an eighth of it.
///
/// Invariant it keeps: whatever member leads next, its log ends at most about this far past the commit
/// position it knows, so a follower (whose window counts from what its node has consumed, which stops at
/// the commit) can take the new leader's log up to the start of the new term, and the new term can commit.
/// Without it, a leader that appended a term ahead while its followers were away and was elected again
/// could commit nothing, for good (the node simulator's seeds 1019, 1103, 1130, 1173). The eighth left
/// over covers a term's padding, the term-start marker, and a commit position the next leader had not yet
/// heard. A message longer than the bound is still taken when nothing is uncommitted.
pub fn uncommitted_bound(receiver_window: usize) -> i64 {
    let window = receiver_window as i64;
    window - window / 8
}

impl AppendStage {
    /// The append stage of one leadership term.
    pub fn new(parts: AppendParts) -> Self {
        Self {
            appender: parts.appender,
            commands: parts.commands,
            identity: parts.identity,
            piggyback: parts.piggyback,
            piggyback_refresh: parts.piggyback_refresh.max(1),
            commit_heartbeat_ns: parts.commit_heartbeat_ns,
            next_heartbeat_ns: 0,
            commit: parts.commit,
            frame_commit: parts.commit,
            owed: false,
            max_uncommitted: parts.max_uncommitted,
            counters: parts.counters,
        }
    }

    /// The log's append position.
    pub fn position(&self) -> i64 {
        self.appender.position()
    }

    /// The identity of the log.
    pub fn identity(&self) -> LogIdentity {
        self.identity
    }

    /// Appends the term-start marker of this leadership term: the first frame of the term; returns the
    /// position after it.
    pub fn append_term_start(&mut self) -> Result<i64, AppendError> {
        let payload = self.identity.leadership_term_id.to_le_bytes();
        let (flags, commit) = (UNFRAGMENTED | TERM_START_FLAG, self.commit);
        // The marker is never held back: without it, nothing of the term commits.
        let result = refreshing_once(&mut self.appender, i64::MAX, |a| a.append_frame(&payload, flags, commit));
        result.inspect(|&position| self.counters.append.set(position))
    }

    /// Appends a configuration entry (`payload`, from [`Configuration::encode`](crate::configuration::Configuration::encode))
    /// as one marker frame; returns the position after it. Never held back by the uncommitted bound (a
    /// change must get into the log to commit), refused when longer than one frame holds.
    pub fn append_configuration(&mut self, payload: &[u8]) -> Result<i64, AppendError> {
        let (flags, commit) = (UNFRAGMENTED | MARKER_FLAG, self.commit);
        let result = refreshing_once(&mut self.appender, i64::MAX, |a| a.append_frame(payload, flags, commit));
        result.inspect(|&position| self.counters.append.set(position))
    }

    /// The core moved the commit position to `commit`.
    pub fn on_commit(&mut self, commit: i64) {
        if commit > self.commit {
            self.commit = commit;
            self.owed = true;
        }
    }

    /// Appends what `ingress` holds, as far as the log has room; returns the messages appended.
    pub fn drain(&mut self, ingress: &ManyToOneRingBuffer) -> usize {
        let appender = &mut self.appender;
        let counters = &self.counters;
        let reserved = if self.piggyback { self.commit } else { 0 };
        let (commit, max_uncommitted) = (self.commit, self.max_uncommitted);
        let mut blocked = false;
        let appended = ingress.read_while(
            |kind, message| match append(appender, kind, message, reserved, cap(appender, commit, max_uncommitted)) {
                Ok(()) => true,
                Err(AppendError::BackPressured) => {
                    blocked = true;
                    false
                }
                Err(_) => {
                    counters.rejected.increment();
                    true
                }
            },
            INGRESS_DRAIN_LIMIT,
        );
        if blocked {
            self.counters.back_pressured.increment();
        }
        if appended > 0 {
            self.counters.appended.add(appended as i64);
            self.counters.append.set(self.appender.position());
        }
        appended
    }

    /// Appends one client session entry (the concatenation of `parts`), its frames flagged
    /// [`SESSION_FLAG`], as far as the log has room. The appended count and position are counted by
    /// [`count_session_appends`](Self::count_session_appends), once per batch of entries.
    pub fn append_session(&mut self, parts: &[&[u8]]) -> Result<i64, AppendError> {
        let reserved = if self.piggyback { self.commit } else { 0 };
        let cap = cap(&self.appender, self.commit, self.max_uncommitted);
        match refreshing_once(&mut self.appender, cap, |a| a.append_vectored_flagged(parts, reserved, SESSION_FLAG)) {
            Ok(position) => Ok(position),
            Err(e) => {
                match e {
                    AppendError::BackPressured => self.counters.back_pressured.increment(),
                    _ => self.counters.rejected.increment(),
                }
                Err(e)
            }
        }
    }

    /// Counts `appended` session entries appended since the last call, and the append position.
    pub fn count_session_appends(&mut self, appended: usize) {
        if appended > 0 {
            self.counters.appended.add(appended as i64);
            self.counters.append.set(self.appender.position());
        }
    }

    /// Sends the commit position to the followers through the Sender when it is owed (it moved, and no
    /// data frame appended on this cycle carried it fresh enough) or the heartbeat is due; returns the
    /// frames handed over. So a commit update goes out at most once per duty cycle.
    pub fn send_commit_if_due(&mut self, appended: usize, now_ns: u64) -> usize {
        let heartbeat_due = now_ns >= self.next_heartbeat_ns && self.commit > 0;
        let piggybacked = self.piggyback && appended > 0 && self.commit - self.frame_commit < self.piggyback_refresh;
        // A move is owed on the cycle it happened only: appended data carries it on, or a frame does now.
        let owed = std::mem::take(&mut self.owed);
        if !((owed && !piggybacked) || heartbeat_due) {
            return 0;
        }
        self.next_heartbeat_ns = now_ns + self.commit_heartbeat_ns;
        self.send_commit() as usize
    }

    fn send_commit(&mut self) -> bool {
        let frame = CommitPositionFrame {
            session_id: self.identity.session_id,
            stream_id: self.identity.stream_id,
            leadership_term_id: self.identity.leadership_term_id,
            log_position: self.commit,
            leader_member_id: self.identity.leader_member_id,
            ..CommitPositionFrame::default()
        };
        let mut bytes = [0u8; 64];
        let Ok(length) = frame.encode(&mut bytes) else {
            return false;
        };
        // A full command ring means the Sender is far behind: the next cycle sends a newer position anyway.
        let sent = self.commands.write(COMMAND_CONTROL_FRAME, &bytes[..length]).is_ok();
        if sent {
            self.frame_commit = self.commit;
            self.counters.commit_frames.increment();
        }
        sent
    }
}

/// The highest position a leader's next append may reach: `commit + max_uncommitted`, or no bound when
/// nothing is uncommitted (so that a message longer than the bound is still taken).
#[inline]
fn cap(appender: &ExclusiveAppender, commit: i64, max_uncommitted: i64) -> i64 {
    if appender.position() <= commit {
        i64::MAX
    } else {
        commit.saturating_add(max_uncommitted)
    }
}

/// Appends one message within `cap`, refreshing the publication limit from the consumers once when it is
/// reached.
fn append(
    appender: &mut ExclusiveAppender,
    kind: i32,
    message: &[u8],
    reserved: i64,
    cap: i64,
) -> Result<(), AppendError> {
    if kind == INGRESS_SESSION_ENTRY {
        return refreshing_once(appender, cap, |a| a.append_vectored_flagged(&[message], reserved, SESSION_FLAG))
            .map(|_| ());
    }
    refreshing_once(appender, cap, |a| a.append_with_reserved(message, reserved)).map(|_| ())
}

/// `append(appender)` with the limit at most `cap`, and once more after refreshing the publication limit
/// from the consumers when the first try met it.
#[inline]
fn refreshing_once(
    appender: &mut ExclusiveAppender,
    cap: i64,
    mut append: impl FnMut(&mut ExclusiveAppender) -> Result<i64, AppendError>,
) -> Result<i64, AppendError> {
    if appender.limit() > cap {
        appender.set_limit(cap);
    }
    match append(appender) {
        Err(AppendError::BackPressured) => {
            if let Some(limit) = appender.refresh_limit_from_consumers() {
                appender.set_limit(limit.min(cap));
            }
            append(appender)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::buffer::AtomicBuffer;
    use crate::shm::log_buffer::{LogBuffer, LogConfig};
    use crate::shm::ring_buffer::required_length;

    fn stage(max_uncommitted: i64) -> (AppendStage, LogBuffer, impl Sized) {
        let log = LogBuffer::create_anonymous(LogConfig::new(65536, 1408)).unwrap();
        // A consumer at 0, as the Sender is: the log's own limit is 32 KiB ahead of it.
        let consumer = log.register_consumer(0).unwrap();
        let mut appender = log.appender().unwrap();
        appender.set_limit(i64::MAX);
        let commands = OneToOneRingBuffer::new(AtomicBuffer::anonymous(required_length(4096)).unwrap()).unwrap();
        let parts = AppendParts {
            appender,
            commands,
            identity: LogIdentity { session_id: 1, stream_id: 2, leader_member_id: 0, leadership_term_id: 3 },
            piggyback: false,
            piggyback_refresh: 1,
            commit_heartbeat_ns: 1,
            commit: 0,
            max_uncommitted,
            counters: ConsensusCounters::detached(),
        };
        (AppendStage::new(parts), log, consumer)
    }

    #[test]
    fn a_leader_appends_at_most_the_bound_past_its_commit_and_more_as_it_commits() {
        let (mut stage, _log, _consumer) = stage(1024);
        let entry = [7u8; 200]; // 256 bytes framed
        let mut appended = 0;
        while stage.append_session(&[&entry]).is_ok() {
            appended += 1;
        }
        assert_eq!(stage.position(), 1024, "{appended} entries, up to the bound");
        stage.on_commit(512);
        assert!(stage.append_session(&[&entry]).is_ok(), "the commit moved: room again");
        assert!(stage.append_session(&[&entry]).is_ok());
        assert_eq!(stage.append_session(&[&entry]), Err(AppendError::BackPressured));
        assert_eq!(stage.position(), 512 + 1024);
        stage.on_commit(1536);
        let long = vec![1u8; 4000];
        assert!(stage.append_session(&[&long]).is_ok(), "nothing uncommitted: a message past the bound goes");
        assert_eq!(stage.append_term_start().map(|_| ()), Ok(()), "the term-start marker is never held back");
    }

    #[test]
    fn the_bound_leaves_an_eighth_of_the_followers_window() {
        assert_eq!(uncommitted_bound(128 * 1024), 112 * 1024);
    }
}
