//! Catch-up from the recorded log (after Aeron's replay-merge): a follower further behind than its
//! leader holds in memory fetches the rest of the log from the leader's recording, and first the
//! leader's newest snapshot when its position is below where that recording starts, over TCP at the
//! leader's consensus address (TCP and UDP ports are apart); it records what it fetched and then joins
//! the live log where the fetch ended, with no gap and no duplicate.
//!
//! # Protocol
//!
//! ```text
//! follower -> leader   CatchUpRequest (32 bytes)
//! leader -> follower   CatchUpResponse (56 bytes), term_count x TermRecord (16 bytes),
//!                      the snapshot file when `snapshot` is 1 (its own header says its length),
//!                      then blocks (BlockHeader + payload) from `from` up to `end`
//! ```
//!
//! # Invariants
//!
//! - The leader's side never blocks its recorder: each session moves at most [`SEND_PER_POLL`] bytes
//!   per duty cycle through a non-blocking socket; at most [`MAX_SESSIONS`] run at once, each from a
//!   member's address only, and a request of another cluster is refused.
//! - The follower's side verifies everything before it keeps it: every block's checksum, its position
//!   and length bounds; the snapshot by [`SnapshotStore::install`]; a count or length is bounded before
//!   anything is allocated for it.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use bytemuck::{Pod, Zeroable};

use super::segment::BlockHeader;
use super::{RecorderCounters, Recording, RecordingReader};
use crate::snapshot::{SnapshotInfo, SnapshotReader, SnapshotStore};

const REQUEST_MAGIC: u64 = u64::from_le_bytes(*b"qccureq1");
const RESPONSE_MAGIC: u64 = u64::from_le_bytes(*b"qccures1");
/// Sessions a leader serves at once (a follower per other member is the most a cluster needs).
pub const MAX_SESSIONS: usize = 8;
/// Bytes a session sends per duty cycle of the leader's recorder, at most.
pub const SEND_PER_POLL: usize = 1 << 20;
/// How often the listener is asked for new connections while no session runs: an `accept` on every duty
/// cycle would be a syscall per cycle on a recorder that shares its thread with the data path.
const ACCEPT_INTERVAL_NS: u64 = 1_000_000;
/// Terms a response may list: a bound on what a damaged count can make a follower allocate.
const MAX_TERMS: u32 = 1 << 16;

/// A follower's request: the log from `from`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct CatchUpRequest {
    magic: u64,
    /// The follower's cluster (member-list tag).
    pub membership: i64,
    /// The follower's member id.
    pub member_id: i32,
    reserved: i32,
    /// Where its log ends.
    pub from: i64,
}

/// The leader's answer.
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

const _: () = assert!(std::mem::size_of::<CatchUpRequest>() == 32);
const _: () = assert!(std::mem::size_of::<CatchUpResponse>() == 56);

impl CatchUpRequest {
    /// A request of member `member_id` of cluster `membership` for the log from `from`.
    pub fn new(membership: i64, member_id: i32, from: i64) -> Self {
        Self { magic: REQUEST_MAGIC, membership, member_id, reserved: 0, from }
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
/// `request.from`), installing the leader's snapshot first when it sends one. Blocks, with `timeout` on
/// every read and write; `Err` says why (the caller retries).
pub fn fetch(
    leader: SocketAddr,
    request: CatchUpRequest,
    recording: &mut Recording,
    snapshots: &SnapshotStore,
    timeout: Duration,
) -> Result<Fetched, String> {
    let mut stream = TcpStream::connect_timeout(&leader, timeout).map_err(|e| format!("connect to {leader}: {e}"))?;
    stream.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    stream.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    stream.write_all(bytemuck::bytes_of(&request)).map_err(|e| format!("send the request: {e}"))?;
    let mut response = CatchUpResponse::zeroed();
    stream.read_exact(bytemuck::bytes_of_mut(&mut response)).map_err(|e| format!("read the answer: {e}"))?;
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
        stream.read_exact(bytemuck::bytes_of_mut(&mut term)).map_err(|e| format!("read the terms: {e}"))?;
        terms.push((term.base_position, term.leadership_term_id));
    }
    let snapshot = if response.snapshot != 0 {
        let info = snapshots.install(&mut stream).map_err(|e| format!("the snapshot from {leader}: {e}"))?;
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
        stream.read_exact(bytemuck::bytes_of_mut(&mut header)).map_err(|e| format!("read a block: {e}"))?;
        header.check_fields(recording.end()).map_err(|why| format!("{leader} sent {why}"))?;
        payload.resize(header.length as usize, 0);
        stream.read_exact(&mut payload).map_err(|e| format!("read a block: {e}"))?;
        if !header.check_payload(&payload) || header.end() > response.end {
            return Err(format!("{leader} sent a block at {} that fails its checksum", header.position));
        }
        recording.append(header.position, &payload, header.advance as usize).map_err(|e| e.to_string())?;
    }
    Ok(Fetched { from: response.from, end: recording.end(), terms, snapshot })
}

/// One follower being served.
struct Session {
    stream: TcpStream,
    request: [u8; 32],
    received: usize,
    /// Bytes to send, from `sent` on.
    out: Vec<u8>,
    sent: usize,
    snapshot: Option<SnapshotReader>,
    reader: Option<RecordingReader>,
    end: i64,
    done: bool,
}

/// The leader's side: serves catch-ups from its recording, a little per duty cycle.
pub struct CatchUpServer {
    listener: TcpListener,
    sessions: Vec<Session>,
    /// The members' addresses: a connection from anywhere else is closed.
    members: Vec<IpAddr>,
    membership: i64,
    snapshots: SnapshotStore,
    clock: crate::clock::NanoClock,
    next_accept_ns: u64,
}

impl std::fmt::Debug for CatchUpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatchUpServer").field("sessions", &self.sessions.len()).finish()
    }
}

impl CatchUpServer {
    /// Listens at `addr` (this member's consensus address, over TCP) for the members at `members`.
    pub fn bind(addr: SocketAddr, members: Vec<IpAddr>, membership: i64, snapshots: SnapshotStore) -> io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let clock = crate::clock::NanoClock::new();
        Ok(Self { listener, sessions: Vec::new(), members, membership, snapshots, clock, next_accept_ns: 0 })
    }

    /// Takes new connections and moves every session on; returns the work done.
    pub fn poll(&mut self, recording: &Recording, counters: &RecorderCounters) -> usize {
        let mut work = 0;
        if self.sessions.is_empty() {
            let now_ns = self.clock.now_ns();
            if now_ns < self.next_accept_ns {
                return 0;
            }
            self.next_accept_ns = now_ns + ACCEPT_INTERVAL_NS;
        }
        while self.sessions.len() < MAX_SESSIONS {
            match self.listener.accept() {
                Ok((stream, peer)) if self.members.contains(&peer.ip()) && stream.set_nonblocking(true).is_ok() => {
                    self.sessions.push(Session {
                        stream,
                        request: [0; 32],
                        received: 0,
                        out: Vec::new(),
                        sent: 0,
                        snapshot: None,
                        reader: None,
                        end: 0,
                        done: false,
                    });
                    work += 1;
                }
                Ok(_) => {
                    // Not a member: dropped, closed.
                    counters.catch_ups_refused.increment();
                    work += 1;
                }
                Err(_) => break,
            }
        }
        for i in 0..self.sessions.len() {
            work += self.serve(i, recording, counters);
        }
        self.sessions.retain(|s| !s.done);
        work
    }

    /// Moves session `i` on: reads its request, then sends up to [`SEND_PER_POLL`] bytes.
    fn serve(&mut self, i: usize, recording: &Recording, counters: &RecorderCounters) -> usize {
        let session = &mut self.sessions[i];
        if session.received < session.request.len() {
            match session.stream.read(&mut session.request[session.received..]) {
                Ok(0) => session.done = true,
                Ok(n) => session.received += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return 0,
                Err(_) => session.done = true,
            }
            if session.received < session.request.len() {
                return 1;
            }
            let request: CatchUpRequest = bytemuck::pod_read_unaligned(&session.request);
            if self.answer(i, request, recording) {
                counters.catch_ups_served.increment();
            } else {
                counters.catch_ups_refused.increment();
            }
        }
        let session = &mut self.sessions[i];
        let mut moved = 0;
        while moved < SEND_PER_POLL && !session.done {
            if session.sent == session.out.len() && !refill(session) {
                session.done = true;
                break;
            }
            match session.stream.write(&session.out[session.sent..]) {
                Ok(n) => {
                    session.sent += n;
                    moved += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => session.done = true,
            }
        }
        usize::from(moved > 0)
    }

    /// Lays out the answer to `request` in session `i`: refused, or the terms, the snapshot and the log;
    /// true when served.
    fn answer(&mut self, i: usize, request: CatchUpRequest, recording: &Recording) -> bool {
        let mut response = CatchUpResponse {
            magic: RESPONSE_MAGIC,
            membership: self.membership,
            refused: 1,
            snapshot: 0,
            from: request.from,
            end: recording.end(),
            start_term: 0,
            term_count: 0,
            reserved: 0,
        };
        let mut snapshot = None;
        let valid = request.magic == REQUEST_MAGIC && request.membership == self.membership;
        if valid && request.from < recording.start() {
            // Behind the recording: the newest snapshot first, then the log after it.
            if let Ok(send) = self.snapshots.open_for_send() {
                snapshot = send.snapshot.filter(|s| {
                    let at = s.info().position;
                    at >= recording.start() && at <= recording.end() && at > request.from
                });
            }
            if let Some(s) = &snapshot {
                response.from = s.info().position;
                response.snapshot = 1;
            }
        }
        let servable = valid && response.from >= recording.start() && response.from <= recording.end();
        let session = &mut self.sessions[i];
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
            session.out.extend_from_slice(bytemuck::bytes_of(&response));
            session.out.extend_from_slice(bytemuck::cast_slice(&terms));
            session.snapshot = snapshot;
            session.reader = Some(recording.reader(response.from));
            session.end = response.end;
        } else {
            log::warn!(
                "refused a catch-up from member {} for the log from {} (this recording holds {}..{})",
                request.member_id,
                request.from,
                recording.start(),
                recording.end()
            );
            session.out.extend_from_slice(bytemuck::bytes_of(&response));
            session.end = i64::MIN;
        }
        servable
    }
}

/// Refills a session's output: the snapshot's next bytes, else the log's next block; false when all is sent.
fn refill(session: &mut Session) -> bool {
    session.out.clear();
    session.sent = 0;
    if let Some(snapshot) = session.snapshot.as_mut() {
        session.out.resize(64 << 10, 0);
        match snapshot.read(&mut session.out) {
            Ok(n) if n > 0 => {
                session.out.truncate(n);
                return true;
            }
            Ok(_) => session.snapshot = None,
            Err(_) => return false,
        }
        session.out.clear();
    }
    let Some(reader) = session.reader.as_mut() else {
        return false;
    };
    match reader.next_block(session.end) {
        Ok(Some((at, bytes, end))) => {
            let header = BlockHeader::new(at, bytes, (end - at) as usize);
            session.out.extend_from_slice(bytemuck::bytes_of(&header));
            session.out.extend_from_slice(bytes);
            true
        }
        _ => false,
    }
}
