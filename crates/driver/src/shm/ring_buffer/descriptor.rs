//! Layout of a ring in shared memory: the data area, the trailer of positions, and the record header.
//!
//! ```text
//! 0                                   capacity                         capacity + TRAILER_LENGTH
//! | records (power-of-two bytes) ...  | tail | head cache | head | correlation | heartbeat |
//!                                       (each field alone on its own 128-byte line)
//! ```
//!
//! A record is an 8-byte [`RecordHeader`] followed by the message, and starts on an
//! [`RECORD_ALIGNMENT`]-byte boundary. Its `length` field holds header + message, unaligned; it is
//! zero while the slot is free, negative while a producer writes the record, positive once committed.
//! The functions here are the only code that writes a header, so the commit protocol is in one place.

use std::mem::{offset_of, size_of};
use std::sync::atomic::{fence, Ordering};

use bytemuck::{Pod, Zeroable};

use crate::shm::buffer::{AtomicBuffer, CACHE_LINE_LENGTH};

use super::RingError;

/// Length of a record header: `length: i32`, `msg_type_id: i32`.
pub const HEADER_LENGTH: usize = 8;
/// Every record starts at a multiple of this many bytes (so that headers are aligned for atomics).
pub const RECORD_ALIGNMENT: usize = 8;
/// Message type of padding records: they fill the end of the data area at a wrap, or replace an aborted
/// claim, and are skipped by the consumer. Message types given by users must be positive.
pub const PADDING_MSG_TYPE_ID: i32 = -1;
/// Smallest data capacity: one cache line, so that the trailer lines stay cache-line aligned.
pub const MIN_CAPACITY: usize = CACHE_LINE_LENGTH;
/// Largest data capacity: record lengths (padding included) must fit an `i32`.
pub const MAX_CAPACITY: usize = 1 << 30;

/// The header in front of every record, as laid out in the ring.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct RecordHeader {
    /// Header plus message, unaligned: 0 when free, negative while being written, positive when committed.
    pub length: i32,
    /// The user's message type (positive), or [`PADDING_MSG_TYPE_ID`].
    pub msg_type_id: i32,
}

const _: () = assert!(size_of::<RecordHeader>() == HEADER_LENGTH);

/// Offset of the length field in a record.
pub const LENGTH_OFFSET: usize = offset_of!(RecordHeader, length);
/// Offset of the message type field in a record.
pub const TYPE_OFFSET: usize = offset_of!(RecordHeader, msg_type_id);

/// The positions and counters after the data area, each field alone on a [`CACHE_LINE_LENGTH`] line so that
/// producers (tail, head cache) and the consumer (head) never share a line.
///
/// Positions are byte counts since the ring was created: they only grow, and `position & (capacity - 1)`
/// is the index in the data area.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct RingTrailer {
    /// Position after the last claimed record. Written by producers only (CAS when several, release
    /// store when one); read by producers and observers.
    pub tail_position: i64,
    tail_pad: [i64; 15],
    /// A recent value of `head_position` kept by producers, so that they read the consumer's line only
    /// when the ring looks full. Written and read by producers only, release/acquire.
    pub head_cache_position: i64,
    head_cache_pad: [i64; 15],
    /// Position after the last consumed record. Written by the consumer only, with release after it has
    /// zeroed what it consumed; read by producers with acquire before they reuse that space.
    pub head_position: i64,
    head_pad: [i64; 15],
    /// Source of unique correlation ids for messages, incremented atomically by anyone.
    pub correlation_counter: i64,
    correlation_pad: [i64; 15],
    /// Time of the consumer's last heartbeat, in whatever clock its users agree on; written by the consumer.
    pub consumer_heartbeat: i64,
    consumer_heartbeat_pad: [i64; 15],
}

/// Length of the trailer after the data area.
pub const TRAILER_LENGTH: usize = 5 * CACHE_LINE_LENGTH;

const _: () = assert!(size_of::<RingTrailer>() == TRAILER_LENGTH);

/// Offset of [`RingTrailer::tail_position`] from the end of the data area.
pub const TAIL_POSITION_OFFSET: usize = offset_of!(RingTrailer, tail_position);
/// Offset of [`RingTrailer::head_cache_position`] from the end of the data area.
pub const HEAD_CACHE_POSITION_OFFSET: usize = offset_of!(RingTrailer, head_cache_position);
/// Offset of [`RingTrailer::head_position`] from the end of the data area.
pub const HEAD_POSITION_OFFSET: usize = offset_of!(RingTrailer, head_position);
/// Offset of [`RingTrailer::correlation_counter`] from the end of the data area.
pub const CORRELATION_COUNTER_OFFSET: usize = offset_of!(RingTrailer, correlation_counter);
/// Offset of [`RingTrailer::consumer_heartbeat`] from the end of the data area.
pub const CONSUMER_HEARTBEAT_OFFSET: usize = offset_of!(RingTrailer, consumer_heartbeat);

const _: () = assert!(
    TAIL_POSITION_OFFSET % CACHE_LINE_LENGTH == 0
        && HEAD_CACHE_POSITION_OFFSET % CACHE_LINE_LENGTH == 0
        && HEAD_POSITION_OFFSET % CACHE_LINE_LENGTH == 0
        && CORRELATION_COUNTER_OFFSET % CACHE_LINE_LENGTH == 0
        && CONSUMER_HEARTBEAT_OFFSET % CACHE_LINE_LENGTH == 0
);

/// Bytes a ring of `capacity` data bytes needs: the data area plus the trailer.
#[inline]
pub const fn required_length(capacity: usize) -> usize {
    capacity + TRAILER_LENGTH
}

/// Longest message a ring of `capacity` data bytes accepts: an eighth of it, so that one message can never
/// hold the ring on its own.
#[inline]
pub const fn max_msg_length(capacity: usize) -> usize {
    capacity / 8
}

/// Bytes a record carrying `length` message bytes occupies: header plus message, aligned.
#[inline]
pub const fn aligned_record_length(length: usize) -> usize {
    crate::shm::buffer::align(length + HEADER_LENGTH, RECORD_ALIGNMENT)
}

/// The data capacity of a ring laid out in `buffer`, after checking the layout.
pub(crate) fn check_layout(buffer: &AtomicBuffer) -> Result<usize, RingError> {
    let address = buffer.as_ptr() as usize;
    if address % RECORD_ALIGNMENT != 0 {
        return Err(RingError::Misaligned { address });
    }
    let capacity = buffer.len().saturating_sub(TRAILER_LENGTH);
    if !capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
        return Err(RingError::InvalidCapacity { buffer_length: buffer.len() });
    }
    Ok(capacity)
}

/// Starts a record of `record_length` bytes (header included) at `index`: negative length, then its type.
///
/// The consumer ignores a non-positive length, so nothing here is needed for it. The negative length and
/// the fence after it serve [`super::ManyToOneRingBuffer::unblock`], whose scan for a producer that died
/// mid-record relies on a non-zero header becoming visible before any payload byte. That ordering of a
/// store before later plain stores is what the fence instructions give (nothing on x86, `dmb ish` on
/// aarch64); the Rust memory model itself has no store-store fence, which is one reason `unblock` is a
/// heuristic for the consumer's side, not part of the normal protocol.
#[inline]
pub(crate) fn begin_record(buffer: &AtomicBuffer, index: usize, record_length: usize, msg_type_id: i32) {
    buffer.put_i32_release(index + LENGTH_OFFSET, -(record_length as i32));
    fence(Ordering::Release);
    buffer.put_i32(index + TYPE_OFFSET, msg_type_id);
}

/// Commits a record begun at `index`: stores its positive length with release, which publishes the
/// type and the message written before it to a consumer that loads the length with acquire.
#[inline]
pub(crate) fn commit_record(buffer: &AtomicBuffer, index: usize, record_length: usize) {
    buffer.put_i32_release(index + LENGTH_OFFSET, record_length as i32);
}

/// Makes `length` bytes at `index` a committed padding record (the end of the data area at a wrap, an
/// aborted claim, or a record unblocked after its producer died): type first, then length with release.
#[inline]
pub(crate) fn write_padding(buffer: &AtomicBuffer, index: usize, length: usize) {
    buffer.put_i32(index + TYPE_OFFSET, PADDING_MSG_TYPE_ID);
    buffer.put_i32_release(index + LENGTH_OFFSET, length as i32);
}
