//! Fuzz target `frames_roundtrip`: builds a datagram of valid frames from structured input
//! ([`arbitrary`]), encodes them the way a sender lays a datagram out (each frame at a multiple of 32,
//! the last one unpadded), and checks that `frames` reads back exactly the frames written, in order,
//! with nothing left over.
//!
//! Field values are arbitrary except where the wire format constrains them: `frame_length`, version
//! and type are set by the encoders, data-like `term_offset`s are made non-negative multiples of 32
//! with room for the frame's end in i32, PAD lengths are multiples of 32, and the whole datagram stays
//! within [`MAX_UDP_PAYLOAD_LENGTH`].
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use quorumcast_consensus::frames::{AppendPositionFrame, CommitPositionFrame};
use quorumcast_driver::frame::{
    align_frame, encode_data, encode_heartbeat, encode_pad, frames, BehindRetainedFrame, DataHeader, Frame, NakFrame,
    RttmFrame, SetupFrame, StatusMessageFrame, MAX_UDP_PAYLOAD_LENGTH, TYPE_DATA, TYPE_PAD,
};

/// Fields of a data-like header that the input chooses.
#[derive(Arbitrary, Debug)]
struct DataFields {
    flags: u8,
    term_slot: u32,
    session_id: i32,
    stream_id: i32,
    term_id: i32,
    reserved_value: i64,
}

impl DataFields {
    /// A header whose `term_offset` is a multiple of 32 in `0..=i32::MAX - room`, rounded down.
    fn header(&self, room: usize) -> DataHeader {
        let max_slot = (i32::MAX as usize - room) / 32;
        let term_offset = (self.term_slot as usize % (max_slot + 1)) * 32;
        DataHeader {
            reserved_value: self.reserved_value,
            ..DataHeader::new(self.session_id, self.stream_id, self.term_id, term_offset as i32, self.flags)
        }
    }
}

/// One frame to write.
#[derive(Arbitrary, Debug)]
enum Spec {
    Data { fields: DataFields, payload: Vec<u8> },
    Pad { fields: DataFields, slots: u16 },
    Heartbeat { fields: DataFields },
    Setup { flags: u8, words: [i32; 8] },
    StatusMessage { flags: u8, words: [i32; 5], receiver_id: i64, group_tag: Option<i64> },
    Nak { flags: u8, words: [i32; 5] },
    Rttm { flags: u8, words: [i32; 2], longs: [i64; 3] },
    AppendPosition { flags: u8, words: [i32; 3], longs: [i64; 2] },
    CommitPosition { flags: u8, words: [i32; 3], longs: [i64; 2] },
}

/// What the walk must yield for one written frame (a payload by its range in the datagram and its bytes).
#[derive(Debug, PartialEq)]
enum Expected {
    Data(DataHeader, std::ops::Range<usize>, Vec<u8>),
    Pad(DataHeader),
    Heartbeat(DataHeader),
    Setup(SetupFrame),
    StatusMessage(StatusMessageFrame, Option<i64>),
    Nak(NakFrame),
    Rttm(RttmFrame),
    AppendPosition(AppendPositionFrame),
    CommitPosition(CommitPositionFrame),
    BehindRetained(BehindRetainedFrame),
}

fuzz_target!(|specs: Vec<Spec>| {
    let mut datagram = vec![0u8; MAX_UDP_PAYLOAD_LENGTH];
    let mut expected = Vec::new();
    let mut at = 0usize;
    let mut end = 0usize;
    for spec in &specs {
        let Some((length, frame)) = write(&mut datagram[at..], at, spec) else { break };
        expected.push(frame);
        end = at + length;
        at = align_frame(end);
        if at >= datagram.len() {
            break;
        }
    }
    let datagram = &datagram[..end];
    let walked: Vec<Expected> = frames(datagram).map(|item| observed(datagram, item.expect("a valid frame"))).collect();
    assert_eq!(walked, expected);
});

/// Writes `spec` at the start of `dst` (which starts `at` bytes into the datagram); returns the bytes
/// written and the frame the walk must yield, or `None` when it does not fit.
fn write(dst: &mut [u8], at: usize, spec: &Spec) -> Option<(usize, Expected)> {
    match spec {
        Spec::Data { fields, payload } => {
            let header = fields.header(32 + payload.len());
            let length = encode_data(dst, &header, payload).ok()?;
            let full = DataHeader { frame_length: length as i32, ..header };
            Some((length, Expected::Data(full, at + 32..at + length, payload.clone())))
        }
        Spec::Pad { fields, slots } => {
            let pad_length = (usize::from(*slots) + 1) * 32;
            let header = fields.header(pad_length);
            let length = encode_pad(dst, &header, pad_length).ok()?;
            let full = DataHeader { frame_length: pad_length as i32, frame_type: TYPE_PAD, ..header };
            Some((length, Expected::Pad(full)))
        }
        Spec::Heartbeat { fields } => {
            let header = fields.header(0);
            Some((encode_heartbeat(dst, &header).ok()?, Expected::Heartbeat(header)))
        }
        Spec::Setup { flags, words: [w0, w1, w2, w3, w4, w5, w6, w7] } => {
            let frame = SetupFrame {
                flags: *flags,
                term_offset: *w0,
                session_id: *w1,
                stream_id: *w2,
                initial_term_id: *w3,
                active_term_id: *w4,
                term_length: *w5,
                mtu: *w6,
                ttl: *w7,
                ..SetupFrame::default()
            };
            Some((frame.encode(dst).ok()?, Expected::Setup(frame)))
        }
        Spec::StatusMessage { flags, words: [w0, w1, w2, w3, w4], receiver_id, group_tag } => {
            let mut frame = StatusMessageFrame {
                flags: *flags,
                session_id: *w0,
                stream_id: *w1,
                consumption_term_id: *w2,
                consumption_term_offset: *w3,
                receiver_window: *w4,
                ..StatusMessageFrame::default()
            };
            frame.set_receiver_id(*receiver_id);
            match group_tag {
                None => Some((frame.encode(dst).ok()?, Expected::StatusMessage(frame, None))),
                Some(tag) => {
                    let length = frame.encode_with_group_tag(dst, *tag).ok()?;
                    let tagged = StatusMessageFrame { frame_length: length as i32, ..frame };
                    Some((length, Expected::StatusMessage(tagged, Some(*tag))))
                }
            }
        }
        Spec::Nak { flags, words: [w0, w1, w2, w3, w4] } => {
            let frame = NakFrame {
                flags: *flags,
                session_id: *w0,
                stream_id: *w1,
                term_id: *w2,
                term_offset: *w3,
                length: *w4,
                ..NakFrame::default()
            };
            Some((frame.encode(dst).ok()?, Expected::Nak(frame)))
        }
        Spec::Rttm { flags, words: [w0, w1], longs: [l0, l1, l2] } => {
            let frame = RttmFrame {
                flags: *flags,
                session_id: *w0,
                stream_id: *w1,
                echo_timestamp: *l0,
                reception_delta: *l1,
                receiver_id: *l2,
                ..RttmFrame::default()
            };
            Some((frame.encode(dst).ok()?, Expected::Rttm(frame)))
        }
        Spec::AppendPosition { flags, words: [w0, w1, w2], longs: [l0, l1] } => {
            let frame = AppendPositionFrame {
                flags: *flags,
                session_id: *w0,
                stream_id: *w1,
                leadership_term_id: *l0,
                log_position: *l1,
                member_id: *w2,
                ..AppendPositionFrame::default()
            };
            Some((frame.encode(dst).ok()?, Expected::AppendPosition(frame)))
        }
        Spec::CommitPosition { flags, words: [w0, w1, w2], longs: [l0, l1] } => {
            let frame = CommitPositionFrame {
                flags: *flags,
                session_id: *w0,
                stream_id: *w1,
                leadership_term_id: *l0,
                log_position: *l1,
                leader_member_id: *w2,
                ..CommitPositionFrame::default()
            };
            Some((frame.encode(dst).ok()?, Expected::CommitPosition(frame)))
        }
    }
}

/// The walk's frame in the form of [`Expected`], the payload located by its range in `datagram`.
fn observed(datagram: &[u8], frame: Frame<'_>) -> Expected {
    match frame {
        Frame::Data { header, payload } => {
            assert_eq!(header.frame_type, TYPE_DATA);
            let start = payload.as_ptr() as usize - datagram.as_ptr() as usize;
            Expected::Data(header, start..start + payload.len(), payload.to_vec())
        }
        Frame::Pad(header) => Expected::Pad(header),
        Frame::Heartbeat(header) => Expected::Heartbeat(header),
        Frame::Setup(f) => Expected::Setup(f),
        Frame::StatusMessage { frame, group_tag } => Expected::StatusMessage(frame, group_tag),
        Frame::Nak(f) => Expected::Nak(f),
        Frame::Rttm(f) => Expected::Rttm(f),
        // The cluster's frames travel as the media's extension frames.
        Frame::Extension { header, bytes } => {
            match (AppendPositionFrame::read(&header, bytes), CommitPositionFrame::read(&header, bytes)) {
                (Some(f), _) => Expected::AppendPosition(f),
                (_, Some(f)) => Expected::CommitPosition(f),
                _ => panic!("an extension frame that the spec did not make"),
            }
        }
        Frame::BehindRetained(f) => Expected::BehindRetained(f),
    }
}
