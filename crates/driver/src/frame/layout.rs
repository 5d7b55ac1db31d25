//! The frame layouts: one `#[repr(C)]` [`Pod`] struct per frame, each with a compile-time size assert and
//! compile-time asserts of its field offsets (Aeron's offsets for Aeron's frames), and the accessors of
//! their fields.

use bytemuck::{Pod, Zeroable};

use super::*;

/// The 8 bytes every frame starts with.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct FrameHeader {
    /// Length of the frame, unaligned. Never negative on the wire (the top bit is reserved).
    pub frame_length: i32,
    /// [`CURRENT_VERSION`].
    pub version: u8,
    /// Type-specific flags.
    pub flags: u8,
    /// One of the `TYPE_*` constants.
    pub frame_type: u16,
}

/// The 32-byte data frame header, as laid out in a log buffer and on the wire.
///
/// Invariants of a valid data frame: `frame_length` is 0 (heartbeat) or in `32..`, `term_offset` is
/// non-negative and a multiple of [`FRAME_ALIGNMENT`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct DataHeader {
    /// Header plus payload, unaligned; 0 for a heartbeat; for a PAD, the term space it covers.
    pub frame_length: i32,
    /// [`CURRENT_VERSION`].
    pub version: u8,
    /// [`BEGIN_FLAG`], [`END_FLAG`], [`EOS_FLAG`].
    pub flags: u8,
    /// [`TYPE_DATA`] or [`TYPE_PAD`].
    pub frame_type: u16,
    /// Offset of this frame in its term.
    pub term_offset: i32,
    /// Publication session.
    pub session_id: i32,
    /// Stream within the channel.
    pub stream_id: i32,
    /// Term the frame belongs to.
    pub term_id: i32,
    /// Free for the publisher (the commit position when piggybacked, later).
    pub reserved_value: i64,
}

/// A PAD frame has the data header layout with type [`TYPE_PAD`].
pub type PadHeader = DataHeader;

impl DataHeader {
    /// A data header for `session_id`/`stream_id` at (`term_id`, `term_offset`) with `flags`;
    /// `frame_length` and `reserved_value` are 0 (the encoders fill in the length).
    pub const fn new(session_id: i32, stream_id: i32, term_id: i32, term_offset: i32, flags: u8) -> Self {
        Self {
            frame_length: 0,
            version: CURRENT_VERSION,
            flags,
            frame_type: TYPE_DATA,
            term_offset,
            session_id,
            stream_id,
            term_id,
            reserved_value: 0,
        }
    }

    /// True when the flags are exactly B|E|EOS, Aeron's end-of-stream marker.
    pub const fn is_end_of_stream(&self) -> bool {
        self.flags == UNFRAGMENTED | EOS_FLAG
    }
}

/// SETUP (40 bytes): the sender announces the stream's term geometry to receivers.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct SetupFrame {
    /// [`SETUP_LENGTH`].
    pub frame_length: i32,
    /// [`CURRENT_VERSION`].
    pub version: u8,
    /// [`SETUP_SEND_RESPONSE_FLAG`], [`SETUP_GROUP_FLAG`].
    pub flags: u8,
    /// [`TYPE_SETUP`].
    pub frame_type: u16,
    /// Offset in the active term the sender is at.
    pub term_offset: i32,
    /// Publication session.
    pub session_id: i32,
    /// Stream within the channel.
    pub stream_id: i32,
    /// Term id of position 0.
    pub initial_term_id: i32,
    /// Term the sender is in.
    pub active_term_id: i32,
    /// Length of each term, a power of two.
    pub term_length: i32,
    /// Largest datagram the sender sends.
    pub mtu: i32,
    /// Multicast time-to-live (0 for unicast).
    pub ttl: i32,
}

/// STATUS MESSAGE (36 bytes, or 44 with a group tag): a receiver's consumption position and window.
///
/// `receiver_id` is an i64 at offset 28, which is not 8-aligned, so it is stored as little-endian
/// bytes; use [`StatusMessageFrame::receiver_id`] and [`StatusMessageFrame::set_receiver_id`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct StatusMessageFrame {
    /// [`STATUS_MESSAGE_LENGTH`] (or [`STATUS_MESSAGE_WITH_GROUP_TAG_LENGTH`] with a group tag).
    pub frame_length: i32,
    /// [`CURRENT_VERSION`].
    pub version: u8,
    /// [`SM_SEND_SETUP_FLAG`], [`SM_EOS_FLAG`].
    pub flags: u8,
    /// [`TYPE_SM`].
    pub frame_type: u16,
    /// Publication session.
    pub session_id: i32,
    /// Stream within the channel.
    pub stream_id: i32,
    /// Term of the receiver's consumption position.
    pub consumption_term_id: i32,
    /// Offset in that term of the consumption position.
    pub consumption_term_offset: i32,
    /// Bytes beyond the consumption position the sender may send.
    pub receiver_window: i32,
    /// Receiver identity, i64 little-endian.
    pub receiver_id_bytes: [u8; 8],
}

impl StatusMessageFrame {
    /// The receiver id.
    pub const fn receiver_id(&self) -> i64 {
        i64::from_le_bytes(self.receiver_id_bytes)
    }

    /// Sets the receiver id.
    pub fn set_receiver_id(&mut self, receiver_id: i64) {
        self.receiver_id_bytes = receiver_id.to_le_bytes();
    }
}

/// NAK (28 bytes): a receiver asks for a resend of `length` bytes at (`term_id`, `term_offset`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct NakFrame {
    /// [`NAK_LENGTH`].
    pub frame_length: i32,
    /// [`CURRENT_VERSION`].
    pub version: u8,
    /// No flags defined.
    pub flags: u8,
    /// [`TYPE_NAK`].
    pub frame_type: u16,
    /// Publication session.
    pub session_id: i32,
    /// Stream within the channel.
    pub stream_id: i32,
    /// Term of the gap.
    pub term_id: i32,
    /// Offset of the gap in that term.
    pub term_offset: i32,
    /// Length of the gap in bytes.
    pub length: i32,
}

/// RTT measurement (40 bytes): a request, or with [`RTTM_REPLY_FLAG`] the echo of one.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct RttmFrame {
    /// [`RTTM_LENGTH`].
    pub frame_length: i32,
    /// [`CURRENT_VERSION`].
    pub version: u8,
    /// [`RTTM_REPLY_FLAG`].
    pub flags: u8,
    /// [`TYPE_RTTM`].
    pub frame_type: u16,
    /// Publication session.
    pub session_id: i32,
    /// Stream within the channel.
    pub stream_id: i32,
    /// The requester's timestamp, echoed back in the reply (ns).
    pub echo_timestamp: i64,
    /// Time the replier held the request before replying (ns).
    pub reception_delta: i64,
    /// Receiver identity.
    pub receiver_id: i64,
}

/// The fixed part of an extension frame (types [`TYPE_EXTENSION_FIRST`] to [`TYPE_EXTENSION_LAST`]): the
/// common header, then the session and stream it is about, as every control frame has them; its body
/// (`frame_length` bytes in all) is the layer above's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct ExtensionHeader {
    /// The frame's whole length, at least [`EXTENSION_HEADER_LENGTH`].
    pub frame_length: i32,
    /// [`CURRENT_VERSION`].
    pub version: u8,
    /// The layer above's.
    pub flags: u8,
    /// In the extension range.
    pub frame_type: u16,
    /// The publication's session it is about.
    pub session_id: i32,
    /// Its stream.
    pub stream_id: i32,
}

/// BEHIND_RETAINED (40 bytes, quorumcast's own): publisher -> receiver, "you are at `receiver_position`,
/// but I retain the log only from `oldest_retained` (and have sent up to `sender_position`): I cannot
/// repair your gap". Sent instead of answering such a receiver's NAKs, at most once per status interval.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BehindRetainedFrame {
    /// [`BEHIND_RETAINED_LENGTH`].
    pub frame_length: i32,
    /// [`CURRENT_VERSION`].
    pub version: u8,
    /// No flags defined.
    pub flags: u8,
    /// [`TYPE_BEHIND_RETAINED`].
    pub frame_type: u16,
    /// Publication session.
    pub session_id: i32,
    /// Stream within the channel.
    pub stream_id: i32,
    /// The position the receiver reported (offset 16).
    pub receiver_position: i64,
    /// The oldest position the publisher can still resend (offset 24).
    pub oldest_retained: i64,
    /// The publisher's sender position (offset 32).
    pub sender_position: i64,
}

// Sizes, and the field offsets of REFERENCE A.1-A.3 (our consensus frames: our own choice).
macro_rules! assert_layout {
    ($t:ty, $len:expr, $($field:ident @ $off:expr),* $(,)?) => {
        const _: () = assert!(std::mem::size_of::<$t>() == $len);
        $(const _: () = assert!(std::mem::offset_of!($t, $field) == $off);)*
    };
}
assert_layout!(FrameHeader, FRAME_HEADER_LENGTH, frame_length @ 0, version @ 4, flags @ 5, frame_type @ 6);
assert_layout!(DataHeader, DATA_HEADER_LENGTH, frame_length @ FRAME_LENGTH_OFFSET, version @ VERSION_OFFSET,
    flags @ FLAGS_OFFSET, frame_type @ TYPE_OFFSET, term_offset @ TERM_OFFSET_OFFSET,
    session_id @ SESSION_ID_OFFSET, stream_id @ STREAM_ID_OFFSET, term_id @ TERM_ID_OFFSET,
    reserved_value @ RESERVED_VALUE_OFFSET);
assert_layout!(SetupFrame, SETUP_LENGTH, term_offset @ 8, session_id @ 12, stream_id @ 16, initial_term_id @ 20,
    active_term_id @ 24, term_length @ 28, mtu @ 32, ttl @ 36);
assert_layout!(StatusMessageFrame, STATUS_MESSAGE_LENGTH, session_id @ 8, stream_id @ 12,
    consumption_term_id @ 16, consumption_term_offset @ 20, receiver_window @ 24, receiver_id_bytes @ 28);
assert_layout!(NakFrame, NAK_LENGTH, session_id @ 8, stream_id @ 12, term_id @ 16, term_offset @ 20, length @ 24);
assert_layout!(RttmFrame, RTTM_LENGTH, session_id @ 8, stream_id @ 12, echo_timestamp @ 16,
    reception_delta @ 24, receiver_id @ 32);
assert_layout!(ExtensionHeader, EXTENSION_HEADER_LENGTH, session_id @ 8, stream_id @ 12);
assert_layout!(BehindRetainedFrame, BEHIND_RETAINED_LENGTH, session_id @ 8, stream_id @ 12, receiver_position @ 16,
    oldest_retained @ 24, sender_position @ 32);
