//! The many producers' claim (compare-and-set on the tail) and recovery from a producer that died
//! mid-record.

use crate::shm::buffer::AtomicBuffer;

use super::descriptor::{write_padding, LENGTH_OFFSET, RECORD_ALIGNMENT, TAIL_POSITION_OFFSET};
use super::{place, reserve, sealed, ProducerMode, RingBuffer, RingError};

/// Producer mode of [`super::ManyToOneRingBuffer`]: any number of producers, in any processes, which claim
/// space by compare-and-set on the tail. Never instantiated; a type-level marker.
#[derive(Debug)]
pub enum ManyProducers {}

impl ProducerMode for ManyProducers {}

impl sealed::Claimer for ManyProducers {
    #[inline]
    fn claim_capacity(buffer: &AtomicBuffer, capacity: usize, required: usize) -> Result<usize, RingError> {
        let tail_at = capacity + TAIL_POSITION_OFFSET;
        loop {
            let tail = buffer.get_i64_acquire(tail_at);
            let padding = reserve(buffer, capacity, tail, required)?;
            // Whoever moves the tail from `tail` owns `[tail, tail + padding + required)`. A failed CAS means
            // another producer claimed first: recompute from the new tail.
            if buffer.compare_and_set_i64(tail_at, tail, tail + (padding + required) as i64) {
                return Ok(place(buffer, tail as usize & (capacity - 1), padding));
            }
        }
    }
}

impl RingBuffer<ManyProducers> {
    /// Frees the ring from a producer that claimed a record and died before committing it (the consumer
    /// stops at an uncommitted record for ever otherwise) by turning that record into padding. Returns
    /// whether it did.
    ///
    /// It cannot tell a dead producer from a slow one: call it only from the consumer's side, after the
    /// consumer position has stood still, with records waiting, for far longer than any live producer takes
    /// to write a record (Aeron's driver uses seconds). It handles a producer that died after writing its
    /// header (negative length), and one that died before, when a later record has been started after it
    /// (its header is found by scanning the zeroed space) or the claim runs to the end of the data area.
    pub fn unblock(&self) -> bool {
        let head = self.consumer_position();
        let tail = self.producer_position();
        if head == tail {
            return false;
        }
        let start = self.index(head);
        let length = self.buffer.get_i32_acquire(start + LENGTH_OFFSET);
        if length < 0 {
            write_padding(&self.buffer, start, length.unsigned_abs() as usize);
            return true;
        }
        if length > 0 {
            return false; // committed: the consumer can move on by itself
        }
        let tail_index = self.index(tail);
        let wrapped = tail - head >= (self.capacity - start) as i64;
        let limit = if wrapped { self.capacity } else { tail_index };
        let mut index = start + RECORD_ALIGNMENT;
        while index < limit {
            if self.buffer.get_i32_acquire(index + LENGTH_OFFSET) != 0 {
                write_padding(&self.buffer, start, index - start);
                return true;
            }
            index += RECORD_ALIGNMENT;
        }
        if wrapped {
            // Claimed all the way to the end and never started: the rest of the area is padding to be.
            write_padding(&self.buffer, start, self.capacity - start);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::super::{descriptor::required_length, ManyToOneRingBuffer};
    use crate::shm::buffer::AtomicBuffer;

    fn ring(capacity: usize) -> ManyToOneRingBuffer {
        ManyToOneRingBuffer::new(AtomicBuffer::anonymous(required_length(capacity)).unwrap()).unwrap()
    }

    fn drain(ring: &ManyToOneRingBuffer) -> Vec<(i32, Vec<u8>)> {
        let mut out = Vec::new();
        ring.read(|t, m| out.push((t, m.to_vec())), usize::MAX);
        out
    }

    #[test]
    fn unblock_pads_a_record_whose_producer_died_after_its_header() {
        let ring = ring(1024);
        std::mem::forget(ring.try_claim(5, 40).unwrap()); // a producer that dies mid-record
        ring.write(6, b"after").unwrap();
        assert!(drain(&ring).is_empty(), "the consumer must stop at the uncommitted record");
        assert!(ring.unblock());
        assert_eq!(drain(&ring), vec![(6, b"after".to_vec())]);
        assert_eq!(ring.consumer_position(), ring.producer_position());
        assert!(!ring.unblock(), "nothing left to unblock");
    }

    #[test]
    fn unblock_pads_a_claim_whose_producer_died_before_its_header() {
        let ring = ring(1024);
        ring.write(1, b"x").unwrap();
        drain(&ring);
        // Move the tail as a producer's CAS would, and write nothing there.
        let tail_at = ring.capacity() + super::TAIL_POSITION_OFFSET;
        let tail = ring.producer_position();
        assert!(ring.buffer().compare_and_set_i64(tail_at, tail, tail + 48));
        assert!(!ring.unblock(), "nothing after the claim yet: it may still be written");
        ring.write(2, b"after").unwrap();
        assert!(ring.unblock());
        assert_eq!(drain(&ring), vec![(2, b"after".to_vec())]);
        assert_eq!(ring.consumer_position(), ring.producer_position());
    }

    #[test]
    fn unblock_pads_a_dead_claim_that_runs_to_the_end() {
        let ring = ring(128);
        for _ in 0..4 {
            ring.write(1, &[7; 16]).unwrap(); // 24-byte records
        }
        drain(&ring); // head at 96
        let tail_at = ring.capacity() + super::TAIL_POSITION_OFFSET;
        assert!(ring.buffer().compare_and_set_i64(tail_at, 96, 128)); // dead claim of the last 32 bytes
        ring.write(3, b"wrapped").unwrap();
        assert!(ring.unblock());
        assert_eq!(drain(&ring), vec![(3, b"wrapped".to_vec())]);
    }
}
