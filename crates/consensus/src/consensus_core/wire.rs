//! The consensus messages on the wire: one `#[repr(C)]` [`Pod`] frame per layout (little-endian, in the
//! style of [`crate::frame`]), each with compile-time size and offset asserts, and [`encode`] /
//! [`decode`] between a [`Message`] and bytes.
//!
//! Acknowledgements and commit positions reuse [`AppendPositionFrame`] (0x40) and
//! [`CommitPositionFrame`] (0x41): they already carry a leadership term, a log position and the sender.
//! Their `session_id`/`stream_id` identify the log stream, which is the transport's business: [`encode`]
//! writes 0 and [`decode`] ignores them. The election frames are new, with type ids from 0x42:
//!
//! | type | frame | message |
//! |------|-------|---------|
//! | 0x42 | [`ElectionRequestFrame`] (48) | [`Message::Canvass`] |
//! | 0x43 | [`ElectionReplyFrame`] (32) | [`Message::CanvassReply`] |
//! | 0x44 | [`ElectionRequestFrame`] (48) | [`Message::RequestVote`] |
//! | 0x45 | [`ElectionReplyFrame`] (32) | [`Message::Vote`] |
//! | 0x46 | [`NewLeadershipTermFrame`] (56) | [`Message::NewLeadershipTerm`] |
//! | 0x47 | [`TermQueryFrame`] (40) | [`Message::TermQuery`] |
//! | 0x48 | [`TimeoutNowFrame`] (32) | [`Message::TimeoutNow`] |
//!
//! [`decode`] accepts any bytes at any alignment: it copies the frame out with
//! [`bytemuck::pod_read_unaligned`] after checked slicing, and reports bad input as a [`FrameError`],
//! never a panic. It checks the frame's form only (version, type, length); what the values mean is
//! checked by the core.

use bytemuck::{Pod, Zeroable};

use crate::frame::{
    self, EncodeError, Frame, FrameError, FrameHeader, LengthProblem, CURRENT_VERSION, FRAME_HEADER_LENGTH,
};
use crate::frames::{AppendPositionFrame, CommitPositionFrame, TYPE_APPEND_POSITION, TYPE_COMMIT_POSITION};

use super::message::Message;
use super::MemberId;

/// Canvass (pre-vote) request.
pub const TYPE_CANVASS: u16 = 0x42;
/// Canvass reply.
pub const TYPE_CANVASS_REPLY: u16 = 0x43;
/// Vote request.
pub const TYPE_REQUEST_VOTE: u16 = 0x44;
/// Vote.
pub const TYPE_VOTE: u16 = 0x45;
/// New leadership term (announcement, and answer to a term query).
pub const TYPE_NEW_LEADERSHIP_TERM: u16 = 0x46;
/// Term query.
pub const TYPE_TERM_QUERY: u16 = 0x47;
/// TIMEOUT_NOW: a leader hands its leadership to the receiver.
pub const TYPE_TIMEOUT_NOW: u16 = 0x48;

/// Length of an [`ElectionRequestFrame`].
pub const ELECTION_REQUEST_LENGTH: usize = 48;
/// Length of an [`ElectionReplyFrame`].
pub const ELECTION_REPLY_LENGTH: usize = 32;
/// Length of a [`NewLeadershipTermFrame`].
pub const NEW_LEADERSHIP_TERM_LENGTH: usize = 56;
/// Length of a [`TermQueryFrame`].
pub const TERM_QUERY_LENGTH: usize = 40;
/// Length of a TIMEOUT_NOW frame.
pub const TIMEOUT_NOW_LENGTH: usize = 32;
/// The longest consensus frame: a buffer this long fits any of them.
pub const MAX_CONSENSUS_FRAME_LENGTH: usize = NEW_LEADERSHIP_TERM_LENGTH;

/// Election reply flag: the canvass or vote is granted.
pub const GRANTED_FLAG: u8 = 0x80;

/// CANVASS and REQUEST_VOTE (48 bytes): "would you vote / vote for me in `candidate_term_id`".
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct ElectionRequestFrame {
    /// [`ELECTION_REQUEST_LENGTH`].
    pub frame_length: i32,
    /// [`CURRENT_VERSION`].
    pub version: u8,
    /// No flags defined.
    pub flags: u8,
    /// [`TYPE_CANVASS`] or [`TYPE_REQUEST_VOTE`].
    pub frame_type: u16,
    /// The sender (offset 8).
    pub member_id: i32,
    /// Written as 0, ignored on read.
    pub reserved: i32,
    /// The term the sender stands in (offset 16).
    pub candidate_term_id: i64,
    /// The term of the last byte of the sender's log (offset 24).
    pub log_leadership_term_id: i64,
    /// The sender's append position (offset 32).
    pub log_position: i64,
    /// The sender's membership hash (offset 40).
    pub membership_hash: u64,
}

/// CANVASS_REPLY and VOTE (32 bytes); [`GRANTED_FLAG`] in `flags` grants.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct ElectionReplyFrame {
    /// [`ELECTION_REPLY_LENGTH`].
    pub frame_length: i32,
    /// [`CURRENT_VERSION`].
    pub version: u8,
    /// [`GRANTED_FLAG`] or 0.
    pub flags: u8,
    /// [`TYPE_CANVASS_REPLY`] or [`TYPE_VOTE`].
    pub frame_type: u16,
    /// The replier (offset 8).
    pub member_id: i32,
    /// Written as 0, ignored on read.
    pub reserved: i32,
    /// The replier's leadership term (offset 16).
    pub leadership_term_id: i64,
    /// The candidate term of the request answered (offset 24).
    pub candidate_term_id: i64,
}

/// NEW_LEADERSHIP_TERM (56 bytes): the leader's term, and where one of its log's terms ends.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct NewLeadershipTermFrame {
    /// [`NEW_LEADERSHIP_TERM_LENGTH`].
    pub frame_length: i32,
    /// [`CURRENT_VERSION`].
    pub version: u8,
    /// No flags defined.
    pub flags: u8,
    /// [`TYPE_NEW_LEADERSHIP_TERM`].
    pub frame_type: u16,
    /// The leader (offset 8).
    pub member_id: i32,
    /// Written as 0, ignored on read.
    pub reserved: i32,
    /// The leader's term (offset 16).
    pub leadership_term_id: i64,
    /// A term of the leader's log (offset 24).
    pub log_leadership_term_id: i64,
    /// The term after it in the leader's log (offset 32).
    pub next_leadership_term_id: i64,
    /// Where that next term starts (offset 40).
    pub next_term_base_position: i64,
    /// The leader's commit position (offset 48).
    pub commit_position: i64,
}

/// TIMEOUT_NOW (32 bytes): the leader tells a follower to stand for election now.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct TimeoutNowFrame {
    /// [`TIMEOUT_NOW_LENGTH`].
    pub frame_length: i32,
    /// [`CURRENT_VERSION`].
    pub version: u8,
    /// No flags defined.
    pub flags: u8,
    /// [`TYPE_TIMEOUT_NOW`].
    pub frame_type: u16,
    /// The leader (offset 8).
    pub member_id: i32,
    /// Written as 0, ignored on read.
    pub reserved: i32,
    /// The leader's term (offset 16).
    pub leadership_term_id: i64,
    /// The leader's append position (offset 24).
    pub log_position: i64,
}

/// TERM_QUERY (40 bytes): a follower asks where its last term ends in the leader's log.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct TermQueryFrame {
    /// [`TERM_QUERY_LENGTH`].
    pub frame_length: i32,
    /// [`CURRENT_VERSION`].
    pub version: u8,
    /// No flags defined.
    pub flags: u8,
    /// [`TYPE_TERM_QUERY`].
    pub frame_type: u16,
    /// The follower (offset 8).
    pub member_id: i32,
    /// Written as 0, ignored on read.
    pub reserved: i32,
    /// The leader's term (offset 16).
    pub leadership_term_id: i64,
    /// The term of the last byte of the follower's log (offset 24).
    pub log_leadership_term_id: i64,
    /// The follower's append position (offset 32).
    pub log_position: i64,
}

macro_rules! assert_layout {
    ($t:ty, $len:expr, $($field:ident @ $off:expr),* $(,)?) => {
        const _: () = assert!(std::mem::size_of::<$t>() == $len);
        $(const _: () = assert!(std::mem::offset_of!($t, $field) == $off);)*
    };
}
assert_layout!(ElectionRequestFrame, ELECTION_REQUEST_LENGTH, frame_length @ 0, version @ 4, flags @ 5,
    frame_type @ 6, member_id @ 8, reserved @ 12, candidate_term_id @ 16, log_leadership_term_id @ 24,
    log_position @ 32, membership_hash @ 40);
assert_layout!(ElectionReplyFrame, ELECTION_REPLY_LENGTH, frame_length @ 0, version @ 4, flags @ 5,
    frame_type @ 6, member_id @ 8, reserved @ 12, leadership_term_id @ 16, candidate_term_id @ 24);
assert_layout!(NewLeadershipTermFrame, NEW_LEADERSHIP_TERM_LENGTH, frame_length @ 0, version @ 4, flags @ 5,
    frame_type @ 6, member_id @ 8, reserved @ 12, leadership_term_id @ 16, log_leadership_term_id @ 24,
    next_leadership_term_id @ 32, next_term_base_position @ 40, commit_position @ 48);
assert_layout!(TermQueryFrame, TERM_QUERY_LENGTH, frame_length @ 0, version @ 4, flags @ 5, frame_type @ 6,
    member_id @ 8, reserved @ 12, leadership_term_id @ 16, log_leadership_term_id @ 24, log_position @ 32);
assert_layout!(TimeoutNowFrame, TIMEOUT_NOW_LENGTH, frame_length @ 0, version @ 4, flags @ 5, frame_type @ 6,
    member_id @ 8, reserved @ 12, leadership_term_id @ 16, log_position @ 24);

/// A valid common header for a frame of `frame_type` and `length` bytes.
const fn header(frame_type: u16, length: usize, flags: u8) -> FrameHeader {
    FrameHeader { frame_length: length as i32, version: CURRENT_VERSION, flags, frame_type }
}

/// Writes `message`, sent by `sender`, at the start of `dst`; returns the frame's length (at most
/// [`MAX_CONSENSUS_FRAME_LENGTH`]).
pub fn encode(sender: MemberId, message: &Message, dst: &mut [u8]) -> Result<usize, EncodeError> {
    match *message {
        Message::Canvass { candidate_term_id, log_leadership_term_id, log_position, membership_hash }
        | Message::RequestVote { candidate_term_id, log_leadership_term_id, log_position, membership_hash } => {
            let frame_type = if matches!(message, Message::Canvass { .. }) { TYPE_CANVASS } else { TYPE_REQUEST_VOTE };
            let h = header(frame_type, ELECTION_REQUEST_LENGTH, 0);
            let frame = ElectionRequestFrame {
                frame_length: h.frame_length,
                version: h.version,
                flags: h.flags,
                frame_type: h.frame_type,
                member_id: sender,
                reserved: 0,
                candidate_term_id,
                log_leadership_term_id,
                log_position,
                membership_hash,
            };
            write(dst, bytemuck::bytes_of(&frame))
        }
        Message::CanvassReply { leadership_term_id, candidate_term_id, granted }
        | Message::Vote { leadership_term_id, candidate_term_id, granted } => {
            let frame_type =
                if matches!(message, Message::CanvassReply { .. }) { TYPE_CANVASS_REPLY } else { TYPE_VOTE };
            let h = header(frame_type, ELECTION_REPLY_LENGTH, if granted { GRANTED_FLAG } else { 0 });
            let frame = ElectionReplyFrame {
                frame_length: h.frame_length,
                version: h.version,
                flags: h.flags,
                frame_type: h.frame_type,
                member_id: sender,
                reserved: 0,
                leadership_term_id,
                candidate_term_id,
            };
            write(dst, bytemuck::bytes_of(&frame))
        }
        Message::NewLeadershipTerm {
            leadership_term_id,
            log_leadership_term_id,
            next_leadership_term_id,
            next_term_base_position,
            commit_position,
        } => {
            let h = header(TYPE_NEW_LEADERSHIP_TERM, NEW_LEADERSHIP_TERM_LENGTH, 0);
            let frame = NewLeadershipTermFrame {
                frame_length: h.frame_length,
                version: h.version,
                flags: h.flags,
                frame_type: h.frame_type,
                member_id: sender,
                reserved: 0,
                leadership_term_id,
                log_leadership_term_id,
                next_leadership_term_id,
                next_term_base_position,
                commit_position,
            };
            write(dst, bytemuck::bytes_of(&frame))
        }
        Message::TermQuery { leadership_term_id, log_leadership_term_id, log_position } => {
            let h = header(TYPE_TERM_QUERY, TERM_QUERY_LENGTH, 0);
            let frame = TermQueryFrame {
                frame_length: h.frame_length,
                version: h.version,
                flags: h.flags,
                frame_type: h.frame_type,
                member_id: sender,
                reserved: 0,
                leadership_term_id,
                log_leadership_term_id,
                log_position,
            };
            write(dst, bytemuck::bytes_of(&frame))
        }
        Message::TimeoutNow { leadership_term_id, log_position } => {
            let h = header(TYPE_TIMEOUT_NOW, TIMEOUT_NOW_LENGTH, 0);
            let frame = TimeoutNowFrame {
                frame_length: h.frame_length,
                version: h.version,
                flags: h.flags,
                frame_type: h.frame_type,
                member_id: sender,
                reserved: 0,
                leadership_term_id,
                log_position,
            };
            write(dst, bytemuck::bytes_of(&frame))
        }
        Message::AppendPosition { leadership_term_id, log_position, commit_position } => {
            let frame = AppendPositionFrame {
                leadership_term_id,
                log_position,
                commit_position,
                member_id: sender,
                ..AppendPositionFrame::default()
            };
            frame.encode(dst)
        }
        Message::CommitPosition { leadership_term_id, log_position } => {
            let frame = CommitPositionFrame {
                leadership_term_id,
                log_position,
                leader_member_id: sender,
                ..CommitPositionFrame::default()
            };
            frame.encode(dst)
        }
    }
}

/// Reads the consensus frame at the start of `bytes`: its sender and message. Bytes after the frame are
/// ignored. Any bytes give a value or an error, never a panic.
pub fn decode(bytes: &[u8]) -> Result<(MemberId, Message), FrameError> {
    let common: FrameHeader = read(bytes)?;
    if common.version != CURRENT_VERSION {
        return Err(FrameError::BadVersion { version: common.version });
    }
    match common.frame_type {
        TYPE_CANVASS | TYPE_REQUEST_VOTE => {
            let f: ElectionRequestFrame = read_checked(bytes, &common)?;
            let (candidate_term_id, log_leadership_term_id, log_position, membership_hash) =
                (f.candidate_term_id, f.log_leadership_term_id, f.log_position, f.membership_hash);
            let message = if f.frame_type == TYPE_CANVASS {
                Message::Canvass { candidate_term_id, log_leadership_term_id, log_position, membership_hash }
            } else {
                Message::RequestVote { candidate_term_id, log_leadership_term_id, log_position, membership_hash }
            };
            Ok((f.member_id, message))
        }
        TYPE_CANVASS_REPLY | TYPE_VOTE => {
            let f: ElectionReplyFrame = read_checked(bytes, &common)?;
            let (leadership_term_id, candidate_term_id) = (f.leadership_term_id, f.candidate_term_id);
            let granted = f.flags & GRANTED_FLAG != 0;
            let message = if f.frame_type == TYPE_CANVASS_REPLY {
                Message::CanvassReply { leadership_term_id, candidate_term_id, granted }
            } else {
                Message::Vote { leadership_term_id, candidate_term_id, granted }
            };
            Ok((f.member_id, message))
        }
        TYPE_NEW_LEADERSHIP_TERM => {
            let f: NewLeadershipTermFrame = read_checked(bytes, &common)?;
            let message = Message::NewLeadershipTerm {
                leadership_term_id: f.leadership_term_id,
                log_leadership_term_id: f.log_leadership_term_id,
                next_leadership_term_id: f.next_leadership_term_id,
                next_term_base_position: f.next_term_base_position,
                commit_position: f.commit_position,
            };
            Ok((f.member_id, message))
        }
        TYPE_TIMEOUT_NOW => {
            let f: TimeoutNowFrame = read_checked(bytes, &common)?;
            let message =
                Message::TimeoutNow { leadership_term_id: f.leadership_term_id, log_position: f.log_position };
            Ok((f.member_id, message))
        }
        TYPE_TERM_QUERY => {
            let f: TermQueryFrame = read_checked(bytes, &common)?;
            let message = Message::TermQuery {
                leadership_term_id: f.leadership_term_id,
                log_leadership_term_id: f.log_leadership_term_id,
                log_position: f.log_position,
            };
            Ok((f.member_id, message))
        }
        TYPE_APPEND_POSITION | TYPE_COMMIT_POSITION => {
            let Frame::Extension { header, bytes } = frame::parse(bytes)? else {
                return Err(FrameError::UnknownType { frame_type: common.frame_type });
            };
            if let Some(f) = AppendPositionFrame::read(&header, bytes) {
                let message = Message::AppendPosition {
                    leadership_term_id: f.leadership_term_id,
                    log_position: f.log_position,
                    commit_position: f.commit_position,
                };
                Ok((f.member_id, message))
            } else if let Some(f) = CommitPositionFrame::read(&header, bytes) {
                let message =
                    Message::CommitPosition { leadership_term_id: f.leadership_term_id, log_position: f.log_position };
                Ok((f.leader_member_id, message))
            } else {
                Err(FrameError::UnknownType { frame_type: common.frame_type })
            }
        }
        frame_type => Err(FrameError::UnknownType { frame_type }),
    }
}

/// Copies `bytes` to the start of `dst`.
fn write(dst: &mut [u8], bytes: &[u8]) -> Result<usize, EncodeError> {
    let have = dst.len();
    let slot = dst.get_mut(..bytes.len()).ok_or(EncodeError::BufferTooShort { need: bytes.len(), have })?;
    slot.copy_from_slice(bytes);
    Ok(bytes.len())
}

/// Copies a `T` out of the start of `bytes`, at any alignment.
fn read<T: Pod>(bytes: &[u8]) -> Result<T, FrameError> {
    let need = std::mem::size_of::<T>().max(FRAME_HEADER_LENGTH);
    let fixed = bytes.get(..std::mem::size_of::<T>()).ok_or(FrameError::Truncated { need, have: bytes.len() })?;
    Ok(bytemuck::pod_read_unaligned(fixed))
}

/// Copies a `T` out of `bytes` and checks the header's `frame_length`: at least `T`'s size and within
/// `bytes`.
fn read_checked<T: Pod>(bytes: &[u8], common: &FrameHeader) -> Result<T, FrameError> {
    let frame: T = read(bytes)?;
    let min = std::mem::size_of::<T>();
    let problem = match usize::try_from(common.frame_length) {
        Err(_) => Some(LengthProblem::Negative),
        Ok(length) if length < min => Some(LengthProblem::BelowMinimum { min }),
        Ok(length) if length > bytes.len() => Some(LengthProblem::BeyondDatagram { have: bytes.len() }),
        Ok(_) => None,
    };
    match problem {
        Some(problem) => {
            Err(FrameError::BadLength { frame_type: common.frame_type, frame_length: common.frame_length, problem })
        }
        None => Ok(frame),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn message() -> impl Strategy<Value = Message> {
        let i = any::<i64>;
        prop_oneof![
            (i(), i(), i(), any::<u64>()).prop_map(|(a, b, c, h)| Message::Canvass {
                candidate_term_id: a,
                log_leadership_term_id: b,
                log_position: c,
                membership_hash: h
            }),
            (i(), i(), any::<bool>()).prop_map(|(a, b, g)| Message::CanvassReply {
                leadership_term_id: a,
                candidate_term_id: b,
                granted: g
            }),
            (i(), i(), i(), any::<u64>()).prop_map(|(a, b, c, h)| Message::RequestVote {
                candidate_term_id: a,
                log_leadership_term_id: b,
                log_position: c,
                membership_hash: h
            }),
            (i(), i(), any::<bool>()).prop_map(|(a, b, g)| Message::Vote {
                leadership_term_id: a,
                candidate_term_id: b,
                granted: g
            }),
            (i(), i(), i(), i(), i()).prop_map(|(a, b, c, d, e)| Message::NewLeadershipTerm {
                leadership_term_id: a,
                log_leadership_term_id: b,
                next_leadership_term_id: c,
                next_term_base_position: d,
                commit_position: e
            }),
            (i(), i(), i()).prop_map(|(a, b, c)| Message::TermQuery {
                leadership_term_id: a,
                log_leadership_term_id: b,
                log_position: c
            }),
            (i(), i(), i()).prop_map(|(a, b, c)| Message::AppendPosition {
                leadership_term_id: a,
                log_position: b,
                commit_position: c
            }),
            (i(), i()).prop_map(|(a, b)| Message::CommitPosition { leadership_term_id: a, log_position: b }),
            (i(), i()).prop_map(|(a, b)| Message::TimeoutNow { leadership_term_id: a, log_position: b }),
        ]
    }

    proptest! {
        /// Every message comes back as it went, with its sender, from any offset of a larger buffer.
        #[test]
        fn round_trip(sender in any::<i32>(), message in message(), offset in 0usize..8, tail in 0usize..16) {
            let mut buf = vec![0u8; offset + MAX_CONSENSUS_FRAME_LENGTH + tail];
            let length = encode(sender, &message, &mut buf[offset..]).unwrap();
            prop_assert!(length <= MAX_CONSENSUS_FRAME_LENGTH);
            prop_assert_eq!(decode(&buf[offset..offset + length + tail]), Ok((sender, message)));
            prop_assert!(decode(&buf[offset..offset + length - 1]).is_err(), "a truncated frame is refused");
        }

        /// Random bytes never panic the decoder, and whatever it accepts encodes back to an equal frame.
        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..96)) {
            if let Ok((sender, message)) = decode(&bytes) {
                let mut buf = [0u8; MAX_CONSENSUS_FRAME_LENGTH];
                let length = encode(sender, &message, &mut buf).unwrap();
                prop_assert_eq!(decode(&buf[..length]), Ok((sender, message)));
            }
        }

        /// Random bytes under a valid consensus header (the decoder's deeper paths) never panic either.
        #[test]
        fn random_bodies_never_panic(
            frame_type in 0x40u16..0x48,
            frame_length in any::<i32>(),
            body in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut bytes = frame_length.to_le_bytes().to_vec();
            bytes.extend_from_slice(&[CURRENT_VERSION, 0]);
            bytes.extend_from_slice(&frame_type.to_le_bytes());
            bytes.extend_from_slice(&body);
            let _ = decode(&bytes);
        }
    }

    #[test]
    fn short_buffers_and_foreign_frames_are_refused() {
        let message = Message::Vote { leadership_term_id: 3, candidate_term_id: 3, granted: true };
        let mut small = [0u8; ELECTION_REPLY_LENGTH - 1];
        assert!(matches!(encode(1, &message, &mut small), Err(EncodeError::BufferTooShort { .. })));
        let mut buf = [0u8; 64];
        let length = encode(1, &message, &mut buf).unwrap();
        assert_eq!(buf[5], GRANTED_FLAG);
        assert_eq!(u16::from_le_bytes([buf[6], buf[7]]), TYPE_VOTE);
        buf[4] = 9;
        assert_eq!(decode(&buf[..length]), Err(FrameError::BadVersion { version: 9 }));
        let data = [0x20, 0, 0, 0, 0, 0xC0, 0x01, 0x00];
        assert_eq!(decode(&data), Err(FrameError::UnknownType { frame_type: 0x01 }));
    }
}
