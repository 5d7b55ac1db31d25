//! The leader's side of a catch-up: the server that takes the members' connections, proves them and
//! sends each the terms, the snapshot and the log, a little per duty cycle of the recorder.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::protocol::{
    seal_frame, CatchUpKey, CatchUpResponse, Challenge, Hello, Nonces, Request, TermRecord, CHALLENGE_MAGIC,
    HELLO_MAGIC, MAX_TERMS, NONCE_LENGTH, REQUEST_MAGIC, RESPONSE_MAGIC,
};
use super::{HANDSHAKE_TIMEOUT_NS, IDLE_TIMEOUT_NS, MAX_HANDSHAKES, SEND_PER_POLL};
use crate::agent::clock::NanoClock;
use crate::event_log::RateLimited;
use crate::media::auth::{constant_time_eq, AuthKey};
use crate::media::transport::stream::{would_block, Stream, StreamListener};
use crate::storage::recording::segment::BlockHeader;
use crate::storage::recording::{RecorderCounters, Recording, RecordingReader};
use crate::storage::snapshot::{SnapshotReader, SnapshotStore};

/// How often the listener is asked for new connections while no session runs: an `accept` on every duty
/// cycle would be a syscall per cycle on a recorder that shares its thread with the data path.
const ACCEPT_INTERVAL_NS: u64 = 1_000_000;
/// A frame of the snapshot carries this much of it.
const SNAPSHOT_CHUNK: usize = 64 << 10;
/// Peers whose last log line is remembered (to log each at most once a second); forgotten when full.
const LOGGED_PEERS: usize = 256;

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
