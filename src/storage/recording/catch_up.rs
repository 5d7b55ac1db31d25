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
//!   every block's checksum, its position and length bounds; the snapshot by [`SnapshotStore::install`];
//!   a count or length is bounded before anything is allocated for it.

use std::collections::HashMap;

use crate::cluster::configuration::configuration_of;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytemuck::{Pod, Zeroable};

use super::segment::{BlockHeader, MAX_BLOCK_LENGTH};
use super::{RecorderCounters, Recording, RecordingReader};
use crate::agent::clock::NanoClock;
use crate::event_log::RateLimited;
use crate::media::auth::{constant_time_eq, fill_random, AuthKey, TAG_LENGTH};
use crate::media::transport::stream::{would_block, Stream, StreamListener, StreamOptions};
use crate::media::transport::{Network, SharedNetwork};
use crate::storage::snapshot::{SnapshotInfo, SnapshotInstall, SnapshotReader, SnapshotStore, HEADER_LENGTH};

/// A snapshot file's header, which a catch-up reads whole before it installs the rest.
const SNAPSHOT_HEADER_LENGTH: usize = HEADER_LENGTH as usize;

const HELLO_MAGIC: u64 = u64::from_le_bytes(*b"qccuhel2");
const CHALLENGE_MAGIC: u64 = u64::from_le_bytes(*b"qccuchl2");
const REQUEST_MAGIC: u64 = u64::from_le_bytes(*b"qccureq2");
/// Version 3: the answer lists every term of the leader's log before its end, not only those in the
/// range sent (a follower that installs the snapshot needs the history below it).
const RESPONSE_MAGIC: u64 = u64::from_le_bytes(*b"qccures4");
/// Connections that may wait in the handshake at once.
pub const MAX_HANDSHAKES: usize = 16;
/// How long a connection may take to prove itself, from its accept.
pub const HANDSHAKE_TIMEOUT_NS: u64 = 2_000_000_000;
/// How long a catch-up may move no byte before it is closed (the follower reads with a shorter time-out).
pub const IDLE_TIMEOUT_NS: u64 = 10_000_000_000;
/// Bytes a session sends per duty cycle of the leader's recorder, at most.
pub const SEND_PER_POLL: usize = 1 << 20;
/// How often the listener is asked for new connections while no session runs: an `accept` on every duty
/// cycle would be a syscall per cycle on a recorder that shares its thread with the data path.
const ACCEPT_INTERVAL_NS: u64 = 1_000_000;
/// Terms a response may list: a bound on what a damaged count can make a follower allocate.
const MAX_TERMS: u32 = 1 << 16;
/// A frame's payload, at most: a block and its header, or a response and its terms.
const MAX_FRAME: usize = MAX_BLOCK_LENGTH + 4096;
/// A frame of the snapshot carries this much of it.
const SNAPSHOT_CHUNK: usize = 64 << 10;
/// Bytes of a nonce.
const NONCE_LENGTH: usize = 16;
/// Peers whose last log line is remembered (to log each at most once a second); forgotten when full.
const LOGGED_PEERS: usize = 256;

/// What a follower asks for: the log from `from`, as member `member_id` of cluster `membership`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CatchUpRequest {
    /// The follower's cluster (member-list tag).
    pub membership: i64,
    /// The follower's member id.
    pub member_id: i32,
    /// Where its log ends.
    pub from: i64,
}

impl CatchUpRequest {
    /// A request of member `member_id` of cluster `membership` for the log from `from`.
    pub fn new(membership: i64, member_id: i32, from: i64) -> Self {
        Self { membership, member_id, from }
    }
}

/// The key both ends of a catch-up prove they hold.
#[derive(Clone, Copy, Debug)]
pub struct CatchUpKey {
    key: AuthKey,
    secret: bool,
}

impl CatchUpKey {
    /// The catch-up key of cluster `membership`: derived from the channel's `auth_key` when there is one
    /// (only members can prove it), else from the membership (public: integrity only).
    pub fn new(auth_key: Option<&AuthKey>, membership: i64) -> Self {
        match auth_key {
            Some(key) => Self { key: AuthKey::new(key.keyed_hash(&[b"quorumcast catch-up key"])), secret: true },
            None => Self {
                key: AuthKey::derive("quorumcast catch-up key (public)", &membership.to_le_bytes()),
                secret: false,
            },
        }
    }

    /// True when it derives from a secret (an `auth_key`).
    pub fn is_secret(&self) -> bool {
        self.secret
    }

    fn proof(&self, who: &[u8], hello: &Hello, leader_nonce: &[u8; NONCE_LENGTH], from: i64) -> [u8; TAG_LENGTH] {
        let hash = self.key.keyed_hash(&[
            who,
            &hello.membership.to_le_bytes(),
            &hello.member_id.to_le_bytes(),
            &hello.nonce,
            leader_nonce,
            &from.to_le_bytes(),
        ]);
        hash[..TAG_LENGTH].try_into().expect("a tag's length")
    }

    fn leader_proof(&self, hello: &Hello, leader_nonce: &[u8; NONCE_LENGTH]) -> [u8; TAG_LENGTH] {
        self.proof(b"leader", hello, leader_nonce, 0)
    }

    fn follower_proof(&self, hello: &Hello, leader_nonce: &[u8; NONCE_LENGTH], from: i64) -> [u8; TAG_LENGTH] {
        self.proof(b"follower", hello, leader_nonce, from)
    }

    fn stream_key(&self, hello: &Hello, leader_nonce: &[u8; NONCE_LENGTH]) -> AuthKey {
        AuthKey::new(self.key.keyed_hash(&[
            b"stream",
            &hello.membership.to_le_bytes(),
            &hello.member_id.to_le_bytes(),
            &hello.nonce,
            leader_nonce,
        ]))
    }
}

/// The follower's first message.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
struct Hello {
    magic: u64,
    membership: i64,
    member_id: i32,
    reserved: i32,
    nonce: [u8; NONCE_LENGTH],
}

/// The leader's answer to a hello: its nonce, and its proof of the key.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
struct Challenge {
    magic: u64,
    membership: i64,
    nonce: [u8; NONCE_LENGTH],
    proof: [u8; TAG_LENGTH],
}

/// The follower's request, with its proof of the key.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
struct Request {
    magic: u64,
    membership: i64,
    member_id: i32,
    reserved: i32,
    from: i64,
    proof: [u8; TAG_LENGTH],
}

/// The leader's answer, the first sealed frame.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
struct CatchUpResponse {
    magic: u64,
    membership: i64,
    /// 1 when refused (the reason is logged on the leader; the follower retries).
    refused: u32,
    /// 1 when a snapshot precedes the blocks.
    snapshot: u32,
    /// Where the blocks start: the request's position, or the snapshot's.
    from: i64,
    /// Where they end: the leader's recording's end when it answered.
    end: i64,
    /// The leadership term of the byte at `from`.
    start_term: i64,
    term_count: u32,
    /// Bytes of the configuration entry in effect at `from` (the leader's), sent after the terms; 0 when
    /// the initial configuration is.
    configuration_length: u32,
}

/// The longest configuration entry a catch-up answer carries (a bound on what a follower allocates).
const MAX_CONFIGURATION_LENGTH: u32 = 64 * 1024;

/// A term that starts within the fetched range.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
struct TermRecord {
    leadership_term_id: i64,
    base_position: i64,
}

/// What precedes a sealed frame's payload; its tag follows the payload.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
struct FrameHeader {
    length: u32,
    reserved: u32,
}

const _: () = assert!(std::mem::size_of::<Hello>() == 40);
const _: () = assert!(std::mem::size_of::<Challenge>() == 48);
const _: () = assert!(std::mem::size_of::<Request>() == 48);
const _: () = assert!(std::mem::size_of::<CatchUpResponse>() == 56);
const _: () = assert!(std::mem::size_of::<FrameHeader>() == 8);

/// The tag of frame `index` (its header and payload) under `key`.
fn frame_tag(key: &AuthKey, index: u64, header: &FrameHeader, payload: &[u8]) -> [u8; TAG_LENGTH] {
    let hash = key.keyed_hash(&[&index.to_le_bytes(), bytemuck::bytes_of(header), payload]);
    hash[..TAG_LENGTH].try_into().expect("a tag's length")
}

/// Appends frame `index` of `payload` to `out`, sealed with `key`.
fn seal_frame(out: &mut Vec<u8>, key: &AuthKey, index: u64, payload: &[u8]) {
    let header = FrameHeader { length: payload.len() as u32, reserved: 0 };
    out.extend_from_slice(bytemuck::bytes_of(&header));
    out.extend_from_slice(payload);
    out.extend_from_slice(&frame_tag(key, index, &header, payload));
}

/// Where a catch-up's nonces come from: the operating system's randomness (production), or a seeded
/// sequence (the node simulator, which must replay a seed exactly).
#[derive(Clone, Default)]
pub enum Nonces {
    /// `getrandom`.
    #[default]
    Os,
    /// Each nonce from two calls of this function.
    Seeded(Arc<dyn Fn() -> u64 + Send + Sync>),
}

impl std::fmt::Debug for Nonces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Os => "Nonces::Os",
            Self::Seeded(_) => "Nonces::Seeded(..)",
        })
    }
}

impl Nonces {
    /// Fills `out` with random bytes (from the seed's draws, 8 at a time, when seeded).
    pub fn fill(&self, out: &mut [u8]) -> io::Result<()> {
        match self {
            Self::Os => fill_random(out),
            Self::Seeded(draw) => {
                for chunk in out.chunks_mut(8) {
                    chunk.copy_from_slice(&draw().to_le_bytes()[..chunk.len()]);
                }
                Ok(())
            }
        }
    }

    /// A random 64-bit value; should the kernel refuse its randomness (it does not, once booted), one
    /// from the wall clock, which is unique though not secret.
    pub fn next_u64(&self) -> u64 {
        let mut bytes = [0u8; 8];
        match self.fill(&mut bytes) {
            Ok(()) => u64::from_le_bytes(bytes),
            Err(_) => {
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
            }
        }
    }
}

/// Where a follower's catch-up is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// The hello sent: reading the leader's challenge.
    Challenge,
    /// Proven: reading the answer.
    Response,
    /// Reading the terms the answer lists, this many still.
    Terms(u32),
    /// Reading the configuration entry in effect at the answer's start.
    Configuration,
    /// Reading the snapshot file's header.
    SnapshotHeader,
    /// Reading the snapshot's state into its install.
    SnapshotState,
    /// Reading blocks until the answer's end.
    Blocks,
}

/// The follower's side of a catch-up, as a state machine over a [`Stream`]: each [`poll`](Self::poll)
/// moves what it can without waiting (on a non-blocking stream; on a blocking one, a read waits at most
/// the stream's time-out), so that it runs on a thread of its own in production and inside a duty cycle
/// under the node simulator, the same code either way.
///
/// Invariants: nothing is kept before it is verified (the leader's proof, every frame's tag, every block's
/// checksum and bounds, the snapshot by [`SnapshotStore::begin_install`]); the bytes held are bounded (at
/// most a frame's worth of stream bytes, and a frame's worth of payload beyond what is consumed); a
/// catch-up that moves no byte for its time-out fails.
#[derive(Debug)]
pub struct CatchUpFetch {
    leader: SocketAddr,
    request: CatchUpRequest,
    key: CatchUpKey,
    stream: Box<dyn Stream>,
    step: Step,
    hello: Hello,
    /// Bytes to send, from `sent` on.
    out: Vec<u8>,
    sent: usize,
    /// Bytes read and not yet made into frames.
    raw: Vec<u8>,
    /// Verified frame payloads, consumed from `taken` on.
    payload: Vec<u8>,
    taken: usize,
    stream_key: Option<AuthKey>,
    frame_index: u64,
    response: CatchUpResponse,
    terms: Vec<(i64, i64)>,
    /// The leader's terms that start at or below where its answer starts.
    history: Vec<(i64, i64)>,
    install: Option<SnapshotInstall>,
    snapshot: Option<SnapshotInfo>,
    /// The configuration entries fetched so far.
    configurations: Vec<(i64, i64, Vec<u8>)>,
    /// The configuration entry in effect at the answer's start (empty: the initial configuration).
    configuration_at_start: Option<Vec<u8>>,
    timeout_ns: u64,
    progress_ns: u64,
    closed: bool,
}

/// Stream bytes read ahead at most: one whole sealed frame.
const RAW_LIMIT: usize = MAX_FRAME + std::mem::size_of::<FrameHeader>() + TAG_LENGTH;

impl CatchUpFetch {
    /// Opens a catch-up of `request` from the leader at `leader` over `stream`, proving `key`, and queues
    /// the hello. It fails when no byte moves for `timeout_ns`.
    pub fn start(
        leader: SocketAddr,
        stream: Box<dyn Stream>,
        request: CatchUpRequest,
        key: CatchUpKey,
        nonces: &Nonces,
        timeout_ns: u64,
        now_ns: u64,
    ) -> Result<Self, String> {
        let mut hello = Hello {
            magic: HELLO_MAGIC,
            membership: request.membership,
            member_id: request.member_id,
            reserved: 0,
            nonce: [0; NONCE_LENGTH],
        };
        nonces.fill(&mut hello.nonce).map_err(|e| format!("make a nonce: {e}"))?;
        Ok(Self {
            leader,
            request,
            key,
            stream,
            step: Step::Challenge,
            hello,
            out: bytemuck::bytes_of(&hello).to_vec(),
            sent: 0,
            raw: Vec::new(),
            payload: Vec::new(),
            taken: 0,
            stream_key: None,
            frame_index: 0,
            response: CatchUpResponse::zeroed(),
            terms: Vec::new(),
            history: Vec::new(),
            install: None,
            snapshot: None,
            configurations: Vec::new(),
            configuration_at_start: None,
            timeout_ns,
            progress_ns: now_ns,
            closed: false,
        })
    }

    /// Moves the catch-up on: sends what waits, reads what came, keeps what verifies into `recording`
    /// (and a snapshot into `snapshots`). `Ok(None)` while it goes on; `Ok(Some(_))` once the log up to
    /// the leader's answer is recorded; `Err` says why it failed (the caller retries later).
    pub fn poll(
        &mut self,
        recording: &mut Recording,
        snapshots: &SnapshotStore,
        now_ns: u64,
    ) -> Result<Option<Fetched>, String> {
        let moved = self.flush()? + self.read()?;
        if moved > 0 {
            self.progress_ns = now_ns;
        }
        if self.step == Step::Challenge {
            self.on_challenge()?;
        }
        if self.step != Step::Challenge {
            loop {
                self.unseal()?;
                match self.consume(recording, snapshots)? {
                    Consumed::Done(fetched) => return Ok(Some(fetched)),
                    Consumed::More => continue,
                    Consumed::Wait => break,
                }
            }
        }
        if self.closed {
            return Err(format!("{} closed the catch-up before its end", self.leader));
        }
        if now_ns.saturating_sub(self.progress_ns) > self.timeout_ns {
            let quiet = Duration::from_nanos(self.timeout_ns);
            return Err(format!("{} moved nothing for {quiet:?}", self.leader));
        }
        Ok(None)
    }

    /// What a catch-up that failed after installing the leader's snapshot brought: the snapshot and the
    /// blocks recorded after it (all verified, and the recording already starts at the snapshot), for the
    /// follower to join there rather than to ask again from below a recording that no longer holds it.
    /// `None` when no snapshot was installed (the recording still ends where the catch-up began, or past
    /// it with verified blocks a retry cuts back).
    pub fn partial(&mut self, recording: &Recording) -> Option<Fetched> {
        let snapshot = self.snapshot.take()?;
        let end = recording.end();
        let from = self.response.from;
        let terms =
            std::mem::take(&mut self.terms).into_iter().filter(|&(base, _)| base == from || base < end).collect();
        Some(Fetched {
            from: self.response.from,
            end,
            terms,
            history: std::mem::take(&mut self.history),
            snapshot: Some(snapshot),
            configurations: std::mem::take(&mut self.configurations).into_iter().filter(|c| c.1 <= end).collect(),
            configuration_at_snapshot: Some(self.configuration_at_start.clone().unwrap_or_default()),
        })
    }

    /// Writes the pending bytes; the bytes written.
    fn flush(&mut self) -> Result<usize, String> {
        let mut moved = 0;
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => return Err(format!("{} closed the catch-up", self.leader)),
                Ok(n) => {
                    self.sent += n;
                    moved += n;
                }
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(format!("send to {}: {e}", self.leader)),
            }
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        }
        Ok(moved)
    }

    /// Reads what came, up to [`RAW_LIMIT`] held; the bytes read.
    fn read(&mut self) -> Result<usize, String> {
        let held = self.raw.len();
        if held >= RAW_LIMIT || self.closed {
            return Ok(0);
        }
        self.raw.resize(RAW_LIMIT, 0);
        let result = self.stream.read(&mut self.raw[held..]);
        let n = match result {
            Ok(0) => {
                self.closed = true;
                0
            }
            Ok(n) => n,
            Err(e) if would_block(&e) => 0,
            Err(e) => {
                self.raw.truncate(held);
                return Err(format!("read from {}: {e}", self.leader));
            }
        };
        self.raw.truncate(held + n);
        Ok(n)
    }

    /// The leader's challenge, once whole: checks its proof and sends the request with this member's.
    fn on_challenge(&mut self) -> Result<(), String> {
        let length = std::mem::size_of::<Challenge>();
        if self.raw.len() < length {
            return Ok(());
        }
        let challenge: Challenge = bytemuck::pod_read_unaligned(&self.raw[..length]);
        self.raw.drain(..length);
        let leader = self.leader;
        if challenge.magic != CHALLENGE_MAGIC || challenge.membership != self.request.membership {
            return Err(format!("{leader} answered with something that is not a catch-up of this cluster"));
        }
        if !constant_time_eq(&self.key.leader_proof(&self.hello, &challenge.nonce), &challenge.proof) {
            return Err(format!("{leader} did not prove it holds the catch-up key (is its auth_key the same?)"));
        }
        let request = Request {
            magic: REQUEST_MAGIC,
            membership: self.request.membership,
            member_id: self.request.member_id,
            reserved: 0,
            from: self.request.from,
            proof: self.key.follower_proof(&self.hello, &challenge.nonce, self.request.from),
        };
        self.out.extend_from_slice(bytemuck::bytes_of(&request));
        self.stream_key = Some(self.key.stream_key(&self.hello, &challenge.nonce));
        self.step = Step::Response;
        self.flush()?;
        Ok(())
    }

    /// Verifies the whole frames read, while the payload not yet consumed is under a frame's length.
    fn unseal(&mut self) -> Result<(), String> {
        let Some(key) = self.stream_key else {
            return Ok(());
        };
        let head = std::mem::size_of::<FrameHeader>();
        while self.payload.len() - self.taken < MAX_FRAME && self.raw.len() >= head {
            let header: FrameHeader = bytemuck::pod_read_unaligned(&self.raw[..head]);
            let length = header.length as usize;
            if length > MAX_FRAME || header.reserved != 0 {
                return Err(format!("{} sent a frame of {length} bytes", self.leader));
            }
            if self.raw.len() < head + length + TAG_LENGTH {
                break;
            }
            let (body, tag) = self.raw[head..head + length + TAG_LENGTH].split_at(length);
            if !constant_time_eq(&frame_tag(&key, self.frame_index, &header, body), tag) {
                return Err(format!("{}: frame {} fails its tag", self.leader, self.frame_index));
            }
            if self.taken > 0 {
                self.payload.drain(..self.taken);
                self.taken = 0;
            }
            self.payload.extend_from_slice(body);
            self.raw.drain(..head + length + TAG_LENGTH);
            self.frame_index += 1;
        }
        Ok(())
    }

    /// The next `n` verified payload bytes, if they are there.
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let at = self.taken;
        (self.payload.len() - at >= n).then(|| {
            self.taken += n;
            &self.payload[at..at + n]
        })
    }

    /// Consumes what the step waits for from the verified payloads.
    fn consume(&mut self, recording: &mut Recording, snapshots: &SnapshotStore) -> Result<Consumed, String> {
        let leader = self.leader;
        match self.step {
            Step::Challenge => Ok(Consumed::Wait),
            Step::Response => {
                let Some(bytes) = self.take(std::mem::size_of::<CatchUpResponse>()) else {
                    return Ok(Consumed::Wait);
                };
                let response: CatchUpResponse = bytemuck::pod_read_unaligned(bytes);
                if response.magic != RESPONSE_MAGIC || response.membership != self.request.membership {
                    return Err(format!("{leader} answered with something that is not a catch-up of this cluster"));
                }
                if response.refused != 0 {
                    return Err(format!("{leader} refused to serve the log from {} (see its log)", self.request.from));
                }
                if response.term_count > MAX_TERMS
                    || response.end < response.from
                    || response.configuration_length > MAX_CONFIGURATION_LENGTH
                {
                    return Err(format!("{leader} sent a malformed answer"));
                }
                self.response = response;
                self.terms = vec![(response.from, response.start_term)];
                self.history.clear();
                self.step = Step::Terms(response.term_count);
                Ok(Consumed::More)
            }
            Step::Terms(0) => {
                self.step = Step::Configuration;
                Ok(Consumed::More)
            }
            Step::Configuration => {
                let Some(bytes) = self.take(self.response.configuration_length as usize) else {
                    return Ok(Consumed::Wait);
                };
                self.configuration_at_start = Some(bytes.to_vec());
                if self.response.snapshot != 0 {
                    self.step = Step::SnapshotHeader;
                } else if self.response.from != recording.end() {
                    let (from, end) = (self.response.from, recording.end());
                    return Err(format!("{leader} sent the log from {from}, not from {end}"));
                } else {
                    self.step = Step::Blocks;
                }
                Ok(Consumed::More)
            }
            Step::Terms(left) => {
                let Some(bytes) = self.take(std::mem::size_of::<TermRecord>()) else {
                    return Ok(Consumed::Wait);
                };
                let term: TermRecord = bytemuck::pod_read_unaligned(bytes);
                let (base, id) = (term.base_position, term.leadership_term_id);
                // The last listed: in the range once any was, else in the history.
                let last = if self.terms.len() > 1 { self.terms.last() } else { self.history.last() };
                if last.is_some_and(|&(b, t)| b >= base || t >= id) {
                    return Err(format!("{leader} listed its terms out of order"));
                }
                if base > self.response.from {
                    self.terms.push((base, id));
                } else {
                    self.history.push((base, id));
                }
                self.step = Step::Terms(left - 1);
                Ok(Consumed::More)
            }
            Step::SnapshotHeader => {
                let Some(bytes) = self.take(SNAPSHOT_HEADER_LENGTH) else {
                    return Ok(Consumed::Wait);
                };
                let header: [u8; SNAPSHOT_HEADER_LENGTH] = bytes.try_into().expect("the header's length");
                let install =
                    snapshots.begin_install(&header).map_err(|e| format!("the snapshot from {leader}: {e}"))?;
                self.install = Some(install);
                self.step = Step::SnapshotState;
                Ok(Consumed::More)
            }
            Step::SnapshotState => self.snapshot_state(recording),
            Step::Blocks => self.block(recording),
        }
    }

    /// Hands the snapshot's state bytes that came to its install; once whole, stores it and starts the
    /// recording at its position.
    fn snapshot_state(&mut self, recording: &mut Recording) -> Result<Consumed, String> {
        let leader = self.leader;
        let install = self.install.as_mut().expect("an install in this step");
        let available = self.payload.len() - self.taken;
        let n = usize::try_from(install.remaining()).map_or(available, |left| left.min(available));
        if n > 0 {
            let bytes = &self.payload[self.taken..self.taken + n];
            install.write(bytes).map_err(|e| format!("the snapshot from {leader}: {e}"))?;
            self.taken += n;
        }
        if install.remaining() > 0 {
            return Ok(Consumed::Wait);
        }
        let install = self.install.take().expect("an install in this step");
        let info = install.finish().map_err(|e| format!("the snapshot from {leader}: {e}"))?;
        if info.position != self.response.from {
            return Err(format!("{leader} sent a snapshot at {} for a log from {}", info.position, self.response.from));
        }
        let configuration = self.configuration_at_start.as_deref().filter(|c| !c.is_empty());
        recording
            .reset_at_snapshot(info.position, self.response.start_term, &self.history, configuration)
            .map_err(|e| e.to_string())?;
        self.snapshot = Some(info);
        self.step = Step::Blocks;
        Ok(Consumed::More)
    }

    /// The next block, once whole: verified and recorded; done at the answer's end.
    fn block(&mut self, recording: &mut Recording) -> Result<Consumed, String> {
        let leader = self.leader;
        if recording.end() >= self.response.end {
            let fetched = Fetched {
                from: self.response.from,
                end: recording.end(),
                terms: std::mem::take(&mut self.terms),
                history: std::mem::take(&mut self.history),
                configuration_at_snapshot: self
                    .snapshot
                    .is_some()
                    .then(|| self.configuration_at_start.clone().unwrap_or_default()),
                snapshot: self.snapshot.take(),
                configurations: std::mem::take(&mut self.configurations),
            };
            return Ok(Consumed::Done(fetched));
        }
        let head = std::mem::size_of::<BlockHeader>();
        let available = &self.payload[self.taken..];
        if available.len() < head {
            return Ok(Consumed::Wait);
        }
        let header: BlockHeader = bytemuck::pod_read_unaligned(&available[..head]);
        header.check_fields(recording.end()).map_err(|why| format!("{leader} sent {why}"))?;
        let length = header.length as usize;
        if available.len() < head + length {
            return Ok(Consumed::Wait);
        }
        let payload = &available[head..head + length];
        if !header.check_payload(payload) || header.end() > self.response.end {
            return Err(format!("{leader} sent a block at {} that fails its checksum", header.position));
        }
        recording.append(header.position, payload, header.advance as usize).map_err(|e| e.to_string())?;
        super::for_each_frame(payload, header.position, |at, frame| {
            if let crate::frame::Frame::Data { header, payload } = frame {
                if let Some(entry) = configuration_of(header.flags, payload) {
                    let end = at + crate::frame::align_frame(header.frame_length as usize) as i64;
                    self.configurations.push((at, end, entry.to_vec()));
                }
            }
        });
        self.taken += head + length;
        Ok(Consumed::More)
    }
}

/// What [`CatchUpFetch::consume`] did.
enum Consumed {
    /// Waits for more bytes.
    Wait,
    /// Consumed something; may go on.
    More,
    /// The catch-up is over.
    Done(Fetched),
}

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

/// How long a blocking fetch's read waits for bytes before it looks at its time-out again.
const FETCH_READ_WAIT: Duration = Duration::from_millis(50);

/// Fetches the log from `request.from` from the leader at `leader` into `recording` (which must end at
/// `request.from`), installing the leader's snapshot first when it sends one, after both ends proved
/// `key`: a [`CatchUpFetch`] over a blocking stream of `network`, run to its end. Blocks, and fails when
/// no byte moves for `timeout` or once `cancelled` says so; `Err` says why (the caller retries).
#[allow(clippy::too_many_arguments)]
pub fn fetch(
    network: &mut SharedNetwork,
    local: IpAddr,
    leader: SocketAddr,
    request: CatchUpRequest,
    key: &CatchUpKey,
    recording: &mut Recording,
    snapshots: &SnapshotStore,
    timeout: Duration,
    cancelled: &dyn Fn() -> bool,
) -> Result<Fetched, String> {
    let options = StreamOptions { local, connect_timeout: timeout, blocking: Some(FETCH_READ_WAIT) };
    let stream = network.connect_stream(leader, &options).map_err(|e| format!("connect to {leader}: {e}"))?;
    let clock = NanoClock::new();
    let timeout_ns = timeout.as_nanos() as u64;
    let mut fetch = CatchUpFetch::start(leader, stream, request, *key, &Nonces::Os, timeout_ns, clock.now_ns())?;
    loop {
        let polled =
            if cancelled() { Err("cancelled".to_string()) } else { fetch.poll(recording, snapshots, clock.now_ns()) };
        match polled {
            Ok(Some(fetched)) => return Ok(fetched),
            Ok(None) => {}
            Err(why) => {
                let partial = fetch.partial(recording);
                if let Some(partial) = &partial {
                    log::warn!(
                        "a catch-up from {leader} stopped after its snapshot: {why}; joining from {}",
                        partial.end
                    );
                }
                return partial.ok_or(why);
            }
        }
    }
}

/// What a finished catch-up brought.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// Where the fetched log starts: the request's position, or the snapshot's.
    pub from: i64,
    /// Where the recording now ends (the follower joins the live log there).
    pub end: i64,
    /// The terms that start in the fetched range, `(base position, leadership term id)`, the term at its
    /// start included.
    pub terms: Vec<(i64, i64)>,
    /// The leader's terms that start at or below `from`, `(base position, leadership term id)`, oldest
    /// first: with a snapshot, the history of the log below it, which replaces this member's.
    pub history: Vec<(i64, i64)>,
    /// The snapshot installed first, when the follower was behind the leader's recording.
    pub snapshot: Option<SnapshotInfo>,
    /// The configuration entries in the fetched range: where each starts and ends, and its payload.
    pub configurations: Vec<(i64, i64, Vec<u8>)>,
    /// With a snapshot: the payload of the configuration entry in effect at it (the leader's; empty when
    /// the initial configuration is).
    pub configuration_at_snapshot: Option<Vec<u8>>,
}

/// Where a connection to the leader is.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Reading the follower's hello.
    Hello,
    /// The challenge sent; reading the follower's request and proof.
    Request { hello: Hello, nonce: [u8; NONCE_LENGTH] },
    /// Proven: sending the answer and the log to this member.
    Serving { member_id: i32 },
}

/// Why a connection is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Close {
    /// All sent, or the follower went away.
    Done,
    /// Refused: the reason is logged.
    Refused,
    /// Timed out in the handshake or idle, or evicted by a newer handshake.
    TimedOut,
}

/// One connection to the leader.
struct Connection {
    stream: Box<dyn Stream>,
    peer: SocketAddr,
    phase: Phase,
    inbound: [u8; 48],
    received: usize,
    /// Bytes to send, from `sent` on.
    out: Vec<u8>,
    sent: usize,
    /// Where the next frame's payload is laid out.
    scratch: Vec<u8>,
    /// The stream key, once proven.
    key: AuthKey,
    frame_index: u64,
    snapshot: Option<SnapshotReader>,
    reader: Option<RecordingReader>,
    end: i64,
    /// When it was accepted, and when it last moved a byte.
    accepted_ns: u64,
    progress_ns: u64,
    close: Option<Close>,
}

impl Connection {
    fn proven(&self) -> bool {
        matches!(self.phase, Phase::Serving { .. })
    }

    /// Bytes of the message it waits for in its phase.
    fn inbound_length(&self) -> usize {
        match self.phase {
            Phase::Hello => std::mem::size_of::<Hello>(),
            Phase::Request { .. } => std::mem::size_of::<Request>(),
            Phase::Serving { .. } => 0,
        }
    }
}

/// Log lines per peer address: a refusal or a time-out is logged at most once an interval per address
/// ([`RateLimited`]), for at most [`LOGGED_PEERS`] addresses at once.
#[derive(Debug, Default)]
struct PeerLog {
    by_peer: HashMap<IpAddr, RateLimited>,
}

impl PeerLog {
    /// Logs `message` for `peer` unless a line for it went out less than an interval ago, or the table
    /// is full of peers logged within the interval.
    fn warn(&mut self, peer: IpAddr, now_ns: u64, message: impl FnOnce() -> String) {
        if self.by_peer.len() >= LOGGED_PEERS && !self.by_peer.contains_key(&peer) {
            self.by_peer.retain(|_, line| !line.is_quiet(now_ns));
            if self.by_peer.len() >= LOGGED_PEERS {
                return;
            }
        }
        self.by_peer.entry(peer).or_default().warn(now_ns, message);
    }
}

/// The members a catch-up server serves, by id and address; the node changes them as its membership
/// changes (a learner added while the cluster runs catches up from the leader).
#[derive(Clone, Debug, Default)]
pub struct CatchUpMembers(Arc<std::sync::RwLock<Vec<(i32, IpAddr)>>>);

impl CatchUpMembers {
    /// Serving `members`.
    pub fn new(members: Vec<(i32, IpAddr)>) -> Self {
        Self(Arc::new(std::sync::RwLock::new(members)))
    }

    /// From now on, serving `members`.
    pub fn set(&self, members: Vec<(i32, IpAddr)>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = members;
    }

    /// Whether a member at `ip` (with `id`, when given) is served.
    fn contains(&self, id: Option<i32>, ip: IpAddr) -> bool {
        let members = self.0.read().unwrap_or_else(|e| e.into_inner());
        members.iter().any(|&(m, at)| at == ip && id.is_none_or(|id| id == m))
    }
}

/// The leader's side: serves catch-ups from its recording, a little per duty cycle.
pub struct CatchUpServer {
    listener: Box<dyn StreamListener>,
    connections: Vec<Connection>,
    /// The other members, by id and address: a connection from anywhere else is closed, and a hello must
    /// name the member at its address. Shared with the node, which changes it with the membership.
    members: CatchUpMembers,
    membership: i64,
    key: CatchUpKey,
    snapshots: SnapshotStore,
    clock: NanoClock,
    nonces: Nonces,
    next_accept_ns: u64,
    logged: PeerLog,
}

impl std::fmt::Debug for CatchUpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatchUpServer").field("connections", &self.connections.len()).finish()
    }
}

impl CatchUpServer {
    /// Serves the streams `listener` takes (at this member's consensus address) from the other members,
    /// `members` (id and address), each proving `key`; times its connections by `clock`, draws its nonces
    /// from `nonces`.
    pub fn new(
        listener: Box<dyn StreamListener>,
        members: CatchUpMembers,
        membership: i64,
        key: CatchUpKey,
        snapshots: SnapshotStore,
        clock: NanoClock,
        nonces: Nonces,
    ) -> Self {
        Self {
            listener,
            connections: Vec::new(),
            members,
            membership,
            key,
            snapshots,
            clock,
            nonces,
            next_accept_ns: 0,
            logged: PeerLog::default(),
        }
    }

    /// The port it listens at (for a test that binds port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Takes new connections, closes the timed-out ones and moves every other on; returns the work done.
    pub fn poll(&mut self, recording: &Recording, counters: &RecorderCounters) -> usize {
        let now_ns = self.clock.now_ns();
        if self.connections.is_empty() && now_ns < self.next_accept_ns {
            return 0;
        }
        self.next_accept_ns = now_ns + ACCEPT_INTERVAL_NS;
        let mut work = self.accept(now_ns, counters);
        for i in 0..self.connections.len() {
            work += self.serve(i, recording, counters, now_ns);
        }
        self.time_out(now_ns);
        self.close_finished(now_ns, counters);
        work
    }

    /// Takes the connections waiting (a handshake's worth at most per poll): members' addresses only.
    fn accept(&mut self, now_ns: u64, counters: &RecorderCounters) -> usize {
        let mut work = 0;
        for _ in 0..MAX_HANDSHAKES {
            let Ok(Some((stream, peer))) = self.listener.accept() else {
                break;
            };
            work += 1;
            if !self.members.contains(None, peer.ip()) {
                counters.catch_ups_refused.increment();
                self.logged.warn(peer.ip(), now_ns, || {
                    format!("refused a catch-up connection from {peer}: not a member's address")
                });
                continue;
            }
            self.make_room_for_handshake();
            self.connections.push(Connection {
                stream,
                peer,
                phase: Phase::Hello,
                inbound: [0; 48],
                received: 0,
                out: Vec::new(),
                sent: 0,
                scratch: Vec::new(),
                key: AuthKey::new([0; 32]),
                frame_index: 0,
                snapshot: None,
                reader: None,
                end: 0,
                accepted_ns: now_ns,
                progress_ns: now_ns,
                close: None,
            });
        }
        work
    }

    /// When [`MAX_HANDSHAKES`] connections wait in the handshake, the oldest is closed as timed out.
    fn make_room_for_handshake(&mut self) {
        let waiting = || self.connections.iter().filter(|c| !c.proven() && c.close.is_none());
        if waiting().count() < MAX_HANDSHAKES {
            return;
        }
        let oldest = waiting().map(|c| c.accepted_ns).min();
        if let Some(c) =
            self.connections.iter_mut().find(|c| !c.proven() && c.close.is_none() && Some(c.accepted_ns) == oldest)
        {
            c.close = Some(Close::TimedOut);
        }
    }

    /// Marks the connections past their handshake or idle time-out.
    fn time_out(&mut self, now_ns: u64) {
        for c in self.connections.iter_mut().filter(|c| c.close.is_none()) {
            let late = if c.proven() {
                now_ns.saturating_sub(c.progress_ns) > IDLE_TIMEOUT_NS
            } else {
                now_ns.saturating_sub(c.accepted_ns) > HANDSHAKE_TIMEOUT_NS
            };
            if late {
                c.close = Some(Close::TimedOut);
            }
        }
    }

    /// Counts, logs (once a second per peer) and drops the closed connections.
    fn close_finished(&mut self, now_ns: u64, counters: &RecorderCounters) {
        for c in &self.connections {
            match c.close {
                Some(Close::TimedOut) => {
                    counters.catch_ups_timed_out.increment();
                    let what = if c.proven() {
                        "moved nothing for too long"
                    } else {
                        "did not complete its handshake in time"
                    };
                    self.logged.warn(c.peer.ip(), now_ns, || {
                        format!("closed a catch-up connection from {}: it {what}", c.peer)
                    });
                }
                Some(Close::Refused) => counters.catch_ups_refused.increment(),
                Some(Close::Done) | None => {}
            }
        }
        self.connections.retain(|c| c.close.is_none());
    }

    /// Moves connection `i` on: sends what it has to send (up to [`SEND_PER_POLL`] bytes), then reads
    /// what its phase waits for.
    fn serve(&mut self, i: usize, recording: &Recording, counters: &RecorderCounters, now_ns: u64) -> usize {
        if self.connections[i].close.is_some() {
            return 0;
        }
        let mut work = self.send(i, now_ns);
        let c = &mut self.connections[i];
        let wanted = c.inbound_length();
        if c.close.is_some() || wanted == 0 {
            return work;
        }
        match c.stream.read(&mut c.inbound[c.received..wanted]) {
            Ok(0) => c.close = Some(Close::Done),
            Ok(n) => {
                c.received += n;
                work += 1;
            }
            Err(e) if would_block(&e) => return work,
            Err(_) => c.close = Some(Close::Done),
        }
        if c.close.is_none() && c.received == wanted {
            c.received = 0;
            match c.phase {
                Phase::Hello => self.on_hello(i, now_ns),
                Phase::Request { hello, nonce } => self.on_request(i, hello, nonce, recording, counters, now_ns),
                Phase::Serving { .. } => {}
            }
            work += self.send(i, now_ns);
        }
        work
    }

    /// Writes connection `i`'s pending bytes, refilling them while it serves; 1 when it moved any.
    fn send(&mut self, i: usize, now_ns: u64) -> usize {
        let c = &mut self.connections[i];
        let mut moved = 0;
        while moved < SEND_PER_POLL && c.close.is_none() {
            if c.sent == c.out.len() {
                c.out.clear();
                c.sent = 0;
                if !c.proven() {
                    break;
                }
                if !refill(c) {
                    c.close = Some(Close::Done);
                    break;
                }
            }
            match c.stream.write(&c.out[c.sent..]) {
                Ok(n) => {
                    c.sent += n;
                    moved += n;
                    c.progress_ns = now_ns;
                }
                Err(e) if would_block(&e) => break,
                Err(_) => c.close = Some(Close::Done),
            }
        }
        usize::from(moved > 0)
    }

    /// A hello in: from the member it names (at that member's address) of this cluster, it is answered
    /// with a challenge; otherwise refused, with no answer.
    fn on_hello(&mut self, i: usize, now_ns: u64) {
        let c = &mut self.connections[i];
        let hello: Hello = bytemuck::pod_read_unaligned(&c.inbound[..std::mem::size_of::<Hello>()]);
        let member = self.members.contains(Some(hello.member_id), c.peer.ip());
        let why = if hello.magic != HELLO_MAGIC {
            Some("not a catch-up hello of this version".to_string())
        } else if hello.membership != self.membership {
            Some(format!("of another cluster (member list tag {:#x})", hello.membership))
        } else if !member {
            Some(format!("it names member {}, which is not a member at its address", hello.member_id))
        } else {
            None
        };
        if let Some(why) = why {
            c.close = Some(Close::Refused);
            self.logged.warn(c.peer.ip(), now_ns, || format!("refused a catch-up from {}: {why}", c.peer));
            return;
        }
        let mut nonce = [0u8; NONCE_LENGTH];
        if self.nonces.fill(&mut nonce).is_err() {
            c.close = Some(Close::Done);
            return;
        }
        let challenge = Challenge {
            magic: CHALLENGE_MAGIC,
            membership: self.membership,
            nonce,
            proof: self.key.leader_proof(&hello, &nonce),
        };
        c.out.extend_from_slice(bytemuck::bytes_of(&challenge));
        c.phase = Phase::Request { hello, nonce };
    }

    /// A request in: with a right proof, the member is served (any older catch-up of the same member is
    /// closed); otherwise refused, with no answer.
    fn on_request(
        &mut self,
        i: usize,
        hello: Hello,
        nonce: [u8; NONCE_LENGTH],
        recording: &Recording,
        counters: &RecorderCounters,
        now_ns: u64,
    ) {
        let c = &mut self.connections[i];
        let request: Request = bytemuck::pod_read_unaligned(&c.inbound[..std::mem::size_of::<Request>()]);
        let proven = request.magic == REQUEST_MAGIC
            && request.membership == hello.membership
            && request.member_id == hello.member_id
            && constant_time_eq(&self.key.follower_proof(&hello, &nonce, request.from), &request.proof);
        if !proven {
            c.close = Some(Close::Refused);
            let hint = if self.key.is_secret() { " (is its auth_key the same?)" } else { "" };
            self.logged.warn(c.peer.ip(), now_ns, || {
                format!(
                    "refused a catch-up from {} as member {}: it did not prove the catch-up key{hint}",
                    c.peer, hello.member_id
                )
            });
            return;
        }
        c.key = self.key.stream_key(&hello, &nonce);
        c.phase = Phase::Serving { member_id: hello.member_id };
        c.progress_ns = now_ns;
        for (j, other) in self.connections.iter_mut().enumerate() {
            if j != i && matches!(other.phase, Phase::Serving { member_id } if member_id == hello.member_id) {
                other.close = Some(Close::Done);
            }
        }
        let from = request.from;
        if self.answer(i, hello.member_id, from, recording) {
            counters.catch_ups_served.increment();
        } else {
            counters.catch_ups_refused.increment();
        }
    }

    /// Lays out the answer to member `member_id`'s request for the log from `from` in connection `i`:
    /// refused, or the terms, the snapshot and the log; true when served.
    fn answer(&mut self, i: usize, member_id: i32, from: i64, recording: &Recording) -> bool {
        let mut response = CatchUpResponse {
            magic: RESPONSE_MAGIC,
            membership: self.membership,
            refused: 1,
            snapshot: 0,
            from,
            end: recording.end(),
            start_term: 0,
            term_count: 0,
            configuration_length: 0,
        };
        let mut snapshot = None;
        if from < recording.start() {
            // Behind the recording: the newest snapshot first, then the log after it.
            if let Ok(send) = self.snapshots.open_for_send() {
                snapshot = send.snapshot.filter(|s| {
                    let at = s.info().position;
                    at >= recording.start() && at <= recording.end() && at > from
                });
            }
            if let Some(s) = &snapshot {
                response.from = s.info().position;
                response.snapshot = 1;
            }
        }
        let servable = response.from >= recording.start() && response.from <= recording.end();
        let c = &mut self.connections[i];
        let mut first = Vec::new();
        if servable {
            response.refused = 0;
            response.start_term = recording.index().term_at(response.from);
            let terms: Vec<TermRecord> = recording
                .index()
                .terms
                .iter()
                .filter(|t| t.base_position < response.end)
                .take(MAX_TERMS as usize)
                .map(|t| TermRecord { leadership_term_id: t.leadership_term_id, base_position: t.base_position })
                .collect();
            response.term_count = terms.len() as u32;
            // The configuration in effect at the answer's start: the last entry ending at or before it.
            let configurations = &recording.index().configurations;
            let configuration = configurations.iter().rev().find(|(end, _)| *end <= response.from).map(|(_, c)| c);
            let configuration = configuration.map_or(&[][..], |c| &c[..]);
            response.configuration_length = configuration.len() as u32;
            first.extend_from_slice(bytemuck::bytes_of(&response));
            first.extend_from_slice(bytemuck::cast_slice(&terms));
            first.extend_from_slice(configuration);
            c.snapshot = snapshot;
            c.reader = Some(recording.reader(response.from));
            c.end = response.end;
        } else {
            log::warn!(
                "refused a catch-up from member {member_id} for the log from {from} (this recording holds {}..{})",
                recording.start(),
                recording.end()
            );
            first.extend_from_slice(bytemuck::bytes_of(&response));
            c.end = i64::MIN;
        }
        seal_frame(&mut c.out, &c.key, c.frame_index, &first);
        c.frame_index += 1;
        servable
    }
}

/// Refills a connection's output with its next sealed frame: the snapshot's next chunk, else the log's
/// next block; false when all is sent.
fn refill(c: &mut Connection) -> bool {
    let mut payload = std::mem::take(&mut c.out);
    payload.clear();
    let mut filled = false;
    if let Some(snapshot) = c.snapshot.as_mut() {
        payload.resize(SNAPSHOT_CHUNK, 0);
        match snapshot.read(&mut payload) {
            Ok(n) if n > 0 => {
                payload.truncate(n);
                filled = true;
            }
            Ok(_) => c.snapshot = None,
            Err(_) => return false,
        }
    }
    if !filled {
        payload.clear();
        let Some(reader) = c.reader.as_mut() else {
            return false;
        };
        match reader.next_block(c.end) {
            Ok(Some((at, bytes, end))) => {
                let header = BlockHeader::new(at, bytes, (end - at) as usize);
                payload.extend_from_slice(bytemuck::bytes_of(&header));
                payload.extend_from_slice(bytes);
            }
            _ => return false,
        }
    }
    // The frame is laid out beside the payload and the buffers swapped: two buffers, allocated once each.
    let mut out = std::mem::take(&mut c.scratch);
    out.clear();
    seal_frame(&mut out, &c.key, c.frame_index, &payload);
    c.frame_index += 1;
    c.scratch = payload;
    c.out = out;
    true
}
