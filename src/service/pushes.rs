//! Messages the service pushes to a client that did not ask (Aeron's `ClientSession.offer`): each session's
//! ordered stream of them, held in the replicated state until its client acknowledges them, so that a new
//! leader sends again what the client has not seen.
//!
//! # Invariants
//!
//! - Every member builds the same streams at the same entries: a push is numbered (from 1, per session)
//!   and kept when the service's callback makes it, and dropped when an acknowledgement in the log says
//!   the client has it. Nothing here reads a clock or a socket.
//! - A session's unacknowledged pushes hold at most `max_backlog` bytes: a push past it is refused
//!   ([`PushError::BacklogFull`]) and its session closed (a client that does not keep up never grows a
//!   member's memory), on every member at the same entry.
//! - A push is at most `max_length` bytes (`[service] max_response_length`).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::io::{self, Read, Write};

/// Why a push (or a response, [`Cluster::respond`](super::Cluster::respond)) was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushError {
    /// No such session is open.
    UnknownSession,
    /// Longer than a push can be (`max` bytes: `[service] max_response_length`).
    TooLong {
        /// The longest push.
        max: usize,
    },
    /// The session's client has not acknowledged `[service] max_push_backlog` bytes of pushes: the session
    /// is closed (its client is too slow, or gone), with [`CloseReason::Backlog`](super::CloseReason).
    BacklogFull,
}

impl fmt::Display for PushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownSession => f.write_str("no such session is open"),
            Self::TooLong { max } => write!(f, "a push is at most {max} bytes ([service] max_response_length)"),
            Self::BacklogFull => f.write_str(
                "the client has not acknowledged [service] max_push_backlog bytes of pushes: its session is closed",
            ),
        }
    }
}

impl std::error::Error for PushError {}

/// One session's stream of pushes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Stream {
    /// The number of the last push (0: none yet).
    last: u64,
    /// Pushes after the acknowledged one, in order: (number, bytes).
    pending: VecDeque<(u64, Box<[u8]>)>,
    /// Their bytes.
    bytes: usize,
}

/// Every session's stream of pushes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pushes {
    streams: BTreeMap<u64, Stream>,
    max_length: usize,
    max_backlog: usize,
}

/// A push streams' snapshot's first 8 bytes: the format and its version.
const SNAPSHOT_MAGIC: u64 = u64::from_le_bytes(*b"qcpush01");

impl Pushes {
    pub(crate) fn new(max_length: usize, max_backlog: usize) -> Self {
        Self { streams: BTreeMap::new(), max_length, max_backlog }
    }

    /// The longest push.
    pub(crate) fn max_length(&self) -> usize {
        self.max_length
    }

    /// Pushes `payload` to `session_id` (open: the caller checked), returning its number.
    pub(crate) fn push(&mut self, session_id: u64, payload: &[u8]) -> Result<u64, PushError> {
        if payload.len() > self.max_length {
            return Err(PushError::TooLong { max: self.max_length });
        }
        let stream = self.streams.entry(session_id).or_default();
        if stream.bytes + payload.len() > self.max_backlog {
            return Err(PushError::BacklogFull);
        }
        stream.last += 1;
        stream.bytes += payload.len();
        stream.pending.push_back((stream.last, payload.into()));
        Ok(stream.last)
    }

    /// The client of `session_id` has every push up to `received`: they are dropped.
    pub(crate) fn acknowledge(&mut self, session_id: u64, received: u64) {
        let Some(stream) = self.streams.get_mut(&session_id) else {
            return;
        };
        while stream.pending.front().is_some_and(|(number, _)| *number <= received) {
            let (_, bytes) = stream.pending.pop_front().expect("checked");
            stream.bytes -= bytes.len();
        }
    }

    /// The session closed: its stream goes.
    pub(crate) fn close(&mut self, session_id: u64) {
        self.streams.remove(&session_id);
    }

    /// Push `number` of `session_id`, if it is pending.
    pub(crate) fn get(&self, session_id: u64, number: u64) -> Option<&[u8]> {
        let stream = self.streams.get(&session_id)?;
        let first = stream.pending.front()?.0;
        stream.pending.get(number.checked_sub(first)? as usize).map(|(_, bytes)| &bytes[..])
    }

    /// Every pending push of `session_id` after `received`, in order.
    pub(crate) fn pending_after(&self, session_id: u64, received: u64) -> impl Iterator<Item = (u64, &[u8])> {
        self.streams
            .get(&session_id)
            .into_iter()
            .flat_map(|stream| stream.pending.iter())
            .filter(move |(number, _)| *number > received)
            .map(|(number, bytes)| (*number, &bytes[..]))
    }

    /// Pending pushes, all sessions together.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.streams.values().map(|s| s.pending.len()).sum()
    }

    /// Writes the streams: format, count, and per session its id, last number, and pending pushes.
    pub(crate) fn write_snapshot(&self, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(&SNAPSHOT_MAGIC.to_le_bytes())?;
        out.write_all(&(self.streams.len() as u64).to_le_bytes())?;
        for (id, stream) in &self.streams {
            out.write_all(&id.to_le_bytes())?;
            out.write_all(&stream.last.to_le_bytes())?;
            out.write_all(&(stream.pending.len() as u64).to_le_bytes())?;
            for (number, bytes) in &stream.pending {
                out.write_all(&number.to_le_bytes())?;
                out.write_all(&(bytes.len() as u64).to_le_bytes())?;
                out.write_all(bytes)?;
            }
        }
        Ok(())
    }

    /// Reads the streams as [`write_snapshot`](Self::write_snapshot) wrote them. An unknown format is
    /// refused naming what it found; a stream past this node's limits (`max_sessions` streams, pushes longer
    /// than `max_length`, a backlog past `max_backlog`) is refused before it is read into memory.
    pub(crate) fn read_snapshot(&mut self, input: &mut dyn Read, max_sessions: usize) -> io::Result<()> {
        let word = |input: &mut dyn Read| -> io::Result<u64> {
            let mut bytes = [0u8; 8];
            input.read_exact(&mut bytes)?;
            Ok(u64::from_le_bytes(bytes))
        };
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
        let magic = word(input)?;
        if magic != SNAPSHOT_MAGIC {
            return Err(invalid(format!(
                "the pushes of a snapshot are in format {:?}; this build reads qcpush01",
                String::from_utf8_lossy(&magic.to_le_bytes())
            )));
        }
        let sessions = word(input)?;
        if sessions > max_sessions as u64 {
            return Err(invalid(format!("{sessions} push streams, more than max_sessions {max_sessions}")));
        }
        let mut streams = BTreeMap::new();
        for _ in 0..sessions {
            let id = word(input)?;
            let mut stream = Stream { last: word(input)?, ..Stream::default() };
            let count = word(input)?;
            for _ in 0..count {
                let number = word(input)?;
                let length = word(input)?;
                if length > self.max_length as u64 || stream.bytes as u64 + length > self.max_backlog as u64 {
                    return Err(invalid(format!(
                        "session {id}'s pushes pass this node's limits (a push of at most {} bytes, \
                         [service] max_push_backlog {} bytes): give every member the same limits",
                        self.max_length, self.max_backlog
                    )));
                }
                let mut bytes = vec![0; length as usize];
                input.read_exact(&mut bytes)?;
                stream.bytes += bytes.len();
                stream.pending.push_back((number, bytes.into()));
            }
            streams.insert(id, stream);
        }
        self.streams = streams;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushes_are_numbered_per_session_kept_until_acknowledged_and_bounded() {
        let mut pushes = Pushes::new(4, 10);
        assert_eq!(pushes.push(7, b"abcd"), Ok(1));
        assert_eq!(pushes.push(7, b"efgh"), Ok(2));
        assert_eq!(pushes.push(9, b"x"), Ok(1));
        assert_eq!(pushes.push(7, b"abcde"), Err(PushError::TooLong { max: 4 }));
        assert_eq!(pushes.push(7, b"ijk"), Err(PushError::BacklogFull), "4 + 4 + 3 bytes pending > 10");
        assert_eq!(pushes.get(7, 2), Some(&b"efgh"[..]));
        pushes.acknowledge(7, 1);
        assert_eq!(pushes.get(7, 1), None);
        assert_eq!(pushes.push(7, b"ijk"), Ok(3));
        let after: Vec<u64> = pushes.pending_after(7, 2).map(|(n, _)| n).collect();
        assert_eq!(after, [3]);
        pushes.close(9);
        assert_eq!(pushes.pending(), 2);
    }

    #[test]
    fn a_snapshot_gives_the_same_streams_and_refuses_ones_past_the_limits() {
        let mut pushes = Pushes::new(8, 64);
        pushes.push(1, b"one").unwrap();
        pushes.push(1, b"two").unwrap();
        pushes.push(2, b"three").unwrap();
        pushes.acknowledge(1, 1);
        let mut bytes = Vec::new();
        pushes.write_snapshot(&mut bytes).unwrap();
        let mut read = Pushes::new(8, 64);
        read.read_snapshot(&mut &bytes[..], 16).unwrap();
        assert_eq!(read, pushes);
        assert!(Pushes::new(4, 64).read_snapshot(&mut &bytes[..], 16).is_err(), "a push longer than 4 bytes");
        assert!(Pushes::new(8, 64).read_snapshot(&mut &bytes[..], 1).is_err(), "two streams, one session");
        bytes[7] = b'9';
        let error = read.read_snapshot(&mut &bytes[..], 16).unwrap_err();
        assert!(error.to_string().contains("qcpush09"), "{error}");
    }
}
