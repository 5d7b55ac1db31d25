//! The single-writer appender.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytemuck::bytes_of;

use super::descriptor::*;
use super::LogBuffer;
use crate::frame::{
    framed_length, DataHeader, BEGIN_FLAG, CURRENT_VERSION, DATA_HEADER_LENGTH, END_FLAG, FRAME_ALIGNMENT,
    FRAME_LENGTH_OFFSET, RESERVED_VALUE_OFFSET, TYPE_DATA, TYPE_OFFSET, TYPE_PAD, UNFRAGMENTED,
};
use crate::shm::buffer::AtomicBuffer;

/// Copies at least this long are split into chunks of this length (see [`copy_in_chunks`]).
const COPY_CHUNK: usize = 2048;

/// Why an append did not happen. Nothing was written to the log in every case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendError {
    /// The append would pass the publication limit: the slowest consumer is too far behind. Retry later.
    BackPressured,
    /// The message is longer than the largest message, `term_length / 8`.
    MaxMessageLengthExceeded {
        /// Length of the message.
        length: usize,
        /// The largest message.
        max: usize,
    },
    /// A claim is longer than the largest payload of one frame, `mtu - 32`.
    ClaimLengthExceeded {
        /// Length asked for.
        length: usize,
        /// The largest payload of one frame.
        max: usize,
    },
    /// The appender has been closed (end of stream).
    Closed,
}

impl fmt::Display for AppendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BackPressured => write!(f, "back pressured: the slowest consumer is term_length / 2 behind; retry"),
            Self::MaxMessageLengthExceeded { length, max } => {
                write!(f, "message of {length} bytes exceeds the largest message of {max} (term_length / 8); use a longer term")
            }
            Self::ClaimLengthExceeded { length, max } => {
                write!(f, "claim of {length} bytes exceeds the largest frame payload of {max} (mtu - 32); use append")
            }
            Self::Closed => write!(f, "the appender is closed"),
        }
    }
}

impl std::error::Error for AppendError {}

/// The only writer of a log. Keeps the tail in its own fields and publishes it in the metadata.
///
/// Invariants: `position == position(term_id, term_offset)`; `term` is `terms[active]` and `tail_offset`
/// the offset of its tail counter; `term_offset <= term_length` and is a
/// multiple of 32; every frame before `term_offset` in the active term is committed; the bytes from
/// `term_offset` to the end of the active term are zero, and so are the bytes of the next partition below
/// `term_offset` (rounded up to a 4 KiB chunk): the appender zeroes the next partition a chunk at a time
/// as it fills the active one, so the partition is clean when it becomes active and no append ever zeroes
/// a whole term at once (16 MiB takes milliseconds). The appender never moves `position` beyond `limit`,
/// which must be at most the slowest consumer + `term_length / 2`.
#[derive(Debug)]
pub struct ExclusiveAppender {
    terms: [AtomicBuffer; PARTITION_COUNT],
    /// A view of `terms[active]`, so that the hot path does not index (and bounds-check) the array.
    term: AtomicBuffer,
    metadata: AtomicBuffer,
    /// Offset in the metadata of the active partition's tail counter.
    tail_offset: usize,
    shape: LogShape,
    term_count: i32,
    /// `term_count % 3`, kept so that the hot path does not divide.
    active: usize,
    term_id: i32,
    term_offset: usize,
    position: i64,
    limit: i64,
    /// Bytes of the next partition zeroed so far while in the active term, or `usize::MAX` when it
    /// needs no zeroing (fresh memory, never written), so that the hot path tests one compare.
    clean_offset: usize,
    closed: bool,
    taken: Arc<AtomicBool>,
}

/// What every frame of an appender's log is made within: the term that bounds it, the largest payload of
/// one frame and of one message, and the ids its header carries.
///
/// Invariant: fixed when the appender is made, from the log's configuration: `max_payload` is `mtu - 32`
/// and `max_message` is `term_length / 8`. Held by value in the appender, so the hot path reads each field
/// at a fixed offset from the appender, as it did when they were its own.
#[derive(Clone, Copy, Debug)]
struct LogShape {
    term_length: usize,
    max_payload: usize,
    max_message: usize,
    session_id: i32,
    stream_id: i32,
}

impl LogShape {
    /// Log bytes a message of `length` takes: whole `mtu`-sized fragments plus an aligned last one.
    #[inline]
    fn fragmented_length(&self, length: usize) -> usize {
        if length <= self.max_payload {
            return framed_length(length);
        }
        let whole = length / self.max_payload;
        let rest = length % self.max_payload;
        whole * (self.max_payload + DATA_HEADER_LENGTH) + if rest > 0 { framed_length(rest) } else { 0 }
    }
}

/// The appender zeroes the next partition this many bytes at a time (a page).
pub const CLEAN_CHUNK: usize = 4096;

/// The appender's `clean_offset` on entering the term of `term_count`: 0 when the next partition held a
/// term (`term_count - 2`) and must be zeroed as this one fills, `usize::MAX` when it was never used
/// (fresh memory is zero already, and touching it would fault pages in).
fn first_clean_offset(term_count: i32) -> usize {
    if term_count >= 2 {
        0
    } else {
        usize::MAX
    }
}

impl ExclusiveAppender {
    pub(super) fn new(log: &LogBuffer, taken: Arc<AtomicBool>) -> Self {
        let c = log.config();
        let metadata = log.metadata().clone();
        let term_count = metadata.get_i32_acquire(ACTIVE_TERM_COUNT_OFFSET);
        let raw = metadata.get_i64_acquire(tail_counter_offset(term_count as u32 as usize % PARTITION_COUNT));
        let term_id = tail_term_id(raw);
        let term_offset = tail_term_offset(raw, c.term_length);
        let bits = position_bits_to_shift(c.term_length);
        let active = term_count as u32 as usize % PARTITION_COUNT;
        Self {
            terms: log.terms().clone(),
            term: log.terms()[active].clone(),
            metadata,
            tail_offset: tail_counter_offset(active),
            shape: LogShape {
                term_length: c.term_length,
                max_payload: c.mtu - DATA_HEADER_LENGTH,
                max_message: c.term_length / 8,
                session_id: c.session_id,
                stream_id: c.stream_id,
            },
            term_count,
            active,
            term_id,
            term_offset,
            position: position(term_id, term_offset, c.initial_term_id, bits),
            limit: 0,
            // The next partition held term `term_count - 2` if there was one; zero it from the start (again:
            // what an earlier appender zeroed is zero still, and nothing of the next term is written yet).
            clean_offset: first_clean_offset(term_count),
            closed: log.end_of_stream_position().is_some(),
            taken,
        }
    }

    /// The position after the last appended byte.
    #[inline]
    pub fn position(&self) -> i64 {
        self.position
    }

    /// The publication limit: no append moves the position beyond it.
    #[inline]
    pub fn limit(&self) -> i64 {
        self.limit
    }

    /// Sets the publication limit; it must be at most the slowest consumer's position + `term_length / 2`.
    #[inline]
    pub fn set_limit(&mut self, limit: i64) {
        self.limit = limit;
    }

    /// Sets the limit from the consumer slots of the log (slowest + `term_length / 2`) and returns it;
    /// leaves it unchanged and returns `None` when no consumer is registered.
    pub fn refresh_limit_from_consumers(&mut self) -> Option<i64> {
        let limit = super::consumer_limit(&self.metadata, self.shape.term_length)?;
        self.limit = limit;
        Some(limit)
    }

    /// The largest message [`append`](Self::append) takes: `term_length / 8`.
    pub fn max_message_length(&self) -> usize {
        self.shape.max_message
    }

    /// The largest payload of one frame, and of a claim: `mtu - 32`.
    pub fn max_payload_length(&self) -> usize {
        self.shape.max_payload
    }

    /// Appends `message` once, fragmenting it if longer than `mtu - 32`, and returns the new position.
    #[inline(always)]
    pub fn append(&mut self, message: &[u8]) -> Result<i64, AppendError> {
        self.append_with_reserved(message, 0)
    }

    /// As [`append`](Self::append), with `reserved` in the `reserved_value` field of every frame
    /// (the consensus module piggybacks its commit position there).
    #[inline(always)]
    pub fn append_with_reserved(&mut self, message: &[u8], reserved: i64) -> Result<i64, AppendError> {
        if message.len() <= self.shape.max_payload {
            return self.append_unfragmented(message, reserved);
        }
        self.append_fragmented(message, reserved)
    }

    /// A message longer than one frame's payload, out of line.
    #[inline(never)]
    fn append_fragmented(&mut self, message: &[u8], reserved: i64) -> Result<i64, AppendError> {
        self.append_parts(&[message], message.len(), reserved, 0)
    }

    /// The hot path: one frame, header, copy, commit, tail. A payload shorter than [`COPY_CHUNK`] (every
    /// one but the longest) goes in with the header and the commit as one record: one bounds check.
    ///
    /// Inlined into the caller (an offer loop), as an SPSC ring's push is: a call, its saved registers
    /// and a result returned through memory cost more than the rest of a 32-byte append.
    #[inline(always)]
    fn append_unfragmented(&mut self, message: &[u8], reserved: i64) -> Result<i64, AppendError> {
        if message.len() >= COPY_CHUNK {
            return self.append_long_unfragmented(message, reserved);
        }
        let required = framed_length(message.len());
        let offset = self.reserve(required)?;
        let header = self.header(offset, UNFRAGMENTED, TYPE_DATA, reserved);
        let frame_length = (DATA_HEADER_LENGTH + message.len()) as i32;
        self.term.put_record_release(offset, &bytes_of(&header)[4..], message, frame_length);
        Ok(self.advance(required))
    }

    /// [`append_unfragmented`](Self::append_unfragmented) of a payload of at least [`COPY_CHUNK`] bytes,
    /// copied in chunks (see [`copy_in_chunks`]); out of line, where its copy dwarfs the call.
    #[inline(never)]
    fn append_long_unfragmented(&mut self, message: &[u8], reserved: i64) -> Result<i64, AppendError> {
        let required = framed_length(message.len());
        let offset = self.reserve(required)?;
        self.write_header(offset, UNFRAGMENTED, TYPE_DATA, reserved);
        copy_in_chunks(&self.term, offset + DATA_HEADER_LENGTH, message);
        self.term.put_i32_release(offset + FRAME_LENGTH_OFFSET, (DATA_HEADER_LENGTH + message.len()) as i32);
        Ok(self.advance(required))
    }

    /// Appends one frame as another log holds it: `payload` with the fragment `flags` and `reserved` value
    /// it carries there. Copying a log's frames in order, from a position where both logs start, puts
    /// each at the same position as in the source (framing and term-end padding depend on positions only);
    /// see [`copy_frames`](super::copy_frames). `payload` is at most `mtu - 32` bytes.
    pub fn append_frame(&mut self, payload: &[u8], flags: u8, reserved: i64) -> Result<i64, AppendError> {
        if payload.len() > self.shape.max_payload {
            return Err(AppendError::ClaimLengthExceeded { length: payload.len(), max: self.shape.max_payload });
        }
        let required = framed_length(payload.len());
        let offset = self.reserve(required)?;
        self.write_header(offset, flags, TYPE_DATA, reserved);
        let term = &self.term;
        copy_in_chunks(term, offset + DATA_HEADER_LENGTH, payload);
        term.put_i32_release(offset + FRAME_LENGTH_OFFSET, (DATA_HEADER_LENGTH + payload.len()) as i32);
        Ok(self.advance(required))
    }

    /// Appends a PAD frame of `length` bytes (a multiple of 32, within the active term): the copy of a gap
    /// that an abandoned claim left in another log.
    pub fn append_padding(&mut self, length: usize) -> Result<i64, AppendError> {
        if length == 0 || length % FRAME_ALIGNMENT != 0 || length > self.shape.term_length - self.term_offset {
            return Err(AppendError::ClaimLengthExceeded { length, max: self.shape.term_length - self.term_offset });
        }
        let offset = self.reserve(length)?;
        self.write_header(offset, UNFRAGMENTED, TYPE_PAD, 0);
        self.term.put_i32_release(offset + FRAME_LENGTH_OFFSET, length as i32);
        Ok(self.advance(length))
    }

    /// Appends the concatenation of `parts` as one message.
    pub fn append_vectored(&mut self, parts: &[&[u8]]) -> Result<i64, AppendError> {
        self.append_parts(parts, parts.iter().map(|p| p.len()).sum(), 0, 0)
    }

    /// As [`append_vectored`](Self::append_vectored), with `reserved` in every frame and `flags` (such as
    /// [`crate::frame::APPLICATION_FLAG`]) set on every fragment beside the fragment flags.
    pub fn append_vectored_flagged(&mut self, parts: &[&[u8]], reserved: i64, flags: u8) -> Result<i64, AppendError> {
        self.append_parts(parts, parts.iter().map(|p| p.len()).sum(), reserved, flags & !UNFRAGMENTED)
    }

    /// Claims a frame for a payload of `length` bytes (at most `mtu - 32`) to be written in place.
    ///
    /// Fill it with [`BufferClaim::put_bytes`] and [`BufferClaim::commit`] it; a claim dropped without
    /// commit is abandoned, and becomes padding that readers skip.
    pub fn try_claim(&mut self, length: usize) -> Result<BufferClaim<'_>, AppendError> {
        if length > self.shape.max_payload {
            return Err(AppendError::ClaimLengthExceeded { length, max: self.shape.max_payload });
        }
        let offset = self.reserve(framed_length(length))?;
        self.write_header(offset, UNFRAGMENTED, TYPE_DATA, 0);
        Ok(BufferClaim { appender: self, offset, length, done: false })
    }

    /// Ends the stream: records the end-of-stream position in the metadata; later appends fail with
    /// [`AppendError::Closed`].
    pub fn close(&mut self) {
        self.closed = true;
        self.metadata.put_i64_release(END_OF_STREAM_POSITION_OFFSET, self.position);
    }

    /// Whether [`close`](Self::close) has been called (by this or an earlier appender of the log).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    fn append_parts(&mut self, parts: &[&[u8]], length: usize, reserved: i64, extra: u8) -> Result<i64, AppendError> {
        if length > self.shape.max_message {
            return Err(AppendError::MaxMessageLengthExceeded { length, max: self.shape.max_message });
        }
        let required = self.shape.fragmented_length(length);
        let mut offset = self.reserve(required)?;
        let mut source = Parts { parts, index: 0, offset: 0 };
        if length <= self.shape.max_payload {
            self.write_frame(offset, UNFRAGMENTED | extra, reserved, &mut source, length);
        } else {
            let mut remaining = length;
            let mut flags = BEGIN_FLAG;
            while remaining > 0 {
                let chunk = remaining.min(self.shape.max_payload);
                remaining -= chunk;
                if remaining == 0 {
                    flags |= END_FLAG;
                }
                self.write_frame(offset, flags | extra, reserved, &mut source, chunk);
                offset += framed_length(chunk);
                flags = 0;
            }
        }
        Ok(self.advance(required))
    }

    /// Makes room for `required` bytes in the active term, padding and rotating if they do not fit, and
    /// returns their offset; fails, having written nothing, when closed or when the limit forbids it.
    #[inline]
    fn reserve(&mut self, required: usize) -> Result<usize, AppendError> {
        if self.closed {
            return Err(AppendError::Closed);
        }
        // The common case, one test each: the frame fits in the term and under the limit.
        if required <= self.shape.term_length - self.term_offset && self.position + required as i64 <= self.limit {
            return Ok(self.term_offset);
        }
        self.reserve_across(required)
    }

    /// [`reserve`](Self::reserve) when the frame does not fit in the term or passes the limit.
    #[cold]
    fn reserve_across(&mut self, required: usize) -> Result<usize, AppendError> {
        let remaining = self.shape.term_length - self.term_offset;
        let total = if required <= remaining { required } else { remaining + required };
        if self.position + total as i64 > self.limit {
            return Err(AppendError::BackPressured);
        }
        if required > remaining {
            self.pad_and_rotate(remaining);
        }
        Ok(self.term_offset)
    }

    /// Fills the rest of the active term with a PAD frame and makes the next term active.
    ///
    /// The new active partition was zeroed while the old term filled. The partition after it held term
    /// `T - 1` (two terms before the new `T + 1`) and will hold `T + 2`; appends into `T + 1` zero it a
    /// chunk at a time. No consumer can be reading it: consumers are at most `term_length / 2` behind, so
    /// from now on all of them are in term `T` or later.
    #[cold]
    fn pad_and_rotate(&mut self, remaining: usize) {
        if remaining > 0 {
            let offset = self.term_offset;
            self.write_header(offset, UNFRAGMENTED, TYPE_PAD, 0);
            self.term.put_i32_release(offset + FRAME_LENGTH_OFFSET, remaining as i32);
            self.advance(remaining);
        }
        self.clean_next_to(self.shape.term_length);
        self.term_count = self.term_count.wrapping_add(1);
        self.active = self.term_count as u32 as usize % PARTITION_COUNT;
        self.term_id = self.term_id.wrapping_add(1);
        self.term_offset = 0;
        let next = self.partition();
        self.term = self.terms[next].clone();
        self.tail_offset = tail_counter_offset(next);
        self.clean_offset = first_clean_offset(self.term_count);
        self.metadata.put_i64_release(tail_counter_offset(next), pack_tail(self.term_id, 0));
        self.metadata.put_i32_release(ACTIVE_TERM_COUNT_OFFSET, self.term_count);
    }

    #[inline]
    fn partition(&self) -> usize {
        self.active
    }

    /// Moves the tail by `length` committed bytes, publishes it, and returns the new position.
    #[inline]
    fn advance(&mut self, length: usize) -> i64 {
        self.term_offset += length;
        self.position += length as i64;
        if self.term_offset > self.clean_offset {
            self.clean_next_to(self.term_offset);
        }
        let raw = pack_tail(self.term_id, self.term_offset as u32);
        self.metadata.put_i64_release(self.tail_offset, raw);
        self.position
    }

    /// Zeroes the next partition up to `offset` rounded up to [`CLEAN_CHUNK`] (at most the term length),
    /// when it held an old term (`clean_offset` is `usize::MAX` otherwise, and nothing is below it).
    #[cold]
    fn clean_next_to(&mut self, offset: usize) {
        let end = offset.next_multiple_of(CLEAN_CHUNK).min(self.shape.term_length);
        if end > self.clean_offset {
            let next = (self.active + 1) % PARTITION_COUNT;
            self.terms[next].set_memory(self.clean_offset, end - self.clean_offset, 0);
            self.clean_offset = end;
        }
    }

    /// Writes every header field but `frame_length`, which stays 0 (uncommitted).
    #[inline]
    fn write_header(&self, offset: usize, flags: u8, frame_type: u16, reserved: i64) {
        let header = self.header(offset, flags, frame_type, reserved);
        // Skip `frame_length`: readers load it atomically, so it is only ever written by the release store.
        self.term.put_bytes(offset + 4, &bytes_of(&header)[4..]);
    }

    /// The header of a frame at `offset` of the active term, `frame_length` 0 (written last, on commit).
    #[inline(always)]
    fn header(&self, offset: usize, flags: u8, frame_type: u16, reserved: i64) -> DataHeader {
        DataHeader {
            frame_length: 0,
            version: CURRENT_VERSION,
            flags,
            frame_type,
            term_offset: offset as i32,
            session_id: self.shape.session_id,
            stream_id: self.shape.stream_id,
            term_id: self.term_id,
            reserved_value: reserved,
        }
    }

    /// Writes one whole frame: header, `length` bytes from `source`, then the release store of its length.
    #[inline]
    fn write_frame(&self, offset: usize, flags: u8, reserved: i64, source: &mut Parts<'_>, length: usize) {
        self.write_header(offset, flags, TYPE_DATA, reserved);
        let term = &self.term;
        source.copy_to(term, offset + DATA_HEADER_LENGTH, length);
        term.put_i32_release(offset + FRAME_LENGTH_OFFSET, (DATA_HEADER_LENGTH + length) as i32);
    }
}

impl Drop for ExclusiveAppender {
    fn drop(&mut self) {
        self.taken.store(false, Ordering::Release);
    }
}

/// A cursor over the pieces of a vectored message.
struct Parts<'a> {
    parts: &'a [&'a [u8]],
    index: usize,
    offset: usize,
}

impl Parts<'_> {
    /// Copies the next `length` bytes of the message to `offset` of `term`.
    #[inline]
    fn copy_to(&mut self, term: &AtomicBuffer, mut offset: usize, mut length: usize) {
        while length > 0 {
            let part = &self.parts[self.index][self.offset..];
            let n = part.len().min(length);
            copy_in_chunks(term, offset, &part[..n]);
            offset += n;
            length -= n;
            self.offset += n;
            if self.offset == self.parts[self.index].len() {
                self.index += 1;
                self.offset = 0;
            }
        }
    }
}

/// Copies `src` to `offset` of `term` in pieces shorter than glibc's `rep movsb` threshold (2112 bytes).
///
/// On some CPUs (Zen 3 among them) `rep movsb` is many times slower when `(dst - src) mod 4096` is a
/// small positive number, and a term's payloads start at 32-byte offsets wherever the caller's buffer
/// lies; the vector loop glibc uses below the threshold has no such cliff. Where the CPU has no cliff,
/// the chunks cost nothing measurable. The measurements are in docs/results.md; `copy_distance_probe`
/// in `tests/log_buffer_props.rs` takes them on the host at hand.
#[inline]
pub(super) fn copy_in_chunks(term: &AtomicBuffer, offset: usize, src: &[u8]) {
    if src.len() < COPY_CHUNK {
        term.put_bytes(offset, src);
    } else {
        for (i, chunk) in src.chunks(COPY_CHUNK).enumerate() {
            term.put_bytes(offset + i * COPY_CHUNK, chunk);
        }
    }
}

/// A frame claimed for in-place writing. Commit it, or drop it to abandon it (it becomes padding).
#[derive(Debug)]
pub struct BufferClaim<'a> {
    appender: &'a mut ExclusiveAppender,
    offset: usize,
    length: usize,
    done: bool,
}

impl BufferClaim<'_> {
    /// Length of the payload claimed.
    pub fn len(&self) -> usize {
        self.length
    }

    /// Whether the claim has no payload.
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// Writes `src` at `offset` of the payload.
    ///
    /// # Panics
    /// When `offset + src.len()` exceeds the claimed length (as slice indexing would).
    pub fn put_bytes(&mut self, offset: usize, src: &[u8]) {
        assert!(
            offset <= self.length && src.len() <= self.length - offset,
            "{} bytes at {offset} do not fit a claim of {}",
            src.len(),
            self.length
        );
        let start = self.offset + DATA_HEADER_LENGTH + offset;
        copy_in_chunks(&self.appender.term, start, src);
    }

    /// Sets the frame's `reserved_value`.
    pub fn set_reserved_value(&mut self, value: i64) {
        let term = &self.appender.term;
        term.put_bytes(self.offset + RESERVED_VALUE_OFFSET, &value.to_le_bytes());
    }

    /// Commits the frame and returns the new position.
    pub fn commit(mut self) -> i64 {
        self.finish(TYPE_DATA)
    }

    /// Abandons the claim: the frame becomes padding, which readers skip. Returns the new position.
    pub fn abandon(mut self) -> i64 {
        self.finish(TYPE_PAD)
    }

    fn finish(&mut self, frame_type: u16) -> i64 {
        self.done = true;
        let term = &self.appender.term;
        if frame_type == TYPE_PAD {
            term.put_u16(self.offset + TYPE_OFFSET, TYPE_PAD);
        }
        term.put_i32_release(self.offset + FRAME_LENGTH_OFFSET, (DATA_HEADER_LENGTH + self.length) as i32);
        self.appender.advance(framed_length(self.length))
    }
}

impl Drop for BufferClaim<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.finish(TYPE_PAD);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{FLAGS_OFFSET, TERM_ID_OFFSET, TERM_OFFSET_OFFSET};
    use crate::shm::log_buffer::LogConfig;

    fn log(mtu: usize) -> LogBuffer {
        LogBuffer::create_anonymous(LogConfig { initial_term_id: 5, session_id: 9, ..LogConfig::new(65536, mtu) })
            .unwrap()
    }

    #[test]
    fn writes_one_frame_with_its_header() {
        let log = log(1408);
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        assert_eq!(a.append_with_reserved(b"abc", 77).unwrap(), 64);
        let t = log.term(0);
        assert_eq!(t.get_i32_acquire(0), 35);
        assert_eq!(t.get_u8(FLAGS_OFFSET), UNFRAGMENTED);
        assert_eq!(t.get_u16(TYPE_OFFSET), TYPE_DATA);
        assert_eq!(t.get_i32(TERM_ID_OFFSET), 5);
        assert_eq!(t.get_i64(RESERVED_VALUE_OFFSET), 77);
        assert_eq!(t.bytes(32, 3), b"abc");
        assert_eq!(t.get_i32_acquire(64), 0, "the next frame is not committed");
        assert_eq!(log.producer_position(), 64);
    }

    #[test]
    fn fragments_long_messages() {
        let log = log(1408);
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        let message: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let end = a.append(&message).unwrap();
        assert_eq!(end, 1408 + 1408 + framed_length(3000 - 2 * 1376) as i64);
        let t = log.term(0);
        let flags: Vec<u8> = [0, 1408, 2816].iter().map(|&o| t.get_u8(o + FLAGS_OFFSET)).collect();
        assert_eq!(flags, [BEGIN_FLAG, 0, END_FLAG]);
        assert_eq!(t.get_i32(2816), 32 + 3000 - 2752);
        assert_eq!(t.get_i32(1408 + TERM_OFFSET_OFFSET), 1408);
        assert_eq!(t.bytes(1408 + 32, 1376), &message[1376..2752]);
    }

    #[test]
    fn pads_rotates_and_zeroes_the_next_partition_as_the_active_one_fills() {
        let log = log(8192);
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        let message = [7u8; 8000];
        // 8 frames of 8032 bytes fill 64256 of 65536; the 9th does not fit, so 1280 bytes of padding.
        for _ in 0..8 {
            a.append(&message).unwrap();
        }
        let end = a.append(&message).unwrap();
        assert_eq!(end, 65536 + 8032);
        let t0 = log.term(0);
        assert_eq!(t0.get_i32_acquire(64256), 1280);
        assert_eq!(t0.get_u16(64256 + TYPE_OFFSET), TYPE_PAD);
        assert_eq!(log.term(1).get_i32(TERM_ID_OFFSET), 6);
        // Fill terms 1 and 2 and rotate into term 3 (partition 0), which was zeroed while term 2 filled.
        while a.position() < 3 * 65536 {
            a.append(&message).unwrap();
        }
        assert_eq!(a.position(), 3 * 65536 + 8032);
        assert_eq!(log.term(0).get_i32(TERM_ID_OFFSET), 8);
        assert!(log.term(0).bytes(8032, 65536 - 8032).iter().all(|&b| b == 0), "term 0's frames are gone");
        assert_eq!(log.producer_position(), a.position());
        // Partition 1 (term 1, next term 4) is zeroed a chunk at a time as term 3 fills: up to 8192 now.
        let t1 = log.term(1);
        assert!(t1.bytes(0, 8192).iter().all(|&b| b == 0));
        assert_ne!(t1.bytes(8192, 65536 - 8192).iter().filter(|&&b| b != 0).count(), 0, "the rest holds term 1");
        while a.position() < 4 * 65536 {
            a.append(&message).unwrap();
        }
        assert!(log.term(1).bytes(8032, 65536 - 8032).iter().all(|&b| b == 0), "all of it once term 3 is full");
    }

    #[test]
    fn back_pressure_writes_nothing() {
        let log = log(1408);
        let mut a = log.appender().unwrap();
        a.set_limit(100);
        assert_eq!(a.append(&[1; 32]).unwrap(), 64);
        assert_eq!(a.append(&[1; 32]), Err(AppendError::BackPressured));
        assert_eq!(log.term(0).get_i32_acquire(64), 0);
        assert_eq!(a.position(), 64);
        assert!(matches!(a.try_claim(10), Err(AppendError::BackPressured)));
        assert_eq!(a.append(&[0; 8193]), Err(AppendError::MaxMessageLengthExceeded { length: 8193, max: 8192 }));
        assert!(a.append(&[0; 8193]).unwrap_err().to_string().contains("8193"));
    }

    #[test]
    fn limit_counts_the_padding() {
        let log = log(8192);
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        for _ in 0..8 {
            a.append(&[0; 8000]).unwrap();
        }
        a.set_limit(65536 + 1343);
        assert_eq!(a.append(&[0; 1300]), Err(AppendError::BackPressured), "pad 1280 + frame 1344 > limit");
        assert_eq!(log.term(0).get_i32_acquire(64256), 0, "no padding written");
        a.set_limit(65536 + 1344);
        assert_eq!(a.append(&[0; 1300]), Ok(65536 + 1344));
    }

    #[test]
    fn claims_commit_or_become_padding() {
        let log = log(1408);
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        let mut claim = a.try_claim(5).unwrap();
        assert_eq!(log.term(0).get_i32_acquire(0), 0, "uncommitted");
        claim.put_bytes(0, b"hello");
        claim.set_reserved_value(3);
        assert_eq!(claim.commit(), 64);
        assert_eq!(log.term(0).bytes(32, 5), b"hello");
        drop(a.try_claim(40).unwrap());
        assert_eq!(log.term(0).get_u16(64 + TYPE_OFFSET), TYPE_PAD);
        assert_eq!(log.term(0).get_i32_acquire(64), 72);
        assert_eq!(a.position(), 64 + 96);
        assert!(matches!(a.try_claim(1377), Err(AppendError::ClaimLengthExceeded { .. })));
    }

    #[test]
    fn vectored_appends_join_the_parts() {
        let log = log(1408);
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        let big: Vec<u8> = (0..2000u32).map(|i| (i * 7) as u8).collect();
        a.append_vectored(&[b"ab", &big, b"", b"cd"]).unwrap();
        let t = log.term(0);
        let mut joined = t.bytes(32, 1376).to_vec();
        joined.extend_from_slice(t.bytes(1408 + 32, 2004 - 1376));
        assert_eq!(&joined[..2], b"ab");
        assert_eq!(&joined[2..2002], &big[..]);
        assert_eq!(&joined[2002..], b"cd");
    }

    #[test]
    fn close_ends_the_stream() {
        let log = log(1408);
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        a.append(b"x").unwrap();
        a.close();
        assert_eq!(a.append(b"y"), Err(AppendError::Closed));
        assert_eq!(log.end_of_stream_position(), Some(64));
        drop(a);
        assert!(log.appender().unwrap().is_closed());
    }

    #[test]
    fn a_new_appender_resumes_at_the_tail() {
        let log = log(8192);
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        for _ in 0..20 {
            a.append(&[1; 5000]).unwrap();
        }
        let p = a.position();
        drop(a);
        let mut b = log.appender().unwrap();
        assert_eq!(b.position(), p);
        b.set_limit(i64::MAX);
        assert_eq!(b.append(&[]).unwrap(), p + 32);
    }
}
