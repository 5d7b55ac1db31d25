//! A member's client endpoint, run by the consensus agent (Aeron Cluster's ingress and egress): remote
//! clients' datagrams in, session entries into the leader's log, and the answers the node's reader of
//! committed entries produced back out.
//!
//! On the leader, each record of a client datagram becomes a session entry ([`crate::session`]) appended
//! straight into the log: an open, a message, a keep-alive (at most one per quarter session timeout), a
//! close, or a reconnect (a keep-alive that asks for the session's state). Messages are taken in order:
//! the next one of a session is appended; one past a gap is answered with a NAK naming the one expected;
//! a resend of one in flight is dropped, and a resend of one the leader has acknowledged is appended
//! again so that the replicated table answers it as a duplicate. Whether anything is applied is decided
//! only by the table, as the node's reader applies the log; its answers come back through the egress
//! ring and go out here, batched per session, one datagram per session per duty cycle at most.
//!
//! A member that does not lead answers every client datagram with a redirect naming the leader it knows.
//!
//! # Invariants
//!
//! - Never more than `clients.max_sessions` connections, each of a fixed size (one egress datagram
//!   buffer): a client cannot make a member allocate beyond that, whatever it sends.
//! - A record from an address outside `clients.allow`, or for a session from an address other than the
//!   session's, is counted and dropped: never appended.
//! - A session's messages are appended in correlation order, from the one after the last the table
//!   applied, and never further than `clients.window` past the last acknowledged.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use socket2::SockAddr;

use crate::cluster_client::wire::{self, DatagramWriter, RecordHeader, Records, RefusalCode};
use crate::consensus::AppendStage;
use crate::counters::Counter;
use crate::log_buffer::AppendError;
use crate::ring_buffer::OneToOneRingBuffer;
use crate::session::SessionEntry;
use crate::stats::{kinds, CounterKind};
use crate::transport::{RecvBatch, UdpEndpoint};

use super::builder::ClientsConfig;

/// Egress ring message type (never on the wire): a keep-alive was applied; `value` is the session's last
/// applied correlation id. It completes a reconnect.
pub(super) const KEPT_ALIVE: u8 = 64;

/// Most client datagrams read per duty cycle: enough that a duty cycle takes what many clients sent
/// since the last one (a datagram holds up to a few hundred messages), bounded so that the rest of the
/// consensus agent's work still runs.
const MAX_DATAGRAMS_PER_CYCLE: usize = 1024;

/// How often the client endpoint is read while it is quiet.
const POLL_INTERVAL_NS: u64 = 5_000;

/// The counters of a member's client endpoint (see [`kinds::clients`]).
#[derive(Clone, Debug)]
pub(super) struct IngressCounters {
    datagrams_received: Counter,
    records_received: Counter,
    pub(super) malformed_dropped: Counter,
    address_refused: Counter,
    unknown_session: Counter,
    source_mismatch: Counter,
    sessions_opened: Counter,
    sessions_refused: Counter,
    messages_appended: Counter,
    window_exceeded: Counter,
    gaps: Counter,
    back_pressured: Counter,
    redirects: Counter,
    egress_datagrams: Counter,
    egress_records: Counter,
    pub(super) egress_dropped: Counter,
    connections: Counter,
}

impl IngressCounters {
    pub(super) fn new(mut allocate: impl FnMut(&CounterKind) -> Counter) -> Self {
        use kinds::clients as k;
        Self {
            datagrams_received: allocate(&k::datagrams_received),
            records_received: allocate(&k::records_received),
            malformed_dropped: allocate(&k::malformed_dropped),
            address_refused: allocate(&k::address_refused),
            unknown_session: allocate(&k::unknown_session),
            source_mismatch: allocate(&k::source_mismatch),
            sessions_opened: allocate(&k::sessions_opened),
            sessions_refused: allocate(&k::sessions_refused),
            messages_appended: allocate(&k::messages_appended),
            window_exceeded: allocate(&k::window_exceeded),
            gaps: allocate(&k::gaps),
            back_pressured: allocate(&k::back_pressured),
            redirects: allocate(&k::redirects),
            egress_datagrams: allocate(&k::egress_datagrams),
            egress_records: allocate(&k::egress_records),
            egress_dropped: allocate(&k::egress_dropped),
            connections: allocate(&k::connections),
        }
    }
}

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Its open is in the log, not yet applied.
    Opening,
    /// Its reconnect (a keep-alive) is in the log, not yet applied.
    Reconnecting,
    /// Messages are taken.
    Open,
}

/// One session as the leader's client endpoint knows it: where its client is, and what was appended.
#[derive(Debug)]
struct Connection {
    addr: SocketAddr,
    sockaddr: SockAddr,
    state: State,
    /// The client's nonce of its open.
    nonce: u64,
    /// The correlation id appended next.
    next_expected: u64,
    /// The highest correlation id the table acknowledged (as committed or duplicate).
    acked: u64,
    /// When an entry of this session was last appended (the leader's clock, epoch ns).
    last_logged_ns: i64,
    /// Egress records waiting to go out.
    writer: DatagramWriter,
    dirty: bool,
}

/// A member's client endpoint.
pub(super) struct ClientIngress {
    socket: UdpEndpoint,
    batch: RecvBatch,
    config: ClientsConfig,
    datagram_capacity: usize,
    connections: HashMap<u64, Connection>,
    /// Sessions with egress records waiting.
    dirty: Vec<u64>,
    /// Answers to a datagram's source that belong to no connection (redirects, refusals).
    reply: DatagramWriter,
    egress: Arc<OneToOneRingBuffer>,
    /// Session ids this leader gives are its term in the high 32 bits and this counter in the low.
    next_session: u32,
    term: i64,
    next_receive_ns: u64,
    counters: IngressCounters,
}

/// What the leader appends with: its append stage and term, and what a duty cycle appended (counted
/// once per cycle, not per entry).
pub(super) struct Appending<'a> {
    pub(super) stage: &'a mut AppendStage,
    pub(super) term: i64,
    /// Session entries appended.
    pub(super) entries: usize,
    /// Of those, client messages.
    pub(super) messages: usize,
}

impl<'a> Appending<'a> {
    /// Appending through `stage` for `term`.
    pub(super) fn new(stage: &'a mut AppendStage, term: i64) -> Self {
        Self { stage, term, entries: 0, messages: 0 }
    }
}

impl ClientIngress {
    /// A client endpoint on `socket`, answering through datagrams of at most `datagram_capacity` bytes,
    /// sending what the node's reader puts in `egress`.
    pub(super) fn new(
        socket: UdpEndpoint,
        config: ClientsConfig,
        datagram_capacity: usize,
        egress: Arc<OneToOneRingBuffer>,
        counters: IngressCounters,
    ) -> Self {
        Self {
            socket,
            // Room for the largest UDP datagram: a client's MTU may be larger than the cluster's.
            batch: RecvBatch::new(16, crate::frame::MAX_UDP_PAYLOAD_LENGTH),
            config,
            datagram_capacity,
            connections: HashMap::new(),
            dirty: Vec::new(),
            reply: DatagramWriter::new(datagram_capacity),
            egress,
            next_session: 0,
            term: -1,
            next_receive_ns: 0,
            counters,
        }
    }

    /// Forgets every connection (this member's role changed): their clients reconnect to the leader.
    pub(super) fn on_role_change(&mut self) {
        self.connections.clear();
        self.dirty.clear();
        self.counters.connections.set(0);
        let dropped = self.egress.read(|_, _| {}, usize::MAX);
        self.counters.egress_dropped.add(dropped as i64);
    }

    /// One duty cycle: reads client datagrams (appending through `appending` on the leader, redirecting
    /// to `leader` elsewhere) and sends what the egress ring holds; returns the work done.
    pub(super) fn poll(&mut self, now_ns: u64, mut appending: Option<Appending<'_>>, leader: Option<i32>) -> usize {
        if let Some(appending) = &appending {
            if appending.term != self.term {
                self.term = appending.term;
                self.next_session = 0;
            }
        }
        let mut work = self.send_egress(appending.is_some());
        if now_ns < self.next_receive_ns {
            return work;
        }
        let epoch_ns = epoch_ns();
        let mut datagrams = 0;
        while datagrams < MAX_DATAGRAMS_PER_CYCLE {
            let received = self.socket.recv_batch(&mut self.batch).unwrap_or(0);
            for i in 0..received {
                let datagram = self.batch.datagram(i);
                let Some(source) = datagram.source else {
                    continue;
                };
                self.counters.datagrams_received.increment();
                if !self.config.allows(source.ip()) {
                    self.counters.address_refused.increment();
                    continue;
                }
                let records = match Records::parse(datagram.bytes) {
                    Ok(records) => records,
                    Err(_) => {
                        self.counters.malformed_dropped.increment();
                        continue;
                    }
                };
                match appending.as_mut() {
                    Some(appending) => {
                        let mut state = IngressState {
                            socket: &self.socket,
                            config: &self.config,
                            connections: &mut self.connections,
                            dirty: &mut self.dirty,
                            reply: &mut self.reply,
                            counters: &self.counters,
                            next_session: &mut self.next_session,
                            term: self.term,
                            datagram_capacity: self.datagram_capacity,
                        };
                        on_datagram(&mut state, records, source, appending, epoch_ns);
                    }
                    None => {
                        self.counters.records_received.add(records.count() as i64);
                        self.counters.redirects.increment();
                        let leader = leader.map_or(-1, i64::from);
                        self.reply.push(RecordHeader::new(wire::REDIRECT, 0).value(leader), &[]);
                    }
                }
                self.send_reply(source);
            }
            datagrams += received;
            if received < self.batch.capacity() {
                break;
            }
        }
        if let Some(appending) = appending.as_mut() {
            appending.stage.count_session_appends(std::mem::take(&mut appending.entries));
            self.counters.messages_appended.add(std::mem::take(&mut appending.messages) as i64);
        }
        self.next_receive_ns = if datagrams > 0 { now_ns } else { now_ns + POLL_INTERVAL_NS };
        work += datagrams;
        work + self.flush()
    }

    /// Sends the answers to a datagram that belong to no connection.
    fn send_reply(&mut self, source: SocketAddr) {
        if self.reply.is_empty() {
            return;
        }
        let _ = self.socket.send(self.reply.finish(), Some(&SockAddr::from(source)));
        self.counters.egress_datagrams.increment();
        self.reply.clear();
    }

    /// Moves the egress ring's records into their sessions' datagrams (dropping them when this member
    /// does not lead); returns the records taken.
    fn send_egress(&mut self, leading: bool) -> usize {
        let egress = Arc::clone(&self.egress);
        egress.read(
            |kind, bytes| {
                if !leading {
                    self.counters.egress_dropped.increment();
                    return;
                }
                self.on_egress(kind as u8, bytes);
            },
            usize::MAX,
        )
    }

    /// One answer from the table: updates the connection it is for, and queues it for its client.
    fn on_egress(&mut self, kind: u8, bytes: &[u8]) {
        let Some(header) = bytes.get(..wire::RECORD_HEADER_LENGTH).map(bytemuck::pod_read_unaligned::<RecordHeader>)
        else {
            return;
        };
        let payload = &bytes[wire::RECORD_HEADER_LENGTH..];
        let Some(connection) = self.connections.get_mut(&header.session_id) else {
            self.counters.egress_dropped.increment();
            return;
        };
        let mut record = header;
        let mut remove = false;
        match kind {
            wire::OPENED => {
                connection.state = State::Open;
                connection.next_expected = 1;
                connection.acked = 0;
                record.correlation_id = connection.nonce;
            }
            KEPT_ALIVE => {
                if connection.state != State::Reconnecting {
                    return;
                }
                let applied = header.value as u64;
                connection.state = State::Open;
                connection.next_expected = applied + 1;
                connection.acked = applied;
                record.kind = wire::RECONNECTED;
            }
            wire::COMMITTED => connection.acked = connection.acked.max(header.correlation_id),
            wire::COMMITTED_RUN => {
                let last = header.correlation_id + (header.value as u64).saturating_sub(1);
                connection.acked = connection.acked.max(last);
            }
            wire::REFUSED => match RefusalCode::from_u8(header.code) {
                Some(RefusalCode::Gap) => connection.next_expected = header.value as u64,
                Some(RefusalCode::UnknownSession | RefusalCode::TooManySessions) => {
                    if connection.state == State::Opening {
                        record.correlation_id = connection.nonce;
                    }
                    remove = true;
                }
                _ => {}
            },
            wire::CLOSED => remove = true,
            _ => {}
        }
        queue(connection, &self.socket, &self.counters, &mut self.dirty, header.session_id, record, payload);
        if remove {
            if let Some(mut connection) = self.connections.remove(&header.session_id) {
                flush_connection(&mut connection, &self.socket, &self.counters);
            }
            self.counters.connections.set(self.connections.len() as i64);
        }
    }

    /// Sends every connection's waiting datagram; returns the datagrams sent.
    fn flush(&mut self) -> usize {
        let mut sent = 0;
        for session in self.dirty.drain(..) {
            if let Some(connection) = self.connections.get_mut(&session) {
                sent += flush_connection(connection, &self.socket, &self.counters);
            }
        }
        sent
    }
}

/// Adds `record` to `connection`'s datagram, sending it first when full.
fn queue(
    connection: &mut Connection,
    socket: &UdpEndpoint,
    counters: &IngressCounters,
    dirty: &mut Vec<u64>,
    session: u64,
    record: RecordHeader,
    payload: &[u8],
) {
    if !connection.writer.fits(payload.len()) {
        flush_connection(connection, socket, counters);
    }
    if !connection.writer.push(record, payload) {
        counters.egress_dropped.increment();
        return;
    }
    counters.egress_records.increment();
    if !connection.dirty {
        connection.dirty = true;
        dirty.push(session);
    }
}

/// Sends `connection`'s datagram if it holds records; returns the datagrams sent.
fn flush_connection(connection: &mut Connection, socket: &UdpEndpoint, counters: &IngressCounters) -> usize {
    connection.dirty = false;
    if connection.writer.is_empty() {
        return 0;
    }
    let _ = socket.send(connection.writer.finish(), Some(&connection.sockaddr));
    connection.writer.clear();
    counters.egress_datagrams.increment();
    1
}

/// What the handling of one datagram's records works on.
struct IngressState<'a> {
    socket: &'a UdpEndpoint,
    config: &'a ClientsConfig,
    connections: &'a mut HashMap<u64, Connection>,
    dirty: &'a mut Vec<u64>,
    reply: &'a mut DatagramWriter,
    counters: &'a IngressCounters,
    next_session: &'a mut u32,
    term: i64,
    datagram_capacity: usize,
}

/// The leader takes the records of one datagram from `source`.
fn on_datagram(
    state: &mut IngressState<'_>,
    records: Records<'_>,
    source: SocketAddr,
    append: &mut Appending<'_>,
    now: i64,
) {
    // One NAK per session per datagram is enough: the client resends from it.
    let mut nacked = None;
    let mut records = records.peekable();
    let mut received = 0i64;
    while let Some((record, payload)) = records.next() {
        received += 1;
        if record.kind == wire::MESSAGE {
            // The fast path: a run of one session's messages, its connection looked up once.
            let session = record.session_id;
            if let Some(connection) = state.connections.get_mut(&session).filter(|c| c.addr == source) {
                let mut nak = None;
                let mut next = Some((record, payload));
                while let Some((record, payload)) = next {
                    let expected = on_message(state.config, state.counters, connection, record, payload, append, now);
                    nak = nak.or(expected);
                    next = records.next_if(|(r, _)| r.kind == wire::MESSAGE && r.session_id == session);
                    received += i64::from(next.is_some());
                }
                if let (Some(expected), false) = (nak, nacked == Some(session)) {
                    nacked = Some(session);
                    queue_on(state, session, RecordHeader::new(wire::NAK, session).value(expected as i64));
                }
                continue;
            }
        }
        match record.kind {
            wire::OPEN => on_open(state, record.correlation_id, source, append, now),
            wire::RECONNECT => on_reconnect(state, record.session_id, source, append, now),
            wire::MESSAGE | wire::KEEP_ALIVE | wire::CLOSE => {
                let Some(connection) = state.connections.get_mut(&record.session_id) else {
                    state.counters.unknown_session.increment();
                    let refusal = RecordHeader::new(wire::REFUSED, record.session_id)
                        .correlation(record.correlation_id)
                        .code(RefusalCode::NotConnected as u8);
                    if state.reply.is_empty() {
                        state.reply.push(refusal, &[]);
                    }
                    continue;
                };
                if connection.addr != source {
                    state.counters.source_mismatch.increment();
                    continue;
                }
                match record.kind {
                    wire::MESSAGE => {
                        if let Some(expected) =
                            on_message(state.config, state.counters, connection, record, payload, append, now)
                        {
                            if nacked != Some(record.session_id) {
                                nacked = Some(record.session_id);
                                let nak = RecordHeader::new(wire::NAK, record.session_id).value(expected as i64);
                                queue_on(state, record.session_id, nak);
                            }
                        }
                    }
                    wire::KEEP_ALIVE => {
                        let quarter = state.config.session_timeout.as_nanos() as i64 / 4;
                        if now.saturating_sub(connection.last_logged_ns) >= quarter
                            && append_entry(
                                append,
                                state.counters,
                                &SessionEntry::KeepAlive { session_id: record.session_id, timestamp_ns: now },
                                &[],
                            )
                            .is_ok()
                        {
                            connection.last_logged_ns = now;
                        }
                        queue_on(state, record.session_id, RecordHeader::new(wire::HEARTBEAT, record.session_id));
                    }
                    _ => {
                        let _ = append_entry(
                            append,
                            state.counters,
                            &SessionEntry::Close { session_id: record.session_id, timestamp_ns: now },
                            &[],
                        );
                    }
                }
            }
            _ => state.counters.malformed_dropped.increment(),
        }
    }
    state.counters.records_received.add(received);
}

/// Queues `record` on session `session`'s connection, if it has one (as the egress answers are).
fn queue_on(state: &mut IngressState<'_>, session: u64, record: RecordHeader) {
    if let Some(connection) = state.connections.get_mut(&session) {
        queue(connection, state.socket, state.counters, state.dirty, session, record, &[]);
    }
}

/// A message of an open session; returns the correlation id to NAK for when it is past a gap.
fn on_message(
    config: &ClientsConfig,
    counters: &IngressCounters,
    connection: &mut Connection,
    record: RecordHeader,
    payload: &[u8],
    append: &mut Appending<'_>,
    now: i64,
) -> Option<u64> {
    if connection.state != State::Open {
        return None;
    }
    let id = record.correlation_id;
    if id > connection.acked.saturating_add(config.window) {
        counters.window_exceeded.increment();
        return Some(connection.next_expected);
    }
    if id > connection.next_expected {
        counters.gaps.increment();
        return Some(connection.next_expected);
    }
    if id < connection.next_expected && id > connection.acked {
        // In the log already, not yet answered: its answer is on the way.
        return None;
    }
    let entry = SessionEntry::Message { session_id: record.session_id, timestamp_ns: now, correlation_id: id, payload };
    match append_entry(append, counters, &entry, payload) {
        Ok(()) => {
            append.messages += 1;
            connection.last_logged_ns = now;
            if id == connection.next_expected {
                connection.next_expected += 1;
            }
            None
        }
        // The client resends from it after a NAK.
        Err(AppendError::BackPressured) => Some(connection.next_expected),
        Err(_) => None,
    }
}

/// A client asks to open a session (`nonce` tells its repeats apart from a second open).
fn on_open(state: &mut IngressState<'_>, nonce: u64, source: SocketAddr, append: &mut Appending<'_>, now: i64) {
    let repeat = state
        .connections
        .iter_mut()
        .find(|(_, c)| c.addr == source && c.nonce == nonce && c.state != State::Reconnecting);
    if let Some((&session, connection)) = repeat {
        if connection.state == State::Open {
            // The answer was lost: say it again.
            let opened = RecordHeader::new(wire::OPENED, session).correlation(nonce);
            queue_on(state, session, opened);
        }
        return;
    }
    if state.connections.len() >= state.config.max_sessions {
        state.counters.sessions_refused.increment();
        state
            .reply
            .push(RecordHeader::new(wire::REFUSED, 0).correlation(nonce).code(RefusalCode::TooManySessions as u8), &[]);
        return;
    }
    *state.next_session = state.next_session.wrapping_add(1).max(1);
    let session_id = ((state.term as u64) << 32) | u64::from(*state.next_session);
    let entry = SessionEntry::Open { session_id, timestamp_ns: now };
    match append_entry(append, state.counters, &entry, &[]) {
        Ok(()) => {
            state.counters.sessions_opened.increment();
            state
                .connections
                .insert(session_id, connection(source, State::Opening, nonce, now, state.datagram_capacity));
            state.counters.connections.set(state.connections.len() as i64);
        }
        Err(_) => {
            state.reply.push(
                RecordHeader::new(wire::REFUSED, 0).correlation(nonce).code(RefusalCode::BackPressured as u8),
                &[],
            );
        }
    }
}

/// A client goes on with `session` here: a keep-alive goes into the log, and its application answers
/// with the session's last applied message (or that the session is gone).
fn on_reconnect(state: &mut IngressState<'_>, session: u64, source: SocketAddr, append: &mut Appending<'_>, now: i64) {
    let known = state.connections.contains_key(&session);
    if !known && state.connections.len() >= state.config.max_sessions {
        state.counters.sessions_refused.increment();
        state.reply.push(RecordHeader::new(wire::REFUSED, session).code(RefusalCode::TooManySessions as u8), &[]);
        return;
    }
    if let Some(connection) = state.connections.get(&session) {
        if connection.state == State::Reconnecting && connection.addr == source {
            return;
        }
    }
    let entry = SessionEntry::KeepAlive { session_id: session, timestamp_ns: now };
    if append_entry(append, state.counters, &entry, &[]).is_err() {
        state.reply.push(RecordHeader::new(wire::REFUSED, session).code(RefusalCode::BackPressured as u8), &[]);
        return;
    }
    let nonce = state.connections.get(&session).map_or(0, |c| c.nonce);
    state.connections.insert(session, connection(source, State::Reconnecting, nonce, now, state.datagram_capacity));
    state.counters.connections.set(state.connections.len() as i64);
}

fn connection(addr: SocketAddr, state: State, nonce: u64, now: i64, datagram_capacity: usize) -> Connection {
    Connection {
        addr,
        sockaddr: SockAddr::from(addr),
        state,
        nonce,
        next_expected: 1,
        acked: 0,
        last_logged_ns: now,
        writer: DatagramWriter::new(datagram_capacity),
        dirty: false,
    }
}

/// Appends a session entry, its payload as a second part (no copy).
fn append_entry(
    append: &mut Appending<'_>,
    counters: &IngressCounters,
    entry: &SessionEntry<'_>,
    payload: &[u8],
) -> Result<(), AppendError> {
    let (header, length) = entry.header();
    append.stage.append_session(&[&header[..length], payload]).map(|_| append.entries += 1).inspect_err(|e| {
        if matches!(e, AppendError::BackPressured) {
            counters.back_pressured.increment();
        }
    })
}

/// The leader's clock for session entries: the wall clock, so that entries of successive leaders (other
/// processes, other hosts) are on one time line.
fn epoch_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}
