//! The cluster's frames on the media: what a replicated log means beyond the bytes the media layer
//! carries.
//!
//! - Two control frames in the media's extension range ([`crate::frame::TYPE_EXTENSION_FIRST`] on), which
//!   the media layer hands on whole: a follower's acknowledgement of what it appended
//!   ([`AppendPositionFrame`], follower to leader) and the leader's commit position
//!   ([`CommitPositionFrame`], leader to followers). The consensus endpoints reuse both layouts for the
//!   same positions at heartbeat rate (`consensus_core::wire`).
//! - Two meanings of the media's generic data flags: a term-start marker ([`TERM_START_FLAG`], the media's
//!   marker, whose value is the leadership term a leader opens with it) and a client session entry
//!   ([`SESSION_FLAG`], the media's application flag).
//!
//! Layouts are `#[repr(C)]`, checked at compile time, little-endian on the wire.

use bytemuck::{Pod, Zeroable};

use crate::frame::{
    self, ExtensionHeader, APPLICATION_FLAG, MARKER_FLAG, MARKER_LENGTH, TYPE_EXTENSION_FIRST, TYPE_EXTENSION_LAST,
};

/// Data flag: a term-start marker. A leader opens each leadership term it leads with one unfragmented data
/// frame flagged so, whose 8-byte payload is the leadership term id (little-endian); every byte of the log
/// after it, up to the next marker, belongs to that term. Readers of messages skip it (the media's
/// [`MARKER_FLAG`]).
pub const TERM_START_FLAG: u8 = MARKER_FLAG;
/// Payload length of a term-start marker: the leadership term id.
pub const TERM_START_LENGTH: usize = MARKER_LENGTH;
/// Data flag: every fragment of a client session entry (an entry of the engine's session table, which a
/// leader appends for a remote client), so that members tell them from the application's own entries (the
/// media's [`APPLICATION_FLAG`]).
pub const SESSION_FLAG: u8 = APPLICATION_FLAG;

/// A follower acknowledges the log position it has appended.
pub const TYPE_APPEND_POSITION: u16 = TYPE_EXTENSION_FIRST;
/// The leader announces the committed log position.
pub const TYPE_COMMIT_POSITION: u16 = TYPE_EXTENSION_FIRST + 1;
const _: () = assert!(TYPE_COMMIT_POSITION <= TYPE_EXTENSION_LAST);

/// Length of an APPEND_POSITION frame.
pub const APPEND_POSITION_LENGTH: usize = 48;
/// Length of an APPEND_POSITION frame of the version before, without the commit position (still read).
pub const SHORT_APPEND_POSITION_LENGTH: usize = 40;
/// Length of a COMMIT_POSITION frame.
pub const COMMIT_POSITION_LENGTH: usize = 40;

/// The leadership term a term-start marker frame names: its payload, when `flags` mark one and the payload
/// is a term id. A marker with a negative term, or of another length, is not a term start (a configuration
/// entry is a marker too: [`crate::configuration`]).
pub fn term_start_of(flags: u8, payload: &[u8]) -> Option<i64> {
    let term = frame::marker_of(flags & TERM_START_FLAG, payload)?;
    (payload.len() == TERM_START_LENGTH && term < crate::configuration::CONFIGURATION_MARKER).then_some(term)
}

/// APPEND_POSITION (48 bytes): follower -> leader, "I have appended the log up to `log_position` in
/// `leadership_term_id`, and know it committed up to `commit_position`". The leader commits the quorum's
/// position. The version before sent the first 40 bytes (no commit position): read as commit 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct AppendPositionFrame {
    /// [`APPEND_POSITION_LENGTH`].
    pub frame_length: i32,
    /// [`crate::frame::CURRENT_VERSION`].
    pub version: u8,
    /// No flags defined yet.
    pub flags: u8,
    /// [`TYPE_APPEND_POSITION`].
    pub frame_type: u16,
    /// Session of the replicated log's publication.
    pub session_id: i32,
    /// Stream of the replicated log.
    pub stream_id: i32,
    /// Leadership term the follower appended in (8-aligned, offset 16).
    pub leadership_term_id: i64,
    /// Log position (bytes from the start of the log) appended up to (offset 24).
    pub log_position: i64,
    /// Id of the follower sending the acknowledgement (offset 32).
    pub member_id: i32,
    /// Reserved; written as 0 and ignored on read (keeps the frame free of implicit padding).
    pub reserved: i32,
    /// The follower's commit position, 0 when it knows none (offset 40).
    pub commit_position: i64,
}

/// COMMIT_POSITION (40 bytes): leader -> followers, "the log is committed up to `log_position` in
/// `leadership_term_id`".
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct CommitPositionFrame {
    /// [`COMMIT_POSITION_LENGTH`].
    pub frame_length: i32,
    /// [`crate::frame::CURRENT_VERSION`].
    pub version: u8,
    /// No flags defined yet.
    pub flags: u8,
    /// [`TYPE_COMMIT_POSITION`].
    pub frame_type: u16,
    /// Session of the replicated log's publication.
    pub session_id: i32,
    /// Stream of the replicated log.
    pub stream_id: i32,
    /// Leadership term of the commit (8-aligned, offset 16).
    pub leadership_term_id: i64,
    /// Committed log position (offset 24).
    pub log_position: i64,
    /// Id of the leader sending the commit (offset 32).
    pub leader_member_id: i32,
    /// Reserved; written as 0 and ignored on read.
    pub reserved: i32,
}

const _: () = assert!(std::mem::size_of::<AppendPositionFrame>() == APPEND_POSITION_LENGTH);
const _: () = assert!(std::mem::offset_of!(AppendPositionFrame, session_id) == 8);
const _: () = assert!(std::mem::offset_of!(AppendPositionFrame, stream_id) == 12);
const _: () = assert!(std::mem::offset_of!(AppendPositionFrame, leadership_term_id) == 16);
const _: () = assert!(std::mem::offset_of!(AppendPositionFrame, log_position) == 24);
const _: () = assert!(std::mem::offset_of!(AppendPositionFrame, member_id) == 32);
const _: () = assert!(std::mem::offset_of!(AppendPositionFrame, commit_position) == 40);
const _: () = assert!(std::mem::size_of::<CommitPositionFrame>() == COMMIT_POSITION_LENGTH);
const _: () = assert!(std::mem::offset_of!(CommitPositionFrame, leadership_term_id) == 16);
const _: () = assert!(std::mem::offset_of!(CommitPositionFrame, log_position) == 24);
const _: () = assert!(std::mem::offset_of!(CommitPositionFrame, leader_member_id) == 32);

quorumcast_driver::control_frame!(AppendPositionFrame, TYPE_APPEND_POSITION, APPEND_POSITION_LENGTH);
quorumcast_driver::control_frame!(CommitPositionFrame, TYPE_COMMIT_POSITION, COMMIT_POSITION_LENGTH);

/// Reading a cluster frame out of an extension frame the media layer handed on.
macro_rules! read_extension {
    ($t:ty) => {
        impl $t {
            /// The frame an extension frame the media layer handed on is, when it is this type and long
            /// enough (a longer one is read to its fixed part: later versions may grow it).
            pub fn read(header: &ExtensionHeader, bytes: &[u8]) -> Option<Self> {
                if header.frame_type != Self::FRAME_TYPE || bytes.len() < Self::LENGTH {
                    return None;
                }
                Some(bytemuck::pod_read_unaligned(&bytes[..Self::LENGTH]))
            }
        }
    };
}
read_extension!(CommitPositionFrame);

impl AppendPositionFrame {
    /// The frame an extension frame the media layer handed on is, when it is one: of this version (a longer
    /// one is read to its fixed part: later versions may grow it), or of the version before, whose 40
    /// bytes end before the commit position (read as 0, none known).
    pub fn read(header: &ExtensionHeader, bytes: &[u8]) -> Option<Self> {
        if header.frame_type != Self::FRAME_TYPE || bytes.len() < SHORT_APPEND_POSITION_LENGTH {
            return None;
        }
        let mut frame = Self::zeroed();
        let length = bytes.len().min(Self::LENGTH);
        bytemuck::bytes_of_mut(&mut frame)[..length].copy_from_slice(&bytes[..length]);
        Some(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{parse, EncodeError, Frame};

    fn i64_at(b: &[u8], at: usize) -> i64 {
        i64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn position_frames_round_trip_through_the_media_as_extension_frames() {
        let ack = AppendPositionFrame {
            session_id: 1,
            stream_id: 2,
            leadership_term_id: 3,
            log_position: 1 << 40,
            member_id: 2,
            ..AppendPositionFrame::default()
        };
        let mut buf = [0u8; 48];
        assert_eq!(ack.encode(&mut buf), Ok(48));
        assert_eq!(u16::from_le_bytes([buf[6], buf[7]]), TYPE_APPEND_POSITION);
        assert_eq!((i64_at(&buf, 16), i64_at(&buf, 24), i64_at(&buf, 40)), (3, 1 << 40, 0));
        let Ok(Frame::Extension { header, bytes }) = parse(&buf) else { panic!("an extension frame") };
        assert_eq!(AppendPositionFrame::read(&header, bytes), Some(ack));
        assert_eq!(CommitPositionFrame::read(&header, bytes), None, "another type");
        // The version before's 40 bytes, without the commit position: read as none known.
        let with_commit = AppendPositionFrame { commit_position: 4096, ..ack };
        with_commit.encode(&mut buf).unwrap();
        buf[..4].copy_from_slice(&40i32.to_le_bytes());
        let Ok(Frame::Extension { header, bytes }) = parse(&buf[..40]) else { panic!("an extension frame") };
        let short = AppendPositionFrame { frame_length: 40, ..ack };
        assert_eq!(AppendPositionFrame::read(&header, bytes), Some(short));
        let mut buf = [0u8; 40];

        let commit = CommitPositionFrame { session_id: 1, log_position: 4096, ..CommitPositionFrame::default() };
        assert_eq!(commit.encode(&mut buf), Ok(40));
        let Ok(Frame::Extension { header, bytes }) = parse(&buf) else { panic!("an extension frame") };
        assert_eq!((header.session_id, CommitPositionFrame::read(&header, bytes)), (1, Some(commit)));
        assert_eq!(commit.encode(&mut [0; 39]), Err(EncodeError::BufferTooShort { need: 40, have: 39 }));
    }

    #[test]
    fn a_term_start_marker_is_the_medias_marker_with_a_term() {
        assert_eq!(term_start_of(TERM_START_FLAG, &7i64.to_le_bytes()), Some(7));
        assert_eq!(term_start_of(SESSION_FLAG, &7i64.to_le_bytes()), None, "another flag");
        assert_eq!(term_start_of(TERM_START_FLAG, &(-1i64).to_le_bytes()), None, "no negative term");
        assert_eq!(term_start_of(TERM_START_FLAG, &[0; 4]), None, "a term id's length");
    }
}
