//! Round trips and field offsets of every frame, the typed parse errors, data runs and the frame walk.

use super::*;

fn data_header() -> DataHeader {
    DataHeader { reserved_value: 0x0102_0304_0506_0708, ..DataHeader::new(7, 9, 100, 64, UNFRAGMENTED) }
}

fn i32_at(bytes: &[u8], offset: usize) -> i32 {
    i32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap())
}

fn i64_at(bytes: &[u8], offset: usize) -> i64 {
    i64::from_le_bytes(bytes[offset..offset + 8].try_into().unwrap())
}

#[test]
fn framed_lengths() {
    assert_eq!(framed_length(0), 32);
    assert_eq!(framed_length(1), 64);
    assert_eq!(framed_length(32), 64);
    assert_eq!(framed_length(128), 160);
    assert_eq!(framed_length(129), 192);
    assert_eq!(align_frame(0), 0);
    assert_eq!(align_frame(33), 64);
}

#[test]
fn data_round_trip_and_offsets() {
    let mut buf = [0xAAu8; 80];
    let payload = [1u8, 2, 3, 4, 5];
    assert_eq!(encode_data(&mut buf, &data_header(), &payload), Ok(37));
    assert_eq!(i32_at(&buf, FRAME_LENGTH_OFFSET), 37);
    assert_eq!(buf[VERSION_OFFSET], 0);
    assert_eq!(buf[FLAGS_OFFSET], 0xC0);
    assert_eq!(u16::from_le_bytes([buf[TYPE_OFFSET], buf[TYPE_OFFSET + 1]]), TYPE_DATA);
    assert_eq!(i32_at(&buf, 8), 64);
    assert_eq!(i32_at(&buf, 12), 7);
    assert_eq!(i32_at(&buf, 16), 9);
    assert_eq!(i32_at(&buf, 20), 100);
    assert_eq!(i64_at(&buf, 24), 0x0102_0304_0506_0708);
    assert_eq!(&buf[32..37], &payload);
    assert_eq!(buf[37], 0xAA, "bytes after the frame are untouched");
    let expected = DataHeader { frame_length: 37, ..data_header() };
    assert_eq!(parse(&buf[..37]), Ok(Frame::Data { header: expected, payload: &payload }));
    // Trailing bytes are ignored by parse.
    assert_eq!(parse(&buf), Ok(Frame::Data { header: expected, payload: &payload }));
}

#[test]
fn pad_and_heartbeat_round_trip() {
    let mut buf = [0u8; 32];
    assert_eq!(encode_pad(&mut buf, &data_header(), 4096), Ok(32));
    assert_eq!(i32_at(&buf, 0), 4096);
    let pad = parse(&buf).unwrap();
    assert_eq!(pad, Frame::Pad(DataHeader { frame_length: 4096, frame_type: TYPE_PAD, ..data_header() }));
    assert_eq!(pad.wire_length(), 32);
    assert_eq!(encode_pad(&mut buf, &data_header(), 40), Err(EncodeError::BadPadLength { length: 40 }));
    assert_eq!(encode_pad(&mut buf, &data_header(), 0), Err(EncodeError::BadPadLength { length: 0 }));

    let eos = DataHeader { flags: UNFRAGMENTED | EOS_FLAG, ..data_header() };
    assert_eq!(encode_heartbeat(&mut buf, &eos), Ok(32));
    assert_eq!(i32_at(&buf, 0), 0);
    match parse(&buf).unwrap() {
        Frame::Heartbeat(h) => assert!(h.is_end_of_stream() && h.term_offset == 64),
        other => panic!("expected heartbeat, got {other:?}"),
    }
}

#[test]
fn setup_round_trip_and_offsets() {
    let setup = SetupFrame {
        flags: SETUP_GROUP_FLAG,
        term_offset: 96,
        session_id: 1,
        stream_id: 2,
        initial_term_id: 3,
        active_term_id: 4,
        term_length: 65536,
        mtu: 1408,
        ttl: 8,
        ..SetupFrame::default()
    };
    let mut buf = [0u8; 40];
    assert_eq!(setup.encode(&mut buf), Ok(40));
    assert_eq!((i32_at(&buf, 0), buf[5], i32_at(&buf, 8), i32_at(&buf, 12)), (40, 0x40, 96, 1));
    assert_eq!((i32_at(&buf, 16), i32_at(&buf, 20), i32_at(&buf, 24)), (2, 3, 4));
    assert_eq!((i32_at(&buf, 28), i32_at(&buf, 32), i32_at(&buf, 36)), (65536, 1408, 8));
    assert_eq!(u16::from_le_bytes([buf[6], buf[7]]), TYPE_SETUP);
    assert_eq!(parse(&buf), Ok(Frame::Setup(setup)));
}

#[test]
fn status_message_round_trip_and_offsets() {
    let mut sm = StatusMessageFrame {
        flags: SM_SEND_SETUP_FLAG,
        session_id: 5,
        stream_id: 6,
        consumption_term_id: 7,
        consumption_term_offset: 128,
        receiver_window: 131072,
        ..StatusMessageFrame::default()
    };
    sm.set_receiver_id(-0x1234_5678_9ABC_DEF0);
    let mut buf = [0u8; 44];
    assert_eq!(sm.encode(&mut buf), Ok(36));
    assert_eq!((i32_at(&buf, 8), i32_at(&buf, 12), i32_at(&buf, 16), i32_at(&buf, 20)), (5, 6, 7, 128));
    assert_eq!(i32_at(&buf, 24), 131072, "receiver_window at 24");
    assert_eq!(i64_at(&buf, 28), -0x1234_5678_9ABC_DEF0, "receiver_id at 28");
    assert_eq!(parse(&buf[..36]), Ok(Frame::StatusMessage { frame: sm, group_tag: None }));
    assert_eq!(sm.receiver_id(), -0x1234_5678_9ABC_DEF0);

    assert_eq!(sm.encode_with_group_tag(&mut buf, 77), Ok(44));
    assert_eq!(i64_at(&buf, 36), 77);
    let tagged = StatusMessageFrame { frame_length: 44, ..sm };
    assert_eq!(parse(&buf), Ok(Frame::StatusMessage { frame: tagged, group_tag: Some(77) }));
}

#[test]
fn nak_rttm_round_trip_and_offsets() {
    let nak = NakFrame { session_id: 1, stream_id: 2, term_id: 3, term_offset: 4, length: 1408, ..NakFrame::default() };
    let mut buf = [0u8; 40];
    assert_eq!(nak.encode(&mut buf), Ok(28));
    assert_eq!((i32_at(&buf, 0), i32_at(&buf, 16), i32_at(&buf, 20), i32_at(&buf, 24)), (28, 3, 4, 1408));
    assert_eq!(parse(&buf[..28]), Ok(Frame::Nak(nak)));

    let rttm = RttmFrame {
        flags: RTTM_REPLY_FLAG,
        session_id: 1,
        stream_id: 2,
        echo_timestamp: 10,
        reception_delta: 20,
        receiver_id: 30,
        ..RttmFrame::default()
    };
    assert_eq!(rttm.encode(&mut buf), Ok(40));
    assert_eq!((i64_at(&buf, 16), i64_at(&buf, 24), i64_at(&buf, 32)), (10, 20, 30));
    assert_eq!(parse(&buf), Ok(Frame::Rttm(rttm)));
}

#[test]
fn extension_frames_are_parsed_to_their_header_and_handed_on_whole() {
    let header = ExtensionHeader {
        frame_length: 40,
        version: CURRENT_VERSION,
        flags: 0,
        frame_type: TYPE_EXTENSION_FIRST + 1,
        session_id: 1,
        stream_id: 2,
    };
    let mut buf = [0u8; 48];
    buf[..16].copy_from_slice(bytemuck::bytes_of(&header));
    buf[16..24].copy_from_slice(&4096i64.to_le_bytes());
    assert_eq!(parse(&buf), Ok(Frame::Extension { header, bytes: &buf[..40] }), "its frame_length bytes");
    assert_eq!(
        parse(&buf[..39]).unwrap_err(),
        FrameError::BadLength {
            frame_type: TYPE_EXTENSION_FIRST + 1,
            frame_length: 40,
            problem: LengthProblem::BeyondDatagram { have: 39 },
        }
    );
    let short = ExtensionHeader { frame_length: 12, ..header };
    buf[..16].copy_from_slice(bytemuck::bytes_of(&short));
    assert!(parse(&buf).is_err(), "shorter than its header");
    let outside = ExtensionHeader { frame_type: 0x7F, ..header };
    buf[..16].copy_from_slice(bytemuck::bytes_of(&outside));
    assert_eq!(parse(&buf), Err(FrameError::UnknownType { frame_type: 0x7F }));
}

#[test]
fn encode_rejects_short_buffers_and_bad_offsets() {
    let mut buf = [0u8; 39];
    assert_eq!(SetupFrame::default().encode(&mut buf), Err(EncodeError::BufferTooShort { need: 40, have: 39 }));
    assert_eq!(encode_data(&mut buf, &data_header(), &[0; 8]), Err(EncodeError::BufferTooShort { need: 40, have: 39 }));
    assert_eq!(
        encode_heartbeat(&mut buf[..31], &data_header()),
        Err(EncodeError::BufferTooShort { need: 32, have: 31 })
    );
    let odd = DataHeader { term_offset: 33, ..data_header() };
    assert_eq!(encode_data(&mut buf, &odd, &[]), Err(EncodeError::BadTermOffset { term_offset: 33 }));
    let mut big = [0u8; 44];
    let need44 = Err(EncodeError::BufferTooShort { need: 44, have: 43 });
    assert_eq!(StatusMessageFrame::default().encode_with_group_tag(&mut big[..43], 1), need44);
}

#[test]
fn parse_errors_are_typed() {
    assert_eq!(parse(&[]), Err(FrameError::Truncated { need: 8, have: 0 }));
    let mut buf = [0u8; 64];
    encode_data(&mut buf, &data_header(), &[9; 16]).unwrap();
    assert_eq!(parse(&buf[..20]), Err(FrameError::Truncated { need: 32, have: 20 }));
    assert_eq!(
        parse(&buf[..40]),
        Err(FrameError::BadLength {
            frame_type: TYPE_DATA,
            frame_length: 48,
            problem: LengthProblem::BeyondDatagram { have: 40 }
        })
    );
    let mut bad = buf;
    bad[4] = 1;
    assert_eq!(parse(&bad), Err(FrameError::BadVersion { version: 1 }));
    let mut bad = buf;
    bad[6] = 0x04;
    assert_eq!(parse(&bad), Err(FrameError::UnknownType { frame_type: TYPE_ERR }));
    let mut bad = buf;
    bad[3] = 0x80;
    assert!(matches!(parse(&bad), Err(FrameError::BadLength { problem: LengthProblem::Negative, .. })));
    let mut bad = buf;
    bad[0] = 31;
    let below = LengthProblem::BelowMinimum { min: 32 };
    assert!(matches!(parse(&bad), Err(FrameError::BadLength { problem, .. }) if problem == below));
    let mut bad = buf;
    bad[8] = 65;
    assert_eq!(parse(&bad), Err(FrameError::BadTermOffset { term_offset: 65 }));
    let mut bad = buf;
    bad[11] = 0x80;
    assert!(matches!(parse(&bad), Err(FrameError::BadTermOffset { .. })));
    // A PAD whose end overflows i32.
    let mut pad = [0u8; 32];
    encode_pad(&mut pad, &DataHeader { term_offset: i32::MAX - 31, ..data_header() }, 64).unwrap();
    assert!(matches!(parse(&pad), Err(FrameError::BadLength { problem: LengthProblem::EndOverflows, .. })));
    // A NAK claiming to be shorter than 28 bytes, and one cut short.
    let mut nak = [0u8; 28];
    NakFrame { frame_length: 20, ..NakFrame::default() }.encode(&mut nak).unwrap();
    assert!(matches!(parse(&nak), Err(FrameError::BadLength { problem: LengthProblem::BelowMinimum { min: 28 }, .. })));
    assert_eq!(parse(&nak[..27]), Err(FrameError::Truncated { need: 28, have: 27 }));
    for error in [FrameError::UnknownType { frame_type: 9 }, FrameError::Truncated { need: 8, have: 1 }] {
        assert!(!error.to_string().is_empty());
    }
}

#[test]
fn iterator_walks_aligned_frames_and_unpadded_last() {
    let mut dgram = [0u8; 256];
    let mut at = 0;
    let h = data_header();
    at += align_frame(encode_data(&mut dgram[at..], &DataHeader { term_offset: 0, ..h }, &[1; 20]).unwrap());
    at += align_frame(encode_data(&mut dgram[at..], &DataHeader { term_offset: 64, ..h }, &[2; 50]).unwrap());
    at += encode_pad(&mut dgram[at..], &DataHeader { term_offset: 160, ..h }, 1024).unwrap();
    assert_eq!(at, 64 + 96 + 32);
    let last = encode_data(&mut dgram[at..], &DataHeader { term_offset: 1184, ..h }, &[3; 1]).unwrap();
    let total = at + last; // 33 bytes of the last frame: unpadded
    let kinds: Vec<_> = frames(&dgram[..total])
        .map(|f| match f.unwrap() {
            Frame::Data { header, payload } => (header.term_offset, payload.len()),
            Frame::Pad(header) => (header.term_offset, usize::MAX),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(kinds, vec![(0, 20), (64, 50), (160, usize::MAX), (1184, 1)]);
}

#[test]
fn iterator_stops_after_error() {
    let mut dgram = [0u8; 96];
    encode_data(&mut dgram, &data_header(), &[1; 4]).unwrap();
    dgram[64 + VERSION_OFFSET] = 0xFF; // the next frame starts at align32(36) = 64
    let mut walk = frames(&dgram);
    assert!(matches!(walk.next(), Some(Ok(Frame::Data { .. }))));
    assert_eq!(walk.next(), Some(Err(FrameError::BadVersion { version: 0xFF })));
    assert_eq!(walk.next(), None);
    assert!(walk.remaining().is_empty());
    assert_eq!(frames(&[]).count(), 0);
    assert_eq!(frames(&[0; 3]).collect::<Vec<_>>(), vec![Err(FrameError::Truncated { need: 8, have: 3 })]);
}

#[test]
fn unaligned_datagrams_parse() {
    let mut storage = [0u8; 200];
    let sm = StatusMessageFrame { session_id: 3, ..StatusMessageFrame::default() };
    for shift in 1..8 {
        sm.encode(&mut storage[shift..]).unwrap();
        assert_eq!(parse(&storage[shift..shift + 36]), Ok(Frame::StatusMessage { frame: sm, group_tag: None }));
        let nak = NakFrame { term_offset: 96, ..NakFrame::default() };
        nak.encode(&mut storage[shift..]).unwrap();
        assert_eq!(parse(&storage[shift..]), Ok(Frame::Nak(nak)));
    }
}

/// Two data frames at `offset` and after it, then optionally a PAD covering `pad` bytes.
fn run_bytes(offset: i32, second_offset: i32, pad: Option<usize>) -> Vec<u8> {
    let mut bytes = vec![0u8; 256];
    let first = DataHeader { reserved_value: 7, ..DataHeader::new(5, 6, 9, offset, UNFRAGMENTED) };
    let n = encode_data(&mut bytes, &first, &[1; 40]).unwrap();
    let second = DataHeader { reserved_value: 11, ..DataHeader::new(5, 6, 9, second_offset, UNFRAGMENTED) };
    let at = align_frame(n);
    let m = encode_data(&mut bytes[at..], &second, &[2; 10]).unwrap();
    let mut end = at + m;
    if let Some(pad) = pad {
        end = at + align_frame(m);
        let header = DataHeader { frame_type: TYPE_PAD, ..DataHeader::new(5, 6, 9, second_offset + 64, 0) };
        end += encode_pad(&mut bytes[end..], &header, pad).unwrap();
    }
    bytes.truncate(end);
    bytes
}

#[test]
fn a_data_run_is_checked_in_one_walk() {
    let run = data_run(&run_bytes(1024, 1024 + 96, Some(4096))).unwrap();
    assert_eq!((run.first.term_offset, run.span, run.max_reserved), (1024, 96 + 64 + 4096, Some(11)));
    let run = data_run(&run_bytes(0, 96, None)).unwrap();
    assert_eq!(run.span, 96 + 64, "the last frame may end unpadded");
    assert!(data_run(&run_bytes(0, 128, None)).is_err(), "a gap inside the run");
    let mut padded = run_bytes(0, 96, Some(64));
    padded.extend_from_slice(&[0; 32]);
    assert!(data_run(&padded).is_err(), "bytes after a PAD");
    let mut other_session = run_bytes(0, 96, None);
    other_session[96 + SESSION_ID_OFFSET] ^= 1;
    assert!(data_run(&other_session).is_err(), "a frame of another session");
    let mut heartbeat = run_bytes(0, 96, None);
    heartbeat[96..100].copy_from_slice(&0i32.to_le_bytes());
    assert!(data_run(&heartbeat).is_err(), "a heartbeat inside a run");
}
