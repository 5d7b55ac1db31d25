//! The node's side of remote clients' sessions: the replicated session table, applied as the node's
//! reader applies the log, and the answers it makes for the clients (through the egress ring, to the
//! consensus agent's client endpoint, on the leader only).
//!
//! # Invariants
//!
//! - Every member applies every session entry of the log to its table, in log order, leader or not, and
//!   below `resume_from` too: the tables of all members are the same at the same position.
//! - The application sees a client's message exactly once, when the table delivers it.
//! - Answers are written only while this member leads, and only for entries after its own term's
//!   leader-term entry: what it applies before that (its recorded log replayed at a restart, the previous
//!   leader's entries) was answered by whoever appended it, and an answer from that past would move a
//!   client's state back (a reconnect is answered from the state after the replay). A full egress ring
//!   drops an answer (counted), never blocks the reader: the client resends, and is answered as a duplicate.
//! - After every entry, [`SessionDeadline`] holds the table's next expiry, which the leader's client
//!   endpoint reads to append a tick when its clock passes it.

pub(super) mod ingress;
mod limits;

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::client::session::{
    Applied, ClientMessage, CloseReason, Entry, Refusal, SessionConfig, SessionEntry, SessionTable,
};
use crate::client::wire::{self, RecordHeader, RefusalCode};
use crate::shm::counters::Counter;
use crate::shm::ring_buffer::OneToOneRingBuffer;

use self::ingress::KEPT_ALIVE;

/// The counters the reader's side keeps.
#[derive(Clone, Debug)]
pub(super) struct SessionEventCounters {
    pub(super) egress_dropped: Counter,
    pub(super) duplicates: Counter,
    pub(super) responses_too_long: Counter,
    pub(super) malformed: Counter,
}

/// Consecutive messages of one session committed without a response, answered as one
/// `COMMITTED_RUN` record when the run ends (another answer, or the end of a poll).
#[derive(Debug, Default)]
struct Run {
    session_id: u64,
    first: u64,
    /// Each message's position, as the record's payload (8 bytes each, little-endian).
    positions: Vec<u8>,
}

impl Run {
    fn len(&self) -> u64 {
        self.positions.len() as u64 / 8
    }
}

/// The leader's clock at which the table's first open session would time out, as the node's reader last
/// applied it (`i64::MAX`: none is open), shared with the client endpoint.
#[derive(Clone, Debug)]
pub(super) struct SessionDeadline(Arc<AtomicI64>);

impl Default for SessionDeadline {
    fn default() -> Self {
        Self(Arc::new(AtomicI64::new(i64::MAX)))
    }
}

impl SessionDeadline {
    pub(super) fn get(&self) -> i64 {
        self.0.load(Ordering::Acquire)
    }

    fn set(&self, at_ns: i64) {
        self.0.store(at_ns, Ordering::Release);
    }
}

/// The session table and the way back to the clients.
pub(super) struct ClientSessions {
    table: SessionTable,
    egress: Option<Arc<OneToOneRingBuffer>>,
    /// The application's response to the message being applied.
    response: Vec<u8>,
    /// The longest response an egress record carries.
    max_response: usize,
    /// The answers being gathered into one record.
    run: Run,
    counters: SessionEventCounters,
    /// The term whose leader-term entry this member applied while leading it: answers go out only
    /// for entries after it.
    live_term: i64,
    deadline: SessionDeadline,
    /// A planted bug (the node simulator's own test): a resend found applied is handed out again.
    pub(super) apply_duplicates: bool,
}

impl ClientSessions {
    pub(super) fn new(
        config: SessionConfig,
        egress: Option<Arc<OneToOneRingBuffer>>,
        max_response: usize,
        counters: SessionEventCounters,
    ) -> Self {
        let run = Run { positions: Vec::with_capacity(max_response), ..Run::default() };
        let apply_duplicates = false;
        Self {
            table: SessionTable::new(config),
            egress,
            response: Vec::new(),
            max_response,
            run,
            counters,
            live_term: -1,
            deadline: SessionDeadline::default(),
            apply_duplicates,
        }
    }

    /// The table's next expiry, as the client endpoint reads it.
    pub(super) fn deadline(&self) -> SessionDeadline {
        self.deadline.clone()
    }

    /// Hands a committed entry that is not a session entry to `handler` (with `deliver`).
    pub(super) fn on_plain(
        &mut self,
        payload: &[u8],
        position: i64,
        deliver: bool,
        handler: &mut impl FnMut(&Entry<'_>, &mut Vec<u8>),
    ) {
        if deliver {
            self.response.clear();
            handler(&Entry { payload, position, client: None }, &mut self.response);
        }
    }

    /// Applies a session entry to the table; a message it delivers goes to `handler` (with `deliver`),
    /// and, on the leader of term `leading` once its leader-term entry is applied, every answer goes to
    /// the client.
    pub(super) fn on_entry(
        &mut self,
        bytes: &[u8],
        position: i64,
        leading: Option<i64>,
        deliver: bool,
        handler: &mut impl FnMut(&Entry<'_>, &mut Vec<u8>),
    ) {
        let Ok(entry) = SessionEntry::decode(bytes) else {
            self.counters.malformed.increment();
            return;
        };
        if let (SessionEntry::LeaderTerm { leadership_term_id, .. }, Some(term)) = (entry, leading) {
            if leadership_term_id == term {
                self.live_term = term;
            }
        }
        let Self { table, egress, response, max_response, run, counters, live_term, deadline, apply_duplicates } = self;
        let live = leading.is_some_and(|term| term == *live_term);
        let egress = egress.as_deref().filter(|_| live);
        let answer = |run: &mut Run, record: RecordHeader, payload: &[u8]| {
            flush_run(run, egress, &counters.egress_dropped);
            send(egress, &counters.egress_dropped, record, payload)
        };
        let applied = table.apply(&entry, |closed, applied| {
            // With its last message applied: the client tells what was applied from what never will be.
            answer(run, RecordHeader::new(wire::CLOSED, closed).code(wire::TIMED_OUT).value(applied as i64), &[]);
        });
        deadline.set(table.next_expiry_ns());
        match applied {
            Applied::Deliver { session_id, correlation_id, payload } => {
                response.clear();
                if deliver {
                    let client = ClientMessage { session_id, correlation_id, timestamp_ns: entry.timestamp_ns() };
                    handler(&Entry { payload, position, client: Some(client) }, response);
                }
                if response.is_empty() && egress.is_some() {
                    // Without a response, the commit joins the session's run of commits.
                    let follows = run.session_id == session_id && run.first + run.len() == correlation_id;
                    if !follows || run.positions.len() + 8 > *max_response {
                        flush_run(run, egress, &counters.egress_dropped);
                        run.session_id = session_id;
                        run.first = correlation_id;
                    }
                    run.positions.extend_from_slice(&position.to_le_bytes());
                    return;
                }
                let response = if response.len() > *max_response {
                    counters.responses_too_long.increment();
                    &[][..]
                } else {
                    &response[..]
                };
                let record = RecordHeader::new(wire::COMMITTED, session_id).correlation(correlation_id).value(position);
                answer(run, record, response);
            }
            Applied::Duplicate { session_id, correlation_id } => {
                counters.duplicates.increment();
                if let (true, true, SessionEntry::Message { payload, .. }) = (*apply_duplicates, deliver, &entry) {
                    let client = ClientMessage { session_id, correlation_id, timestamp_ns: entry.timestamp_ns() };
                    handler(&Entry { payload, position, client: Some(client) }, response);
                }
                let record = RecordHeader::new(wire::COMMITTED, session_id)
                    .correlation(correlation_id)
                    .value(position)
                    .code(wire::DUPLICATE);
                answer(run, record, &[]);
            }
            Applied::Opened { session_id } => answer(run, RecordHeader::new(wire::OPENED, session_id), &[]),
            Applied::KeptAlive { session_id } => {
                let applied = table.applied(session_id).unwrap_or(0);
                answer(run, RecordHeader::new(KEPT_ALIVE, session_id).value(applied as i64), &[]);
            }
            Applied::Closed { session_id, reason, applied } => {
                let code = match reason {
                    CloseReason::Timeout => wire::TIMED_OUT,
                    CloseReason::Evicted => wire::EVICTED,
                    CloseReason::Client => 0,
                };
                answer(run, RecordHeader::new(wire::CLOSED, session_id).code(code).value(applied as i64), &[]);
            }
            Applied::LeaderTerm { .. } | Applied::Ticked => {}
            Applied::Refused { session_id, refusal } => {
                let correlation = match entry {
                    SessionEntry::Message { correlation_id, .. } => correlation_id,
                    _ => 0,
                };
                let (code, expected) = match refusal {
                    Refusal::UnknownSession => (RefusalCode::UnknownSession, 0),
                    Refusal::TooManySessions => (RefusalCode::TooManySessions, 0),
                    // A session id is given once: an open of one already open is the leader's bug, not the
                    // client's; the client that asked hears nothing and asks again.
                    Refusal::AlreadyOpen => return,
                    Refusal::Gap { expected } => (RefusalCode::Gap, expected),
                };
                let record = RecordHeader::new(wire::REFUSED, session_id)
                    .correlation(correlation)
                    .code(code as u8)
                    .value(expected as i64);
                answer(run, record, &[]);
            }
        }
    }

    /// Sends the run of commits being gathered (at the end of each poll: an answer waits for no more).
    /// Sessions open in the table.
    pub(super) fn open(&self) -> usize {
        self.table.len()
    }

    pub(super) fn flush(&mut self) {
        flush_run(&mut self.run, self.egress.as_deref(), &self.counters.egress_dropped);
    }

    /// Writes the table into a snapshot (before the application's state).
    pub(super) fn write_snapshot(&self, out: &mut dyn Write) -> io::Result<()> {
        self.table.write_snapshot(out)
    }

    /// Reads the table from a snapshot (before the application's state).
    pub(super) fn read_snapshot(&mut self, input: &mut dyn Read) -> io::Result<()> {
        self.table.read_snapshot(input)?;
        self.deadline.set(self.table.next_expiry_ns());
        Ok(())
    }
}

/// Sends `run` as one `COMMITTED_RUN` record, if it holds commits, and empties it.
fn flush_run(run: &mut Run, egress: Option<&OneToOneRingBuffer>, dropped: &Counter) {
    if run.positions.is_empty() {
        return;
    }
    let record = RecordHeader::new(wire::COMMITTED_RUN, run.session_id).correlation(run.first).value(run.len() as i64);
    send(egress, dropped, record, &run.positions);
    run.positions.clear();
}

/// Puts one answer into the egress ring, if there is one to this member's clients.
fn send(egress: Option<&OneToOneRingBuffer>, dropped: &Counter, record: RecordHeader, payload: &[u8]) {
    let Some(ring) = egress else {
        return;
    };
    let length = wire::RECORD_HEADER_LENGTH + payload.len();
    match ring.try_claim(i32::from(record.kind), length) {
        Ok(mut claim) => {
            let header = RecordHeader { length: payload.len() as u32, ..record };
            let written = claim
                .put_bytes(0, bytemuck::bytes_of(&header))
                .and_then(|()| claim.put_bytes(wire::RECORD_HEADER_LENGTH, payload));
            match written {
                Ok(()) => claim.commit(),
                Err(_) => claim.abort(),
            }
        }
        Err(_) => dropped.increment(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::buffer::AtomicBuffer;
    use crate::shm::ring_buffer::required_length;

    fn entry(entry: SessionEntry<'_>) -> Vec<u8> {
        let mut bytes = Vec::new();
        entry.encode(&mut bytes);
        bytes
    }

    /// Issue 51, item 2: a restarted leader replays its recorded log while it already leads (term 5 here);
    /// what it applies before its own term's entry (an old keep-alive, old commits) sends the clients
    /// nothing, and answers go out from that entry on.
    #[test]
    fn a_leader_answers_nothing_of_the_log_it_replays_before_its_own_terms_entry() {
        let ring =
            Arc::new(OneToOneRingBuffer::new(AtomicBuffer::anonymous(required_length(64 * 1024)).unwrap()).unwrap());
        let counter = Counter::detached();
        let counters = SessionEventCounters {
            egress_dropped: counter.clone(),
            duplicates: counter.clone(),
            responses_too_long: counter.clone(),
            malformed: counter,
        };
        let mut sessions = ClientSessions::new(SessionConfig::default(), Some(Arc::clone(&ring)), 1024, counters);
        let mut handler = |_: &Entry<'_>, _: &mut Vec<u8>| {};
        let past = [
            entry(SessionEntry::LeaderTerm { leadership_term_id: 3, nonce: 1, timestamp_ns: 0 }),
            entry(SessionEntry::Open { session_id: 9, timestamp_ns: 1 }),
            entry(SessionEntry::Message { session_id: 9, timestamp_ns: 2, correlation_id: 1, payload: b"x" }),
            entry(SessionEntry::KeepAlive { session_id: 9, timestamp_ns: 3 }),
        ];
        for (i, bytes) in past.iter().enumerate() {
            sessions.on_entry(bytes, 64 * (i as i64 + 1), Some(5), true, &mut handler);
        }
        sessions.flush();
        let mut kinds = Vec::new();
        ring.read(|kind, _| kinds.push(kind as u8), usize::MAX);
        assert!(kinds.is_empty(), "answers from the replayed past: {kinds:?}");
        let now = [
            entry(SessionEntry::LeaderTerm { leadership_term_id: 5, nonce: 2, timestamp_ns: 10 }),
            entry(SessionEntry::KeepAlive { session_id: 9, timestamp_ns: 11 }),
        ];
        for (i, bytes) in now.iter().enumerate() {
            sessions.on_entry(bytes, 1024 + 64 * i as i64, Some(5), true, &mut handler);
        }
        ring.read(|kind, _| kinds.push(kind as u8), usize::MAX);
        assert_eq!(kinds, vec![KEPT_ALIVE], "the reconnect is answered from the state after the replay");
        // A lower bound of the next timeout (the leader term's time): a tick there closes none and makes it exact.
        assert_eq!(sessions.deadline().get(), 10 + SessionConfig::default().timeout_ns);
    }
}
