//! Receiving: a poll reads the members' datagrams, checks each (the session token's tag and its replay
//! window, or the client key's), and turns their records into the client's state and its [`Event`]s.

use super::credentials::{open_token, COOKIE_LENGTH};
use super::wire::{self, Datagram, RecordHeader, RefusalCode};
use super::{ClosedReason, Closing, ClusterClient, Event, State, MAX_ASSEMBLED};
use crate::cluster::configuration::decode_addr;

impl ClusterClient {
    /// Sends what was offered, reads the cluster's answers and reports them to `handler`, and keeps the
    /// session alive (keep-alives, resends, finding a new leader); returns the work done.
    pub fn poll(&mut self, mut handler: impl FnMut(Event<'_>)) -> usize {
        let now = self.clock.now_ns();
        let lingered = now.saturating_sub(self.link.out_since_ns) >= self.config.linger.as_nanos() as u64;
        let mut work = if lingered { self.flush() } else { 0 };
        let mut batch = self.link.batch.take().expect("put back after every poll");
        loop {
            let received = self.link.socket.recv_batch(&mut batch).unwrap_or(0);
            self.stats.receive_calls += 1;
            self.stats.datagrams_received += received as u64;
            for i in 0..received {
                let datagram = batch.datagram(i);
                let Some(member) = datagram.source.and_then(|s| self.config.members.iter().position(|m| m.1 == s))
                else {
                    continue;
                };
                let Some(in_session) = self.authenticate(member, datagram.bytes) else {
                    continue;
                };
                let Ok(records) = Datagram::parse(datagram.bytes).and_then(|d| d.records()) else {
                    continue;
                };
                for (record, payload) in records {
                    on_record(&mut self.view(now), member, in_session, record, payload, &mut handler);
                }
            }
            work += received;
            if received < batch.capacity() {
                break;
            }
        }
        self.link.batch = Some(batch);
        if self.pushes.received > self.pushes.acknowledged && self.state == State::Connected {
            // The leader keeps each push until it hears the client has it.
            self.pushes.acknowledged = self.pushes.received;
            self.push(RecordHeader::new(wire::PUSH_ACK, self.session.id).value(self.pushes.received as i64), &[]);
            work += self.flush();
        }
        if let Some(closing) = self.closing.take() {
            for pending in self.in_flight.pending.drain(..) {
                let correlation_id = pending.correlation_id;
                handler(match closing.known {
                    false => Event::OutcomeUnknown { correlation_id },
                    true => Event::NotApplied { correlation_id, reason: closing.refusal },
                });
                self.in_flight.free.push(pending.bytes);
            }
            handler(Event::SessionClosed { reason: closing.reason });
        }
        work + self.on_timers(now)
    }

    /// Checks a datagram from member `member` before its records are read: a datagram of this session
    /// must carry the session token's tag and a sequence not seen from that member; one of no session,
    /// the client key's tag when this client has one. Some(true) for the session's, Some(false) for one
    /// of no session, None to drop it.
    fn authenticate(&mut self, member: usize, bytes: &[u8]) -> Option<bool> {
        let datagram = Datagram::parse(bytes).ok()?;
        let header = datagram.header;
        if header.session_id != 0 {
            let token = self.session.token.as_ref().filter(|_| header.session_id == self.session.id)?;
            if !datagram.verify(token) || !self.session.windows[member].accept(header.sequence) {
                return None;
            }
            return Some(true);
        }
        match &self.config.key {
            Some(key) => datagram.verify(key.key()).then_some(false),
            None => Some(false),
        }
    }

    fn view(&mut self, now: u64) -> View<'_> {
        View { client: self, now }
    }
}

/// The client while it reads one record.
struct View<'a> {
    client: &'a mut ClusterClient,
    now: u64,
}

/// One record from member `member` (by index), of a datagram of the session (`in_session`, its tag
/// checked with the token) or of none (an answer to an open, or a redirect).
fn on_record(
    view: &mut View<'_>,
    member: usize,
    in_session: bool,
    record: RecordHeader,
    payload: &[u8],
    handler: &mut impl FnMut(Event<'_>),
) {
    let now = view.now;
    let client = &mut *view.client;
    if !in_session && !matches!(record.kind, wire::REDIRECT | wire::OPENED | wire::REFUSED | wire::COOKIE) {
        return;
    }
    let ours = in_session && record.session_id == client.session.id;
    match record.kind {
        wire::REDIRECT => {
            let mut leader = client.config.members.iter().position(|m| i64::from(m.0) == record.value);
            if let (None, Ok(id), Some(addr)) = (leader, i32::try_from(record.value), decode_addr(payload)) {
                // A leader its list does not name (added while the cluster ran): learnt from the redirect.
                leader = client.learn_member(id, addr);
            }
            if let (Some(leader), State::Opening | State::Reconnecting) = (leader, client.state) {
                // The next round asks it first.
                client.search.known_leader = Some(leader);
                // Named another member not yet asked in this round: ask it now. Named one asked in this
                // round (its own answer is on the way), or itself (its term is starting): ask again on the
                // retry timer, not at once.
                if leader != member && client.search.asked_in[leader] != client.search.round {
                    client.stats.redirects_followed += 1;
                    client.ask_one(leader);
                }
            } else if client.state == State::Connected && member == client.search.target {
                // The member this client was connected to does not lead any more: ask the one it names
                // first, or, naming none, the others from the next one.
                client.state = State::Reconnecting;
                client.search.known_leader = leader.filter(|&l| l != member);
                client.search.cursor = (member + 1) % client.config.members.len();
                client.search.next_ask_ns = 0;
            }
        }
        wire::COOKIE
            if !in_session && client.state == State::Opening && record.correlation_id == client.handshake.nonce =>
        {
            let Ok(cookie) = <[u8; COOKIE_LENGTH]>::try_from(payload) else {
                return;
            };
            // The member asks for proof that this address is the opener's: the open again, with it (the
            // second half of the ask it answers, counted apart).
            client.handshake.cookie = Some(cookie);
            client.stats.cookies += 1;
            client.flush();
            client.search.target = member;
            client.push_ask();
            client.flush();
        }
        wire::OPENED
            if !in_session && client.state == State::Opening && record.correlation_id == client.handshake.nonce =>
        {
            // Only the holder of this open's ephemeral secret unwraps the token; a payload that is not this
            // open's (forged, or another's) fails its proof and is ignored.
            let Some(token) =
                open_token(payload, &client.handshake.ephemeral, record.session_id, client.handshake.nonce)
            else {
                return;
            };
            client.session.token = Some(token);
            client.session.id = record.session_id;
            client.state = State::Connected;
            client.search.target = member;
            client.search.known_leader = Some(member);
            client.last_heard_ns = now;
            handler(Event::Connected { session_id: record.session_id, leader: client.config.members[member].0 });
        }
        wire::RECONNECTED if ours && client.state == State::Reconnecting => {
            client.state = State::Connected;
            client.search.target = member;
            client.search.known_leader = Some(member);
            client.last_heard_ns = now;
            acknowledge_up_to(client, record.value as u64, handler);
            handler(Event::Connected { session_id: client.session.id, leader: client.config.members[member].0 });
            client.in_flight.resent_from = 0;
            if let Some(first) = client.in_flight.pending.front().map(|p| p.correlation_id) {
                client.resend_from(first, now);
            }
        }
        wire::COMMITTED if ours => {
            if member == client.search.target {
                client.last_heard_ns = now;
            }
            let duplicate = record.code == wire::DUPLICATE;
            if record.code == wire::RESPONSE_TOO_LONG
                && client.in_flight.pending.front().is_some_and(|p| p.correlation_id == record.correlation_id)
            {
                handler(Event::ResponseTooLong { correlation_id: record.correlation_id });
            }
            committed(client, record.correlation_id, record.value, payload, duplicate, handler);
        }
        wire::COMMITTED_RUN if ours => {
            if member == client.search.target {
                client.last_heard_ns = now;
            }
            for (i, position) in payload.chunks_exact(8).enumerate() {
                let Some(correlation_id) = record.correlation_id.checked_add(i as u64) else {
                    break;
                };
                let position = i64::from_le_bytes(position.try_into().expect("8 bytes"));
                committed(client, correlation_id, position, &[], false, handler);
            }
        }
        wire::PUSHED if ours => on_pushed(client, record.correlation_id, payload, now, handler),
        wire::FRAGMENT if ours => {
            if let Some(whole) = assemble(client, record, payload) {
                let header = bytemuck::pod_read_unaligned::<RecordHeader>(&whole[..wire::RECORD_HEADER_LENGTH]);
                let body = whole.get(wire::RECORD_HEADER_LENGTH..wire::RECORD_HEADER_LENGTH + header.length as usize);
                // A record in pieces is never itself a piece: one more level is refused.
                if let (Some(body), false) = (body, header.kind == wire::FRAGMENT) {
                    on_record(&mut View { client: &mut *client, now }, member, in_session, header, body, handler);
                }
                client.assembly.0 = whole;
                client.assembly.0.clear();
            }
        }
        wire::HEARTBEAT if ours && member == client.search.target => client.last_heard_ns = now,
        wire::NAK if ours && client.state == State::Connected => {
            let from = record.value as u64;
            if from != client.in_flight.resent_from {
                client.in_flight.resent_from = from;
                client.resend_from(from, now);
            }
        }
        wire::CHALLENGE if ours && matches!(client.state, State::Connected | State::Reconnecting) => {
            // This member does not know this client's address for the session (a new leader, or a new
            // address): the answer proves the client holds the token, from here.
            client.state = State::Reconnecting;
            client.search.target = member;
            client.search.known_leader = Some(member);
            client.search.next_ask_ns = now + client.config.connect_retry.as_nanos() as u64;
            client.push(RecordHeader::new(wire::RECONNECT, client.session.id).correlation(record.correlation_id), &[]);
            client.flush();
        }
        wire::REFUSED => on_refused(client, member, ours, record, now, handler),
        wire::MEMBERS if ours => client.learn_members(&wire::decode_members(payload)),
        wire::CLOSED if ours && client.state != State::Idle => {
            client.state = State::Idle;
            // The session's last message applied: those up to it were (their answers were lost), the rest
            // never will be.
            acknowledge_up_to(client, record.value as u64, handler);
            let reason = match record.code {
                wire::TIMED_OUT => ClosedReason::TimedOut,
                wire::EVICTED => ClosedReason::Evicted,
                wire::CLOSED_BY_SERVICE => ClosedReason::ClosedByService,
                wire::CLOSED_BACKLOG => ClosedReason::Backlog,
                _ => ClosedReason::Unknown,
            };
            client.closing = Some(Closing { refusal: RefusalCode::UnknownSession, reason, known: true });
        }
        _ => {}
    }
}

/// Push `number` of the session: handed out when it is the next one; one seen before is dropped; one
/// past a gap is dropped too, and the leader asked for the pushes after the last one handed out (once per
/// `RESEND_RETRY_NS`).
fn on_pushed(client: &mut ClusterClient, number: u64, payload: &[u8], now: u64, handler: &mut impl FnMut(Event<'_>)) {
    let seen = &mut client.pushes;
    if number == seen.received + 1 {
        seen.received = number;
        handler(Event::Pushed { number, payload });
    } else if number <= seen.received {
        client.stats.pushes_duplicate += 1;
    } else {
        let (from, at) = seen.resend_asked;
        if from != seen.received || now.saturating_sub(at) >= RESEND_RETRY_NS {
            seen.resend_asked = (seen.received, now);
            client.stats.push_resends_asked += 1;
            let record =
                RecordHeader::new(wire::PUSH_ACK, client.session.id).value(seen.received as i64).code(wire::RESEND);
            client.push(record, &[]);
        }
    }
}

/// Adds a piece of a record to the one being put together; returns the whole record once it is. A piece
/// out of order (one before it was lost) drops what was put together: the record is lost as a datagram
/// would be (a push is sent again; a message is resent and answered as a duplicate).
fn assemble(client: &mut ClusterClient, record: RecordHeader, payload: &[u8]) -> Option<Vec<u8>> {
    let (offset, total) = (record.correlation_id as usize, record.value as usize);
    let (bytes, expected) = &mut client.assembly;
    if !(wire::RECORD_HEADER_LENGTH..=MAX_ASSEMBLED).contains(&total) {
        bytes.clear();
        return None;
    }
    if offset == 0 {
        bytes.clear();
        *expected = total;
    }
    if offset != bytes.len() || total != *expected || offset + payload.len() > total {
        bytes.clear();
        return None;
    }
    bytes.extend_from_slice(payload);
    (bytes.len() == total).then(|| std::mem::take(bytes))
}

/// Least time between two requests to resend the pushes from one number.
const RESEND_RETRY_NS: u64 = 20_000_000;

fn on_refused(
    client: &mut ClusterClient,
    member: usize,
    ours: bool,
    record: RecordHeader,
    now: u64,
    handler: &mut impl FnMut(Event<'_>),
) {
    let Some(code) = RefusalCode::from_u8(record.code) else {
        return;
    };
    let to_open = !ours && client.state == State::Opening && record.correlation_id == client.handshake.nonce;
    match code {
        RefusalCode::RefusedByService if to_open => {
            client.state = State::Idle;
            handler(Event::RefusedByService { code: record.value as u32 });
        }
        RefusalCode::TooManySessions
        | RefusalCode::TooManyFromAddress
        | RefusalCode::TooManyFromNetwork
        | RefusalCode::RateLimited
        | RefusalCode::Suspended
            if to_open =>
        {
            client.state = State::Idle;
            handler(Event::ConnectRefused { reason: code });
        }
        RefusalCode::UnknownSession | RefusalCode::TooManySessions if ours && client.state != State::Idle => {
            // The member does not hold the session (closed long ago, or never opened there): which of the
            // messages in flight were applied before it closed, it cannot tell.
            client.state = State::Idle;
            let reason = ClosedReason::Unknown;
            client.closing = Some(Closing { refusal: RefusalCode::UnknownSession, reason, known: false });
        }
        RefusalCode::Displaced | RefusalCode::Evicted if ours && client.state != State::Idle => {
            client.state = State::Idle;
            let reason = if code == RefusalCode::Evicted { ClosedReason::Evicted } else { ClosedReason::Displaced };
            client.closing = Some(Closing { refusal: code, reason, known: false });
        }
        RefusalCode::Replayed if to_open => {
            // Two members took the same open (or a delayed copy came back): a new open, with a new key.
            client.start_connect();
        }
        RefusalCode::Gap | RefusalCode::WindowExceeded if ours && client.state == State::Connected => {
            let from = if code == RefusalCode::Gap { record.value as u64 } else { record.correlation_id };
            if code == RefusalCode::Gap {
                // The table applied everything before the one it expects: their own answers were lost.
                acknowledge_up_to(client, from.saturating_sub(1), handler);
            }
            if from != client.in_flight.resent_from {
                client.in_flight.resent_from = from;
                client.resend_from(from, now);
            }
        }
        RefusalCode::Suspended if ours && client.state == State::Connected => {
            handler(Event::Suspended { correlation_id: record.correlation_id });
        }
        RefusalCode::NotConnected if ours && client.state == State::Connected && member == client.search.target => {
            // The leader does not know this session (it was elected since): go on with it there.
            client.state = State::Reconnecting;
            client.search.known_leader = Some(member);
            client.search.next_ask_ns = 0;
        }
        _ => {}
    }
}

/// Reports message `correlation_id` committed at `position` with `response`, if it is in flight, and
/// every message before it too: the table applies a session's messages in order, so they were applied.
fn committed(
    client: &mut ClusterClient,
    correlation_id: u64,
    position: i64,
    response: &[u8],
    duplicate: bool,
    handler: &mut impl FnMut(Event<'_>),
) {
    acknowledge_up_to(client, correlation_id.saturating_sub(1), handler);
    if client.in_flight.pending.front().is_some_and(|p| p.correlation_id == correlation_id) {
        let pending = client.in_flight.pending.pop_front().expect("checked");
        handler(Event::Committed { correlation_id, position: Some(position), response, duplicate });
        client.in_flight.free.push(pending.bytes);
    }
}

/// Reports every message in flight up to `correlation_id` as committed (known from a later answer).
fn acknowledge_up_to(client: &mut ClusterClient, correlation_id: u64, handler: &mut impl FnMut(Event<'_>)) {
    while client.in_flight.pending.front().is_some_and(|p| p.correlation_id <= correlation_id) {
        let pending = client.in_flight.pending.pop_front().expect("checked");
        handler(Event::Committed {
            correlation_id: pending.correlation_id,
            position: None,
            response: &[],
            duplicate: true,
        });
        client.in_flight.free.push(pending.bytes);
    }
}
