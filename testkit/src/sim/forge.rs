//! Hostile traffic for the node simulator: what a host that is not a member (or, on an authenticated
//! channel, one that spoofs a member's address) sends at members' endpoints, beside the random bytes and
//! plain replays the simulator sends itself.
//!
//! Datagrams are forged from the members' own traffic (the network's last datagrams), so that every
//! frame type the members send is forged with a real session, stream and geometry, and then rewritten:
//! positions pushed far ahead or behind, term offsets and ids moved, flags set, session ids of other
//! logs; such a frame is what an attacker who can see the traffic would send. Catch-up streams are opened
//! and held idle, or sent a bad hello, from outside and from members' hosts.
//!
//! What the members must do with all of it: count it and drop it, apply nothing of it, and keep what
//! they hold bounded (checked by the simulator: datagrams held by the network, open streams, files in a
//! node's directory).
//!
//! The forger draws from its own generator, so that turning it on leaves the rest of a seed's schedule as
//! it was.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::network::{SimNetwork, SimStream};
use super::prng::Prng;

/// The host outside the cluster.
pub const OUTSIDER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 200));

/// How many catch-up streams a forger holds open at most (beyond what a member accepts at once).
const HELD_STREAMS: usize = 24;

/// What it sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Forged {
    /// Floods: bursts of one datagram replayed from many addresses at a member's client endpoint (opens
    /// and reconnects of sessions among them).
    pub floods: u64,
    /// Rewritten frames of members' traffic.
    pub rewritten: u64,
    /// Of them, sent from a member's own address: any frame on an authenticated channel; without a key,
    /// only frames of the log channel rewritten to a session of the forger's own (what a member must
    /// ignore from wherever it comes: no key can tell a spoofed frame of the session it follows).
    pub spoofed: u64,
    /// Catch-up streams opened (and held idle or sent a bad hello).
    pub streams: u64,
}

/// A hostile host; see the module documentation.
pub struct Forger {
    prng: Prng,
    /// Members' addresses: (log, consensus) per member.
    members: Vec<(SocketAddr, SocketAddr)>,
    /// Members' client endpoints.
    clients: Vec<SocketAddr>,
    /// Spoof members' addresses (only where datagrams are authenticated: without a key nothing can tell a
    /// spoofed datagram from its member's).
    spoof: bool,
    /// Without a key: spoof members' addresses with frames of other sessions.
    spoof_sessions: bool,
    held: Vec<(SimStream, u64)>,
    forged: Forged,
}

impl Forger {
    /// A forger with its own draws from `seed`, against `members` (log and consensus endpoints).
    pub fn new(
        seed: u64,
        members: Vec<(SocketAddr, SocketAddr)>,
        clients: Vec<SocketAddr>,
        spoof: bool,
        spoof_sessions: bool,
    ) -> Self {
        let prng = Prng::new(seed ^ 0xF0_46E5);
        let (held, forged) = (Vec::new(), Forged::default());
        Self { prng, members, clients, spoof, spoof_sessions, held, forged }
    }

    /// What it sent so far.
    pub fn forged(&self) -> Forged {
        self.forged
    }

    /// One round at simulated time `now_ns`: now and then a forged datagram, a catch-up stream, and the
    /// release of streams held long enough.
    pub fn step(&mut self, network: &SimNetwork, now_ns: u64) {
        self.held.retain(|(_, until)| *until > now_ns);
        if self.prng.chance(0.02) {
            self.rewrite(network);
        }
        if self.prng.chance(0.002) && self.held.len() < HELD_STREAMS {
            self.open_stream(network, now_ns);
        }
        if self.prng.chance(0.002) {
            self.flood(network);
        }
    }

    /// One of the members' recent datagrams (often a client's open, reconnect or message: stolen session ids
    /// and replays), sent at a member's client endpoint from many addresses at once.
    fn flood(&mut self, network: &SimNetwork) {
        let Some(bytes) = network.recent(self.prng.below(64)) else {
            return;
        };
        let to = self.clients[self.prng.below(self.clients.len())];
        for k in 0..64u16 {
            let host = IpAddr::V4(Ipv4Addr::new(10, 78, (k / 200) as u8, (k % 200) as u8 + 1));
            network.inject(SocketAddr::new(host, 41_000 + k), to, &bytes);
        }
        self.forged.floods += 1;
    }

    /// A member's recent datagram, rewritten, sent at a member's endpoint.
    fn rewrite(&mut self, network: &SimNetwork) {
        let Some(mut bytes) = network.recent(self.prng.below(64)) else {
            return;
        };
        if bytes.len() < 8 {
            return;
        }
        // Every frame starts with its length (4), version, flags, type (2); most go on with the session id
        // (8..12), stream id (12..16), and positions or term ids and offsets after.
        match self.prng.below(6) {
            0 => write_at(&mut bytes, 8, &(self.prng.next_u64() as i32).to_le_bytes()),
            1 => {
                // A position (or term id and offset) far ahead: what raises a commit or a window if believed.
                let ahead = (1i64 << self.prng.between(20, 62)).to_le_bytes();
                write_at(&mut bytes, 16, &ahead);
            }
            2 => write_at(&mut bytes, 16, &(-(self.prng.between(1, 1 << 40) as i64)).to_le_bytes()),
            3 => bytes[5] = self.prng.next_u64() as u8,
            4 => write_at(&mut bytes, 24, &self.prng.next_u64().to_le_bytes()),
            _ => {
                let at = self.prng.below(bytes.len());
                bytes[at] ^= 1 << self.prng.below(8);
            }
        }
        let member = self.prng.below(self.members.len());
        let (log, consensus) = self.members[member];
        let to = match self.prng.below(10) {
            0..=5 => log,
            6..=7 => consensus,
            _ => self.clients[member],
        };
        let from = if self.spoof && self.prng.chance(0.5) {
            self.forged.spoofed += 1;
            let (log, consensus) = self.members[self.prng.below(self.members.len())];
            if self.prng.chance(0.5) {
                log
            } else {
                consensus
            }
        } else {
            SocketAddr::new(OUTSIDER, 40_100)
        };
        let from = match session_at(&bytes) {
            // Without a key: a log frame of another session, from a member's log endpoint.
            Some(at) if !self.spoof && self.spoof_sessions && to == log && self.prng.chance(0.3) => {
                let session = (self.prng.next_u64() as i32 | 0x4000_0000).to_le_bytes();
                write_at(&mut bytes, at, &session);
                self.forged.spoofed += 1;
                self.members[self.prng.below(self.members.len())].0
            }
            _ => from,
        };
        network.inject(from, to, &bytes);
        self.forged.rewritten += 1;
    }

    /// A catch-up stream at a member's consensus address, from outside or from a member's host (a spoofed
    /// source, or another process there), held idle or sent a bad hello, for a while.
    fn open_stream(&mut self, network: &SimNetwork, now_ns: u64) {
        let (_, to) = self.members[self.prng.below(self.members.len())];
        let host =
            if self.prng.chance(0.5) { OUTSIDER } else { self.members[self.prng.below(self.members.len())].1.ip() };
        let from = SocketAddr::new(host, 60_000 + self.prng.below(5_000) as u16);
        let mut stream = network.connect_from(from, to);
        if self.prng.chance(0.5) {
            let hello: Vec<u8> = (0..40).map(|_| self.prng.next_u64() as u8).collect();
            let _ = std::io::Write::write(&mut stream, &hello);
        }
        let hold = self.prng.between(100_000_000, 5_000_000_000);
        self.held.push((stream, now_ns + hold));
        self.forged.streams += 1;
    }
}

/// Where a log-channel frame holds its session id: Aeron's DATA and SETUP frames at 12, its status and
/// NAK frames and the cluster's position frames at 8; `None` for anything else.
fn session_at(bytes: &[u8]) -> Option<usize> {
    let kind = u16::from_le_bytes([*bytes.get(6)?, *bytes.get(7)?]);
    match kind {
        0x01 | 0x05 => Some(12),
        0x02 | 0x03 | 0x40 | 0x41 | 0x50 => Some(8),
        _ => None,
    }
}

/// Writes `value` at `at` where the datagram is long enough.
fn write_at(bytes: &mut [u8], at: usize, value: &[u8]) {
    if let Some(slot) = bytes.get_mut(at..at + value.len()) {
        slot.copy_from_slice(value);
    }
}
