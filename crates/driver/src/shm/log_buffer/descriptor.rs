//! Layout of a log file and the arithmetic between positions and `(term_id, term_offset)`.
//!
//! A log is `[term 0][term 1][term 2][metadata]`. Terms are `term_length` bytes each (a power of two);
//! the metadata section fills the rest of the file, which is rounded up to the page size, and the
//! [`LogMetadata`] structure occupies its last [`LOG_METADATA_LENGTH`] bytes, so that a process opening
//! the log finds it from the file length alone. With the default 4 KiB page the metadata follows the
//! third term directly.
//!
//! A *position* is a 64-bit byte count since the start of the initial term:
//! `position = ((term_id - initial_term_id) << log2(term_length)) + term_offset`, where the subtraction
//! wraps (`i32::wrapping_sub`), so a stream whose term ids pass `i32::MAX` keeps increasing positions.

use std::mem::{offset_of, size_of};

use bytemuck::{Pod, Zeroable};

use crate::shm::buffer::CACHE_LINE_LENGTH;

/// Number of term partitions in a log.
pub const PARTITION_COUNT: usize = 3;
/// Smallest term length (64 KiB).
pub const TERM_MIN_LENGTH: usize = 64 * 1024;
/// Largest term length (1 GiB).
pub const TERM_MAX_LENGTH: usize = 1024 * 1024 * 1024;
/// Smallest page size a log file may be rounded to.
pub const PAGE_MIN_SIZE: usize = 4 * 1024;
/// Largest page size a log file may be rounded to.
pub const PAGE_MAX_SIZE: usize = 1024 * 1024 * 1024;
/// Largest MTU: the largest UDP payload over IPv4 (65535 - 8 - 20), rounded down to a multiple of 32.
pub const MTU_MAX_LENGTH: usize = crate::frame::MAX_UDP_PAYLOAD_LENGTH;
/// Bytes of the metadata structure at the end of a log file.
pub const LOG_METADATA_LENGTH: usize = 4096;
/// Number of consumer position slots in the metadata (subscribers of the IPC medium).
pub const CONSUMER_SLOT_COUNT: usize = 8;
/// Written last when a log is created; [`LogMetadata::magic`] holds it once the metadata is complete.
pub const LOG_MAGIC: i32 = 0x4743_4C51; // "QLCG" little-endian: a quorumcast log
/// Version of this layout, checked when a log is opened.
pub const LOG_LAYOUT_VERSION: i32 = 1;

/// Value of [`ConsumerSlot::state`]: the slot is free.
pub const SLOT_FREE: i64 = 0;
/// Value of [`ConsumerSlot::state`]: a consumer is claiming the slot and has not published a position yet.
pub const SLOT_CLAIMED: i64 = 1;
/// Value of [`ConsumerSlot::state`]: the slot's position counts towards the publication limit.
pub const SLOT_ACTIVE: i64 = 2;

/// One consumer position, alone on its 128-byte line so that consumers do not false-share.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct ConsumerSlot {
    /// The consumer's position: everything before it has been consumed. Written by its consumer (release).
    pub position: i64,
    /// [`SLOT_FREE`], [`SLOT_CLAIMED`] or [`SLOT_ACTIVE`]; zeroed memory is free.
    pub state: i64,
    /// Padding to the cache line.
    pub padding: [i64; 14],
}

const _: () = assert!(size_of::<ConsumerSlot>() == CACHE_LINE_LENGTH);

/// The metadata section of a log, little-endian, as it lies in the file.
///
/// Fields written on the hot path (tail counters, active term count) share the first cache line, which
/// only the appender writes; rarely written state (end of stream) and the constant configuration have
/// lines of their own; each consumer slot has its own line.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct LogMetadata {
    /// Per partition: `(term_id << 32) | term_offset` of the appender's tail (release-stored).
    pub tail_counters: [i64; PARTITION_COUNT],
    /// Number of rotations since the initial term; the active partition is `active_term_count % 3`.
    pub active_term_count: i32,
    /// Padding.
    pub pad0: i32,
    /// Padding to the next cache line.
    pub pad1: [i64; 12],
    /// Position at which the stream ended, `i64::MAX` while it is open.
    pub end_of_stream_position: i64,
    /// 1 while the publication is connected to at least one consumer (set by the medium), else 0.
    pub is_connected: i32,
    /// Padding.
    pub pad2: i32,
    /// Padding to the next cache line.
    pub pad3: [i64; 14],
    /// Term id of the first term.
    pub initial_term_id: i32,
    /// Bytes per term, a power of two in `[TERM_MIN_LENGTH, TERM_MAX_LENGTH]`.
    pub term_length: i32,
    /// Largest frame, header included; a multiple of 32.
    pub mtu: i32,
    /// Session id written into every frame.
    pub session_id: i32,
    /// Stream id written into every frame.
    pub stream_id: i32,
    /// Page size the file length is rounded to.
    pub page_size: i32,
    /// [`LOG_LAYOUT_VERSION`].
    pub layout_version: i32,
    /// [`LOG_MAGIC`] once the rest of the metadata is written (release-stored last).
    pub magic: i32,
    /// Padding to the next cache line.
    pub pad4: [i64; 12],
    /// Consumer positions (the IPC medium's subscribers).
    pub consumers: [ConsumerSlot; CONSUMER_SLOT_COUNT],
    /// Padding to [`LOG_METADATA_LENGTH`].
    pub pad5: [u8; 2048],
    /// Padding.
    pub pad6: [u8; 512],
    /// Padding.
    pub pad7: [u8; 128],
}

const _: () = assert!(size_of::<LogMetadata>() == LOG_METADATA_LENGTH);
const _: () = assert!(offset_of!(LogMetadata, end_of_stream_position) == CACHE_LINE_LENGTH);
const _: () = assert!(offset_of!(LogMetadata, initial_term_id) == 2 * CACHE_LINE_LENGTH);
const _: () = assert!(offset_of!(LogMetadata, consumers) == 3 * CACHE_LINE_LENGTH);

/// Offset of `tail_counters[0]` in the metadata.
pub const TAIL_COUNTERS_OFFSET: usize = offset_of!(LogMetadata, tail_counters);
/// Offset of `active_term_count`.
pub const ACTIVE_TERM_COUNT_OFFSET: usize = offset_of!(LogMetadata, active_term_count);
/// Offset of `end_of_stream_position`.
pub const END_OF_STREAM_POSITION_OFFSET: usize = offset_of!(LogMetadata, end_of_stream_position);
/// Offset of `is_connected`.
pub const IS_CONNECTED_OFFSET: usize = offset_of!(LogMetadata, is_connected);
/// Offset of `magic`.
pub const MAGIC_OFFSET: usize = offset_of!(LogMetadata, magic);
/// Offset of `consumers[0]`.
pub const CONSUMERS_OFFSET: usize = offset_of!(LogMetadata, consumers);
/// Offset of `position` within a [`ConsumerSlot`].
pub const SLOT_POSITION_OFFSET: usize = offset_of!(ConsumerSlot, position);
/// Offset of `state` within a [`ConsumerSlot`].
pub const SLOT_STATE_OFFSET: usize = offset_of!(ConsumerSlot, state);

/// Offset of the tail counter of `partition` in the metadata.
#[inline]
pub const fn tail_counter_offset(partition: usize) -> usize {
    TAIL_COUNTERS_OFFSET + partition * size_of::<i64>()
}

/// Offset of consumer slot `index` in the metadata.
#[inline]
pub const fn consumer_slot_offset(index: usize) -> usize {
    CONSUMERS_OFFSET + index * size_of::<ConsumerSlot>()
}

/// Length of a log file: three terms plus the metadata, rounded up to `page_size` (a power of two).
#[inline]
pub const fn log_length(term_length: usize, page_size: usize) -> usize {
    crate::shm::buffer::align(PARTITION_COUNT * term_length + LOG_METADATA_LENGTH, page_size)
}

/// `log2(term_length)`: how far a term count is shifted to make a position. `term_length` is a power of two.
#[inline]
pub const fn position_bits_to_shift(term_length: usize) -> u32 {
    term_length.trailing_zeros()
}

/// The position of `term_offset` in term `term_id`.
///
/// `term_id - initial_term_id` wraps, so term ids that pass `i32::MAX` still give increasing positions, as
/// long as the stream has not run through more than `2^31` terms.
#[inline]
pub const fn position(term_id: i32, term_offset: usize, initial_term_id: i32, bits: u32) -> i64 {
    let term_count = term_id.wrapping_sub(initial_term_id) as i64;
    (term_count << bits) + term_offset as i64
}

/// The term id that contains `position` (wrapping past `i32::MAX`).
#[inline]
pub const fn term_id(position: i64, initial_term_id: i32, bits: u32) -> i32 {
    ((position >> bits) as i32).wrapping_add(initial_term_id)
}

/// The offset of `position` within its term.
#[inline]
pub const fn term_offset(position: i64, term_length: usize) -> usize {
    (position as usize) & (term_length - 1)
}

/// The number of terms between the initial term and the one that contains `position`.
#[inline]
pub const fn term_count(position: i64, bits: u32) -> i64 {
    position >> bits
}

/// The partition (0, 1 or 2) that holds the term containing `position`.
#[inline]
pub const fn partition_index(position: i64, bits: u32) -> usize {
    (term_count(position, bits) % PARTITION_COUNT as i64) as usize
}

/// The partition that holds term `term_id` of a log that started at `initial_term_id`.
#[inline]
pub const fn partition_of_term(term_id: i32, initial_term_id: i32) -> usize {
    // The wrapping difference is a term count in [0, 2^31) for any stream shorter than 2^31 terms.
    (term_id.wrapping_sub(initial_term_id) as u32 as usize) % PARTITION_COUNT
}

/// A tail counter value: `(term_id << 32) | term_offset`.
#[inline]
pub const fn pack_tail(term_id: i32, term_offset: u32) -> i64 {
    ((term_id as i64) << 32) | term_offset as i64
}

/// The term id of a packed tail.
#[inline]
pub const fn tail_term_id(raw_tail: i64) -> i32 {
    (raw_tail >> 32) as i32
}

/// The term offset of a packed tail, capped at `term_length`.
#[inline]
pub const fn tail_term_offset(raw_tail: i64, term_length: usize) -> usize {
    let offset = (raw_tail & 0xFFFF_FFFF) as usize;
    if offset < term_length {
        offset
    } else {
        term_length
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BITS: u32 = 16; // 64 KiB terms

    #[test]
    fn position_round_trips() {
        let initial = 7;
        let p = position(9, 4096, initial, BITS);
        assert_eq!(p, 2 * 65536 + 4096);
        assert_eq!(term_id(p, initial, BITS), 9);
        assert_eq!(term_offset(p, 65536), 4096);
        assert_eq!(partition_index(p, BITS), 2);
        assert_eq!(partition_of_term(9, initial), 2);
    }

    #[test]
    fn term_ids_wrap_past_i32_max() {
        let initial = i32::MAX - 1;
        let wrapped = initial.wrapping_add(3); // i32::MIN + 1
        let p = position(wrapped, 32, initial, BITS);
        assert_eq!(p, 3 * 65536 + 32);
        assert_eq!(term_id(p, initial, BITS), wrapped);
        assert_eq!(partition_of_term(wrapped, initial), 0);
    }

    #[test]
    fn tails_pack_and_cap() {
        let raw = pack_tail(-5, 65536 + 96);
        assert_eq!(tail_term_id(raw), -5);
        assert_eq!(tail_term_offset(raw, 65536), 65536);
        assert_eq!(tail_term_offset(pack_tail(3, 64), 65536), 64);
    }

    #[test]
    fn lengths() {
        assert_eq!(log_length(65536, 4096), 3 * 65536 + 4096);
        assert_eq!(log_length(65536, 2 * 1024 * 1024), 2 * 1024 * 1024);
        assert_eq!(position_bits_to_shift(65536), 16);
    }
}
