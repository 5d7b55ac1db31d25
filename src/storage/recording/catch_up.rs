//! Catch-up from the recorded log (after Aeron's replay-merge): a follower further behind than its
//! leader holds in memory fetches the rest of the log from the leader's recording, and first the
//! leader's newest snapshot when its position is below where that recording starts, over TCP at the
//! leader's consensus address (TCP and UDP ports are apart); it records what it fetched and then joins
//! the live log where the fetch ended, with no gap and no duplicate.
//!
//! # Protocol
//!
//! A member channel: both ends prove they hold the catch-up key (derived from the channel's `auth_key`)
//! over two fresh nonces, and every byte after the handshake travels in sealed frames.
//!
//! ```text
//! follower -> leader   Hello (40 bytes): membership, member id, the follower's nonce
//! leader -> follower   Challenge (48 bytes): membership, the leader's nonce, the leader's proof
//! follower -> leader   Request (48 bytes): membership, member id, from, the follower's proof
//! leader -> follower   sealed frames (FrameHeader, payload, 16-byte tag), in order:
//!                      CatchUpResponse (56 bytes) and term_count x TermRecord (16 bytes): every term
//!                      of the leader's log that starts before `end`, oldest first,
//!                      the snapshot file when `snapshot` is 1, in chunks (its own header says its length),
//!                      then one block (BlockHeader + payload) per frame from `from` up to `end`
//! ```
//!
//! A proof is the keyed hash of who proves (leader or follower), the membership, the member id, both
//! nonces (and for the follower the position asked for): neither can be made without the key, and a
//! recorded exchange is useless with other nonces. A frame's tag is keyed with a stream key derived from
//! the same nonces and covers the frame's index, so a frame cannot be altered, dropped, reordered or
//! replayed from another catch-up. Nothing is encrypted. Without an `auth_key` the catch-up key derives
//! from the membership, which is public: the proofs and tags then guard against accidents, not against
//! an attacker, and only the member-address filter and the limits below stand.
//!
//! # Invariants
//!
//! - The leader's side never blocks its recorder: each connection moves at most [`SEND_PER_POLL`] bytes
//!   per duty cycle through a non-blocking socket.
//! - Connections come from the addresses of the other members only; any other is closed at once.
//! - At most [`MAX_HANDSHAKES`] connections wait in the handshake, each for at most
//!   [`HANDSHAKE_TIMEOUT_NS`]; a new one evicts the oldest when they are full, so held connections
//!   cannot keep a member out.
//! - At most one catch-up per member runs (the newest proven one replaces an older), and one that moves
//!   no byte for [`IDLE_TIMEOUT_NS`] is closed: no stranger can hold a serving slot, and a member holds
//!   at most its own.
//! - Every refusal and time-out is counted, and logged at most once per peer address per second.
//! - The follower's side verifies everything before it keeps it: the leader's proof, every frame's tag,
//!   every block's checksum, its position and length bounds; the snapshot by
//!   [`SnapshotStore::install`](crate::storage::snapshot::SnapshotStore::install); a count or length is
//!   bounded before anything is allocated for it.

mod fetch;
mod protocol;
mod server;

use std::net::IpAddr;

pub use fetch::{fetch, CatchUpFetch, Fetched};
pub use protocol::{CatchUpKey, CatchUpRequest, Nonces};
pub use server::{CatchUpMembers, CatchUpServer};

use crate::agent::clock::NanoClock;
use crate::media::transport::SharedNetwork;

/// Connections that may wait in the handshake at once.
pub const MAX_HANDSHAKES: usize = 16;
/// How long a connection may take to prove itself, from its accept.
pub const HANDSHAKE_TIMEOUT_NS: u64 = 2_000_000_000;
/// How long a catch-up may move no byte before it is closed (the follower reads with a shorter time-out).
pub const IDLE_TIMEOUT_NS: u64 = 10_000_000_000;
/// Bytes a session sends per duty cycle of the leader's recorder, at most.
pub const SEND_PER_POLL: usize = 1 << 20;

/// What a member's catch-ups run on: the network they connect over, this member's host on it, the clock
/// that times them, where their nonces come from, and where they run.
#[derive(Clone, Debug)]
pub struct CatchUpRuntime {
    /// The network streams are opened on (TCP in production).
    pub network: SharedNetwork,
    /// This member's host (its consensus address's).
    pub local: IpAddr,
    /// What times them (the inline ones; a thread's fetch reads the monotonic clock).
    pub clock: NanoClock,
    /// Where their nonces come from.
    pub nonces: Nonces,
    /// `false`: each runs on a thread of its own, over a blocking stream (production: it waits on the
    /// network and the leader, and the agents sharing the recorder's thread must not). `true`: each runs
    /// in the recorder's duty cycles over a non-blocking stream (deterministic: the node simulator).
    pub inline: bool,
}
