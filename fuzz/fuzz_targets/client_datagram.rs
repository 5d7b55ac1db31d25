//! Fuzz target `client_datagram`: any bytes as a remote client's datagram (what a member's client
//! endpoint reads off the network from anyone allowed to reach it), through the client protocol's
//! parser, and as a session entry through its decoder and the session table.
//!
//! Nothing may panic on any input, and these invariants must hold:
//! - `Datagram::parse` never reads past the input, and a datagram whose tag does not verify under a key
//!   is never taken as verified (a fuzzer cannot forge a BLAKE3 tag, so a tagged input fails
//!   `verify` unless the writer sealed it);
//! - `Datagram::records` accepts a datagram only when every record lies within it, exactly `count`
//!   records fill it, and a session's datagram carries only that session's records; each record's
//!   payload is `length` bytes of the input, after its header;
//! - the records written again with a `DatagramWriter`, sealed with a key, verify under that key, not
//!   under another, and parse back to the same records and the same header;
//! - a `ReplayWindow` fed the input's bytes as sequence numbers accepts none twice;
//! - `SessionEntry::decode` of the same bytes, when it succeeds, encodes back to the bytes it read (its
//!   kind's header, and for a message the payload to the end);
//! - the session table applies any decoded entry without panicking and never holds more sessions than
//!   its limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quorumcast::unstable::credentials::ReplayWindow;
use quorumcast::unstable::session::{SessionConfig, SessionEntry, SessionTable};
use quorumcast::unstable::wire::{Datagram, DatagramWriter, Seal, DATAGRAM_HEADER_LENGTH};
use quorumcast_driver::media::auth::AuthKey;

fuzz_target!(|datagram: &[u8]| {
    check_records(datagram);
    check_replay_window(datagram);
    check_session_entry(datagram);
});

fn check_records(datagram: &[u8]) {
    let key = AuthKey::derive("fuzz", b"client datagram");
    let other = AuthKey::derive("fuzz", b"another key");
    let Ok(parsed) = Datagram::parse(datagram) else {
        return;
    };
    assert!(!parsed.verify(&key) && !parsed.verify(&other), "no input carries a tag it was not sealed with");
    let Ok(records) = parsed.records() else {
        return;
    };
    let all: Vec<_> = records.collect();
    let start = datagram.as_ptr() as usize;
    for (header, payload) in &all {
        assert_eq!(header.length as usize, payload.len());
        if parsed.header.session_id != 0 {
            assert_eq!(header.session_id, parsed.header.session_id, "a session's datagram holds only its records");
        }
        let at = payload.as_ptr() as usize;
        assert!(
            payload.is_empty()
                || (at >= start + DATAGRAM_HEADER_LENGTH && at + payload.len() <= start + datagram.len())
        );
    }
    // Room for the padding the input may leave off its last record, and for a tag.
    let mut writer = DatagramWriter::new(datagram.len() + 8 + 16);
    if !all.iter().all(|(header, payload)| writer.push(*header, payload)) {
        return;
    }
    let seal = Seal {
        session_id: parsed.header.session_id,
        key_id: parsed.header.key_id,
        sequence: parsed.header.sequence,
        key: Some(&key),
    };
    let written = writer.finish(seal).to_vec();
    let again = Datagram::parse(&written).expect("what the writer writes parses");
    assert!(again.verify(&key), "a sealed datagram verifies under its key");
    assert!(!again.verify(&other), "and under no other");
    assert_eq!(
        (again.header.session_id, again.header.key_id, again.header.sequence),
        (parsed.header.session_id, parsed.header.key_id, parsed.header.sequence)
    );
    let again: Vec<_> = again.records().expect("what the writer writes holds whole records").collect();
    assert_eq!(again.len(), all.len());
    for ((a, pa), (b, pb)) in all.iter().zip(&again) {
        assert_eq!(
            (a.kind, a.code, a.session_id, a.correlation_id, a.value),
            (b.kind, b.code, b.session_id, b.correlation_id, b.value)
        );
        assert_eq!(pa, pb);
    }
}

fn check_replay_window(bytes: &[u8]) {
    let mut window = ReplayWindow::starting_after(0);
    let mut accepted = std::collections::BTreeSet::new();
    for chunk in bytes.chunks(2) {
        let sequence = u64::from(u16::from_le_bytes([chunk[0], *chunk.get(1).unwrap_or(&0)]));
        if window.accept(sequence) {
            assert!(accepted.insert(sequence), "sequence {sequence} accepted twice");
            assert!(sequence > 0, "nothing at or below the floor is accepted");
        }
    }
}

fn check_session_entry(bytes: &[u8]) {
    let Ok(entry) = SessionEntry::decode(bytes) else {
        return;
    };
    let mut encoded = Vec::new();
    entry.encode(&mut encoded);
    assert_eq!(&bytes[..encoded.len()], &encoded[..], "an entry encodes back to the bytes it was read from");
    if let SessionEntry::Message { .. } = entry {
        assert_eq!(encoded.len(), bytes.len(), "a message's payload runs to the end");
    }
    let mut table = SessionTable::new(SessionConfig { max_sessions: 2, timeout_ns: 1_000 });
    for _ in 0..3 {
        let _ = table.apply(&entry, |_, _| {});
        assert!(table.len() <= 2);
    }
}
