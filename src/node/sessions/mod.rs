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

pub(super) mod clock;
pub(super) mod ingress;
mod limits;

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::agent::clock::NanoClock;
use crate::client::session::{Applied, ClientMessage, Entry, Refusal, SessionConfig, SessionEntry, SessionTable};
use crate::client::wire::{self, RecordHeader, RefusalCode};
use crate::service::state::{Applier, Service, ServiceLimits, ServiceState};
use crate::service::{CloseReason, Cluster, SessionRefused};
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

/// The leader's clock at which the replicated state's next deadline falls (the table's first open session
/// times out, or a timer is due; `i64::MAX`: none), and the cluster time of the entries applied, as the
/// node's reader last applied them; shared with the leader's clock keeper.
#[derive(Clone, Debug)]
pub(super) struct SessionDeadline(Arc<[AtomicI64; 2]>);

impl Default for SessionDeadline {
    fn default() -> Self {
        Self(Arc::new([AtomicI64::new(i64::MAX), AtomicI64::new(i64::MIN)]))
    }
}

impl SessionDeadline {
    pub(super) fn get(&self) -> i64 {
        self.0[0].load(Ordering::Acquire)
    }

    /// The cluster time applied (`i64::MIN` before any stamped entry): a tick stamped at or before it has
    /// been applied, and covers no deadline published since.
    pub(super) fn applied_time(&self) -> i64 {
        self.0[1].load(Ordering::Acquire)
    }

    fn set(&self, at_ns: i64, applied_time_ns: i64) {
        self.0[1].store(applied_time_ns, Ordering::Release);
        self.0[0].store(at_ns, Ordering::Release);
    }
}

/// The session table, the service's state beside it, and the way back to the clients.
pub(super) struct ClientSessions {
    table: SessionTable,
    /// Cluster time, the timers and the streams of pushes.
    service: ServiceState,
    limits: ServiceLimits,
    egress: Option<Arc<OneToOneRingBuffer>>,
    /// The longest run of commits' payload (what one datagram carries).
    max_response: usize,
    /// The answers being gathered into one record.
    run: Run,
    counters: SessionEventCounters,
    /// The term whose leader-term entry this member applied while leading it: answers go out only
    /// for entries after it.
    live_term: i64,
    /// The sessions the table closed for silence at the entry being applied (scratch).
    timed_out: Vec<u64>,
    deadline: SessionDeadline,
    /// A planted bug (the node simulator's own test): a resend found applied is handed out again.
    pub(super) apply_duplicates: bool,
    /// A planted bug: timers fire when this clock (the member's own) passes their deadline, not the
    /// cluster time of the entry.
    pub(super) timers_on_clock: Option<NanoClock>,
    /// A planted bug: snapshots hold no timers.
    pub(super) snapshot_without_timers: bool,
}

/// Where an entry is applied: its position, whether the application is handed it (it is past
/// `resume_from`), and who applies it.
#[derive(Clone, Copy)]
pub(super) struct At<'a> {
    pub(super) position: i64,
    pub(super) deliver: bool,
    /// The term this member leads, if it leads.
    pub(super) leading: Option<i64>,
    pub(super) applier: &'a Applier<'a>,
}

impl ClientSessions {
    /// Sessions under `config`, the service's state under `limits`, answering through `egress` (on the
    /// leader that takes clients) with responses of at most `max_response` bytes.
    pub(super) fn new(
        config: SessionConfig,
        limits: ServiceLimits,
        egress: Option<Arc<OneToOneRingBuffer>>,
        max_response: usize,
        counters: SessionEventCounters,
    ) -> Self {
        let run = Run { positions: Vec::with_capacity(max_response), ..Run::default() };
        let apply_duplicates = false;
        Self {
            table: SessionTable::new(config),
            service: ServiceState::new(limits),
            limits,
            egress,
            max_response,
            run,
            counters,
            live_term: -1,
            timed_out: Vec::new(),
            deadline: SessionDeadline::default(),
            apply_duplicates,
            timers_on_clock: None,
            snapshot_without_timers: false,
        }
    }

    /// The table's next expiry and the next timer, as the leader's clock keeper reads them.
    pub(super) fn deadline(&self) -> SessionDeadline {
        self.deadline.clone()
    }

    /// Cluster time now.
    #[cfg(test)]
    pub(super) fn time(&self) -> crate::service::ClusterTime {
        self.service.time()
    }

    /// Timers scheduled now.
    #[cfg(test)]
    pub(super) fn timers(&self) -> usize {
        self.service.timers.len()
    }

    /// Whether this member applies its own term's entries as their leader (answers go out, the service's
    /// own entries are appended).
    fn live(&self, leading: Option<i64>) -> bool {
        leading.is_some_and(|term| term == self.live_term)
    }

    /// Hands a committed entry that is not a session entry to `service` (when `at.deliver`), at the
    /// cluster time of the last stamped entry.
    pub(super) fn on_plain(&mut self, payload: &[u8], at: At<'_>, service: &mut impl Service) {
        if at.deliver {
            let applier = self.applier(at);
            let entry = Entry { payload, position: at.position, client: None };
            let deadline = self.service.next_deadline();
            self.service.call(at.position, &applier, &self.table, |cluster| service.message(&entry, cluster));
            // The plain path is the fast path: only what the callback asked for costs anything more.
            if !self.service.pushed.is_empty() || !self.service.closes.is_empty() {
                self.after_callback(at, &applier, service);
            }
            // A plain entry carries no stamp: the deadline moves only if the callback moved a timer.
            if self.service.next_deadline() != deadline || !self.service.closes.is_empty() {
                self.publish_deadline();
            }
        }
    }

    /// Publishes the next deadline of the replicated state (a session's silence, a timer) for the leader's
    /// clock keeper.
    fn publish_deadline(&self) {
        let deadline = self.table.next_expiry_ns().min(self.service.next_deadline());
        self.deadline.set(deadline, self.service.applied_time_ns());
    }

    /// The applier of an entry at `at`: the service's own entries go out only from the live leader.
    fn applier<'a>(&self, at: At<'a>) -> Applier<'a> {
        let offers = at.applier.offers.filter(|_| self.live(at.leading));
        Applier { member_id: at.applier.member_id, role: at.applier.role, offers }
    }

    /// Applies a session entry to the table and the service's state: sessions that timed out close, the
    /// timers due fire, then the entry's own effect; every callback goes to `service` (when `at.deliver`)
    /// and, on the leader of term `at.leading` once its leader-term entry is applied, every answer goes to
    /// the client.
    pub(super) fn on_entry(&mut self, bytes: &[u8], at: At<'_>, service: &mut impl Service) {
        let Ok(entry) = SessionEntry::decode(bytes) else {
            self.counters.malformed.increment();
            return;
        };
        if let (SessionEntry::LeaderTerm { leadership_term_id, .. }, Some(term)) = (entry, at.leading) {
            if leadership_term_id == term {
                self.live_term = term;
            }
        }
        let live = self.live(at.leading);
        let applier = self.applier(at);
        self.service.stamp(entry.timestamp_ns());
        let mut timed_out = std::mem::take(&mut self.timed_out);
        timed_out.clear();
        let applied = {
            let Self { table, egress, run, counters, .. } = self;
            let egress = egress.as_deref().filter(|_| live);
            table.apply(&entry, |closed, applied| {
                // With its last message applied: the client tells what was applied from what never will be.
                let record = RecordHeader::new(wire::CLOSED, closed).code(wire::TIMED_OUT).value(applied as i64);
                answer(run, egress, &counters.egress_dropped, record, &[]);
                timed_out.push(closed);
            })
        };
        for &session_id in &timed_out {
            self.service.pushes.close(session_id);
            if at.deliver {
                let close =
                    |cluster: &mut Cluster<'_>| service.session_close(session_id, CloseReason::Timeout, cluster);
                self.service.call(at.position, &applier, &self.table, close);
                self.after_callback(at, &applier, service);
            }
        }
        if at.deliver {
            self.fire_timers(at, &applier, service);
        }
        self.timed_out = timed_out;
        self.on_applied(&entry, applied, at, &applier, service);
        self.publish_deadline();
    }

    /// The timers due at cluster time now, each through its callback.
    fn fire_timers(&mut self, at: At<'_>, applier: &Applier<'_>, service: &mut impl Service) {
        let mut fired = Vec::new();
        let now_ns = self.timers_on_clock.as_ref().map(NanoClock::epoch_ns);
        let table = &self.table;
        self.service.fire_due(now_ns, |state, correlation_id| {
            state.call(at.position, applier, table, |cluster| service.timer(correlation_id, cluster));
            fired.append(&mut state.closes);
        });
        self.service.closes = fired;
        self.after_callback(at, applier, service);
    }

    /// What the last callbacks asked for: their pushes go out (from the live leader), then the sessions
    /// they closed close (and those their close callbacks close), in the order asked.
    fn after_callback(&mut self, at: At<'_>, applier: &Applier<'_>, service: &mut impl Service) {
        let live = self.live(at.leading);
        loop {
            self.send_pushed(live);
            if self.service.closes.is_empty() {
                return;
            }
            for (session_id, reason) in std::mem::take(&mut self.service.closes) {
                let Some(applied) = self.table.close(session_id) else {
                    continue;
                };
                self.service.pushes.close(session_id);
                let code = close_code(reason);
                self.answer(live, RecordHeader::new(wire::CLOSED, session_id).code(code).value(applied as i64), &[]);
                if at.deliver {
                    let close = |cluster: &mut Cluster<'_>| service.session_close(session_id, reason, cluster);
                    self.service.call(at.position, applier, &self.table, close);
                }
            }
        }
    }

    /// Sends the pushes the last callbacks made, from the live leader (elsewhere they wait in the streams
    /// for a resend).
    fn send_pushed(&mut self, live: bool) {
        let pushed = std::mem::take(&mut self.service.pushed);
        if live {
            for &(session_id, number) in &pushed {
                self.send_push(session_id, number);
            }
        }
        self.service.pushed = pushed;
        self.service.pushed.clear();
    }

    /// Sends push `number` of `session_id`, if it is pending.
    fn send_push(&mut self, session_id: u64, number: u64) {
        let Self { service, run, egress, counters, .. } = self;
        if let Some(bytes) = service.pushes.get(session_id, number) {
            let record = RecordHeader::new(wire::PUSHED, session_id).correlation(number);
            answer(run, egress.as_deref(), &counters.egress_dropped, record, bytes);
        }
    }

    /// Sends again every push of `session_id` after `received` (the live leader, to a client that saw a
    /// gap or came back).
    fn resend_pushes(&mut self, session_id: u64, received: u64) {
        let Self { service, run, egress, counters, .. } = self;
        for (number, bytes) in service.pushes.pending_after(session_id, received) {
            let record = RecordHeader::new(wire::PUSHED, session_id).correlation(number);
            answer(run, egress.as_deref(), &counters.egress_dropped, record, bytes);
        }
    }

    /// The entry's own effect, for the service and the client.
    fn on_applied(
        &mut self,
        entry: &SessionEntry<'_>,
        applied: Applied<'_>,
        at: At<'_>,
        applier: &Applier<'_>,
        service: &mut impl Service,
    ) {
        let live = self.live(at.leading);
        let position = at.position;
        match applied {
            Applied::Deliver { session_id, correlation_id, payload } => {
                let client = ClientMessage { session_id, correlation_id, timestamp_ns: entry.timestamp_ns() };
                let message = Entry { payload, position, client: Some(client) };
                if at.deliver {
                    self.service.call(position, applier, &self.table, |cluster| service.message(&message, cluster));
                } else {
                    self.service.response.clear();
                }
                self.respond(live, session_id, correlation_id, position);
                self.after_callback(at, applier, service);
            }
            Applied::Duplicate { session_id, correlation_id } => {
                self.counters.duplicates.increment();
                if let (true, true, SessionEntry::Message { payload, .. }) = (self.apply_duplicates, at.deliver, entry)
                {
                    let client = ClientMessage { session_id, correlation_id, timestamp_ns: entry.timestamp_ns() };
                    let message = Entry { payload, position, client: Some(client) };
                    self.service.call(position, applier, &self.table, |cluster| service.message(&message, cluster));
                }
                let record = RecordHeader::new(wire::COMMITTED, session_id)
                    .correlation(correlation_id)
                    .value(position)
                    .code(wire::DUPLICATE);
                self.answer(live, record, &[]);
            }
            Applied::Opened { session_id } => {
                let refused = if at.deliver {
                    let open = |cluster: &mut Cluster<'_>| service.session_open(session_id, cluster);
                    self.service.call(position, applier, &self.table, open).err()
                } else {
                    None
                };
                match refused {
                    None => self.answer(live, RecordHeader::new(wire::OPENED, session_id), &[]),
                    Some(SessionRefused { code }) => {
                        // Refused at its open: gone from the table at this entry on every member.
                        self.table.close(session_id);
                        self.service.pushes.close(session_id);
                        let record = RecordHeader::new(wire::REFUSED, session_id)
                            .code(RefusalCode::RefusedByService as u8)
                            .value(i64::from(code));
                        self.answer(live, record, &[]);
                    }
                }
                self.after_callback(at, applier, service);
            }
            Applied::KeptAlive { session_id } => {
                let applied = self.table.applied(session_id).unwrap_or(0);
                self.answer(live, RecordHeader::new(KEPT_ALIVE, session_id).value(applied as i64), &[]);
                if live {
                    // A reconnect (a new leader, a new address) or a client that is quiet: what it has not
                    // acknowledged goes again, and it drops what it has seen.
                    self.resend_pushes(session_id, 0);
                }
            }
            Applied::PushAcked { session_id, received, resend } => {
                self.service.pushes.acknowledge(session_id, received);
                if live && resend {
                    self.resend_pushes(session_id, received);
                }
            }
            Applied::Closed { session_id, reason, applied } => {
                self.service.pushes.close(session_id);
                let code = close_code(reason);
                self.answer(live, RecordHeader::new(wire::CLOSED, session_id).code(code).value(applied as i64), &[]);
                if at.deliver {
                    let close = |cluster: &mut Cluster<'_>| service.session_close(session_id, reason, cluster);
                    self.service.call(position, applier, &self.table, close);
                    self.after_callback(at, applier, service);
                }
            }
            Applied::Service { payload } => {
                if at.deliver {
                    let own = Entry { payload, position, client: None };
                    self.service.call(position, applier, &self.table, |cluster| service.message(&own, cluster));
                    self.after_callback(at, applier, service);
                }
            }
            Applied::LeaderTerm { .. } | Applied::Ticked => {}
            Applied::Refused { session_id, refusal } => {
                let correlation = match entry {
                    SessionEntry::Message { correlation_id, .. } => *correlation_id,
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
                self.answer(live, record, &[]);
            }
        }
    }

    /// Answers a delivered message with the service's response: a commit without one joins the session's
    /// run of commits.
    fn respond(&mut self, live: bool, session_id: u64, correlation_id: u64, position: i64) {
        let Self { egress, run, counters, service, max_response, limits, .. } = self;
        let Some(egress) = egress.as_deref().filter(|_| live) else {
            return;
        };
        if service.response.is_empty() {
            let follows = run.session_id == session_id && run.first + run.len() == correlation_id;
            if !follows || run.positions.len() + 8 > *max_response {
                flush_run(run, Some(egress), &counters.egress_dropped);
                run.session_id = session_id;
                run.first = correlation_id;
            }
            run.positions.extend_from_slice(&position.to_le_bytes());
            return;
        }
        let record = RecordHeader::new(wire::COMMITTED, session_id).correlation(correlation_id).value(position);
        if service.response.len() > limits.max_response_length {
            // Not sent: the client is told its response was too long, never handed an empty one.
            counters.responses_too_long.increment();
            let record = record.code(wire::RESPONSE_TOO_LONG);
            return answer(run, Some(egress), &counters.egress_dropped, record, &[]);
        }
        answer(run, Some(egress), &counters.egress_dropped, record, &service.response);
    }

    /// Sends one answer (after the run of commits being gathered), on the live leader.
    fn answer(&mut self, live: bool, record: RecordHeader, payload: &[u8]) {
        let egress = self.egress.as_deref().filter(|_| live);
        answer(&mut self.run, egress, &self.counters.egress_dropped, record, payload);
    }

    /// Sessions open in the table.
    pub(super) fn open(&self) -> usize {
        self.table.len()
    }

    /// Sends the run of commits being gathered (at the end of each poll: an answer waits for no more).
    pub(super) fn flush(&mut self) {
        flush_run(&mut self.run, self.egress.as_deref(), &self.counters.egress_dropped);
    }

    /// Writes the table and the service's state into a snapshot (before the application's state).
    pub(super) fn write_snapshot(&self, out: &mut dyn Write) -> io::Result<()> {
        self.table.write_snapshot(out)?;
        self.service.write_snapshot(out, !self.snapshot_without_timers)
    }

    /// Reads the table and the service's state from a snapshot (before the application's state); a
    /// snapshot written before there was a service state has none (no timers; cluster time starts again
    /// from the next stamped entry).
    pub(super) fn read_snapshot(&mut self, input: &mut dyn Read) -> io::Result<()> {
        if self.table.read_snapshot(input)? >= 2 {
            self.service.read_snapshot(input, self.table.max_sessions())?;
        } else {
            self.service = ServiceState::new(self.limits);
        }
        self.publish_deadline();
        Ok(())
    }
}

/// The `CLOSED` record's code for a session closed for `reason`.
fn close_code(reason: CloseReason) -> u8 {
    match reason {
        CloseReason::Client => 0,
        CloseReason::Timeout => wire::TIMED_OUT,
        CloseReason::Evicted => wire::EVICTED,
        CloseReason::Service => wire::CLOSED_BY_SERVICE,
        CloseReason::Backlog => wire::CLOSED_BACKLOG,
    }
}

/// Sends `record` after the run of commits being gathered, if there is an egress (the live leader's).
fn answer(run: &mut Run, egress: Option<&OneToOneRingBuffer>, dropped: &Counter, record: RecordHeader, payload: &[u8]) {
    flush_run(run, egress, dropped);
    send(egress, dropped, record, payload);
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
mod tests;
