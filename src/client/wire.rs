//! The client protocol's datagrams (ingress from a client to a member, egress back): a 32-byte header,
//! records, each a 32-byte [`RecordHeader`] and its payload padded to 8 bytes, many to a datagram, and a
//! 16-byte tag.
//!
//! | kind | way | `session_id` | `correlation_id` | `value` | payload |
//! |---|---|---|---|---|---|
//! | `OPEN` | in | 0 | the client's nonce | | its ephemeral X25519 public key (32 bytes), then the cookie (16) once it has one |
//! | `MESSAGE` | in | session | the message's number (from 1) | | the message |
//! | `KEEP_ALIVE` | in | session | | | |
//! | `CLOSE` | in | session | | | |
//! | `RECONNECT` | in | session | the challenge answered, or 0 | | |
//! | `PUSH_ACK` | in | session | | the number of the last push received in order | |
//! | `COOKIE` | out | | the nonce | | the cookie that the open from this address must carry (16 bytes) |
//! | `OPENED` | out | session | the nonce | | the leader's ephemeral public key (32), the token wrapped under their exchange (32), its proof (16) |
//! | `COMMITTED` | out | session | the message's number | log position it ends at | the response |
//! | `COMMITTED_RUN` | out | session | the first message's number | how many | each one's position (8 bytes) |
//! | `RECONNECTED` | out | session | | last number applied | |
//! | `REFUSED` | out | session | the nonce or number refused | the number expected next (a gap) | |
//! | `CLOSED` | out | session | | | |
//! | `REDIRECT` | out | | | the leader's member id, or -1 | the leader's client endpoint, when known (family, address, port) |
//! | `HEARTBEAT` | out | session | | | |
//! | `NAK` | out | session | | the number expected next | |
//! | `CHALLENGE` | out | session | the challenge | | |
//! | `MEMBERS` | out | session | | the configuration id | each member's id and client endpoint |
//! | `PUSHED` | out | session | the push's number (from 1) | | the push |
//! | `FRAGMENT` | out | session | the piece's offset in the record | the record's length | a piece of a record (header and payload) too long for one datagram |
//!
//! `code` says more: a [`RefusalCode`] in `REFUSED` (its value the service's code for
//! [`RefusalCode::RefusedByService`]), 1 for a duplicate and 2 for a response too long in `COMMITTED`, 1 for a timeout, 2 for an eviction, 3
//! for a close by the service and 4 for a push backlog left unacknowledged in `CLOSED`, 1 (resend) in
//! `PUSH_ACK`.
//!
//! # Authentication
//!
//! Every datagram of a session (its header's `session_id` is not 0), both ways, ends with a tag: keyed
//! BLAKE3 over the header and records, under the session's token, which the leader gives the client in
//! `OPENED` and which every member can derive from the members' session secret (see
//! [`super::credentials`]). Its header's `sequence` grows with each datagram its sender sends, so a
//! receiver drops a datagram it has seen. A datagram of no session (an `OPEN`, and the answers that
//! belong to no session) is tagged with a client key when the cluster has client keys (`key_id` names
//! it), and is untagged otherwise. Records of a datagram must all be of its header's session.
//!
//! # Invariants
//!
//! - [`Datagram::parse`] and [`Records`] never read past the datagram and never panic: a datagram whose
//!   header or any record does not fit is refused whole, with a [`WireError`].
//! - A [`DatagramWriter`] never grows past the capacity it was made with, its tag included: a record that
//!   does not fit is refused, and the writer is sent first.
//! - Nothing of a tagged datagram but its header is read before its tag is checked.

use std::fmt;

use bytemuck::{Pod, Zeroable};

use crate::media::auth::{AuthKey, TAG_LENGTH};

/// A client protocol datagram's first 4 bytes.
pub const MAGIC: u32 = u32::from_le_bytes(*b"qcC1");
/// The protocol version this build speaks (3: an open carries an ephemeral key and a cookie; 2 had the
/// 32-byte header with session, sequence and tag, and a token wrapped with the client key).
pub const VERSION: u16 = 3;
/// Bytes of [`DatagramHeader`].
pub const DATAGRAM_HEADER_LENGTH: usize = 32;
/// Bytes of [`RecordHeader`].
pub const RECORD_HEADER_LENGTH: usize = 32;
/// [`DatagramHeader::flags`]: a tag of [`TAG_LENGTH`] bytes ends the datagram.
pub const FLAG_TAGGED: u32 = 1;
/// Bytes of a session token in an `OPENED` record.
pub const TOKEN_LENGTH: usize = 32;

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
/// The client has every push of its session up to the value, in order (with `code` [`RESEND`]: it saw a
/// gap after it, and asks for the rest again).
pub const PUSH_ACK: u8 = 6;
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
/// The leader asks the client to prove it holds the session's token before the session moves to the
/// address the challenge went to: the client answers with a `RECONNECT` carrying the challenge.
pub const CHALLENGE: u8 = 25;
/// The members of the configuration in effect on the leader: the value is the configuration id, the
/// payload each member's id (4 bytes, little-endian) and client endpoint (family, address, port; see
/// [`encode_members`]). Sent after `OPENED` and with `RECONNECTED` and `HEARTBEAT`, so a client learns a
/// change within a keep-alive interval.
pub const MEMBERS: u8 = 26;
/// The answer to an `OPEN` without a valid cookie: the cookie the open must carry from this address
/// (made and checked without state; good for this second and the next).
pub const COOKIE: u8 = 27;
/// A message the service pushed to the session (`Cluster::push`): the correlation id is its number in
/// the session's stream of pushes (from 1), the payload its bytes.
pub const PUSHED: u8 = 28;
/// A piece of a record longer than one datagram holds: the correlation id is the piece's offset in the
/// record (its 32-byte header, then its payload), the value the record's whole length. The pieces of a
/// record go in order, each whole in one datagram; the client puts them together and reads the record.
pub const FRAGMENT: u8 = 29;
/// `code` of a `COMMITTED` record whose response was longer than `[service] max_response_length`: it
/// is not sent.
pub const RESPONSE_TOO_LONG: u8 = 2;

/// `code` of a `COMMITTED` record for a resend of a message applied before.
pub const DUPLICATE: u8 = 1;
/// `code` of a `CLOSED` record for a session closed for silence.
pub const TIMED_OUT: u8 = 1;
/// `code` of a `CLOSED` record for a session evicted to let a client of another address in.
pub const EVICTED: u8 = 2;
/// `code` of a `CLOSED` record for a session the service closed (`Cluster::close_session`).
pub const CLOSED_BY_SERVICE: u8 = 3;
/// `code` of a `CLOSED` record for a session whose client left `[service] max_push_backlog` bytes of
/// pushes unacknowledged.
pub const CLOSED_BACKLOG: u8 = 4;
/// `code` of a `PUSH_ACK` record that asks for the pushes after its value again (the client saw a gap).
pub const RESEND: u8 = 1;

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
    /// The session moved to another address, whose client proved it holds the session's token: this
    /// client no longer has the session.
    Displaced = 8,
    /// This address opened (or reconnected) more sessions per second than `clients.opens_per_second`.
    RateLimited = 9,
    /// This address holds `clients.max_sessions_per_address` sessions already.
    TooManyFromAddress = 10,
    /// The cluster takes no new sessions or messages now (an operator suspended it): resend later.
    Suspended = 11,
    /// The cluster was full and closed this session, of an address holding more sessions than any
    /// other, to let a client of another address in: open a new one.
    Evicted = 12,
    /// This open was seen before (an `OPEN` is good once): open with a new key and nonce.
    Replayed = 13,
    /// The addresses of this network (an IPv4 /24, an IPv6 /48) hold `clients.max_sessions_per_prefix`
    /// sessions already.
    TooManyFromNetwork = 14,
    /// The service refused the session at its open (its `on_session_open`: an application's
    /// authorisation decision); the record's value carries the application's code.
    RefusedByService = 15,
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
            8 => Self::Displaced,
            9 => Self::RateLimited,
            10 => Self::TooManyFromAddress,
            11 => Self::Suspended,
            12 => Self::Evicted,
            13 => Self::Replayed,
            14 => Self::TooManyFromNetwork,
            15 => Self::RefusedByService,
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
            Self::Displaced => "the session moved to another address that holds its token",
            Self::RateLimited => "this address opens sessions faster than clients.opens_per_second allows",
            Self::TooManyFromAddress => "this address holds clients.max_sessions_per_address sessions",
            Self::Suspended => "the cluster takes no client entries now (an operator suspended it): resend later",
            Self::Evicted => "the cluster was full and closed this session to let a client of another address in",
            Self::Replayed => "this open was seen before: open again with a new key",
            Self::TooManyFromNetwork => "this address's network holds clients.max_sessions_per_prefix sessions",
            Self::RefusedByService => "the service refused the session",
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
    /// The client key the datagram (or its session) is under ([`super::credentials::ClientKey::id`]); 0
    /// for none.
    pub key_id: u32,
    /// [`FLAG_TAGGED`], or 0.
    pub flags: u32,
    /// The session every record is of; 0 for none (an open, and answers to no session).
    pub session_id: u64,
    /// The sender's count of its datagrams, growing with each; 0 in a datagram of no session.
    pub sequence: u64,
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
    /// A record of another session than the datagram's header names.
    OtherSession,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Truncated => "shorter than a client datagram's header",
            Self::Foreign => "not a quorumcast client datagram of this version",
            Self::BadRecord => "a record that does not fit the datagram",
            Self::OtherSession => "a record of another session than its datagram's",
        })
    }
}

impl std::error::Error for WireError {}

/// Bytes a record with a payload of `length` takes.
pub fn record_length(length: usize) -> usize {
    RECORD_HEADER_LENGTH + length.next_multiple_of(8)
}

/// A datagram's header and the rest of it, its tag apart: what a receiver reads before it checks the tag.
#[derive(Clone, Copy, Debug)]
pub struct Datagram<'a> {
    /// Its header.
    pub header: DatagramHeader,
    /// The header and the records: the bytes the tag covers.
    body: &'a [u8],
    tag: Option<&'a [u8]>,
}

impl<'a> Datagram<'a> {
    /// The header of `datagram` and where its tag is, or why it is not a datagram of this protocol; the
    /// records are not read (see [`records`](Self::records)).
    pub fn parse(datagram: &'a [u8]) -> Result<Self, WireError> {
        let header: DatagramHeader =
            datagram.get(..DATAGRAM_HEADER_LENGTH).map(bytemuck::pod_read_unaligned).ok_or(WireError::Truncated)?;
        if header.magic != MAGIC || header.version != VERSION {
            return Err(WireError::Foreign);
        }
        if header.flags & !FLAG_TAGGED != 0 {
            return Err(WireError::BadRecord);
        }
        let (body, tag) = if header.flags & FLAG_TAGGED != 0 {
            let length = datagram.len().checked_sub(TAG_LENGTH).filter(|&l| l >= DATAGRAM_HEADER_LENGTH);
            let length = length.ok_or(WireError::Truncated)?;
            (&datagram[..length], Some(&datagram[length..]))
        } else {
            (datagram, None)
        };
        Ok(Self { header, body, tag })
    }

    /// True when the datagram carries a tag.
    pub fn is_tagged(&self) -> bool {
        self.tag.is_some()
    }

    /// True when the datagram's tag is `key`'s tag of its header and records.
    pub fn verify(&self, key: &AuthKey) -> bool {
        self.tag.is_some_and(|tag| key.verify_tag(self.body, tag))
    }

    /// Its records, checked whole (every one within the datagram, exactly `count` of them, each of the
    /// header's session); call it only once the tag is checked.
    pub fn records(&self) -> Result<Records<'a>, WireError> {
        let records = Records { bytes: &self.body[DATAGRAM_HEADER_LENGTH..], remaining: self.header.count };
        let mut check = records.clone();
        let mut seen = 0u16;
        while !check.bytes.is_empty() {
            let (record, _) = check.split_first().ok_or(WireError::BadRecord)?;
            // A datagram of no session (an open, or a member's answer to one) may name any session; a
            // session's datagram carries only its own records.
            if self.header.session_id != 0 && record.session_id != self.header.session_id {
                return Err(WireError::OtherSession);
            }
            seen = seen.checked_add(1).ok_or(WireError::BadRecord)?;
        }
        if seen != self.header.count {
            return Err(WireError::BadRecord);
        }
        Ok(records)
    }
}

/// The records of a datagram, checked whole before the first is handed out.
#[derive(Clone, Debug)]
pub struct Records<'a> {
    bytes: &'a [u8],
    remaining: u16,
}

impl<'a> Records<'a> {
    /// The records of `datagram`, or why it is not one, without looking at its tag (a test's or a
    /// tool's reading; a member and a client check the tag first, with [`Datagram`]).
    pub fn parse(datagram: &'a [u8]) -> Result<Self, WireError> {
        Datagram::parse(datagram)?.records()
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

/// What closes a datagram: the header's session, key and sequence, and the key its tag is made with.
#[derive(Clone, Copy, Debug, Default)]
pub struct Seal<'k> {
    /// [`DatagramHeader::session_id`].
    pub session_id: u64,
    /// [`DatagramHeader::key_id`].
    pub key_id: u32,
    /// [`DatagramHeader::sequence`].
    pub sequence: u64,
    /// The key of the tag; `None` for an untagged datagram.
    pub key: Option<&'k AuthKey>,
}

/// A datagram being filled with records, up to a fixed capacity (allocated once), room for its tag kept.
#[derive(Debug)]
pub struct DatagramWriter {
    /// The header, the records, and after [`finish`](Self::finish) the tag.
    bytes: Vec<u8>,
    /// Bytes of the header and the records.
    end: usize,
    capacity: usize,
    count: u16,
}

impl DatagramWriter {
    /// An empty datagram of at most `capacity` bytes, its tag included (at least a header, one empty
    /// record and a tag).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(DATAGRAM_HEADER_LENGTH + RECORD_HEADER_LENGTH + TAG_LENGTH);
        let mut bytes = Vec::with_capacity(capacity);
        bytes.resize(DATAGRAM_HEADER_LENGTH, 0);
        Self { bytes, end: DATAGRAM_HEADER_LENGTH, capacity, count: 0 }
    }

    /// Bytes left for records: the capacity without the header and the tag.
    fn room(&self) -> usize {
        self.capacity - TAG_LENGTH
    }

    /// The longest payload one record can carry.
    pub fn max_payload(&self) -> usize {
        (self.room() - DATAGRAM_HEADER_LENGTH - RECORD_HEADER_LENGTH) & !7
    }

    /// True when no record is in it.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// True when a record with a payload of `length` fits beside those in it.
    pub fn fits(&self, length: usize) -> bool {
        self.count < u16::MAX && self.end + record_length(length) <= self.room()
    }

    /// Adds a record; false (and nothing added) when it does not fit.
    pub fn push(&mut self, header: RecordHeader, payload: &[u8]) -> bool {
        if !self.fits(payload.len()) {
            return false;
        }
        let header = RecordHeader { length: payload.len() as u32, ..header };
        self.bytes.truncate(self.end);
        self.bytes.extend_from_slice(bytemuck::bytes_of(&header));
        self.bytes.extend_from_slice(payload);
        self.end = self.bytes.len().next_multiple_of(8);
        self.bytes.resize(self.end, 0);
        self.count += 1;
        true
    }

    /// The datagram, its header filled in from `seal` and its tag made with `seal.key`.
    pub fn finish(&mut self, seal: Seal<'_>) -> &[u8] {
        let flags = if seal.key.is_some() { FLAG_TAGGED } else { 0 };
        let header = DatagramHeader {
            magic: MAGIC,
            version: VERSION,
            count: self.count,
            key_id: seal.key_id,
            flags,
            session_id: seal.session_id,
            sequence: seal.sequence,
        };
        self.bytes.truncate(self.end);
        self.bytes[..DATAGRAM_HEADER_LENGTH].copy_from_slice(bytemuck::bytes_of(&header));
        if let Some(key) = seal.key {
            let tag = key.tag(&self.bytes);
            self.bytes.extend_from_slice(&tag);
        }
        &self.bytes
    }

    /// The datagram as the last [`finish`](Self::finish) made it (until the next change).
    pub fn finished(&self) -> &[u8] {
        &self.bytes
    }

    /// Empties it for the next datagram.
    pub fn clear(&mut self) {
        self.bytes.truncate(DATAGRAM_HEADER_LENGTH);
        self.end = DATAGRAM_HEADER_LENGTH;
        self.count = 0;
    }
}

/// A `MEMBERS` payload: each member's id and client endpoint.
pub fn encode_members(members: &[(i32, std::net::SocketAddr)], out: &mut Vec<u8>) {
    for &(id, addr) in members {
        out.extend_from_slice(&id.to_le_bytes());
        crate::cluster::configuration::encode_addr(addr, out);
    }
}

/// The members a `MEMBERS` payload lists, up to the first entry that does not read whole (at most one per
/// 11 bytes of payload: nothing is allocated past what the datagram holds).
pub fn decode_members(payload: &[u8]) -> Vec<(i32, std::net::SocketAddr)> {
    let mut members = Vec::new();
    let mut at = 0;
    while let Some(id) = payload.get(at..at + 4) {
        let length = match payload.get(at + 4) {
            Some(4) => 7,
            Some(6) => 19,
            _ => break,
        };
        let Some(addr) = payload.get(at + 4..at + 4 + length).and_then(crate::cluster::configuration::decode_addr)
        else {
            break;
        };
        members.push((i32::from_le_bytes(id.try_into().expect("4 bytes")), addr));
        at += 4 + length;
    }
    members
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: AuthKey = AuthKey::new([7; 32]);

    fn sealed(session_id: u64) -> Seal<'static> {
        Seal { session_id, key_id: 0, sequence: 9, key: Some(&KEY) }
    }

    #[test]
    fn records_round_trip_and_pad_to_eight() {
        let mut writer = DatagramWriter::new(1408);
        assert!(writer.push(RecordHeader::new(MESSAGE, 7).correlation(1), b"abc"));
        assert!(writer.push(RecordHeader::new(KEEP_ALIVE, 7), &[]));
        let bytes = writer.finish(sealed(7)).to_vec();
        assert_eq!(bytes.len(), DATAGRAM_HEADER_LENGTH + 40 + 32 + TAG_LENGTH);
        let datagram = Datagram::parse(&bytes).unwrap();
        assert!(datagram.verify(&KEY));
        assert_eq!((datagram.header.session_id, datagram.header.sequence), (7, 9));
        let records: Vec<_> = datagram.records().unwrap().collect();
        assert_eq!(records.len(), 2);
        assert_eq!((records[0].0.kind, records[0].0.correlation_id, records[0].1), (MESSAGE, 1, &b"abc"[..]));
        assert_eq!(records[1].0.kind, KEEP_ALIVE);
    }

    #[test]
    fn a_tag_covers_every_byte_and_only_its_key_makes_it() {
        let mut writer = DatagramWriter::new(1408);
        writer.push(RecordHeader::new(MESSAGE, 7).correlation(1), b"abc");
        let bytes = writer.finish(sealed(7)).to_vec();
        for i in 0..bytes.len() {
            let mut changed = bytes.clone();
            changed[i] ^= 0x10;
            assert!(Datagram::parse(&changed).map_or(true, |d| !d.verify(&KEY)), "byte {i} flipped");
        }
        assert!(!Datagram::parse(&bytes).unwrap().verify(&AuthKey::new([8; 32])));
        // Untagged: nothing verifies.
        writer.clear();
        writer.push(RecordHeader::new(OPEN, 0).correlation(3), &[]);
        let open = writer.finish(Seal::default()).to_vec();
        let datagram = Datagram::parse(&open).unwrap();
        assert!(!datagram.is_tagged() && !datagram.verify(&KEY));
        assert_eq!(datagram.records().unwrap().count(), 1);
    }

    #[test]
    fn a_writer_never_grows_past_its_capacity_and_can_be_sealed_twice() {
        let mut writer = DatagramWriter::new(128);
        assert!(writer.push(RecordHeader::new(MESSAGE, 1), &[0; 40]));
        assert!(!writer.push(RecordHeader::new(MESSAGE, 1), &[0; 40]));
        let first = writer.finish(sealed(1)).to_vec();
        assert!(first.len() <= 128);
        assert_eq!(writer.finish(sealed(1)), &first[..], "a second finish replaces the tag");
        assert_eq!(writer.max_payload(), (128 - TAG_LENGTH - 64) & !7);
    }

    #[test]
    fn bad_datagrams_are_refused_whole() {
        assert_eq!(Records::parse(&[1, 2, 3]).unwrap_err(), WireError::Truncated);
        assert_eq!(Records::parse(&[0; 64]).unwrap_err(), WireError::Foreign);
        let mut writer = DatagramWriter::new(1408);
        writer.push(RecordHeader::new(MESSAGE, 1), b"hello");
        let good = writer.finish(Seal { session_id: 1, ..Seal::default() }).to_vec();
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
        // A record of another session than the header's.
        let mut other = good.clone();
        other[16..24].copy_from_slice(&2u64.to_le_bytes());
        assert_eq!(Records::parse(&other).unwrap_err(), WireError::OtherSession);
        // Unknown flags; a tag flag on a datagram too short for one.
        let mut flags = good.clone();
        flags[12] = 2;
        assert_eq!(Records::parse(&flags).unwrap_err(), WireError::BadRecord);
        let mut short = good[..DATAGRAM_HEADER_LENGTH].to_vec();
        short[12] = FLAG_TAGGED as u8;
        assert_eq!(Datagram::parse(&short).unwrap_err(), WireError::Truncated);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse_without_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let mut with_magic = bytes.clone();
            if with_magic.len() >= DATAGRAM_HEADER_LENGTH {
                with_magic[..4].copy_from_slice(&MAGIC.to_le_bytes());
                with_magic[4..6].copy_from_slice(&VERSION.to_le_bytes());
                with_magic[12] &= 1;
                with_magic[13..16].fill(0);
            }
            for candidate in [&bytes, &with_magic] {
                if let Ok(datagram) = Datagram::parse(candidate) {
                    let _ = datagram.verify(&KEY);
                    if let Ok(records) = datagram.records() {
                        for (header, payload) in records {
                            proptest::prop_assert_eq!(header.length as usize, payload.len());
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_member_list_round_trips_and_a_cut_one_reads_to_its_last_whole_member() {
        let members: Vec<(i32, std::net::SocketAddr)> =
            vec![(0, "127.0.0.1:40700".parse().unwrap()), (7, "[::1]:40701".parse().unwrap())];
        let mut payload = Vec::new();
        encode_members(&members, &mut payload);
        assert_eq!(payload.len(), 4 + 7 + 4 + 19);
        assert_eq!(decode_members(&payload), members);
        assert_eq!(decode_members(&payload[..payload.len() - 1]), members[..1], "the second cut short");
        let mut strange = payload.clone();
        strange[4] = 5;
        assert!(decode_members(&strange).is_empty(), "an unknown address family stops the list");
        assert!(decode_members(&[]).is_empty());
        assert_eq!(RefusalCode::from_u8(RefusalCode::Suspended as u8), Some(RefusalCode::Suspended));
    }
}
