//! A minimal single-producer single-consumer ring of fixed-size slots: the floor the ipc bench reads the
//! IPC log's throughput against.
//!
//! Nothing but the handoff: the producer copies a message into the next free slot and publishes it with
//! one release store of its tail; the consumer reads every published slot and releases them with one
//! store of its head. Head and tail sit on cache lines of their own, and each side keeps a copy of the
//! other's index, re-reading it only when its copy says the ring is full (or empty). No frame headers, no
//! terms, no positions: what the log does beyond this is what its figure pays for.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

/// The ring: a power-of-two number of slots of `slot_size` bytes, and the two indices.
pub struct SpscRing {
    /// Slots the consumer has released: the next one it reads. Written by the consumer only.
    head: CachePadded<AtomicU64>,
    /// Slots the producer has published: the next one it writes. Written by the producer only.
    tail: CachePadded<AtomicU64>,
    slots: Box<[UnsafeCell<u8>]>,
    slot_size: usize,
    /// Slot count - 1.
    mask: u64,
}

// SAFETY: the producer writes a slot only while it is free (`tail - head` below the slot count, with
// `head` read by an acquire load that pairs with the consumer's release store), and the consumer reads a
// slot only once the producer's release store of `tail` has published it; `split` hands out one producer
// and one consumer at a time. So no slot is read and written at once.
unsafe impl Sync for SpscRing {}

impl SpscRing {
    /// A ring of `slot_size`-byte slots holding at most `capacity_bytes` (at least two slots; the count is
    /// rounded down to a power of two).
    pub fn new(slot_size: usize, capacity_bytes: usize) -> Self {
        assert!(slot_size > 0, "a slot holds at least one byte");
        let count = 1usize << (capacity_bytes / slot_size).max(2).ilog2();
        Self {
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
            slots: (0..count * slot_size).map(|_| UnsafeCell::new(0)).collect(),
            slot_size,
            mask: count as u64 - 1,
        }
    }

    /// The producer and the consumer, for one thread each; the ring stays borrowed while they live, so
    /// there is never a second pair.
    pub fn split(&mut self) -> (Producer<'_>, Consumer<'_>) {
        let ring: &Self = self;
        let (head, tail) = (ring.head.load(Ordering::Acquire), ring.tail.load(Ordering::Acquire));
        (Producer { ring, tail, head_cache: head }, Consumer { ring, head, tail_cache: tail })
    }

    /// The first byte of the slot of sequence number `seq`.
    #[inline]
    fn slot(&self, seq: u64) -> *mut u8 {
        let offset = (seq & self.mask) as usize * self.slot_size;
        UnsafeCell::raw_get(self.slots[offset..].as_ptr())
    }

    fn capacity(&self) -> u64 {
        self.mask + 1
    }
}

/// The writing end of an [`SpscRing`].
pub struct Producer<'a> {
    ring: &'a SpscRing,
    tail: u64,
    /// The consumer's head as last read.
    head_cache: u64,
}

impl Producer<'_> {
    /// Copies `message` (exactly one slot long) into the next slot and publishes it; false when the ring
    /// is full.
    #[inline]
    pub fn push(&mut self, message: &[u8]) -> bool {
        assert_eq!(message.len(), self.ring.slot_size, "messages fill their slot exactly");
        if self.tail - self.head_cache == self.ring.capacity() {
            self.head_cache = self.ring.head.load(Ordering::Acquire);
            if self.tail - self.head_cache == self.ring.capacity() {
                return false;
            }
        }
        // SAFETY: the slot is free (the consumer released it, see above) and `slot_size` bytes long.
        unsafe { self.ring.slot(self.tail).copy_from_nonoverlapping(message.as_ptr(), message.len()) };
        self.tail += 1;
        self.ring.tail.store(self.tail, Ordering::Release);
        true
    }
}

/// The reading end of an [`SpscRing`].
pub struct Consumer<'a> {
    ring: &'a SpscRing,
    head: u64,
    /// The producer's tail as last read.
    tail_cache: u64,
}

impl Consumer<'_> {
    /// Hands every published message to `handler`, then releases their slots; returns how many.
    #[inline]
    pub fn drain(&mut self, mut handler: impl FnMut(&[u8])) -> usize {
        if self.head == self.tail_cache {
            self.tail_cache = self.ring.tail.load(Ordering::Acquire);
        }
        let available = self.tail_cache - self.head;
        for seq in self.head..self.tail_cache {
            // SAFETY: the producer published this slot (release store of `tail`, read above with acquire)
            // and writes it again only after the head below releases it.
            handler(unsafe { std::slice::from_raw_parts(self.ring.slot(seq), self.ring.slot_size) });
        }
        self.head = self.tail_cache;
        if available > 0 {
            self.ring.head.store(self.head, Ordering::Release);
        }
        available as usize
    }
}
