//! Wire and log frame formats (little-endian), after Aeron's protocol.
//!
//! Every frame starts with the same 8-byte [`FrameHeader`]: `frame_length: i32`, `version: u8`,
//! `flags: u8`, `frame_type: u16`. Data frames have a 32-byte [`DataHeader`]; frames in a log buffer
//! start on [`FRAME_ALIGNMENT`]-byte boundaries and their length field holds the unaligned length.
//!
//! The module has three parts:
//!
//! - **layouts**: one `#[repr(C)]` [`Pod`] struct per frame, each with a compile-time size assert and
//!   compile-time asserts of its field offsets (Aeron's offsets for Aeron's frames);
//! - **encoding**: [`encode_data`], [`encode_pad`], [`encode_heartbeat`] and an `encode` method on
//!   every control frame write one frame into a `&mut [u8]` and return its length;
//! - **parsing**: [`parse`] reads the frame at the start of a datagram into a typed [`Frame`], and
//!   [`frames`] walks every frame a datagram carries. Both accept any bytes at any alignment: they copy
//!   headers out with [`bytemuck::pod_read_unaligned`], use only checked slicing and arithmetic, and
//!   report bad input as a [`FrameError`], never a panic.
//!
//! Datagram layout: a datagram carries one or more whole frames. Each frame starts at a multiple of
//! [`FRAME_ALIGNMENT`] from the start of the datagram, so a frame is followed by padding up to the next
//! multiple of 32, except the last frame of a datagram, which may end unpadded. On the wire a PAD frame
//! is only its 32-byte header (its `frame_length` says how much term space it covers), and a heartbeat
//! is a 32-byte data header whose `frame_length` is 0.

use std::fmt;

use bytemuck::{Pod, Zeroable};

// ---------------------------------------------------------------------------------------------------
// Constants
// ---------------------------------------------------------------------------------------------------

/// Frames in a log buffer (and in a datagram) start at multiples of this many bytes.
pub const FRAME_ALIGNMENT: usize = 32;
/// Length of the header common to every frame.
pub const FRAME_HEADER_LENGTH: usize = 8;
/// Length of a data frame header; its payload starts here.
pub const DATA_HEADER_LENGTH: usize = 32;
/// Length of a SETUP frame.
pub const SETUP_LENGTH: usize = 40;
/// Length of a SETUP frame carrying quorumcast's 8-byte membership tag at offset 40.
pub const SETUP_WITH_MEMBERSHIP_LENGTH: usize = SETUP_LENGTH + 8;
/// Length of a STATUS MESSAGE frame without the optional group tag.
pub const STATUS_MESSAGE_LENGTH: usize = 36;
/// Length of a STATUS MESSAGE frame carrying the optional 8-byte group tag at offset 36.
pub const STATUS_MESSAGE_WITH_GROUP_TAG_LENGTH: usize = STATUS_MESSAGE_LENGTH + 8;
/// Length of a NAK frame.
pub const NAK_LENGTH: usize = 28;
/// Length of an RTT measurement frame.
pub const RTTM_LENGTH: usize = 40;
/// Length of an extension frame's fixed part ([`ExtensionHeader`]): the common header, session and stream.
pub const EXTENSION_HEADER_LENGTH: usize = 16;
/// Length of a BEHIND_RETAINED frame.
pub const BEHIND_RETAINED_LENGTH: usize = 40;
/// Largest UDP payload a frame run may fill: 65535 - 8 (UDP) - 20 (IPv4), rounded down to 32.
pub const MAX_UDP_PAYLOAD_LENGTH: usize = 65504;
/// Protocol version carried in every frame.
pub const CURRENT_VERSION: u8 = 0;

/// Offset of `frame_length` (i32) in every frame.
pub const FRAME_LENGTH_OFFSET: usize = 0;
/// Offset of `version` (u8).
pub const VERSION_OFFSET: usize = 4;
/// Offset of `flags` (u8).
pub const FLAGS_OFFSET: usize = 5;
/// Offset of `frame_type` (u16).
pub const TYPE_OFFSET: usize = 6;
/// Offset of `term_offset` (i32) in a data frame.
pub const TERM_OFFSET_OFFSET: usize = 8;
/// Offset of `session_id` (i32) in a data frame.
pub const SESSION_ID_OFFSET: usize = 12;
/// Offset of `stream_id` (i32) in a data frame.
pub const STREAM_ID_OFFSET: usize = 16;
/// Offset of `term_id` (i32) in a data frame.
pub const TERM_ID_OFFSET: usize = 20;
/// Offset of `reserved_value` (i64) in a data frame.
pub const RESERVED_VALUE_OFFSET: usize = 24;

/// Data flag: begin fragment, the first frame of a message.
pub const BEGIN_FLAG: u8 = 0x80;
/// Data flag: end fragment, the last frame of a message.
pub const END_FLAG: u8 = 0x40;
/// Data flags of a message in one frame.
pub const UNFRAGMENTED: u8 = BEGIN_FLAG | END_FLAG;
/// Data flag: end of stream (set with [`UNFRAGMENTED`] on the last heartbeat of a closed publication).
pub const EOS_FLAG: u8 = 0x20;
/// Data flag: a marker. The log's writer puts an unfragmented data frame flagged so, whose payload starts
/// with an 8-byte value of its own (little-endian, not negative; bytes of the writer's may follow it), into
/// the log for the log's readers; it is not a message, and readers of messages skip it. The media layer carries it as any frame and reports where
/// each one is ([`DataRun::markers`]) without knowing what it means (a cluster opens each leadership term
/// with one: `cluster::frames::TERM_START_FLAG`).
pub const MARKER_FLAG: u8 = 0x10;
/// Data flag: set by the log's writer on every fragment of a message, and carried with it through
/// replication, recording and catch-up like the fragment flags; what it means is the writer's (a
/// cluster flags client session entries with it: `cluster::frames::SESSION_FLAG`).
pub const APPLICATION_FLAG: u8 = 0x08;
/// Least payload length of a marker: its value.
pub const MARKER_LENGTH: usize = 8;
/// STATUS MESSAGE flag: the receiver asks the sender for a SETUP frame.
pub const SM_SEND_SETUP_FLAG: u8 = 0x80;
/// STATUS MESSAGE flag: the receiver is leaving (end of stream).
pub const SM_EOS_FLAG: u8 = 0x40;
/// SETUP flag: the sender asks for a response setup.
pub const SETUP_SEND_RESPONSE_FLAG: u8 = 0x80;
/// SETUP flag: group semantics (multicast or multi-destination); receivers delay NAKs.
pub const SETUP_GROUP_FLAG: u8 = 0x40;
/// RTT measurement flag: this frame is the reply to a measurement request.
pub const RTTM_REPLY_FLAG: u8 = 0x80;

/// Padding frame type (fills the tail of a term).
pub const TYPE_PAD: u16 = 0x00;
/// Data frame type (also the type of a heartbeat).
pub const TYPE_DATA: u16 = 0x01;
/// Negative acknowledgement: a receiver asks for a resend of a range.
pub const TYPE_NAK: u16 = 0x02;
/// Status message: a receiver's consumption position and window.
pub const TYPE_SM: u16 = 0x03;
/// Error frame (Aeron's; not parsed by quorumcast).
pub const TYPE_ERR: u16 = 0x04;
/// Setup: the sender announces a stream's term geometry.
pub const TYPE_SETUP: u16 = 0x05;
/// Round-trip-time measurement.
pub const TYPE_RTTM: u16 = 0x06;
/// The first type of the extension range: control frames of the layer above the media (a cluster's
/// acknowledgements and commit positions, `cluster::frames`), which the media layer parses as far as their
/// [`ExtensionHeader`] and hands on whole ([`Frame::Extension`]), as Aeron's driver knows nothing of Aeron
/// Cluster.
pub const TYPE_EXTENSION_FIRST: u16 = 0x40;
/// The last type of the extension range.
pub const TYPE_EXTENSION_LAST: u16 = 0x4F;

/// The publisher tells a receiver that its position is older than anything the publisher still retains,
/// so its NAKs cannot be answered (quorumcast's own type). A frame of the media layer itself, as Aeron's
/// ERR frame is: it is about the publication's retained window, not about what the log means.
pub const TYPE_BEHIND_RETAINED: u16 = 0x50;

/// Rounds `length` up to [`FRAME_ALIGNMENT`]. `length` must be at most `usize::MAX - 31`.
#[inline]
pub const fn align_frame(length: usize) -> usize {
    (length + FRAME_ALIGNMENT - 1) & !(FRAME_ALIGNMENT - 1)
}

/// Bytes a message of `msg` bytes occupies in a log when unfragmented: `align32(msg + 32)`.
#[inline]
pub const fn framed_length(msg: usize) -> usize {
    align_frame(msg + DATA_HEADER_LENGTH)
}

// ---------------------------------------------------------------------------------------------------
// Layouts
// ---------------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------------

/// What is wrong with a `frame_length` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LengthProblem {
    /// Negative: the reserved top bit is set (or the frame is still being written in a log).
    Negative,
    /// Shorter than the frame type's fixed part.
    BelowMinimum {
        /// Smallest valid length for the type.
        min: usize,
    },
    /// Longer than the bytes left in the datagram.
    BeyondDatagram {
        /// Bytes left in the datagram from the start of the frame.
        have: usize,
    },
    /// `term_offset + frame_length` does not fit in an i32.
    EndOverflows,
}

/// Why bytes could not be read as a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer bytes than the frame's fixed part.
    Truncated {
        /// Bytes the fixed part needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A version other than [`CURRENT_VERSION`].
    BadVersion {
        /// The version found.
        version: u8,
    },
    /// A frame type quorumcast does not parse.
    UnknownType {
        /// The type found.
        frame_type: u16,
    },
    /// An invalid `frame_length`.
    BadLength {
        /// The frame's type.
        frame_type: u16,
        /// The length found.
        frame_length: i32,
        /// What is wrong with it.
        problem: LengthProblem,
    },
    /// A data or pad `term_offset` that is negative or not a multiple of [`FRAME_ALIGNMENT`].
    BadTermOffset {
        /// The offset found.
        term_offset: i32,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Truncated { need, have } => {
                write!(f, "frame truncated: its fixed part needs {need} bytes but only {have} are left; the datagram was cut short")
            }
            Self::BadVersion { version } => {
                write!(f, "frame version {version} is not supported; the peer must send version {CURRENT_VERSION}")
            }
            Self::UnknownType { frame_type } => {
                write!(f, "frame type {frame_type:#06x} is not a type quorumcast parses; drop the datagram")
            }
            Self::BadLength { frame_type, frame_length, problem } => {
                write!(f, "frame type {frame_type:#06x} has invalid frame_length {frame_length}: ")?;
                match problem {
                    LengthProblem::Negative => write!(f, "it is negative (reserved top bit set)"),
                    LengthProblem::BelowMinimum { min } => write!(f, "it must be at least {min}"),
                    LengthProblem::BeyondDatagram { have } => {
                        write!(f, "it runs past the end of the datagram, which has {have} bytes left")
                    }
                    LengthProblem::EndOverflows => write!(f, "term_offset + frame_length overflows i32"),
                }
            }
            Self::BadTermOffset { term_offset } => {
                write!(f, "term_offset {term_offset} must be non-negative and a multiple of {FRAME_ALIGNMENT}")
            }
        }
    }
}

impl std::error::Error for FrameError {}

/// Why a frame could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The destination is shorter than the frame.
    BufferTooShort {
        /// Bytes the frame needs.
        need: usize,
        /// Bytes in the destination.
        have: usize,
    },
    /// The frame length does not fit the i32 `frame_length` field.
    LengthOverflow {
        /// The frame length asked for.
        length: usize,
    },
    /// A PAD length below [`DATA_HEADER_LENGTH`] or not a multiple of [`FRAME_ALIGNMENT`].
    BadPadLength {
        /// The length asked for.
        length: usize,
    },
    /// A `term_offset` that is negative or not a multiple of [`FRAME_ALIGNMENT`].
    BadTermOffset {
        /// The offset asked for.
        term_offset: i32,
    },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BufferTooShort { need, have } => {
                write!(f, "destination has {have} bytes but the frame needs {need}; pass a larger buffer")
            }
            Self::LengthOverflow { length } => {
                write!(f, "frame length {length} does not fit in i32; send a shorter payload")
            }
            Self::BadPadLength { length } => write!(
                f,
                "pad length {length} must be at least {DATA_HEADER_LENGTH} and a multiple of {FRAME_ALIGNMENT}"
            ),
            Self::BadTermOffset { term_offset } => {
                write!(f, "term_offset {term_offset} must be non-negative and a multiple of {FRAME_ALIGNMENT}")
            }
        }
    }
}

impl std::error::Error for EncodeError {}

// ---------------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------------

/// Copies `bytes` to the start of `dst`, returning their length.
pub fn write_bytes(dst: &mut [u8], bytes: &[u8]) -> Result<usize, EncodeError> {
    let have = dst.len();
    let slot = dst.get_mut(..bytes.len()).ok_or(EncodeError::BufferTooShort { need: bytes.len(), have })?;
    slot.copy_from_slice(bytes);
    Ok(bytes.len())
}

fn check_term_offset(term_offset: i32) -> Result<(), EncodeError> {
    if is_valid_term_offset(term_offset) {
        Ok(())
    } else {
        Err(EncodeError::BadTermOffset { term_offset })
    }
}

const fn is_valid_term_offset(term_offset: i32) -> bool {
    term_offset >= 0 && term_offset % FRAME_ALIGNMENT as i32 == 0
}

/// Writes a data frame (`header` then `payload`) at the start of `dst` and returns its unaligned length,
/// `32 + payload.len()`.
///
/// `frame_length`, `version` and `frame_type` are set here; the other fields come from `header`. The
/// bytes after the frame up to the next 32-byte boundary are not touched.
pub fn encode_data(dst: &mut [u8], header: &DataHeader, payload: &[u8]) -> Result<usize, EncodeError> {
    check_term_offset(header.term_offset)?;
    let length =
        DATA_HEADER_LENGTH.checked_add(payload.len()).ok_or(EncodeError::LengthOverflow { length: usize::MAX })?;
    let frame_length = i32::try_from(length).map_err(|_| EncodeError::LengthOverflow { length })?;
    if dst.len() < length {
        return Err(EncodeError::BufferTooShort { need: length, have: dst.len() });
    }
    let full = DataHeader { frame_length, version: CURRENT_VERSION, frame_type: TYPE_DATA, ..*header };
    let (head, body) = dst.split_at_mut(DATA_HEADER_LENGTH);
    write_bytes(head, bytemuck::bytes_of(&full))?;
    write_bytes(body, payload)?;
    Ok(length)
}

/// Writes the 32-byte header of a PAD frame covering `pad_length` bytes of term space and returns 32,
/// the bytes it occupies on the wire.
///
/// `pad_length` must be at least 32 and a multiple of [`FRAME_ALIGNMENT`].
pub fn encode_pad(dst: &mut [u8], header: &DataHeader, pad_length: usize) -> Result<usize, EncodeError> {
    check_term_offset(header.term_offset)?;
    if pad_length < DATA_HEADER_LENGTH || pad_length % FRAME_ALIGNMENT != 0 {
        return Err(EncodeError::BadPadLength { length: pad_length });
    }
    let frame_length = i32::try_from(pad_length).map_err(|_| EncodeError::LengthOverflow { length: pad_length })?;
    let full = DataHeader { frame_length, version: CURRENT_VERSION, frame_type: TYPE_PAD, ..*header };
    write_bytes(dst, bytemuck::bytes_of(&full))
}

/// Writes a heartbeat (a data header with `frame_length` 0) and returns 32.
///
/// Aeron sends it with flags B|E, plus EOS once the publication is closed; `header.flags` is kept.
pub fn encode_heartbeat(dst: &mut [u8], header: &DataHeader) -> Result<usize, EncodeError> {
    check_term_offset(header.term_offset)?;
    let full = DataHeader { frame_length: 0, version: CURRENT_VERSION, frame_type: TYPE_DATA, ..*header };
    write_bytes(dst, bytemuck::bytes_of(&full))
}

/// Fixed-length control frames: their type, length, a template and an encoder (the consensus crate's frames
/// use it too, `quorumcast_consensus::frames`). The calling crate depends on `bytemuck`.
#[macro_export]
macro_rules! control_frame {
    ($t:ty, $frame_type:expr, $len:expr) => {
        impl $t {
            /// This frame's type code.
            pub const FRAME_TYPE: u16 = $frame_type;
            /// This frame's length on the wire.
            pub const LENGTH: usize = $len;

            /// Writes the frame as it is (no field is changed) at the start of `dst`; returns its length.
            pub fn encode(&self, dst: &mut [u8]) -> Result<usize, $crate::frame::EncodeError> {
                $crate::frame::write_bytes(dst, bytemuck::bytes_of(self))
            }
        }

        impl Default for $t {
            /// Zero fields under a valid common header: `frame_length` = the frame's length, version 0,
            /// no flags, the frame's type.
            fn default() -> Self {
                let mut frame = <$t as bytemuck::Zeroable>::zeroed();
                frame.frame_length = $len as i32;
                frame.version = $crate::frame::CURRENT_VERSION;
                frame.frame_type = $frame_type;
                frame
            }
        }
    };
}

control_frame!(SetupFrame, TYPE_SETUP, SETUP_LENGTH);
control_frame!(StatusMessageFrame, TYPE_SM, STATUS_MESSAGE_LENGTH);
control_frame!(NakFrame, TYPE_NAK, NAK_LENGTH);
control_frame!(RttmFrame, TYPE_RTTM, RTTM_LENGTH);
control_frame!(BehindRetainedFrame, TYPE_BEHIND_RETAINED, BEHIND_RETAINED_LENGTH);

impl SetupFrame {
    /// Writes the frame followed by `membership` (48 bytes, `frame_length` set to 48); returns 48.
    ///
    /// The membership tag is a hash of the cluster's member list: a receiver configured with another list
    /// refuses the stream instead of replicating a log it cannot take part in.
    pub fn encode_with_membership(&self, dst: &mut [u8], membership: i64) -> Result<usize, EncodeError> {
        let frame = Self { frame_length: SETUP_WITH_MEMBERSHIP_LENGTH as i32, ..*self };
        write_with_tail(dst, bytemuck::bytes_of(&frame), membership)
    }
}

/// The membership tag of the SETUP frame at the start of `datagram`, when its `frame_length` covers one
/// (see [`SetupFrame::encode_with_membership`]); `None` for a plain 40-byte SETUP or anything else.
pub fn setup_membership(datagram: &[u8]) -> Option<i64> {
    let setup: SetupFrame = read_pod(datagram).ok()?;
    if setup.frame_type != TYPE_SETUP || usize::try_from(setup.frame_length).ok()? < SETUP_WITH_MEMBERSHIP_LENGTH {
        return None;
    }
    let tag = datagram.get(SETUP_LENGTH..SETUP_WITH_MEMBERSHIP_LENGTH)?;
    Some(i64::from_le_bytes(tag.try_into().ok()?))
}

impl StatusMessageFrame {
    /// Writes the frame followed by `group_tag` (44 bytes, `frame_length` set to 44); returns 44.
    pub fn encode_with_group_tag(&self, dst: &mut [u8], group_tag: i64) -> Result<usize, EncodeError> {
        let frame = Self { frame_length: STATUS_MESSAGE_WITH_GROUP_TAG_LENGTH as i32, ..*self };
        write_with_tail(dst, bytemuck::bytes_of(&frame), group_tag)
    }
}

/// Writes `frame` (whose `frame_length` already covers the tail) then the i64 `tail`; returns the length.
fn write_with_tail(dst: &mut [u8], frame: &[u8], tail: i64) -> Result<usize, EncodeError> {
    let need = frame.len() + 8;
    if dst.len() < need {
        return Err(EncodeError::BufferTooShort { need, have: dst.len() });
    }
    let (head, rest) = dst.split_at_mut(frame.len());
    write_bytes(head, frame)?;
    write_bytes(rest, &tail.to_le_bytes())?;
    Ok(need)
}

// ---------------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------------

/// One frame read from a datagram. Headers are copies (so any alignment of the datagram is fine);
/// a data payload borrows the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A data frame with `header.frame_length - 32` bytes of payload.
    Data {
        /// The header; `frame_type` is [`TYPE_DATA`] and `frame_length >= 32`.
        header: DataHeader,
        /// The payload, `frame_length - 32` bytes of the datagram.
        payload: &'a [u8],
    },
    /// A PAD header; `frame_length` (at least 32) is the term space it covers, not bytes on the wire.
    Pad(PadHeader),
    /// A heartbeat: a data header with `frame_length` 0.
    Heartbeat(DataHeader),
    /// A SETUP frame.
    Setup(SetupFrame),
    /// A STATUS MESSAGE, with its group tag when `frame_length >= 44`.
    StatusMessage {
        /// The fixed 36 bytes.
        frame: StatusMessageFrame,
        /// The optional i64 at offset 36.
        group_tag: Option<i64>,
    },
    /// A NAK.
    Nak(NakFrame),
    /// An RTT measurement.
    Rttm(RttmFrame),
    /// An extension frame: its header, and its whole `frame_length` bytes (header included) for the layer
    /// above to read.
    Extension {
        /// The fixed part.
        header: ExtensionHeader,
        /// The frame's bytes, `frame_length` of them.
        bytes: &'a [u8],
    },
    /// The publisher no longer retains the receiver's position.
    BehindRetained(BehindRetainedFrame),
}

impl Frame<'_> {
    /// The frame's type code.
    pub const fn frame_type(&self) -> u16 {
        match self {
            Self::Data { .. } | Self::Heartbeat(_) => TYPE_DATA,
            Self::Pad(_) => TYPE_PAD,
            Self::Setup(_) => TYPE_SETUP,
            Self::StatusMessage { .. } => TYPE_SM,
            Self::Nak(_) => TYPE_NAK,
            Self::Rttm(_) => TYPE_RTTM,
            Self::Extension { header, .. } => header.frame_type,
            Self::BehindRetained(_) => TYPE_BEHIND_RETAINED,
        }
    }

    /// Bytes the frame occupies in its datagram before alignment padding: `frame_length` for data and
    /// control frames, 32 for a PAD header and a heartbeat. Never more than the bytes [`parse`] was given.
    pub fn wire_length(&self) -> usize {
        let length = match self {
            Self::Data { header, .. } => header.frame_length,
            Self::Pad(_) | Self::Heartbeat(_) => DATA_HEADER_LENGTH as i32,
            Self::Setup(f) => f.frame_length,
            Self::StatusMessage { frame, .. } => frame.frame_length,
            Self::Nak(f) => f.frame_length,
            Self::Rttm(f) => f.frame_length,
            Self::Extension { header, .. } => header.frame_length,
            Self::BehindRetained(f) => f.frame_length,
        };
        // Parsed frames have non-negative lengths; 0 only for hand-built values, which is harmless.
        usize::try_from(length).unwrap_or(0)
    }
}

/// Copies a `T` out of the start of `bytes`, whatever their alignment.
fn read_pod<T: Pod>(bytes: &[u8]) -> Result<T, FrameError> {
    let need = std::mem::size_of::<T>();
    let slice = bytes.get(..need).ok_or(FrameError::Truncated { need, have: bytes.len() })?;
    Ok(bytemuck::pod_read_unaligned(slice))
}

/// Reads the 8-byte common header at the start of `datagram` and checks its version.
pub fn peek_header(datagram: &[u8]) -> Result<FrameHeader, FrameError> {
    let header: FrameHeader = read_pod(datagram)?;
    if header.version != CURRENT_VERSION {
        return Err(FrameError::BadVersion { version: header.version });
    }
    Ok(header)
}

/// Checks a `frame_length` against the type's minimum and, when `fits_datagram`, the bytes available.
fn check_length(header: &FrameHeader, min: usize, have: usize, fits_datagram: bool) -> Result<usize, FrameError> {
    let bad =
        |problem| FrameError::BadLength { frame_type: header.frame_type, frame_length: header.frame_length, problem };
    let length = usize::try_from(header.frame_length).map_err(|_| bad(LengthProblem::Negative))?;
    if length < min {
        return Err(bad(LengthProblem::BelowMinimum { min }));
    }
    if fits_datagram && length > have {
        return Err(bad(LengthProblem::BeyondDatagram { have }));
    }
    Ok(length)
}

/// Reads and checks a data, pad or heartbeat frame.
fn parse_data_like<'a>(datagram: &'a [u8], common: &FrameHeader) -> Result<Frame<'a>, FrameError> {
    let header: DataHeader = read_pod(datagram)?;
    if !is_valid_term_offset(header.term_offset) {
        return Err(FrameError::BadTermOffset { term_offset: header.term_offset });
    }
    if header.frame_type == TYPE_DATA && header.frame_length == 0 {
        return Ok(Frame::Heartbeat(header));
    }
    let is_data = header.frame_type == TYPE_DATA;
    let length = check_length(common, DATA_HEADER_LENGTH, datagram.len(), is_data)?;
    if header.term_offset.checked_add(header.frame_length).is_none() {
        let problem = LengthProblem::EndOverflows;
        return Err(FrameError::BadLength {
            frame_type: header.frame_type,
            frame_length: header.frame_length,
            problem,
        });
    }
    if !is_data {
        return Ok(Frame::Pad(header));
    }
    let payload = datagram.get(DATA_HEADER_LENGTH..length).unwrap_or_default();
    Ok(Frame::Data { header, payload })
}

/// Reads and checks a fixed-length control frame of type `T`.
fn parse_control<T: Pod>(datagram: &[u8], common: &FrameHeader) -> Result<T, FrameError> {
    let frame: T = read_pod(datagram)?;
    check_length(common, std::mem::size_of::<T>(), datagram.len(), true)?;
    Ok(frame)
}

/// Reads and checks a STATUS MESSAGE and its optional group tag.
fn parse_status_message<'a>(datagram: &[u8], common: &FrameHeader) -> Result<Frame<'a>, FrameError> {
    let frame: StatusMessageFrame = parse_control(datagram, common)?;
    let length = usize::try_from(frame.frame_length).unwrap_or(0);
    let group_tag = if length >= STATUS_MESSAGE_WITH_GROUP_TAG_LENGTH {
        Some(i64::from_le_bytes(read_pod(datagram.get(STATUS_MESSAGE_LENGTH..).unwrap_or_default())?))
    } else {
        None
    };
    Ok(Frame::StatusMessage { frame, group_tag })
}

/// Reads the one frame at the start of `datagram`, checking it fully.
///
/// Checks, in order: at least 8 bytes; version; known type; the type's fixed part is present;
/// `frame_length` non-negative, at least the fixed part, and (except for PAD, whose length is term
/// space) within `datagram`; for data/pad/heartbeat, `term_offset` non-negative and 32-aligned and
/// `term_offset + frame_length` within i32. Bytes after the frame are ignored.
pub fn parse(datagram: &[u8]) -> Result<Frame<'_>, FrameError> {
    let common = peek_header(datagram)?;
    match common.frame_type {
        TYPE_DATA | TYPE_PAD => parse_data_like(datagram, &common),
        TYPE_SETUP => parse_control(datagram, &common).map(Frame::Setup),
        TYPE_SM => parse_status_message(datagram, &common),
        TYPE_NAK => parse_control(datagram, &common).map(Frame::Nak),
        TYPE_RTTM => parse_control(datagram, &common).map(Frame::Rttm),
        TYPE_EXTENSION_FIRST..=TYPE_EXTENSION_LAST => {
            let header: ExtensionHeader = parse_control(datagram, &common)?;
            let length = usize::try_from(header.frame_length).unwrap_or(0);
            Ok(Frame::Extension { header, bytes: datagram.get(..length).unwrap_or_default() })
        }
        TYPE_BEHIND_RETAINED => parse_control(datagram, &common).map(Frame::BehindRetained),
        frame_type => Err(FrameError::UnknownType { frame_type }),
    }
}

/// The data frames of one datagram, checked in one walk (see [`data_run`]): where they go in the log and
/// what a receiver needs from them, so that it never walks them again before its one copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataRun {
    /// The first frame's header: session, stream, term id and term offset of the whole run.
    pub first: DataHeader,
    /// Bytes of log the run covers: its frames aligned, a PAD's whole padding included.
    pub span: usize,
    /// The highest reserved value of its data frames (a piggybacked commit position), if it has one.
    pub max_reserved: Option<i64>,
    /// The markers in the run ([`MARKER_FLAG`]), in order: `(term offset, value)`; the first
    /// `marker_count` are set.
    pub marker_slots: [(i32, i64); MAX_MARKERS_PER_RUN],
    /// How many of `marker_slots` are set.
    pub marker_count: usize,
}

/// Most markers one datagram may carry (a writer puts few into its log, so even a repair of a log with
/// many of them carries few per datagram); a run with more is malformed.
pub const MAX_MARKERS_PER_RUN: usize = 4;

impl DataRun {
    /// The markers of the run: `(term offset, value)`, in log order.
    pub fn markers(&self) -> &[(i32, i64)] {
        &self.marker_slots[..self.marker_count]
    }
}

/// The value a marker frame carries: its payload's first [`MARKER_LENGTH`] bytes, when `flags` mark one
/// ([`MARKER_FLAG`]) and they hold a value that is not negative; `None` otherwise (not a marker).
pub fn marker_of(flags: u8, payload: &[u8]) -> Option<i64> {
    if flags & MARKER_FLAG == 0 {
        return None;
    }
    let value = i64::from_le_bytes(payload.get(..MARKER_LENGTH)?.try_into().ok()?);
    (value >= 0).then_some(value)
}

/// Checks that `datagram` is a run of data frames as a Sender sends them, in one walk, and describes it.
///
/// The rules: every frame is a data frame (`frame_length` at least 32) or a PAD; all of one session,
/// stream and term; each at the term offset where the one before it ends, so the run is contiguous; each
/// data frame whole within the datagram, and frames 32-byte aligned in it; a PAD (its header alone on
/// the wire) only last, since it fills its term. So the datagram's bytes are the log's bytes from the
/// first term offset on, and a receiver can copy them in one piece.
pub fn data_run(datagram: &[u8]) -> Result<DataRun, FrameError> {
    let first = parse_run_header(datagram)?;
    let mut run =
        DataRun { first, span: 0, max_reserved: None, marker_slots: [(0, 0); MAX_MARKERS_PER_RUN], marker_count: 0 };
    let mut src = 0;
    while src < datagram.len() {
        let rest = &datagram[src..];
        let header = if src == 0 { first } else { parse_run_header(rest)? };
        let same = header.session_id == first.session_id
            && header.stream_id == first.stream_id
            && header.term_id == first.term_id;
        let expected = i64::from(first.term_offset) + run.span as i64;
        if !same || i64::from(header.term_offset) != expected {
            return Err(FrameError::BadTermOffset { term_offset: header.term_offset });
        }
        let aligned = align_frame(header.frame_length as usize);
        run.span += aligned;
        if header.frame_type == TYPE_PAD {
            if rest.len() > DATA_HEADER_LENGTH {
                return Err(FrameError::BadLength {
                    frame_type: TYPE_PAD,
                    frame_length: header.frame_length,
                    problem: LengthProblem::BeyondDatagram { have: rest.len() },
                });
            }
            break;
        }
        run.max_reserved = Some(run.max_reserved.map_or(header.reserved_value, |m| m.max(header.reserved_value)));
        if header.flags & MARKER_FLAG != 0 {
            let payload = &rest[DATA_HEADER_LENGTH..header.frame_length as usize];
            let value = marker_of(header.flags, payload).ok_or(FrameError::BadLength {
                frame_type: TYPE_DATA,
                frame_length: header.frame_length,
                problem: LengthProblem::BelowMinimum { min: DATA_HEADER_LENGTH + MARKER_LENGTH },
            })?;
            if run.marker_count == MAX_MARKERS_PER_RUN {
                return Err(FrameError::BadTermOffset { term_offset: header.term_offset });
            }
            run.marker_slots[run.marker_count] = (header.term_offset, value);
            run.marker_count += 1;
        }
        src += aligned;
    }
    Ok(run)
}

/// Reads and checks the header of one frame of a data run: a data frame whole in `rest`, or a PAD.
fn parse_run_header(rest: &[u8]) -> Result<DataHeader, FrameError> {
    let common = peek_header(rest)?;
    if common.frame_type != TYPE_DATA && common.frame_type != TYPE_PAD {
        return Err(FrameError::UnknownType { frame_type: common.frame_type });
    }
    match parse_data_like(rest, &common)? {
        Frame::Data { header, .. } | Frame::Pad(header) => Ok(header),
        // A heartbeat (frame_length 0) stands alone; inside a run it is malformed.
        _ => Err(FrameError::BadLength {
            frame_type: common.frame_type,
            frame_length: common.frame_length,
            problem: LengthProblem::BelowMinimum { min: DATA_HEADER_LENGTH },
        }),
    }
}

/// Iterator over the frames of one datagram; see [`frames`].
#[derive(Clone, Debug)]
pub struct Frames<'a> {
    rest: &'a [u8],
}

/// Walks the frames of `datagram`: each frame starts at a multiple of 32 bytes from the start, and the
/// last may end unpadded. Yields `Ok` per frame; after the first `Err` it yields nothing more (the next
/// frame boundary is unknown). A datagram shorter than 8 bytes yields one [`FrameError::Truncated`];
/// an empty one yields nothing.
pub fn frames(datagram: &[u8]) -> Frames<'_> {
    Frames { rest: datagram }
}

impl<'a> Frames<'a> {
    /// The bytes not yet walked (empty after an error).
    pub fn remaining(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match parse(self.rest) {
            Ok(frame) => {
                // wire_length <= rest.len(); the step is at least 1 so the walk always advances.
                let aligned = frame.wire_length().max(1).checked_next_multiple_of(FRAME_ALIGNMENT);
                let step = aligned.unwrap_or(usize::MAX).min(self.rest.len());
                self.rest = self.rest.get(step..).unwrap_or_default();
                Some(Ok(frame))
            }
            Err(error) => {
                self.rest = &[];
                Some(Err(error))
            }
        }
    }
}

impl std::iter::FusedIterator for Frames<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_header() -> DataHeader {
        DataHeader { reserved_value: 0x0102_0304_0506_0708, ..DataHeader::new(7, 9, 100, 64, UNFRAGMENTED) }
    }

    fn i32_at(bytes: &[u8], offset: usize) -> i32 {
        i32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap())
    }

    fn i64_at(bytes: &[u8], offset: usize) -> i64 {
        i64::from_le_bytes(bytes[offset..offset + 8].try_into().unwrap())
    }

    #[test]
    fn framed_lengths() {
        assert_eq!(framed_length(0), 32);
        assert_eq!(framed_length(1), 64);
        assert_eq!(framed_length(32), 64);
        assert_eq!(framed_length(128), 160);
        assert_eq!(framed_length(129), 192);
        assert_eq!(align_frame(0), 0);
        assert_eq!(align_frame(33), 64);
    }

    #[test]
    fn data_round_trip_and_offsets() {
        let mut buf = [0xAAu8; 80];
        let payload = [1u8, 2, 3, 4, 5];
        assert_eq!(encode_data(&mut buf, &data_header(), &payload), Ok(37));
        assert_eq!(i32_at(&buf, FRAME_LENGTH_OFFSET), 37);
        assert_eq!(buf[VERSION_OFFSET], 0);
        assert_eq!(buf[FLAGS_OFFSET], 0xC0);
        assert_eq!(u16::from_le_bytes([buf[TYPE_OFFSET], buf[TYPE_OFFSET + 1]]), TYPE_DATA);
        assert_eq!(i32_at(&buf, 8), 64);
        assert_eq!(i32_at(&buf, 12), 7);
        assert_eq!(i32_at(&buf, 16), 9);
        assert_eq!(i32_at(&buf, 20), 100);
        assert_eq!(i64_at(&buf, 24), 0x0102_0304_0506_0708);
        assert_eq!(&buf[32..37], &payload);
        assert_eq!(buf[37], 0xAA, "bytes after the frame are untouched");
        let expected = DataHeader { frame_length: 37, ..data_header() };
        assert_eq!(parse(&buf[..37]), Ok(Frame::Data { header: expected, payload: &payload }));
        // Trailing bytes are ignored by parse.
        assert_eq!(parse(&buf), Ok(Frame::Data { header: expected, payload: &payload }));
    }

    #[test]
    fn pad_and_heartbeat_round_trip() {
        let mut buf = [0u8; 32];
        assert_eq!(encode_pad(&mut buf, &data_header(), 4096), Ok(32));
        assert_eq!(i32_at(&buf, 0), 4096);
        let pad = parse(&buf).unwrap();
        assert_eq!(pad, Frame::Pad(DataHeader { frame_length: 4096, frame_type: TYPE_PAD, ..data_header() }));
        assert_eq!(pad.wire_length(), 32);
        assert_eq!(encode_pad(&mut buf, &data_header(), 40), Err(EncodeError::BadPadLength { length: 40 }));
        assert_eq!(encode_pad(&mut buf, &data_header(), 0), Err(EncodeError::BadPadLength { length: 0 }));

        let eos = DataHeader { flags: UNFRAGMENTED | EOS_FLAG, ..data_header() };
        assert_eq!(encode_heartbeat(&mut buf, &eos), Ok(32));
        assert_eq!(i32_at(&buf, 0), 0);
        match parse(&buf).unwrap() {
            Frame::Heartbeat(h) => assert!(h.is_end_of_stream() && h.term_offset == 64),
            other => panic!("expected heartbeat, got {other:?}"),
        }
    }

    #[test]
    fn setup_round_trip_and_offsets() {
        let setup = SetupFrame {
            flags: SETUP_GROUP_FLAG,
            term_offset: 96,
            session_id: 1,
            stream_id: 2,
            initial_term_id: 3,
            active_term_id: 4,
            term_length: 65536,
            mtu: 1408,
            ttl: 8,
            ..SetupFrame::default()
        };
        let mut buf = [0u8; 40];
        assert_eq!(setup.encode(&mut buf), Ok(40));
        assert_eq!((i32_at(&buf, 0), buf[5], i32_at(&buf, 8), i32_at(&buf, 12)), (40, 0x40, 96, 1));
        assert_eq!((i32_at(&buf, 16), i32_at(&buf, 20), i32_at(&buf, 24)), (2, 3, 4));
        assert_eq!((i32_at(&buf, 28), i32_at(&buf, 32), i32_at(&buf, 36)), (65536, 1408, 8));
        assert_eq!(u16::from_le_bytes([buf[6], buf[7]]), TYPE_SETUP);
        assert_eq!(parse(&buf), Ok(Frame::Setup(setup)));
    }

    #[test]
    fn status_message_round_trip_and_offsets() {
        let mut sm = StatusMessageFrame {
            flags: SM_SEND_SETUP_FLAG,
            session_id: 5,
            stream_id: 6,
            consumption_term_id: 7,
            consumption_term_offset: 128,
            receiver_window: 131072,
            ..StatusMessageFrame::default()
        };
        sm.set_receiver_id(-0x1234_5678_9ABC_DEF0);
        let mut buf = [0u8; 44];
        assert_eq!(sm.encode(&mut buf), Ok(36));
        assert_eq!((i32_at(&buf, 8), i32_at(&buf, 12), i32_at(&buf, 16), i32_at(&buf, 20)), (5, 6, 7, 128));
        assert_eq!(i32_at(&buf, 24), 131072, "receiver_window at 24");
        assert_eq!(i64_at(&buf, 28), -0x1234_5678_9ABC_DEF0, "receiver_id at 28");
        assert_eq!(parse(&buf[..36]), Ok(Frame::StatusMessage { frame: sm, group_tag: None }));
        assert_eq!(sm.receiver_id(), -0x1234_5678_9ABC_DEF0);

        assert_eq!(sm.encode_with_group_tag(&mut buf, 77), Ok(44));
        assert_eq!(i64_at(&buf, 36), 77);
        let tagged = StatusMessageFrame { frame_length: 44, ..sm };
        assert_eq!(parse(&buf), Ok(Frame::StatusMessage { frame: tagged, group_tag: Some(77) }));
    }

    #[test]
    fn nak_rttm_round_trip_and_offsets() {
        let nak =
            NakFrame { session_id: 1, stream_id: 2, term_id: 3, term_offset: 4, length: 1408, ..NakFrame::default() };
        let mut buf = [0u8; 40];
        assert_eq!(nak.encode(&mut buf), Ok(28));
        assert_eq!((i32_at(&buf, 0), i32_at(&buf, 16), i32_at(&buf, 20), i32_at(&buf, 24)), (28, 3, 4, 1408));
        assert_eq!(parse(&buf[..28]), Ok(Frame::Nak(nak)));

        let rttm = RttmFrame {
            flags: RTTM_REPLY_FLAG,
            session_id: 1,
            stream_id: 2,
            echo_timestamp: 10,
            reception_delta: 20,
            receiver_id: 30,
            ..RttmFrame::default()
        };
        assert_eq!(rttm.encode(&mut buf), Ok(40));
        assert_eq!((i64_at(&buf, 16), i64_at(&buf, 24), i64_at(&buf, 32)), (10, 20, 30));
        assert_eq!(parse(&buf), Ok(Frame::Rttm(rttm)));
    }

    #[test]
    fn extension_frames_are_parsed_to_their_header_and_handed_on_whole() {
        let header = ExtensionHeader {
            frame_length: 40,
            version: CURRENT_VERSION,
            flags: 0,
            frame_type: TYPE_EXTENSION_FIRST + 1,
            session_id: 1,
            stream_id: 2,
        };
        let mut buf = [0u8; 48];
        buf[..16].copy_from_slice(bytemuck::bytes_of(&header));
        buf[16..24].copy_from_slice(&4096i64.to_le_bytes());
        assert_eq!(parse(&buf), Ok(Frame::Extension { header, bytes: &buf[..40] }), "its frame_length bytes");
        assert_eq!(
            parse(&buf[..39]).unwrap_err(),
            FrameError::BadLength {
                frame_type: TYPE_EXTENSION_FIRST + 1,
                frame_length: 40,
                problem: LengthProblem::BeyondDatagram { have: 39 },
            }
        );
        let short = ExtensionHeader { frame_length: 12, ..header };
        buf[..16].copy_from_slice(bytemuck::bytes_of(&short));
        assert!(parse(&buf).is_err(), "shorter than its header");
        let outside = ExtensionHeader { frame_type: 0x7F, ..header };
        buf[..16].copy_from_slice(bytemuck::bytes_of(&outside));
        assert_eq!(parse(&buf), Err(FrameError::UnknownType { frame_type: 0x7F }));
    }

    #[test]
    fn encode_rejects_short_buffers_and_bad_offsets() {
        let mut buf = [0u8; 39];
        assert_eq!(SetupFrame::default().encode(&mut buf), Err(EncodeError::BufferTooShort { need: 40, have: 39 }));
        assert_eq!(
            encode_data(&mut buf, &data_header(), &[0; 8]),
            Err(EncodeError::BufferTooShort { need: 40, have: 39 })
        );
        assert_eq!(
            encode_heartbeat(&mut buf[..31], &data_header()),
            Err(EncodeError::BufferTooShort { need: 32, have: 31 })
        );
        let odd = DataHeader { term_offset: 33, ..data_header() };
        assert_eq!(encode_data(&mut buf, &odd, &[]), Err(EncodeError::BadTermOffset { term_offset: 33 }));
        let mut big = [0u8; 44];
        let need44 = Err(EncodeError::BufferTooShort { need: 44, have: 43 });
        assert_eq!(StatusMessageFrame::default().encode_with_group_tag(&mut big[..43], 1), need44);
    }

    #[test]
    fn parse_errors_are_typed() {
        assert_eq!(parse(&[]), Err(FrameError::Truncated { need: 8, have: 0 }));
        let mut buf = [0u8; 64];
        encode_data(&mut buf, &data_header(), &[9; 16]).unwrap();
        assert_eq!(parse(&buf[..20]), Err(FrameError::Truncated { need: 32, have: 20 }));
        assert_eq!(
            parse(&buf[..40]),
            Err(FrameError::BadLength {
                frame_type: TYPE_DATA,
                frame_length: 48,
                problem: LengthProblem::BeyondDatagram { have: 40 }
            })
        );
        let mut bad = buf;
        bad[4] = 1;
        assert_eq!(parse(&bad), Err(FrameError::BadVersion { version: 1 }));
        let mut bad = buf;
        bad[6] = 0x04;
        assert_eq!(parse(&bad), Err(FrameError::UnknownType { frame_type: TYPE_ERR }));
        let mut bad = buf;
        bad[3] = 0x80;
        assert!(matches!(parse(&bad), Err(FrameError::BadLength { problem: LengthProblem::Negative, .. })));
        let mut bad = buf;
        bad[0] = 31;
        let below = LengthProblem::BelowMinimum { min: 32 };
        assert!(matches!(parse(&bad), Err(FrameError::BadLength { problem, .. }) if problem == below));
        let mut bad = buf;
        bad[8] = 65;
        assert_eq!(parse(&bad), Err(FrameError::BadTermOffset { term_offset: 65 }));
        let mut bad = buf;
        bad[11] = 0x80;
        assert!(matches!(parse(&bad), Err(FrameError::BadTermOffset { .. })));
        // A PAD whose end overflows i32.
        let mut pad = [0u8; 32];
        encode_pad(&mut pad, &DataHeader { term_offset: i32::MAX - 31, ..data_header() }, 64).unwrap();
        assert!(matches!(parse(&pad), Err(FrameError::BadLength { problem: LengthProblem::EndOverflows, .. })));
        // A NAK claiming to be shorter than 28 bytes, and one cut short.
        let mut nak = [0u8; 28];
        NakFrame { frame_length: 20, ..NakFrame::default() }.encode(&mut nak).unwrap();
        assert!(matches!(
            parse(&nak),
            Err(FrameError::BadLength { problem: LengthProblem::BelowMinimum { min: 28 }, .. })
        ));
        assert_eq!(parse(&nak[..27]), Err(FrameError::Truncated { need: 28, have: 27 }));
        for error in [FrameError::UnknownType { frame_type: 9 }, FrameError::Truncated { need: 8, have: 1 }] {
            assert!(!error.to_string().is_empty());
        }
    }

    #[test]
    fn iterator_walks_aligned_frames_and_unpadded_last() {
        let mut dgram = [0u8; 256];
        let mut at = 0;
        let h = data_header();
        at += align_frame(encode_data(&mut dgram[at..], &DataHeader { term_offset: 0, ..h }, &[1; 20]).unwrap());
        at += align_frame(encode_data(&mut dgram[at..], &DataHeader { term_offset: 64, ..h }, &[2; 50]).unwrap());
        at += encode_pad(&mut dgram[at..], &DataHeader { term_offset: 160, ..h }, 1024).unwrap();
        assert_eq!(at, 64 + 96 + 32);
        let last = encode_data(&mut dgram[at..], &DataHeader { term_offset: 1184, ..h }, &[3; 1]).unwrap();
        let total = at + last; // 33 bytes of the last frame: unpadded
        let kinds: Vec<_> = frames(&dgram[..total])
            .map(|f| match f.unwrap() {
                Frame::Data { header, payload } => (header.term_offset, payload.len()),
                Frame::Pad(header) => (header.term_offset, usize::MAX),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(kinds, vec![(0, 20), (64, 50), (160, usize::MAX), (1184, 1)]);
    }

    #[test]
    fn iterator_stops_after_error() {
        let mut dgram = [0u8; 96];
        encode_data(&mut dgram, &data_header(), &[1; 4]).unwrap();
        dgram[64 + VERSION_OFFSET] = 0xFF; // the next frame starts at align32(36) = 64
        let mut walk = frames(&dgram);
        assert!(matches!(walk.next(), Some(Ok(Frame::Data { .. }))));
        assert_eq!(walk.next(), Some(Err(FrameError::BadVersion { version: 0xFF })));
        assert_eq!(walk.next(), None);
        assert!(walk.remaining().is_empty());
        assert_eq!(frames(&[]).count(), 0);
        assert_eq!(frames(&[0; 3]).collect::<Vec<_>>(), vec![Err(FrameError::Truncated { need: 8, have: 3 })]);
    }

    #[test]
    fn unaligned_datagrams_parse() {
        let mut storage = [0u8; 200];
        let sm = StatusMessageFrame { session_id: 3, ..StatusMessageFrame::default() };
        for shift in 1..8 {
            sm.encode(&mut storage[shift..]).unwrap();
            assert_eq!(parse(&storage[shift..shift + 36]), Ok(Frame::StatusMessage { frame: sm, group_tag: None }));
            let nak = NakFrame { term_offset: 96, ..NakFrame::default() };
            nak.encode(&mut storage[shift..]).unwrap();
            assert_eq!(parse(&storage[shift..]), Ok(Frame::Nak(nak)));
        }
    }

    /// Two data frames at `offset` and after it, then optionally a PAD covering `pad` bytes.
    fn run_bytes(offset: i32, second_offset: i32, pad: Option<usize>) -> Vec<u8> {
        let mut bytes = vec![0u8; 256];
        let first = DataHeader { reserved_value: 7, ..DataHeader::new(5, 6, 9, offset, UNFRAGMENTED) };
        let n = encode_data(&mut bytes, &first, &[1; 40]).unwrap();
        let second = DataHeader { reserved_value: 11, ..DataHeader::new(5, 6, 9, second_offset, UNFRAGMENTED) };
        let at = align_frame(n);
        let m = encode_data(&mut bytes[at..], &second, &[2; 10]).unwrap();
        let mut end = at + m;
        if let Some(pad) = pad {
            end = at + align_frame(m);
            let header = DataHeader { frame_type: TYPE_PAD, ..DataHeader::new(5, 6, 9, second_offset + 64, 0) };
            end += encode_pad(&mut bytes[end..], &header, pad).unwrap();
        }
        bytes.truncate(end);
        bytes
    }

    #[test]
    fn a_data_run_is_checked_in_one_walk() {
        let run = data_run(&run_bytes(1024, 1024 + 96, Some(4096))).unwrap();
        assert_eq!((run.first.term_offset, run.span, run.max_reserved), (1024, 96 + 64 + 4096, Some(11)));
        let run = data_run(&run_bytes(0, 96, None)).unwrap();
        assert_eq!(run.span, 96 + 64, "the last frame may end unpadded");
        assert!(data_run(&run_bytes(0, 128, None)).is_err(), "a gap inside the run");
        let mut padded = run_bytes(0, 96, Some(64));
        padded.extend_from_slice(&[0; 32]);
        assert!(data_run(&padded).is_err(), "bytes after a PAD");
        let mut other_session = run_bytes(0, 96, None);
        other_session[96 + SESSION_ID_OFFSET] ^= 1;
        assert!(data_run(&other_session).is_err(), "a frame of another session");
        let mut heartbeat = run_bytes(0, 96, None);
        heartbeat[96..100].copy_from_slice(&0i32.to_le_bytes());
        assert!(data_run(&heartbeat).is_err(), "a heartbeat inside a run");
    }
}
