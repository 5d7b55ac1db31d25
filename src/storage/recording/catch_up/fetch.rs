//! The follower's side of a catch-up: the fetch, as a state machine over a stream, and the blocking run of
//! it on a thread of its own.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytemuck::Zeroable;

use super::protocol::{
    frame_tag, CatchUpKey, CatchUpRequest, CatchUpResponse, Challenge, FrameHeader, Hello, Nonces, Request, TermRecord,
    CHALLENGE_MAGIC, HELLO_MAGIC, MAX_CONFIGURATION_LENGTH, MAX_FRAME, MAX_TERMS, NONCE_LENGTH, REQUEST_MAGIC,
    RESPONSE_MAGIC, SNAPSHOT_HEADER_LENGTH,
};
use crate::agent::clock::NanoClock;
use crate::cluster::configuration::configuration_of;
use crate::media::auth::{constant_time_eq, AuthKey, TAG_LENGTH};
use crate::media::transport::stream::{would_block, Stream, StreamOptions};
use crate::media::transport::{Network, SharedNetwork};
use crate::storage::recording::segment::BlockHeader;
use crate::storage::recording::Recording;
use crate::storage::snapshot::{SnapshotInfo, SnapshotInstall, SnapshotStore};

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
    /// The stream's bytes each way and its sealed frames.
    framing: Framing,
    /// What the leader's answer has brought so far.
    received: Received,
    timeout_ns: u64,
    progress_ns: u64,
    closed: bool,
}

/// The catch-up stream's bytes each way, and the sealed frames read from it.
#[derive(Debug)]
struct Framing {
    /// Bytes to send, from `sent` on.
    out: Vec<u8>,
    sent: usize,
    /// Bytes read and not yet made into frames.
    raw: Vec<u8>,
    /// Verified frame payloads, consumed from `taken` on.
    payload: Vec<u8>,
    taken: usize,
    /// The key the stream's frames are sealed with, once the handshake derived it.
    stream_key: Option<AuthKey>,
    frame_index: u64,
}

/// What the leader's answer has brought so far: its response, its terms, a snapshot being installed and the
/// configuration entries.
#[derive(Debug)]
struct Received {
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
            framing: Framing {
                out: bytemuck::bytes_of(&hello).to_vec(),
                sent: 0,
                raw: Vec::new(),
                payload: Vec::new(),
                taken: 0,
                stream_key: None,
                frame_index: 0,
            },
            received: Received {
                response: CatchUpResponse::zeroed(),
                terms: Vec::new(),
                history: Vec::new(),
                install: None,
                snapshot: None,
                configurations: Vec::new(),
                configuration_at_start: None,
            },
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
        let snapshot = self.received.snapshot.take()?;
        let end = recording.end();
        let from = self.received.response.from;
        let terms = std::mem::take(&mut self.received.terms)
            .into_iter()
            .filter(|&(base, _)| base == from || base < end)
            .collect();
        Some(Fetched {
            from: self.received.response.from,
            end,
            terms,
            history: std::mem::take(&mut self.received.history),
            snapshot: Some(snapshot),
            configurations: std::mem::take(&mut self.received.configurations)
                .into_iter()
                .filter(|c| c.1 <= end)
                .collect(),
            configuration_at_snapshot: Some(self.received.configuration_at_start.clone().unwrap_or_default()),
        })
    }

    /// Writes the pending bytes; the bytes written.
    fn flush(&mut self) -> Result<usize, String> {
        let mut moved = 0;
        while self.framing.sent < self.framing.out.len() {
            match self.stream.write(&self.framing.out[self.framing.sent..]) {
                Ok(0) => return Err(format!("{} closed the catch-up", self.leader)),
                Ok(n) => {
                    self.framing.sent += n;
                    moved += n;
                }
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(format!("send to {}: {e}", self.leader)),
            }
        }
        if self.framing.sent == self.framing.out.len() {
            self.framing.out.clear();
            self.framing.sent = 0;
        }
        Ok(moved)
    }

    /// Reads what came, up to [`RAW_LIMIT`] held; the bytes read.
    fn read(&mut self) -> Result<usize, String> {
        let held = self.framing.raw.len();
        if held >= RAW_LIMIT || self.closed {
            return Ok(0);
        }
        self.framing.raw.resize(RAW_LIMIT, 0);
        let result = self.stream.read(&mut self.framing.raw[held..]);
        let n = match result {
            Ok(0) => {
                self.closed = true;
                0
            }
            Ok(n) => n,
            Err(e) if would_block(&e) => 0,
            Err(e) => {
                self.framing.raw.truncate(held);
                return Err(format!("read from {}: {e}", self.leader));
            }
        };
        self.framing.raw.truncate(held + n);
        Ok(n)
    }

    /// The leader's challenge, once whole: checks its proof and sends the request with this member's.
    fn on_challenge(&mut self) -> Result<(), String> {
        let length = std::mem::size_of::<Challenge>();
        if self.framing.raw.len() < length {
            return Ok(());
        }
        let challenge: Challenge = bytemuck::pod_read_unaligned(&self.framing.raw[..length]);
        self.framing.raw.drain(..length);
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
        self.framing.out.extend_from_slice(bytemuck::bytes_of(&request));
        self.framing.stream_key = Some(self.key.stream_key(&self.hello, &challenge.nonce));
        self.step = Step::Response;
        self.flush()?;
        Ok(())
    }

    /// Verifies the whole frames read, while the payload not yet consumed is under a frame's length.
    fn unseal(&mut self) -> Result<(), String> {
        let Some(key) = self.framing.stream_key else {
            return Ok(());
        };
        let head = std::mem::size_of::<FrameHeader>();
        while self.framing.payload.len() - self.framing.taken < MAX_FRAME && self.framing.raw.len() >= head {
            let header: FrameHeader = bytemuck::pod_read_unaligned(&self.framing.raw[..head]);
            let length = header.length as usize;
            if length > MAX_FRAME || header.reserved != 0 {
                return Err(format!("{} sent a frame of {length} bytes", self.leader));
            }
            if self.framing.raw.len() < head + length + TAG_LENGTH {
                break;
            }
            let (body, tag) = self.framing.raw[head..head + length + TAG_LENGTH].split_at(length);
            if !constant_time_eq(&frame_tag(&key, self.framing.frame_index, &header, body), tag) {
                return Err(format!("{}: frame {} fails its tag", self.leader, self.framing.frame_index));
            }
            if self.framing.taken > 0 {
                self.framing.payload.drain(..self.framing.taken);
                self.framing.taken = 0;
            }
            self.framing.payload.extend_from_slice(body);
            self.framing.raw.drain(..head + length + TAG_LENGTH);
            self.framing.frame_index += 1;
        }
        Ok(())
    }

    /// The next `n` verified payload bytes, if they are there.
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let at = self.framing.taken;
        (self.framing.payload.len() - at >= n).then(|| {
            self.framing.taken += n;
            &self.framing.payload[at..at + n]
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
                self.received.response = response;
                self.received.terms = vec![(response.from, response.start_term)];
                self.received.history.clear();
                self.step = Step::Terms(response.term_count);
                Ok(Consumed::More)
            }
            Step::Terms(0) => {
                self.step = Step::Configuration;
                Ok(Consumed::More)
            }
            Step::Configuration => {
                let Some(bytes) = self.take(self.received.response.configuration_length as usize) else {
                    return Ok(Consumed::Wait);
                };
                self.received.configuration_at_start = Some(bytes.to_vec());
                if self.received.response.snapshot != 0 {
                    self.step = Step::SnapshotHeader;
                } else if self.received.response.from != recording.end() {
                    let (from, end) = (self.received.response.from, recording.end());
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
                let last = if self.received.terms.len() > 1 {
                    self.received.terms.last()
                } else {
                    self.received.history.last()
                };
                if last.is_some_and(|&(b, t)| b >= base || t >= id) {
                    return Err(format!("{leader} listed its terms out of order"));
                }
                if base > self.received.response.from {
                    self.received.terms.push((base, id));
                } else {
                    self.received.history.push((base, id));
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
                self.received.install = Some(install);
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
        let install = self.received.install.as_mut().expect("an install in this step");
        let available = self.framing.payload.len() - self.framing.taken;
        let n = usize::try_from(install.remaining()).map_or(available, |left| left.min(available));
        if n > 0 {
            let bytes = &self.framing.payload[self.framing.taken..self.framing.taken + n];
            install.write(bytes).map_err(|e| format!("the snapshot from {leader}: {e}"))?;
            self.framing.taken += n;
        }
        if install.remaining() > 0 {
            return Ok(Consumed::Wait);
        }
        let install = self.received.install.take().expect("an install in this step");
        let info = install.finish().map_err(|e| format!("the snapshot from {leader}: {e}"))?;
        if info.position != self.received.response.from {
            return Err(format!(
                "{leader} sent a snapshot at {} for a log from {}",
                info.position, self.received.response.from
            ));
        }
        let configuration = self.received.configuration_at_start.as_deref().filter(|c| !c.is_empty());
        recording
            .reset_at_snapshot(info.position, self.received.response.start_term, &self.received.history, configuration)
            .map_err(|e| e.to_string())?;
        self.received.snapshot = Some(info);
        self.step = Step::Blocks;
        Ok(Consumed::More)
    }

    /// The next block, once whole: verified and recorded; done at the answer's end.
    fn block(&mut self, recording: &mut Recording) -> Result<Consumed, String> {
        let leader = self.leader;
        if recording.end() >= self.received.response.end {
            let fetched = Fetched {
                from: self.received.response.from,
                end: recording.end(),
                terms: std::mem::take(&mut self.received.terms),
                history: std::mem::take(&mut self.received.history),
                configuration_at_snapshot: self
                    .received
                    .snapshot
                    .is_some()
                    .then(|| self.received.configuration_at_start.clone().unwrap_or_default()),
                snapshot: self.received.snapshot.take(),
                configurations: std::mem::take(&mut self.received.configurations),
            };
            return Ok(Consumed::Done(fetched));
        }
        let head = std::mem::size_of::<BlockHeader>();
        let available = &self.framing.payload[self.framing.taken..];
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
        if !header.check_payload(payload) || header.end() > self.received.response.end {
            return Err(format!("{leader} sent a block at {} that fails its checksum", header.position));
        }
        recording.append(header.position, payload, header.advance as usize).map_err(|e| e.to_string())?;
        crate::storage::recording::for_each_frame(payload, header.position, |at, frame| {
            if let crate::frame::Frame::Data { header, payload } = frame {
                if let Some(entry) = configuration_of(header.flags, payload) {
                    let end = at + crate::frame::align_frame(header.frame_length as usize) as i64;
                    self.received.configurations.push((at, end, entry.to_vec()));
                }
            }
        });
        self.framing.taken += head + length;
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
