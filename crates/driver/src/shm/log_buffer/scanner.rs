//! The sender-side scan: the longest run of whole committed frames that fits one datagram.

use super::descriptor::{partition_index, position_bits_to_shift, term_offset};
use super::LogBuffer;
use crate::frame::{align_frame, DATA_HEADER_LENGTH, FRAME_LENGTH_OFFSET, TYPE_OFFSET, TYPE_PAD};
use crate::shm::buffer::AtomicBuffer;

/// What a scan found: send `available` bytes from the scanned offset, then advance by
/// `available + padding`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// Bytes of whole committed frames from the scanned offset, at most the limit; a PAD frame counts as
    /// its 32-byte header only.
    pub available: usize,
    /// Bytes of PAD frame body after `available`, which are not sent (0 when the run has no PAD frame).
    pub padding: usize,
}

impl Scan {
    /// How far the sender's position moves once the `available` bytes are sent.
    pub fn advance(&self) -> usize {
        self.available + self.padding
    }
}

/// Scans the log from `position` for whole committed frames whose aligned lengths sum to at most `limit`.
///
/// The run never crosses the end of the term, never splits a frame, and stops at the first frame not
/// yet committed (acquire-loaded `frame_length <= 0`). A PAD frame ends the run: only its header is in
/// `available` (the receiver learns the padding length from it) and its body is reported as `padding`.
pub fn scan(log: &LogBuffer, position: i64, limit: usize) -> Scan {
    let bits = position_bits_to_shift(log.term_length());
    let term = log.term(partition_index(position, bits));
    scan_term(term, term_offset(position, log.term_length()), limit)
}

/// [`scan`] within one term buffer, from `offset` (a multiple of 32).
pub fn scan_term(term: &AtomicBuffer, offset: usize, limit: usize) -> Scan {
    let end = term.len();
    let mut scan = Scan::default();
    let mut offset = offset;
    while offset < end {
        let frame_length = term.get_i32_acquire(offset + FRAME_LENGTH_OFFSET);
        if frame_length <= 0 {
            break;
        }
        let aligned = align_frame(frame_length as usize);
        if aligned > end - offset {
            break; // not a frame this log could hold: stop rather than send it
        }
        let (wire, padding) = if term.get_u16(offset + TYPE_OFFSET) == TYPE_PAD {
            (DATA_HEADER_LENGTH, aligned - DATA_HEADER_LENGTH)
        } else {
            (aligned, 0)
        };
        if scan.available + wire > limit {
            break;
        }
        scan.available += wire;
        if padding > 0 {
            scan.padding = padding;
            break;
        }
        offset += aligned;
    }
    scan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::log_buffer::LogConfig;

    #[test]
    fn runs_of_whole_frames_within_the_limit() {
        let log = LogBuffer::create_anonymous(LogConfig::new(65536, 1408)).unwrap();
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        for _ in 0..5 {
            a.append(&[1; 100]).unwrap(); // 160 bytes each
        }
        assert_eq!(scan(&log, 0, 1408), Scan { available: 800, padding: 0 });
        assert_eq!(scan(&log, 0, 500), Scan { available: 480, padding: 0 });
        assert_eq!(scan(&log, 160, 159), Scan::default());
        assert_eq!(scan(&log, 800, 1408), Scan::default(), "nothing committed there");
    }

    #[test]
    fn padding_is_sent_as_its_header() {
        let log = LogBuffer::create_anonymous(LogConfig::new(65536, 8192)).unwrap();
        let mut a = log.appender().unwrap();
        a.set_limit(i64::MAX);
        for _ in 0..9 {
            a.append(&[2; 8000]).unwrap(); // 8 x 8032 = 64256, then 1280 of padding
        }
        assert_eq!(scan(&log, 7 * 8032, 8192), Scan { available: 8064, padding: 1248 }, "frame + pad header");
        assert_eq!(scan(&log, 7 * 8032, 8063), Scan { available: 8032, padding: 0 }, "no room for the pad header");
        assert_eq!(scan(&log, 8 * 8032, 8192), Scan { available: 32, padding: 1248 });
        assert_eq!(scan(&log, 7 * 8032, 8064).advance(), 8032 + 1280);
        assert_eq!(scan(&log, 65536, 8192), Scan { available: 8032, padding: 0 });
    }
}
