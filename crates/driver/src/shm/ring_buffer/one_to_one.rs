//! The single producer's claim: it alone writes the tail, so no compare-and-set is needed.

use crate::shm::buffer::AtomicBuffer;

use super::descriptor::TAIL_POSITION_OFFSET;
use super::{place, reserve, sealed, ProducerMode, RingError};

/// Producer mode of [`super::OneToOneRingBuffer`]: one producer at a time, which claims space with a plain
/// release store of the tail. Never instantiated; a type-level marker.
#[derive(Debug)]
pub enum OneProducer {}

impl ProducerMode for OneProducer {}

impl sealed::Claimer for OneProducer {
    #[inline]
    fn claim_capacity(buffer: &AtomicBuffer, capacity: usize, required: usize) -> Result<usize, RingError> {
        // The producer is the tail's only writer, so a relaxed load reads its own last store.
        let tail = buffer.get_i64(capacity + TAIL_POSITION_OFFSET);
        let padding = reserve(buffer, capacity, tail, required)?;
        // Release: observers that read the tail with acquire see the cache refresh made above; the consumer
        // does not depend on the tail (it follows record lengths).
        buffer.put_i64_release(capacity + TAIL_POSITION_OFFSET, tail + (required + padding) as i64);
        Ok(place(buffer, tail as usize & (capacity - 1), padding))
    }
}
