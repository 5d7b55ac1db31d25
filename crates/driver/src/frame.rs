//! Wire and log frame formats (little-endian), after Aeron's protocol.
//!
//! Every frame starts with the same 8-byte [`FrameHeader`]: `frame_length: i32`, `version: u8`,
//! `flags: u8`, `frame_type: u16`. Data frames have a 32-byte [`DataHeader`]; frames in a log buffer
//! start on [`FRAME_ALIGNMENT`]-byte boundaries and their length field holds the unaligned length.
//!
//! The module has three parts, each a file of its own (this file holds the constants they share):
//!
//! - **layouts** (`layout`): one `#[repr(C)]` [`Pod`](bytemuck::Pod) struct per frame, each with a
//!   compile-time size assert and compile-time asserts of its field offsets (Aeron's offsets for Aeron's
//!   frames);
//! - **encoding** (`encode`): [`encode_data`], [`encode_pad`], [`encode_heartbeat`] and an `encode` method
//!   on every control frame write one frame into a `&mut [u8]` and return its length;
//! - **parsing** (`parse`): [`parse`](fn@parse) reads the frame at the start of a datagram into a typed [`Frame`],
//!   and [`frames`] walks every frame a datagram carries. Both accept any bytes at any alignment: they
//!   copy headers out with [`bytemuck::pod_read_unaligned`], use only checked slicing and arithmetic, and
//!   report bad input as a [`FrameError`], never a panic.
//!
//! Their errors ([`FrameError`], [`EncodeError`]) are in `error`.
//!
//! Datagram layout: a datagram carries one or more whole frames. Each frame starts at a multiple of
//! [`FRAME_ALIGNMENT`] from the start of the datagram, so a frame is followed by padding up to the next
//! multiple of 32, except the last frame of a datagram, which may end unpadded. On the wire a PAD frame
//! is only its 32-byte header (its `frame_length` says how much term space it covers), and a heartbeat
//! is a 32-byte data header whose `frame_length` is 0.

mod encode;
mod error;
mod layout;
mod parse;

pub use encode::{encode_data, encode_heartbeat, encode_pad, setup_membership, write_bytes};
pub use error::{EncodeError, FrameError, LengthProblem};
pub use layout::{
    BehindRetainedFrame, DataHeader, ExtensionHeader, FrameHeader, NakFrame, PadHeader, RttmFrame, SetupFrame,
    StatusMessageFrame,
};
pub use parse::{data_run, frames, marker_of, parse, peek_header, DataRun, Frame, Frames, MAX_MARKERS_PER_RUN};

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

#[cfg(test)]
mod tests;
