//! Property tests of the frame codec: no input makes `parse` or `frames` panic, valid frames round-trip,
//! mutated datagrams give frames or typed errors, and the walk never yields bytes it was not given.

use proptest::prelude::*;
use proptest::sample::Index;
use quorumcast_consensus::frames::{
    AppendPositionFrame, CommitPositionFrame, TYPE_APPEND_POSITION, TYPE_COMMIT_POSITION,
};
use quorumcast_driver::frame::*;

/// A valid frame to encode, with everything that varies.
#[derive(Clone, Debug)]
enum Spec {
    Data(DataHeader, Vec<u8>),
    Pad(DataHeader, usize),
    Heartbeat(DataHeader),
    Setup(SetupFrame),
    Sm(StatusMessageFrame, Option<i64>),
    Nak(NakFrame),
    Rttm(RttmFrame),
    Append(AppendPositionFrame),
    Commit(CommitPositionFrame),
}

fn data_header() -> impl Strategy<Value = DataHeader> {
    (any::<u8>(), any::<[i32; 3]>(), 0..(1i32 << 25), any::<i64>()).prop_map(|(flags, ids, slot, reserved)| {
        DataHeader { reserved_value: reserved, ..DataHeader::new(ids[0], ids[1], ids[2], slot * 32, flags) }
    })
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        4 => (data_header(), prop::collection::vec(any::<u8>(), 0..=400)).prop_map(|(h, p)| Spec::Data(h, p)),
        1 => (data_header(), 1usize..=4096).prop_map(|(h, n)| Spec::Pad(h, n * 32)),
        1 => data_header().prop_map(Spec::Heartbeat),
        1 => (any::<u8>(), any::<[i32; 8]>()).prop_map(|(flags, v)| Spec::Setup(SetupFrame {
            flags, term_offset: v[0], session_id: v[1], stream_id: v[2], initial_term_id: v[3],
            active_term_id: v[4], term_length: v[5], mtu: v[6], ttl: v[7], ..SetupFrame::default()
        })),
        1 => (any::<u8>(), any::<[i32; 5]>(), any::<i64>(), any::<Option<i64>>()).prop_map(|(flags, v, id, tag)| {
            let mut sm = StatusMessageFrame {
                flags, session_id: v[0], stream_id: v[1], consumption_term_id: v[2],
                consumption_term_offset: v[3], receiver_window: v[4], ..StatusMessageFrame::default()
            };
            sm.set_receiver_id(id);
            Spec::Sm(sm, tag)
        }),
        1 => (any::<u8>(), any::<[i32; 5]>()).prop_map(|(flags, v)| Spec::Nak(NakFrame {
            flags, session_id: v[0], stream_id: v[1], term_id: v[2], term_offset: v[3], length: v[4],
            ..NakFrame::default()
        })),
        1 => (any::<u8>(), any::<[i32; 2]>(), any::<[i64; 3]>()).prop_map(|(flags, v, w)| Spec::Rttm(RttmFrame {
            flags, session_id: v[0], stream_id: v[1], echo_timestamp: w[0], reception_delta: w[1],
            receiver_id: w[2], ..RttmFrame::default()
        })),
        1 => (any::<u8>(), any::<[i32; 3]>(), any::<[i64; 2]>()).prop_map(|(flags, v, w)| {
            Spec::Append(AppendPositionFrame {
                flags, session_id: v[0], stream_id: v[1], member_id: v[2], leadership_term_id: w[0],
                log_position: w[1], ..AppendPositionFrame::default()
            })
        }),
        1 => (any::<u8>(), any::<[i32; 3]>(), any::<[i64; 2]>()).prop_map(|(flags, v, w)| {
            Spec::Commit(CommitPositionFrame {
                flags, session_id: v[0], stream_id: v[1], leader_member_id: v[2], leadership_term_id: w[0],
                log_position: w[1], ..CommitPositionFrame::default()
            })
        }),
    ]
}

/// Encodes `spec` at the start of `dst`, returning the bytes it occupies on the wire (unaligned).
fn encode(spec: &Spec, dst: &mut [u8]) -> usize {
    match spec {
        Spec::Data(h, p) => encode_data(dst, h, p),
        Spec::Pad(h, n) => encode_pad(dst, h, *n),
        Spec::Heartbeat(h) => encode_heartbeat(dst, h),
        Spec::Setup(f) => f.encode(dst),
        Spec::Sm(f, None) => f.encode(dst),
        Spec::Sm(f, Some(tag)) => f.encode_with_group_tag(dst, *tag),
        Spec::Nak(f) => f.encode(dst),
        Spec::Rttm(f) => f.encode(dst),
        Spec::Append(f) => f.encode(dst),
        Spec::Commit(f) => f.encode(dst),
    }
    .expect("valid specs encode into a large enough buffer")
}

/// The frame `parse` must return for `spec`.
fn expected(spec: &Spec) -> Frame<'_> {
    match spec {
        Spec::Data(h, p) => {
            let frame_length = (DATA_HEADER_LENGTH + p.len()) as i32;
            Frame::Data { header: DataHeader { frame_length, frame_type: TYPE_DATA, ..*h }, payload: p }
        }
        Spec::Pad(h, n) => Frame::Pad(DataHeader { frame_length: *n as i32, frame_type: TYPE_PAD, ..*h }),
        Spec::Heartbeat(h) => Frame::Heartbeat(DataHeader { frame_length: 0, frame_type: TYPE_DATA, ..*h }),
        Spec::Setup(f) => Frame::Setup(*f),
        Spec::Sm(f, tag) => {
            let frame_length = if tag.is_some() { STATUS_MESSAGE_WITH_GROUP_TAG_LENGTH } else { STATUS_MESSAGE_LENGTH };
            Frame::StatusMessage {
                frame: StatusMessageFrame { frame_length: frame_length as i32, ..*f },
                group_tag: *tag,
            }
        }
        Spec::Nak(f) => Frame::Nak(*f),
        Spec::Rttm(f) => Frame::Rttm(*f),
        // The cluster's frames travel as the media's extension frames: the header, and the whole bytes.
        Spec::Append(f) => extension(bytemuck::bytes_of(f)),
        Spec::Commit(f) => extension(bytemuck::bytes_of(f)),
    }
}

/// The extension frame `bytes` are.
fn extension(bytes: &[u8]) -> Frame<'_> {
    Frame::Extension { header: bytemuck::pod_read_unaligned(&bytes[..EXTENSION_HEADER_LENGTH]), bytes }
}

/// Lays `specs` out as one datagram: each frame at a 32-byte boundary, the last unpadded.
fn datagram(specs: &[Spec]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut scratch = vec![0u8; 8192];
    for spec in specs {
        out.resize(align_frame(out.len()), 0);
        let length = encode(spec, &mut scratch);
        out.extend_from_slice(&scratch[..length]);
    }
    out
}

/// Walks `d` with `parse` and `frames`, asserting the invariants that hold for any input.
fn check_walk(d: &[u8]) {
    let first = parse(d);
    let base = d.as_ptr() as usize;
    let end = base + d.len();
    let mut payload_total = 0usize;
    let mut last_payload_end = base;
    let mut count = 0usize;
    let mut walk = frames(d);
    while let Some(item) = walk.next() {
        count += 1;
        assert!(count <= d.len() / FRAME_ALIGNMENT + 1, "the walk advances at least 32 bytes per frame");
        if count == 1 {
            assert_eq!(item, first, "the first item of the walk is what parse returns");
        }
        match item {
            Ok(frame) => {
                if let Frame::Data { header, payload } = frame {
                    let start = payload.as_ptr() as usize;
                    assert!(
                        start >= last_payload_end && start + payload.len() <= end,
                        "payload within the datagram, in order"
                    );
                    assert_eq!(payload.len() + DATA_HEADER_LENGTH, header.frame_length as usize);
                    last_payload_end = start + payload.len();
                    payload_total += payload.len();
                }
                assert!(frame.wire_length() <= d.len());
            }
            Err(error) => {
                assert!(!error.to_string().is_empty());
                assert!(walk.remaining().is_empty(), "the walk stops at the first error");
            }
        }
    }
    assert!(payload_total <= d.len());
    if d.is_empty() {
        assert_eq!(count, 0);
    }
}

/// Random bytes, with some 32-byte slots given version 0 and a known type so the walk gets past the header.
fn plausible_bytes() -> impl Strategy<Value = Vec<u8>> {
    let types =
        [TYPE_PAD, TYPE_DATA, TYPE_NAK, TYPE_SM, TYPE_SETUP, TYPE_RTTM, TYPE_APPEND_POSITION, TYPE_COMMIT_POSITION];
    (prop::collection::vec(any::<u8>(), 0..=9000), prop::collection::vec((any::<Index>(), 0..types.len()), 0..64))
        .prop_map(move |(mut bytes, patches)| {
            let slots = bytes.len() / FRAME_ALIGNMENT;
            for (slot, kind) in patches {
                if slots == 0 {
                    break;
                }
                let at = slot.index(slots) * FRAME_ALIGNMENT;
                bytes[at + VERSION_OFFSET] = CURRENT_VERSION;
                bytes[at + TYPE_OFFSET..at + TYPE_OFFSET + 2].copy_from_slice(&types[kind].to_le_bytes());
                bytes[at + 3] &= 0x7F; // a non-negative frame_length
            }
            bytes
        })
}

#[derive(Clone, Debug)]
enum Mutation {
    Set(Index, u8),
    Flip(Index, u8),
    Truncate(Index),
    Extend(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        3 => (any::<Index>(), 0u8..8).prop_map(|(i, bit)| Mutation::Flip(i, 1 << bit)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..100).prop_map(Mutation::Extend),
    ]
}

fn apply(bytes: &mut Vec<u8>, mutation: &Mutation) {
    let len = bytes.len();
    match mutation {
        Mutation::Set(i, b) if len > 0 => bytes[i.index(len)] = *b,
        Mutation::Flip(i, mask) if len > 0 => bytes[i.index(len)] ^= mask,
        Mutation::Truncate(i) => bytes.truncate(i.index(len + 1)),
        Mutation::Extend(extra) => bytes.extend_from_slice(extra),
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// (a) Arbitrary bytes never make `parse` or the walk panic.
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..=9000)) {
        check_walk(&bytes);
    }

    /// (a) Bytes with plausible headers get deeper into the checks and still never panic.
    #[test]
    fn plausible_bytes_never_panic(bytes in plausible_bytes()) {
        check_walk(&bytes);
    }

    /// (b) Every valid frame round-trips through its encoder and `parse`, at any alignment.
    #[test]
    fn valid_frames_round_trip(spec in spec(), shift in 0usize..8) {
        let mut buf = vec![0u8; 8192];
        let length = encode(&spec, &mut buf[shift..]);
        let bytes = &buf[shift..shift + length];
        let frame = parse(bytes);
        prop_assert_eq!(frame, Ok(expected(&spec)));
        prop_assert_eq!(frame.unwrap().wire_length(), length);
        prop_assert_eq!(frames(bytes).collect::<Vec<_>>(), vec![Ok(expected(&spec))]);
    }

    /// (b) A datagram of several valid frames walks back to exactly those frames.
    #[test]
    fn valid_datagrams_walk_back(specs in prop::collection::vec(spec(), 1..12)) {
        let d = datagram(&specs);
        let walked: Vec<_> = frames(&d).collect();
        let wanted: Vec<_> = specs.iter().map(|s| Ok(expected(s))).collect();
        prop_assert_eq!(walked, wanted);
        check_walk(&d);
    }

    /// (c), (d) Mutated datagrams give frames or typed errors, never a panic, and never more payload than bytes.
    #[test]
    fn mutated_datagrams_never_panic(
        specs in prop::collection::vec(spec(), 1..8),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let mut d = datagram(&specs);
        for m in &mutations {
            apply(&mut d, m);
            check_walk(&d);
        }
    }
}
