use super::*;
use crate::service::state::ServiceLimits;
use crate::service::ClusterTime;
use crate::shm::buffer::AtomicBuffer;
use crate::shm::ring_buffer::required_length;

fn entry(entry: SessionEntry<'_>) -> Vec<u8> {
    let mut bytes = Vec::new();
    entry.encode(&mut bytes);
    bytes
}

fn sessions_with_egress(max_timers: usize) -> (ClientSessions, Arc<OneToOneRingBuffer>) {
    let ring = Arc::new(OneToOneRingBuffer::new(AtomicBuffer::anonymous(required_length(64 * 1024)).unwrap()).unwrap());
    let counter = Counter::detached();
    let counters = SessionEventCounters {
        egress_dropped: counter.clone(),
        duplicates: counter.clone(),
        responses_too_long: counter.clone(),
        malformed: counter,
    };
    let limits = ServiceLimits { max_timers, max_response_length: 64, max_push_backlog: 256 };
    let sessions = ClientSessions::new(SessionConfig::default(), limits, Some(Arc::clone(&ring)), 1024, counters);
    (sessions, ring)
}

const FOLLOWER: Applier<'static> =
    Applier { member_id: 1, role: crate::cluster::consensus_core::Role::Follower, offers: None };

fn at(position: i64, leading: Option<i64>) -> At<'static> {
    At { position, deliver: true, leading, applier: &FOLLOWER }
}

/// Issue 51, item 2: a restarted leader replays its recorded log while it already leads (term 5 here);
/// what it applies before its own term's entry (an old keep-alive, old commits) sends the clients
/// nothing, and answers go out from that entry on.
#[test]
fn a_leader_answers_nothing_of_the_log_it_replays_before_its_own_terms_entry() {
    let (mut sessions, ring) = sessions_with_egress(16);
    let mut handler = crate::service::state::Entries(|_: &Entry<'_>, _: &mut Vec<u8>| {});
    let past = [
        entry(SessionEntry::LeaderTerm { leadership_term_id: 3, nonce: 1, timestamp_ns: 0 }),
        entry(SessionEntry::Open { session_id: 9, timestamp_ns: 1 }),
        entry(SessionEntry::Message { session_id: 9, timestamp_ns: 2, correlation_id: 1, payload: b"x" }),
        entry(SessionEntry::KeepAlive { session_id: 9, timestamp_ns: 3 }),
    ];
    for (i, bytes) in past.iter().enumerate() {
        sessions.on_entry(bytes, at(64 * (i as i64 + 1), Some(5)), &mut handler);
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
        sessions.on_entry(bytes, at(1024 + 64 * i as i64, Some(5)), &mut handler);
    }
    ring.read(|kind, _| kinds.push(kind as u8), usize::MAX);
    assert_eq!(kinds, vec![KEPT_ALIVE], "the reconnect is answered from the state after the replay");
    // A lower bound of the next timeout (the leader term's time): a tick there closes none and makes it exact.
    assert_eq!(sessions.deadline().get(), 10 + SessionConfig::default().timeout_ns);
}

/// What a test service saw, in order.
#[derive(Default)]
struct Recorder {
    events: Vec<String>,
    /// Sessions whose open is refused.
    refuse: Vec<u64>,
}

impl Service for Recorder {
    fn message(&mut self, entry: &Entry<'_>, cluster: &mut Cluster<'_>) {
        let text = String::from_utf8_lossy(entry.payload).into_owned();
        self.events.push(format!("message {text} at {}", cluster.time().as_nanos()));
        // "timer ID DEADLINE", "cancel ID", "close SESSION"
        let words: Vec<&str> = text.split(' ').collect();
        match words[..] {
            ["timer", id, deadline] => cluster
                .schedule_timer(id.parse().unwrap(), ClusterTime::from_nanos(deadline.parse().unwrap()))
                .unwrap_or_else(|e| self.events.push(format!("refused: {e}"))),
            ["cancel", id] => {
                cluster.cancel_timer(id.parse().unwrap());
            }
            ["close", session] => cluster.close_session(session.parse().unwrap()),
            ["push", session, bytes] => match cluster.push(session.parse().unwrap(), bytes.as_bytes()) {
                Ok(number) => self.events.push(format!("pushed {number}")),
                Err(e) => self.events.push(format!("push refused: {e:?}")),
            },
            _ => {}
        }
    }
    fn session_open(&mut self, session_id: u64, cluster: &mut Cluster<'_>) -> Result<(), SessionRefused> {
        self.events.push(format!("open {session_id} at {}", cluster.time().as_nanos()));
        if self.refuse.contains(&session_id) {
            return Err(SessionRefused { code: 7 });
        }
        Ok(())
    }
    fn session_close(&mut self, session_id: u64, reason: CloseReason, _: &mut Cluster<'_>) {
        self.events.push(format!("close {session_id} {reason:?}"));
    }
    fn timer(&mut self, correlation_id: u64, cluster: &mut Cluster<'_>) {
        self.events.push(format!("timer {correlation_id} at {}", cluster.time().as_nanos()));
        if correlation_id == 1 {
            // A timer that schedules one already due: it waits for the next stamped entry.
            cluster.schedule_timer(100, ClusterTime::from_nanos(0)).unwrap();
        }
    }
}

fn apply(sessions: &mut ClientSessions, service: &mut Recorder, entries: &[SessionEntry<'_>]) {
    for (i, e) in entries.iter().enumerate() {
        sessions.on_entry(&entry(*e), at(64 * (i as i64 + 1), None), service);
    }
}

fn service_entry(timestamp_ns: i64, payload: &str) -> SessionEntry<'_> {
    SessionEntry::Service { timestamp_ns, payload: payload.as_bytes() }
}

#[test]
fn timers_fire_at_the_first_stamped_entry_past_their_deadline_in_order_and_once() {
    let (mut sessions, _) = sessions_with_egress(16);
    let mut service = Recorder::default();
    apply(
        &mut sessions,
        &mut service,
        &[
            service_entry(10, "timer 2 50"),
            service_entry(11, "timer 1 50"),
            service_entry(12, "timer 3 40"),
            service_entry(13, "timer 4 60"),
            service_entry(14, "cancel 4"),
            SessionEntry::Tick { timestamp_ns: 39 },
            SessionEntry::Tick { timestamp_ns: 55 },
            SessionEntry::Tick { timestamp_ns: 56 },
            SessionEntry::Tick { timestamp_ns: 1000 },
        ],
    );
    let timers: Vec<&String> =
        service.events.iter().filter(|e| e.starts_with("timer ") && e.contains(" at ")).collect();
    assert_eq!(
        timers,
        ["timer 3 at 55", "timer 1 at 55", "timer 2 at 55", "timer 100 at 56"],
        "in deadline then id order, each once, never before its deadline; one scheduled for the past by a timer \
         waits for the next entry; a cancelled one never fires"
    );
    assert_eq!(sessions.timers(), 0);
    assert_eq!(sessions.deadline().get(), i64::MAX);
}

#[test]
fn cluster_time_is_the_log_s_and_never_goes_back() {
    let (mut sessions, _) = sessions_with_egress(16);
    let mut service = Recorder::default();
    apply(&mut sessions, &mut service, &[service_entry(100, "a"), service_entry(90, "b")]);
    sessions.on_plain(b"plain", at(1000, None), &mut service);
    assert_eq!(service.events, ["message a at 100", "message b at 100", "message plain at 100"]);
}

#[test]
fn a_refused_open_and_a_service_close_leave_the_table_at_the_same_entry_and_tell_the_client() {
    let (mut sessions, ring) = sessions_with_egress(16);
    let mut service = Recorder { refuse: vec![8], ..Recorder::default() };
    let entries = [
        entry(SessionEntry::LeaderTerm { leadership_term_id: 2, nonce: 1, timestamp_ns: 1 }),
        entry(SessionEntry::Open { session_id: 7, timestamp_ns: 2 }),
        entry(SessionEntry::Open { session_id: 8, timestamp_ns: 3 }),
        entry(service_entry(4, "close 7")),
    ];
    for (i, bytes) in entries.iter().enumerate() {
        sessions.on_entry(bytes, at(64 * (i as i64 + 1), Some(2)), &mut service);
    }
    assert_eq!(sessions.open(), 0);
    assert_eq!(service.events, ["open 7 at 2", "open 8 at 3", "message close 7 at 4", "close 7 Service"]);
    let mut answers = Vec::new();
    ring.read(
        |kind, bytes| {
            let header = bytemuck::pod_read_unaligned::<RecordHeader>(&bytes[..wire::RECORD_HEADER_LENGTH]);
            answers.push((kind as u8, header.session_id, header.code, header.value));
        },
        usize::MAX,
    );
    assert_eq!(
        answers,
        [
            (wire::OPENED, 7, 0, 0),
            (wire::REFUSED, 8, RefusalCode::RefusedByService as u8, 7),
            (wire::CLOSED, 7, wire::CLOSED_BY_SERVICE, 0)
        ]
    );
}

#[test]
fn a_timer_past_the_limit_is_refused_on_every_member_alike() {
    let (mut sessions, _) = sessions_with_egress(1);
    let mut service = Recorder::default();
    apply(&mut sessions, &mut service, &[service_entry(1, "timer 1 50"), service_entry(2, "timer 2 50")]);
    assert!(service.events.iter().any(|e| e.starts_with("refused: 1 timers are scheduled")), "{:?}", service.events);
}

#[test]
fn a_snapshot_carries_the_timers_and_cluster_time_and_an_older_one_loads_without_them() {
    let (mut sessions, _) = sessions_with_egress(16);
    let mut service = Recorder::default();
    apply(
        &mut sessions,
        &mut service,
        &[service_entry(10, "timer 5 50"), SessionEntry::Open { session_id: 3, timestamp_ns: 20 }],
    );
    let mut bytes = Vec::new();
    sessions.write_snapshot(&mut bytes).unwrap();
    let (mut restored, _) = sessions_with_egress(16);
    restored.read_snapshot(&mut &bytes[..]).unwrap();
    assert_eq!((restored.timers(), restored.time(), restored.open()), (1, ClusterTime::from_nanos(20), 1));
    assert_eq!(restored.deadline().get(), 50);
    let mut replayed = Recorder::default();
    apply(&mut restored, &mut replayed, &[SessionEntry::Tick { timestamp_ns: 60 }]);
    assert_eq!(replayed.events, ["timer 5 at 60"]);
    // A snapshot of the format before timers: the table alone.
    let mut old = Vec::new();
    SessionTable::new(SessionConfig::default()).write_snapshot(&mut old).unwrap();
    old[..8].copy_from_slice(b"qcsess01");
    restored.read_snapshot(&mut &old[..]).unwrap();
    assert_eq!((restored.timers(), restored.open()), (0, 0));
}

/// The answers in the egress ring: (kind, session, correlation id, code, payload).
fn answers(ring: &OneToOneRingBuffer) -> Vec<(u8, u64, u64, u8, Vec<u8>)> {
    let mut answers = Vec::new();
    ring.read(
        |kind, bytes| {
            let header = bytemuck::pod_read_unaligned::<RecordHeader>(&bytes[..wire::RECORD_HEADER_LENGTH]);
            let payload = bytes[wire::RECORD_HEADER_LENGTH..].to_vec();
            answers.push((kind as u8, header.session_id, header.correlation_id, header.code, payload));
        },
        usize::MAX,
    );
    answers
}

#[test]
fn pushes_go_out_in_order_are_resent_until_acknowledged_and_a_full_backlog_closes_the_session() {
    let (mut sessions, ring) = sessions_with_egress(16);
    let mut service = Recorder::default();
    let entries = [
        entry(SessionEntry::LeaderTerm { leadership_term_id: 2, nonce: 1, timestamp_ns: 1 }),
        entry(SessionEntry::Open { session_id: 7, timestamp_ns: 2 }),
        entry(service_entry(3, &format!("push 7 {}", "a".repeat(64)))),
        entry(service_entry(4, &format!("push 7 {}", "b".repeat(64)))),
        entry(service_entry(5, &format!("push 7 {}", "c".repeat(65)))),
        entry(SessionEntry::PushAck { session_id: 7, timestamp_ns: 6, received: 1, resend: true }),
        entry(SessionEntry::KeepAlive { session_id: 7, timestamp_ns: 7 }),
    ];
    for (i, bytes) in entries.iter().enumerate() {
        sessions.on_entry(bytes, at(64 * (i as i64 + 1), Some(2)), &mut service);
    }
    let pushed: Vec<(u64, u8)> = answers(&ring).iter().filter(|a| a.0 == wire::PUSHED).map(|a| (a.2, a.4[0])).collect();
    assert_eq!(
        pushed,
        [(1, b'a'), (2, b'b'), (2, b'b'), (2, b'b')],
        "each push as it is made, the one after the acknowledged again when the client asks, and again at a keep-alive"
    );
    assert!(service.events.contains(&"push refused: TooLong { max: 64 }".to_string()), "{:?}", service.events);
    // Push 1 acknowledged, 64 bytes pending of 256: three more fit, one byte past them closes the session.
    let more = [
        entry(service_entry(8, &format!("push 7 {}", "d".repeat(64)))),
        entry(service_entry(9, &format!("push 7 {}", "e".repeat(64)))),
        entry(service_entry(10, &format!("push 7 {}", "f".repeat(64)))),
        entry(service_entry(11, "push 7 g")),
        entry(service_entry(12, "push 7 h")),
    ];
    for (i, bytes) in more.iter().enumerate() {
        sessions.on_entry(bytes, at(1024 + 64 * i as i64, Some(2)), &mut service);
    }
    let events = &service.events;
    assert!(events.contains(&"push refused: BacklogFull".to_string()), "{events:?}");
    assert!(events.contains(&"close 7 Backlog".to_string()), "{events:?}");
    assert!(events.last().unwrap().contains("push refused: UnknownSession"), "{events:?}");
    let closed: Vec<_> = answers(&ring).into_iter().filter(|a| a.0 == wire::CLOSED).collect();
    assert_eq!(closed.len(), 1);
    assert_eq!(closed[0].3, wire::CLOSED_BACKLOG);
}

#[test]
fn a_snapshot_carries_the_pushes_not_yet_acknowledged() {
    let (mut sessions, _) = sessions_with_egress(16);
    let mut service = Recorder::default();
    apply(
        &mut sessions,
        &mut service,
        &[
            SessionEntry::Open { session_id: 3, timestamp_ns: 1 },
            service_entry(2, "push 3 one"),
            service_entry(3, "push 3 two"),
            SessionEntry::PushAck { session_id: 3, timestamp_ns: 4, received: 1, resend: false },
        ],
    );
    let mut bytes = Vec::new();
    sessions.write_snapshot(&mut bytes).unwrap();
    let (mut restored, ring) = sessions_with_egress(16);
    restored.read_snapshot(&mut &bytes[..]).unwrap();
    // The restored member leads and the client reconnects: what it has not acknowledged goes again.
    let mut replayed = Recorder::default();
    let reconnect = [
        entry(SessionEntry::LeaderTerm { leadership_term_id: 4, nonce: 1, timestamp_ns: 5 }),
        entry(SessionEntry::KeepAlive { session_id: 3, timestamp_ns: 6 }),
        entry(service_entry(7, "push 3 three")),
    ];
    for (i, bytes) in reconnect.iter().enumerate() {
        restored.on_entry(bytes, at(64 * (i as i64 + 1), Some(4)), &mut replayed);
    }
    let pushed: Vec<(u64, Vec<u8>)> =
        answers(&ring).into_iter().filter(|a| a.0 == wire::PUSHED).map(|a| (a.2, a.4)).collect();
    assert_eq!(pushed, [(2, b"two".to_vec()), (3, b"three".to_vec())]);
}
