//! Fuzz target `datagram`: any bytes, as a received datagram, through `peek_header`, `parse` and a
//! full `frames` walk.
//!
//! Nothing may panic on any input, and these invariants must hold:
//! - `peek_header` fails exactly when `parse` fails on the common header (short or bad version), and
//!   when `parse` succeeds the frame's type is the one `peek_header` saw;
//! - the walk reads every frame at a multiple of 32 from the start of the datagram (and ends at the
//!   end of the datagram, aligned or not), and its first item is `parse(datagram)`;
//! - every frame it yields is `parse` of the bytes left at that point, lies within them
//!   (`wire_length <= remaining`), and re-encodes to exactly the bytes it was read from (parsing is
//!   lossless);
//! - a `Data` payload lies within the input, starts 32 bytes after its header and has
//!   `frame_length - 32` bytes; heartbeats have `frame_length` 0, PADs at least 32; data-like frames have a
//!   non-negative, 32-aligned `term_offset` whose end fits in i32; control frames are at least their
//!   fixed size;
//! - after an error the walk yields nothing more and `remaining()` is empty;
//! - the walk yields at most `len / 32 + 1` items (it always advances).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quorumcast_driver::frame::{
    frames, parse, peek_header, Frame, FrameError, CURRENT_VERSION, DATA_HEADER_LENGTH, FRAME_ALIGNMENT,
    FRAME_HEADER_LENGTH, STATUS_MESSAGE_LENGTH, STATUS_MESSAGE_WITH_GROUP_TAG_LENGTH, TYPE_DATA, TYPE_PAD,
};

fuzz_target!(|datagram: &[u8]| {
    check_peek_against_parse(datagram);
    check_walk(datagram);
    check_data_run(datagram);
});

/// A data run the receiver would copy in one piece is contiguous whole frames of the datagram: its span
/// covers every byte of it, in 32-byte steps, and it starts where its first frame says.
fn check_data_run(datagram: &[u8]) {
    if let Ok(run) = quorumcast_driver::frame::data_run(datagram) {
        assert!(run.span % FRAME_ALIGNMENT == 0 && run.span >= datagram.len().min(DATA_HEADER_LENGTH));
        assert!(run.first.term_offset >= 0 && run.first.term_offset % FRAME_ALIGNMENT as i32 == 0);
        assert_eq!(bytemuck::bytes_of(&run.first), &datagram[..DATA_HEADER_LENGTH]);
    }
}

/// `peek_header` and `parse` agree on the common header.
fn check_peek_against_parse(datagram: &[u8]) {
    let peeked = peek_header(datagram);
    let parsed = parse(datagram);
    match (&peeked, &parsed) {
        (Ok(header), Ok(frame)) => {
            assert_eq!(header.version, CURRENT_VERSION);
            assert_eq!(header.frame_type, frame.frame_type(), "parse changed the frame type");
        }
        (Err(peek_error), Err(parse_error)) => assert_eq!(peek_error, parse_error),
        (Err(peek_error), Ok(frame)) => panic!("peek failed ({peek_error}) but parse gave {frame:?}"),
        (Ok(_), Err(_)) => {} // The header is fine; the rest of the frame is not.
    }
    if datagram.len() < FRAME_HEADER_LENGTH {
        assert!(matches!(peeked, Err(FrameError::Truncated { need: FRAME_HEADER_LENGTH, .. })));
    }
}

/// Walks every frame, checking each one against the bytes it came from.
fn check_walk(datagram: &[u8]) {
    let limit = datagram.len() / FRAME_ALIGNMENT + 1;
    let mut walk = frames(datagram);
    let mut items = 0usize;
    loop {
        let rest = walk.remaining();
        let Some(item) = walk.next() else {
            assert!(rest.is_empty(), "the walk ended with {} bytes left", rest.len());
            break;
        };
        let start = datagram.len() - rest.len();
        assert_eq!(start % FRAME_ALIGNMENT, 0, "frame at offset {start} is not 32-aligned");
        items += 1;
        assert!(items <= limit, "{items} items from {} bytes", datagram.len());
        if items == 1 {
            assert_eq!(item, parse(datagram), "first item differs from parse");
        }
        match item {
            Ok(frame) => {
                assert_eq!(Ok(frame), parse(rest));
                check_frame(datagram, rest, &frame);
                assert!(walk.remaining().len() < rest.len(), "the walk did not advance");
            }
            Err(error) => {
                assert!(!error.to_string().is_empty());
                assert!(walk.remaining().is_empty(), "bytes left after an error");
                assert_eq!(walk.next(), None, "an item after an error");
                break;
            }
        }
    }
}

/// Invariants of one frame read from the start of `rest`, a suffix of `datagram`.
fn check_frame(datagram: &[u8], rest: &[u8], frame: &Frame<'_>) {
    assert!(frame.wire_length() <= rest.len(), "frame runs past the datagram");
    assert!(frame.wire_length() > 0);
    match frame {
        Frame::Data { header, payload } => {
            assert_eq!(header.frame_type, TYPE_DATA);
            let frame_length = usize::try_from(header.frame_length).expect("negative data frame_length");
            assert!(frame_length >= DATA_HEADER_LENGTH);
            assert_eq!(payload.len(), frame_length - DATA_HEADER_LENGTH, "payload length != frame_length - 32");
            let begin = payload.as_ptr() as usize;
            let input = datagram.as_ptr_range();
            assert!(begin >= input.start as usize && begin + payload.len() <= input.end as usize, "payload outside");
            assert_eq!(begin, rest.as_ptr() as usize + DATA_HEADER_LENGTH, "payload not right after the header");
            check_data_like_offsets(header.term_offset, header.frame_length);
            assert_eq!(bytemuck::bytes_of(header), &rest[..DATA_HEADER_LENGTH]);
        }
        Frame::Pad(header) => {
            assert_eq!(header.frame_type, TYPE_PAD);
            assert!(header.frame_length >= DATA_HEADER_LENGTH as i32);
            check_data_like_offsets(header.term_offset, header.frame_length);
            assert_eq!(bytemuck::bytes_of(header), &rest[..DATA_HEADER_LENGTH]);
        }
        Frame::Heartbeat(header) => {
            assert_eq!((header.frame_type, header.frame_length), (TYPE_DATA, 0));
            check_data_like_offsets(header.term_offset, 0);
            assert_eq!(bytemuck::bytes_of(header), &rest[..DATA_HEADER_LENGTH]);
        }
        Frame::StatusMessage { frame: sm, group_tag } => {
            let length = sm.frame_length as usize;
            assert!(length >= STATUS_MESSAGE_LENGTH);
            assert_eq!(group_tag.is_some(), length >= STATUS_MESSAGE_WITH_GROUP_TAG_LENGTH);
            if let Some(tag) = group_tag {
                let raw = &rest[STATUS_MESSAGE_LENGTH..STATUS_MESSAGE_WITH_GROUP_TAG_LENGTH];
                assert_eq!(&tag.to_le_bytes()[..], raw);
            }
            check_control(rest, sm, sm.frame_length);
        }
        Frame::Setup(f) => check_control(rest, f, f.frame_length),
        Frame::Nak(f) => check_control(rest, f, f.frame_length),
        Frame::Rttm(f) => check_control(rest, f, f.frame_length),
        Frame::Extension { header, bytes } => {
            // Handed on whole: its frame_length bytes, from the frame's start.
            assert_eq!(bytes.len(), header.frame_length as usize);
            assert!(std::ptr::eq(bytes.as_ptr(), rest.as_ptr()));
            check_control(rest, header, header.frame_length);
        }
        Frame::BehindRetained(f) => check_control(rest, f, f.frame_length),
    }
}

/// A data-like frame's `term_offset` is non-negative, 32-aligned, and its end fits in i32.
fn check_data_like_offsets(term_offset: i32, frame_length: i32) {
    assert!(term_offset >= 0 && term_offset % FRAME_ALIGNMENT as i32 == 0, "bad term_offset {term_offset}");
    assert!(term_offset.checked_add(frame_length).is_some(), "frame end overflows i32");
}

/// A control frame is at least its fixed size, fits the bytes left, and is an exact copy of them.
fn check_control<T: bytemuck::Pod>(rest: &[u8], frame: &T, frame_length: i32) {
    let size = std::mem::size_of::<T>();
    let length = usize::try_from(frame_length).expect("negative control frame_length");
    assert!(length >= size && length <= rest.len(), "control frame_length {length} (size {size})");
    assert_eq!(bytemuck::bytes_of(frame), &rest[..size], "control frame is not a copy of its bytes");
}
