//! Many-to-one and one-to-one rings of variable-length messages over shared memory, after Agrona's.
//!
//! A ring is laid out in any [`AtomicBuffer`] (an anonymous mapping within a process, or a file mapping
//! shared with other processes): a power-of-two data area followed by a trailer of positions (tail, head
//! cache, head, correlation counter, consumer heartbeat), each alone on a 128-byte line. [`ManyToOneRingBuffer`] is the client ingress of the replicated log: any number of
//! threads or processes offer messages and one agent consumes them. [`OneToOneRingBuffer`] carries
//! commands from one agent to another. Both are the same [`RingBuffer`]; only the way producers claim
//! space differs ([`ManyProducers`]: compare-and-set on the tail; [`OneProducer`]: a plain release store).
//!
//! # Invariants
//!
//! - `head <= tail <= head + capacity` (positions in bytes, only growing). `[head, tail)` holds claimed
//!   records, `[tail, head + capacity)` is free and all zero.
//! - **Tail** is written by producers only. A producer that moves it from `t` to `t + n` owns the `n` bytes
//!   at `t` until it commits them; nobody else writes there.
//! - **Record length** (first header field): 0 while free; a producer stores `-length` with release when it
//!   starts the record, then the type and message, then `+length` with release (the commit). The consumer
//!   loads it with acquire, so a positive length means the type and message are visible. Records are
//!   consumed in order: the consumer stops at the first record that is not committed.
//! - **Head** is written by the consumer only, with release, after it has handed every record below it to
//!   the handler and zeroed their bytes. Producers load it with acquire before they reuse that space, so
//!   they see the zeros and the consumer no longer reads it. The head cache is a copy kept by producers
//!   (release/acquire, so the happens-before edge from the consumer carries through it).
//! - A record never straddles the end of the data area: a producer that would cross it claims the rest of
//!   the area too and fills it with a padding record, which the consumer skips.
//!
//! Exactly one consumer reads a ring at a time, and a [`OneToOneRingBuffer`] has exactly one producer at a
//! time (in any process); these are protocols of the users, which the types cannot see across processes.

mod descriptor;
mod many_to_one;
mod one_to_one;

use std::error::Error;
use std::fmt;
use std::marker::PhantomData;

use crate::shm::buffer::AtomicBuffer;

use descriptor::{
    aligned_record_length, begin_record, check_layout, commit_record, write_padding, CONSUMER_HEARTBEAT_OFFSET,
    CORRELATION_COUNTER_OFFSET, HEADER_LENGTH, HEAD_CACHE_POSITION_OFFSET, HEAD_POSITION_OFFSET, LENGTH_OFFSET,
    PADDING_MSG_TYPE_ID, RECORD_ALIGNMENT, TAIL_POSITION_OFFSET, TYPE_OFFSET,
};
pub use descriptor::{max_msg_length, required_length};
pub use many_to_one::ManyProducers;
pub use one_to_one::OneProducer;

/// A ring that any number of producers (threads or processes) write and one consumer reads.
pub type ManyToOneRingBuffer = RingBuffer<ManyProducers>;
/// A ring that one producer writes and one consumer reads.
pub type OneToOneRingBuffer = RingBuffer<OneProducer>;

/// Why a ring refused a message or a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// Not enough free space for the record now: the consumer has not caught up. Back off and retry.
    Full,
    /// The message is longer than the ring accepts ([`max_msg_length`] of its capacity).
    TooLong {
        /// Length of the message offered.
        length: usize,
        /// Longest message this ring accepts.
        max: usize,
    },
    /// Message types must be positive (negative ones are reserved for padding).
    InvalidType {
        /// The type offered.
        msg_type_id: i32,
    },
    /// The buffer is not `required_length(capacity)` bytes for a power-of-two capacity within
    /// [`CACHE_LINE_LENGTH`](crate::shm::buffer::CACHE_LINE_LENGTH) ..= 1 GiB.
    InvalidCapacity {
        /// Length of the buffer given.
        buffer_length: usize,
    },
    /// The buffer does not start on an 8-byte boundary, which the atomics of record headers need.
    Misaligned {
        /// Address of the buffer given.
        address: usize,
    },
    /// A write into a claim went past the message length claimed.
    ClaimOverrun {
        /// Offset of the write within the message.
        offset: usize,
        /// Length of the write.
        length: usize,
        /// Length of the message claimed.
        claimed: usize,
    },
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Full => write!(f, "ring buffer full: retry after the consumer has caught up, or make the ring larger"),
            Self::TooLong { length, max } => {
                write!(f, "message of {length} bytes exceeds the ring's maximum of {max}: split it or use a ring of at least {} bytes of capacity", (length * 8).next_power_of_two())
            }
            Self::InvalidType { msg_type_id } => {
                write!(f, "message type {msg_type_id} is invalid: message types must be positive")
            }
            Self::InvalidCapacity { buffer_length } => write!(
                f,
                "buffer of {buffer_length} bytes is not required_length(capacity) for a power-of-two capacity between {} and {}: size it with ring_buffer::required_length",
                descriptor::MIN_CAPACITY,
                descriptor::MAX_CAPACITY
            ),
            Self::Misaligned { address } => {
                write!(f, "ring buffer at {address:#x} is not 8-byte aligned: place it at an 8-byte-aligned offset")
            }
            Self::ClaimOverrun { offset, length, claimed } => write!(
                f,
                "write of {length} bytes at offset {offset} overruns a claim of {claimed} bytes: claim more or write less"
            ),
        }
    }
}

impl Error for RingError {}

/// How producers of a ring claim space: [`ManyProducers`] or [`OneProducer`]. Sealed.
pub trait ProducerMode: sealed::Claimer {}

mod sealed {
    use super::{AtomicBuffer, RingError};

    /// The one thing the two rings do differently.
    pub trait Claimer {
        /// Moves the tail past `required` bytes (plus padding at a wrap, which it writes) and returns the
        /// index of the claimed record, or [`RingError::Full`].
        fn claim_capacity(buffer: &AtomicBuffer, capacity: usize, required: usize) -> Result<usize, RingError>;
    }
}

/// A ring of messages in shared memory, with producers of kind `P` and one consumer (see the module docs
/// for the protocol). Cheap to share between threads by reference; each process builds its own over its
/// own mapping of the same memory.
pub struct RingBuffer<P: ProducerMode> {
    buffer: AtomicBuffer,
    capacity: usize,
    mode: PhantomData<fn() -> P>,
}

impl<P: ProducerMode> fmt::Debug for RingBuffer<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingBuffer")
            .field("mode", &std::any::type_name::<P>())
            .field("capacity", &self.capacity)
            .field("consumer_position", &self.consumer_position())
            .field("producer_position", &self.producer_position())
            .finish()
    }
}

impl<P: ProducerMode> RingBuffer<P> {
    /// A ring over `buffer`, which must be [`required_length`]`(capacity)` bytes for a power-of-two capacity
    /// and 8-byte aligned. The buffer is used as it is: zeroed memory is an empty ring, and a buffer that
    /// already holds a ring (another process's mapping of the same file) is joined where it stands.
    pub fn new(buffer: AtomicBuffer) -> Result<Self, RingError> {
        let capacity = check_layout(&buffer)?;
        Ok(Self { buffer, capacity, mode: PhantomData })
    }

    /// Bytes in the data area.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Longest message accepted: `capacity / 8`.
    #[inline]
    pub fn max_msg_length(&self) -> usize {
        max_msg_length(self.capacity)
    }

    /// The whole buffer the ring lives in (data area and trailer).
    pub fn buffer(&self) -> &AtomicBuffer {
        &self.buffer
    }

    /// Writes one message of type `msg_type_id` (positive) copied from `src`.
    ///
    /// Errors: [`RingError::Full`] when the consumer has not freed enough space (nothing is written; retry
    /// later), [`RingError::TooLong`], [`RingError::InvalidType`].
    #[inline]
    pub fn write(&self, msg_type_id: i32, src: &[u8]) -> Result<(), RingError> {
        let (index, record_length) = self.claim(msg_type_id, src.len())?;
        self.buffer.put_bytes(index + HEADER_LENGTH, src);
        commit_record(&self.buffer, index, record_length);
        Ok(())
    }

    /// Claims space for a message of `length` bytes of type `msg_type_id`, to be written in place through
    /// the returned [`Claim`] and then committed (or aborted).
    ///
    /// The consumer stops at an uncommitted record, so hold a claim briefly. Errors as for [`Self::write`].
    #[inline]
    pub fn try_claim(&self, msg_type_id: i32, length: usize) -> Result<Claim<'_>, RingError> {
        let (index, record_length) = self.claim(msg_type_id, length)?;
        Ok(Claim { buffer: &self.buffer, index, record_length, done: false })
    }

    /// Checks the message, claims its record and begins it; returns the record's index and length.
    #[inline]
    fn claim(&self, msg_type_id: i32, length: usize) -> Result<(usize, usize), RingError> {
        if msg_type_id < 1 {
            return Err(RingError::InvalidType { msg_type_id });
        }
        if length > self.max_msg_length() {
            return Err(RingError::TooLong { length, max: self.max_msg_length() });
        }
        let record_length = length + HEADER_LENGTH;
        let index = P::claim_capacity(&self.buffer, self.capacity, aligned_record_length(length))?;
        begin_record(&self.buffer, index, record_length, msg_type_id);
        Ok((index, record_length))
    }

    /// Hands up to `message_limit` committed messages, in order, to `handler(msg_type_id, message)` and
    /// returns how many it handed. For the single consumer only.
    ///
    /// The message slice borrows the ring: it is valid only during the call. The consumed space is zeroed
    /// and released to producers (head moved with release) when `read` returns, or if `handler` panics
    /// (the records up to and including the one that panicked then count as consumed). A record whose
    /// length is out of bounds (the ring was corrupted by a writer breaking the protocol) stops the read.
    pub fn read<F: FnMut(i32, &[u8])>(&self, mut handler: F, message_limit: usize) -> usize {
        self.read_while(
            |msg_type_id, message| {
                handler(msg_type_id, message);
                true
            },
            message_limit,
        )
    }

    /// As [`Self::read`], but `handler` may refuse a message by returning `false`: that message and the ones
    /// after it stay in the ring for a later read (the consensus agent refuses what the log has no room for).
    pub fn read_while<F: FnMut(i32, &[u8]) -> bool>(&self, mut handler: F, message_limit: usize) -> usize {
        let (read, reached_end) = self.read_contiguous(&mut handler, message_limit);
        if reached_end && read < message_limit {
            // The first pass ended at the end of the data area (often on a padding record): go on from
            // index 0, so that a wrap costs the consumer no empty duty cycle.
            read + self.read_contiguous(&mut handler, message_limit - read).0
        } else {
            read
        }
    }

    /// One pass of [`Self::read`], from the head to at most the end of the data area. Returns the messages
    /// handed and whether the pass consumed everything up to the end of the data area.
    fn read_contiguous<F: FnMut(i32, &[u8]) -> bool>(&self, handler: &mut F, message_limit: usize) -> (usize, bool) {
        let head = self.buffer.get_i64(self.capacity + HEAD_POSITION_OFFSET); // the consumer is its only writer
        let start = self.index(head);
        let contiguous = self.capacity - start;
        let mut consumed = Consumed { buffer: &self.buffer, capacity: self.capacity, head, start, bytes: 0 };
        let mut messages = 0;
        while consumed.bytes < contiguous && messages < message_limit {
            let index = start + consumed.bytes;
            let length = self.buffer.get_i32_acquire(index + LENGTH_OFFSET);
            if length <= 0 {
                break; // free, or being written
            }
            let length = length as usize;
            if length < HEADER_LENGTH || length > contiguous - consumed.bytes {
                break; // corrupt: never read outside the record
            }
            let record = crate::shm::buffer::align(length, RECORD_ALIGNMENT);
            consumed.bytes += record; // counted first: a record whose handler panics is consumed
            let msg_type_id = self.buffer.get_i32(index + TYPE_OFFSET);
            if msg_type_id != PADDING_MSG_TYPE_ID {
                if !handler(msg_type_id, self.buffer.bytes(index + HEADER_LENGTH, length - HEADER_LENGTH)) {
                    consumed.bytes -= record; // refused: it stays, and so does everything after it
                    return (messages, false);
                }
                messages += 1;
            }
        }
        let reached_end = consumed.bytes == contiguous;
        (messages, reached_end)
    }

    /// Position after the last consumed record (acquire): what producers may reuse up to, for flow control.
    #[inline]
    pub fn consumer_position(&self) -> i64 {
        self.buffer.get_i64_acquire(self.capacity + HEAD_POSITION_OFFSET)
    }

    /// Position after the last claimed record (acquire); records below it may still be uncommitted.
    #[inline]
    pub fn producer_position(&self) -> i64 {
        self.buffer.get_i64_acquire(self.capacity + TAIL_POSITION_OFFSET)
    }

    /// Bytes claimed and not yet consumed (padding included), from a consistent pair of positions.
    pub fn size(&self) -> usize {
        let mut head = self.consumer_position();
        loop {
            let tail = self.producer_position();
            let head_after = self.consumer_position();
            if head_after == head {
                return (tail - head).clamp(0, self.capacity as i64) as usize;
            }
            head = head_after;
        }
    }

    /// A new correlation id, unique among all users of the ring (atomic increment of a shared counter).
    #[inline]
    pub fn next_correlation_id(&self) -> i64 {
        self.buffer.get_and_add_i64(self.capacity + CORRELATION_COUNTER_OFFSET, 1)
    }

    /// Records the consumer's liveness at `time` (any clock its users agree on). For the consumer.
    #[inline]
    pub fn set_consumer_heartbeat_time(&self, time: i64) {
        self.buffer.put_i64_release(self.capacity + CONSUMER_HEARTBEAT_OFFSET, time)
    }

    /// The consumer's last heartbeat time (0 if it never beat), for producers checking it is alive.
    #[inline]
    pub fn consumer_heartbeat_time(&self) -> i64 {
        self.buffer.get_i64_acquire(self.capacity + CONSUMER_HEARTBEAT_OFFSET)
    }

    #[inline]
    fn index(&self, position: i64) -> usize {
        position as usize & (self.capacity - 1)
    }
}

/// Space a consumer pass has handed out: zeroed and released to producers when dropped, which also covers
/// a handler that panics.
struct Consumed<'a> {
    buffer: &'a AtomicBuffer,
    capacity: usize,
    head: i64,
    start: usize,
    bytes: usize,
}

impl Drop for Consumed<'_> {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.buffer.set_memory(self.start, self.bytes, 0);
            // Release: producers that load the head with acquire see the zeros, and every read of these
            // bytes by the handler happened before they can write there again.
            self.buffer.put_i64_release(self.capacity + HEAD_POSITION_OFFSET, self.head + self.bytes as i64);
        }
    }
}

/// Space claimed for one message, written in place and then [`Claim::commit`]ted or [`Claim::abort`]ed.
///
/// Dropping a claim without either aborts it, so that a forgotten claim cannot stop the consumer for good
/// (only a producer that dies, or a claim leaked with `mem::forget`, can; see
/// [`ManyToOneRingBuffer::unblock`]).
#[derive(Debug)]
pub struct Claim<'a> {
    buffer: &'a AtomicBuffer,
    index: usize,
    record_length: usize,
    done: bool,
}

impl Claim<'_> {
    /// Length of the message claimed.
    #[inline]
    pub fn length(&self) -> usize {
        self.record_length - HEADER_LENGTH
    }

    /// Copies `src` into the message at `offset`; errors if that goes past the claimed length.
    #[inline]
    pub fn put_bytes(&mut self, offset: usize, src: &[u8]) -> Result<(), RingError> {
        let claimed = self.length();
        if offset > claimed || src.len() > claimed - offset {
            return Err(RingError::ClaimOverrun { offset, length: src.len(), claimed });
        }
        self.buffer.put_bytes(self.index + HEADER_LENGTH + offset, src);
        Ok(())
    }

    /// Publishes the message to the consumer (release store of its length).
    #[inline]
    pub fn commit(mut self) {
        self.done = true;
        commit_record(self.buffer, self.index, self.record_length);
    }

    /// Gives the space up: the record becomes padding, which the consumer skips.
    #[inline]
    pub fn abort(mut self) {
        self.done = true;
        write_padding(self.buffer, self.index, self.record_length);
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.done {
            write_padding(self.buffer, self.index, self.record_length);
        }
    }
}

/// Where a record of `required` bytes goes when the tail is at `tail`: `Ok(padding)`, the bytes to pad
/// before it (the rest of the data area when it would cross the end, else 0), or [`RingError::Full`].
///
/// Reads the head cache and, only when that makes the ring look full, the consumer's head, refreshing the
/// cache. Both loads are acquire (see the module invariants). Shared by both kinds of producer.
#[inline]
fn reserve(buffer: &AtomicBuffer, capacity: usize, tail: i64, required: usize) -> Result<usize, RingError> {
    let capacity_i = capacity as i64;
    let required_i = required as i64;
    let mut head = buffer.get_i64_acquire(capacity + HEAD_CACHE_POSITION_OFFSET);
    if required_i > capacity_i - (tail - head) {
        head = refresh_head(buffer, capacity);
        if required_i > capacity_i - (tail - head) {
            return Err(RingError::Full);
        }
    }
    let tail_index = tail as usize & (capacity - 1);
    let to_end = capacity - tail_index;
    if required <= to_end {
        return Ok(0);
    }
    // Wrapping: the record goes at index 0, which must be free. Having passed the check above, the head is
    // in the same lap as the tail, so `[0, head index)` is exactly the free space at the start.
    if required > head as usize & (capacity - 1) {
        head = refresh_head(buffer, capacity);
        if required > head as usize & (capacity - 1) {
            return Err(RingError::Full);
        }
    }
    Ok(to_end)
}

/// Loads the consumer's head (acquire) and stores it in the head cache (release).
#[inline]
fn refresh_head(buffer: &AtomicBuffer, capacity: usize) -> i64 {
    let head = buffer.get_i64_acquire(capacity + HEAD_POSITION_OFFSET);
    buffer.put_i64_release(capacity + HEAD_CACHE_POSITION_OFFSET, head);
    head
}

/// After the tail has moved past a claim at `tail_index` with `padding` bytes of padding first: writes the
/// padding record if any and returns the index of the claimed record.
#[inline]
fn place(buffer: &AtomicBuffer, tail_index: usize, padding: usize) -> usize {
    if padding == 0 {
        tail_index
    } else {
        write_padding(buffer, tail_index, padding);
        0
    }
}

#[cfg(test)]
mod tests;
