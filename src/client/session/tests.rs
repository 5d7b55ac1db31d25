//! The session table: exactly once across resends, gaps, limits, timeouts by log time, bad bytes,
//! snapshots, and the same table on every member from the same entries.

use super::*;
use proptest::prelude::*;

const SECOND: i64 = 1_000_000_000;

fn table(max_sessions: usize) -> SessionTable {
    SessionTable::new(SessionConfig { max_sessions, timeout_ns: 10 * SECOND })
}

fn message(session_id: u64, correlation_id: u64, at: i64) -> Vec<u8> {
    let mut out = Vec::new();
    SessionEntry::Message { session_id, timestamp_ns: at, correlation_id, payload: b"set x" }.encode(&mut out);
    out
}

fn apply(table: &mut SessionTable, bytes: &[u8]) -> String {
    let entry = SessionEntry::decode(bytes).unwrap();
    format!("{:?}", table.apply(&entry, |_, _| {}))
}

#[test]
fn entries_round_trip_and_bad_bytes_are_refused_with_a_reason() {
    let bytes = message(7, 3, 42);
    assert_eq!(bytes.len(), MESSAGE_HEADER_LENGTH + 5);
    let entry = SessionEntry::decode(&bytes).unwrap();
    assert_eq!(entry, SessionEntry::Message { session_id: 7, timestamp_ns: 42, correlation_id: 3, payload: b"set x" });
    assert_eq!(SessionEntry::decode(&[]), Err(SessionDecodeError::Truncated { need: 17, have: 0 }));
    assert_eq!(SessionEntry::decode(&bytes[..20]), Err(SessionDecodeError::Truncated { need: 25, have: 20 }));
    assert_eq!(SessionEntry::decode(&[11; 30]), Err(SessionDecodeError::UnknownKind(11)));
    assert_eq!(SessionEntry::decode(&message(7, 0, 1)), Err(SessionDecodeError::ZeroCorrelation));
    assert!(SessionDecodeError::UnknownKind(11).to_string().contains("unknown session entry kind 11"));
}

#[test]
fn a_message_applies_once_whatever_the_resends_and_a_gap_names_the_next() {
    let mut t = table(4);
    let mut open = Vec::new();
    SessionEntry::Open { session_id: 1, timestamp_ns: 0 }.encode(&mut open);
    assert_eq!(apply(&mut t, &open), "Opened { session_id: 1 }");
    assert!(apply(&mut t, &message(1, 1, 1)).starts_with("Deliver"));
    assert!(apply(&mut t, &message(1, 2, 2)).starts_with("Deliver"));
    // A client that resends after a failover: 1 and 2 again, then 3.
    assert_eq!(apply(&mut t, &message(1, 1, 3)), "Duplicate { session_id: 1, correlation_id: 1 }");
    assert_eq!(apply(&mut t, &message(1, 2, 3)), "Duplicate { session_id: 1, correlation_id: 2 }");
    assert!(apply(&mut t, &message(1, 3, 3)).starts_with("Deliver"));
    // A message past a gap is refused, naming what to resend from.
    assert_eq!(apply(&mut t, &message(1, 5, 4)), "Refused { session_id: 1, refusal: Gap { expected: 4 } }");
    assert_eq!(t.applied(1), Some(3));
    let counters = t.counters();
    assert_eq!((counters.delivered, counters.duplicates, counters.refused), (3, 2, 1));
}

#[test]
fn opens_past_the_limit_and_entries_of_unknown_sessions_are_refused() {
    let mut t = table(2);
    for id in 1..=3u64 {
        let mut open = Vec::new();
        SessionEntry::Open { session_id: id, timestamp_ns: 0 }.encode(&mut open);
        let result = apply(&mut t, &open);
        if id == 3 {
            assert_eq!(result, "Refused { session_id: 3, refusal: TooManySessions }");
        }
    }
    assert_eq!(t.len(), 2, "a refused open stores nothing");
    assert_eq!(apply(&mut t, &message(9, 1, 1)), "Refused { session_id: 9, refusal: UnknownSession }");
    let mut again = Vec::new();
    SessionEntry::Open { session_id: 1, timestamp_ns: 1 }.encode(&mut again);
    assert_eq!(apply(&mut t, &again), "Refused { session_id: 1, refusal: AlreadyOpen }");
    let mut close = Vec::new();
    SessionEntry::Close { session_id: 1, timestamp_ns: 2 }.encode(&mut close);
    assert_eq!(apply(&mut t, &close), "Closed { session_id: 1, reason: Client, applied: 0 }");
    assert_eq!(t.len(), 1);
}

#[test]
fn a_silent_session_times_out_by_the_leaders_clock_in_the_log() {
    let mut t = table(4);
    for id in [1u64, 2] {
        let mut open = Vec::new();
        SessionEntry::Open { session_id: id, timestamp_ns: 0 }.encode(&mut open);
        apply(&mut t, &open);
    }
    let mut keep = Vec::new();
    SessionEntry::KeepAlive { session_id: 2, timestamp_ns: 8 * SECOND }.encode(&mut keep);
    apply(&mut t, &keep);
    // The next entry, 10 s after session 1's last, closes it; session 2 lives on.
    let mut closed = Vec::new();
    let bytes = message(2, 1, 10 * SECOND);
    let entry = SessionEntry::decode(&bytes).unwrap();
    assert!(matches!(t.apply(&entry, |id, _| closed.push(id)), Applied::Deliver { .. }));
    assert_eq!(closed, vec![1]);
    assert_eq!(t.counters().timed_out, 1);
    assert_eq!(apply(&mut t, &message(1, 1, 10 * SECOND)), "Refused { session_id: 1, refusal: UnknownSession }");
}

/// A failover or a restart of the whole cluster, however long, closes no session: the new leader's
/// term entry restarts every session's silence, and only silence under a leader closes one (then by a
/// tick, the leader's clock alone, with nothing else appended).
#[test]
fn a_leader_term_restarts_every_sessions_silence_and_a_tick_closes_the_silent() {
    let mut t = table(4);
    let mut open = Vec::new();
    SessionEntry::Open { session_id: 1, timestamp_ns: 0 }.encode(&mut open);
    apply(&mut t, &open);
    assert_eq!(t.next_expiry_ns(), 10 * SECOND);
    // The cluster was down for 60 s: the new leader's term comes first, and the client's reconnect after it.
    let mut term = Vec::new();
    SessionEntry::LeaderTerm { leadership_term_id: 2, nonce: 9, timestamp_ns: 60 * SECOND }.encode(&mut term);
    assert_eq!(
        SessionEntry::decode(&term).unwrap(),
        SessionEntry::LeaderTerm { leadership_term_id: 2, nonce: 9, timestamp_ns: 60 * SECOND }
    );
    assert_eq!(apply(&mut t, &term), "LeaderTerm { leadership_term_id: 2 }");
    assert_eq!(t.next_expiry_ns(), 70 * SECOND);
    let mut keep = Vec::new();
    SessionEntry::KeepAlive { session_id: 1, timestamp_ns: 61 * SECOND }.encode(&mut keep);
    assert_eq!(apply(&mut t, &keep), "KeptAlive { session_id: 1 }");
    // Silent under this leader for the timeout: its tick closes the session.
    let mut tick = Vec::new();
    SessionEntry::Tick { timestamp_ns: 71 * SECOND }.encode(&mut tick);
    let mut closed = Vec::new();
    let entry = SessionEntry::decode(&tick).unwrap();
    assert_eq!(t.apply(&entry, |id, _| closed.push(id)), Applied::Ticked);
    assert_eq!((closed, t.len(), t.next_expiry_ns()), (vec![1], 0, i64::MAX));
}

#[test]
fn a_snapshot_restores_the_table_and_a_damaged_one_is_refused() {
    let mut t = table(4);
    let mut open = Vec::new();
    SessionEntry::Open { session_id: 5, timestamp_ns: 0 }.encode(&mut open);
    apply(&mut t, &open);
    apply(&mut t, &message(5, 1, 1));
    let mut bytes = Vec::new();
    t.write_snapshot(&mut bytes).unwrap();
    let mut restored = table(4);
    restored.read_snapshot(&mut bytes.as_slice()).unwrap();
    assert_eq!(restored.applied(5), Some(1));
    assert_eq!(apply(&mut restored, &message(5, 1, 2)), "Duplicate { session_id: 5, correlation_id: 1 }");
    let mut too_many = bytes.clone();
    too_many[8..16].copy_from_slice(&1_000_000u64.to_le_bytes());
    assert!(table(4).read_snapshot(&mut too_many.as_slice()).is_err(), "a count past the limit is refused");
    assert!(table(4).read_snapshot(&mut &b"garbage!"[..]).is_err());
}

proptest! {
    /// Any sequence of entries, decoded or not, builds the same table on two members, and never delivers a
    /// session's correlation id twice or out of order.
    #[test]
    fn two_members_build_the_same_table_and_deliver_each_message_once(
        entries in proptest::collection::vec((0u8..6, 0u64..4, 0u64..6, 0i64..30), 0..200)
    ) {
        let mut a = table(3);
        let mut b = table(3);
        let mut delivered = std::collections::BTreeMap::<u64, u64>::new();
        for (kind, session_id, correlation_id, second) in entries {
            let mut bytes = vec![kind];
            bytes.extend_from_slice(&session_id.to_le_bytes());
            bytes.extend_from_slice(&(second * SECOND).to_le_bytes());
            bytes.extend_from_slice(&correlation_id.to_le_bytes());
            let Ok(entry) = SessionEntry::decode(&bytes) else { continue };
            let first = a.apply(&entry, |_, _| {});
            let second = b.apply(&entry, |_, _| {});
            prop_assert_eq!(first, second);
            if let Applied::Deliver { session_id, correlation_id, .. } = first {
                let last = delivered.entry(session_id).or_insert(0);
                // A reopened session counts from 1 again.
                prop_assert!(correlation_id == *last + 1 || correlation_id == 1);
                *last = correlation_id;
            }
            if let Applied::Opened { session_id } = first {
                delivered.insert(session_id, 0);
            }
        }
        prop_assert_eq!(&a, &b);
        prop_assert!(a.len() <= 3);
    }

    /// Sessions close exactly at the first entry at least a timeout after their last one, as a naive
    /// look at every session on every entry would close them, whatever order the leaders' clocks give
    /// the entries (the table looks only when its bound on the next timeout has passed).
    #[test]
    fn sessions_time_out_exactly_when_a_look_at_every_session_says(
        entries in proptest::collection::vec((1u8..8, 0u64..6, 0i64..40), 0..300)
    ) {
        let mut table = table(6);
        let mut naive = std::collections::BTreeMap::<u64, i64>::new();
        for (kind, session_id, second) in entries {
            let at = second * SECOND;
            let entry = match kind {
                OPEN => SessionEntry::Open { session_id, timestamp_ns: at },
                MESSAGE => SessionEntry::Message { session_id, timestamp_ns: at, correlation_id: 1, payload: b"" },
                KEEP_ALIVE => SessionEntry::KeepAlive { session_id, timestamp_ns: at },
                CLOSE => SessionEntry::Close { session_id, timestamp_ns: at },
                LEADER_TERM => SessionEntry::LeaderTerm { leadership_term_id: 1, nonce: session_id, timestamp_ns: at },
                EVICT => SessionEntry::Evict { session_id, timestamp_ns: at },
                _ => SessionEntry::Tick { timestamp_ns: at },
            };
            // A leader term closes none: it restarts every session's silence.
            let term = matches!(entry, SessionEntry::LeaderTerm { .. });
            let mut expected: Vec<u64> = naive
                .iter()
                .filter(|(_, &last)| !term && at - last >= 10 * SECOND)
                .map(|(&id, _)| id)
                .collect();
            naive.retain(|id, _| !expected.contains(id));
            let mut closed = Vec::new();
            let applied = table.apply(&entry, |id, _| closed.push(id));
            expected.sort();
            prop_assert_eq!(&closed, &expected);
            match applied {
                Applied::Opened { session_id } => {
                    naive.insert(session_id, at);
                }
                Applied::Closed { session_id, .. } => {
                    naive.remove(&session_id);
                }
                Applied::Deliver { session_id, .. } | Applied::Duplicate { session_id, .. } | Applied::KeptAlive { session_id } => {
                    let last = naive.get_mut(&session_id).expect("open");
                    *last = (*last).max(at);
                }
                Applied::Refused { session_id, refusal: Refusal::Gap { .. } } => {
                    let last = naive.get_mut(&session_id).expect("open");
                    *last = (*last).max(at);
                }
                Applied::LeaderTerm { .. } => {
                    for last in naive.values_mut() {
                        *last = (*last).max(at);
                    }
                }
                Applied::Refused { .. } | Applied::Ticked | Applied::Service { .. } | Applied::PushAcked { .. } => {}
            }
            prop_assert_eq!(table.len(), naive.len());
        }
    }
}
