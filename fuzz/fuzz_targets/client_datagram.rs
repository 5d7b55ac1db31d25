//! Fuzz target `client_datagram`: any bytes as a remote client's datagram (what a member's client
//! endpoint reads off the network from anyone allowed to reach it), through the client protocol's
//! parser, and as a session entry through its decoder and the session table.
//!
//! Nothing may panic on any input, and these invariants must hold:
//! - `Records::parse` accepts a datagram only when every record lies within it and exactly `count`
//!   records fill it; each record's payload is `length` bytes of the input, after its header;
//! - the records written again with a `DatagramWriter` parse back to the same records;
//! - `SessionEntry::decode` of the same bytes, when it succeeds, encodes back to the bytes it read (its
//!   kind's header, and for a message the payload to the end);
//! - the session table applies any decoded entry without panicking and never holds more sessions than
//!   its limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quorumcast::cluster_client::wire::{DatagramWriter, Records, DATAGRAM_HEADER_LENGTH};
use quorumcast::session::{SessionConfig, SessionEntry, SessionTable};

fuzz_target!(|datagram: &[u8]| {
    check_records(datagram);
    check_session_entry(datagram);
});

fn check_records(datagram: &[u8]) {
    let Ok(records) = Records::parse(datagram) else {
        return;
    };
    let all: Vec<_> = records.collect();
    let start = datagram.as_ptr() as usize;
    for (header, payload) in &all {
        assert_eq!(header.length as usize, payload.len());
        let at = payload.as_ptr() as usize;
        assert!(
            payload.is_empty()
                || (at >= start + DATAGRAM_HEADER_LENGTH && at + payload.len() <= start + datagram.len())
        );
    }
    // Room for the padding the input may leave off its last record.
    let mut writer = DatagramWriter::new(datagram.len() + 8);
    if all.iter().all(|(header, payload)| writer.push(*header, payload)) {
        let again: Vec<_> = Records::parse(writer.finish()).expect("what the writer writes parses").collect();
        assert_eq!(again.len(), all.len());
        for ((a, pa), (b, pb)) in all.iter().zip(&again) {
            assert_eq!(
                (a.kind, a.code, a.session_id, a.correlation_id, a.value),
                (b.kind, b.code, b.session_id, b.correlation_id, b.value)
            );
            assert_eq!(pa, pb);
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
        let _ = table.apply(&entry, |_| {});
        assert!(table.len() <= 2);
    }
}
