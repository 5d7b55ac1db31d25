//! A client's datagrams between two sends: records fill one datagram after another, each sealed when
//! the next record does not fit, and the sealed ones leave together in one `sendmmsg`
//! ([`Transport::send_mmsg`]) at the end of the caller's poll (or when [`SEND_BATCH`] are sealed), as the
//! Sender's `mmsg` mode batches the data path's datagrams: a poll that sends twenty datagrams makes one
//! system call, not twenty.
//!
//! # Invariants
//!
//! - At most [`SEND_BATCH`] datagrams of at most the capacity given are held (allocated once): a caller
//!   cannot make it grow.
//! - Datagrams leave in the order they were sealed, so their sequence numbers grow on the wire.

use socket2::SockAddr;

use crate::media::transport::{MmsgScratch, Transport};

use super::wire::{DatagramWriter, RecordHeader, Seal};

/// Datagrams sealed before they are sent without waiting for the end of the poll.
pub const SEND_BATCH: usize = 16;

/// The datagrams being filled and sealed (see the module documentation).
#[derive(Debug)]
pub(super) struct Outbox {
    writers: Vec<DatagramWriter>,
    /// The writer being filled; those before it are sealed.
    filling: usize,
    scratch: MmsgScratch,
}

impl Outbox {
    /// Room for [`SEND_BATCH`] datagrams of `capacity` bytes each.
    pub(super) fn new(capacity: usize) -> Self {
        let writers = (0..SEND_BATCH).map(|_| DatagramWriter::new(capacity)).collect();
        Self { writers, filling: 0, scratch: MmsgScratch::default() }
    }

    /// The longest payload one record can carry.
    pub(super) fn max_payload(&self) -> usize {
        self.writers[0].max_payload()
    }

    /// True when no record waits (sealed or not).
    pub(super) fn is_empty(&self) -> bool {
        self.filling == 0 && self.writers[0].is_empty()
    }

    /// True when a record with a payload of `length` fits in the datagram being filled.
    pub(super) fn fits(&self, length: usize) -> bool {
        self.writers[self.filling].fits(length)
    }

    /// True when the datagram being filled is the last one: [`send`](Self::send) before the next
    /// [`seal`](Self::seal).
    pub(super) fn is_full(&self) -> bool {
        self.filling + 1 >= self.writers.len()
    }

    /// Adds a record to the datagram being filled; false when it does not fit (seal first).
    pub(super) fn push(&mut self, record: RecordHeader, payload: &[u8]) -> bool {
        self.writers[self.filling].push(record, payload)
    }

    /// Seals the datagram being filled, if it holds records, with `seal` (made by `make_seal`, called only
    /// then: it takes the next sequence number); the next record goes into the next datagram. Call only
    /// when not [`is_full`](Self::is_full).
    pub(super) fn seal<'k>(&mut self, make_seal: impl FnOnce() -> Seal<'k>) {
        debug_assert!(!self.is_full());
        if self.writers[self.filling].is_empty() {
            return;
        }
        self.writers[self.filling].finish(make_seal());
        self.filling += 1;
    }

    /// Sends every sealed datagram to `dest` in as few calls as the transport takes, and empties them;
    /// returns the datagrams handed to the socket (a datagram the socket did not take is lost, as a
    /// datagram on the wire may be: the client resends what is not answered).
    pub(super) fn send(&mut self, socket: &mut dyn Transport, dest: &SockAddr) -> usize {
        let sealed = self.filling;
        if sealed == 0 {
            return 0;
        }
        let mut datagrams: [&[u8]; SEND_BATCH] = [&[]; SEND_BATCH];
        for (slot, writer) in datagrams.iter_mut().zip(&self.writers[..sealed]) {
            *slot = writer.finished();
        }
        let _ = socket.send_mmsg(&datagrams[..sealed], std::slice::from_ref(dest), &mut self.scratch);
        for writer in &mut self.writers[..sealed] {
            writer.clear();
        }
        // The datagram being filled (possibly with records) becomes the first.
        self.writers.swap(0, sealed);
        self.filling = 0;
        sealed
    }

    /// The datagram being filled, sealed with `seal`, to send outside the batch (an ask to several
    /// members); empty it with [`clear_current`](Self::clear_current) after.
    pub(super) fn finish_current(&mut self, seal: Seal<'_>) -> &[u8] {
        self.writers[self.filling].finish(seal)
    }

    /// Empties the datagram being filled.
    pub(super) fn clear_current(&mut self) {
        self.writers[self.filling].clear();
    }
}
