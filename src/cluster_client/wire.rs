//! The client protocol's datagrams (ingress from a client to a member, egress back): a 16-byte header and
//! records, each a 32-byte [`RecordHeader`] and its payload padded to 8 bytes, many to a datagram.
//!
//! | kind | way | `session_id` | `correlation_id` | `value` | payload |
//! |---|---|---|---|---|---|
//! | `OPEN` | in | 0 | the client's nonce | | |
//! | `MESSAGE` | in | session | the message's number (from 1) | | the message |
//! | `KEEP_ALIVE` | in | session | | | |
//! | `CLOSE` | in | session | | | |
//! | `RECONNECT` | in | session | | | |
//! | `OPENED` | out | session | the nonce | | |
//! | `COMMITTED` | out | session | the message's number | log position it ends at | the response |
//! | `COMMITTED_RUN` | out | session | the first message's number | how many | each one's position (8 bytes) |
//! | `RECONNECTED` | out | session | | last number applied | |
//! | `REFUSED` | out | session | the nonce or number refused | the number expected next (a gap) | |
//! | `CLOSED` | out | session | | | |
//! | `REDIRECT` | out | | | the leader's member id, or -1 | |
//! | `HEARTBEAT` | out | session | | | |
//! | `NAK` | out | session | | the number expected next | |
//!
//! `code` says more: a [`RefusalCode`] in `REFUSED`, 1 for a duplicate in `COMMITTED`, 1 for a timeout in
//! `CLOSED`.
//!
//! # Invariants
//!
//! - [`Records`] never reads past the datagram and never panics: a datagram whose header or any record
//!   does not fit is refused whole, with a [`WireError`].
//! - A [`DatagramWriter`] never grows past the capacity it was made with: a record that does not fit is
//!   refused, and the writer is sent first.

use std::fmt;

use bytemuck::{Pod, Zeroable};

/// A client protocol datagram's first 4 bytes.
pub const MAGIC: u32 = u32::from_le_bytes(*b"qcC1");
/// The protocol version this build speaks.
pub const VERSION: u16 = 1;
/// Bytes of [`DatagramHeader`].
pub const DATAGRAM_HEADER_LENGTH: usize = 16;
/// Bytes of [`RecordHeader`].
pub const RECORD_HEADER_LENGTH: usize = 32;

/// Record kinds, client to member.
pub const OPEN: u8 = 1;
/// A message.
pub const MESSAGE: u8 = 2;
/// The client is alive.
pub const KEEP_ALIVE: u8 = 3;
/// The client closes its session.
pub const CLOSE: u8 = 4;
/// The client goes on with its session at this member (a new leader).
pub const RECONNECT: u8 = 5;
/// Record kinds, member to client: the session opened.
pub const OPENED: u8 = 16;
/// A message was committed (and applied, exactly once).
pub const COMMITTED: u8 = 17;
/// The session goes on here; the value is the last correlation id applied.
pub const RECONNECTED: u8 = 18;
/// What the record names was refused ([`RefusalCode`] in `code`).
pub const REFUSED: u8 = 19;
/// The session is closed.
pub const CLOSED: u8 = 20;
/// This member does not lead: the value names the leader.
pub const REDIRECT: u8 = 21;
/// The leader is alive (the answer to a keep-alive).
pub const HEARTBEAT: u8 = 22;
/// A gap: the value is the correlation id the leader takes next; the client resends from it.
pub const NAK: u8 = 23;
/// Consecutive messages of a session committed without a response: the correlation id is the first's,
/// the value how many, and the payload each one's log position (8 bytes, little-endian).
pub const COMMITTED_RUN: u8 = 24;

/// `code` of a `COMMITTED` record for a resend of a message applied before.
pub const DUPLICATE: u8 = 1;
/// `code` of a `CLOSED` record for a session closed for silence.
pub const TIMED_OUT: u8 = 1;

/// Why a member refused a client's record (`code` of a `REFUSED` record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RefusalCode {
    /// The session is not open (closed, timed out, or never opened): open a new one.
    UnknownSession = 1,
    /// The cluster holds as many sessions as `clients.max_sessions` allows.
    TooManySessions = 2,
    /// A message past a gap: resend from the value.
    Gap = 3,
    /// A message further ahead of the last one applied than `clients.window` allows.
    WindowExceeded = 4,
    /// The leader's log has no room now: resend later.
    BackPressured = 5,
    /// The leader does not know this session yet: reconnect.
    NotConnected = 6,
    /// Longer than a message can be.
    TooLong = 7,
}

impl RefusalCode {
    /// The code from its byte, if it is one.
    pub fn from_u8(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::UnknownSession,
            2 => Self::TooManySessions,
            3 => Self::Gap,
            4 => Self::WindowExceeded,
            5 => Self::BackPressured,
            6 => Self::NotConnected,
            7 => Self::TooLong,
            _ => return None,
        })
    }
}

impl fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::UnknownSession => "the session is not open (closed or timed out): open a new one",
            Self::TooManySessions => "the cluster holds clients.max_sessions sessions",
            Self::Gap => "a message past a gap",
            Self::WindowExceeded => "further ahead of the last message applied than clients.window allows",
            Self::BackPressured => "the leader's log has no room now",
            Self::NotConnected => "the leader does not know this session yet",
            Self::TooLong => "longer than a client message can be",
        })
    }
}

/// A datagram's header, as on the wire (little-endian).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct DatagramHeader {
    /// [`MAGIC`].
    pub magic: u32,
    /// [`VERSION`].
    pub version: u16,
    /// Records that follow.
    pub count: u16,
    /// Reserved, 0.
    pub reserved: u64,
}

/// A record's header, as on the wire (little-endian); its payload follows, padded to 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct RecordHeader {
    /// What the record is ([`OPEN`] ... [`NAK`]).
    pub kind: u8,
    /// More about it (see the module's table).
    pub code: u8,
    /// Reserved, 0.
    pub reserved: u16,
    /// Bytes of payload that follow (unpadded).
    pub length: u32,
    /// The session.
    pub session_id: u64,
    /// The nonce or the message's number.
    pub correlation_id: u64,
    /// A position, a correlation id or a member id (see the module's table).
    pub value: i64,
}

const _: () = assert!(size_of::<DatagramHeader>() == DATAGRAM_HEADER_LENGTH);
const _: () = assert!(size_of::<RecordHeader>() == RECORD_HEADER_LENGTH);

impl RecordHeader {
    /// A record of `kind` for `session_id`, the other fields 0.
    pub fn new(kind: u8, session_id: u64) -> Self {
        Self { kind, session_id, ..Self::default() }
    }

    /// With `correlation_id`.
    pub fn correlation(self, correlation_id: u64) -> Self {
        Self { correlation_id, ..self }
    }

    /// With `value`.
    pub fn value(self, value: i64) -> Self {
        Self { value, ..self }
    }

    /// With `code`.
    pub fn code(self, code: u8) -> Self {
        Self { code, ..self }
    }
}

/// Why bytes are not a client protocol datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than its header.
    Truncated,
    /// Not this protocol (magic), or another version of it.
    Foreign,
    /// A record that runs past the datagram, or a count that disagrees with the records.
    BadRecord,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Truncated => "shorter than a client datagram's header",
            Self::Foreign => "not a quorumcast client datagram of this version",
            Self::BadRecord => "a record that does not fit the datagram",
        })
    }
}

impl std::error::Error for WireError {}

/// Bytes a record with a payload of `length` takes.
pub fn record_length(length: usize) -> usize {
    RECORD_HEADER_LENGTH + length.next_multiple_of(8)
}

/// The records of a datagram, checked whole before the first is handed out.
#[derive(Clone, Debug)]
pub struct Records<'a> {
    bytes: &'a [u8],
    remaining: u16,
}

impl<'a> Records<'a> {
    /// The records of `datagram`, or why it is not one.
    pub fn parse(datagram: &'a [u8]) -> Result<Self, WireError> {
        let header: DatagramHeader =
            datagram.get(..DATAGRAM_HEADER_LENGTH).map(bytemuck::pod_read_unaligned).ok_or(WireError::Truncated)?;
        if header.magic != MAGIC || header.version != VERSION {
            return Err(WireError::Foreign);
        }
        let records = Self { bytes: &datagram[DATAGRAM_HEADER_LENGTH..], remaining: header.count };
        // Every record must fit, and exactly `count` of them fill the datagram.
        let mut check = records.clone();
        let mut seen = 0u16;
        while !check.bytes.is_empty() {
            check.split_first().ok_or(WireError::BadRecord)?;
            seen = seen.checked_add(1).ok_or(WireError::BadRecord)?;
        }
        if seen != header.count {
            return Err(WireError::BadRecord);
        }
        Ok(records)
    }

    fn split_first(&mut self) -> Option<(RecordHeader, &'a [u8])> {
        let header: RecordHeader = bytemuck::pod_read_unaligned(self.bytes.get(..RECORD_HEADER_LENGTH)?);
        let length = header.length as usize;
        let payload = self.bytes.get(RECORD_HEADER_LENGTH..RECORD_HEADER_LENGTH.checked_add(length)?)?;
        let next = record_length(length).min(self.bytes.len());
        self.bytes = &self.bytes[next..];
        Some((header, payload))
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = (RecordHeader, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        self.split_first()
    }
}

/// A datagram being filled with records, up to a fixed capacity (allocated once).
#[derive(Debug)]
pub struct DatagramWriter {
    bytes: Vec<u8>,
    capacity: usize,
    count: u16,
}

impl DatagramWriter {
    /// An empty datagram of at most `capacity` bytes (at least a header and one empty record).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(DATAGRAM_HEADER_LENGTH + RECORD_HEADER_LENGTH);
        let mut bytes = Vec::with_capacity(capacity);
        bytes.resize(DATAGRAM_HEADER_LENGTH, 0);
        Self { bytes, capacity, count: 0 }
    }

    /// The longest payload one record can carry.
    pub fn max_payload(&self) -> usize {
        (self.capacity - DATAGRAM_HEADER_LENGTH - RECORD_HEADER_LENGTH) & !7
    }

    /// True when no record is in it.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// True when a record with a payload of `length` fits beside those in it.
    pub fn fits(&self, length: usize) -> bool {
        self.count < u16::MAX && self.bytes.len() + record_length(length) <= self.capacity
    }

    /// Adds a record; false (and nothing added) when it does not fit.
    pub fn push(&mut self, header: RecordHeader, payload: &[u8]) -> bool {
        if !self.fits(payload.len()) {
            return false;
        }
        let header = RecordHeader { length: payload.len() as u32, ..header };
        self.bytes.extend_from_slice(bytemuck::bytes_of(&header));
        self.bytes.extend_from_slice(payload);
        let padded = self.bytes.len().next_multiple_of(8);
        self.bytes.resize(padded, 0);
        self.count += 1;
        true
    }

    /// The datagram, its header filled in.
    pub fn finish(&mut self) -> &[u8] {
        let header = DatagramHeader { magic: MAGIC, version: VERSION, count: self.count, reserved: 0 };
        self.bytes[..DATAGRAM_HEADER_LENGTH].copy_from_slice(bytemuck::bytes_of(&header));
        &self.bytes
    }

    /// Empties it for the next datagram.
    pub fn clear(&mut self) {
        self.bytes.truncate(DATAGRAM_HEADER_LENGTH);
        self.count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_pad_to_eight() {
        let mut writer = DatagramWriter::new(1408);
        assert!(writer.push(RecordHeader::new(MESSAGE, 7).correlation(1), b"abc"));
        assert!(writer.push(RecordHeader::new(KEEP_ALIVE, 7), &[]));
        let bytes = writer.finish().to_vec();
        assert_eq!(bytes.len(), DATAGRAM_HEADER_LENGTH + 40 + 32);
        let records: Vec<_> = Records::parse(&bytes).unwrap().collect();
        assert_eq!(records.len(), 2);
        assert_eq!((records[0].0.kind, records[0].0.correlation_id, records[0].1), (MESSAGE, 1, &b"abc"[..]));
        assert_eq!(records[1].0.kind, KEEP_ALIVE);
    }

    #[test]
    fn a_writer_never_grows_past_its_capacity() {
        let mut writer = DatagramWriter::new(128);
        assert!(writer.push(RecordHeader::new(MESSAGE, 1), &[0; 40]));
        assert!(!writer.push(RecordHeader::new(MESSAGE, 1), &[0; 40]));
        assert!(writer.finish().len() <= 128);
        assert_eq!(writer.max_payload(), 128 - 48);
    }

    #[test]
    fn bad_datagrams_are_refused_whole() {
        assert_eq!(Records::parse(&[1, 2, 3]).unwrap_err(), WireError::Truncated);
        assert_eq!(Records::parse(&[0; 64]).unwrap_err(), WireError::Foreign);
        let mut writer = DatagramWriter::new(1408);
        writer.push(RecordHeader::new(MESSAGE, 1), b"hello");
        let good = writer.finish().to_vec();
        // A record whose length runs past the end.
        let mut long = good.clone();
        long[DATAGRAM_HEADER_LENGTH + 4..DATAGRAM_HEADER_LENGTH + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Records::parse(&long).unwrap_err(), WireError::BadRecord);
        // A count that disagrees with the records.
        let mut count = good.clone();
        count[6] = 2;
        assert_eq!(Records::parse(&count).unwrap_err(), WireError::BadRecord);
        // Cut short.
        assert_eq!(Records::parse(&good[..good.len() - 9]).unwrap_err(), WireError::BadRecord);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse_without_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let mut with_magic = bytes.clone();
            if with_magic.len() >= 8 {
                with_magic[..4].copy_from_slice(&MAGIC.to_le_bytes());
                with_magic[4..6].copy_from_slice(&VERSION.to_le_bytes());
            }
            for candidate in [&bytes, &with_magic] {
                if let Ok(records) = Records::parse(candidate) {
                    for (header, payload) in records {
                        proptest::prop_assert_eq!(header.length as usize, payload.len());
                    }
                }
            }
        }
    }
}
