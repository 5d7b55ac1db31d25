//! The IPC medium: a publication and its subscriptions over one [`LogBuffer`] in shared memory.
//!
//! An [`IpcPublication`] creates the log, in a file (normally `<node dir>/ipc-<stream_id>.log`, see
//! [`IpcPublication::create_in`]) or in anonymous memory for use within one process, and is its only
//! writer. An [`IpcSubscription`] maps the same log, in the same process ([`IpcPublication::subscribe`])
//! or in another one ([`IpcSubscription::open`]), takes one of the log's consumer slots and reads frames
//! straight out of the terms: there is no driver and no copy between the two sides besides the
//! publisher's copy into the term (none with [`IpcPublication::try_claim`]) and the reassembly of
//! fragmented messages.
//!
//! # Flow control
//!
//! The appender's limit is `slowest subscriber position + term_length / 2`. The publication caches it and
//! reads the consumer slots again only when an offer would cross the cached limit, so the hot path of an
//! offer is the appender's alone: a bounds check against a field, the header, the copy and two release
//! stores (frame length, tail), which are plain stores on x86_64. A subscription publishes its position
//! with one release store per [`poll`](IpcSubscription::poll) that moved it, never per fragment.
//!
//! # Connection
//!
//! Offers before the first subscriber (and after the last one has left, once the cached limit is used
//! up) fail with [`IpcOfferError::NotConnected`] and write nothing, as Aeron's do: the log holds only what a
//! subscriber can read. A subscriber joins at the publication's tail: it sees the messages offered after
//! it registered, and the first subscriber of a new publication sees every message.
//!
//! # Invariants
//!
//! - One writer: the publication owns the log's [`ExclusiveAppender`]; nothing else appends.
//! - The appender never writes past the cached limit, which is never above the slowest *registered*
//!   subscriber's position + `term_length / 2`: a subscriber joins by registering its slot first and then
//!   reading the tail, so every limit computed before its slot counted came from positions at or behind
//!   that tail, and no data it can still read is overwritten (this is what lets the log reuse a partition
//!   two terms on).
//! - A subscription's published position is a frame boundary before which it has consumed every frame
//!   (a message cut by the fragment limit is held, reassembled so far, by the subscription); the payload
//!   slices handed to a poll handler are valid only during the call.
//!
//! # Reading
//!
//! A subscription that has caught up spins on the length field of the next frame: a message costs one
//! cache-line transfer to reach it, which keeps the round trip near the raw floor. One that is behind
//! reads up to a tail it learnt earlier, prefetching, since its chain of dependent frame-length loads
//! would otherwise pay one cross-core miss per frame; it reads the tail again only after a large batch,
//! because every read of the tail counter takes its line from the publisher.
//! - Closing the publication (or dropping it) records the end-of-stream position; a subscription reports
//!   [`is_end_of_stream`](IpcSubscription::is_end_of_stream) once it has consumed everything before it.
//! - Closing a subscription (or dropping it) frees its slot at once, so it no longer holds the publisher
//!   back. A subscriber *process* that dies without dropping keeps its slot (there is no liveness time-out
//!   yet): the publisher then stays back-pressured at that slot's position + `term_length / 2`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::frame::framed_length;
use crate::shm::directory::NodeDirectory;
use crate::shm::log_buffer::descriptor::term_offset;
use crate::shm::log_buffer::{
    AppendError, BufferClaim, ExclusiveAppender, LogBuffer, LogConfig, LogError, LogReader, MessageReader,
};

/// The name of the log file of IPC stream `stream_id` in a node directory: `ipc-<stream_id>.log`.
pub fn log_file_name(stream_id: i32) -> String {
    format!("ipc-{stream_id}.log")
}

/// Why an IPC publication or subscription could not be created or opened.
#[derive(Debug)]
pub enum IpcError {
    /// Creating, opening or registering with the log failed.
    Log(LogError),
    /// An old log file at the path could not be removed before creating a new one.
    RemoveOld {
        /// The file.
        path: PathBuf,
        /// The error of the system.
        source: std::io::Error,
    },
}

impl fmt::Display for IpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Log(e) => write!(f, "IPC log: {e}"),
            Self::RemoveOld { path, source } => {
                write!(
                    f,
                    "could not remove the old IPC log {}: {source}; remove it or pick another path",
                    path.display()
                )
            }
        }
    }
}

impl std::error::Error for IpcError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Log(e) => Some(e),
            Self::RemoveOld { source, .. } => Some(source),
        }
    }
}

impl From<LogError> for IpcError {
    fn from(e: LogError) -> Self {
        Self::Log(e)
    }
}

/// Why an offer or claim wrote nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpcOfferError {
    /// The slowest subscriber is `term_length / 2` behind: poll it, then offer again.
    BackPressured,
    /// No subscriber is registered: nothing would read the message.
    NotConnected,
    /// The message is longer than the largest one allowed (`term_length / 8` for an offer, `mtu - 32` for
    /// a claim).
    MaxMessageLength {
        /// Length of the message.
        length: usize,
        /// The largest allowed.
        max: usize,
    },
    /// The publication has been closed.
    Closed,
}

impl fmt::Display for IpcOfferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BackPressured => write!(f, "back pressured: the slowest subscriber is term_length / 2 behind; retry"),
            Self::NotConnected => write!(f, "not connected: no subscriber yet; retry once one has subscribed"),
            Self::MaxMessageLength { length, max } => {
                write!(f, "message of {length} bytes exceeds the largest of {max}; send less or use a longer term/MTU")
            }
            Self::Closed => write!(f, "the publication is closed"),
        }
    }
}

impl std::error::Error for IpcOfferError {}

impl From<AppendError> for IpcOfferError {
    fn from(e: AppendError) -> Self {
        match e {
            AppendError::BackPressured => Self::BackPressured,
            AppendError::MaxMessageLengthExceeded { length, max }
            | AppendError::ClaimLengthExceeded { length, max } => Self::MaxMessageLength { length, max },
            AppendError::Closed => Self::Closed,
        }
    }
}

/// The writing end of an IPC stream: the only appender of its log.
///
/// Invariant: the appender's limit is the last one read from the consumer slots (slowest + `term_length
/// / 2`), or 0 before any was read; see the [module documentation](self).
#[derive(Debug)]
pub struct IpcPublication {
    log: Arc<LogBuffer>,
    appender: ExclusiveAppender,
    path: Option<PathBuf>,
}

impl IpcPublication {
    /// Creates the log file at `path` laid out by `config`, replacing (unlinking, never truncating under
    /// another process's mapping) any file there. The file is removed when the publication is dropped.
    pub fn create(path: impl AsRef<Path>, config: LogConfig) -> Result<Self, IpcError> {
        let path = path.as_ref();
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(IpcError::RemoveOld { path: path.to_path_buf(), source }),
        }
        let log = LogBuffer::create(path, config)?;
        Self::from_log(log, Some(path.to_path_buf()))
    }

    /// Creates the log of stream `config.stream_id` in the node directory `dir`
    /// (`<dir>/ipc-<stream_id>.log`); see [`create`](Self::create).
    pub fn create_in(dir: &NodeDirectory, config: LogConfig) -> Result<Self, IpcError> {
        Self::create(dir.file(&log_file_name(config.stream_id)), config)
    }

    /// Creates the log in anonymous memory: subscriptions come from [`subscribe`](Self::subscribe) only.
    pub fn create_anonymous(config: LogConfig) -> Result<Self, IpcError> {
        Self::from_log(LogBuffer::create_anonymous(config)?, None)
    }

    fn from_log(log: LogBuffer, path: Option<PathBuf>) -> Result<Self, IpcError> {
        let log = Arc::new(log);
        let appender = log.appender()?;
        Ok(Self { log, appender, path })
    }

    /// A subscription of this publication's log in this process, joining at the current tail.
    pub fn subscribe(&self) -> Result<IpcSubscription, IpcError> {
        IpcSubscription::join(Arc::clone(&self.log))
    }

    /// Appends `message` (fragmented if longer than `mtu - 32`) and returns the position after it.
    ///
    /// Reads the subscribers' positions only when the cached limit does not allow the message. Inlined into
    /// the caller's loop (the appender's hot path is a few dozen instructions).
    #[inline(always)]
    pub fn offer(&mut self, message: &[u8]) -> Result<i64, IpcOfferError> {
        match self.appender.append(message) {
            Ok(position) => Ok(position),
            Err(AppendError::BackPressured) => self.offer_with_fresh_limit(message),
            Err(e) => Err(e.into()),
        }
    }

    #[cold]
    #[inline(never)]
    fn offer_with_fresh_limit(&mut self, message: &[u8]) -> Result<i64, IpcOfferError> {
        self.refresh_limit()?;
        Ok(self.appender.append(message)?)
    }

    /// Claims one frame for `length` payload bytes (at most `mtu - 32`) to be written in place (zero copy).
    ///
    /// Fill it and [`commit`](BufferClaim::commit) it; a claim dropped uncommitted becomes padding that
    /// subscribers skip. Subscribers see it only once committed.
    #[inline]
    pub fn try_claim(&mut self, length: usize) -> Result<BufferClaim<'_>, IpcOfferError> {
        let max = self.appender.max_payload_length();
        if length > max {
            return Err(IpcOfferError::MaxMessageLength { length, max });
        }
        if self.appender.is_closed() {
            return Err(IpcOfferError::Closed);
        }
        if self.would_cross_limit(framed_length(length)) {
            self.refresh_limit()?;
        }
        Ok(self.appender.try_claim(length)?)
    }

    /// Whether `required` log bytes (plus the padding of the rest of the term if they do not fit in it)
    /// would pass the cached limit; mirrors the appender's own check.
    #[inline]
    fn would_cross_limit(&self, required: usize) -> bool {
        let position = self.appender.position();
        let term_length = self.log.term_length();
        let remaining = term_length - term_offset(position, term_length);
        let total = if required <= remaining { required } else { remaining + required };
        position + total as i64 > self.appender.limit()
    }

    /// Reads the consumer slots and sets the limit from the slowest; `NotConnected` when there is none.
    #[cold]
    fn refresh_limit(&mut self) -> Result<(), IpcOfferError> {
        match self.appender.refresh_limit_from_consumers() {
            Some(_) => Ok(()),
            None => Err(IpcOfferError::NotConnected),
        }
    }

    /// Whether at least one subscriber is registered now (reads the consumer slots).
    pub fn is_connected(&self) -> bool {
        self.log.min_consumer_position().is_some()
    }

    /// The position after the last appended byte.
    pub fn position(&self) -> i64 {
        self.appender.position()
    }

    /// The cached publication limit.
    pub fn limit(&self) -> i64 {
        self.appender.limit()
    }

    /// The largest message [`offer`](Self::offer) takes: `term_length / 8`.
    pub fn max_message_length(&self) -> usize {
        self.appender.max_message_length()
    }

    /// The largest claim [`try_claim`](Self::try_claim) takes: `mtu - 32`.
    pub fn max_payload_length(&self) -> usize {
        self.appender.max_payload_length()
    }

    /// The log file, `None` for an anonymous log.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The log.
    pub fn log(&self) -> &LogBuffer {
        &self.log
    }

    /// Ends the stream: records the end-of-stream position; later offers fail with
    /// [`IpcOfferError::Closed`]. The file stays until the publication is dropped.
    pub fn close(&mut self) {
        if !self.appender.is_closed() {
            self.appender.close();
        }
    }

    /// Whether the stream has ended.
    pub fn is_closed(&self) -> bool {
        self.appender.is_closed()
    }
}

impl Drop for IpcPublication {
    /// Ends the stream and removes the log file: subscribers that mapped it keep reading to the end.
    fn drop(&mut self) {
        self.close();
        if let Some(path) = &self.path {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A poll that read at least this many fragments suggests the subscriber is behind: it then reads the
/// publisher's tail, so that the next polls read up to it with prefetching.
const LAGGING_FRAGMENTS: usize = 16;

/// The reading end of an IPC stream: one consumer slot of the log, read by a [`MessageReader`].
///
/// Invariant: the reader's position is a frame boundary at or after the join position, every frame before
/// it has been consumed, it is what the consumer slot holds after every poll, and `known_tail` was a
/// producer position once (every frame before it is committed).
pub struct IpcSubscription {
    log: Arc<LogBuffer>,
    reader: MessageReader,
    /// A producer position read earlier: every frame before it is committed.
    known_tail: i64,
}

impl fmt::Debug for IpcSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IpcSubscription")
            .field("position", &self.reader.position())
            .field("slot", &self.reader.slot_index())
            .finish()
    }
}

impl IpcSubscription {
    /// Maps the IPC log file at `path` (made by [`IpcPublication::create`], possibly in another process)
    /// and joins it at its current tail.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, IpcError> {
        Self::join(Arc::new(LogBuffer::open(path.as_ref())?))
    }

    /// Opens the log of stream `stream_id` in the node directory `dir`; see [`open`](Self::open).
    pub fn open_in(dir: &NodeDirectory, stream_id: i32) -> Result<Self, IpcError> {
        Self::open(dir.file(&log_file_name(stream_id)))
    }

    /// Registers a consumer slot, then reads the tail and publishes it as the join position.
    ///
    /// The order matters: a limit the publisher computed before the slot was active came from positions
    /// at or behind the tail read afterwards, so it never lets the publisher overwrite the join position.
    fn join(log: Arc<LogBuffer>) -> Result<Self, IpcError> {
        let consumer = log.register_consumer(log.producer_position())?;
        let position = log.producer_position();
        consumer.set(position);
        Ok(Self { reader: MessageReader::new(LogReader::new(&log), consumer, position), log, known_tail: position })
    }

    /// Hands up to `fragment_limit` fragments' worth of whole messages to `handler` and returns the number
    /// of fragments consumed (0 when nothing new was committed).
    ///
    /// Fragmented messages are reassembled (a message of `k` fragments counts `k` and reaches the handler
    /// once its last fragment is read). The slices are valid only during the call. Crosses at most one
    /// term boundary per call. The subscription's position is published once, at the end.
    ///
    /// A subscription that has caught up spins on the length of the next frame (the lowest latency: one
    /// cache-line transfer per message); one that is behind reads up to a tail it learnt earlier, with
    /// prefetching, and learns the tail again only after a large batch.
    #[inline]
    pub fn poll(&mut self, handler: impl FnMut(&[u8]), fragment_limit: usize) -> usize {
        let fragments = self.reader.poll_committed_to(self.known_tail, fragment_limit, handler);
        if fragments >= LAGGING_FRAGMENTS && self.reader.position() >= self.known_tail {
            // A big batch means the publisher is running ahead: learn its tail (one read of its cache line,
            // paid once per batch) so that the next polls can prefetch.
            self.known_tail = self.log.producer_position();
        }
        fragments
    }

    /// The position after the last consumed byte.
    pub fn position(&self) -> i64 {
        self.reader.position()
    }

    /// Whether the publication has ended the stream and this subscription has consumed all of it.
    pub fn is_end_of_stream(&self) -> bool {
        self.log.end_of_stream_position().is_some_and(|end| self.reader.position() >= end)
    }

    /// The position at which the publication ended the stream, if it has.
    pub fn end_of_stream_position(&self) -> Option<i64> {
        self.log.end_of_stream_position()
    }

    /// The consumer slot this subscription holds.
    pub fn slot_index(&self) -> usize {
        self.reader.slot_index()
    }

    /// Leaves the stream: frees the consumer slot (as dropping does), so the publisher is no longer bound
    /// by this subscription's position.
    pub fn close(self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LogConfig {
        LogConfig::new(65536, 1408)
    }

    fn drain(sub: &mut IpcSubscription) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while sub.poll(|m| out.push(m.to_vec()), 10) > 0 {}
        out
    }

    #[test]
    fn offers_before_a_subscriber_are_not_connected_and_write_nothing() {
        let mut publication = IpcPublication::create_anonymous(config()).unwrap();
        assert_eq!(publication.offer(b"lost"), Err(IpcOfferError::NotConnected));
        assert!(matches!(publication.try_claim(4), Err(IpcOfferError::NotConnected)));
        assert_eq!(publication.position(), 0);
        assert!(!publication.is_connected());
        let mut sub = publication.subscribe().unwrap();
        assert!(publication.is_connected());
        assert_eq!(publication.offer(b"seen").unwrap(), 64);
        assert_eq!(drain(&mut sub), vec![b"seen".to_vec()]);
    }

    #[test]
    fn a_late_subscriber_joins_at_the_tail() {
        let mut publication = IpcPublication::create_anonymous(config()).unwrap();
        let mut first = publication.subscribe().unwrap();
        publication.offer(b"one").unwrap();
        let mut late = publication.subscribe().unwrap();
        assert_eq!(late.position(), 64);
        publication.offer(b"two").unwrap();
        assert_eq!(drain(&mut first), vec![b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(drain(&mut late), vec![b"two".to_vec()]);
    }

    #[test]
    fn claims_are_seen_once_committed() {
        let mut publication = IpcPublication::create_anonymous(config()).unwrap();
        let mut sub = publication.subscribe().unwrap();
        let mut claim = publication.try_claim(5).unwrap();
        claim.put_bytes(0, b"hello");
        assert_eq!(sub.poll(|_| panic!("uncommitted"), 10), 0);
        claim.commit();
        publication.try_claim(3).unwrap().abandon();
        assert_eq!(drain(&mut sub), vec![b"hello".to_vec()]);
        assert_eq!(sub.position(), publication.position());
        assert!(matches!(
            publication.try_claim(1377),
            Err(IpcOfferError::MaxMessageLength { length: 1377, max: 1376 })
        ));
    }

    #[test]
    fn too_long_messages_are_refused() {
        let mut publication = IpcPublication::create_anonymous(config()).unwrap();
        let _sub = publication.subscribe().unwrap();
        let e = publication.offer(&[0; 8193]).unwrap_err();
        assert_eq!(e, IpcOfferError::MaxMessageLength { length: 8193, max: 8192 });
        assert!(e.to_string().contains("8193"), "{e}");
        assert_eq!(publication.position(), 0);
    }

    #[test]
    fn close_ends_the_stream_after_the_last_message() {
        let mut publication = IpcPublication::create_anonymous(config()).unwrap();
        let mut sub = publication.subscribe().unwrap();
        publication.offer(b"last").unwrap();
        publication.close();
        assert_eq!(publication.offer(b"more"), Err(IpcOfferError::Closed));
        assert!(matches!(publication.try_claim(1), Err(IpcOfferError::Closed)));
        assert!(!sub.is_end_of_stream(), "one message still to read");
        assert_eq!(drain(&mut sub), vec![b"last".to_vec()]);
        assert!(sub.is_end_of_stream());
        assert_eq!(sub.end_of_stream_position(), Some(64));
    }

    #[test]
    fn a_closed_subscription_frees_its_slot() {
        let publication = IpcPublication::create_anonymous(config()).unwrap();
        let sub = publication.subscribe().unwrap();
        let slot = sub.slot_index();
        sub.close();
        assert!(!publication.is_connected());
        assert_eq!(publication.subscribe().unwrap().slot_index(), slot);
    }
}
