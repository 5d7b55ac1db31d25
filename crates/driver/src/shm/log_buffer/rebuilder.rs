//! The receiver side: rebuilding an image log from received frames, in any order.

use std::fmt;

use super::descriptor::*;
use super::LogBuffer;
use crate::frame::{align_frame, DataHeader, DATA_HEADER_LENGTH, FRAME_ALIGNMENT, FRAME_LENGTH_OFFSET, TYPE_PAD};
use crate::shm::buffer::AtomicBuffer;

/// A range of a term that has not been received: what a NAK asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    /// Term of the gap.
    pub term_id: i32,
    /// Offset of its first byte in the term.
    pub term_offset: usize,
    /// Bytes missing (a multiple of 32).
    pub length: usize,
}

/// Why received frames were not inserted. Nothing of the datagram from the failing frame on was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RebuildError {
    /// The frames do not start at a 32-byte-aligned offset inside the term, or run past its end.
    OutsideTerm {
        /// Offset of the offending frame.
        term_offset: usize,
        /// Its aligned length.
        length: usize,
        /// The image's term length.
        term_length: usize,
    },
    /// A frame is truncated, shorter than its header, or its header names another place in the log.
    Malformed(&'static str),
}

impl fmt::Display for RebuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutsideTerm { term_offset, length, term_length } => write!(
                f,
                "frame of {length} bytes at term offset {term_offset} does not fit a term of {term_length} at a 32-byte boundary"
            ),
            Self::Malformed(why) => write!(f, "malformed frame: {why}"),
        }
    }
}

impl std::error::Error for RebuildError {}

/// Writes received frames into an image log so that a [`LogReader`](super::LogReader) can read it.
///
/// Invariants: it is the only writer of the image; every frame is stored header-then-payload with its
/// `frame_length` release-stored last; a frame slot already holding a frame is never written again
/// (duplicates are dropped). The caller keeps the highest received position within `term_length / 2`
/// of the slowest consumer, and calls [`clean_behind`](Self::clean_behind) with that consumer's
/// position, so partitions are zeroed before being reused and never while being read. Cleaning trails the
/// consumer by one term and goes a little at a time, as the consumer moves, so that no call zeroes a
/// whole term at once (16 MiB takes milliseconds).
#[derive(Debug)]
pub struct TermRebuilder {
    terms: [AtomicBuffer; PARTITION_COUNT],
    term_length: usize,
    initial_term_id: i32,
    bits: u32,
    /// Every byte of the image below this position that can be reused has been zeroed.
    clean_position: i64,
}

impl TermRebuilder {
    /// A rebuilder of the fresh (all zero) image `log` (whose initial term id is the publication's).
    pub fn new(log: &LogBuffer) -> Self {
        Self::joining_at(log, 0)
    }

    /// A rebuilder of the fresh image `log` whose first received byte will be at `join_position`: nothing
    /// below it was ever written, so cleaning starts there.
    pub fn joining_at(log: &LogBuffer, join_position: i64) -> Self {
        let term_length = log.term_length();
        Self {
            terms: log.terms().clone(),
            term_length,
            initial_term_id: log.config().initial_term_id,
            bits: position_bits_to_shift(term_length),
            clean_position: join_position.max(0),
        }
    }

    /// Inserts `frames` (one or more whole frames as received in one datagram, each data frame aligned
    /// to 32 bytes, a PAD frame as its header alone) at `term_offset` of term `term_id`.
    pub fn insert(&self, term_id: i32, term_offset: usize, frames: &[u8]) -> Result<(), RebuildError> {
        let term = &self.terms[partition_of_term(term_id, self.initial_term_id)];
        let mut offset = term_offset;
        let mut src = 0;
        while src < frames.len() {
            let rest = &frames[src..];
            if rest.len() < DATA_HEADER_LENGTH {
                return Err(RebuildError::Malformed("datagram ends inside a frame header"));
            }
            let header: DataHeader = bytemuck::pod_read_unaligned(&rest[..DATA_HEADER_LENGTH]);
            if header.frame_length < DATA_HEADER_LENGTH as i32 {
                return Err(RebuildError::Malformed("frame_length shorter than the data header"));
            }
            let length = header.frame_length as usize;
            let aligned = align_frame(length);
            if offset % FRAME_ALIGNMENT != 0 || offset >= self.term_length || aligned > self.term_length - offset {
                return Err(RebuildError::OutsideTerm {
                    term_offset: offset,
                    length: aligned,
                    term_length: self.term_length,
                });
            }
            if header.term_offset as usize != offset || header.term_id != term_id {
                return Err(RebuildError::Malformed("header term id or offset differs from where it is inserted"));
            }
            let (copy, wire) = if header.frame_type == TYPE_PAD {
                (DATA_HEADER_LENGTH, DATA_HEADER_LENGTH)
            } else {
                (length, aligned.min(rest.len()))
            };
            if rest.len() < copy {
                return Err(RebuildError::Malformed("datagram ends inside a frame"));
            }
            // Only this rebuilder writes the image, so a relaxed load tells whether the slot is free.
            if term.get_i32(offset + FRAME_LENGTH_OFFSET) == 0 {
                term.put_bytes(offset + 4, &rest[4..copy]);
                term.put_i32_release(offset + FRAME_LENGTH_OFFSET, header.frame_length);
            }
            src += wire;
            offset += aligned;
        }
        Ok(())
    }

    /// Inserts a run of frames that [`crate::frame::data_run`] has checked (contiguous, of term `term_id`
    /// from `term_offset`, a PAD only last): when the first frame's slot is free, the datagram's bytes are
    /// the log's bytes, so they go in with one copy, the first `frame_length` release-stored last (a reader
    /// reaches the later frames only through it). When the first slot is taken (a resend batched
    /// differently from the first send), it falls back to [`insert`](Self::insert), frame by frame. Frames
    /// after a free first slot may be overwritten with the same bytes: no reader is past that slot.
    pub fn insert_run(&self, term_id: i32, term_offset: usize, frames: &[u8]) -> Result<(), RebuildError> {
        let length = frames.len();
        if term_offset % FRAME_ALIGNMENT != 0
            || term_offset >= self.term_length
            || length > self.term_length - term_offset
        {
            return Err(RebuildError::OutsideTerm { term_offset, length, term_length: self.term_length });
        }
        if length < DATA_HEADER_LENGTH {
            return Err(RebuildError::Malformed("datagram ends inside a frame header"));
        }
        let term = &self.terms[partition_of_term(term_id, self.initial_term_id)];
        if term.get_i32(term_offset + FRAME_LENGTH_OFFSET) != 0 {
            return self.insert(term_id, term_offset, frames);
        }
        let frame_length = i32::from_le_bytes([frames[0], frames[1], frames[2], frames[3]]);
        term.put_bytes(term_offset + 4, &frames[4..]);
        term.put_i32_release(term_offset + FRAME_LENGTH_OFFSET, frame_length);
        Ok(())
    }

    /// The end of the contiguous frames received from `position`, following them into later terms up to
    /// `hwm` (the highest position received): the new rebuild position.
    pub fn rebuild_position(&self, position: i64, hwm: i64) -> i64 {
        let mut position = position;
        while position < hwm {
            let term = &self.terms[partition_index(position, self.bits)];
            let offset = term_offset(position, self.term_length);
            let frame_length = term.get_i32_acquire(offset + FRAME_LENGTH_OFFSET);
            if frame_length <= 0 {
                break;
            }
            position += align_frame(frame_length as usize) as i64;
        }
        position
    }

    /// The first gap at or after `rebuild_position` in its term, below `hwm`; `None` when every frame up
    /// to `hwm` (or the term end) is there.
    pub fn scan_for_gap(&self, rebuild_position: i64, hwm: i64) -> Option<Gap> {
        let count = term_count(rebuild_position, self.bits);
        let term = &self.terms[partition_index(rebuild_position, self.bits)];
        let limit =
            if term_count(hwm, self.bits) > count { self.term_length } else { term_offset(hwm, self.term_length) };
        let mut offset = term_offset(rebuild_position, self.term_length);
        while offset < limit {
            let frame_length = term.get_i32_acquire(offset + FRAME_LENGTH_OFFSET);
            if frame_length <= 0 {
                break;
            }
            offset += align_frame(frame_length as usize);
        }
        if offset >= limit {
            return None;
        }
        let start = offset;
        offset += FRAME_ALIGNMENT;
        while offset < limit && term.get_i32_acquire(offset + FRAME_LENGTH_OFFSET) == 0 {
            offset += FRAME_ALIGNMENT;
        }
        let term_id = term_id(rebuild_position, self.initial_term_id, self.bits);
        Some(Gap { term_id, term_offset: start, length: offset - start })
    }

    /// Zeroes the image from where the last call stopped up to one term behind `consumer_position` (the
    /// slowest consumer's). No consumer reads those bytes any more, and they are next written three terms
    /// on, beyond the `term_length / 2` the received data may run ahead of the consumer. Each call zeroes
    /// only what the consumer moved past since the last one.
    pub fn clean_behind(&mut self, consumer_position: i64) {
        let target = consumer_position - self.term_length as i64;
        while self.clean_position < target {
            let partition = partition_index(self.clean_position, self.bits);
            let offset = term_offset(self.clean_position, self.term_length);
            let length = (self.term_length - offset).min((target - self.clean_position) as usize);
            self.terms[partition].set_memory(offset, length, 0);
            self.clean_position += length as i64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::log_buffer::{scan, LogConfig, LogReader};

    fn pair() -> (LogBuffer, LogBuffer) {
        let config = LogConfig { initial_term_id: 100, ..LogConfig::new(65536, 1408) };
        (LogBuffer::create_anonymous(config).unwrap(), LogBuffer::create_anonymous(config).unwrap())
    }

    fn datagram(log: &LogBuffer, position: i64) -> (i32, usize, Vec<u8>, i64) {
        let s = scan(log, position, 1408);
        let bits = log.position_bits_to_shift();
        let offset = term_offset(position, log.term_length());
        let bytes = log.term(partition_index(position, bits)).bytes(offset, s.available).to_vec();
        (term_id(position, 100, bits), offset, bytes, position + s.advance() as i64)
    }

    #[test]
    fn out_of_order_inserts_fill_gaps() {
        let (log, image) = pair();
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        for i in 0..30u8 {
            a.append(&[i; 600]).unwrap(); // 640 bytes each, two per datagram
        }
        let mut datagrams = Vec::new();
        let mut position = 0;
        while position < a.position() {
            let d = datagram(&log, position);
            position = d.3;
            datagrams.push(d);
        }
        let rebuilder = TermRebuilder::new(&image);
        let (t, o, bytes, end) = &datagrams[2];
        rebuilder.insert(*t, *o, bytes).unwrap();
        assert_eq!(rebuilder.rebuild_position(0, *end), 0);
        assert_eq!(rebuilder.scan_for_gap(0, *end), Some(Gap { term_id: 100, term_offset: 0, length: 2560 }));
        for (t, o, bytes, _) in datagrams.iter().rev() {
            rebuilder.insert(*t, *o, bytes).unwrap();
            rebuilder.insert(*t, *o, bytes).unwrap(); // duplicates are dropped
        }
        assert_eq!(rebuilder.rebuild_position(0, position), position);
        assert_eq!(rebuilder.scan_for_gap(0, position), None);
        let mut count = 0;
        LogReader::new(&image).poll(0, 100, |p, _| {
            assert_eq!(p, &[count; 600]);
            count += 1;
        });
        assert_eq!(count, 30);
    }

    #[test]
    fn rejects_frames_that_do_not_fit() {
        let (log, image) = pair();
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        a.append(&[1; 100]).unwrap();
        let frame = log.term(0).bytes(0, 160).to_vec();
        let r = TermRebuilder::new(&image);
        assert!(matches!(r.insert(100, 65536 - 64, &frame), Err(RebuildError::OutsideTerm { .. })));
        assert!(matches!(r.insert(100, 32, &frame), Err(RebuildError::Malformed(_))), "header says offset 0");
        assert!(matches!(r.insert(100, 0, &frame[..100]), Err(RebuildError::Malformed(_))));
        assert!(matches!(r.insert(100, 0, &[0; 32]), Err(RebuildError::Malformed(_))));
        assert_eq!(image.term(0).get_i32(0), 0);
        r.insert(100, 0, &frame).unwrap();
        assert_eq!(image.term(0).bytes(0, 160), &frame[..]);
    }

    #[test]
    fn cleans_one_term_behind_the_consumer_a_little_at_a_time() {
        let (_, image) = pair();
        let mut r = TermRebuilder::new(&image);
        image.term(0).put_u8(100, 1);
        image.term(0).put_u8(200, 1);
        image.term(1).put_u8(100, 1);
        r.clean_behind(65536 + 10); // one term behind: [0, 10) only
        assert_eq!(image.term(0).get_u8(100), 1);
        r.clean_behind(65536 + 150);
        assert_eq!((image.term(0).get_u8(100), image.term(0).get_u8(200)), (0, 1), "cleaned up to 150 only");
        assert_eq!(image.term(1).get_u8(100), 1, "the term before the consumer's is still readable");
        image.term(0).put_u8(100, 2); // term 3 written there later
        r.clean_behind(65536 + 160);
        assert_eq!(image.term(0).get_u8(100), 2, "not cleaned twice");
        r.clean_behind(2 * 65536 + 300); // across a term boundary
        assert_eq!((image.term(0).get_u8(200), image.term(1).get_u8(100)), (0, 0));
    }

    #[test]
    fn a_late_joiner_cleans_nothing_below_its_join_position() {
        let (_, image) = pair();
        image.term(1).put_u8(5, 9); // below the join position: never written by this image, left alone
        let mut r = TermRebuilder::joining_at(&image, 2 * 65536);
        r.clean_behind(3 * 65536 + 100);
        assert_eq!(image.term(1).get_u8(5), 9);
    }
}
