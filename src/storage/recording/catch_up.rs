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
//!                      CatchUpResponse (56 bytes) and term_count x TermRecord (16 bytes),
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
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use bytemuck::{Pod, Zeroable};

use super::segment::{BlockHeader, MAX_BLOCK_LENGTH};
use super::{RecorderCounters, Recording, RecordingReader};
use crate::event_log::RateLimited;
use crate::media::auth::{constant_time_eq, fill_random, AuthKey, TAG_LENGTH};
use crate::storage::snapshot::{SnapshotInfo, SnapshotReader, SnapshotStore};

const HELLO_MAGIC: u64 = u64::from_le_bytes(*b"qccuhel2");
const CHALLENGE_MAGIC: u64 = u64::from_le_bytes(*b"qccuchl2");
const REQUEST_MAGIC: u64 = u64::from_le_bytes(*b"qccureq2");
const RESPONSE_MAGIC: u64 = u64::from_le_bytes(*b"qccures2");
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
    reserved: u32,
}

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

/// The follower's reading of the sealed frames: their payloads, one after the other, each handed out only
/// once its tag is checked.
struct SealedReader<'s> {
    stream: &'s mut TcpStream,
    key: AuthKey,
    index: u64,
    frame: Vec<u8>,
    at: usize,
}

impl SealedReader<'_> {
    fn next_frame(&mut self) -> io::Result<()> {
        let mut header = FrameHeader::zeroed();
        self.stream.read_exact(bytemuck::bytes_of_mut(&mut header))?;
        let length = header.length as usize;
        if length > MAX_FRAME || header.reserved != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a frame of {length} bytes")));
        }
        self.frame.resize(length + TAG_LENGTH, 0);
        self.stream.read_exact(&mut self.frame)?;
        let (payload, tag) = self.frame.split_at(length);
        if !constant_time_eq(&frame_tag(&self.key, self.index, &header, payload), tag) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("frame {} fails its tag", self.index)));
        }
        self.frame.truncate(length);
        self.index += 1;
        self.at = 0;
        Ok(())
    }
}

impl Read for SealedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.frame.len() {
            self.next_frame()?;
        }
        let n = buf.len().min(self.frame.len() - self.at);
        buf[..n].copy_from_slice(&self.frame[self.at..self.at + n]);
        self.at += n;
        Ok(n)
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
    /// The snapshot installed first, when the follower was behind the leader's recording.
    pub snapshot: Option<SnapshotInfo>,
}

/// Fetches the log from `request.from` from the leader at `leader` into `recording` (which must end at
/// `request.from`), installing the leader's snapshot first when it sends one, after both ends proved
/// `key`. Blocks, with `timeout` on every read and write; `Err` says why (the caller retries).
pub fn fetch(
    leader: SocketAddr,
    request: CatchUpRequest,
    key: &CatchUpKey,
    recording: &mut Recording,
    snapshots: &SnapshotStore,
    timeout: Duration,
) -> Result<Fetched, String> {
    let mut stream = TcpStream::connect_timeout(&leader, timeout).map_err(|e| format!("connect to {leader}: {e}"))?;
    stream.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    stream.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let stream_key = handshake(&mut stream, leader, request, key)?;
    let mut sealed = SealedReader { stream: &mut stream, key: stream_key, index: 0, frame: Vec::new(), at: 0 };
    let mut response = CatchUpResponse::zeroed();
    sealed.read_exact(bytemuck::bytes_of_mut(&mut response)).map_err(|e| format!("read the answer: {e}"))?;
    if response.magic != RESPONSE_MAGIC || response.membership != request.membership {
        return Err(format!("{leader} answered with something that is not a catch-up of this cluster"));
    }
    if response.refused != 0 {
        return Err(format!("{leader} refused to serve the log from {} (see its log)", request.from));
    }
    if response.term_count > MAX_TERMS || response.end < response.from {
        return Err(format!("{leader} sent a malformed answer"));
    }
    let mut terms = vec![(response.from, response.start_term)];
    for _ in 0..response.term_count {
        let mut term = TermRecord::zeroed();
        sealed.read_exact(bytemuck::bytes_of_mut(&mut term)).map_err(|e| format!("read the terms: {e}"))?;
        terms.push((term.base_position, term.leadership_term_id));
    }
    let snapshot = if response.snapshot != 0 {
        let info = snapshots.install(&mut sealed).map_err(|e| format!("the snapshot from {leader}: {e}"))?;
        if info.position != response.from {
            return Err(format!("{leader} sent a snapshot at {} for a log from {}", info.position, response.from));
        }
        recording.reset(info.position, response.start_term).map_err(|e| e.to_string())?;
        Some(info)
    } else {
        if response.from != recording.end() {
            return Err(format!("{leader} sent the log from {}, not from {}", response.from, recording.end()));
        }
        None
    };
    let mut payload = Vec::new();
    while recording.end() < response.end {
        let mut header = BlockHeader::zeroed();
        sealed.read_exact(bytemuck::bytes_of_mut(&mut header)).map_err(|e| format!("read a block: {e}"))?;
        header.check_fields(recording.end()).map_err(|why| format!("{leader} sent {why}"))?;
        payload.resize(header.length as usize, 0);
        sealed.read_exact(&mut payload).map_err(|e| format!("read a block: {e}"))?;
        if !header.check_payload(&payload) || header.end() > response.end {
            return Err(format!("{leader} sent a block at {} that fails its checksum", header.position));
        }
        recording.append(header.position, &payload, header.advance as usize).map_err(|e| e.to_string())?;
    }
    Ok(Fetched { from: response.from, end: recording.end(), terms, snapshot })
}

/// The follower's half of the handshake: says hello, checks the leader's proof, sends its request with
/// its own; returns the stream key.
fn handshake(
    stream: &mut TcpStream,
    leader: SocketAddr,
    request: CatchUpRequest,
    key: &CatchUpKey,
) -> Result<AuthKey, String> {
    let mut hello = Hello {
        magic: HELLO_MAGIC,
        membership: request.membership,
        member_id: request.member_id,
        reserved: 0,
        nonce: [0; NONCE_LENGTH],
    };
    fill_random(&mut hello.nonce).map_err(|e| format!("make a nonce: {e}"))?;
    stream.write_all(bytemuck::bytes_of(&hello)).map_err(|e| format!("send the hello: {e}"))?;
    let mut challenge = Challenge::zeroed();
    stream.read_exact(bytemuck::bytes_of_mut(&mut challenge)).map_err(|e| format!("read the challenge: {e}"))?;
    if challenge.magic != CHALLENGE_MAGIC || challenge.membership != request.membership {
        return Err(format!("{leader} answered with something that is not a catch-up of this cluster"));
    }
    if !constant_time_eq(&key.leader_proof(&hello, &challenge.nonce), &challenge.proof) {
        return Err(format!("{leader} did not prove it holds the catch-up key (is its auth_key the same?)"));
    }
    let proof = key.follower_proof(&hello, &challenge.nonce, request.from);
    let wire = Request {
        magic: REQUEST_MAGIC,
        membership: request.membership,
        member_id: request.member_id,
        reserved: 0,
        from: request.from,
        proof,
    };
    stream.write_all(bytemuck::bytes_of(&wire)).map_err(|e| format!("send the request: {e}"))?;
    Ok(key.stream_key(&hello, &challenge.nonce))
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
    stream: TcpStream,
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

/// The leader's side: serves catch-ups from its recording, a little per duty cycle.
pub struct CatchUpServer {
    listener: TcpListener,
    connections: Vec<Connection>,
    /// The other members, by id and address: a connection from anywhere else is closed, and a hello must
    /// name the member at its address.
    members: Vec<(i32, IpAddr)>,
    membership: i64,
    key: CatchUpKey,
    snapshots: SnapshotStore,
    clock: crate::agent::clock::NanoClock,
    next_accept_ns: u64,
    logged: PeerLog,
}

impl std::fmt::Debug for CatchUpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatchUpServer").field("connections", &self.connections.len()).finish()
    }
}

impl CatchUpServer {
    /// Listens at `addr` (this member's consensus address, over TCP) for the other members, `members`
    /// (id and address), each proving `key`.
    pub fn bind(
        addr: SocketAddr,
        members: Vec<(i32, IpAddr)>,
        membership: i64,
        key: CatchUpKey,
        snapshots: SnapshotStore,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(Self {
            listener,
            connections: Vec::new(),
            members,
            membership,
            key,
            snapshots,
            clock: crate::agent::clock::NanoClock::new(),
            next_accept_ns: 0,
            logged: PeerLog::default(),
        })
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
            let Ok((stream, peer)) = self.listener.accept() else {
                break;
            };
            work += 1;
            if !self.members.iter().any(|&(_, ip)| ip == peer.ip()) {
                counters.catch_ups_refused.increment();
                self.logged.warn(peer.ip(), now_ns, || {
                    format!("refused a catch-up connection from {peer}: not a member's address")
                });
                continue;
            }
            if stream.set_nonblocking(true).is_err() || stream.set_nodelay(true).is_err() {
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
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return work,
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
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
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
        let member = self.members.iter().any(|&(id, ip)| id == hello.member_id && ip == c.peer.ip());
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
        if fill_random(&mut nonce).is_err() {
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
            reserved: 0,
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
                .filter(|t| t.base_position > response.from && t.base_position < response.end)
                .take(MAX_TERMS as usize)
                .map(|t| TermRecord { leadership_term_id: t.leadership_term_id, base_position: t.base_position })
                .collect();
            response.term_count = terms.len() as u32;
            first.extend_from_slice(bytemuck::bytes_of(&response));
            first.extend_from_slice(bytemuck::cast_slice(&terms));
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
