//! Wire and log frame formats (little-endian), after Aeron's protocol.
//!
//! Every frame starts with the same 8-byte header: `frame_length: i32`, `version: u8`, `flags: u8`,
//! `frame_type: u16`. Data frames have a 32-byte header; frames in a log buffer start on
//! [`FRAME_ALIGNMENT`]-byte boundaries and their length field holds the unaligned length.
//!
//! (Core constants only: the full set of frames and the parser are being built in issue 2.)

use bytemuck::{Pod, Zeroable};

/// Frames in a log buffer start at multiples of this many bytes.
pub const FRAME_ALIGNMENT: usize = 32;
/// Length of a data frame header; its payload starts here.
pub const DATA_HEADER_LENGTH: usize = 32;
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

/// Begin-fragment flag: the first frame of a message.
pub const BEGIN_FLAG: u8 = 0x80;
/// End-fragment flag: the last frame of a message.
pub const END_FLAG: u8 = 0x40;
/// Both: a message in one frame.
pub const UNFRAGMENTED: u8 = BEGIN_FLAG | END_FLAG;
/// End of stream.
pub const EOS_FLAG: u8 = 0x20;

/// Padding frame type (fills the tail of a term).
pub const TYPE_PAD: u16 = 0x00;
/// Data frame type.
pub const TYPE_DATA: u16 = 0x01;

/// Rounds `length` up to [`FRAME_ALIGNMENT`].
#[inline]
pub const fn align_frame(length: usize) -> usize {
    (length + FRAME_ALIGNMENT - 1) & !(FRAME_ALIGNMENT - 1)
}

/// Bytes a message of `msg` bytes occupies in a log when unfragmented: `align32(msg + 32)`.
#[inline]
pub const fn framed_length(msg: usize) -> usize {
    align_frame(msg + DATA_HEADER_LENGTH)
}

/// The 32-byte data frame header, as laid out in a log buffer and on the wire.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct DataHeader {
    /// Header plus payload, unaligned; 0 for a heartbeat.
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

const _: () = assert!(std::mem::size_of::<DataHeader>() == DATA_HEADER_LENGTH);
