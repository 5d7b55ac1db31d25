//! Writes the seed corpus of the `datagram` target into `fuzz/seeds/`: one valid datagram per frame
//! type, plus a multi-frame datagram, each built with quorumcast's own encoders.
//!
//! Run from `fuzz/`: `cargo run --example make_seeds` (the files are committed; rerun after a change
//! to the wire format).

use std::path::Path;

use quorumcast::cluster::frames::{AppendPositionFrame, CommitPositionFrame};
use quorumcast::frame::{
    align_frame, encode_data, encode_heartbeat, encode_pad, DataHeader, NakFrame, RttmFrame, SetupFrame,
    StatusMessageFrame, EOS_FLAG, SETUP_GROUP_FLAG, SM_SEND_SETUP_FLAG, UNFRAGMENTED,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    std::fs::create_dir_all(&dir)?;
    let header = DataHeader { reserved_value: 4096, ..DataHeader::new(7, 1001, 3, 64, UNFRAGMENTED) };
    let mut buf = vec![0u8; 1408];

    let mut seeds: Vec<(&str, Vec<u8>)> = Vec::new();
    let n = encode_data(&mut buf, &header, b"hello, quorum")?;
    seeds.push(("data", buf[..n].to_vec()));
    let n = encode_pad(&mut buf, &header, 1024)?;
    seeds.push(("pad", buf[..n].to_vec()));
    let n = encode_heartbeat(&mut buf, &DataHeader { flags: UNFRAGMENTED | EOS_FLAG, ..header })?;
    seeds.push(("heartbeat_eos", buf[..n].to_vec()));
    let setup = SetupFrame {
        flags: SETUP_GROUP_FLAG,
        term_offset: 64,
        session_id: 7,
        stream_id: 1001,
        initial_term_id: 0,
        active_term_id: 3,
        term_length: 65536,
        mtu: 1408,
        ttl: 0,
        ..SetupFrame::default()
    };
    seeds.push(("setup", encoded(|b| setup.encode(b))?));
    let mut sm = StatusMessageFrame {
        flags: SM_SEND_SETUP_FLAG,
        session_id: 7,
        stream_id: 1001,
        consumption_term_id: 3,
        consumption_term_offset: 64,
        receiver_window: 131072,
        ..StatusMessageFrame::default()
    };
    sm.set_receiver_id(42);
    seeds.push(("status_message", encoded(|b| sm.encode(b))?));
    seeds.push(("status_message_group_tag", encoded(|b| sm.encode_with_group_tag(b, 99))?));
    let nak =
        NakFrame { session_id: 7, stream_id: 1001, term_id: 3, term_offset: 64, length: 1408, ..NakFrame::default() };
    seeds.push(("nak", encoded(|b| nak.encode(b))?));
    let rttm = RttmFrame { session_id: 7, stream_id: 1001, echo_timestamp: 123_456, ..RttmFrame::default() };
    seeds.push(("rttm", encoded(|b| rttm.encode(b))?));
    let append = AppendPositionFrame {
        session_id: 7,
        stream_id: 1001,
        leadership_term_id: 2,
        log_position: 1 << 20,
        member_id: 1,
        ..AppendPositionFrame::default()
    };
    seeds.push(("append_position", encoded(|b| append.encode(b))?));
    let commit = CommitPositionFrame {
        session_id: 7,
        stream_id: 1001,
        leadership_term_id: 2,
        log_position: 1 << 20,
        leader_member_id: 0,
        ..CommitPositionFrame::default()
    };
    seeds.push(("commit_position", encoded(|b| commit.encode(b))?));
    seeds.push(("multi_frame", multi_frame(&header)?));

    for (name, bytes) in &seeds {
        std::fs::write(dir.join(name), bytes)?;
    }
    println!("wrote {} seeds to {}", seeds.len(), dir.display());
    Ok(())
}

/// The bytes an encoder writes into a fresh buffer.
fn encoded(
    encode: impl FnOnce(&mut [u8]) -> Result<usize, quorumcast::frame::EncodeError>,
) -> Result<Vec<u8>, quorumcast::frame::EncodeError> {
    let mut buf = [0u8; 64];
    let n = encode(&mut buf)?;
    Ok(buf[..n].to_vec())
}

/// A datagram as a sender batches it: three data frames (the middle one fragmented), each padded to
/// 32, then a commit position, then a last data frame left unpadded.
fn multi_frame(header: &DataHeader) -> Result<Vec<u8>, quorumcast::frame::EncodeError> {
    let mut buf = vec![0u8; 1408];
    let mut at = 0;
    let mut term_offset = header.term_offset;
    for (flags, payload) in [(UNFRAGMENTED, &[1u8; 20][..]), (0x80, &[2; 100][..]), (0x40, &[3; 5][..])] {
        let n = encode_data(&mut buf[at..], &DataHeader { term_offset, flags, ..*header }, payload)?;
        term_offset += align_frame(n) as i32;
        at += align_frame(n);
    }
    let commit = CommitPositionFrame { session_id: 7, stream_id: 1001, log_position: 256, ..Default::default() };
    at += align_frame(commit.encode(&mut buf[at..])?);
    at += encode_data(&mut buf[at..], &DataHeader { term_offset, ..*header }, &[4; 9])?;
    buf.truncate(at);
    Ok(buf)
}
