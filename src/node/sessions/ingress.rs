//! A member's client endpoint, run by the consensus agent (Aeron Cluster's ingress and egress): remote
//! clients' datagrams in, session entries into the leader's log, and the answers the node's reader of
//! committed entries produced back out.
//!
//! On the leader, each record of a client datagram becomes a session entry ([`crate::client::session`]) appended
//! straight into the log: an open, a message, a keep-alive (at most one per quarter session timeout), a
//! close, or a reconnect (a keep-alive that asks for the session's state). Messages are taken in order:
//! the next one of a session is appended; one past a gap is answered with a NAK naming the one expected;
//! a resend of one in flight is dropped, and a resend of one the leader has acknowledged is appended
//! again so that the replicated table answers it as a duplicate. Whether anything is applied is decided
//! only by the table, as the node's reader applies the log; its answers come back through the egress
//! ring and go out here, batched per session, one datagram per session per duty cycle at most.
//!
//! A member that does not lead answers every client datagram it can authenticate with a redirect naming
//! the leader it knows.
//!
//! # Who may speak for a session
//!
//! Every datagram of a session is tagged with the session's token ([`crate::client::credentials`]),
//! which only the client that opened it was given, and carries a sequence number: a datagram whose tag
//! is wrong is counted (`client datagrams forged`) and dropped before its records are read; one whose
//! sequence was seen is counted (`client datagrams replayed`) and dropped. A session moves to a new
//! address only when its client proves, from there, that it holds the token *now*: the leader answers a
//! datagram from an address that is not the session's with a challenge (a value only the members can
//! make, for that session, that address and this second), and the session moves once a `RECONNECT`
//! carrying it arrives from that address. The address it left is told it was displaced. A replayed
//! datagram, wherever it comes from, cannot answer a challenge.
//!
//! # Invariants
//!
//! - Never more than `clients.max_sessions` connections, each of a fixed size (one egress datagram
//!   buffer), and at most `clients.max_sessions_per_address` from one address: a client cannot make a
//!   member allocate beyond that, whatever it sends.
//! - A record is appended only from a datagram whose tag is right (and, with client keys, under a key the
//!   cluster has), from the session's own address; an open or a reconnect only within the address's
//!   `clients.opens_per_second`. Nothing else is appended.
//! - A session's messages are appended in correlation order, from the one after the last the table
//!   applied, and never further than `clients.window` past the last acknowledged.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use socket2::SockAddr;

use crate::agent::clock::NanoClock;
use crate::client::credentials::{
    seal_token, ClientKey, Ephemeral, ReplayWindow, SessionSecret, CHALLENGE_PERIOD_NS, COOKIE_LENGTH, OPENED_LENGTH,
    PUBLIC_KEY_LENGTH,
};
use crate::client::session::SessionEntry;
use crate::client::wire::{self, Datagram, DatagramWriter, RecordHeader, Records, RefusalCode, Seal};
use crate::cluster::append::AppendStage;
use crate::cluster::configuration::encode_addr;
use crate::media::auth::AuthKey;
use crate::media::transport::{RecvBatch, Transport};
use crate::shm::log_buffer::AppendError;
use crate::shm::ring_buffer::OneToOneRingBuffer;

use super::clock::TermClock;
use super::limits::{AddressKey, OpenRate, SessionsPerAddress, UsedOpens};
use crate::node::builder::ClientEndpointConfig;

mod admission;
mod counters;

pub(crate) use self::counters::IngressCounters;
use crate::storage::recording::catch_up::Nonces;

/// Egress ring message type (never on the wire): a keep-alive was applied; `value` is the session's last
/// applied correlation id. It completes a reconnect.
pub(crate) const KEPT_ALIVE: u8 = 64;

/// Most client datagrams read per duty cycle: enough that a duty cycle takes what many clients sent
/// since the last one (a datagram holds up to a few hundred messages), bounded so that the rest of the
/// consensus agent's work still runs.
const MAX_DATAGRAMS_PER_CYCLE: usize = 1024;

/// Least time between two requests of one session to resend its pushes that the leader appends: a resend
/// comes back within about this long, and the client asks again if it did not.
const RESEND_INTERVAL_NS: i64 = 10_000_000;

/// How often the client endpoint is read while it is quiet.
const POLL_INTERVAL_NS: u64 = 5_000;

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
    /// The `OPENED` payload of its open (the token sealed for the client), until it is sent.
    opened: Option<Box<[u8; OPENED_LENGTH]>>,
    /// The client key the session is under (0: none).
    key_id: u32,
    /// What the session's datagrams are tagged with.
    token: AuthKey,
    /// The client's datagrams seen.
    window: ReplayWindow,
    /// The correlation id appended next.
    next_expected: u64,
    /// The highest correlation id the table acknowledged (as committed or duplicate).
    acked: u64,
    /// When an entry of this session was last appended (the leader's clock, epoch ns).
    last_logged_ns: i64,
    /// The highest push number the client acknowledged in an entry this leader appended.
    push_acked: u64,
    /// When this leader last appended the client's request to resend pushes (at most one per
    /// `RESEND_INTERVAL_NS`: the resend takes that long to come back).
    last_resend_ns: i64,
    /// Egress records waiting to go out.
    writer: DatagramWriter,
    dirty: bool,
}

/// The endpoint's sessions, and how many each address holds.
#[derive(Debug, Default)]
struct Connections {
    by_session: HashMap<u64, Connection>,
    per_address: SessionsPerAddress,
    /// The same, by network ([`AddressKey::prefix_of`]).
    per_prefix: SessionsPerAddress,
}

impl Connections {
    fn len(&self) -> usize {
        self.by_session.len()
    }

    fn get_mut(&mut self, session: &u64) -> Option<&mut Connection> {
        self.by_session.get_mut(session)
    }

    fn insert(&mut self, session: u64, connection: Connection) {
        self.per_address.add(AddressKey::of(connection.addr.ip()));
        self.per_prefix.add(AddressKey::prefix_of(connection.addr.ip()));
        if let Some(old) = self.by_session.insert(session, connection) {
            self.per_address.remove(AddressKey::of(old.addr.ip()));
            self.per_prefix.remove(AddressKey::prefix_of(old.addr.ip()));
        }
    }

    fn remove(&mut self, session: &u64) -> Option<Connection> {
        let connection = self.by_session.remove(session)?;
        self.per_address.remove(AddressKey::of(connection.addr.ip()));
        self.per_prefix.remove(AddressKey::prefix_of(connection.addr.ip()));
        Some(connection)
    }

    fn clear(&mut self) {
        self.by_session.clear();
        self.per_address.clear();
        self.per_prefix.clear();
    }
}

/// Where the endpoint's sequence numbers of one kind of datagram are.
#[derive(Debug)]
struct Sequence(u64);

impl Sequence {
    fn next(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

/// A member's client endpoint.
pub(crate) struct ClientIngress {
    socket: Box<dyn Transport>,
    /// The clock of session entries' times (the wall clock, or the simulated one).
    clock: NanoClock,
    /// Taken while a poll reads from it.
    batch: Option<RecvBatch>,
    config: ClientEndpointConfig,
    datagram_capacity: usize,
    connections: Connections,
    /// Sessions with egress records waiting.
    dirty: Vec<u64>,
    /// Answers to a datagram's source that belong to no connection (redirects, refusals, challenges).
    reply: Reply,
    egress: Arc<OneToOneRingBuffer>,
    /// This leader's term as the endpoint knows it.
    term: TermSessions,
    next_receive_ns: u64,
    /// Of every datagram the endpoint sends: it starts at the wall clock, so that it grows across
    /// restarts of the member too.
    sequence: Sequence,
    /// What an open or a reconnect must pass.
    admission: Admission,
    counters: IngressCounters,
    /// The members clients are told of.
    members: MemberTable,
}

/// The answer to a datagram's source that belongs to no connection, and how it is sealed.
struct Reply {
    writer: DatagramWriter,
    seal: ReplySeal,
}

/// The leader's term as its client endpoint knows it: the sessions it opened, and whether its entry is in
/// the log.
struct TermSessions {
    /// The term (-1: none yet).
    id: i64,
    /// Sessions this leader has opened in its term (the session ids come from it).
    sessions_opened: u64,
    /// Where the leader's secrets come from.
    entropy: Nonces,
}

/// What binds sessions and limits the opens: the secret, the rate of opens per address, and the opens
/// admitted in this cookie period and the last (each is good once).
struct Admission {
    secret: SessionSecret,
    open_rate: OpenRate,
    used_opens: UsedOpens,
}

/// The members clients are told of.
struct MemberTable {
    /// Every member's id and client endpoint, as the configuration in effect names them: a redirect
    /// carries the leader's, so a client finds a leader its own list does not name.
    known: Vec<(i32, SocketAddr)>,
    /// The configuration in effect: its id and a `MEMBERS` payload of its members (sent after `OPENED`
    /// and with `RECONNECTED` and `HEARTBEAT`).
    set: (i64, Vec<u8>),
}

/// How the reply to the datagram being read is sealed: like the datagram (its session's token, or its
/// client key, or untagged).
#[derive(Clone, Copy, Debug, Default)]
struct ReplySeal {
    session_id: u64,
    key_id: u32,
    token: Option<AuthKey>,
}

/// What the leader appends with: its append stage and term, and what a duty cycle appended (counted
/// once per cycle, not per entry).
pub(crate) struct Appending<'a> {
    pub(crate) stage: &'a mut AppendStage,
    pub(crate) term: i64,
    /// The term's entry and nonce, as the leader's clock keeper appended them.
    pub(crate) clock: TermClock,
    /// An operator suspended the cluster: opens and messages are refused (`RefusalCode::Suspended`); keep
    /// -alives, reconnects and closes still go into the log, so that sessions outlive a suspension.
    pub(crate) suspended: bool,
    /// Session entries appended.
    pub(crate) entries: usize,
    /// Of those, client messages.
    pub(crate) messages: usize,
}

impl<'a> Appending<'a> {
    /// Appending through `stage` for `term`, whose entry and nonce `clock` says.
    pub(crate) fn new(stage: &'a mut AppendStage, term: i64, clock: TermClock) -> Self {
        Self { stage, term, clock, suspended: false, entries: 0, messages: 0 }
    }
}

/// What the client endpoint shares with the node's reader of committed entries: the answers it makes.
pub(crate) struct ReaderLink {
    pub(crate) egress: Arc<OneToOneRingBuffer>,
}

/// Why a datagram was dropped before its records were read.
enum Dropped {
    Malformed,
    Forged,
}

impl ClientIngress {
    /// A client endpoint on `socket`, binding sessions with `secret` (and keys and term values drawn from
    /// `entropy`), answering through datagrams of at most `datagram_capacity` bytes, sending what the
    /// node's reader puts in `reader`'s egress.
    pub(crate) fn new(
        socket: Box<dyn Transport>,
        clock: NanoClock,
        config: ClientEndpointConfig,
        (secret, entropy): (SessionSecret, Nonces),
        datagram_capacity: usize,
        reader: ReaderLink,
        counters: IngressCounters,
    ) -> Self {
        let ReaderLink { egress } = reader;
        let open_rate = OpenRate::new(config.opens_per_second);
        let sequence = Sequence(clock.epoch_ns().max(0) as u64);
        Self {
            socket,
            clock,
            // Room for the largest UDP datagram: a client's MTU may be larger than the cluster's.
            batch: Some(RecvBatch::new(16, crate::frame::MAX_UDP_PAYLOAD_LENGTH)),
            config,
            datagram_capacity,
            connections: Connections::default(),
            dirty: Vec::new(),
            reply: Reply { writer: DatagramWriter::new(datagram_capacity), seal: ReplySeal::default() },
            egress,
            term: TermSessions { id: -1, sessions_opened: 0, entropy },
            next_receive_ns: 0,
            sequence,
            admission: Admission { secret, open_rate, used_opens: UsedOpens::default() },
            counters,
            members: MemberTable { known: Vec::new(), set: (0, Vec::new()) },
        }
    }

    /// The members' client endpoints from now on (the configuration in effect changed): `known`, every
    /// member whose endpoints this member knows (a redirect may name any), and the configuration in effect,
    /// its id and members, which clients are told.
    pub(crate) fn set_members(&mut self, known: Vec<(i32, SocketAddr)>, configuration: i64, members: &[i32]) {
        let listed: Vec<(i32, SocketAddr)> = known.iter().copied().filter(|(id, _)| members.contains(id)).collect();
        let mut payload = Vec::new();
        wire::encode_members(&listed, &mut payload);
        self.members.set = (configuration, payload);
        self.members.known = known;
    }

    /// Forgets every connection (this member's role changed): their clients reconnect to the leader.
    pub(crate) fn on_role_change(&mut self) {
        self.connections.clear();
        self.dirty.clear();
        self.counters.connections.set(0);
        let dropped = self.egress.read(|_, _| {}, usize::MAX);
        self.counters.egress_dropped.add(dropped as i64);
    }

    /// One duty cycle: reads client datagrams (appending through `appending` on the leader, redirecting
    /// to `leader` elsewhere) and sends what the egress ring holds; returns the work done.
    pub(crate) fn poll(&mut self, now_ns: u64, mut appending: Option<Appending<'_>>, leader: Option<i32>) -> usize {
        if let Some(appending) = &appending {
            if appending.term != self.term.id {
                self.term.id = appending.term;
                self.term.sessions_opened = 0;
            }
        }
        let mut work = self.send_egress(appending.is_some());
        if let Some(appending) = appending.as_mut() {
            if !appending.clock.announced {
                // Nothing of a client goes into the log before the term's entry (the log has room for it
                // at a term's start; until then the clients' datagrams wait in the socket).
                return work + self.flush();
            }
        }
        if now_ns < self.next_receive_ns {
            // What this cycle took from the egress ring leaves in this cycle, not with the next receive.
            return work + self.flush();
        }
        let epoch_ns = self.clock.epoch_ns();
        let mut datagrams = 0;
        let mut batch = self.batch.take().expect("put back after every poll");
        while datagrams < MAX_DATAGRAMS_PER_CYCLE {
            let received = self.socket.recv_batch(&mut batch).unwrap_or(0);
            if received > 0 {
                self.counters.receive_calls.increment();
            }
            for i in 0..received {
                let datagram = batch.datagram(i);
                let Some(source) = datagram.source else {
                    continue;
                };
                self.counters.datagrams_received.increment();
                if !self.config.allows(source.ip()) {
                    self.counters.address_refused.increment();
                    continue;
                }
                match self.authenticate(datagram.bytes) {
                    Ok((header, records, token)) => {
                        self.reply.seal = ReplySeal { session_id: header.session_id, key_id: header.key_id, token };
                        let from = Arrival { source, header, token, now_ns, epoch_ns };
                        match appending.as_mut() {
                            Some(appending) => self.on_datagram(from, records, appending),
                            None => {
                                self.counters.records_received.add(records.count() as i64);
                                self.counters.redirects.increment();
                                let mut endpoint = Vec::new();
                                if let Some(&(_, addr)) = self.members.known.iter().find(|m| Some(m.0) == leader) {
                                    encode_addr(addr, &mut endpoint);
                                }
                                let leader = leader.map_or(-1, i64::from);
                                let redirect = RecordHeader::new(wire::REDIRECT, header.session_id).value(leader);
                                self.reply.writer.push(redirect, &endpoint);
                            }
                        }
                        self.send_reply(source);
                    }
                    Err(Dropped::Malformed) => self.counters.malformed_dropped.increment(),
                    Err(Dropped::Forged) => self.counters.forged_dropped.increment(),
                }
            }
            datagrams += received;
            if received < batch.capacity() {
                break;
            }
        }
        self.batch = Some(batch);
        if let Some(appending) = appending.as_mut() {
            appending.stage.count_session_appends(std::mem::take(&mut appending.entries));
            self.counters.messages_appended.add(std::mem::take(&mut appending.messages) as i64);
        }
        self.next_receive_ns = if datagrams > 0 { now_ns } else { now_ns + POLL_INTERVAL_NS };
        work += datagrams;
        work + self.flush()
    }

    /// Checks a datagram's header and tag before anything else of it is read: its session's token (a
    /// session's datagram), or the client key it names (an open, where the cluster has client keys);
    /// then its records. Returns them with the session's token.
    fn authenticate<'a>(
        &self,
        bytes: &'a [u8],
    ) -> Result<(wire::DatagramHeader, Records<'a>, Option<AuthKey>), Dropped> {
        let datagram = Datagram::parse(bytes).map_err(|_| Dropped::Malformed)?;
        let header = datagram.header;
        let key = match header.key_id {
            0 if self.config.keys.is_empty() => None,
            0 => return Err(Dropped::Forged),
            id => Some(self.config.key(id).ok_or(Dropped::Forged)?),
        };
        let token = if header.session_id != 0 {
            let token = match self.connections.by_session.get(&header.session_id) {
                Some(connection) if connection.key_id == header.key_id => connection.token,
                _ => self.admission.secret.token(header.session_id, key),
            };
            if !datagram.verify(&token) {
                return Err(Dropped::Forged);
            }
            Some(token)
        } else {
            match key {
                Some(key) if !datagram.verify(key.key()) => return Err(Dropped::Forged),
                None if datagram.is_tagged() => return Err(Dropped::Forged),
                _ => None,
            }
        };
        let records = datagram.records().map_err(|_| Dropped::Malformed)?;
        Ok((header, records, token))
    }

    /// Sends the answers to a datagram that belong to no connection, sealed as the datagram was.
    fn send_reply(&mut self, source: SocketAddr) {
        if self.reply.writer.is_empty() {
            return;
        }
        let seal = self.reply.seal;
        let key = match seal.token {
            Some(_) => None,
            None => self.config.key(seal.key_id),
        };
        let bytes = self.reply.writer.finish(Seal {
            session_id: seal.session_id,
            key_id: seal.key_id,
            sequence: if seal.session_id == 0 { 0 } else { self.sequence.next() },
            key: seal.token.as_ref().or(key.map(ClientKey::key)),
        });
        let _ = self.socket.send(bytes, Some(&SockAddr::from(source)));
        self.counters.egress_datagrams.increment();
        self.reply.writer.clear();
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
                let Some(opened) = connection.opened.take() else {
                    return;
                };
                connection.state = State::Open;
                connection.next_expected = 1;
                connection.acked = 0;
                record.correlation_id = connection.nonce;
                // The answer to an open goes in a datagram of no session (the client has no token yet),
                // with the token sealed for the client alone (tagged with the client key when there is one).
                self.reply.writer.push(record, &opened[..]);
                self.reply.seal = ReplySeal { session_id: 0, key_id: connection.key_id, token: None };
                let source = connection.addr;
                // The members follow in the session's first datagram, tagged with its token.
                let (configuration, payload) = &self.members.set;
                let members = RecordHeader::new(wire::MEMBERS, header.session_id).value(*configuration);
                let out = Out { socket: &mut self.socket, counters: &self.counters, sequence: &mut self.sequence };
                queue(connection, out, &mut self.dirty, header.session_id, members, payload);
                self.counters.egress_records.increment();
                self.send_reply(source);
                return;
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
                Some(RefusalCode::UnknownSession | RefusalCode::TooManySessions | RefusalCode::RefusedByService) => {
                    if connection.state == State::Opening {
                        // Refused before the client had the token: answered as an open is.
                        record.correlation_id = connection.nonce;
                        self.reply.writer.push(record, &[]);
                        self.reply.seal = ReplySeal { session_id: 0, key_id: connection.key_id, token: None };
                        let source = connection.addr;
                        self.connections.remove(&header.session_id);
                        self.counters.connections.set(self.connections.len() as i64);
                        self.counters.egress_records.increment();
                        self.send_reply(source);
                        return;
                    }
                    remove = true;
                }
                _ => {}
            },
            wire::CLOSED => remove = true,
            _ => {}
        }
        let out = Out { socket: &mut self.socket, counters: &self.counters, sequence: &mut self.sequence };
        queue(connection, out, &mut self.dirty, header.session_id, record, payload);
        if record.kind == wire::RECONNECTED {
            let (configuration, payload) = &self.members.set;
            let members = RecordHeader::new(wire::MEMBERS, header.session_id).value(*configuration);
            let out = Out { socket: &mut self.socket, counters: &self.counters, sequence: &mut self.sequence };
            queue(connection, out, &mut self.dirty, header.session_id, members, payload);
        }
        if remove {
            if let Some(mut connection) = self.connections.remove(&header.session_id) {
                let out = Out { socket: &mut self.socket, counters: &self.counters, sequence: &mut self.sequence };
                flush_connection(&mut connection, header.session_id, out);
            }
            self.counters.connections.set(self.connections.len() as i64);
        }
    }

    /// Sends every connection's waiting datagram; returns the datagrams sent.
    fn flush(&mut self) -> usize {
        let mut sent = 0;
        for session in self.dirty.drain(..) {
            if let Some(connection) = self.connections.by_session.get_mut(&session) {
                let out = Out { socket: &mut self.socket, counters: &self.counters, sequence: &mut self.sequence };
                sent += flush_connection(connection, session, out);
            }
        }
        sent
    }

    /// The leader takes the records of one authenticated datagram.
    fn on_datagram(&mut self, from: Arrival, records: Records<'_>, append: &mut Appending<'_>) {
        let session = from.header.session_id;
        if session == 0 {
            let mut received = 0;
            for (record, payload) in records {
                received += 1;
                match record.kind {
                    wire::OPEN => self.on_open(&from, record.correlation_id, payload, append),
                    // A session's record outside a datagram tagged with its token claims what it cannot prove.
                    _ if record.session_id != 0 => self.counters.forged_dropped.increment(),
                    _ => self.counters.malformed_dropped.increment(),
                }
            }
            self.counters.records_received.add(received);
            return;
        }
        let token = from.token.expect("a session's datagram is checked with its token");
        match self.connections.by_session.get_mut(&session) {
            Some(connection) if connection.addr == from.source => {
                if !connection.window.accept(from.header.sequence) {
                    self.counters.replayed_dropped.increment();
                    return;
                }
                let mut state = IngressState {
                    socket: &mut self.socket,
                    config: &self.config,
                    dirty: &mut self.dirty,
                    reply: &mut self.reply.writer,
                    counters: &self.counters,
                    sequence: &mut self.sequence,
                    member_set: &self.members.set,
                };
                on_session_records(&mut state, connection, session, records, append, from.epoch_ns);
            }
            existing => {
                // Not from the session's address (or a session this leader has no connection for): only a
                // fresh proof that the sender holds the token moves it here.
                match existing {
                    Some(c) if !c.window.is_fresh(from.header.sequence) => {
                        self.counters.replayed_dropped.increment();
                        return;
                    }
                    Some(_) => self.counters.source_mismatch.increment(),
                    None => self.counters.unknown_session.increment(),
                }
                let mut received = 0;
                let mut answer = None;
                for (record, _) in records {
                    received += 1;
                    if record.kind == wire::RECONNECT && record.correlation_id != 0 {
                        answer = Some(record.correlation_id);
                    }
                }
                self.counters.records_received.add(received);
                let proven = answer
                    .is_some_and(|a| self.admission.secret.answers_challenge(session, from.source, from.now_ns, a));
                if !self.admission.open_rate.take(AddressKey::of(from.source.ip()), from.now_ns) {
                    self.counters.rate_limited.increment();
                    let refusal = RecordHeader::new(wire::REFUSED, session).code(RefusalCode::RateLimited as u8);
                    self.reply.writer.push(refusal, &[]);
                    return;
                }
                if proven {
                    self.on_reconnect(&from, token, append);
                } else {
                    self.counters.challenges_sent.increment();
                    let challenge = self.admission.secret.challenge(session, from.source, from.now_ns);
                    self.reply.writer.push(RecordHeader::new(wire::CHALLENGE, session).correlation(challenge), &[]);
                }
            }
        }
    }

    /// A new connection for the client at `from.source`, its datagrams seen up to `from`'s.
    fn connection(&self, from: &Arrival, state: State, token: AuthKey) -> Connection {
        Connection {
            addr: from.source,
            sockaddr: SockAddr::from(from.source),
            state,
            nonce: 0,
            opened: None,
            key_id: from.header.key_id,
            token,
            window: ReplayWindow::starting_after(from.header.sequence),
            next_expected: 1,
            acked: 0,
            last_logged_ns: from.epoch_ns,
            push_acked: 0,
            last_resend_ns: i64::MIN,
            writer: DatagramWriter::new(self.datagram_capacity),
            dirty: false,
        }
    }
}

/// Where an authenticated datagram came from, and when.
struct Arrival {
    source: SocketAddr,
    header: wire::DatagramHeader,
    token: Option<AuthKey>,
    now_ns: u64,
    /// The leader's clock for session entries.
    epoch_ns: i64,
}

/// What sending to a client needs.
struct Out<'a> {
    socket: &'a mut Box<dyn Transport>,
    counters: &'a IngressCounters,
    sequence: &'a mut Sequence,
}

/// Adds `record` to `connection`'s datagram, sending it first when full.
/// A record longer than one datagram holds goes in `FRAGMENT` records, each in a datagram of its own.
fn queue(
    connection: &mut Connection,
    out: Out<'_>,
    dirty: &mut Vec<u64>,
    session: u64,
    record: RecordHeader,
    payload: &[u8],
) {
    let piece = connection.writer.max_payload();
    if payload.len() <= piece {
        return queue_one(connection, out, dirty, session, record, payload);
    }
    let header = RecordHeader { length: payload.len() as u32, ..record };
    let mut whole = Vec::with_capacity(wire::RECORD_HEADER_LENGTH + payload.len());
    whole.extend_from_slice(bytemuck::bytes_of(&header));
    whole.extend_from_slice(payload);
    for (i, bytes) in whole.chunks(piece).enumerate() {
        let fragment =
            RecordHeader::new(wire::FRAGMENT, session).correlation((i * piece) as u64).value(whole.len() as i64);
        let out = Out { socket: &mut *out.socket, counters: out.counters, sequence: &mut *out.sequence };
        queue_one(connection, out, dirty, session, fragment, bytes);
    }
}

fn queue_one(
    connection: &mut Connection,
    out: Out<'_>,
    dirty: &mut Vec<u64>,
    session: u64,
    record: RecordHeader,
    payload: &[u8],
) {
    let counters = out.counters;
    if !connection.writer.fits(payload.len()) {
        flush_connection(connection, session, out);
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

/// Sends `connection`'s datagram, tagged with its token, if it holds records; returns the datagrams sent.
fn flush_connection(connection: &mut Connection, session: u64, out: Out<'_>) -> usize {
    connection.dirty = false;
    if connection.writer.is_empty() {
        return 0;
    }
    let seal = Seal {
        session_id: session,
        key_id: connection.key_id,
        sequence: out.sequence.next(),
        key: Some(&connection.token),
    };
    let _ = out.socket.send(connection.writer.finish(seal), Some(&connection.sockaddr));
    connection.writer.clear();
    out.counters.egress_datagrams.increment();
    1
}

/// What the handling of one session datagram's records works on.
struct IngressState<'a> {
    socket: &'a mut Box<dyn Transport>,
    config: &'a ClientEndpointConfig,
    dirty: &'a mut Vec<u64>,
    reply: &'a mut DatagramWriter,
    counters: &'a IngressCounters,
    sequence: &'a mut Sequence,
    member_set: &'a (i64, Vec<u8>),
}

impl IngressState<'_> {
    /// Queues `record` on `connection` (as the egress answers are).
    fn queue_on(&mut self, connection: &mut Connection, session: u64, record: RecordHeader) {
        let out = Out { socket: &mut *self.socket, counters: self.counters, sequence: self.sequence };
        queue(connection, out, self.dirty, session, record, &[]);
    }
}

/// The records of one datagram of `session`, from its own address.
fn on_session_records(
    state: &mut IngressState<'_>,
    connection: &mut Connection,
    session: u64,
    records: Records<'_>,
    append: &mut Appending<'_>,
    now: i64,
) {
    // One NAK per datagram is enough: the client resends from it. So is one refusal while suspended.
    let mut nak = None;
    let mut suspended = None;
    let mut received = 0i64;
    for (record, payload) in records {
        received += 1;
        match record.kind {
            wire::MESSAGE if append.suspended => {
                state.counters.suspended_refused.increment();
                suspended = suspended.or(Some(record.correlation_id));
            }
            wire::MESSAGE => {
                let expected = on_message(state.config, state.counters, connection, record, payload, append, now);
                nak = nak.or(expected);
            }
            wire::KEEP_ALIVE => {
                let quarter = state.config.session_timeout.as_nanos() as i64 / 4;
                if now.saturating_sub(connection.last_logged_ns) >= quarter
                    && append_entry(
                        append,
                        state.counters,
                        &SessionEntry::KeepAlive { session_id: session, timestamp_ns: now },
                        &[],
                    )
                    .is_ok()
                {
                    connection.last_logged_ns = now;
                }
                state.queue_on(connection, session, RecordHeader::new(wire::HEARTBEAT, session));
                let (configuration, payload) = state.member_set;
                let members = RecordHeader::new(wire::MEMBERS, session).value(*configuration);
                let out = Out { socket: &mut *state.socket, counters: state.counters, sequence: state.sequence };
                queue(connection, out, state.dirty, session, members, payload);
            }
            wire::PUSH_ACK if connection.state == State::Open => {
                let received = record.value as u64;
                let resend =
                    record.code == wire::RESEND && now.saturating_sub(connection.last_resend_ns) >= RESEND_INTERVAL_NS;
                if received > connection.push_acked || resend {
                    let entry = SessionEntry::PushAck { session_id: session, timestamp_ns: now, received, resend };
                    if append_entry(append, state.counters, &entry, &[]).is_ok() {
                        connection.push_acked = connection.push_acked.max(received);
                        connection.last_logged_ns = now;
                        if resend {
                            connection.last_resend_ns = now;
                        }
                    }
                }
            }
            wire::PUSH_ACK => {}
            wire::CLOSE => {
                let _ = append_entry(
                    append,
                    state.counters,
                    &SessionEntry::Close { session_id: session, timestamp_ns: now },
                    &[],
                );
            }
            wire::RECONNECT => {
                // The client goes on here from where it was (it looked for a leader and found this one
                // again): the table tells it where its session is.
                if connection.state != State::Reconnecting {
                    let entry = SessionEntry::KeepAlive { session_id: session, timestamp_ns: now };
                    if append_entry(append, state.counters, &entry, &[]).is_ok() {
                        connection.state = State::Reconnecting;
                        connection.last_logged_ns = now;
                    } else {
                        let refusal = RecordHeader::new(wire::REFUSED, session).code(RefusalCode::BackPressured as u8);
                        state.reply.push(refusal, &[]);
                    }
                }
            }
            _ => state.counters.malformed_dropped.increment(),
        }
    }
    if let Some(expected) = nak {
        state.queue_on(connection, session, RecordHeader::new(wire::NAK, session).value(expected as i64));
    }
    if let Some(first) = suspended {
        let refusal = RecordHeader::new(wire::REFUSED, session).correlation(first).code(RefusalCode::Suspended as u8);
        state.queue_on(connection, session, refusal);
    }
    state.counters.records_received.add(received);
}

/// A message of an open session; returns the correlation id to NAK for when it is past a gap.
fn on_message(
    config: &ClientEndpointConfig,
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
