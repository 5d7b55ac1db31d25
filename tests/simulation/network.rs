//! The simulated network: per-packet delay (so reordering), loss, duplication, and partitions. Only the
//! simulation's clock exists here.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use quorumcast_consensus::consensus_core::MemberId;

use super::log::Entry;
use super::prng::Rng;

/// What a packet carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// A consensus frame, as [`quorumcast_consensus::consensus_core::wire`] encodes it.
    Frame(Vec<u8>),
    /// A follower asks its leader of `term` for the log from `position` (the Receiver's stand-in).
    Fetch { term: i64, position: i64 },
    /// The leader of `term` sends its log from `position` (the Sender's stand-in).
    Data { term: i64, position: i64, entries: Vec<Entry> },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub from: MemberId,
    pub to: MemberId,
    pub payload: Payload,
}

/// The network's fault settings.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    pub loss_per_million: u64,
    pub duplicate_per_million: u64,
    /// Most packets take up to 1 ms; one in ten up to this long, so later packets overtake them.
    pub max_delay_ns: u64,
}

impl Faults {
    pub const NONE: Faults = Faults { loss_per_million: 0, duplicate_per_million: 0, max_delay_ns: 1_000_000 };
}

/// Packets in flight, delivered in order of arrival time.
pub struct Network {
    rng: Rng,
    pub faults: Faults,
    /// Side of each member (index `id - 1`); members on different sides cannot reach each other...
    sides: Vec<u8>,
    /// ...except, in a one-way partition, from side 1 to side 0.
    one_way: bool,
    in_flight: BinaryHeap<Reverse<(u64, u64)>>,
    packets: Vec<Option<Packet>>,
    free: Vec<usize>,
    sequence: u64,
}

impl Network {
    pub fn new(rng: Rng, members: usize, faults: Faults) -> Self {
        Self {
            rng,
            faults,
            sides: vec![0; members],
            one_way: false,
            in_flight: BinaryHeap::new(),
            packets: Vec::new(),
            free: Vec::new(),
            sequence: 0,
        }
    }

    pub fn partitioned(&self) -> bool {
        self.sides.iter().any(|&side| side != self.sides[0])
    }

    /// Splits the members into two random sides (possibly all on one); one partition in three lets
    /// packets through one way (a member that hears but is not heard, or the reverse).
    pub fn partition(&mut self, rng: &mut Rng) {
        for side in &mut self.sides {
            *side = rng.below(2) as u8;
        }
        self.one_way = rng.below(3) == 0;
    }

    pub fn heal(&mut self) {
        self.sides.fill(0);
    }

    /// Whether a packet from `from` reaches `to`.
    pub fn connected(&self, from: MemberId, to: MemberId) -> bool {
        let (from, to) = (self.sides[from as usize - 1], self.sides[to as usize - 1]);
        from == to || (self.one_way && from == 1)
    }

    /// Sends a packet at `now_ns`: it may be lost, duplicated, and is delayed.
    pub fn send(&mut self, packet: Packet, now_ns: u64) {
        if !self.connected(packet.from, packet.to) || self.rng.chance(self.faults.loss_per_million) {
            return;
        }
        if self.rng.chance(self.faults.duplicate_per_million) {
            self.schedule(packet.clone(), now_ns);
        }
        self.schedule(packet, now_ns);
    }

    fn schedule(&mut self, packet: Packet, now_ns: u64) {
        let max = if self.rng.below(10) == 0 { self.faults.max_delay_ns } else { 1_000_000 };
        let at = now_ns + self.rng.between(50_000, max.max(50_000));
        let slot = match self.free.pop() {
            Some(slot) => {
                self.packets[slot] = Some(packet);
                slot
            }
            None => {
                self.packets.push(Some(packet));
                self.packets.len() - 1
            }
        };
        self.sequence += 1;
        self.in_flight.push(Reverse((at, (self.sequence << 20) | slot as u64)));
    }

    /// The next packet due at or before `now_ns` that its destination can still be reached by.
    pub fn next_due(&mut self, now_ns: u64) -> Option<Packet> {
        while let Some(&Reverse((at, key))) = self.in_flight.peek() {
            if at > now_ns {
                return None;
            }
            self.in_flight.pop();
            let slot = (key & 0xf_ffff) as usize;
            let packet = self.packets[slot].take().expect("a scheduled packet");
            self.free.push(slot);
            if self.connected(packet.from, packet.to) {
                return Some(packet);
            }
        }
        None
    }
}
