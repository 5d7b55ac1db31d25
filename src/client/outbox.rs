//! A client's datagrams between two sends: records fill one datagram after another, each sealed when
//! the next record does not fit, and the sealed ones leave together at the end of the caller's poll (or
//! when [`SEND_BATCH`] are sealed) in as few system calls as the socket takes
//! ([`Transport::send_runs`]): over UDP, each run of datagrams of one length (full of records of one
//! size) in one `sendmsg` the kernel cuts (`UDP_SEGMENT`, as the Sender's `gso` mode), the rest in one
//! `sendmmsg`: a poll that sends twenty datagrams makes one or two system calls, not twenty.
//!
//! # Invariants
//!
//! - At most [`SEND_BATCH`] datagrams of at most the capacity given are held, each allocated the first
//!   time a poll fills that many (a client at light load holds one or two): a caller cannot make it grow
//!   past that.
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
    /// Bytes of each datagram.
    capacity: usize,
    scratch: MmsgScratch,
}

impl Outbox {
    /// Room for [`SEND_BATCH`] datagrams of `capacity` bytes each (one allocated now).
    pub(super) fn new(capacity: usize) -> Self {
        let writers = vec![DatagramWriter::new(capacity)];
        Self { writers, filling: 0, capacity, scratch: MmsgScratch::default() }
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
        self.filling + 1 >= SEND_BATCH
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
        if self.filling == self.writers.len() {
            self.writers.push(DatagramWriter::new(self.capacity));
        }
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
        let _ = socket.send_runs(&datagrams[..sealed], dest, &mut self.scratch);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::wire::{self, Datagram};
    use crate::media::auth::AuthKey;
    use crate::media::transport::memory::MemoryNetwork;
    use crate::media::transport::RecvBatch;

    const KEY: AuthKey = AuthKey::new([3; 32]);

    #[test]
    fn sealed_datagrams_leave_together_in_order_and_the_one_being_filled_stays() {
        let network = MemoryNetwork::new();
        let mut from = network.bind("127.0.0.1:1".parse().unwrap(), false).unwrap();
        let mut to = network.bind("127.0.0.1:2".parse().unwrap(), false).unwrap();
        let dest = SockAddr::from(to.local_addr());
        let mut outbox = Outbox::new(256);
        let mut sequence = 0;
        let payload = [7u8; 100];
        // Records of 132 bytes: one to a 256-byte datagram. More than a batch: the oldest sealed ones
        // leave first, when the batch is full; the rest with the send.
        let records = SEND_BATCH as u64 + 3;
        for id in 1..=records {
            let record = RecordHeader::new(wire::MESSAGE, 5).correlation(id);
            if !outbox.fits(payload.len()) {
                if outbox.is_full() {
                    assert_eq!(outbox.send(&mut from, &dest), SEND_BATCH - 1);
                }
                outbox.seal(|| {
                    sequence += 1;
                    Seal { session_id: 5, key_id: 0, sequence, key: Some(&KEY) }
                });
            }
            assert!(outbox.push(record, &payload));
        }
        assert_eq!(outbox.send(&mut from, &dest), (records - 1) as usize - (SEND_BATCH - 1));
        assert!(!outbox.is_empty(), "the last record waits in the datagram being filled");
        let mut batch = RecvBatch::new(64, 512);
        let mut seen = Vec::new();
        while let n @ 1.. = to.recv_batch(&mut batch).unwrap() {
            for i in 0..n {
                let datagram = Datagram::parse(batch.datagram(i).bytes).unwrap();
                assert!(datagram.verify(&KEY));
                let ids: Vec<u64> = datagram.records().unwrap().map(|(r, _)| r.correlation_id).collect();
                seen.push((datagram.header.sequence, ids));
            }
        }
        let expected: Vec<(u64, Vec<u64>)> = (1..records).map(|id| (id, vec![id])).collect();
        assert_eq!(seen, expected);
    }
}
